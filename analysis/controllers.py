"""Controller robustness checks: run one controller in closed loop on every posterior draw.

A controller designed on a nominal model is only as good as the plant it meets. Running it on each
posterior draw of the identified dynamics (and on the true system where it is known) gives the
distribution of success, settling time and tracking error, i.e. how likely the controller is to
work on the real robot. Controllers come from :mod:`bayes_nea.control`: the energy swing-up with an
LQR stabiliser for the cart-pole and Furuta pendulum, computed-torque PD for arms.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from analysis.rollouts import Controller, QddFn, make_rollout_fn, num_draws
from bayes_nea import DEFAULT_DT, Robot, Trajectory
from bayes_nea.control import computed_torque_pd, swing_up_and_stabilize, wrap_angle

ErrorFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


def quantiles(x) -> dict | None:
    """``{"q5", "q50", "q95"}`` of the finite values of ``x`` across draws; None if none is."""
    x = np.asarray(x, float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return None
    return {f"q{int(p * 100)}": float(np.quantile(x, p)) for p in (0.05, 0.5, 0.95)}


class Task(NamedTuple):
    """What "working" means for a controller.

    Fields:
        name: short label, e.g. ``"swing-up"`` or ``"tracking"``.
        error_fn: pure ``(t, q, qd) -> e >= 0`` (scalar, units of ``unit``), jittable.
        tolerance: the controller has settled when ``e <= tolerance`` from then on.
        hold_time: it must stay settled for at least this long before the end (s).
        unit: unit of ``e`` for reports, e.g. ``"rad"``.
        respect_limits: a rollout that leaves a bounded joint's ``[lower, upper]`` fails
            (a cart hitting the end of its rail).
    """

    name: str
    error_fn: ErrorFn
    tolerance: float
    hold_time: float
    unit: str
    respect_limits: bool = True


class ControllerCheck(NamedTuple):
    """Closed-loop outcome per draw.

    Fields:
        success: (D,) settled within tolerance for at least ``hold_time`` before the end, finite,
            and within joint limits (if the task asks).
        settling_time: (D,) first time (s) after which the error stays within tolerance; inf if never.
        tracking_error: (D,) RMS error (task unit) over the run (``tracking``) or over the final
            ``hold_time`` (``swing-up``: how well it balances).
        final_error: (D,) error at the last step.
        max_effort: (D,) largest commanded ``|tau_d|`` (N or N m).
        limit_violation: (D,) the rollout left a bounded joint's limits.
        diverged: (D,) the rollout became non-finite.
        error: (D, T + 1) the task error along each rollout.
        success_rate: fraction of successful draws.
        task: the :class:`Task` name.
        trajectory: the closed-loop rollouts (``q``/``qd`` (D, T + 1, n), ``tau`` (D, T, n)).
    """

    success: np.ndarray
    settling_time: np.ndarray
    tracking_error: np.ndarray
    final_error: np.ndarray
    max_effort: np.ndarray
    limit_violation: np.ndarray
    diverged: np.ndarray
    error: np.ndarray
    success_rate: float
    task: str
    trajectory: Trajectory

    def summary(self) -> dict:
        """JSON-able summary: success rate and quantiles (5%, 50%, 95%) of the settled draws."""
        return {
            "task": self.task,
            "draws": int(self.success.shape[0]),
            "success_rate": self.success_rate,
            "settling_time_s": quantiles(self.settling_time[self.success]),
            "tracking_error": quantiles(self.tracking_error[np.isfinite(self.tracking_error)]),
            "limit_violation_rate": float(np.mean(self.limit_violation)),
            "diverged_rate": float(np.mean(self.diverged)),
        }


def swing_up_task(
    robot: Robot,
    *,
    angle_tol: float = 0.1,
    velocity_weight: float = 0.1,
    hold_time: float = 1.0,
) -> Task:
    """Swing-up and balance: ``e = sqrt(wrap(q_p - pi)^2 + (w qd_p)^2)`` (rad) for the pendulum p.

    Args:
        angle_tol: tolerance on ``e`` (rad). velocity_weight: ``w`` (s), weights the pendulum rate.
        hold_time: the pendulum must stay up this long before the end (s).
    """
    free = [i for i, a in enumerate(robot.actuated) if not a]
    if len(free) != 1:
        raise ValueError(
            f"robot {robot.name!r} has unactuated joints {[robot.joint_names[i] for i in free]}; "
            "a swing-up task needs exactly one (the pendulum), e.g. 'cartpole' or 'furuta'"
        )
    p = free[0]

    def error_fn(t, q, qd):
        del t
        return jnp.sqrt(wrap_angle(q[p] - jnp.pi) ** 2 + (velocity_weight * qd[p]) ** 2)

    return Task("swing-up", error_fn, float(angle_tol), float(hold_time), "rad")


def tracking_task(
    reference_fn: Callable[[jax.Array], tuple[jax.Array, jax.Array, jax.Array]],
    *,
    tolerance: float = 0.02,
    hold_time: float = 0.5,
) -> Task:
    """Reference tracking: ``e = ||q - q_r(t)||`` (rad or m) for ``reference_fn(t) -> (q_r, qd_r, qdd_r)``."""

    def error_fn(t, q, qd):
        del qd
        q_r = jnp.asarray(reference_fn(t)[0], q.dtype)
        return jnp.sqrt(jnp.sum((q - q_r) ** 2))

    return Task("tracking", error_fn, float(tolerance), float(hold_time), "rad")


def default_controller(
    robot: Robot, *, reference_fn=None, kp: float = 100.0, kd: float = 20.0
) -> Controller:
    """The provided controller for ``robot``, designed on its nominal model.

    Under-actuated pendulums (one unactuated joint): energy swing-up + LQR
    (:func:`bayes_nea.control.swing_up_and_stabilize`). Fully actuated arms: computed-torque PD
    (:func:`bayes_nea.control.computed_torque_pd`) on ``reference_fn`` with ``kp``, ``kd``.
    """
    if all(robot.actuated):
        if reference_fn is None:
            raise ValueError(
                f"robot {robot.name!r} is fully actuated: pass reference_fn(t) -> (q_r, qd_r, qdd_r) "
                "for computed-torque PD"
            )
        return computed_torque_pd(robot, reference_fn, kp=kp, kd=kd)
    # options tuned per built-in system live in bayes_nea.control.SWING_UP_DEFAULTS
    return swing_up_and_stabilize(robot)


def _settling(err: np.ndarray, tol: float, dt: float) -> np.ndarray:
    """(D,) first time after which ``err`` (D, T + 1) stays <= tol; inf if the last step is outside."""
    inside = err <= tol
    outside_after = np.flip(np.cumsum(np.flip(~inside, axis=1), axis=1), axis=1) > 0
    # index of first k with no "outside" at or after k
    settled_from = np.where(outside_after.any(axis=1), outside_after.sum(axis=1), 0)
    # outside_after is True up to the last outside index, so its count is that index + 1
    t = settled_from * dt
    return np.where(inside[:, -1], t, np.inf)


def evaluate_closed_loop(
    robot: Robot, traj: Trajectory, task: Task, *, dt: float
) -> ControllerCheck:
    """Score closed-loop rollouts ``traj`` (D leading axis) against ``task``."""
    q, qd = np.asarray(traj.q, float), np.asarray(traj.qd, float)
    t = np.asarray(traj.t, float)
    finite = np.isfinite(q).all(axis=2) & np.isfinite(qd).all(axis=2)
    err_fn = jax.jit(jax.vmap(jax.vmap(task.error_fn, in_axes=(0, 0, 0)), in_axes=(None, 0, 0)))
    err = np.asarray(
        err_fn(
            jnp.asarray(t),
            jnp.asarray(np.where(finite[..., None], q, 0.0)),
            jnp.asarray(np.where(finite[..., None], qd, 0.0)),
        ),
        dtype=float,
    )
    err = np.where(finite, err, np.inf)
    diverged = ~finite.all(axis=1)
    lower, upper = np.asarray(robot.lower), np.asarray(robot.upper)
    bounded = np.isfinite(lower) & np.isfinite(upper) & ~np.asarray(robot.continuous)
    with np.errstate(invalid="ignore"):
        outside = bounded & ((q < lower) | (q > upper))
    violation = outside.any(axis=(1, 2)) if task.respect_limits else np.zeros(q.shape[0], bool)
    settling = _settling(err, task.tolerance, dt)
    horizon = t[-1]
    success = (
        np.isfinite(settling) & (settling <= horizon - task.hold_time) & ~diverged & ~violation
    )
    hold = max(1, int(round(task.hold_time / dt)))
    with np.errstate(over="ignore", invalid="ignore"):
        window = err[:, -hold - 1 :] if task.name == "swing-up" else err
        tracking = np.sqrt(np.mean(window**2, axis=1))
        effort = np.abs(np.asarray(traj.tau, float)).max(axis=(1, 2))
    return ControllerCheck(
        success=success,
        settling_time=settling,
        tracking_error=tracking,
        final_error=err[:, -1],
        max_effort=effort,
        limit_violation=violation,
        diverged=diverged,
        error=err,
        success_rate=float(np.mean(success)),
        task=task.name,
        trajectory=traj,
    )


def check_controller(
    qdd_fn_of_draw: Callable[[Any], QddFn],
    draws: Any,
    controller: Controller,
    q0,
    qd0,
    *,
    robot: Robot,
    task: Task,
    duration: float,
    dt: float = DEFAULT_DT,
    batch_size: int | str | None = "auto",
    delay_steps: int = 0,
) -> ControllerCheck:
    """Run ``controller`` in closed loop on every posterior draw and score it against ``task``.

    Args:
        qdd_fn_of_draw: one draw -> forward dynamics ``(q, qd, tau_d) -> qdd`` (its actuator
            model included, so friction and motor effects of the draw act on the commands).
        draws: pytree with a leading draw axis (D, ...).
        controller: ``(t, q, qd) -> tau_d`` (n,), e.g. :func:`default_controller`.
        q0, qd0: (n,) or (D, n) start state.
        robot: for joint limits. task: :func:`swing_up_task` or :func:`tracking_task`.
        duration: seconds to simulate (``steps = round(duration / dt)``).
        delay_steps: actuation delay of the plant in steps (e.g. a simulated hardware-like
            system's, :func:`bayes_nea.delay_steps`).
        batch_size: draws per batch (:func:`analysis.rollouts.make_rollout_fn`).
    Returns:
        :class:`ControllerCheck` (per-draw success, settling time, tracking error, ...).
    """
    if duration <= task.hold_time:
        raise ValueError(
            f"duration {duration} s must exceed the task's hold_time {task.hold_time} s"
        )
    num_draws(draws)
    steps = int(round(duration / dt))
    run = make_rollout_fn(
        qdd_fn_of_draw,
        steps=steps,
        dt=dt,
        controller=controller,
        batch_size=batch_size,
        delay_steps=delay_steps,
    )
    traj = run(draws, q0, qd0)
    return evaluate_closed_loop(robot, traj, task, dt=dt)
