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


def rk4_step(qdd_fn: QddFn, q, qd, tau, dt) -> tuple[jax.Array, jax.Array]:
    """One classical Runge-Kutta step of ``d/dt (q, qd) = (qd, f(q, qd, tau))``."""
    k1q, k1v = qd, qdd_fn(q, qd, tau)
    k2q, k2v = qd + 0.5 * dt * k1v, qdd_fn(q + 0.5 * dt * k1q, qd + 0.5 * dt * k1v, tau)
    k3q, k3v = qd + 0.5 * dt * k2v, qdd_fn(q + 0.5 * dt * k2q, qd + 0.5 * dt * k2v, tau)
    k4q, k4v = qd + dt * k3v, qdd_fn(q + dt * k3q, qd + dt * k3v, tau)
    q_next = q + dt / 6.0 * (k1q + 2 * k2q + 2 * k3q + k4q)
    qd_next = qd + dt / 6.0 * (k1v + 2 * k2v + 2 * k3v + k4v)
    return q_next, qd_next


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

    _, (qs, qds) = jax.lax.scan(step, (q0, qd0), tau)
    t = jnp.arange(tau.shape[0] + 1, dtype=dtype) * dt
    return Trajectory(t, _join(q0, qs), _join(qd0, qds), tau)


def integrate_closed_loop(
    qdd_fn: QddFn,
    controller: Controller,
    q0,
    qd0,
    steps: int,
    *,
    dt: float = DEFAULT_DT,
) -> Trajectory:
    """Closed-loop RK4 rollout: ``tau_k = controller(t_k, q_k, qd_k)``, held over the step.

    Args:
        controller: pure function ``(t, q, qd) -> tau`` (n,).
        steps: number of steps T (static).
    """
    dtype = jnp.result_type(float, q0, qd0)
    q0, qd0 = jnp.asarray(q0, dtype), jnp.asarray(qd0, dtype)

    def step(state, k):
        q, qd = state
        u = jnp.asarray(controller(k * dt, q, qd), dtype)
        nxt = rk4_step(qdd_fn, q, qd, u, dt)
        return nxt, (*nxt, u)

    _, (qs, qds, us) = jax.lax.scan(step, (q0, qd0), jnp.arange(steps, dtype=dtype))
    t = jnp.arange(steps + 1, dtype=dtype) * dt
    return Trajectory(t, _join(q0, qs), _join(qd0, qds), us)
