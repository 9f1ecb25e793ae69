"""Linear parametrisation of the dynamics: body and joint-torque regressors.

``tau = Y(q, qd, qdd) theta`` with theta the (10 n,) stack of per-body inertial parameters in joint
order (docs/conventions.md). Built from body regressors as in the linear-parametrisation notes: the
wrench of body j is ``f_j = A(v_j, a_j) theta_j``, carried to every ancestor i and projected on its
motion subspace: ``Y[i, j] = s_i^T X*_{i<-j} A_j`` for j in the subtree of i. The transport is
done on the (6, n) body Jacobians rather than on (6, 10) blocks: ``Y[i, j] = J_j[:, i]^T A_j``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bayes_nea import spatial as sp
from bayes_nea.dynamics import _base_acceleration, _kinematics, check_state
from bayes_nea.robot import Robot, RobotParams
from bayes_nea.tree import body_jacobians, resolve


def _inertia_regressor(v: jax.Array) -> jax.Array:
    """K(v) (6, 10) with ``I v = K(v) theta`` for a spatial inertia given by theta."""
    vl, w = v[:3], v[3:]
    z = jnp.zeros((), v.dtype)
    wx, wy, wz = w[0], w[1], w[2]
    L = jnp.stack(
        [
            jnp.stack([wx, wy, z, wz, z, z]),
            jnp.stack([z, wx, wy, z, wz, z]),
            jnp.stack([z, z, z, wx, wy, wz]),
        ]
    )
    top = jnp.concatenate([vl[:, None], sp.skew(w), jnp.zeros((3, 6), v.dtype)], axis=1)
    bottom = jnp.concatenate([jnp.zeros((3, 1), v.dtype), -sp.skew(vl), L], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


def body_regressor(v: jax.Array, a: jax.Array) -> jax.Array:
    """Body regressor A (6, 10): ``I a + v x* (I v) = A(v, a) theta`` (body frame).

    Args:
        v: (6,) body twist, a: (6,) body acceleration (gravity included as base acceleration).
    """
    Kv = _inertia_regressor(v)
    return _inertia_regressor(a) + sp.cross_force(v, Kv)


def joint_torque_regressor(
    robot: Robot,
    q: jax.Array,
    qd: jax.Array,
    qdd: jax.Array,
    *,
    params: RobotParams | None = None,
    gravity: jax.Array | None = None,
) -> jax.Array:
    """Joint-torque regressor Y (n, 10 n) with ``rnea(q, qd, qdd) = Y @ theta.reshape(-1)``.

    Only the kinematic parameters (``params.rpy``, ``params.xyz``) of ``params`` are used.
    Equals Pinocchio's ``computeJointTorqueRegressor`` for the same model.

    Raises:
        ValueError: q, qd or qdd not of shape (n,).
    """
    check_state(robot, q=q, qd=qd, qdd=qdd)
    params, dtype = resolve(robot, params, q, qd, qdd)
    n = robot.n
    R, p, S, va = _kinematics(robot, params, q, qd, qdd, _base_acceleration(robot, gravity, dtype))

    A = jnp.stack([body_regressor(v, a) for v, a in va])  # (n, 6, 10)
    J = body_jacobians(robot, R, p, S)  # (n, 6, n)
    # Y[i, block j] = s_i^T X*_{i<-j} A_j = (X_{j<-i} s_i)^T A_j = J_j[:, i]^T A_j
    return jnp.einsum("jki,jkl->ijl", J, A).reshape(n, 10 * n)
