"""Spatial algebra on ``(linear, angular)`` pairs of 3-vectors, written component by component.

The dynamics algorithms (``bayes_nea.dynamics``, ``bayes_nea.regressor``) run on this form of the
algebra of ``bayes_nea.spatial``. A 3-vector is a tuple of three scalars ("lanes"), a (3, 3)
matrix a tuple of three row tuples; a motion or force vector is a pair ``(l, a)`` of 3-vectors
(the halves of the ``[linear; angular]`` (6,) vectors of docs/conventions.md), a rigid-body inertia
the triple ``(m, h, I)`` and an articulated inertia the blocks ``(A, B, C)`` of the symmetric
``[[A, B], [B^T, C]]`` (6, 6). Arrays enter through :func:`vec` and leave through :func:`array`.

Why: under ``jax.vmap`` every lane is one contiguous (batch,) array, and the algorithms become
element-by-element loops over the batch that XLA fuses and vectorises, instead of hundreds of
small batched dots over (batch, 6, 6) arrays; with no slicing of small arrays the traced programs
are also short. :func:`stage` ends one stage of an algorithm (a joint's visit): without it XLA
fuses a whole algorithm into a few loops that recompute shared terms for every output
(docs/dynamics-speed.md). A static zero (a Python ``0.0``, e.g. from a motion subspace) is folded
away while tracing by :func:`mul` and :func:`add`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bayes_nea.robot import PRISMATIC

Scalar = jax.Array | float
Vec = tuple[Scalar, Scalar, Scalar]
Mat = tuple[Vec, Vec, Vec]
Pair = tuple[Vec, Vec]


def stage(x):
    """End of one stage of an algorithm: XLA fuses nothing across it (``optimization_barrier``).

    Static (Python float) leaves pass through unchanged.
    """
    leaves, tree = jax.tree.flatten(x)
    dynamic = [k for k, v in enumerate(leaves) if not isinstance(v, float)]
    kept = jax.lax.optimization_barrier([leaves[k] for k in dynamic])
    for k, v in zip(dynamic, kept, strict=True):
        leaves[k] = v
    return jax.tree.unflatten(tree, leaves)


# --- scalars with static zeros ----------------------------------------------------------------


def _zero(x) -> bool:
    return isinstance(x, float) and x == 0.0


def add(a: Scalar, b: Scalar) -> Scalar:
    """``a + b``, folding a static zero."""
    if _zero(a):
        return b
    if _zero(b):
        return a
    return a + b


def sub(a: Scalar, b: Scalar) -> Scalar:
    """``a - b``, folding a static zero."""
    if _zero(b):
        return a
    if _zero(a):
        return -b
    return a - b


def mul(a: Scalar, b: Scalar) -> Scalar:
    """``a b``, folding static zeros and ones."""
    if _zero(a) or _zero(b):
        return 0.0
    if isinstance(a, float) and a == 1.0:
        return b
    if isinstance(b, float) and b == 1.0:
        return a
    return a * b


def _sum(terms) -> Scalar:
    out = 0.0
    for t in terms:
        out = add(out, t)
    return out


# --- 3-vectors and 3x3 matrices -----------------------------------------------------------------


def vec(a) -> Vec:
    """Lanes of a (3,) array (a static numpy vector keeps Python floats)."""
    if isinstance(a, np.ndarray):
        return tuple(float(x) for x in a)
    return tuple(a[k] for k in range(3))


def mat(M) -> Mat:
    """Row lanes of a (3, 3) array (a static numpy matrix keeps Python floats)."""
    return tuple(vec(M[i]) for i in range(3))


def array(v, dtype=None) -> jax.Array:
    """A (k,) or (k, 3) array of lanes (static entries become constants of ``dtype``)."""
    if isinstance(v[0], tuple):
        return jnp.stack([array(row, dtype) for row in v])
    if dtype is None:
        dtype = jnp.result_type(*(x for x in v if not isinstance(x, float)))
    return jnp.stack([jnp.asarray(x, dtype) for x in v])


def vadd(a: Vec, b: Vec) -> Vec:
    return tuple(add(x, y) for x, y in zip(a, b, strict=True))


def vsub(a: Vec, b: Vec) -> Vec:
    return tuple(sub(x, y) for x, y in zip(a, b, strict=True))


def scale(a: Vec, s: Scalar) -> Vec:
    """``a s`` for a scalar ``s``."""
    return tuple(mul(x, s) for x in a)


def cross(a: Vec, b: Vec) -> Vec:
    """``a x b``."""
    return (
        sub(mul(a[1], b[2]), mul(a[2], b[1])),
        sub(mul(a[2], b[0]), mul(a[0], b[2])),
        sub(mul(a[0], b[1]), mul(a[1], b[0])),
    )


def dot(a: Vec, b: Vec) -> Scalar:
    """``a . b``."""
    return _sum(mul(x, y) for x, y in zip(a, b, strict=True))


def mv(M: Mat, v: Vec) -> Vec:
    """``M v``."""
    return tuple(dot(row, v) for row in M)


def transpose(M: Mat) -> Mat:
    return tuple(tuple(M[i][j] for i in range(3)) for j in range(3))


def mtv(M: Mat, v: Vec) -> Vec:
    """``M^T v``."""
    return mv(transpose(M), v)


def mm(A: Mat, B: Mat) -> Mat:
    """``A B``."""
    Bt = transpose(B)
    return tuple(tuple(dot(row, col) for col in Bt) for row in A)


def mmt(A: Mat, B: Mat) -> Mat:
    """``A B^T``."""
    return tuple(tuple(dot(row, col) for col in B) for row in A)


def madd(A: Mat, B: Mat) -> Mat:
    return tuple(vadd(a, b) for a, b in zip(A, B, strict=True))


def msub(A: Mat, B: Mat) -> Mat:
    return tuple(vsub(a, b) for a, b in zip(A, B, strict=True))


def outer(a: Vec, b: Vec) -> Mat:
    """``a b^T``."""
    return tuple(tuple(mul(x, y) for y in b) for x in a)


def mscale(M: Mat, s: Scalar) -> Mat:
    return tuple(scale(row, s) for row in M)


def cross_matrix(p: Vec, M: Mat) -> Mat:
    """``S(p) M``: the cross product of ``p`` with every column of ``M``."""
    return transpose(tuple(cross(p, col) for col in transpose(M)))


def diagonal(s: Scalar) -> Mat:
    """``s 1``."""
    return ((s, 0.0, 0.0), (0.0, s, 0.0), (0.0, 0.0, s))


def rpy_matrix(rpy) -> Mat:
    """``Rz(yaw) Ry(pitch) Rx(roll)`` in closed form (DiffNEA appendix eq. 4). rpy: (3,) array."""
    cr, sr = jnp.cos(rpy[0]), jnp.sin(rpy[0])
    cp, sp = jnp.cos(rpy[1]), jnp.sin(rpy[1])
    cy, sy = jnp.cos(rpy[2]), jnp.sin(rpy[2])
    return (
        (cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr),
        (sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr),
        (-sp, cp * sr, cp * cr),
    )


def joint_transform(kind: str, axis: np.ndarray, R_O: Mat, p_O: Vec, q) -> tuple[Mat, Vec]:
    """``T(q) = T_O T_q(q)`` as ``(R, p)`` for one joint about / along ``axis``.

    ``axis`` is static (numpy (3,), unit). A revolute joint about +-x, +-y or +-z rotates two
    columns of ``R_O``; any other axis uses Rodrigues' formula with the axis' constant skew
    matrix. A prismatic joint moves the origin by ``q R_O axis``.
    """
    if kind == PRISMATIC:
        return R_O, vadd(p_O, scale(mv(R_O, vec(axis)), q))
    c, s = jnp.cos(q), jnp.sin(q)
    k = int(np.argmax(np.abs(axis)))
    if abs(axis[k]) == 1.0:
        s = s * float(axis[k])  # rotation by -q about +e_k for the axis -e_k
        i, j = (k + 1) % 3, (k + 2) % 3  # e_i x e_j = e_k
        cols = list(transpose(R_O))
        ci, cj = cols[i], cols[j]
        cols[i] = vadd(scale(ci, c), scale(cj, s))
        cols[j] = vsub(scale(cj, c), scale(ci, s))
        return transpose(tuple(cols)), p_O
    K = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    R_q = madd(madd(diagonal(1.0), mscale(mat(K), s)), mscale(mat(K @ K), 1 - c))
    return mm(R_O, R_q), p_O


# --- motion and force pairs ------------------------------------------------------------------


def padd(u: Pair, v: Pair) -> Pair:
    """``u + v`` of two pairs."""
    return vadd(u[0], v[0]), vadd(u[1], v[1])


def psub(u: Pair, v: Pair) -> Pair:
    return vsub(u[0], v[0]), vsub(u[1], v[1])


def pscale(u: Pair, s: Scalar) -> Pair:
    return scale(u[0], s), scale(u[1], s)


def inv_act_motion(R: Mat, p: Vec, v: Pair) -> Pair:
    """``Ad_{T^-1} v``: twist parent -> child, ``(R^T (v_l - p x w), R^T w)``."""
    return mtv(R, vsub(v[0], cross(p, v[1]))), mtv(R, v[1])


def act_force(R: Mat, p: Vec, f: Pair) -> Pair:
    """``Ad_T^* f``: wrench child -> parent, ``(R f, R n + p x R f)``."""
    fp = mv(R, f[0])
    return fp, vadd(mv(R, f[1]), cross(p, fp))


def cross_motion(v: Pair, m: Pair) -> Pair:
    """``v x m`` of twists: ``(w x m_l + v_l x m_a, w x m_a)``."""
    return vadd(cross(v[1], m[0]), cross(v[0], m[1])), cross(v[1], m[1])


def cross_force(v: Pair, f: Pair) -> Pair:
    """``v x* f`` of a twist and a wrench: ``(w x f, v_l x f + w x n)``."""
    return cross(v[1], f[0]), vadd(cross(v[0], f[0]), cross(v[1], f[1]))


def subspace(s: np.ndarray) -> Pair:
    """A static motion subspace (numpy (6,)) as a pair of static lanes."""
    return vec(s[:3]), vec(s[3:])


def pair_dot(u: Pair, v: Pair) -> Scalar:
    """``u^T v``."""
    return add(dot(u[0], v[0]), dot(u[1], v[1]))


# --- rigid-body and articulated inertias -----------------------------------------------------


def rigid_body(theta) -> tuple[Scalar, Vec, Mat]:
    """``(m, h, I)`` of theta (10,) ``[m, h_x, h_y, h_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]``."""
    m, hx, hy, hz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz = (theta[k] for k in range(10))
    return m, (hx, hy, hz), ((Ixx, Ixy, Ixz), (Ixy, Iyy, Iyz), (Ixz, Iyz, Izz))


def inertia_apply(body, v: Pair) -> Pair:
    """``I v`` of a rigid-body inertia ``(m, h, I)``: ``(m v_l - h x w, h x v_l + I w)``."""
    m, h, I = body
    return vsub(scale(v[0], m), cross(h, v[1])), vadd(cross(h, v[0]), mv(I, v[1]))


def inertia_to_parent(R: Mat, p: Vec, body):
    """A rigid-body inertia ``(m, h, I)`` in the child frame, expressed in the parent frame.

    ``(m, R h + m p, R I R^T + (2 p . Rh + m |p|^2) 1 - Rh p^T - p Rh^T - m p p^T)``: the
    parallel-axis theorem from the child origin to the parent origin, the same as ``X^T I X``
    with (6, 6) matrices (``S(a) S(b) = b a^T - (a . b) 1``).
    """
    m, h, I = body
    Rh = mv(R, h)
    I_p = madd(mmt(mm(R, I), R), diagonal(add(mul(2.0, dot(p, Rh)), mul(m, dot(p, p)))))
    I_p = msub(msub(I_p, outer(Rh, p)), madd(outer(p, Rh), mscale(outer(p, p), m)))
    return m, vadd(Rh, scale(p, m)), I_p


def articulated(body):
    """The blocks ``(A, B, C)`` of a rigid-body inertia: ``(m 1, -S(h), I)``."""
    m, (hx, hy, hz), I = body
    B = ((0.0, hz, -hy), (-hz, 0.0, hx), (hy, -hx, 0.0))
    return diagonal(m), B, I


def articulated_apply(blocks, v: Pair) -> Pair:
    """``[[A, B], [B^T, C]] v`` of an articulated inertia and a twist."""
    A, B, C = blocks
    return vadd(mv(A, v[0]), mv(B, v[1])), vadd(mtv(B, v[0]), mv(C, v[1]))


def articulated_to_parent(R: Mat, p: Vec, blocks):
    """``X^T [[A, B], [B^T, C]] X`` with ``X`` the parent -> child motion transform of ``(R, p)``.

    With ``A' = R A R^T`` (likewise B', C') and ``S = S(p)``: ``(A', B' - A' S,
    C' + S B' - B'^T S - S A' S)``, written with ``S M`` as column-wise cross products.
    """
    A, B, C = blocks
    A_r, B_r, C_r = stage(tuple(mmt(stage(mm(R, M)), R) for M in (A, B, C)))
    SA = cross_matrix(p, A_r)  # S A'; A' S = -(S A')^T as A' is symmetric
    SB = cross_matrix(p, B_r)
    SAt = transpose(SA)
    return A_r, madd(B_r, SAt), madd(madd(C_r, SB), madd(transpose(SB), cross_matrix(p, SAt)))


def _symmetric_units(x: Vec) -> list[Vec]:
    """``E_k x`` for the unit symmetric matrices of ``I_xx, I_xy, I_yy, I_xz, I_yz, I_zz``."""
    return [
        (x[0], 0.0, 0.0),
        (x[1], x[0], 0.0),
        (0.0, x[1], 0.0),
        (x[2], 0.0, x[0]),
        (0.0, x[2], x[1]),
        (0.0, 0.0, x[2]),
    ]


def body_regressor(v: Pair, a: Pair) -> tuple[tuple[Scalar, ...], ...]:
    """Body regressor ``A(v, a)`` (6 rows of 10 lanes): ``I a + v x* (I v) = A theta``.

    Column blocks, with ``v = (v_l, w)``, ``a = (a_l, alpha)``: mass ``(a_l + w x v_l, 0)``; first
    moment ``(S(alpha) + w w^T - |w|^2 1, S(v_l x w - a_l))``; rotational inertia
    ``(0, E_k alpha + w x E_k w)`` with ``E_k`` the unit symmetric matrices. Theta in the order of
    ``spatial.THETA_NAMES``.
    """
    (vl, w), (al, alpha) = v, a
    mass = vadd(al, cross(w, vl))
    h_lin = msub(madd(cross_matrix(alpha, diagonal(1.0)), outer(w, w)), diagonal(dot(w, w)))
    h_ang = cross_matrix(vsub(cross(vl, w), al), diagonal(1.0))
    inertia = [
        vadd(Ea, cross(w, Ew))
        for Ea, Ew in zip(_symmetric_units(alpha), _symmetric_units(w), strict=True)
    ]
    top = [(mass[r], *h_lin[r], 0.0, 0.0, 0.0, 0.0, 0.0, 0.0) for r in range(3)]
    bottom = [(0.0, *h_ang[r], *(col[r] for col in inertia)) for r in range(3)]
    return tuple(top + bottom)
