"""Posterior-predictive rollouts: RK4 (``lax.scan``) vmapped over posterior draws.

DiffNEA (Lutter et al. 2020), Figure 1: forward rollouts from a start state, RK4 at 250 Hz. Here
each posterior draw gives one rollout; thousands are computed in one jitted, vmapped call, and
their equal-tailed credible band is compared with the true system's trajectory where it is known.

A *draw* is any pytree whose leaves carry one leading draw axis (D, ...), e.g. the dict of latent
sites from ``FitResult.posterior_samples()``; ``qdd_fn_of_draw(draw_d)`` maps one draw (no leading
axis) to its forward dynamics ``(q, qd, tau_d) -> qdd`` (e.g. ``BayesianModel.qdd_fn``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayes_nea import DEFAULT_DT, Trajectory, integrate, integrate_closed_loop
from models.arguments import SharedStatic, held_model, model_argument

QddFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
Controller = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


class Band(NamedTuple):
    """An equal-tailed credible band over the draw axis.

    Fields:
        lower: (...) the ``(1 - prob) / 2`` quantile over finite draws.
        median: (...) the median over finite draws.
        upper: (...) the ``(1 + prob) / 2`` quantile over finite draws.
        prob: the band's probability mass (e.g. 0.9).
        finite_fraction: fraction of draws that stayed finite over the whole rollout.
    """

    lower: np.ndarray
    median: np.ndarray
    upper: np.ndarray
    prob: float
    finite_fraction: float


def num_draws(draws: Any) -> int:
    """The size D of the leading draw axis shared by every leaf of ``draws``.

    Raises:
        ValueError: no leaves, a scalar leaf, or leaves with different leading sizes.
    """
    leaves = jax.tree_util.tree_leaves(draws)
    if not leaves:
        raise ValueError(
            "draws is an empty pytree; expected arrays with a leading draw axis (D, ...)"
        )
    sizes = {int(np.shape(x)[0]) if np.ndim(x) else -1 for x in leaves}
    if -1 in sizes or len(sizes) != 1:
        shapes = jax.tree_util.tree_map(lambda x: tuple(np.shape(x)), draws)
        raise ValueError(
            f"every leaf of draws needs the same leading draw axis (D, ...); got shapes {shapes}"
        )
    return sizes.pop()


def thin_draws(draws: Any, max_draws: int) -> Any:
    """At most ``max_draws`` draws of ``draws`` (pytree, leading axis D), evenly spaced over the
    D draws (first and last kept), in order; all of them when ``D <= max_draws``."""
    if int(max_draws) < 1:
        raise ValueError(f"max_draws must be a positive integer, got {max_draws}")
    d = num_draws(draws)
    idx = np.linspace(0, d - 1, min(int(max_draws), d)).astype(int)
    return jax.tree_util.tree_map(lambda x: x[idx], draws)


def _check_state(q0, qd0, d: int) -> tuple[int, int]:
    q0s, qd0s = np.shape(q0), np.shape(qd0)
    if q0s != qd0s or len(q0s) not in (1, 2) or (len(q0s) == 2 and q0s[0] != d):
        raise ValueError(
            f"q0 {q0s} and qd0 {qd0s} must both be (n,) (one start state) or (D, n) with D = {d} "
            "(one per draw)"
        )
    return q0s[-1], len(q0s)


def make_rollout_fn(
    qdd_fn_of_draw: Callable[[Any], QddFn],
    *,
    steps: int,
    dt: float = DEFAULT_DT,
    controller: Controller | None = None,
    batch_size: int | str | None = "auto",
    delay_steps: int = 0,
) -> Callable[..., Trajectory]:
    """A jitted ``rollout(draws, q0, qd0, tau) -> Trajectory`` reusable across calls (one compile).
    Where ``qdd_fn_of_draw`` is a model's method (``bm.qdd_fn``) the program is shared by every
    model of that model's structure (:func:`_shared_rollout`).

    Open loop (``controller=None``): ``tau`` (steps, n) is held over each step (zeros: the
    uncontrolled system). Closed loop: ``tau`` is ignored (pass None) and
    ``tau_k = controller(t_k, q_k, qd_k)``.

    Args:
        qdd_fn_of_draw: one draw (no leading axis) -> ``(q, qd, tau) -> qdd``.
        steps: number of RK4 steps T (static). dt: step (s), 1/250 by default (DiffNEA).
        controller: optional pure ``(t, q, qd) -> tau_d`` (n,).
        batch_size: draws per vectorised batch (``lax.map``); None: all at once; ``"auto"``
            (default): :func:`auto_batch_size` of each call's draws (batches whose parameters
            fit in a core's cache where the draws carry networks, else all at once).
        delay_steps: closed loop: the controller's commands reach the plant this many steps late
            (an actuation delay, :func:`bayes_nea.delay_steps`).
    Returns:
        ``rollout(draws, q0, qd0, tau)``: ``q0, qd0`` (n,) or (D, n); the Trajectory has ``t``
        (T + 1,), ``q``/``qd`` (D, T + 1, n) and ``tau`` (D, T, n) (open loop: (T, n)).
    """
    if int(steps) < 1:
        raise ValueError(f"steps must be a positive integer, got {steps}")
    steps = int(steps)
    if not (
        batch_size is None
        or (isinstance(batch_size, str) and batch_size == "auto")
        or (isinstance(batch_size, (int, np.integer)) and batch_size >= 1)
    ):
        raise ValueError(f"batch_size must be a positive int, None or 'auto'; got {batch_size!r}")

    @functools.cache
    def program(size):
        options = (steps, dt, controller, size, delay_steps)
        shared = _shared_rollout(qdd_fn_of_draw, options)
        if shared is None:
            return jax.jit(functools.partial(_rollout, qdd_fn_of_draw, *options))
        return functools.partial(_SHARED_ROLLOUT, *shared)

    def call(draws, q0, qd0, tau=None) -> Trajectory:
        d = num_draws(draws)
        n, _ = _check_state(q0, qd0, d)
        dtype = jnp.result_type(q0)
        if isinstance(batch_size, str):  # "auto"
            rollout = program(auto_batch_size(draws, dtype))
        else:
            rollout = program(None if batch_size is None else int(batch_size))
        if controller is None:
            tau = jnp.zeros((steps, n), dtype) if tau is None else jnp.asarray(tau)
            if tau.shape != (steps, n):
                raise ValueError(f"tau has shape {tau.shape}, expected (steps, n) = {(steps, n)}")
        else:
            if tau is not None:
                raise ValueError(
                    "pass either tau (open loop) or a controller (closed loop), not both"
                )
            tau = jnp.zeros((0, n), dtype)
        return rollout(draws, jnp.asarray(q0), jnp.asarray(qd0), tau)

    return call


ROLLOUT_BATCH_BYTES = 1 << 20
""":func:`auto_batch_size`'s budget for one batch's draws: about half of a core's L2 cache.
Measured (docs/measurements.md, "Rollouts in batches that fit the cache"): 400 rollouts of
1,000 RK4 steps of cart-pole ``diffnea/nn-residual`` draws (about 29 kB each in float64) took
0.58x as long in batches of 40 draws (1.2 MB) as all at once, and 0.93x in batches of 100;
``ffnn`` (11 kB) 0.74x in batches of 40-100; white-box draws (a few hundred bytes) gain
nothing."""


def auto_batch_size(draws: Any, dtype=jnp.float64) -> int | None:
    """Draws per ``lax.map`` batch for rollouts of ``draws`` (pytree, leading axis D) computed in
    ``dtype``: as many as fit in :data:`ROLLOUT_BATCH_BYTES` (spread evenly over the batches),
    or None (all D at once) where they all fit. Each step of a rollout reads every draw's
    parameters (a network's weights); all D vmapped at once stream them from memory at every one
    of the 4 T forward dynamics."""
    d = num_draws(draws)
    itemsize = max(jnp.dtype(dtype).itemsize, 4)
    per_draw = sum(int(np.prod(np.shape(x)[1:], dtype=int)) for x in jax.tree.leaves(draws))
    size = ROLLOUT_BATCH_BYTES // max(per_draw * itemsize, 1)
    if size >= d:
        return None
    batches = -(-d // max(int(size), 1))
    return -(-d // batches)  # equal batches: little padding (_rollout)


def _rollout(qdd_fn_of_draw, steps, dt, controller, batch_size, delay_steps, draws, q0, qd0, tau):
    """:func:`make_rollout_fn`'s program."""

    def one(draw, q0, qd0, tau):
        f = qdd_fn_of_draw(draw)
        if controller is None:
            traj = integrate(f, q0, qd0, tau, dt=dt)
            return traj.q, traj.qd, None
        traj = integrate_closed_loop(f, controller, q0, qd0, steps, dt=dt, delay_steps=delay_steps)
        return traj.q, traj.qd, traj.tau

    d = num_draws(draws)
    q0 = jnp.broadcast_to(q0, (d, q0.shape[-1]))
    qd0 = jnp.broadcast_to(qd0, (d, qd0.shape[-1]))
    if batch_size is None:
        q, qd, u = jax.vmap(one, in_axes=(0, 0, 0, None))(draws, q0, qd0, tau)
    else:
        # padded to whole batches with copies of the last draw (cut off after): lax.map would
        # compile its remainder batch as a second copy of the whole rollout
        size = min(int(batch_size), d)
        pad = -d % size
        padded = jax.tree.map(
            lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]), (draws, q0, qd0)
        )
        out = jax.lax.map(lambda a: one(*a, tau), padded, batch_size=size)
        q, qd, u = jax.tree.map(lambda x: x[:d], out)
    t = jnp.arange(steps + 1, dtype=q.dtype) * jnp.asarray(dt, q.dtype)
    return Trajectory(t, q, qd, tau if controller is None else u)


def _shared_rollout(qdd_fn_of_draw, options: tuple):
    """``(program, model argument)`` of :data:`_SHARED_ROLLOUT` where ``qdd_fn_of_draw`` is a
    model's method (``bm.qdd_fn``): the rollout is then traced once for every model of the same
    structure, its array constants an argument (``models.arguments``: a variant's grid cells on
    a system's three dataset kinds share it). None otherwise (any other function, or a
    controller that does not hash)."""
    model, method = (
        getattr(qdd_fn_of_draw, "__self__", None),
        getattr(qdd_fn_of_draw, "__func__", None),
    )
    if model is None or method is None:
        return None
    try:
        program = SharedStatic(("rollout", type(model), method, *options), (method, options))
    except TypeError:
        return None
    return program, model_argument(model)


def _shared_rollout_program(program, argument, draws, q0, qd0, tau):
    method, options = program.value
    return _rollout(functools.partial(method, held_model(argument)), *options, draws, q0, qd0, tau)


_SHARED_ROLLOUT = jax.jit(_shared_rollout_program, static_argnums=0)


def posterior_rollouts(
    qdd_fn_of_draw: Callable[[Any], QddFn],
    draws: Any,
    q0,
    qd0,
    *,
    tau=None,
    controller: Controller | None = None,
    steps: int | None = None,
    dt: float = DEFAULT_DT,
    batch_size: int | str | None = "auto",
) -> Trajectory:
    """RK4 rollouts of every posterior draw from the same (or per-draw) start state.

    Open loop under ``tau`` (T, n) (None: zero torque, the uncontrolled system, for ``steps``
    steps) or closed loop under ``controller(t, q, qd) -> tau_d``. One jitted, vmapped call; for
    repeated calls with the same shapes use :func:`make_rollout_fn` to compile once.

    Args:
        qdd_fn_of_draw: one draw -> forward dynamics ``(q, qd, tau_d) -> qdd`` (incl. actuator).
        draws: pytree with a leading draw axis (D, ...).
        q0, qd0: (n,) or (D, n) start state.
        steps: RK4 steps (required unless ``tau`` is given, then ``tau.shape[0]``).
        dt: step (s), default 1/250 s.
    Returns:
        Trajectory: ``t`` (T + 1,), ``q``/``qd`` (D, T + 1, n), ``tau`` (T, n) or (D, T, n).
    Raises:
        ValueError: both or inconsistent ``tau``/``controller``/``steps``, bad shapes.
    """
    if tau is not None and controller is not None:
        raise ValueError("pass either tau (open loop) or a controller (closed loop), not both")
    if tau is not None:
        tau = jnp.asarray(tau)
        if tau.ndim != 2:
            raise ValueError(f"tau has shape {tau.shape}, expected (T, n)")
        if steps is not None and steps != tau.shape[0]:
            raise ValueError(f"steps = {steps} but tau has {tau.shape[0]} rows")
        steps = tau.shape[0]
    if steps is None:
        raise ValueError("steps is required for zero-torque or closed-loop rollouts")
    fn = make_rollout_fn(
        qdd_fn_of_draw, steps=steps, dt=dt, controller=controller, batch_size=batch_size
    )
    return fn(draws, q0, qd0, tau)


def true_rollout(
    qdd_fn: QddFn,
    q0,
    qd0,
    *,
    tau=None,
    controller: Controller | None = None,
    steps: int | None = None,
    dt: float = DEFAULT_DT,
) -> Trajectory:
    """The true system's rollout (one trajectory) under the same inputs as the posterior's.

    Args:
        qdd_fn: the true forward dynamics, e.g. ``bayes_nea.forward_dynamics(robot, actuator=...)``.
    Returns:
        Trajectory with ``q``/``qd`` (T + 1, n).
    """
    if tau is not None and controller is not None:
        raise ValueError("pass either tau (open loop) or a controller (closed loop), not both")
    if controller is not None:
        if steps is None:
            raise ValueError("steps is required for a closed-loop rollout")
        return jax.jit(
            lambda a, b: integrate_closed_loop(qdd_fn, controller, a, b, int(steps), dt=dt)
        )(jnp.asarray(q0), jnp.asarray(qd0))
    if tau is None:
        if steps is None:
            raise ValueError("steps is required for a zero-torque rollout")
        tau = jnp.zeros((int(steps), np.shape(q0)[-1]), jnp.result_type(q0))
    return jax.jit(lambda a, b, u: integrate(qdd_fn, a, b, u, dt=dt))(
        jnp.asarray(q0), jnp.asarray(qd0), jnp.asarray(tau)
    )


def finite_draws(x) -> np.ndarray:
    """(D,) True where a draw's array ``x`` (D, ...) is finite everywhere."""
    x = np.asarray(x)
    return np.all(np.isfinite(x.reshape(x.shape[0], -1)), axis=1)


def credible_band(x, prob: float = 0.9) -> Band:
    """Equal-tailed ``prob`` credible band of ``x`` (D, ...) over its leading draw axis.

    Draws that are non-finite anywhere (diverged rollouts) are left out of the quantiles and
    counted in ``finite_fraction``; if none is finite the band is NaN.
    """
    if not 0.0 < prob < 1.0:
        raise ValueError(f"prob must lie in (0, 1), got {prob}")
    x = np.asarray(x, dtype=float)
    if x.ndim < 1 or x.shape[0] < 1:
        raise ValueError(f"x has shape {x.shape}; expected a leading draw axis (D, ...)")
    ok = finite_draws(x)
    if not ok.any():
        nan = np.full(x.shape[1:], np.nan)
        return Band(nan, nan.copy(), nan.copy(), float(prob), 0.0)
    lo, med, hi = np.quantile(x[ok], [(1 - prob) / 2, 0.5, (1 + prob) / 2], axis=0)
    return Band(lo, med, hi, float(prob), float(ok.mean()))


def band_coverage(band: Band, truth) -> float:
    """Fraction of the true values ``truth`` (same shape as the band) inside ``[lower, upper]``."""
    truth = np.asarray(truth, dtype=float)
    if truth.shape != np.shape(band.lower):
        raise ValueError(f"truth has shape {truth.shape}, the band {np.shape(band.lower)}")
    inside = (truth >= band.lower) & (truth <= band.upper)
    return float(np.mean(inside))


def rollout_error(q_draws, q_true, *, horizons_steps) -> dict[int, np.ndarray]:
    """Per-draw RMS position error over the first ``h`` steps, for each horizon ``h``.

    Args:
        q_draws: (D, T + 1, n) predicted positions; q_true: (T + 1, n).
        horizons_steps: iterable of step counts ``h`` (1 <= h <= T).
    Returns:
        {h: (D,) RMS error over steps 1..h and joints (inf for a non-finite draw)}.
    """
    q_draws = np.asarray(q_draws, dtype=float)
    q_true = np.asarray(q_true, dtype=float)
    if q_draws.shape[1:] != q_true.shape:
        raise ValueError(f"q_draws {q_draws.shape} and q_true {q_true.shape} do not match")
    out = {}
    for h in horizons_steps:
        h = int(h)
        if not 1 <= h < q_true.shape[0]:
            raise ValueError(f"horizon {h} steps outside 1..{q_true.shape[0] - 1}")
        err = q_draws[:, 1 : h + 1] - q_true[None, 1 : h + 1]
        with np.errstate(over="ignore", invalid="ignore"):
            rms = np.sqrt(np.mean(err**2, axis=(1, 2)))
        out[h] = np.where(np.isfinite(rms), rms, np.inf)
    return out
