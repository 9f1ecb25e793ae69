"""Linear parametrisation of the dynamics: body and joint-torque regressors.

``tau = Y(q, qd, qdd) theta`` with theta the (10 n,) stack of per-body inertial parameters in joint
order (docs/conventions.md). Built from body regressors as in the linear-parametrisation notes: the
wrench of body j is ``f_j = A(v_j, a_j) theta_j``, carried to every ancestor i and projected on its
motion subspace: ``Y[i, j] = s_i^T X*_{i<-j} A_j`` for j in the subtree of i. The transport is
done on the body Jacobians' columns rather than on (6, 10) blocks: ``Y[i, j] = J_j[:, i]^T A_j``,
for each body j one (k, 6) x (6, 10) product over its k ancestors (:func:`rows_times`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from bayes_nea import spatial_pairs as sv
from bayes_nea.dynamics import _base_acceleration, _kinematics, check_state
from bayes_nea.robot import Robot, RobotParams
from bayes_nea.tree import body_jacobians, resolve, traced_once


def body_regressor(v: jax.Array, a: jax.Array) -> jax.Array:
    """Body regressor A (6, 10): ``I a + v x* (I v) = A(v, a) theta`` (body frame).

    Args:
        v: (6,) body twist, a: (6,) body acceleration (gravity included as base acceleration).
    """
    rows = sv.body_regressor((sv.vec(v[:3]), sv.vec(v[3:])), (sv.vec(a[:3]), sv.vec(a[3:])))
    return jnp.stack([sv.array(row, jnp.result_type(v, a)) for row in rows])


def rows_times(X: jax.Array, A: jax.Array) -> jax.Array:
    """``X A`` for ``X`` (k, 6) and ``A`` (6, m), as six multiply-adds of rows (no dot)."""
    return sum(X[:, r : r + 1] * A[r : r + 1, :] for r in range(1, 6)) + X[:, 0:1] * A[0:1, :]


@traced_once
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
    T, S, va = _kinematics(robot, params, q, qd, qdd, _base_acceleration(robot, gravity, dtype))
    J = body_jacobians(robot, T, S)
    # Y[i, block j] = s_i^T X*_{i<-j} A_j = (X_{j<-i} s_i)^T A_j = J[j][i]^T A_j
    zero = jnp.zeros(10, dtype)
    blocks = {}
    for j, (v, a) in enumerate(va):
        A = jnp.stack([sv.array(row, dtype) for row in sv.stage(sv.body_regressor(v, a))])
        ancestors = list(J[j])
        X = jnp.stack([sv.array((*J[j][i][0], *J[j][i][1]), dtype) for i in ancestors])  # (k, 6)
        Y_j = sv.stage(rows_times(X, A))  # (k, 10)
        blocks.update({(i, j): Y_j[r] for r, i in enumerate(ancestors)})
    flat = [blocks.get((i, j), zero) for i in range(n) for j in range(n)]
    return jnp.concatenate(flat).reshape(n, 10 * n)  # one pass over the output
