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
2. :func:`hit_and_run`: a Markov chain that leaves the truncated normal invariant (Smith 1984;
   Belisle, Romeijn & Smith 1993): pick a direction ``d ~ N(0, I)``, find the chord
   ``{t: A(nu + t d) > 0} = (t_lo, t_hi)`` from the eigenvalues of ``L^-1 (A(d) - A(0)) L^-T``
   (``A(nu) = L L^T``), and draw ``t`` exactly from the normal along the line restricted to the
   chord (:func:`truncated_standard_normal`). No proposal is rejected.
"""

from __future__ import annotations

from collections.abc import Callable

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


def _min_eigenvalue(A: Array) -> Array:
    return jnp.min(jnp.linalg.eigvalsh(A))


def _newton_step(objective, x):
    """One Newton step of a convex ``objective`` with backtracking (Boyd & Vandenberghe 2004,
    9.5): the largest ``t`` in ``1, 1/2, ..., 2^-29`` (all evaluated at once) whose point is in
    the domain (finite objective) and decreases the objective by ``t / 4`` of the Newton
    decrement squared; no move if none does. Returns ``(x_new, decrement squared)`` (0 when no
    step was made)."""
    f, g, H = objective(x), jax.grad(objective)(x), jax.hessian(objective)(x)
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


def lmi_feasible_point(lmi: Callable[[Array], Array], k: int, *, dtype=None, nu0=None):
    """An interior point of ``K = {nu (k,): lmi(nu) > 0}`` by the phase-1 barrier method.

    Minimises ``|nu|^2 / 2 - w s - sum_i log det(A_i(nu) - s I)`` over ``(nu, s)``
    by Newton with backtracking along the weights ``w = PHASE1_WEIGHTS * m r / (1 + |s_0|)``
    (at most ``PHASE1_NEWTON_STEPS`` each, the next weight once the Newton decrement is below
    :data:`NEWTON_TOL`; ``s_0 = lambda_min(A(nu0)) - 1``), stopping at the first iterate with
    ``s > 0``. ``s`` approaches ``max lambda_min(A)`` to within about ``m r / w``.

    Args:
        lmi: affine ``nu (k,) -> (m, r, r)`` symmetric blocks; scale the blocks so their
            eigenvalues are of order one where ``K``'s bulk is (the phase-1 margin is absolute).
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
    A = lmi(nu)
    m, r = A.shape[0], A.shape[-1]
    s = _min_eigenvalue(A) - 1.0
    x0 = jnp.concatenate([nu, s[None]])
    eye = jnp.eye(r, dtype=dtype)

    def objective(x, w):
        nu, s = x[:-1], x[-1]
        return 0.5 * nu @ nu - w * s - _logdet(lmi(nu) - s * eye[None])

    # slack ~ 1 / w per eigenvalue: start it at the size of the initial violation
    weights = jnp.asarray(PHASE1_WEIGHTS, dtype) * (m * r / (1.0 + jnp.abs(s)))

    def running(carry):  # until the first strictly feasible iterate or the last weight
        x, j, _ = carry
        return (x[-1] <= 0) & (j < weights.size)

    def newton(carry):  # the next weight once centred (or stuck) or after the step budget
        x, j, i = carry
        new, decrement = _newton_step(lambda y: objective(y, weights[j]), x)
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
    """

    def objective(nu):
        return 0.5 * nu @ nu - _logdet(lmi(nu))

    def running(carry):  # until centred (or stuck), at most ``steps``
        _, more, i = carry
        return more & (i < steps)

    def newton(carry):
        nu, _, i = carry
        new, decrement = _newton_step(objective, nu)
        return new, decrement >= NEWTON_TOL, i + 1

    nu, _, _ = jax.lax.while_loop(running, newton, (nu0, jnp.asarray(True), jnp.asarray(0)))
    return nu, jax.hessian(objective)(nu)


def hit_and_run_step(
    key, nu: Array, lmi: Callable[[Array], Array], lmi0: Array, factor: Array | None = None
) -> Array:
    """One hit-and-run move of ``N(0, I)`` truncated to ``{lmi > 0}`` from an interior ``nu``.

    ``lmi0 = lmi(0)`` (the constant part); the direction is ``factor @ z``, ``z ~ N(0, I)``
    (``factor`` (k, k) fixed for the chain, default ``I``: any fixed direction law keeps the
    target invariant). The returned point is interior (the chord's ends are shrunk by a
    relative ``1e3 eps``; a move that rounding would put outside is not made).
    """
    dtype = nu.dtype
    k_dir, k_t = jax.random.split(key)
    d = jax.random.normal(k_dir, nu.shape, dtype)
    if factor is not None:
        d = factor @ d
    A = lmi(nu)
    D = lmi(d) - lmi0
    L = jnp.linalg.cholesky(A)
    X = solve_triangular(L, D, lower=True)
    S = solve_triangular(L, jnp.swapaxes(X, -1, -2), lower=True)  # L^-1 D L^-T
    lam = jnp.linalg.eigvalsh(0.5 * (S + jnp.swapaxes(S, -1, -2))).reshape(-1)
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
    inside = jnp.all(jnp.isfinite(jnp.linalg.cholesky(lmi(new))))
    return jnp.where(inside, new, nu)


def hit_and_run(
    key, nu0: Array, lmi: Callable[[Array], Array], steps: int, factor: Array | None = None
) -> Array:
    """``steps`` hit-and-run moves from the interior point ``nu0`` (k,); returns the last (k,)."""
    lmi0 = lmi(jnp.zeros_like(nu0))

    def body(nu, k):
        return hit_and_run_step(k, nu, lmi, lmi0, factor), None

    nu, _ = jax.lax.scan(body, nu0, jax.random.split(key, steps))
    return nu


def sample_truncated_normal(
    key, lmi: Callable[[Array], Array], k: int, *, steps: int, dtype=None, precondition=True
):
    """One draw of ``N(0, I_k)`` truncated to ``{nu: lmi(nu) > 0}``.

    Phase 1 (:func:`lmi_feasible_point`), centring (:func:`lmi_centre`), then ``steps``
    hit-and-run moves from the centre with directions ``N(0, H^-1)`` (``H`` the centre's
    Hessian; ``precondition=False``: isotropic directions).

    Returns:
        ``(nu (k,), ok (), margin ())``; ``ok`` False when phase 1 found no interior point
        (``nu`` is then not in the set and must not be used); ``margin`` is phase 1's smallest
        eigenvalue of ``lmi``.
    """
    start, margin = lmi_feasible_point(lmi, k, dtype=dtype)
    ok = margin > 0

    def feasible_lmi(nu):
        # from an infeasible start every Cholesky is NaN, and a batched eigensolver then runs
        # every matrix of the batch to its iteration limit (2,000 Furuta draws, 42 % infeasible:
        # 20 s instead of 10 s); those draws run on identity blocks instead (result not used)
        A = lmi(nu)
        return jnp.where(ok, A, jnp.eye(A.shape[-1], dtype=A.dtype))

    centre, H = lmi_centre(feasible_lmi, start)
    factor = None
    if precondition:
        L = jnp.linalg.cholesky(H)
        factor = solve_triangular(L, jnp.eye(k, dtype=L.dtype), lower=True).T  # L^-T
        factor = jnp.where(jnp.all(jnp.isfinite(factor)), factor, jnp.eye(k, dtype=L.dtype))
    nu = hit_and_run(key, centre, feasible_lmi, steps, factor)
    return jnp.where(ok, nu, start), ok, margin
