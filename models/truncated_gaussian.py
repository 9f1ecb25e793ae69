"""A standard normal truncated to a linear-matrix-inequality (LMI) set, drawn by hit-and-run.

The target is ``nu ~ N(0, I_k)`` restricted to ``K = {nu: A_i(nu) > 0 for every block i}`` with
``A(nu) = A_0 + sum_j nu_j A_j`` affine in ``nu`` (symmetric (r, r) blocks, positive definite
``>``). ``K`` is convex and the density log-concave. For the identifiable geometry
(``models.identifiable``) ``nu`` are the directions of theta the data cannot see and the blocks
are the bodies' pseudo-inertias (physical consistency, Wensing et al. 2017).

Two steps, both jittable and vmappable, every random draw taking a key:

1. :func:`lmi_feasible_point`: an interior point of ``K`` (or a certificate that ``K`` is empty
   up to a tolerance) by Newton with backtracking on the phase-1 barrier problem
   ``min |nu|^2 / 2 - w s - sum_i log det(A_i(nu) - s I)`` over ``(nu, s)`` with increasing
   ``w`` (Boyd & Vandenberghe 2004, 11.4 and 9.5). Any ``(nu, s)`` with
   ``s < lambda_min(A(nu))`` starts it; a point with ``s > 0`` is strictly feasible.
   :func:`lmi_centre` then moves it to the centre ``argmin |nu|^2 / 2 - sum_i log det A_i``.
   The barrier's gradient and Hessian are closed forms of the affine map (:class:`AffineLMI`).
2. :func:`hit_and_run`: a Markov chain that leaves the truncated normal invariant (Smith 1984;
   Belisle, Romeijn & Smith 1993): pick a direction ``d ~ N(0, I)``, find the chord
   ``{t: A(nu + t d) > 0} = (t_lo, t_hi)`` from the eigenvalues of ``L^-1 (A(d) - A(0)) L^-T``
   (``A(nu) = L L^T``; cyclic Jacobi, :func:`symmetric_eigenvalues`), and draw ``t`` exactly
   from the normal along the line restricted to the chord (:func:`truncated_standard_normal`).
   No proposal is rejected.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import solve_triangular
from jax.scipy.special import log_ndtr, ndtri

Array = jax.Array

PHASE1_WEIGHTS = tuple(10.0**j for j in range(12))
PHASE1_NEWTON_STEPS = 20
BACKTRACK_STEPS = 30
CENTRE_NEWTON_STEPS = 60
NEWTON_TOL = 1e-10
"""Newton loops stop once the Newton decrement squared falls below this (Boyd & Vandenberghe
2004, 9.5.3), or when no step decreases the objective."""


def truncated_standard_normal(key, lo: Array, hi: Array) -> Array:
    """One draw of ``N(0, 1)`` truncated to ``[lo, hi]`` (``lo < hi``, infinite ends allowed).

    Inverse CDF in log space on the side of the interval nearer the lower tail (the interval is
    reflected when its centre is positive), so intervals many standard deviations out are drawn
    accurately where ``Phi(hi) - Phi(lo)`` would round to 0 (``log_ndtr``/``ndtri`` are accurate
    down to ``Phi ~ 1e-300``).
    """
    dtype = jnp.result_type(lo, hi)
    flip = (lo + hi) > 0
    flip = jnp.where(jnp.isinf(lo) & jnp.isinf(hi), False, flip)
    a = jnp.where(flip, -hi, lo)
    b = jnp.where(flip, -lo, hi)
    u = jax.random.uniform(key, (), dtype)
    log_pa, log_pb = log_ndtr(a), log_ndtr(b)
    # Phi(a) + u (Phi(b) - Phi(a)) = Phi(b) (u + (1 - u) Phi(a) / Phi(b))
    log_p = log_pb + jnp.log(u + (1 - u) * jnp.exp(log_pa - log_pb))
    x = jnp.clip(ndtri(jnp.exp(log_p)), a, b)
    return jnp.where(flip, -x, x)


JACOBI_SWEEPS = 5
"""Cyclic Jacobi sweeps of :func:`symmetric_eigenvalues`: on 20,000 random, diagonal, clustered
and rank-one 4 x 4 matrices 5 sweeps reach 2e-15 of the largest |eigenvalue| in float64 (4:
6e-10) and 3e-7 in float32."""


def symmetric_eigenvalues(S: Array, *, sweeps: int = JACOBI_SWEEPS) -> Array:
    """Eigenvalues (..., r) of small symmetric matrices S (..., r, r), unsorted.

    Cyclic Jacobi (Golub & Van Loan 2013, 8.5.3) on the upper triangle's entries as arrays over
    the batch, so each rotation is a few elementwise operations XLA fuses: on 128 blocks of
    4 x 4 a twelfth of the time of ``jnp.linalg.eigvalsh``, which calls LAPACK once per block
    (``docs/inference-geometry.md``). A fixed number of ``sweeps``; for r <= 6 or so.
    """
    r = S.shape[-1]
    index = [(i, j) for i in range(r) for j in range(i, r)]

    def at(i, j):
        return (i, j) if i <= j else (j, i)

    def sweep(_, entries):
        a = dict(zip(index, entries, strict=True))
        for p in range(r - 1):
            for q in range(p + 1, r):
                app, aqq, apq = a[(p, p)], a[(q, q)], a[(p, q)]
                zero = apq == 0
                theta = (aqq - app) / (2 * jnp.where(zero, 1.0, apq))
                # the smaller rotation angle's tangent, t = tan(phi) in [-1, 1]
                t = jnp.sign(theta) / (jnp.abs(theta) + jnp.hypot(theta, 1.0))
                t = jnp.where(zero, 0.0, jnp.where(theta == 0, 1.0, t))
                c = jax.lax.rsqrt(1 + t * t)
                s = t * c
                for k in range(r):
                    if k not in (p, q):
                        akp, akq = a[at(k, p)], a[at(k, q)]
                        a[at(k, p)], a[at(k, q)] = c * akp - s * akq, s * akp + c * akq
                a[(p, p)], a[(q, q)], a[(p, q)] = app - t * apq, aqq + t * apq, jnp.zeros_like(apq)
        return tuple(a[e] for e in index)

    entries = jax.lax.fori_loop(0, sweeps, sweep, tuple(S[..., i, j] for i, j in index))
    diagonal = dict(zip(index, entries, strict=True))
    return jnp.stack([diagonal[(i, i)] for i in range(r)], axis=-1)


def _min_eigenvalue(A: Array) -> Array:
    return jnp.min(symmetric_eigenvalues(A))


def _newton_step(objective, derivatives, x):
    """One Newton step of a convex ``objective`` with backtracking (Boyd & Vandenberghe 2004,
    9.5): the largest ``t`` in ``1, 1/2, ..., 2^-29`` (all evaluated at once) whose point is in
    the domain (finite objective) and decreases the objective by ``t / 4`` of the Newton
    decrement squared; no move if none does. ``derivatives(x) = (f, g, H)``. Returns
    ``(x_new, decrement squared)`` (0 when no step was made)."""
    f, g, H = derivatives(x)
    step = jnp.linalg.solve(H, g)
    slope = g @ step  # Newton decrement squared
    ts = 0.5 ** jnp.arange(BACKTRACK_STEPS, dtype=x.dtype)
    f_new = jax.vmap(lambda t: objective(x - t * step))(ts)
    good = jnp.isfinite(f_new) & (f_new <= f - 0.25 * ts * slope)
    good = good & jnp.all(jnp.isfinite(step)) & (slope > 0)
    t = jnp.max(jnp.where(good, ts, 0.0))
    return jnp.where(t > 0, x - t * step, x), jnp.where(t > 0, slope, 0.0)


def _logdet(A: Array) -> Array:
    """``sum_i log det A_i`` of positive definite blocks (m, r, r) (NaN if one is not)."""
    L = jnp.linalg.cholesky(A)
    return 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)))


class AffineLMI(NamedTuple):
    """``A(nu) = constant + sum_j nu_j slopes[j]``: an affine map to m symmetric r x r blocks.

    constant (m, r, r), slopes (k, m, r, r); :meth:`of` builds it from a callable (exact when
    the callable is affine)."""

    constant: Array
    slopes: Array

    @staticmethod
    def of(lmi: Callable[[Array], Array], nu: Array) -> AffineLMI:
        """The affine map of ``lmi`` (its value at 0 and its Jacobian, like ``nu`` (k,))."""
        zero = jnp.zeros_like(nu)
        return AffineLMI(lmi(zero), jnp.moveaxis(jax.jacfwd(lmi)(zero), -1, 0))

    def __call__(self, nu: Array) -> Array:
        return self.constant + self.linear(nu)

    def linear(self, d: Array) -> Array:
        """``A(d) - A(0)`` (m, r, r)."""
        return jnp.tensordot(d, self.slopes, axes=1)

    def logdet_derivatives(self, nu: Array):
        """``(sum_i log det A_i, its gradient (k,), its Hessian (k, k))`` at an interior nu.

        Closed forms (Boyd & Vandenberghe 2004, A.4.1): ``d/dnu_j = tr(A^-1 A_j)`` and
        ``d2/dnu_j dnu_l = -tr(A^-1 A_j A^-1 A_l)`` summed over the blocks; no automatic
        differentiation through a Cholesky factor, which compiles several times larger.
        """
        A = self(nu)
        L = jnp.linalg.cholesky(A)
        eye = jnp.broadcast_to(jnp.eye(A.shape[-1], dtype=A.dtype), A.shape)
        L_inv = solve_triangular(L, eye, lower=True)
        A_inv = jnp.swapaxes(L_inv, -1, -2) @ L_inv
        P = jnp.einsum("mab,jmbc->jmac", A_inv, self.slopes)  # A^-1 A_j
        value = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L, axis1=-2, axis2=-1)))
        gradient = jnp.einsum("jmaa->j", P)
        hessian = -jnp.einsum("jmab,lmba->jl", P, P)
        return value, gradient, hessian


def _affine(lmi, nu: Array) -> AffineLMI:
    return lmi if isinstance(lmi, AffineLMI) else AffineLMI.of(lmi, nu)


def lmi_feasible_point(lmi: Callable[[Array], Array], k: int, *, dtype=None, nu0=None):
    """An interior point of ``K = {nu (k,): lmi(nu) > 0}`` by the phase-1 barrier method.

    Minimises ``|nu|^2 / 2 - w s - sum_i log det(A_i(nu) - s I)`` over ``(nu, s)``
    by Newton with backtracking along the weights ``w = PHASE1_WEIGHTS * m r / (1 + |s_0|)``
    (at most ``PHASE1_NEWTON_STEPS`` each, the next weight once the Newton decrement is below
    :data:`NEWTON_TOL`; ``s_0 = lambda_min(A(nu0)) - 1``), stopping at the first iterate with
    ``s > 0``. ``s`` approaches ``max lambda_min(A)`` to within about ``m r / w``.

    Args:
        lmi: affine ``nu (k,) -> (m, r, r)`` symmetric blocks (an :class:`AffineLMI` is used as
            it is); scale the blocks so their eigenvalues are of order one where ``K``'s bulk is
            (the phase-1 margin is absolute).
        k: dimension of ``nu``.
        nu0: (k,) start (default zeros).

    Returns:
        ``(nu (k,), margin ())``: ``margin = lambda_min(lmi(nu))``; ``nu`` is in ``K`` iff
        ``margin > 0``. A non-positive margin means that no point of ``K`` was found with
        ``lambda_min`` above about ``1e-11 (1 + |s_0|)`` within the step budget (in
        practice: ``K`` is empty).
    """
    dtype = dtype or jnp.result_type(float)
    nu = jnp.zeros(k, dtype) if nu0 is None else jnp.asarray(nu0, dtype)
    lmi = _affine(lmi, nu)
    m, r = lmi.constant.shape[0], lmi.constant.shape[-1]
    s = _min_eigenvalue(lmi(nu)) - 1.0
    x0 = jnp.concatenate([nu, s[None]])
    # x = (nu, s): A(nu) - s I is affine in x, s's slope is -I
    minus_eye = -jnp.broadcast_to(jnp.eye(r, dtype=dtype), (1, m, r, r))
    lifted = AffineLMI(lmi.constant, jnp.concatenate([lmi.slopes, minus_eye]))
    in_nu = jnp.ones(k + 1, dtype).at[-1].set(0.0)
    last = 1.0 - in_nu

    def objective(x, w):
        return 0.5 * (in_nu * x) @ x - w * x[-1] - _logdet(lifted(x))

    def derivatives(x, w):
        value, gradient, hessian = lifted.logdet_derivatives(x)
        f = 0.5 * (in_nu * x) @ x - w * x[-1] - value
        return f, in_nu * x - w * last - gradient, jnp.diag(in_nu) - hessian

    # slack ~ 1 / w per eigenvalue: start it at the size of the initial violation
    weights = jnp.asarray(PHASE1_WEIGHTS, dtype) * (m * r / (1.0 + jnp.abs(s)))

    def running(carry):  # until the first strictly feasible iterate or the last weight
        x, j, _ = carry
        return (x[-1] <= 0) & (j < weights.size)

    def newton(carry):  # the next weight once centred (or stuck) or after the step budget
        x, j, i = carry
        w = weights[j]
        new, decrement = _newton_step(lambda y: objective(y, w), lambda y: derivatives(y, w), x)
        done = (decrement < NEWTON_TOL) | (i + 1 >= PHASE1_NEWTON_STEPS)
        return new, jnp.where(done, j + 1, j), jnp.where(done, 0, i + 1)

    x, _, _ = jax.lax.while_loop(running, newton, (x0, jnp.asarray(0), jnp.asarray(0)))
    nu = x[:-1]
    return nu, _min_eigenvalue(lmi(nu))


def lmi_centre(lmi: Callable[[Array], Array], nu0: Array, *, steps: int = CENTRE_NEWTON_STEPS):
    """Centre ``argmin 0.5 |nu|^2 - sum_i log det A_i(nu)`` from an interior ``nu0`` (k,).

    Newton with backtracking (iterates stay interior), at most ``steps``, until the Newton
    decrement is below :data:`NEWTON_TOL`. Returns ``(nu (k,), hessian (k, k))``: the centre and
    the objective's Hessian there, ``I`` plus the barrier's (the Dikin ellipsoid), whose inverse
    approximates the truncated normal's covariance and shapes the hit-and-run directions.
    ``lmi`` as in :func:`lmi_feasible_point`.
    """
    lmi = _affine(lmi, nu0)
    eye = jnp.eye(nu0.shape[0], dtype=nu0.dtype)

    def objective(nu):
        return 0.5 * nu @ nu - _logdet(lmi(nu))

    def derivatives(nu):
        value, gradient, hessian = lmi.logdet_derivatives(nu)
        return 0.5 * nu @ nu - value, nu - gradient, eye - hessian

    def running(carry):  # until centred (or stuck), at most ``steps``
        _, more, i = carry
        return more & (i < steps)

    def newton(carry):
        nu, _, i = carry
        new, decrement = _newton_step(objective, derivatives, nu)
        return new, decrement >= NEWTON_TOL, i + 1

    nu, _, _ = jax.lax.while_loop(running, newton, (nu0, jnp.asarray(True), jnp.asarray(0)))
    return nu, derivatives(nu)[2]


def hit_and_run_step(
    key, nu: Array, L: Array, lmi: AffineLMI, factor: Array | None = None
) -> tuple[Array, Array]:
    """One hit-and-run move of ``N(0, I)`` truncated to ``{lmi > 0}`` from an interior ``nu``.

    ``L`` (m, r, r): the Cholesky factors of ``lmi(nu)``. The direction is ``factor @ z``,
    ``z ~ N(0, I)`` (``factor`` (k, k) fixed for the chain, default ``I``: any fixed direction
    law keeps the target invariant). Returns the new point and its factors; the point is
    interior (the chord's ends are shrunk by a relative ``1e3 eps``; a move that rounding would
    put outside is not made).
    """
    dtype = nu.dtype
    k_dir, k_t = jax.random.split(key)
    d = jax.random.normal(k_dir, nu.shape, dtype)
    if factor is not None:
        d = factor @ d
    D = lmi.linear(d)
    X = solve_triangular(L, D, lower=True)
    S = solve_triangular(L, jnp.swapaxes(X, -1, -2), lower=True)  # L^-1 D L^-T
    lam = symmetric_eigenvalues(0.5 * (S + jnp.swapaxes(S, -1, -2))).reshape(-1)
    inf = jnp.asarray(jnp.inf, dtype)
    # A + t D > 0  <=>  1 + t lam > 0 for every eigenvalue lam
    t_hi = jnp.min(jnp.where(lam < 0, -1.0 / jnp.where(lam < 0, lam, -1.0), inf))
    t_lo = jnp.max(jnp.where(lam > 0, -1.0 / jnp.where(lam > 0, lam, 1.0), -inf))
    shrink = 1.0 - 1e3 * jnp.finfo(dtype).eps
    t_lo, t_hi = t_lo * shrink, t_hi * shrink
    # along the line: exp(-|nu + t d|^2 / 2) = N(t; c, sd^2)
    dd = d @ d
    c, sd = -(nu @ d) / dd, 1.0 / jnp.sqrt(dd)
    t = c + sd * truncated_standard_normal(k_t, (t_lo - c) / sd, (t_hi - c) / sd)
    new = nu + t * d
    L_new = jnp.linalg.cholesky(lmi(new))
    inside = jnp.all(jnp.isfinite(L_new))
    return jnp.where(inside, new, nu), jnp.where(inside, L_new, L)


def hit_and_run(
    key, nu0: Array, lmi: Callable[[Array], Array], steps: int, factor: Array | None = None
) -> Array:
    """``steps`` hit-and-run moves from the interior point ``nu0`` (k,); returns the last (k,).

    ``lmi`` as in :func:`lmi_feasible_point`."""
    lmi = _affine(lmi, nu0)

    def body(carry, k):
        return hit_and_run_step(k, *carry, lmi, factor), None

    start = (nu0, jnp.linalg.cholesky(lmi(nu0)))
    (nu, _), _ = jax.lax.scan(body, start, jax.random.split(key, steps))
    return nu


def sample_truncated_normal(
    key, lmi: Callable[[Array], Array], k: int, *, steps: int, dtype=None, precondition=True
):
    """One draw of ``N(0, I_k)`` truncated to ``{nu: lmi(nu) > 0}``.

    Phase 1 (:func:`lmi_feasible_point`), centring (:func:`lmi_centre`), then ``steps``
    hit-and-run moves from the centre with directions ``N(0, H^-1)`` (``H`` the centre's
    Hessian; ``precondition=False``: isotropic directions). ``lmi`` as in
    :func:`lmi_feasible_point`.

    Returns:
        ``(nu (k,), ok (), margin ())``; ``ok`` False when phase 1 found no interior point
        (``nu`` is then not in the set and must not be used); ``margin`` is phase 1's smallest
        eigenvalue of ``lmi``.
    """
    dtype = dtype or jnp.result_type(float)
    lmi = _affine(lmi, jnp.zeros(k, dtype))
    start, margin = lmi_feasible_point(lmi, k, dtype=dtype)
    ok = margin > 0
    # from an infeasible start every Cholesky is NaN; those draws run on identity blocks instead
    # (their result is not used), so that the batch's arithmetic stays finite
    eye = jnp.eye(lmi.constant.shape[-1], dtype=dtype)
    feasible = AffineLMI(
        jnp.where(ok, lmi.constant, eye), jnp.where(ok, lmi.slopes, jnp.zeros_like(lmi.slopes))
    )
    centre, H = lmi_centre(feasible, start)
    factor = None
    if precondition:
        L = jnp.linalg.cholesky(H)
        factor = solve_triangular(L, jnp.eye(k, dtype=L.dtype), lower=True).T  # L^-T
        factor = jnp.where(jnp.all(jnp.isfinite(factor)), factor, jnp.eye(k, dtype=L.dtype))
    nu = hit_and_run(key, centre, feasible, steps, factor)
    return jnp.where(ok, nu, start), ok, margin
