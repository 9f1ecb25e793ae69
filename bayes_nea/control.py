"""Controllers: pure functions ``controller(t, q, qd) -> tau_d`` (n,) for closed-loop rollouts.

Every controller here is usable with :func:`bayes_nea.integrate_closed_loop` and is jittable and
vmappable; factories take the robot first and keyword-only options, and check them in Python.
Efforts are commanded joint efforts ``tau_d`` (N or N m), saturated at ``robot.effort_limit``
(0 marks an unactuated joint, which always gets 0).

Under-actuated swing-up (cart-pole, Furuta pendulum), pendulum angle 0 hanging down, +-pi upright:

- :func:`energy_swing_up`: Astrom & Furuta (2000), ``u = k (E_up - E) sign(dEdot/du)``: the
  pendulum energy ``E`` is pumped towards the upright level ``E_up``; ``dEdot/du`` is computed
  from the model (``grad_qd E . M^-1 B``), which for the cart-pole is ``-m l qd cos q / M``-like.
  A PD term keeps the actuated joint near its centre (the cart on its rail).
- :func:`lqr_stabilizer`: LQR on the model linearised at the upright (``jax.jacfwd`` of the forward
  dynamics, ``scipy.linalg.solve_continuous_are``).
- :func:`swing_up_and_stabilize`: swing-up far from the upright, LQR within ``switch_angle``.
- :func:`swing_up_protocol`: the DiffNEA data protocol: swing up for ``swing_time``, then zero
  effort for ``release_time`` (the pendulum falls freely), repeated.

Fully actuated arms: :func:`computed_torque_pd`, ``tau = ID(q, qd, qdd_ref + Kd e_d + Kp e)``, and
:func:`joint_impedance`, ``tau = ID(q_r, qd_r, qdd_r) + K e + D e_d``; ``ID`` is the rigid-body
``rnea`` or any identified inverse model.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from bayes_nea.dynamics import crba, potential_energy, rnea, total_energy
from bayes_nea.integrate import forward_dynamics
from bayes_nea.robot import REVOLUTE, Robot, RobotParams

Controller = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
ReferenceFn = Callable[[jax.Array], tuple[jax.Array, jax.Array, jax.Array]]

__all__ = [
    "Controller",
    "computed_torque_pd",
    "energy_swing_up",
    "joint_impedance",
    "lqr_stabilizer",
    "rigid_body_inverse",
    "pendulum_energy",
    "swing_up_and_stabilize",
    "swing_up_protocol",
    "upright_energy",
    "wrap_angle",
]


SWING_UP_DEFAULTS: dict[str, dict[str, float]] = {
    "cartpole": {"gain": 5.0, "center_kp": 30.0, "center_kd": 10.0},
    "furuta": {"gain": 5.0, "center_kp": 0.005, "center_kd": 0.001, "energy_ratio": 1.25},
}
"""Swing-up options tuned in simulation for the built-in systems (dimensionless energy gain,
centring PD in N/m, N s/m for the cart and N m/rad, N m s/rad for the Furuta arm). Used where
:func:`energy_swing_up` is called without them. The Furuta pendulum aims above the upright energy
(a quarter of the hanging-to-upright energy more): the arm's reaction drains the masked pendulum energy on the way up, and with a
target of E_up it never came within 0.5 rad of the top in simulation."""


def wrap_angle(x: jax.Array) -> jax.Array:
    """Angles wrapped to ``[-pi, pi)``."""
    return jnp.mod(x + jnp.pi, 2 * jnp.pi) - jnp.pi


def _pendulum_index(robot: Robot) -> int:
    """The single unactuated revolute joint of an under-actuated pendulum system."""
    free = [i for i, a in enumerate(robot.actuated) if not a]
    if (
        len(free) != 1
        or robot.joint_types[free[0]] != REVOLUTE
        or all(not a for a in robot.actuated)
    ):
        raise ValueError(
            f"robot {robot.name!r} has unactuated joints {[robot.joint_names[i] for i in free]}; "
            "swing-up controllers need exactly one unactuated revolute joint (the pendulum, "
            "effort_limit 0) and at least one actuated joint, e.g. 'cartpole' or 'furuta'"
        )
    return free[0]


def _masks(robot: Robot) -> tuple[np.ndarray, np.ndarray]:
    actuated = np.array(robot.actuated, dtype=bool)
    limit = np.where(actuated, np.abs(np.asarray(robot.effort_limit, dtype=float)), 0.0)
    return actuated, limit


def pendulum_energy(
    robot: Robot, q: jax.Array, qd: jax.Array, *, params: RobotParams | None = None
) -> jax.Array:
    """Energy of the pendulum alone: ``total_energy(q, qd * unactuated)`` (scalar, J).

    The actuated joints' velocities are zeroed, so for the cart-pole this is
    ``1/2 J_pivot qd_p^2 + m g l (1 - cos q_p)`` up to a constant (the cart moves horizontally, the
    Furuta arm in a horizontal plane, so their potential energy does not change).
    """
    free = jnp.asarray(~np.array(robot.actuated, dtype=bool), dtype=qd.dtype)
    return total_energy(robot, q, qd * free, params=params)


def upright_energy(robot: Robot, q: jax.Array, *, params: RobotParams | None = None) -> jax.Array:
    """Pendulum energy at rest upright (pendulum angle pi, other joints at ``q``) (scalar, J)."""
    p = _pendulum_index(robot)
    q_up = q.at[p].set(jnp.pi)
    return total_energy(robot, q_up, jnp.zeros_like(q), params=params)


def energy_swing_up(
    robot: Robot,
    *,
    gain: float | jax.Array | None = None,
    max_effort: float | jax.Array | None = None,
    energy_ratio: float | jax.Array | None = None,
    smoothing: float = 0.05,
    center_kp: float | jax.Array | None = None,
    center_kd: float | jax.Array | None = None,
    center: float | jax.Array = 0.0,
    params: RobotParams | None = None,
) -> Controller:
    """Energy-based swing-up (Astrom & Furuta 2000): ``u = u_max sat(k (E_up - E) / dE s(dEdot/du))``.

    ``E`` is :func:`pendulum_energy`, ``dE = E_up - E_down`` the energy from hanging to upright, so
    the gain ``k`` is dimensionless; ``sat`` clips to [-1, 1], and the effort ``u_max sat(.)`` plus
    a centring PD on the actuated joints is clipped to ``u_max``.

    Args:
        robot: an under-actuated pendulum (one unactuated revolute joint).
        gain: ``k``; default from :data:`SWING_UP_DEFAULTS` for built-in systems, else 5.
        max_effort: ``u_max`` on each actuated joint; defaults to the robot's ``effort_limit`` (and
            is never above it).
        energy_ratio: target energy ``E_down + ratio (E_up - E_down)`` (1: exactly the upright
            level; default per built-in system, else 1).
        smoothing: ``s(x) = tanh(x / (smoothing b_ref))`` with ``b_ref = |dEdot/du|`` at the bottom
            with unit pendulum speed; 0 gives the exact ``sign``.
        center_kp, center_kd: PD gains (N/m, N s/m or N m/rad, N m s/rad) pulling the actuated
            joints to ``center`` (keeps a cart on its rail); defaults per built-in system, else 0.
        params: model parameters used for the energy and ``dEdot/du`` (default: nominal).

    Returns:
        ``controller(t, q, qd) -> tau_d`` (n,), zero on unactuated joints.
    """
    defaults = SWING_UP_DEFAULTS.get(robot.name, {})
    gain = defaults.get("gain", 5.0) if gain is None else gain
    center_kp = defaults.get("center_kp", 0.0) if center_kp is None else center_kp
    center_kd = defaults.get("center_kd", 0.0) if center_kd is None else center_kd
    energy_ratio = defaults.get("energy_ratio", 1.0) if energy_ratio is None else energy_ratio
    p = _pendulum_index(robot)
    if smoothing < 0:
        raise ValueError(f"smoothing must be >= 0, got {smoothing}")
    actuated, limit = _masks(robot)
    sat = limit if max_effort is None else np.minimum(limit, np.abs(np.asarray(max_effort)))

    free_np = (~actuated).astype(float)

    def energy_terms(q, qd):
        """Pendulum energy E and dEdot/dtau (n,) = (free * M v) . M^-1 e_j, v = free * qd."""
        dtype = qd.dtype
        free = jnp.asarray(free_np, dtype)
        M = crba(robot, q, params=params)
        v = free * qd
        Mv = M @ v
        E = 0.5 * v @ Mv + potential_energy(robot, q, params=params)
        b = jnp.linalg.solve(M, free * Mv) * jnp.asarray(actuated, dtype)
        return E, b

    def edot_gain(q, qd):
        return energy_terms(q, qd)[1]

    q_ref = np.zeros(robot.n)
    qd_ref = np.zeros(robot.n)
    qd_ref[p] = 1.0
    b_ref = float(
        np.max(np.abs(np.asarray(jax.jit(edot_gain)(jnp.asarray(q_ref), jnp.asarray(qd_ref)))))
    )
    if b_ref == 0.0:
        raise ValueError(
            f"robot {robot.name!r}: the actuated joints do not move the pendulum's energy"
        )
    eps = smoothing * b_ref

    def controller(t, q, qd):
        del t
        dtype = jnp.result_type(float, q, qd)
        q, qd = jnp.asarray(q, dtype), jnp.asarray(qd, dtype)
        E, b = energy_terms(q, qd)
        E_up = potential_energy(robot, q.at[p].set(jnp.pi), params=params)
        E_down = potential_energy(robot, q.at[p].set(0.0), params=params)
        rel = (E_down + energy_ratio * (E_up - E_down) - E) / (E_up - E_down)
        s = jnp.sign(b) if smoothing == 0 else jnp.tanh(b / jnp.asarray(eps, dtype))
        center_pd = -center_kp * (q - center) - center_kd * qd
        lim = jnp.asarray(sat, dtype)
        u = lim * jnp.clip(gain * rel * s, -1.0, 1.0) + center_pd
        return jnp.where(jnp.asarray(actuated), jnp.clip(u, -lim, lim), 0.0).astype(dtype)

    return controller


def _linearise(qdd_fn, q0: np.ndarray, actuated: np.ndarray):
    """A (2n, 2n), B (2n, m) of ``d/dt (q, qd) = (qd, qdd_fn(q, qd, S u))`` at ``(q0, 0, 0)``."""
    n = q0.shape[0]
    S = np.eye(n)[:, actuated]

    def f(x, u):
        q, qd = x[:n], x[n:]
        return jnp.concatenate([qd, qdd_fn(q, qd, jnp.asarray(S) @ u)])

    x0 = jnp.concatenate([jnp.asarray(q0), jnp.zeros(n)])
    u0 = jnp.zeros(S.shape[1])
    A, B = jax.jit(jax.jacfwd(f, argnums=(0, 1)))(x0, u0)  # jitted: eager op-by-op is slower
    return np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64), S


def lqr_stabilizer(
    robot: Robot,
    *,
    Q: np.ndarray | None = None,
    R: np.ndarray | None = None,
    target: float | np.ndarray = 0.0,
    qdd_fn: Callable | None = None,
    params: RobotParams | None = None,
) -> Controller:
    """LQR around the upright: ``tau_d = S sat(-K (x - x_up))``, ``K = R^-1 B^T P``.

    ``P`` solves the continuous-time algebraic Riccati equation of the model linearised at
    ``q_up`` (pendulum at pi, actuated joints at ``target``), ``qd = 0`` (``jax.jacfwd``).
    The pendulum error is wrapped to ``[-pi, pi)``.

    Args:
        Q: (2n, 2n) state weight for ``x = (q, qd)``; default ``diag(1, .., 1, 0.01, .., 0.01)``
            (Bryson's rule with 1 m or rad and 10 m/s or rad/s; with the effort limits of the
            built-in systems, stiffer weights saturate the Furuta arm and lose the pendulum).
        R: (m, m) input weight for the m actuated joints; default ``diag(1 / effort_limit^2)``.
        target: position(s) of the actuated joints at the upright (scalar or (n,)).
        qdd_fn: plant model ``(q, qd, tau_d) -> qdd`` to linearise (e.g. with friction); default
            ``forward_dynamics(robot, params=params)``.

    Raises:
        ValueError: not a pendulum system, wrong weight shapes, or the Riccati solve failing.
    """
    p = _pendulum_index(robot)
    actuated, limit = _masks(robot)
    n, m = robot.n, int(actuated.sum())
    q_up = np.broadcast_to(np.asarray(target, dtype=float), (n,)).copy()
    q_up[p] = np.pi
    if qdd_fn is None:
        qdd_fn = forward_dynamics(robot, params=params)
    Q = np.diag([1.0] * n + [0.01] * n) if Q is None else np.asarray(Q, dtype=float)
    R = np.diag(1.0 / limit[actuated] ** 2) if R is None else np.asarray(R, dtype=float)
    if Q.shape != (2 * n, 2 * n) or R.shape != (m, m):
        raise ValueError(
            f"Q must be ({2 * n}, {2 * n}) and R ({m}, {m}) for robot {robot.name!r}; got "
            f"{Q.shape} and {R.shape}"
        )
    A, B, S = _linearise(qdd_fn, q_up, actuated)
    try:
        P = scipy.linalg.solve_continuous_are(A, B, Q, R)
    except (np.linalg.LinAlgError, ValueError) as err:
        raise ValueError(f"LQR: the Riccati equation has no stabilising solution ({err})") from err
    K = np.linalg.solve(R, B.T @ P)  # (m, 2n)
    wrap = np.zeros(n, dtype=bool)
    wrap[p] = True

    def controller(t, q, qd):
        del t
        dtype = jnp.result_type(float, q, qd)
        e = jnp.asarray(q, dtype) - jnp.asarray(q_up, dtype)
        e = jnp.where(jnp.asarray(wrap), wrap_angle(e), e)
        x = jnp.concatenate([e, jnp.asarray(qd, dtype)])
        u = -jnp.asarray(K, dtype) @ x
        lim = jnp.asarray(limit[actuated], dtype)
        return jnp.asarray(S, dtype) @ jnp.clip(u, -lim, lim)

    controller.gain = K  # (m, 2n), for inspection
    return controller


def swing_up_and_stabilize(
    robot: Robot,
    *,
    switch_angle: float = 0.3,
    swing_up: Controller | None = None,
    stabilizer: Controller | None = None,
    params: RobotParams | None = None,
    **swing_up_options,
) -> Controller:
    """Energy swing-up far from the upright, LQR within ``switch_angle`` (rad) of it.

    Args:
        switch_angle: hand over to the stabiliser when ``|wrap(q_p - pi)| < switch_angle``.
        swing_up, stabilizer: controllers to use; defaults ``energy_swing_up(robot,
            **swing_up_options)`` and ``lqr_stabilizer(robot)``.
    """
    p = _pendulum_index(robot)
    if not 0 < switch_angle < np.pi:
        raise ValueError(f"switch_angle must be in (0, pi), got {switch_angle}")
    swing = swing_up or energy_swing_up(robot, params=params, **swing_up_options)
    stab = stabilizer or lqr_stabilizer(robot, params=params)

    def controller(t, q, qd):
        near = jnp.abs(wrap_angle(q[p] - jnp.pi)) < switch_angle
        return jnp.where(near, stab(t, q, qd), swing(t, q, qd))

    return controller


def swing_up_protocol(
    robot: Robot,
    *,
    swing_time: float | jax.Array = 8.0,
    release_time: float | jax.Array = 4.0,
    offset: float | jax.Array = 0.0,
    controller: Controller | None = None,
    params: RobotParams | None = None,
    **swing_up_options,
) -> Controller:
    """The DiffNEA protocol: swing up (and balance) for ``swing_time`` s, then zero effort for
    ``release_time`` s so the pendulum falls freely, repeated (period ``swing_time + release_time``).

    Args:
        offset: time shift (s) of the cycle (``phase = (t + offset) mod period``).
        controller: what to run in the swing phase; default ``swing_up_and_stabilize(robot,
            **swing_up_options)``.
    """
    if isinstance(swing_time, float | int) and isinstance(release_time, float | int):
        if swing_time <= 0 or release_time < 0:
            raise ValueError(
                f"swing_time must be > 0 and release_time >= 0, got {swing_time}, {release_time}"
            )
    active = controller or swing_up_and_stabilize(robot, params=params, **swing_up_options)
    period = swing_time + release_time

    def protocol(t, q, qd):
        phase = jnp.mod(t + offset, period)
        u = active(t, q, qd)
        return jnp.where(phase < swing_time, u, jnp.zeros_like(u))

    return protocol


InverseDynamics = Callable[[jax.Array, jax.Array, jax.Array], jax.Array]
"""``(q, qd, qdd) -> tau_d`` (n,): the model a controller inverts (rigid body plus actuator)."""


def _gains(robot: Robot, kp, kd) -> tuple[np.ndarray, np.ndarray]:
    kp_a = np.broadcast_to(np.asarray(kp, dtype=float), (robot.n,))
    kd_a = np.broadcast_to(np.asarray(kd, dtype=float), (robot.n,))
    if np.any(kp_a < 0) or np.any(kd_a < 0) or not np.all(np.isfinite([*kp_a, *kd_a])):
        raise ValueError(f"kp and kd must be finite and non-negative, got {kp}, {kd}")
    return kp_a, kd_a


def _saturation(robot: Robot, saturate: bool):
    limit = np.abs(np.asarray(robot.effort_limit, dtype=float))
    limit = np.where(limit == 0, np.inf, limit) if saturate else np.full(robot.n, np.inf)
    return lambda tau: jnp.clip(tau, -jnp.asarray(limit, tau.dtype), jnp.asarray(limit, tau.dtype))


def rigid_body_inverse(
    robot: Robot, params: RobotParams | None = None, gravity: jax.Array | None = None
) -> InverseDynamics:
    """``(q, qd, qdd) -> rnea(robot, q, qd, qdd)`` with ``params`` (default: nominal)."""
    return lambda q, qd, qdd: rnea(robot, q, qd, qdd, params=params, gravity=gravity)


def computed_torque_pd(
    robot: Robot,
    reference_fn: ReferenceFn,
    *,
    kp: float | np.ndarray,
    kd: float | np.ndarray,
    params: RobotParams | None = None,
    gravity: jax.Array | None = None,
    saturate: bool = True,
    inverse_dynamics: InverseDynamics | None = None,
) -> Controller:
    """Computed-torque (inverse-dynamics) PD: ``tau = ID(q, qd, qdd_r + Kd (qd_r - qd) + Kp (q_r - q))``.

    With an exact model the tracking error obeys ``e'' + Kd e' + Kp e = 0`` (Spong et al. 2020,
    ch. 8); critical damping is ``kd = 2 sqrt(kp)``.

    Args:
        reference_fn: ``t -> (q_r, qd_r, qdd_r)``, each (n,).
        kp, kd: scalar or (n,) gains (1/s^2, 1/s), non-negative.
        params, gravity: the rigid-body model ``ID = rnea`` (default: nominal, robot gravity).
        saturate: clip to ``robot.effort_limit`` (infinite limits leave it unclipped).
        inverse_dynamics: ``ID`` itself (e.g. an identified model's rigid body + actuator inverse,
            ``models.BayesianModel.tau_fn``); replaces ``params`` and ``gravity``.
    """
    kp_a, kd_a = _gains(robot, kp, kd)
    clip = _saturation(robot, saturate)
    inverse = inverse_dynamics or rigid_body_inverse(robot, params, gravity)

    def controller(t, q, qd):
        dtype = jnp.result_type(float, q, qd)
        q_r, qd_r, qdd_r = (jnp.asarray(x, dtype) for x in reference_fn(t))
        a = qdd_r + jnp.asarray(kd_a, dtype) * (qd_r - qd) + jnp.asarray(kp_a, dtype) * (q_r - q)
        return clip(inverse(q, qd, a))

    return controller


def joint_impedance(
    robot: Robot,
    reference_fn: ReferenceFn,
    *,
    stiffness: float | np.ndarray,
    damping: float | np.ndarray,
    inverse_dynamics: InverseDynamics | None = None,
    saturate: bool = True,
) -> Controller:
    """Joint impedance with inverse-dynamics feed-forward on the reference:
    ``tau = ID(q_r, qd_r, qdd_r) + K (q_r - q) + D (qd_r - qd)``.

    Args:
        reference_fn: ``t -> (q_r, qd_r, qdd_r)``, each (n,).
        stiffness, damping: scalar or (n,) ``K`` (N m/rad or N/m) and ``D`` (N m s/rad or N s/m).
        inverse_dynamics: the feed-forward model ``ID(q, qd, qdd) -> tau_d`` (default: ``rnea`` of
            the nominal model).
        saturate: clip to ``robot.effort_limit``.
    """
    k_a, d_a = _gains(robot, stiffness, damping)
    clip = _saturation(robot, saturate)
    inverse = inverse_dynamics or rigid_body_inverse(robot)

    def controller(t, q, qd):
        dtype = jnp.result_type(float, q, qd)
        q_r, qd_r, qdd_r = (jnp.asarray(x, dtype) for x in reference_fn(t))
        feedback = jnp.asarray(k_a, dtype) * (q_r - q) + jnp.asarray(d_a, dtype) * (qd_r - qd)
        return clip(inverse(q_r, qd_r, qdd_r) + feedback)

    return controller
