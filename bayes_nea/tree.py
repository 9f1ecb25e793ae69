"""The tree traversals, written once and reused by every algorithm.

The tree is unrolled at trace time (``robot.parents`` is static), so each traversal is a Python
loop over joints that emits a fixed XLA graph: no gathers, no padding to a maximum depth.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bayes_nea import spatial_pairs as sv
from bayes_nea.loops import one_function
from bayes_nea.robot import Robot, RobotParams


def traced_once(algorithm: Callable) -> Callable:
    """``algorithm(robot, ...)`` as a nested ``jax.jit`` with the robot static.

    Inside a caller's ``jit``, ``grad`` or ``vmap`` JAX then traces (and lowers) the algorithm
    once per robot, dtypes and shapes, and reuses it at every call site, e.g. the four forward
    dynamics of an RK4 step; XLA inlines it, so the compiled program is the same. The element by
    element algorithms are long jaxprs: this keeps their tracing cost off every call
    (docs/dynamics-speed.md).

    A call from outside any transformation on one state (concrete arrays, ``q`` of shape (n,))
    runs a second program, :func:`bayes_nea.loops.one_function` of the algorithm: one compiled
    function instead of a few hundred kernels, for users who evaluate single states (a
    controller's loop); measured in docs/dynamics-speed.md. Under ``jit``, ``grad`` or ``vmap``
    the arguments are tracers and the kernel-by-kernel program is used.
    """
    jitted = jax.jit(algorithm, static_argnums=0)

    def as_one_function(robot, *args, **kwargs):
        n = len(args)  # one_function takes positional arguments: the keywords go as one dict
        return one_function(lambda *a: algorithm(robot, *a[:n], **a[n]), *args, kwargs)

    single = jax.jit(as_one_function, static_argnums=0)

    @functools.wraps(algorithm)
    def call(robot, *args, **kwargs):
        if _concrete_single_state(args, kwargs):
            return single(robot, *args, **kwargs)
        return jitted(robot, *args, **kwargs)

    return call


def _concrete_single_state(args: tuple, kwargs: dict) -> bool:
    """Whether the state arguments hold one state (``q`` of shape (n,)) and no argument is traced
    (the call is outside ``jit``, ``grad``, ``vmap``, ...). Numpy arrays, the usual single-state
    input, are recognised first: this runs on every call."""
    if not args or np.ndim(args[0]) != 1:
        return False
    tracer = jax.core.Tracer
    for x in args:
        if type(x) is not np.ndarray and isinstance(x, tracer):
            return False
    return not kwargs or not any(isinstance(x, tracer) for x in jax.tree.leaves(kwargs))


def resolve(robot: Robot, params: RobotParams | None, *arrays) -> tuple[RobotParams, Any]:
    """The parameters to use and the floating dtype of the state ``arrays``.

    ``params=None`` means the robot's nominal parameters, cast to the state's dtype so that float32
    states give float32 results. Given parameters become JAX arrays (numpy entries would otherwise
    pass for the static constants of ``spatial_pairs``).
    """
    dtype = jnp.result_type(float, *arrays)
    if params is None:
        return robot.nominal.astype(dtype), dtype
    return RobotParams(*(jnp.asarray(x) for x in params)), dtype


def joint_transforms(
    robot: Robot, params: RobotParams, q: jax.Array, *, staged: bool = False
) -> list[tuple[jax.Array, jax.Array]]:
    """``T_{parent, i}(q) = T_O,i T_q,i(q_i)`` of every joint: a list of ``(R, p)`` in lanes.

    ``T_O`` from the placement parameters (DiffNEA eq. 4), then the joint motion about / along its
    static axis (``spatial_pairs.joint_transform``). ``staged``: each transform is one stage of
    the compiled algorithm (``spatial_pairs.stage``), as the dynamics algorithms use them.
    """
    out = []
    for i, (kind, axis) in enumerate(zip(robot.joint_types, robot.axes, strict=True)):
        R_O, p_O = sv.rpy_matrix(params.rpy[i]), sv.vec(params.xyz[i])
        T = sv.joint_transform(kind, np.asarray(axis, dtype=float), R_O, p_O, q[i])
        out.append(sv.stage(T) if staged else T)
    return out


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


def body_jacobians(robot: Robot, T: list, S: list) -> list[dict[int, Any]]:
    """The non-zero columns of every body Jacobian: ``J[j][i] = X_{j<-i} s_i`` (a pair).

    Body j's twist in its own frame is ``v_j = sum_i J[j][i] qd_i`` over j and its ancestors i;
    one forward pass, ``J_j = Ad_{T_{parent,j}^-1} J_parent + s_j e_j^T``. ``T``: the joint
    transforms, ``S``: motion subspaces (pairs of static lanes).
    """

    def visit(j, J_parent):
        J = {j: S[j]}
        for i, x in (J_parent or {}).items():
            J[i] = sv.inv_act_motion(*T[j], x)
        return sv.stage(J)

    return forward_pass(robot, visit, None)


def subtree_mask(robot: Robot) -> np.ndarray:
    """(n, n) boolean: ``mask[i, j]`` is True iff body j is in the subtree rooted at body i."""
    mask = np.zeros((robot.n, robot.n), dtype=bool)
    for j in range(robot.n):
        for i in robot.ancestors(j):
            mask[i, j] = True
    return mask
