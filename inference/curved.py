"""A curved Laplace map: NUTS coordinates for posteriors whose ridge bends away from the MAP.

Along a few Hessian axes of the learned placements of ``nokin-diffnea`` the log joint rises as
``t^4`` through the MAP (``inference.laplace``'s slice rule), and the posterior there is a
banana: other Laplace coordinates follow the square of that axis, or the product of two axes
(measured on the Furuta, docs/inference-geometry.md). A fixed metric cannot follow a bend;
NUTS then takes small steps and diverges in the tails.

The map from NUTS coordinates ``s`` (d,) to NumPyro's unconstrained latent vector ``z``:

1. Laplace axes: ``z = z* + P t`` with ``P P^T`` the inverse Hessian at the MAP ``z*`` (its
   eigenvectors scaled to their standard deviations). In ``t`` the potential is
   ``V(t) = V(0) + |t|^2 / 2 + T(t, t, t) / 6 + O(t^4)``, ``T`` its third derivatives.
2. A triangular quadratic map ``t_j = u_j - sum_{k <= l} A_jkl u_k u_l`` over the *bending*
   axes ``k, l`` (below), each ``t_j`` a function of ``u_j`` and of bending axes earlier than
   ``j`` in an order: the Jacobian is triangular with a unit diagonal (volume-preserving).
   Substituting it into ``|t|^2 / 2`` gives ``-u_j A_jkl u_k u_l``, which cancels the cubic
   term ``u_j u_k u_l`` of ``V`` where ``A_jkl = T_jkl`` (``k < l``, ``j`` not among them) and
   ``A_jkk = T_jkk / 2``: to third order the map follows the ridge (for a banana
   ``x ~ y^2`` it bends the x axis onto it). Each cubic term goes to the latest of its axes in
   the order; a term ``u_a u_m^2`` with ``m`` after ``a`` cannot (the order is chosen greedily
   to keep the strongest), nor can ``u_q^3``. ``T_jkk`` comes from two gradients along axis
   ``k`` (``g(+-tau e_k)``), ``T_jkl`` from four along a pair; ``tau`` is one standard
   deviation of the axis's fitted slice.
3. Tails along the fourth-order axes ``Q`` (slice rule): the rise of the potential along each,
   through the map, is fitted as ``a u^2 + b u^4`` (``inference.laplace.fit_slice_coefficients``)
   and ``u_q = s_q / sqrt(a + sqrt(a^2 + 2 b s_q^2))``, which solves ``a u^2 + b u^4 = s^2 / 2``:
   the fitted rise becomes the standard Gaussian's. Smooth, odd and increasing;
   ``du/ds = sqrt(a + D) / (2 D)``, ``D = sqrt(a^2 + 2 b s^2)``; ``a = 1/2, b = 0`` is the
   identity.

So ``log |dz/ds| = log |det P| + sum_q log du_q/ds_q``, and NUTS samples
``U(s) = -log p(z(s), data) - sum_q log du_q/ds_q``. Where no axis bends the map is the Laplace
metric's whitening and NUTS the same as with ``metric="laplace"``.

Bending axes: the fourth-order axes, and the axes ``k`` along which some coordinate moves by
:data:`BEND_THRESHOLD` of its standard deviations at one slice standard deviation of ``k``
(``|T_jkk| tau_k^2 / 2``), at most :data:`MAX_BENDING_AXES` (the strongest): the pairs' cost
is quadratic in their number, so large models (network weights) stay cheap.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import potential_energy, unconstrain_fn

MIN_CURVE_RISE = 1e-2
"""Smallest ``a`` of a tail map (the rise at one Laplace standard deviation along the mapped
axis): an axis flatter than this is still confined to about ``1 / sqrt(2 a)`` = 7 Laplace
standard deviations per unit of ``s``."""

BEND_THRESHOLD = 0.1
"""An axis bends when some coordinate's ridge moves by this many of its standard deviations at
one slice standard deviation along the axis."""

MAX_BENDING_AXES = 10
"""At most this many bending axes (the strongest bends): ``4 m (m - 1) / 2`` gradients."""


class CurvedLaplaceMap(NamedTuple):
    """The map ``s -> z`` of the module docstring (numpy float64 fields; d latent values, m
    bending axes).

    Fields:
        centre: (d,) the MAP ``z*`` (unconstrained, flattened in ``ravel_pytree`` order).
        axes: (d, d) ``P``: columns the Laplace eigenvectors scaled to their standard deviations.
        bending: (m,) the bending axes, in the map's order.
        quadratic: (d, m, m) ``A``: ``t_j = u_j - sum_kl A[j, k, l] u_bending[k] u_bending[l]``;
            row ``bending[i]`` is zero but for columns before ``i`` (triangular).
        a, b: (d,) the tail maps' coefficients (``1/2, 0`` off the fourth-order axes).
        quartic: (k,) the fourth-order axes.
    """

    centre: np.ndarray
    axes: np.ndarray
    bending: np.ndarray
    quadratic: np.ndarray
    a: np.ndarray
    b: np.ndarray
    quartic: np.ndarray

    def tails(self, s: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(u, sum log du/ds)`` of NUTS coordinates ``s`` (d,)."""
        a, b = (jnp.asarray(x, s.dtype) for x in (self.a, self.b))
        D = jnp.sqrt(a * a + 2.0 * b * s * s)
        u = s / jnp.sqrt(a + D)
        return u, jnp.sum(0.5 * jnp.log(a + D) - jnp.log(2.0 * D))

    def bend(self, u: jax.Array) -> jax.Array:
        """``t`` (d,) of ``u`` (d,): the triangular quadratic map."""
        if self.bending.size == 0:
            return u
        v = u[jnp.asarray(self.bending)]
        return u - jnp.einsum("jkl,k,l->j", jnp.asarray(self.quadratic, u.dtype), v, v)

    def forward(self, s: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(z (d,), log |dz/ds| - log |det P|)`` of NUTS coordinates ``s`` (d,)."""
        u, log_jac = self.tails(s)
        z = jnp.asarray(self.centre, s.dtype) + jnp.asarray(self.axes, s.dtype) @ self.bend(u)
        return z, log_jac

    def inverse(self, z: np.ndarray) -> np.ndarray:
        """NUTS coordinates ``s`` (..., d) of unconstrained points ``z`` (..., d) (numpy)."""
        z = np.asarray(z, np.float64)
        t = np.linalg.solve(self.axes, (z - self.centre).T).T
        u = t.copy()
        v = np.zeros((*t.shape[:-1], self.bending.size))
        for i, j in enumerate(self.bending):  # in order: each needs only the earlier ones
            u[..., j] = t[..., j] + np.einsum("...k,kl,...l->...", v, self.quadratic[j], v)
            v[..., i] = u[..., j]
        rest = np.setdiff1d(np.arange(t.shape[-1]), self.bending)
        u[..., rest] = t[..., rest] + np.einsum("...k,jkl,...l->...j", v, self.quadratic[rest], v)
        return np.sign(u) * np.sqrt(2.0 * (self.a * u * u + self.b * u**4))


def _order(bend: np.ndarray) -> np.ndarray:
    """A greedy order (m,) of axes given ``bend[a, m]`` = |the cubic coefficient of
    ``u_a u_m^2``|, which the map can cancel only with ``m`` before ``a``: repeatedly the axis
    whose bends of the remaining axes outweigh theirs of it."""
    remaining = list(range(bend.shape[0]))
    order = []
    while remaining:
        sub = bend[np.ix_(remaining, remaining)]
        net = sub.sum(axis=0) - sub.sum(axis=1)  # column m: bends m causes; row a: a suffers
        order.append(remaining.pop(int(np.argmax(net))))
    return np.asarray(order, int)


def fit_curved_map(
    bayes_model, data, point: dict, *, hessian: np.ndarray | None = None
) -> tuple[CurvedLaplaceMap, dict]:
    """The :class:`CurvedLaplaceMap` of ``bayes_model``'s posterior at ``point`` (constrained
    ``{latent site: value}``, a MAP): the Laplace axes, the bending and fourth-order axes, the
    quadratic map and the tails (module docstring). Costs the Hessian (d Hessian-vector
    products), ``8 d`` log-joint evaluations for the slices, ``2 d + 2 m (m - 1)`` gradients and
    ``8`` log-joint evaluations per fourth-order axis.

    Returns:
        ``(map, record)``; ``record``: the fourth-order axes with their rise coefficients along
        the straight axis and through the map, the bending axes and the largest quadratic
        coefficient. The axes are NaN when the Hessian is not finite at ``point``.
    """
    from inference.laplace import (
        SLICE_POINTS,
        _potential_energies,
        _slice_shapes,
        fit_slice_coefficients,
        floored_inverse,
        potential_hessian,
        reshaped_axes,
    )

    unconstrained = unconstrain_fn(bayes_model.model, (data,), {}, point)
    flat, unravel = ravel_pytree(unconstrained)
    dtype = flat.dtype
    d = int(flat.size)
    centre = np.asarray(flat, np.float64)
    a, b = np.full(d, 0.5), np.zeros(d)
    empty = np.zeros(0, int)
    if hessian is None:  # the caller's, where it has one (fit_laplace)
        hessian = potential_hessian(bayes_model, data, unconstrained)
    H = np.asarray(hessian, np.float64)
    if not np.all(np.isfinite(H)):
        nan = np.full((d, d), np.nan)
        return CurvedLaplaceMap(centre, nan, empty, np.zeros((d, 0, 0)), a, b, empty), {}
    cov = floored_inverse(H, dtype, None)[0]
    axes, shapes, fitted = _slice_shapes(bayes_model, data, centre, cov, unravel, dtype)
    quartic = np.flatnonzero(reshaped_axes(fitted) & (fitted[:, 1] > 0))
    tau = np.minimum(np.sqrt(shapes.variances()), 1.0)

    P = jnp.asarray(axes, dtype)
    z0 = jnp.asarray(centre, dtype)
    grad_t = jax.jit(
        jax.vmap(
            jax.grad(lambda t: potential_energy(bayes_model.model, (data,), {}, unravel(z0 + P @ t)))
        )
    )

    def gradients(points: np.ndarray) -> np.ndarray:
        out = [np.asarray(grad_t(jnp.asarray(c, dtype)), np.float64) for c in np.split(
            points, np.arange(64, len(points), 64))]
        return np.concatenate(out)

    # T[:, k, k] from g(+-tau_k e_k): (g(+) + g(-)) / tau^2
    signed = np.concatenate([np.diag(tau), -np.diag(tau)])
    g = gradients(signed)
    T_kk = ((g[:d] + g[d:]) / (tau**2)[:, None]).T  # (j, k)
    T_kk = np.where(np.isfinite(T_kk), T_kk, 0.0)
    moves = np.abs(T_kk) * 0.5 * (tau**2)[None, :]
    np.fill_diagonal(moves, 0.0)
    strength = moves.max(axis=0)
    strength[quartic] = np.inf  # the fourth-order axes bend first
    candidates = np.flatnonzero(strength >= BEND_THRESHOLD)
    candidates = candidates[np.argsort(-strength[candidates])][:MAX_BENDING_AXES]
    m = candidates.size
    # T[:, k, l] for pairs of candidates: four gradients each
    T_pair = np.zeros((d, m, m))
    for i, k in enumerate(candidates):
        T_pair[:, i, i] = T_kk[:, k]
    pairs = [(i, j) for i in range(m) for j in range(i + 1, m)]
    if pairs:
        points = []
        for i, j in pairs:
            k, ll = candidates[i], candidates[j]
            for sk, sl in ((1, 1), (1, -1), (-1, 1), (-1, -1)):
                p = np.zeros(d)
                p[k], p[ll] = sk * tau[k], sl * tau[ll]
                points.append(p)
        g = gradients(np.stack(points)).reshape(len(pairs), 4, d)
        for (i, j), gg in zip(pairs, g, strict=True):
            k, ll = candidates[i], candidates[j]
            t_kl = (gg[0] - gg[1] - gg[2] + gg[3]) / (4.0 * tau[k] * tau[ll])
            t_kl = np.where(np.isfinite(t_kl), t_kl, 0.0)
            T_pair[:, i, j] = T_pair[:, j, i] = t_kl
    # the order of the bending axes, then the cubic terms each cancelled by its latest axis
    rows = T_pair[candidates]  # (m, m, m): rows of the candidates themselves
    bend_within = np.abs(np.einsum("akk->ak", rows)) / 2.0
    np.fill_diagonal(bend_within, 0.0)
    order = _order(bend_within)
    bending = candidates[order]
    rank = np.full(d, m)  # every non-bending axis comes after the bending ones
    rank[bending] = np.arange(m)
    T_pair = T_pair[:, order][:, :, order]
    A = np.zeros((d, m, m))
    for j in range(d):
        for k in range(m):
            for ll in range(k, m):
                axis_k, axis_l = bending[k], bending[ll]
                if j in (axis_k, axis_l):
                    continue
                if rank[j] < max(k, ll):
                    continue  # cancelled by the latest of the three (its own row), or not at all
                if k == ll:
                    A[j, k, k] = T_pair[j, k, k] / 2.0
                else:
                    # a distinct triple: cancelled by the latest of (j, k, l) only
                    A[j, k, ll] = T_pair[j, k, ll]
    curved = CurvedLaplaceMap(centre, axes, bending, A, a, b, quartic)
    record = {
        "quartic": quartic.tolist(),
        "bending": bending.tolist(),
        "quadratic_max": float(np.abs(A).max()) if m else 0.0,
        "straight": fitted[quartic].tolist(),
    }
    if quartic.size == 0:
        return curved, record
    # the rise along each fourth-order axis through the map: u = +-t e_q, t in SLICE_POINTS
    points = [centre]
    for q in quartic:
        for t in SLICE_POINTS:
            for sign in (1.0, -1.0):
                u = np.zeros(d)
                u[q] = sign * t
                points.append(centre + axes @ np.asarray(curved.bend(jnp.asarray(u))))
    energy = np.asarray(
        _potential_energies(bayes_model, data, jnp.asarray(np.stack(points), dtype), unravel),
        np.float64,
    )
    rises = energy[1:].reshape(quartic.size, SLICE_POINTS.size, 2).mean(axis=2) - energy[0]
    along = fit_slice_coefficients(rises, SLICE_POINTS)
    a[quartic] = np.maximum(along[:, 0], MIN_CURVE_RISE)
    b[quartic] = along[:, 1]
    record["bent"] = np.stack([a[quartic], b[quartic]], axis=1).tolist()
    return CurvedLaplaceMap(centre, axes, bending, A, a, b, quartic), record
