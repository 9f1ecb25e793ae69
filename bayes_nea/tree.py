"""The tree traversals, written once and reused by every algorithm.

The tree is unrolled at trace time (``robot.parents`` is static), so each traversal is a Python
loop over joints that emits a fixed XLA graph: no gathers, no padding to a maximum depth.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_nea.robot import PRISMATIC, REVOLUTE, Robot, RobotParams
from bayes_nea.spatial import inv_act_motion, rpy_to_matrix


def resolve(robot: Robot, params: RobotParams | None, *arrays) -> tuple[RobotParams, Any]:
    """The parameters to use and the floating dtype of the state ``arrays``.

    ``params=None`` means the robot's nominal parameters, cast to the state's dtype so that float32
    states give float32 results.
    """
    dtype = jnp.result_type(float, *arrays)
    if params is None:
        params = robot.nominal.astype(dtype)
    return params, dtype


def placement_transforms(params: RobotParams) -> tuple[jax.Array, jax.Array]:
    """Fixed placements ``T_O`` of all joints: R (n, 3, 3), p (n, 3) (DiffNEA eq. 4)."""
    return jax.vmap(rpy_to_matrix)(params.rpy), params.xyz


def joint_transforms(
    robot: Robot, params: RobotParams, q: jax.Array
) -> tuple[jax.Array, jax.Array]:
    """``T_{parent, i}(q) = T_O,i T_q,i(q_i)`` for all joints at once: R (n, 3, 3), p (n, 3).

    Revolute joints rotate about their axis (Rodrigues), prismatic joints translate along it.
    """
    R_O, p_O = placement_transforms(params)
    axes = np.asarray(robot.axes, dtype=R_O.dtype)  # static (n, 3)
    revolute = np.array([t == REVOLUTE for t in robot.joint_types])
    prismatic = np.array([t == PRISMATIC for t in robot.joint_types])
    angle = jnp.where(revolute, q, 0.0)
    K = _skew_batch(axes)  # (n, 3, 3)
    s, c = jnp.sin(angle)[:, None, None], jnp.cos(angle)[:, None, None]
    R_q = jnp.eye(3, dtype=R_O.dtype)[None] + s * K + (1 - c) * (K @ K)
    p_q = jnp.where(prismatic[:, None], axes * q[:, None], 0.0)
    R = R_O @ R_q
    p = p_O + jnp.einsum("nij,nj->ni", R_O, p_q)
    return R, p


def _skew_batch(a: np.ndarray) -> np.ndarray:
    z = np.zeros(len(a), a.dtype)
    return np.stack(
        [
            np.stack([z, -a[:, 2], a[:, 1]], -1),
            np.stack([a[:, 2], z, -a[:, 0]], -1),
            np.stack([-a[:, 1], a[:, 0], z], -1),
        ],
        axis=-2,
    )


def forward_pass(robot: Robot, visit: Callable[[int, Any], Any], base: Any) -> list[Any]:
    """Root-to-leaves pass: ``out[i] = visit(i, out[parent(i)])`` with ``base`` for the root.

    Returns the list of per-body outputs in joint order.
    """
    out: list[Any] = []
    for i, parent in enumerate(robot.parents):
        out.append(visit(i, base if parent < 0 else out[parent]))
    return out


def backward_pass(
    robot: Robot, visit: Callable[[int, Any], tuple[Any, Any]], init: list[Any]
) -> list[Any]:
    """Leaves-to-root pass with accumulation into parents.

    ``visit(i, acc[i]) -> (out_i, to_parent)``, called once every child of ``i`` has added its
    ``to_parent`` into ``acc[i]`` (``acc`` starts as ``init``). Returns ``[out_i]`` in joint order.
    """
    acc = list(init)
    out: list[Any] = [None] * robot.n
    for i in reversed(range(robot.n)):
        out[i], to_parent = visit(i, acc[i])
        parent = robot.parents[i]
        if parent >= 0:
            acc[parent] = jax.tree_util.tree_map(jnp.add, acc[parent], to_parent)
    return out


def body_jacobians(robot: Robot, R: jax.Array, p: jax.Array, S: list[jax.Array]) -> jax.Array:
    """Body Jacobians J (n, 6, n): body i's twist in its own frame is ``v_i = J[i] @ qd``.

    ``J_i = Ad_{T_{parent,i}^-1} J_parent + s_i e_i^T`` (one forward pass; column k is joint k's
    motion subspace seen from body i, zero unless k is an ancestor of i).
    """
    n = robot.n
    unit = np.eye(n, dtype=R.dtype)

    def visit(i, J_parent):
        J = jnp.outer(S[i], unit[i])
        return J if J_parent is None else J + inv_act_motion(R[i], p[i], J_parent)

    return jnp.stack(forward_pass(robot, visit, None))


def subtree_mask(robot: Robot) -> np.ndarray:
    """(n, n) boolean: ``mask[i, j]`` is True iff body j is in the subtree rooted at body i."""
    mask = np.zeros((robot.n, robot.n), dtype=bool)
    for j in range(robot.n):
        for i in robot.ancestors(j):
            mask[i, j] = True
    return mask
