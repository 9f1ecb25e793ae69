"""Spatial (Lie-algebra) algebra on SE(3), following docs/conventions.md.

Motion vectors (twists, accelerations) are ``[linear; angular]`` (6,), force vectors (wrenches)
are ``[force; torque]`` (6,). A rigid transform is the pair ``(R, p)`` of ``T_parent_child``:
``x_parent = R x_child + p``. The 6x6 operators of the DiffNEA paper (``Ad_T``, ``Ad_T^*``,
``ad_v``, ``ad_v^*``) are given as matrices for clarity and tests; the dynamics algorithms apply
them component by component (``bayes_nea.spatial_pairs``), the same algebra with a fraction of
the flops.

Every function here takes one sample; batch with ``jax.vmap``.
"""

from __future__ import annotations

import jax.numpy as jnp

from bayes_nea import spatial_pairs

Array = jnp.ndarray

# Order of the 10 inertial parameters (Pinocchio's ``Inertia.toDynamicParameters``).
THETA_NAMES = ("m", "h_x", "h_y", "h_z", "I_xx", "I_xy", "I_yy", "I_xz", "I_yz", "I_zz")


def skew(v: Array) -> Array:
    """Skew-symmetric matrix ``S(v)`` with ``S(v) w = v x w``. v: (3,) -> (3, 3)."""
    v = jnp.asarray(v)
    z = jnp.zeros_like(v[0])
    return jnp.stack(
        [
            jnp.stack([z, -v[2], v[1]]),
            jnp.stack([v[2], z, -v[0]]),
            jnp.stack([-v[1], v[0], z]),
        ]
    )


def rot_x(a: Array) -> Array:
    """Rotation by angle ``a`` about x (right-hand rule). () -> (3, 3)."""
    c, s = jnp.cos(a), jnp.sin(a)
    o, z = jnp.ones_like(c), jnp.zeros_like(c)
    return jnp.stack([jnp.stack([o, z, z]), jnp.stack([z, c, -s]), jnp.stack([z, s, c])])


def rot_y(a: Array) -> Array:
    """Rotation by angle ``a`` about y (right-hand rule). () -> (3, 3)."""
    c, s = jnp.cos(a), jnp.sin(a)
    o, z = jnp.ones_like(c), jnp.zeros_like(c)
    return jnp.stack([jnp.stack([c, z, s]), jnp.stack([z, o, z]), jnp.stack([-s, z, c])])


def rot_z(a: Array) -> Array:
    """Rotation by angle ``a`` about z (right-hand rule). () -> (3, 3)."""
    c, s = jnp.cos(a), jnp.sin(a)
    o, z = jnp.ones_like(c), jnp.zeros_like(c)
    return jnp.stack([jnp.stack([c, -s, z]), jnp.stack([s, c, z]), jnp.stack([z, z, o])])


def rpy_to_matrix(rpy: Array) -> Array:
    """``R = Rz(yaw) Ry(pitch) Rx(roll)`` (URDF; DiffNEA appendix eq. 4). rpy: (3,) -> (3, 3).

    The closed form of ``spatial_pairs.rpy_matrix``, as an array.
    """
    return spatial_pairs.array(spatial_pairs.rpy_matrix(jnp.asarray(rpy)))


def matrix_to_rpy(R: Array) -> Array:
    """Inverse of :func:`rpy_to_matrix` with pitch in [-pi/2, pi/2]. (3, 3) -> (3,).

    At pitch = +-pi/2 (gimbal lock) roll is set to zero and yaw absorbs the rotation.
    """
    R = jnp.asarray(R)
    pitch = jnp.arctan2(-R[2, 0], jnp.sqrt(R[0, 0] ** 2 + R[1, 0] ** 2))
    eps = 10 * jnp.finfo(R.dtype).eps
    locked = jnp.abs(jnp.cos(pitch)) < eps
    roll = jnp.where(locked, 0.0, jnp.arctan2(R[2, 1], R[2, 2]))
    yaw = jnp.where(locked, jnp.arctan2(-R[0, 1], R[1, 1]), jnp.arctan2(R[1, 0], R[0, 0]))
    return jnp.stack([roll, pitch, yaw])


def axis_angle_to_matrix(axis: Array, angle: Array) -> Array:
    """Rodrigues' formula for a unit ``axis`` (3,) and ``angle`` () -> (3, 3)."""
    axis = jnp.asarray(axis)
    K = skew(axis)
    return jnp.eye(3, dtype=K.dtype) + jnp.sin(angle) * K + (1 - jnp.cos(angle)) * (K @ K)


def homogeneous(R: Array, p: Array) -> Array:
    """4x4 homogeneous matrix of ``(R, p)``."""
    top = jnp.concatenate([R, p[:, None]], axis=1)
    bottom = jnp.zeros((1, 4), R.dtype).at[0, 3].set(1)
    return jnp.concatenate([top, bottom], axis=0)


def transform_inverse(R: Array, p: Array) -> tuple[Array, Array]:
    """``T^-1 = (R^T, -R^T p)``."""
    return R.T, -R.T @ p


def transform_compose(R1: Array, p1: Array, R2: Array, p2: Array) -> tuple[Array, Array]:
    """``T1 T2`` as ``(R1 R2, R1 p2 + p1)``."""
    return R1 @ R2, R1 @ p2 + p1


def adjoint(R: Array, p: Array) -> Array:
    """``Ad_T`` (6, 6): maps a twist in the child frame to the parent frame. ``[[R, S(p)R], [0, R]]``."""
    z = jnp.zeros((3, 3), R.dtype)
    return jnp.block([[R, skew(p) @ R], [z, R]])


def coadjoint(R: Array, p: Array) -> Array:
    """``Ad_T^* = Ad_{T^-1}^T`` (6, 6): maps a wrench child -> parent. ``[[R, 0], [S(p)R, R]]``."""
    z = jnp.zeros((3, 3), R.dtype)
    return jnp.block([[R, z], [skew(p) @ R, R]])


def motion_cross_matrix(v: Array) -> Array:
    """``v x = ad_v`` (6, 6) for a twist ``v = [v_lin; w]``: ``[[S(w), S(v_lin)], [0, S(w)]]``."""
    Sw, Sv = skew(v[3:]), skew(v[:3])
    return jnp.block([[Sw, Sv], [jnp.zeros_like(Sw), Sw]])


def force_cross_matrix(v: Array) -> Array:
    """``v x* = -(v x)^T`` (6, 6): ``[[S(w), 0], [S(v_lin), S(w)]]`` (Kim's ``ad_v^T`` with sign)."""
    return -motion_cross_matrix(v).T


def rotational_inertia(theta: Array) -> Array:
    """Rotational inertia about the body origin (3, 3) from theta (10,) (``spatial_pairs.rigid_body``)."""
    theta = jnp.asarray(theta)
    return spatial_pairs.array(spatial_pairs.rigid_body(theta)[2], theta.dtype)


def spatial_inertia(theta: Array) -> Array:
    """Spatial inertia (6, 6) for ``[linear; angular]``: ``[[m 1, -S(h)], [S(h), I]]``.

    theta: (10,) ``[m, h_x, h_y, h_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]`` in the body frame.
    """
    theta = jnp.asarray(theta)
    m, h = theta[0], theta[1:4]
    Sh = skew(h)
    return jnp.block([[m * jnp.eye(3, dtype=theta.dtype), -Sh], [Sh, rotational_inertia(theta)]])


def theta_from_com(mass: Array, com: Array, inertia_com: Array) -> Array:
    """theta (10,) from mass, centre of mass (3,) and inertia about the CoM (3, 3).

    Parallel-axis theorem: ``I = I_c + m S(c)^T S(c)`` (DiffNEA appendix eq. 5).
    """
    S = skew(com)
    I = inertia_com + mass * S.T @ S
    return jnp.stack([mass, *(mass * com), I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]])
