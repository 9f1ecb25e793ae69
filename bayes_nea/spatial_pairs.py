"""Spatial algebra on ``(linear, angular)`` pairs of 3-vectors, written element by element.

The dynamics algorithms (``bayes_nea.dynamics``, ``bayes_nea.regressor``) run on this form of the
algebra of ``bayes_nea.spatial``: a motion or force vector is a pair ``(l, a)`` of (3,) arrays (the
halves of the ``[linear; angular]`` (6,) vectors of docs/conventions.md), a rotation a (3, 3)
array, a rigid-body inertia the triple ``(m, h, I)`` (mass, first moment (3,), rotational inertia
(3, 3) about the body origin) and an articulated inertia the blocks ``(A, B, C)`` of the symmetric
``[[A, B], [B^T, C]]`` (6, 6).

Every product is spelled out with slices, multiplies and adds: no ``dot_general``, no (6, 6)
matrices, no concatenation. Under ``jax.vmap`` XLA runs small batched dots and (B, 6, 6)
intermediates as hundreds of memory-bound kernels; element-by-element code fuses into loops over
the batch. :func:`stage` marks where one stage of an algorithm ends (one joint's visit): without
it XLA fuses a whole algorithm into a few loops that recompute shared terms for every output,
slow to run and to compile (docs/dynamics-speed.md has the measurements). Static structure (a
joint's motion subspace, a unit axis) is a numpy constant whose zero entries are skipped while
tracing.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bayes_nea.robot import PRISMATIC

Array = jax.Array
Pair = tuple[Array, Array]


def stage(x):
    """End of one stage of an algorithm: XLA fuses nothing across it (``optimization_barrier``)."""
    return jax.lax.optimization_barrier(x)


# --- 3-vectors and 3x3 matrices -----------------------------------------------------------------


def cross(a: Array, b: Array) -> Array:
    """``a x b`` of (3,) vectors (also (3, k): column-wise)."""
    return jnp.stack(
        [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    )


def dot(a: Array, b: Array) -> Array:
    """``a . b`` of (3,) vectors."""
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def mv(M: Array, v: Array) -> Array:
    """``M v``: (3, 3) times (3,)."""
    return M[:, 0] * v[0] + M[:, 1] * v[1] + M[:, 2] * v[2]


def mtv(M: Array, v: Array) -> Array:
    """``M^T v``: (3, 3) transposed times (3,)."""
    return M[0] * v[0] + M[1] * v[1] + M[2] * v[2]


def mm(A: Array, B: Array) -> Array:
    """``A B`` of (3, 3) matrices."""
    return A[:, 0:1] * B[0:1, :] + A[:, 1:2] * B[1:2, :] + A[:, 2:3] * B[2:3, :]


def mmt(A: Array, B: Array) -> Array:
    """``A B^T`` of (3, 3) matrices."""
    return A[:, 0:1] * B[None, :, 0] + A[:, 1:2] * B[None, :, 1] + A[:, 2:3] * B[None, :, 2]


def outer(a: Array, b: Array) -> Array:
    """``a b^T`` (3, 3)."""
    return a[:, None] * b[None, :]


def cross_matrix(p: Array, M: Array) -> Array:
    """``S(p) M`` (3, 3): the cross product of ``p`` with every column of ``M``."""
    return cross(p, M)


def static_mv(M: Array, a: np.ndarray) -> Array:
    """``M a`` for a static vector ``a`` (numpy (3,)); zero entries of ``a`` cost nothing."""
    terms = [M[:, k] * float(a[k]) for k in range(3) if a[k] != 0]
    return sum(terms[1:], terms[0])


def static_mtv(M: Array, a: np.ndarray) -> Array:
    """``M^T a`` for a static vector ``a`` (numpy (3,)); zero entries of ``a`` cost nothing."""
    terms = [M[k] * float(a[k]) for k in range(3) if a[k] != 0]
    return sum(terms[1:], terms[0])


def static_dot(v: Array, a: np.ndarray):
    """``a . v`` for a static vector ``a`` (numpy (3,)); ``0.0`` if ``a`` is zero."""
    terms = [v[k] * float(a[k]) for k in range(3) if a[k] != 0]
    return sum(terms[1:], terms[0]) if terms else 0.0


def static_scale(a: np.ndarray, x: Array) -> Array:
    """``a x`` (3,) for a static vector ``a`` (numpy (3,)) and a scalar ``x``."""
    zero = jnp.zeros_like(x)
    return jnp.stack([x * float(a[k]) if a[k] != 0 else zero for k in range(3)])


def rpy_matrix(rpy: Array) -> Array:
    """``Rz(yaw) Ry(pitch) Rx(roll)`` (3, 3) in closed form (DiffNEA appendix eq. 4)."""
    cr, sr = jnp.cos(rpy[0]), jnp.sin(rpy[0])
    cp, sp = jnp.cos(rpy[1]), jnp.sin(rpy[1])
    cy, sy = jnp.cos(rpy[2]), jnp.sin(rpy[2])
    return jnp.stack(
        [
            jnp.stack([cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr]),
            jnp.stack([sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr]),
            jnp.stack([-sp, cp * sr, cp * cr]),
        ]
    )


def joint_transform(kind: str, axis: np.ndarray, R_O: Array, p_O: Array, q: Array) -> Pair:
    """``T(q) = T_O T_q(q)`` as ``(R (3, 3), p (3,))`` for one joint about / along ``axis``.

    ``axis`` is static (numpy (3,), unit). A revolute joint about +-x, +-y or +-z rotates two
    columns of ``R_O``; any other axis uses Rodrigues' formula with the axis' constant skew
    matrix. A prismatic joint moves the origin by ``q R_O axis``.
    """
    if kind == PRISMATIC:
        return R_O, p_O + static_mv(R_O, axis) * q
    c, s = jnp.cos(q), jnp.sin(q)
    k = int(np.argmax(np.abs(axis)))
    if abs(axis[k]) == 1.0:
        s = s * float(axis[k])  # rotation by -q about +e_k for the axis -e_k
        i, j = (k + 1) % 3, (k + 2) % 3  # e_i x e_j = e_k
        cols = [None, None, None]
        cols[k] = R_O[:, k]
        cols[i] = R_O[:, i] * c + R_O[:, j] * s
        cols[j] = R_O[:, j] * c - R_O[:, i] * s
        return jnp.stack(cols, axis=1), p_O
    K = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    K2 = jnp.asarray(K @ K, R_O.dtype)
    R_q = jnp.eye(3, dtype=R_O.dtype) + s * jnp.asarray(K, R_O.dtype) + (1 - c) * K2
    return mm(R_O, R_q), p_O


# --- motion and force pairs ------------------------------------------------------------------


def add(u: Pair, v: Pair) -> Pair:
    """``u + v`` of two pairs."""
    return u[0] + v[0], u[1] + v[1]


def inv_act_motion(R: Array, p: Array, v: Pair) -> Pair:
    """``Ad_{T^-1} v``: twist parent -> child, ``(R^T (v_l - p x w), R^T w)``."""
    return mtv(R, v[0] - cross(p, v[1])), mtv(R, v[1])


def act_force(R: Array, p: Array, f: Pair) -> Pair:
    """``Ad_T^* f``: wrench child -> parent, ``(R f, R n + p x R f)``."""
    fp = mv(R, f[0])
    return fp, mv(R, f[1]) + cross(p, fp)


def cross_motion(v: Pair, m: Pair) -> Pair:
    """``v x m`` of twists: ``(w x m_l + v_l x m_a, w x m_a)``."""
    return cross(v[1], m[0]) + cross(v[0], m[1]), cross(v[1], m[1])


def cross_force(v: Pair, f: Pair) -> Pair:
    """``v x* f`` of a twist and a wrench: ``(w x f, v_l x f + w x n)``."""
    return cross(v[1], f[0]), cross(v[0], f[0]) + cross(v[1], f[1])


def subspace_times(s: np.ndarray, x: Array) -> Pair:
    """``s x`` for a static motion subspace ``s`` (numpy (6,)) and a scalar ``x``."""
    return static_scale(s[:3], x), static_scale(s[3:], x)


def subspace_dot(s: np.ndarray, f: Pair):
    """``s^T f`` for a static ``s`` (numpy (6,)) and a pair."""
    return static_dot(f[0], s[:3]) + static_dot(f[1], s[3:])


def pair_dot(u: Pair, v: Pair) -> Array:
    """``u^T v`` of two pairs."""
    return dot(u[0], v[0]) + dot(u[1], v[1])


# --- rigid-body and articulated inertias -----------------------------------------------------


def rigid_body(theta: Array) -> tuple[Array, Array, Array]:
    """``(m, h (3,), I (3, 3))`` of theta (10,) ``[m, h, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]``."""
    Ixx, Ixy, Iyy, Ixz, Iyz, Izz = (theta[k] for k in range(4, 10))
    I = jnp.stack(
        [jnp.stack([Ixx, Ixy, Ixz]), jnp.stack([Ixy, Iyy, Iyz]), jnp.stack([Ixz, Iyz, Izz])]
    )
    return theta[0], theta[1:4], I


def inertia_apply(body, v: Pair) -> Pair:
    """``I v`` of a rigid-body inertia ``(m, h, I)``: ``(m v_l - h x w, h x v_l + I w)``."""
    m, h, I = body
    return m * v[0] - cross(h, v[1]), cross(h, v[0]) + mv(I, v[1])


def inertia_to_parent(R: Array, p: Array, body):
    """A rigid-body inertia ``(m, h, I)`` in the child frame, expressed in the parent frame.

    ``(m, R h + m p, R I R^T + 2 (p . Rh) 1 - Rh p^T - p Rh^T + m (|p|^2 1 - p p^T))``: the
    parallel-axis theorem from the child origin to the parent origin, the same as ``X^T I X``
    with (6, 6) matrices (``S(a) S(b) = b a^T - (a . b) 1``).
    """
    m, h, I = body
    Rh = mv(R, h)
    eye = jnp.eye(3, dtype=I.dtype)
    I_p = (
        mmt(mm(R, I), R)
        + (2 * dot(p, Rh) + m * dot(p, p)) * eye
        - outer(Rh, p)
        - outer(p, Rh)
        - m * outer(p, p)
    )
    return m, Rh + m * p, I_p


def articulated(body):
    """The blocks ``(A, B, C)`` of a rigid-body inertia: ``(m 1, -S(h), I)``."""
    m, h, I = body
    eye = jnp.eye(3, dtype=I.dtype)
    return m * eye, -cross_matrix(h, eye), I


def articulated_apply(blocks, v: Pair) -> Pair:
    """``[[A, B], [B^T, C]] v`` of an articulated inertia and a twist."""
    A, B, C = blocks
    return mv(A, v[0]) + mv(B, v[1]), mtv(B, v[0]) + mv(C, v[1])


def articulated_times_subspace(blocks, s: np.ndarray) -> Pair:
    """``[[A, B], [B^T, C]] s`` for a static motion subspace ``s`` (numpy (6,))."""
    A, B, C = blocks
    sl, sa = s[:3], s[3:]
    lin = [static_mv(A, sl)] if np.any(sl) else []
    lin += [static_mv(B, sa)] if np.any(sa) else []
    ang = [static_mtv(B, sl)] if np.any(sl) else []
    ang += [static_mv(C, sa)] if np.any(sa) else []
    return sum(lin[1:], lin[0]), sum(ang[1:], ang[0])


def articulated_to_parent(R: Array, p: Array, blocks):
    """``X^T [[A, B], [B^T, C]] X`` with ``X`` the parent -> child motion transform of ``(R, p)``.

    With ``A' = R A R^T`` (likewise B', C') and ``S = S(p)``: ``(A', B' - A' S,
    C' + S B' - B'^T S - S A' S)``, written with ``S M`` as column-wise cross products.
    """
    A, B, C = blocks
    A_r, B_r, C_r = (mmt(mm(R, M), R) for M in (A, B, C))
    SA = cross_matrix(p, A_r)  # S A'; A' S = -(S A')^T as A' is symmetric
    SB = cross_matrix(p, B_r)
    return A_r, B_r + SA.T, C_r + SB + SB.T + cross_matrix(p, SA.T)


def _symmetric_units(x: Array) -> list[Array]:
    """``E_k x`` (3,) for the unit symmetric matrices of ``I_xx, I_xy, I_yy, I_xz, I_yz, I_zz``."""
    z = jnp.zeros_like(x[0])
    return [
        jnp.stack([x[0], z, z]),
        jnp.stack([x[1], x[0], z]),
        jnp.stack([z, x[1], z]),
        jnp.stack([x[2], z, x[0]]),
        jnp.stack([z, x[2], x[1]]),
        jnp.stack([z, z, x[2]]),
    ]


def body_regressor(v: Pair, a: Pair) -> Array:
    """Body regressor ``A(v, a)`` (6, 10): ``I a + v x* (I v) = A theta`` (body frame).

    Column blocks, with ``v = (v_l, w)``, ``a = (a_l, alpha)``: mass ``(a_l + w x v_l, 0)``; first
    moment ``(S(alpha) + w w^T - |w|^2 1, S(v_l x w - a_l))``; rotational inertia
    ``(0, E_k alpha + w x E_k w)`` with ``E_k`` the unit symmetric matrices. Theta in the order of
    ``spatial.THETA_NAMES``.
    """
    (vl, w), (al, alpha) = v, a
    eye = jnp.eye(3, dtype=w.dtype)
    zero3 = jnp.zeros((3, 1), w.dtype)
    mass = (al + cross(w, vl))[:, None]
    h_lin = cross_matrix(alpha, eye) + outer(w, w) - dot(w, w) * eye
    h_ang = cross_matrix(cross(vl, w) - al, eye)
    inertia = [
        Ea + cross(w, Ew)
        for Ea, Ew in zip(_symmetric_units(alpha), _symmetric_units(w), strict=True)
    ]
    top = jnp.concatenate([mass, h_lin, jnp.zeros((3, 6), w.dtype)], axis=1)
    bottom = jnp.concatenate([zero3, h_ang, jnp.stack(inertia, axis=1)], axis=1)
    return jnp.concatenate([top, bottom], axis=0)


def rows_times(X: Array, A: Array) -> Array:
    """``X A`` for ``X`` (k, 6) and ``A`` (6, m), as six multiply-adds of rows."""
    return sum(X[:, r : r + 1] * A[r : r + 1, :] for r in range(1, 6)) + X[:, 0:1] * A[0:1, :]
