"""A MAP that is a MAP: damped Newton on the unconstrained latent coordinates, with a checked end.

SVI with a constant learning rate stops where the loss looks flat, which need not be a stationary
point (issue 10: gradient norm 1.2e3 and two negative Hessian eigenvalues after 3,000 Adam steps
that reported "converged"). :func:`polish_map` takes any starting point and runs Newton steps
``x <- x - V diag(1 / (|w| (1 + lambda))) V^T g`` (``H = V diag(w) V^T``) on the potential
energy ``-log p(x, data)`` in NumPyro's unconstrained space: Newton where the Hessian is positive
definite, the saddle-free step (|eigenvalues|; Dauphin et al. 2014) where it is not, and a damping
``lambda`` raised until the step lowers the energy and lowered after a good step. The damping is
relative to each eigenvalue, so flat and stiff directions converge together (an additive
Levenberg-Marquardt shift scaled to the largest eigenvalue took ~100 steps on posteriors with
eigenvalues from 1 to 1e9). An accepted step is then extended while the energy keeps falling:
doubled, and moved along the directions of negative curvature (:func:`_extend_steps`), which a
quadratic model cannot see past. It reports the gradient's
norm and the Hessian's eigenvalues at the end, and calls the point a MAP only when the gradient
norm is below ``gtol`` (relative to the Hessian's scale: the Newton decrement
``sqrt(g^T H^-1 g)``, the expected change of the energy's square root, is below ``gtol``) and the
Hessian is positive definite.

The Hessian is dense (d x d from d Hessian-vector products), so this is meant for the identifiable
coordinates (``models.identifiable``: tens of values) and other small models.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import constrain_fn, potential_energy, unconstrain_fn

from inference.laplace import (
    EIGENVALUE_RESOLUTION,
    HESSIAN_BATCH,
    hessian_columns,
    potential_hessian,
    shareable,
)
from models.arguments import held_model, model_argument


class MapReport(NamedTuple):
    """The end of a :func:`polish_map` run.

    Fields:
        iterations: Newton steps taken.
        energy: potential energy ``-log p(x, data)`` at the end.
        grad_norm: Euclidean norm of its gradient (unconstrained coordinates).
        newton_decrement: ``sqrt(g^T H^-1 g)`` (inf when H is not positive definite).
        min_eigenvalue, max_eigenvalue: extreme eigenvalues of the Hessian.
        converged: ``newton_decrement <= gtol`` and the Hessian positive definite.
        unresolved: eigenvalues within the Hessian's roundoff (``|w| <=``
            :data:`~inference.laplace.EIGENVALUE_RESOLUTION` ``eps max |w|``): their signs, and
            the curvature along their directions, are not known at this precision in these
            coordinates (a posterior the data pin to 1e-8 of its prior along some directions
            and not at all along others; the message says so).
        message: one line for people.
    """

    iterations: int
    energy: float
    grad_norm: float
    newton_decrement: float
    min_eigenvalue: float
    max_eigenvalue: float
    converged: bool
    unresolved: int
    message: str


def _check_options(max_iter: int, gtol: float) -> None:
    if max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    if not gtol > 0:
        raise ValueError(f"gtol must be > 0, got {gtol}")


def _tolerance(gtol: float, eps: float, energy):
    """``gtol`` raised to the energy's float resolution ``sqrt(200 eps |energy|)``."""
    return np.maximum(gtol, np.sqrt(200.0 * eps * np.maximum(np.abs(energy), 1.0)))


def _damped_step(w, V, Vg, damping):
    """``-V diag(1 / (|w| (1 + damping))) V^T g`` (module docstring); ``Vg = V^T g``.

    Shapes: ``w`` (..., d), ``V`` (..., d, d), ``Vg`` (..., d), ``damping`` (...).
    """
    scale = np.maximum(np.abs(w).max(-1, keepdims=True), 1e-300)
    shifted = np.maximum(np.abs(w), 1e-12 * scale) * (1.0 + np.asarray(damping)[..., None])
    return -np.einsum("...ij,...j->...i", V, Vg / shifted)


NEGATIVE_CURVATURE_DIRECTIONS = 3
"""The most negative-curvature eigenvectors that :func:`_extend_steps` searches along."""

_DOUBLINGS = 30  # most doublings of one extension: 2^30 times its first length


def _extend_steps(energy, x, step, e_step, w, V, g, active):
    """Longer steps where the energy keeps falling beyond the accepted damped step.

    The damped step trusts the quadratic model, which in a curved valley, or along a direction
    of negative curvature, stops far short of where the energy stops falling (a Furuta
    ``nokin-diffnea`` grid cell: 100 damped steps ended 920 nats above where 100 extended ones
    did; docs/measurements.md). So the accepted step is doubled while that lowers the energy,
    then moved downhill along each of the :data:`NEGATIVE_CURVATURE_DIRECTIONS` most negative
    eigenvectors of ``H`` by a length doubled from ``max(|g.v| / |w|, 1e-3 / sqrt(|w|))`` while
    that lowers it (negative-curvature directions: More & Sorensen 1979; Nocedal & Wright 2006,
    sec. 4.3). Every accepted change lowers the energy, so the descent stays monotone.

    Shapes: ``x``, ``step``, ``g`` (R, d); ``e_step`` (R,) the energy at ``x + step``; ``w``
    (R, d) ascending eigenvalues and ``V`` (R, d, d) eigenvectors of ``H``; ``active`` (R,) the
    problems still polished (``step`` 0 where no damped step was accepted: at a saddle the
    negative-curvature search is the way down); ``energy`` maps (R, d) points to (R,) energies.
    Returns the new ``(step, e_step)``.
    """
    step, e_step = step.copy(), e_step.copy()

    def search(base, direction, length, active):
        nonlocal step, e_step
        for _ in range(_DOUBLINGS):
            if not active.any():
                break
            trial = base + length[:, None] * direction
            e_try = np.asarray(energy(x + trial), np.float64)
            ok = active & np.isfinite(e_try) & (e_try < e_step)
            step[ok], e_step[ok] = trial[ok], e_try[ok]
            base, length, active = np.where(ok[:, None], trial, base), 2.0 * length, ok

    search(step.copy(), step.copy(), np.ones(len(x)), active.copy())  # x + 2 step, + 4 step, ..
    for j in range(min(NEGATIVE_CURVATURE_DIRECTIONS, w.shape[1])):
        curvature = np.minimum(w[:, j], 0.0)
        down = active & (curvature < 0)
        if not down.any():
            break
        v = V[:, :, j]
        gv = np.einsum("ri,ri->r", g, v)
        v = np.where((gv > 0)[:, None], -v, v)  # downhill (either sign at a saddle)
        with np.errstate(divide="ignore", invalid="ignore"):
            length = np.where(
                down, np.maximum(np.abs(gv) / -curvature, 1e-3 / np.sqrt(-curvature)), 0.0
            )
        search(step.copy(), v, length, down)
    return step, e_step


def _end_report(H, g, energy: float, iterations: int, gtol: float, eps: float) -> MapReport:
    """The :class:`MapReport` of a point with Hessian ``H`` (d, d) and gradient ``g`` (d,)."""
    w = np.linalg.eigvalsh(0.5 * (H + H.T))
    pd = bool(w[0] > 0)
    decrement = float(np.sqrt(max(g @ np.linalg.solve(H, g), 0.0))) if pd else float("inf")
    tol = float(_tolerance(gtol, eps, energy))
    converged = pd and decrement <= tol
    grad_norm = float(np.linalg.norm(g))
    resolution = EIGENVALUE_RESOLUTION * eps * float(np.abs(w).max())
    unresolved = int(np.sum(np.abs(w) <= resolution))
    roundoff = (
        f"; {unresolved} of {w.size} eigenvalues within the Hessian's roundoff (|w| <= "
        f"{resolution:.3g}): their signs are not known at this precision in these coordinates"
        if unresolved
        else ""
    )
    if converged:
        message = (
            f"MAP: Newton decrement {decrement:.2e} <= {tol:.3g}, gradient norm {grad_norm:.2e}, "
            f"Hessian positive definite (eigenvalues {w[0]:.3g} .. {w[-1]:.3g}) after "
            f"{iterations} steps{roundoff}"
        )
    else:
        message = (
            f"not a MAP: Newton decrement {decrement:.2e} (tolerance {tol:.3g}), gradient norm "
            f"{grad_norm:.2e}, Hessian eigenvalues {w[0]:.3g} .. {w[-1]:.3g} after {iterations} "
            f"steps{roundoff}"
        )
    return MapReport(
        iterations=int(iterations),
        energy=float(energy),
        grad_norm=grad_norm,
        newton_decrement=decrement,
        min_eigenvalue=float(w[0]),
        max_eigenvalue=float(w[-1]),
        converged=converged,
        unresolved=unresolved,
        message=message,
    )


def _energy(bayes_model, x, data, template: dict, held: dict):
    """``-log p`` at the flat unconstrained ``x`` of the sites in ``template`` (their values
    give only the shapes of ``ravel_pytree``'s order), the other sites at ``held``."""
    return potential_energy(
        held_model(bayes_model).model, (data,), {}, {**held, **ravel_pytree(template)[1](x)}
    )


def _batched(fn):
    """``fn(bayes_model, x, data, template, held)`` vmapped over the leading axis of ``x``,
    ``data`` and ``held``."""

    def batched(bayes_model, x, data, template, held):
        return jax.vmap(lambda xi, d, h: fn(bayes_model, xi, d, template, h))(x, data, held)

    return batched


def _batched_hessian(bayes_model, x, data, template, held, batch_size: int):
    """The energy's Hessian (R, d, d) per replicate (:func:`hessian_columns`)."""

    def one(xi, d, h):
        grad = jax.grad(lambda y: _energy(bayes_model, y, d, template, h))
        return hessian_columns(grad, xi, batch_size)

    return jax.vmap(one)(x, data, held)


_value_and_grad = jax.value_and_grad(_energy, argnums=1)
# name: (function of (bayes_model, x, data, template, held[, batch_size]), static arguments)
_PROGRAMS = {
    "energy": (_energy, ()),
    "value_and_grad": (_value_and_grad, ()),
    "batched_energy": (_batched(_energy), ()),
    "batched_value_and_grad": (_batched(_value_and_grad), ()),
    "batched_hessian": (_batched_hessian, (5,)),
}
# Traced once per model structure and shapes and shared by every call (the model's array
# constants, the data, the point's template and the held sites are arguments): polishing the
# same model again (fit_svi's polish, restarts, an ensemble's noise sites), or a model that
# differs only in those constants (another prior, another dataset's normalisers), traces and
# compiles nothing new
_SHARED = {k: jax.jit(f, static_argnums=a) for k, (f, a) in _PROGRAMS.items()}


def _programs(bayes_model, data) -> dict:
    """The polish's jitted programs for ``bayes_model``, called without it: the shared ones, or
    (data that are not arrays) programs of this call's own."""
    if shareable(bayes_model, data):
        argument = model_argument(bayes_model)  # itself if already one
        return {k: functools.partial(f, argument) for k, f in _SHARED.items()}
    return {
        k: jax.jit(functools.partial(f, bayes_model), static_argnums=tuple(i - 1 for i in a))
        for k, (f, a) in _PROGRAMS.items()
    }


def polish_map(
    bayes_model,
    data,
    point: dict,
    *,
    max_iter: int = 100,
    gtol: float = 1e-6,
    batch_size: int = HESSIAN_BATCH,
) -> tuple[dict, MapReport]:
    """Damped Newton from ``point`` to a stationary point of the log joint (module docstring).

    Args:
        bayes_model: an object with ``model(data)`` (a NumPyro model).
        data: the model's argument.
        point: ``{latent site: value}`` in constrained space (e.g. ``model.init_sample()`` or an
            SVI MAP).
        max_iter: most Newton steps.
        gtol: tolerance on the Newton decrement (the energy is within ``gtol^2 / 2`` of the
            quadratic model's minimum). It is raised to the energy's floating-point resolution,
            ``sqrt(200 eps |energy|)``, where no step can be told from roundoff (5,000 Furuta
            samples in float64: 2.6e-5, i.e. the point is within 3e-5 posterior standard
            deviations of the mode).
        batch_size: Hessian columns computed at once.

    Returns:
        ``(point, report)``: the polished ``{site: value}`` (constrained space) and a
        :class:`MapReport`.

    Raises:
        ValueError: ``max_iter < 1`` or ``gtol <= 0``.
    """
    _check_options(max_iter, gtol)
    unconstrained = unconstrain_fn(bayes_model.model, (data,), {}, point)
    x0, unravel = ravel_pytree(unconstrained)

    argument = model_argument(bayes_model)  # walked once for every program and Newton step
    programs = _programs(argument, data)

    def value_and_grad(x):
        return programs["value_and_grad"](x, data, unconstrained, {})

    def f_energy(x):
        return programs["energy"](x, data, unconstrained, {})

    def hessian(x):  # the program laplace_inverse_mass compiles too: compiled once for both
        return potential_hessian(argument, data, unravel(x), batch_size=batch_size)

    x = np.asarray(x0, np.float64)
    dtype = x0.dtype
    damping = 1e-3
    e, g = value_and_grad(jnp.asarray(x, dtype))
    e, g = float(e), np.asarray(g, np.float64)
    if not np.isfinite(e):
        raise ValueError("the log joint is not finite at the starting point")
    eps = float(jnp.finfo(dtype).eps)
    iterations = 0
    decrement = np.inf
    while iterations < max_iter:
        iterations += 1
        H = np.asarray(hessian(jnp.asarray(x, dtype)), np.float64)
        H = 0.5 * (H + H.T)
        w, V = np.linalg.eigh(H)
        if w[0] > 0:
            decrement = float(np.sqrt(g @ (V @ ((V.T @ g) / w))))
            if decrement <= _tolerance(gtol, eps, e):
                break
        accepted = False
        for _ in range(60):
            step = _damped_step(w, V, V.T @ g, damping)
            e_new = float(f_energy(jnp.asarray(x + step, dtype)))
            if np.isfinite(e_new) and e_new < e:
                accepted = True
                break
            damping *= 10.0
        if not accepted:  # no damped step lowers the energy: at a saddle, its way down
            step, e_new = np.zeros_like(x), e
        step, e_step = _extend_steps(
            lambda xs: [f_energy(jnp.asarray(xs[0], dtype))],
            x[None],
            step[None],
            np.array([e_new]),
            w[None],
            V[None],
            g[None],
            np.array([True]),
        )
        if not e_step[0] < e:
            break
        x = x + step[0]
        damping = max(damping / 10.0, 1e-12) if accepted else 1e-3
        e, g = value_and_grad(jnp.asarray(x, dtype))
        e, g = float(e), np.asarray(g, np.float64)
    H = np.asarray(hessian(jnp.asarray(x, dtype)), np.float64)
    report = _end_report(H, g, e, iterations, gtol, eps)
    out = constrain_fn(bayes_model.model, (data,), {}, unravel(jnp.asarray(x, dtype)))
    return {k: out[k] for k in point}, report


def polish_map_batched(
    bayes_model,
    data,
    points: dict,
    *,
    sites=None,
    max_iter: int = 100,
    gtol: float = 1e-6,
    batch_size: int = HESSIAN_BATCH,
) -> tuple[dict, list[MapReport]]:
    """:func:`polish_map` for ``R`` independent problems at once (e.g. SBC replicates).

    ``data`` and ``points`` carry a leading replicate axis (R, ...); the energies, gradients and
    Hessians of all replicates are one vmapped, jitted call each, while every replicate keeps its
    own damping, step acceptance and stopping test (a joint Newton over the stacked problem
    shares one damping, so one hard replicate stalls all of them).

    Args:
        sites: latent sites to move (default: all); the others stay at their values in
            ``points`` (a conditional MAP, e.g. the noise scales given a network's weights). The
            reports' gradients and Hessians are those of the moved sites.

    Returns:
        ``(points, reports)``: polished ``{site: (R, ...)}`` (constrained space) and one
        :class:`MapReport` per replicate.
    """
    _check_options(max_iter, gtol)
    model = bayes_model.model
    unconstrained = jax.vmap(lambda p, d: unconstrain_fn(model, (d,), {}, p))(points, data)
    moving = list(points) if sites is None else list(sites)
    missing = sorted(set(moving) - set(points))
    if missing:
        raise ValueError(f"sites {missing} are not in the points (latent sites: {sorted(points)})")
    held = {k: v for k, v in unconstrained.items() if k not in moving}
    first = {k: unconstrained[k][0] for k in moving}
    _, unravel = ravel_pytree(first)
    x0 = jax.vmap(lambda u: ravel_pytree(u)[0])({k: unconstrained[k] for k in moving})

    programs = _programs(bayes_model, data)
    batch_size = max(1, min(batch_size, int(x0.shape[1])))

    def value_and_grad(x, d, h):
        return programs["batched_value_and_grad"](x, d, first, h)

    def f_energy(x, d, h):
        return programs["batched_energy"](x, d, first, h)

    def hessian(x, d, h):
        return programs["batched_hessian"](x, d, first, h, batch_size)
    dtype = x0.dtype
    eps = float(jnp.finfo(dtype).eps)
    x = np.array(x0, np.float64)
    R = x.shape[0]
    e, g = value_and_grad(jnp.asarray(x, dtype), data, held)
    e, g = np.array(e, np.float64), np.array(g, np.float64)
    bad = np.flatnonzero(~np.isfinite(e)).tolist()
    if bad:
        raise ValueError(f"the log joint is not finite at the start of replicates {bad}")
    damping = np.full(R, 1e-3)
    active = np.ones(R, bool)
    iterations = np.zeros(R, int)
    for _ in range(max_iter):
        if not active.any():
            break
        iterations[active] += 1
        H = np.asarray(hessian(jnp.asarray(x, dtype), data, held), np.float64)
        w, V = np.linalg.eigh(0.5 * (H + np.swapaxes(H, 1, 2)))
        Vg = np.einsum("rij,ri->rj", V, g)
        with np.errstate(divide="ignore", invalid="ignore"):
            decrement = np.sqrt(np.maximum(np.sum(Vg**2 / w, 1), 0.0))
        done = (w[:, 0] > 0) & (decrement <= _tolerance(gtol, eps, e))
        active &= ~done
        pending = active.copy()
        step = np.zeros_like(x)
        e_new_accepted = np.full(R, np.inf)
        for _ in range(60):
            if not pending.any():
                break
            trial = _damped_step(w, V, Vg, damping)
            e_new = np.asarray(f_energy(jnp.asarray(x + trial, dtype), data, held), np.float64)
            ok = pending & np.isfinite(e_new) & (e_new < e)
            step[ok], e_new_accepted[ok] = trial[ok], e_new[ok]
            pending &= ~ok
            damping[pending] *= 10.0
        accepted = active & ~pending
        step, e_step = _extend_steps(
            lambda xs: f_energy(jnp.asarray(xs, dtype), data, held),
            x,
            step,  # 0 where no damped step lowered the energy: at a saddle, its way down
            np.where(accepted, e_new_accepted, e),
            w,
            V,
            g,
            active,
        )
        moved = active & (e_step < e)
        stalled = active & ~moved  # nothing lowered the energy: stop there
        x[moved] += step[moved]
        damping[moved & accepted] = np.maximum(damping[moved & accepted] / 10.0, 1e-12)
        damping[moved & ~accepted] = 1e-3
        active &= ~stalled
        e_all, g_all = value_and_grad(jnp.asarray(x, dtype), data, held)
        e[moved] = np.asarray(e_all, np.float64)[moved]
        g[moved] = np.asarray(g_all, np.float64)[moved]
    H = np.asarray(hessian(jnp.asarray(x, dtype), data, held), np.float64)
    reports = [_end_report(H[r], g[r], e[r], iterations[r], gtol, eps) for r in range(R)]
    out = jax.vmap(lambda u, d, h: constrain_fn(model, (d,), {}, {**h, **unravel(u)}))(
        jnp.asarray(x, dtype), data, held
    )
    return {k: out[k] for k in points}, reports
