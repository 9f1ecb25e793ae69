"""Kinematic parameterisations of the DiffNEA appendix (Lutter et al. 2021, "Kinematics").

A joint's transform is ``T(q) = T_O T_q(q)`` (docs/conventions.md): a fixed placement ``T_O`` in the
parent body's frame, parameterised by RPY angles and a translation (DiffNEA eq. 4; the angles are
unconstrained because they only enter trigonometric functions), followed by the joint motion.

The no-Kin DiffNEA model assumes every joint moves about (or along) the z axis of its own frame,
``T_q,r = [Rz(q), 0; 0, 1]``, ``T_q,p = [1, q e_z; 0, 1]``, ``s_r = [0; e_z]``, ``s_p = [e_z; 0]``.
Any robot can be put in that form without changing its dynamics: :func:`z_axis_form` rotates each
joint frame so that its axis becomes z and re-expresses the placements and body inertias.

Also here: the exponential and logarithm maps of SO(3) on rotation vectors (exponential
coordinates), with small-angle branches that keep values and gradients finite; the DiffNEA
inertia parameterisation uses them for the principal axes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bayes_nea import spatial as sp
from bayes_nea.robot import PRISMATIC, REVOLUTE, Robot, RobotParams

Array = jax.Array

Z_AXIS = (0.0, 0.0, 1.0)


# --- SO(3) exponential coordinates ----------------------------------------------------------


def so3_exp(r: Array) -> Array:
    """Rotation matrix of the rotation vector ``r`` (3,) -> (3, 3): ``R = exp(S(r))``.

    Rodrigues: ``R = 1 + sin(t)/t S(r) + (1 - cos t)/t^2 S(r)^2`` with ``t = |r|``; below a
    dtype-aware threshold the Taylor series is used, so ``grad`` is finite at ``r = 0``.
    """
    r = jnp.asarray(r)
    t2 = r @ r
    small = t2 < jnp.sqrt(jnp.finfo(r.dtype).eps)
    t2_safe = jnp.where(small, jnp.ones_like(t2), t2)
    t = jnp.sqrt(t2_safe)
    a = jnp.where(small, 1 - t2 / 6 + t2 * t2 / 120, jnp.sin(t) / t)
    b = jnp.where(small, 0.5 - t2 / 24 + t2 * t2 / 720, (1 - jnp.cos(t)) / t2_safe)
    K = sp.skew(r)
    return jnp.eye(3, dtype=K.dtype) + a * K + b * (K @ K)


def so3_log(R: Array) -> Array:
    """Rotation vector (3,) of a rotation matrix (3, 3), angle in ``[0, pi]``; inverse of :func:`so3_exp`.

    Uses ``sin``/``cos`` of the angle from the skew and symmetric parts (``atan2``), accurate over
    the whole range; near ``pi`` the axis is taken from the symmetric part ``(R + R^T)/2 - cos(t) 1
    = (1 - cos t) u u^T`` (its largest column), the sign fixed by the skew part.
    """
    R = jnp.asarray(R)
    w = jnp.stack([R[2, 1] - R[1, 2], R[0, 2] - R[2, 0], R[1, 0] - R[0, 1]])  # 2 sin(t) u
    ww = w @ w
    eps = jnp.finfo(R.dtype).eps
    small = ww < eps  # sin(t) below ~sqrt(eps) / 2
    s = 0.5 * jnp.sqrt(jnp.where(small, jnp.ones_like(ww), ww))
    c = 0.5 * (jnp.trace(R) - 1)
    t = jnp.arctan2(s, c)
    # generic and small angles: r = t / (2 sin t) w, with t / sin t = 1 + t^2 / 6 + ...
    factor = jnp.where(small, 0.5 + ww / 48, 0.5 * t / s)
    r_generic = factor * w
    # near pi: axis from the symmetric part
    B = 0.5 * (R + R.T) - c * jnp.eye(3, dtype=R.dtype)
    k = jnp.argmax(jnp.diagonal(B))
    col = B[:, k]
    u = col / jnp.sqrt(jnp.maximum(col @ col, eps))
    sign = jnp.where(u @ w < 0, -1.0, 1.0).astype(R.dtype)
    t_pi = jnp.arctan2(0.5 * jnp.sqrt(jnp.maximum(ww, eps * eps)), c)
    r_pi = sign * t_pi * u
    near_pi = c < -0.5
    return jnp.where(near_pi, r_pi, r_generic)


# --- joint placements (DiffNEA eq. 4) ----------------------------------------------------------


def joint_placement(rpy: Array, xyz: Array) -> tuple[Array, Array]:
    """Fixed placement ``T_O = [Rz(yaw) Ry(pitch) Rx(roll), p_k; 0, 1]`` (DiffNEA eq. 4).

    Args:
        rpy: (3,) roll, pitch, yaw (rad), unconstrained.
        xyz: (3,) translation ``p_k`` of the joint frame in the parent body's frame (m).

    Returns:
        ``(R, p)``: rotation (3, 3) and translation (3,) of ``T_parent_joint``.
    """
    _check_shape("rpy", rpy, (3,))
    _check_shape("xyz", xyz, (3,))
    return sp.rpy_to_matrix(rpy), jnp.asarray(xyz)


def placement_parameters(R: Array, p: Array) -> tuple[Array, Array]:
    """Inverse of :func:`joint_placement`: ``(rpy (3,), xyz (3,))`` with pitch in [-pi/2, pi/2]."""
    _check_shape("R", R, (3, 3))
    _check_shape("p", p, (3,))
    return sp.matrix_to_rpy(R), jnp.asarray(p)


def z_joint_transform(
    rpy: Array, xyz: Array, q: Array, kind: str = REVOLUTE
) -> tuple[Array, Array]:
    """``T(q) = T_O T_q(q)`` of a no-Kin DiffNEA joint whose axis is the z axis of its frame.

    ``T_q,r = [Rz(q), 0; 0, 1]`` (revolute), ``T_q,p = [1, q e_z; 0, 1]`` (prismatic), DiffNEA
    appendix, "Kinematics".

    Args:
        rpy, xyz: (3,) placement parameters (see :func:`joint_placement`).
        q: () joint position (rad or m).
        kind: ``"revolute"`` or ``"prismatic"``.

    Returns:
        ``(R, p)`` of ``T_parent_child(q)``: (3, 3), (3,).

    Raises:
        ValueError: unknown ``kind`` or wrong shapes.
    """
    if kind not in (REVOLUTE, PRISMATIC):
        raise ValueError(f"unknown joint kind {kind!r}; valid kinds are {(REVOLUTE, PRISMATIC)}")
    R_O, p_O = joint_placement(rpy, xyz)
    q = jnp.asarray(q, dtype=R_O.dtype)
    if jnp.shape(q) != ():
        raise ValueError(f"q has shape {jnp.shape(q)}, expected () (one joint position)")
    if kind == REVOLUTE:
        return R_O @ sp.rot_z(q), p_O
    return R_O, p_O + q * R_O[:, 2]


# --- the no-Kin (all axes z) form of a robot --------------------------------------------------


def _rotation_z_to(axis: np.ndarray) -> np.ndarray:
    """A rotation ``R_a`` (3, 3) with ``R_a e_z = axis`` (the smallest one; pi about x if -z)."""
    a = np.asarray(axis, dtype=float)
    a = a / np.linalg.norm(a)
    ez = np.array(Z_AXIS)
    c = float(ez @ a)
    if c < -1 + 1e-12:
        return np.diag([1.0, -1.0, -1.0])
    v = np.cross(ez, a)
    K = np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])
    return np.eye(3) + K + K @ K / (1 + c)


def _rotate_theta(theta: Array, R: Array) -> Array:
    """theta (10,) of the same body expressed in a frame rotated by ``R`` (x_new = R^T x_old)."""
    h = R.T @ theta[1:4]
    I = R.T @ sp.rotational_inertia(theta) @ R
    return jnp.stack([theta[0], *h, I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]])


def z_axis_params(robot: Robot, params: RobotParams | None = None) -> RobotParams:
    """Parameters of :func:`z_axis_form` for given ``params`` (jit- and grad-able in ``params``).

    With ``R_i`` the rotation taking ``e_z`` to joint i's axis ``a_i`` (static, from the robot's
    axes), joint i's frame is replaced by ``i' = i R_i``: ``Rot(a_i, q) = R_i Rz(q) R_i^T``, so
    ``T_O,i Rot(a_i, q) = (T_O,i R_i) Rz(q) R_i^T``. The new placement is
    ``T_{parent', i'} = R_parent^T T_O,i R_i`` and body i's inertia is rotated by ``R_i^T``.

    Args:
        robot: any robot.
        params: its parameters; ``None`` for the nominal ones.

    Returns:
        :class:`RobotParams` for the robot returned by :func:`z_axis_form`.
    """
    if params is None:
        params = robot.params(jnp.float64 if jax.config.jax_enable_x64 else jnp.float32)
    dtype = jnp.result_type(params.theta)
    Ra = [jnp.asarray(_rotation_z_to(a), dtype=dtype) for a in robot.axes]
    thetas, rpys, xyzs = [], [], []
    for i, parent in enumerate(robot.parents):
        R_O = sp.rpy_to_matrix(params.rpy[i])
        p_O = params.xyz[i]
        Rp = jnp.eye(3, dtype=dtype) if parent < 0 else Ra[parent]
        rpys.append(sp.matrix_to_rpy(Rp.T @ R_O @ Ra[i]))
        xyzs.append(Rp.T @ p_O)
        thetas.append(_rotate_theta(params.theta[i], Ra[i]))
    return RobotParams(jnp.stack(thetas), jnp.stack(rpys), jnp.stack(xyzs))


def z_axis_form(robot: Robot) -> Robot:
    """An equivalent robot whose joint axes are all ``(0, 0, 1)`` (the no-Kin DiffNEA form).

    Same joints, kinds, limits and joint coordinates ``q`` (the same sign and zero), so ``rnea``,
    ``aba`` and ``crba`` of both robots agree for every state; only joint frames are rotated about
    their origins (see :func:`z_axis_params`), so body-frame quantities (twists, wrenches, theta)
    differ by that rotation.

    Args:
        robot: any robot (revolute and prismatic joints with arbitrary axes).

    Returns:
        A :class:`Robot` with nominal parameters as float64 numpy arrays.
    """
    with jax.ensure_compile_time_eval():
        params = z_axis_params(robot, robot.nominal.astype(jnp.float64))
    nominal = RobotParams(*(np.asarray(x, dtype=np.float64) for x in params))
    return robot.replace(axes=(Z_AXIS,) * robot.n, nominal=nominal)


def _check_shape(name: str, x, shape: tuple[int, ...]) -> None:
    if tuple(np.shape(x)) != shape:
        raise ValueError(f"{name} has shape {tuple(np.shape(x))}, expected {shape}")
