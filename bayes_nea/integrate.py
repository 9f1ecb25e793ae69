"""Fixed-step RK4 integration of ``qdd = f(q, qd, tau)`` with ``lax.scan`` (DiffNEA: RK4 at 250 Hz).

Torques are held constant over each step (zero-order hold, as a digital controller applies them).
Trajectories include the initial state: ``q`` and ``qd`` are (T + 1, n), ``tau`` is (T, n).
Everything is pure and vmappable, e.g. over posterior draws of ``params``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from bayes_nea.dynamics import aba
from bayes_nea.loops import scan
from bayes_nea.robot import Robot, RobotParams

DEFAULT_DT = 1.0 / 250.0
"""The DiffNEA paper's sampling period (250 Hz)."""

QddFn = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
Controller = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]


class Trajectory(NamedTuple):
    """A simulated trajectory.

    Fields:
        t: (T + 1,) time stamps (s).
        q: (T + 1, n) joint positions.
        qd: (T + 1, n) joint velocities.
        tau: (T, n) torques applied over ``[t_k, t_k+1)``.
    """

    t: jax.Array
    q: jax.Array
    qd: jax.Array
    tau: jax.Array


def forward_dynamics(
    robot: Robot,
    *,
    params: RobotParams | None = None,
    gravity: jax.Array | None = None,
    actuator: Callable[[jax.Array, jax.Array, jax.Array], jax.Array] | None = None,
) -> QddFn:
    """``qdd = aba(q, qd, actuator(tau, q, qd))`` as a function of ``(q, qd, tau)``.

    ``actuator`` maps commanded to joint torques (friction, motor models); identity if None.
    """

    def qdd_fn(q, qd, tau):
        if actuator is not None:
            tau = actuator(tau, q, qd)
        return aba(robot, q, qd, tau, params=params, gravity=gravity)

    return qdd_fn


_RK4_NODES = (0.5, 0.5, 1.0)
_RK4_WEIGHTS = (2.0, 2.0, 1.0)
"""Classical RK4 stages 2-4: node ``c`` (fraction of ``dt``) and weight (of ``dt / 6``)."""


def rk4_step(
    qdd_fn: QddFn, q, qd, tau, dt, qdd=None, *, scan_stages: bool = False
) -> tuple[jax.Array, jax.Array]:
    """One classical Runge-Kutta step of ``d/dt (q, qd) = (qd, f(q, qd, tau))``, ``tau`` held.

    Args:
        qdd_fn: ``(q, qd, tau) -> qdd``. q, qd, tau: (n,). dt: step (s).
        qdd: (n,) the first slope ``qdd_fn(q, qd, tau)`` if already known (e.g. recorded),
            saving one forward-dynamics call.
        scan_stages: run stages 2-4 as a ``lax.scan`` (one ``qdd_fn`` in the compiled graph
            instead of three: faster compiles of large graphs, the same arithmetic).
    Returns:
        ``(q_next, qd_next)`` (n,) each.
    """
    k1v = qdd_fn(q, qd, tau) if qdd is None else qdd

    def stage(carry, node_weight):
        kq_prev, kv_prev, acc_q, acc_v = carry
        c, w = node_weight
        kq = qd + c * dt * kv_prev
        kv = qdd_fn(q + c * dt * kq_prev, kq, tau)
        return (kq, kv, acc_q + w * kq, acc_v + w * kv), None

    carry = (qd, k1v, qd, k1v)
    if scan_stages:
        dtype = jnp.result_type(q, qd)
        nodes = (jnp.asarray(_RK4_NODES, dtype), jnp.asarray(_RK4_WEIGHTS, dtype))
        carry, _ = scan(stage, carry, nodes)
    else:
        for node_weight in zip(_RK4_NODES, _RK4_WEIGHTS, strict=True):
            carry, _ = stage(carry, node_weight)
    _, _, acc_q, acc_v = carry
    return q + dt / 6.0 * acc_q, qd + dt / 6.0 * acc_v


def _join(x0, xs):
    return jnp.concatenate([x0[None], xs], axis=0)


def integrate(qdd_fn: QddFn, q0, qd0, tau, *, dt: float = DEFAULT_DT) -> Trajectory:
    """Open-loop RK4 rollout under a torque sequence ``tau`` (T, n) (zeros: uncontrolled system).

    Args:
        qdd_fn: ``(q, qd, tau) -> qdd``, e.g. :func:`forward_dynamics`.
        q0, qd0: (n,) initial state. tau: (T, n) torques, held over each step.
    Returns:
        :class:`Trajectory` with T + 1 states.
    """
    tau = jnp.asarray(tau)
    if tau.ndim != 2 or tau.shape[1] != jnp.shape(q0)[0]:
        raise ValueError(f"tau has shape {tau.shape}, expected (T, {jnp.shape(q0)[0]})")
    dtype = jnp.result_type(float, q0, qd0, tau)
    q0, qd0, tau = (jnp.asarray(x, dtype) for x in (q0, qd0, tau))

    def step(state, u):
        nxt = rk4_step(qdd_fn, *state, u, dt)
        return nxt, nxt

    _, (qs, qds) = scan(step, (q0, qd0), tau)
    t = jnp.arange(tau.shape[0] + 1, dtype=dtype) * dt
    return Trajectory(t, _join(q0, qs), _join(qd0, qds), tau)


class ClosedLoopRun(NamedTuple):
    """A closed-loop rollout with what happened inside each step.

    Fields:
        trajectory: :class:`Trajectory`; its ``tau`` (T, n) are the commands ``tau_d``.
        qdd: (T, n) the forward dynamics at the start of each step under the applied torque
            (RK4's first slope: the true acceleration at each sample).
        applied: (T, n) the torque held over each step (delayed command plus action noise).
    """

    trajectory: Trajectory
    qdd: jax.Array
    applied: jax.Array


def run_closed_loop(
    qdd_fn: QddFn,
    controller: Controller,
    q0: jax.Array,
    qd0: jax.Array,
    steps: int,
    *,
    dt: float = DEFAULT_DT,
    delay_steps: int = 0,
    action_noise=None,
    scan_stages: bool = False,
) -> ClosedLoopRun:
    """The closed-loop RK4 stepper: ``tau_d,k = controller(t_k, q_k, qd_k)``; the plant receives
    ``tau_d,k-delay_steps + w_k`` (zero before the first command arrives), held over the step.

    Args:
        qdd_fn: ``(q, qd, tau) -> qdd``. controller: pure ``(t, q, qd) -> tau_d`` (n,).
        q0, qd0: (n,) start state. steps: number of steps T (static).
        delay_steps: actuation delay in whole steps (static, >= 0).
        action_noise: optional (T, n) ``w_k`` added to the applied torque (not recorded in
            ``tau``).
        scan_stages: see :func:`rk4_step`.
    Returns:
        :class:`ClosedLoopRun`.
    """
    delay_steps = int(delay_steps)
    if delay_steps < 0:
        raise ValueError(f"delay_steps must be >= 0, got {delay_steps}")
    dtype = jnp.result_type(float, q0, qd0)
    q0, qd0 = jnp.asarray(q0, dtype), jnp.asarray(qd0, dtype)
    n = q0.shape[0]
    noise = jnp.zeros((steps, 0), dtype) if action_noise is None else jnp.asarray(action_noise)
    if action_noise is not None and noise.shape != (steps, n):
        raise ValueError(
            f"action_noise has shape {noise.shape}, expected (steps, n) = {(steps, n)}"
        )

    def step(carry, inputs):
        q, qd, pending = carry
        k, w = inputs
        tau_d = jnp.asarray(controller(k * dt, q, qd), dtype)
        if delay_steps:
            applied = pending[0]
            pending = jnp.concatenate([pending[1:], tau_d[None]], axis=0)
        else:
            applied = tau_d
        if action_noise is not None:
            applied = applied + w
        qdd = qdd_fn(q, qd, applied)
        q1, qd1 = rk4_step(qdd_fn, q, qd, applied, dt, qdd, scan_stages=scan_stages)
        return (q1, qd1, pending), (q1, qd1, tau_d, qdd, applied)

    pending0 = jnp.zeros((delay_steps, n), dtype)
    ks = jnp.arange(steps, dtype=dtype)
    _, (qs, qds, us, qdds, applied) = scan(step, (q0, qd0, pending0), (ks, noise))
    t = jnp.arange(steps + 1, dtype=dtype) * dt
    return ClosedLoopRun(Trajectory(t, _join(q0, qs), _join(qd0, qds), us), qdds, applied)


def integrate_closed_loop(
    qdd_fn: QddFn,
    controller: Controller,
    q0,
    qd0,
    steps: int,
    *,
    dt: float = DEFAULT_DT,
    delay_steps: int = 0,
) -> Trajectory:
    """Closed-loop RK4 rollout: ``tau_k = controller(t_k, q_k, qd_k)``, held over the step
    (applied ``delay_steps`` steps late if given); :func:`run_closed_loop`'s trajectory.

    Args:
        controller: pure function ``(t, q, qd) -> tau`` (n,).
        steps: number of steps T (static).
    """
    return run_closed_loop(
        qdd_fn, controller, q0, qd0, steps, dt=dt, delay_steps=delay_steps
    ).trajectory
