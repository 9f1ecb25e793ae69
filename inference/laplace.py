"""Laplace approximation of a posterior at a point: the inverse Hessian of the potential energy.

Used as a fixed NUTS metric (``fit_nuts(..., metric="laplace")``): for a Gaussian posterior it is
the exact covariance (Bishop 2006, sec. 4.4); on the white-box DiffNEA models it shortens the
NUTS trajectories many times over (docs/measurements.md). :func:`fit_laplace` also uses it as a
posterior by itself, corrected by Pareto-smoothed importance sampling (Vehtari et al. 2024).
"""

from __future__ import annotations

import functools
import time
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import constrain_fn, potential_energy, unconstrain_fn

from inference._common import base_attrs, point_values, raw_key
from inference._validate import check_choice, check_positive_int, fit_inputs
from inference.result import FitResult, build_idata, trace_sites
from models.arguments import held_model, model_argument

HESSIAN_BATCH = 1
"""Hessian columns (Hessian-vector products) computed at once by default: one. Vmapping the
products over columns was 2.4-3x slower on the CPU for models whose kinematics are latent, and
gained milliseconds at most elsewhere (per dense Hessian, 6,250 samples, one core: Furuta
``nokin-diffnea/viscous/weak``, d = 24, 71 ms one at a time against 206 ms eight at a time;
cart-pole ``nokin-diffnea/stribeck/weak``, d = 26, 51 against 121 ms; the identifiable white
box 4-14 ms at any batch; docs/measurements.md)."""


def laplace_inverse_mass(
    bayes_model,
    data,
    point: dict,
    *,
    rtol: float | None = None,
    batch_size: int = HESSIAN_BATCH,
    slices: bool = False,
) -> jax.Array:
    """Inverse Hessian of ``-log p(z, data)`` in NumPyro's unconstrained space at ``point``.

    Args:
        bayes_model: an object with ``.model(data)`` (a NumPyro model).
        data: the model's argument.
        point: ``{latent site: value}`` in constrained space (e.g. an SVI MAP).
        rtol: eigenvalues of the Hessian below ``rtol`` times the largest are raised to it (a
            positive definite result also at saddle points and flat directions). Default
            ``1000 eps`` of the latent dtype (2.2e-13 in float64): the eigenvalues an eigensolver
            resolves. A larger floor misfits weakly identified sites whenever the data pin other
            sites tightly (base parameters with a weak prior: Hessian eigenvalues 12 .. 2.8e12).
        batch_size: Hessian columns computed at once (Hessian-vector products, forward over
            reverse); memory is ``batch_size`` gradients' worth, so networks with thousands of
            weights on long datasets fit in memory (a dense ``jax.hessian`` asked 178 GB there).
        slices: along each eigenvector of the result whose slice of ``-log p`` is far from the
            Gaussian's (the rule of ``fit_laplace``'s slice proposal: fourth-order directions of
            learned placements, where the Hessian holds little more than the prior), use the
            variance of the fitted slice density ``exp(-(a t^2 + b t^4))`` instead of the
            Hessian's (8 d more log-joint evaluations). A NUTS metric as wide as the prior
            along a direction the data confine at fourth order makes the step size shrink by
            the ratio of the two widths.

    Returns:
        (d, d) symmetric positive definite matrix over the unconstrained latent sites flattened
        in NumPyro's order (``ravel_pytree``: sorted site names); non-finite entries when the
        Hessian is not finite at ``point``.
    """
    unconstrained = unconstrain_fn(bayes_model.model, (data,), {}, point)
    flat, unravel = ravel_pytree(unconstrained)
    H = potential_hessian(bayes_model, data, unconstrained, batch_size=batch_size)
    H = np.asarray(H, dtype=np.float64)
    if not np.all(np.isfinite(H)):
        return jnp.full(H.shape, jnp.nan, dtype=flat.dtype)
    cov = floored_inverse(H, flat.dtype, rtol)[0]
    if slices:
        axes, shapes, _ = _slice_shapes(
            bayes_model, data, np.asarray(flat, np.float64), cov, unravel, flat.dtype
        )
        cov = (axes * shapes.variances()[None, :]) @ axes.T
    return jnp.asarray(cov, dtype=flat.dtype)


def _slice_shapes(bayes_model, data, centre, cov, unravel, dtype):
    """``(axes (d, d), SliceProposal, fitted coefficients (d, 2))`` of ``cov``'s eigenvectors
    scaled to its standard deviations (``z = centre + axes @ t``): the fitted shape
    ``exp(-(a t^2 + b t^4))`` on the axes whose rise at ``t = 1`` is more than
    :data:`SLICE_RESHAPE_FACTOR` off the Gaussian's 1/2, the Gaussian on the others."""
    w, V = np.linalg.eigh(0.5 * (cov + cov.T))
    axes = V * np.sqrt(np.maximum(w, 0.0))[None, :]
    rises = _slice_rises(bayes_model, data, centre, axes, unravel, dtype)
    fitted = fit_slice_coefficients(rises, SLICE_POINTS)
    reshaped = reshaped_axes(fitted)
    shapes = SliceProposal.from_coefficients(np.where(reshaped[:, None], fitted, [0.5, 0.0]))
    return axes, shapes, fitted


def reshaped_axes(fitted: np.ndarray) -> np.ndarray:
    """(d,) bool: the axes whose fitted rise ``a + b`` at one Laplace standard deviation
    (``fitted`` (d, 2)) is more than :data:`SLICE_RESHAPE_FACTOR` off the Gaussian's 1/2."""
    rise_at_one = np.asarray(fitted).sum(axis=1)
    return (rise_at_one > 0.5 * SLICE_RESHAPE_FACTOR) | (rise_at_one < 0.5 / SLICE_RESHAPE_FACTOR)


EIGENVALUE_RESOLUTION = 1e3
"""Eigenvalues of a Hessian within this many ``eps`` of its largest (in absolute value) are
roundoff: the eigensolver does not resolve them, nor does a Hessian summed over thousands of
observations (float64: 2.2e-13 of the largest)."""


def floored_inverse(H: np.ndarray, dtype, rtol: float | None) -> tuple[np.ndarray, np.ndarray]:
    """``(inverse, eigenvalues)`` of a finite symmetric Hessian (d, d): the inverse with the
    eigenvalues below ``rtol`` times the largest raised to it (default ``1000 eps`` of ``dtype``,
    :func:`laplace_inverse_mass`), and the eigenvalues before the floor."""
    w, V = np.linalg.eigh(0.5 * (H + H.T))
    if rtol is None:
        rtol = EIGENVALUE_RESOLUTION * float(jnp.finfo(dtype).eps)
    floored = np.maximum(w, rtol * np.abs(w).max())
    return (V / floored[None, :]) @ V.T, w


def potential_hessian(
    bayes_model, data, unconstrained: dict, *, batch_size: int = HESSIAN_BATCH
) -> jax.Array:
    """Hessian (d, d) of ``-log p(z, data)`` at ``unconstrained`` ({latent site: value} in
    NumPyro's unconstrained space), over the sites flattened in ``ravel_pytree`` order.

    d Hessian-vector products (forward over reverse), ``batch_size`` at a time
    (:data:`HESSIAN_BATCH`). Traced once per model structure and data / point shapes, with
    the model's array constants and the data as arguments (``models.arguments``):
    :func:`inference.polish_map` and :func:`laplace_inverse_mass` share the program, and so do
    models that differ only in those constants (a variant's priors, normalisers of other data;
    on the ``nokin-diffnea`` cart-pole its compile is ~20 s, the evaluation milliseconds). Data
    that are not arrays get a program of their own.
    """
    batch_size = max(1, min(batch_size, int(ravel_pytree(unconstrained)[0].shape[0])))
    if shareable(bayes_model, data):
        return _shared_hessian(model_argument(bayes_model), data, unconstrained, batch_size)
    return jax.jit(lambda z: _hessian(bayes_model, data, z, batch_size))(unconstrained)


def shareable(bayes_model, data) -> bool:
    """Whether programs of ``bayes_model`` can be compiled once and shared across calls: the
    model hashes and the data are arrays (traced arguments, the model as a
    ``models.arguments.ModelArgument``)."""
    try:
        hash(held_model(bayes_model))
    except TypeError:
        return False
    return all(isinstance(x, (jax.Array, np.ndarray)) for x in jax.tree.leaves(data))


def hessian_columns(grad, x: jax.Array, batch_size: int) -> jax.Array:
    """Dense Hessian (d, d) of the function whose gradient is ``grad`` at ``x`` (d,): d
    Hessian-vector products (forward over reverse), ``batch_size`` at a time."""

    def column(v):
        return jax.jvp(grad, (x,), (v,))[1]

    basis = jnp.eye(x.shape[0], dtype=x.dtype)
    return jax.lax.map(column, basis, batch_size=min(batch_size, x.shape[0]))


def _hessian(bayes_model, data, unconstrained, batch_size):
    bayes_model = held_model(bayes_model)
    flat, unravel = ravel_pytree(unconstrained)
    grad = jax.grad(lambda x: potential_energy(bayes_model.model, (data,), {}, unravel(x)))
    return hessian_columns(grad, flat, batch_size)


_shared_hessian = functools.partial(jax.jit, static_argnums=3)(_hessian)


def fit_laplace(
    bayes_model,
    data,
    *,
    init,
    key,
    num_samples: int = 1000,
    num_chains: int = 2,
    importance: str = "auto",
    proposal: str = "slices",
    num_predictive: int = 200,
    log_likelihood: bool = True,
    complete: bool = True,
):
    """The Laplace approximation of the posterior at ``init`` as a fit: draws of
    ``N(z*, H^-1)`` in NumPyro's unconstrained space (``z*``: ``init``'s point, ``H``: the Hessian
    of ``-log p(z, data)`` there, :func:`laplace_inverse_mass`), mapped to the sites' supports
    (Bishop 2006, sec. 4.4; MacKay 1992), by default corrected towards the posterior by
    Pareto-smoothed importance sampling where its diagnostic says the correction is reliable.

    Exact for a Gaussian posterior; elsewhere an approximation that is only as good as ``init``
    is a MAP (``fit_svi(..., polish=True)`` checks that) and the posterior is Gaussian there: a
    cheap posterior where NUTS would cost too much (``analysis.cells``: learned kinematics in the
    quick benchmark). With importance weighting each Gaussian draw ``z`` gets the weight
    ``p(z, data) / q(z)``; the weights are Pareto-smoothed and the draws resampled by them
    (systematic resampling: equal weights keep every draw once). The Pareto shape ``k`` of the
    weights says whether that is trustworthy: below ``min(1 - 1 / log10(S), 0.7)`` for ``S``
    draws the corrected draws estimate posterior expectations reliably; above it the Gaussian
    misses posterior mass (a curved or skewed posterior) and the few heavy draws that survive
    are no posterior sample (Vehtari, Simpson, Gelman, Yao, Gabry 2024, sec. 3): there the
    default (``importance="auto"``) keeps the proposal's draws instead. Draws are
    independent, so R-hat and ESS say nothing about this fit: ``k`` and the weights' effective
    sample size do.

    The proposal (``proposal="slices"``, default) keeps the Laplace approximation's axes, the
    eigenvectors of ``H``, and fits each axis's scale and shape to the log joint along it: the
    rise of ``-log p`` at +-t of the Laplace standard deviations (:data:`SLICE_POINTS`, averaged
    over both signs) is fitted by ``a t^2 + b t^4`` (``a, b >= 0``), and an axis whose fitted
    rise at one standard deviation is off the Gaussian's 1/2 by more than
    :data:`SLICE_RESHAPE_FACTOR` is drawn from ``exp(-(a t^2 + b t^4))``: narrower where the
    data constrain a direction only at fourth order (a symmetry that makes the second
    derivative vanish: learned placements of ``nokin-diffnea``, where ``-log p`` rose 1.4e4
    instead of 0.5 at one Laplace standard deviation; docs/measurements.md). The other axes
    keep the Laplace Gaussian. It costs ``2 x 4 x d`` evaluations of the log joint.
    ``proposal="gaussian"``: ``N(z*, H^-1)`` itself. ``proposal="curved"``: the push-forward of
    a standard normal through :class:`inference.curved.CurvedLaplaceMap` (the Laplace axes
    bent onto the ridge to third order, fourth-order tails mapped), whose density is exact
    (the map's Jacobian is known), for posteriors that bend away from the MAP.

    Args:
        bayes_model: the model; data: ``ModelData`` or a ``data.Dataset``.
        init: a ``FitResult`` (its posterior mean; an ensemble's first member) or
            ``{site: value}`` (constrained space).
        key: ``jax.random`` key or int seed.
        num_samples, num_chains: draws are stored as ``num_chains`` x ``num_samples``.
        importance: ``"psis"`` (always resample), ``"none"`` (the proposal's draws as they
            are) or ``"auto"`` (default): the weights and their diagnostics as ``"psis"``, the
            draws resampled only where ``k`` is below its threshold; above it the proposal's
            draws are kept (``laplace["resampled"]`` False; draws where the target has no
            density left out) if the Hessian at ``init`` is positive definite (at a point that
            is no mode the floored covariance is arbitrary: resampled as ``"psis"``). A few
            heavy draws resampled a thousand times are a point, not a posterior, and say less
            about its spread than the proposal does (both are then approximations; the fit is
            not converged). The quick grid's 82 Laplace cells with unreliable weights: mean
            rollout coverage 0.464 resampled, 0.517 with ``"auto"``, held-out NMSE unchanged
            (docs/measurements.md).
        proposal: ``"slices"`` (default), ``"gaussian"`` or ``"curved"`` (above).
        num_predictive, log_likelihood, complete: as :func:`inference.fit_nuts`.

    Returns:
        A ``FitResult`` with ``method="laplace"``; root attribute ``laplace`` holds the smallest
        and largest eigenvalue of ``H`` (a non-positive smallest one: ``init`` is no MAP, the
        floor of :func:`laplace_inverse_mass` made the covariance positive definite) and, with
        ``importance="psis"`` or ``"auto"``, ``pareto_k``, its threshold ``pareto_k_max``,
        ``reliable`` (``k`` below it), the weights' effective sample size ``importance_ess``,
        the number of distinct draws the resampling keeps ``distinct_draws`` and whether the
        draws were resampled ``resampled``; with ``proposal="slices"``,
        ``slice_coefficients`` ((d, 2): the fitted ``a, b`` per axis, the stiffest axis
        first) and ``nonquadratic_axes`` (the axes drawn from their fitted shape).

    Raises:
        ValueError: bad data, sizes or ``importance``; an ``init`` without the model's sites; a
            Hessian that is not finite at ``init``.
    """
    observations, data, summary = fit_inputs(bayes_model, data)
    num_samples = check_positive_int("num_samples", num_samples)
    num_chains = check_positive_int("num_chains", num_chains)
    importance = check_choice("importance", importance, ("psis", "auto", "none"))
    proposal = check_choice("proposal", proposal, ("slices", "gaussian", "curved"))
    key, seed = raw_key(key)
    k_draw, k_pred, k_resample = jax.random.split(key, 3)
    latent, _ = trace_sites(bayes_model, data)
    if isinstance(init, dict):
        point = {k: jnp.asarray(init[k]) for k in latent}
    else:
        point = point_values(init, latent)
    t0 = time.perf_counter()
    unconstrained = unconstrain_fn(bayes_model.model, (data,), {}, point)
    flat, unravel = ravel_pytree(unconstrained)
    H = np.asarray(potential_hessian(bayes_model, data, unconstrained), np.float64)
    if not np.all(np.isfinite(H)):
        raise ValueError("the Hessian of the log joint at init is not finite: no Laplace fit")
    # the Hessian once: its eigenvalues are reported, its floored inverse is the covariance
    cov, eig = floored_inverse(H, flat.dtype, None)
    cov = np.asarray(jnp.asarray(cov, dtype=flat.dtype), np.float64)
    total = num_samples * num_chains
    laplace = {"hessian_eig_min": float(eig.min()), "hessian_eig_max": float(eig.max())}
    centre = np.asarray(flat, np.float64)
    if proposal == "gaussian":
        axes = np.linalg.cholesky(0.5 * (cov + cov.T))
        eps = np.asarray(jax.random.normal(k_draw, (total, flat.shape[0]), jnp.float64))
        log_q = -0.5 * np.sum(eps**2, axis=1)
    elif proposal == "curved":
        from inference.curved import fit_curved_map

        curved, laplace["curved_map"] = fit_curved_map(bayes_model, data, point, hessian=H)
        laplace["nonquadratic_axes"] = len(laplace["curved_map"].get("quartic", []))
        s = jax.random.normal(k_draw, (total, flat.shape[0]), flat.dtype)
        z, log_jac = jax.jit(jax.vmap(curved.forward))(s)
        # q(z) = N(s) / |dz/ds|, up to the constant log |det P|
        log_q = -0.5 * np.sum(np.asarray(s, np.float64) ** 2, axis=1) - np.asarray(log_jac)
    else:
        axes, slices, fitted = _slice_shapes(bayes_model, data, centre, cov, unravel, flat.dtype)
        eps = slices.sample(k_draw, total)
        log_q = slices.log_density(eps)
        laplace.update(
            slice_coefficients=fitted.tolist(),
            nonquadratic_axes=int(np.any(slices.coefficients != [0.5, 0.0], axis=1).sum()),
        )
    if proposal != "curved":
        z = jnp.asarray(centre[None] + eps @ axes.T, flat.dtype)
    if importance != "none":
        # log p(z, data) - log q(z) up to a constant
        energy = _potential_energies(bayes_model, data, z, unravel)
        log_w = -np.asarray(energy, np.float64) - log_q
        index, weights = psis_resample(log_w, k_resample)
        # the proposal's draws stand in only for a Laplace approximation at a mode: at a point
        # with an indefinite Hessian the floored covariance is arbitrary
        resampled = importance == "psis" or weights["reliable"] or laplace["hessian_eig_min"] <= 0
        if not resampled:  # the proposal's draws, less those the target gives no density
            index = _keep_finite(log_w)
        z = z[index]
        laplace.update(weights, resampled=resampled)
    draws = jax.jit(
        jax.vmap(lambda v, d: constrain_fn(bayes_model.model, (d,), {}, unravel(v)), (0, None))
    )(z, data)
    samples = {
        k: np.asarray(draws[k]).reshape(num_chains, num_samples, *np.shape(draws[k])[1:])
        for k in latent
    }
    wall_s = time.perf_counter() - t0
    attrs = base_attrs(bayes_model, observations, method="laplace", seed=seed, summary=summary)
    attrs.update(
        settings={
            "num_samples": num_samples,
            "num_chains": num_chains,
            "importance": importance,
            "proposal": proposal,
        },
        timing={"wall_s": wall_s},
        laplace=laplace,
    )
    tree = build_idata(
        bayes_model,
        observations,
        samples,
        key=k_pred,
        num_predictive=num_predictive,
        compute_log_likelihood=log_likelihood,
        attrs=attrs,
        complete=complete,
    )
    return FitResult(idata=tree, variant=attrs["variant"], system=attrs["system"], method="laplace")


SLICE_POINTS = np.array([2.0, 0.7, 0.25, 0.08])
"""Distances along each Laplace axis, in its standard deviations, at which ``fit_laplace``'s
slice proposal measures the rise of ``-log p`` (from the Gaussian's tails to well inside the
core, where a fourth-order direction with a rise 1e4 times the Gaussian's at one standard
deviation is still resolved)."""

SLICE_RESHAPE_FACTOR = 4.0
"""An axis of the slice proposal takes its fitted shape only where its rise at one Laplace
standard deviation is more than this factor above or below the Gaussian's 1/2. A milder
departure along a slice through the mode does not say that the posterior's marginal is
narrower (curved ridges widen the marginal): shaping every axis raised the Pareto k of
cart-pole uniform ``nokin-diffnea/viscous/informative`` from 0.47-0.59 (Gaussian) to 0.79-1.1
(one axis with a rise of 0.8)."""

_SLICE_RISE_MAX = 40.0  # a slice's support: where a t^2 + b t^4 <= 40 (e^-40 of its peak)
_SLICE_GRID = 2049


def _slice_rises(bayes_model, data, centre, axes, unravel, dtype) -> np.ndarray:
    """Rise of ``-log p`` (d, G) from ``centre`` (d,) at ``+-t axes[:, i]`` for ``t`` in
    :data:`SLICE_POINTS`, averaged over the two signs (a linear term, e.g. a MAP that is not
    exactly stationary, cancels); non-finite where either side is."""
    d, G = axes.shape[1], SLICE_POINTS.size
    offsets = axes.T[:, None, None, :] * (
        SLICE_POINTS[None, :, None, None] * np.array([1.0, -1.0])[None, None, :, None]
    )
    points = np.concatenate([centre[None], (centre + offsets).reshape(-1, d)])
    energy = np.asarray(
        _potential_energies(bayes_model, data, jnp.asarray(points, dtype), unravel), np.float64
    )
    return energy[1:].reshape(d, G, 2).mean(axis=2) - energy[0]


def fit_slice_coefficients(rises: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``(a, b)`` per row (d, 2), ``a, b >= 0``, of ``rise(t) ~ a t^2 + b t^4`` fitted to
    ``rises`` (d, G) at ``t`` (G,) by non-negative least squares on the relative error; rows
    with fewer than two finite positive rises (or no positive fit) get the Gaussian's
    ``(1/2, 0)``, a ``b`` below ``1e-6 a`` is 0, and ``a + b`` (the rise at ``t = 1``) is at
    least 1/18 (an axis at most three times the Laplace standard deviation wide)."""
    from scipy.optimize import nnls

    rises = np.asarray(rises, np.float64)
    t = np.asarray(t, np.float64)
    out = np.tile([0.5, 0.0], (rises.shape[0], 1))
    for i, r in enumerate(rises):
        ok = np.isfinite(r) & (r > 0)
        if ok.sum() < 2:
            continue
        X = np.stack([t[ok] ** 2, t[ok] ** 4], axis=1) / r[ok, None]
        a, b = nnls(X, np.ones(int(ok.sum())))[0]
        if a + b <= 0:
            continue
        b = 0.0 if b < 1e-6 * a else b
        scale = max(1.0, (1.0 / 18.0) / (a + b))
        out[i] = (a * scale, b * scale)
    return out


class SliceProposal(NamedTuple):
    """Independent axes with densities ``exp(-(a t^2 + b t^4))``: Gaussian axes (``b = 0``)
    drawn exactly, the others by inverse transform on a grid of ``_SLICE_GRID`` points over
    ``a t^2 + b t^4 <= 40`` (the density of the draws is piecewise constant on the grid, and
    :meth:`log_density` is that density, so importance weights are exact)."""

    coefficients: np.ndarray  # (d, 2)
    grid: np.ndarray  # (d, n): support points of the non-Gaussian axes (rows of others unused)
    cdf: np.ndarray  # (d, n)

    @classmethod
    def from_coefficients(cls, coefficients: np.ndarray) -> SliceProposal:
        coefficients = np.asarray(coefficients, np.float64)
        a, b = coefficients[:, 0], coefficients[:, 1]
        quartic = b > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            half = np.where(
                quartic,
                np.sqrt((-a + np.sqrt(a * a + 4 * b * _SLICE_RISE_MAX)) / (2 * b)),
                np.sqrt(_SLICE_RISE_MAX / np.maximum(a, 1e-300)),
            )
        grid = np.linspace(-half, half, _SLICE_GRID, axis=1)
        density = np.exp(-(a[:, None] * grid**2 + b[:, None] * grid**4))
        mass = 0.5 * (density[:, 1:] + density[:, :-1]) * np.diff(grid, axis=1)
        cdf = np.concatenate([np.zeros((len(a), 1)), np.cumsum(mass, axis=1)], axis=1)
        return cls(coefficients, grid, cdf / cdf[:, -1:])

    def sample(self, key, size: int) -> np.ndarray:
        """``size`` draws (size, d)."""
        k_normal, k_uniform = jax.random.split(key)
        d = self.coefficients.shape[0]
        t = np.asarray(jax.random.normal(k_normal, (size, d), jnp.float64))
        t = t / np.sqrt(2.0 * np.maximum(self.coefficients[:, 0], 1e-300))
        u = np.asarray(jax.random.uniform(k_uniform, (size, d), jnp.float64))
        for i in np.flatnonzero(self.coefficients[:, 1] > 0):
            t[:, i] = np.interp(u[:, i], self.cdf[i], self.grid[i])
        return t

    def variances(self) -> np.ndarray:
        """Variance (d,) of each axis's density: ``1 / (2 a)`` where Gaussian, else that of
        the piecewise-constant density on the grid (exact for the draws)."""
        a = self.coefficients[:, 0]
        out = 1.0 / (2.0 * np.maximum(a, 1e-300))
        for i in np.flatnonzero(self.coefficients[:, 1] > 0):
            g, F = self.grid[i], self.cdf[i]
            mass = np.diff(F)  # uniform on each cell: E t^2 = (g0^2 + g0 g1 + g1^2) / 3
            second = (g[:-1] ** 2 + g[:-1] * g[1:] + g[1:] ** 2) / 3.0
            mean = np.sum(mass * 0.5 * (g[:-1] + g[1:]))
            out[i] = float(np.sum(mass * second) - mean**2)
        return out

    def log_density(self, t: np.ndarray) -> np.ndarray:
        """Log density (size,) of draws ``t`` (size, d); ``-inf`` outside a support."""
        a, b = self.coefficients[:, 0], self.coefficients[:, 1]
        gaussian = b == 0
        norm = 0.5 * np.log(np.where(gaussian, a, 1.0) / np.pi)
        out = np.sum(np.where(gaussian, -a * t**2 + norm, 0.0), axis=1)
        for i in np.flatnonzero(~gaussian):
            g, F = self.grid[i], self.cdf[i]
            j = np.searchsorted(g, t[:, i], side="right") - 1
            inside = (j >= 0) & (j < g.size - 1)
            j = np.clip(j, 0, g.size - 2)
            cell = (F[j + 1] - F[j]) / (g[j + 1] - g[j])
            with np.errstate(divide="ignore"):
                out = out + np.where(inside, np.log(cell), -np.inf)
        return out


def _potential_energies(bayes_model, data, z: jax.Array, unravel, *, batch_size: int = 16):
    """``-log p(z_i, data)`` (S,) at unconstrained flat points ``z`` (S, d) (``unravel``: flat
    to sites, as ``ravel_pytree`` gives it), ``batch_size`` at a time (memory: ``batch_size``
    likelihood evaluations over the data); +inf where not finite. Traced once per model
    structure, as :func:`potential_hessian`."""
    batch_size = min(batch_size, z.shape[0])
    if shareable(bayes_model, data):
        try:
            hash(unravel)  # ravel_pytree's unravel compares by value
        except TypeError:
            pass
        else:
            return _shared_energies(model_argument(bayes_model), data, z, unravel, batch_size)
    return jax.jit(lambda zz, d: _energies(bayes_model, d, zz, unravel, batch_size))(z, data)


def _energies(bayes_model, data, z, unravel, batch_size):
    model = held_model(bayes_model).model

    def one(v):
        u = potential_energy(model, (data,), {}, unravel(v))
        return jnp.where(jnp.isfinite(u), u, jnp.inf)

    return jax.lax.map(one, z, batch_size=batch_size)


_shared_energies = jax.jit(_energies, static_argnums=(3, 4))


def _keep_finite(log_weights: np.ndarray) -> np.ndarray:
    """(S,) indices that keep every draw with a finite log weight equally often (systematic
    resampling of equal weights on them: each once when all are finite)."""
    finite = np.flatnonzero(np.isfinite(log_weights))
    S = log_weights.shape[0]
    if finite.size == 0:
        return np.arange(S)
    return finite[(np.arange(S) * finite.size) // S]


def psis_resample(log_weights: np.ndarray, key) -> tuple[np.ndarray, dict]:
    """Pareto-smoothed importance resampling (Vehtari et al. 2024): ``(index, report)`` with
    ``index`` (S,) the draws kept by systematic resampling of the smoothed weights of
    ``log_weights`` (S,) (``-inf``: zero weight) and ``report`` ``{"pareto_k", "pareto_k_max",
    "reliable", "importance_ess", "distinct_draws"}``; ``pareto_k`` is ``inf`` when fewer than
    two weights are positive, ``-inf`` when all are equal to 1e-6 (nothing to smooth), NaN
    when the tail fit fails (then not ``reliable``)."""
    from arviz_stats.base import array_stats  # only this correction needs it

    lw = np.asarray(log_weights, np.float64)
    S = lw.shape[0]
    k_max = min(1.0 - 1.0 / np.log10(S), 0.7) if S > 10 else 0.0
    finite = np.isfinite(lw)
    if finite.sum() < 2:
        smoothed, k = np.where(finite, 0.0, -np.inf), np.inf
    elif np.ptp(lw[finite]) < 1e-6:  # equal weights (a Gaussian posterior): no tail to fit
        smoothed, k = np.where(finite, 0.0, -np.inf), -np.inf
    else:
        smoothed = np.full(S, -np.inf)
        # arviz_stats smooths the right tail of the negated argument (its LOO convention)
        smoothed[finite], k = array_stats.psislw(-(lw[finite] - lw[finite].max()))
        k = float(k)
    w = np.exp(smoothed - smoothed[finite].max()) if finite.any() else np.ones(S)
    w = w / w.sum()
    u = (float(jax.random.uniform(key, (), jnp.float64)) + np.arange(S)) / S
    index = np.minimum(np.searchsorted(np.cumsum(w), u, side="left"), S - 1)
    return index, {
        "pareto_k": k,
        "pareto_k_max": float(k_max),
        "reliable": bool(k < k_max),
        "importance_ess": float(1.0 / np.sum(w**2)),
        "distinct_draws": int(np.unique(index).size),
    }
