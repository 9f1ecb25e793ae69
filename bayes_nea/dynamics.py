"""Rigid-body dynamics: RNEA, ABA, CRBA, bias and gravity terms, energies.

One sample per call, ``q, qd, qdd, tau`` of shape (n,); batch with ``jax.vmap``. Body twists and
wrenches are in body frames (docs/conventions.md). ``params=None`` uses ``robot.nominal``; ``gravity``
(3,) in the base frame defaults to ``robot.gravity``. External wrenches ``f_ext`` (n, 6) act on each
body, expressed in that body's frame, as Pinocchio's ``fext``. URDF damping and friction are not
applied here (as in Pinocchio); the actuator models do that.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bayes_nea import spatial as sp
from bayes_nea.robot import Robot, RobotParams
from bayes_nea.tree import backward_pass, forward_pass, joint_transforms, resolve


def check_state(robot: Robot, **arrays) -> None:
    """Raise ``ValueError`` naming any array whose shape is not ``(n,)`` (shapes are static)."""
    for name, x in arrays.items():
        if x is None:
            continue
        shape = tuple(np.shape(x))
        if shape != (robot.n,):
            raise ValueError(
                f"{name} has shape {shape}, expected ({robot.n},) for robot {robot.name!r} "
                f"with joints {list(robot.joint_names)}; batch with jax.vmap"
            )


def _check_f_ext(robot: Robot, f_ext) -> None:
    if f_ext is not None and tuple(np.shape(f_ext)) != (robot.n, 6):
        raise ValueError(
            f"f_ext has shape {tuple(np.shape(f_ext))}, expected ({robot.n}, 6): one body-frame "
            "wrench [force; torque] per body"
        )


def _base_acceleration(robot: Robot, gravity, dtype) -> jax.Array:
    g = jnp.asarray(robot.gravity if gravity is None else gravity, dtype=dtype)
    return jnp.concatenate([-g, jnp.zeros(3, dtype)])


def _kinematics(robot, params, q, qd, qdd, a0):
    """Forward pass of RNEA: transforms and body twists / accelerations (lists of (6,))."""
    R, p = joint_transforms(robot, params, q)
    S = [jnp.asarray(robot.motion_subspace(i), dtype=R.dtype) for i in range(robot.n)]
    zero = jnp.zeros(6, R.dtype)

    def visit(i, parent):
        v_parent, a_parent = parent
        vj = S[i] * qd[i]
        v = sp.inv_act_motion(R[i], p[i], v_parent) + vj
        a = sp.inv_act_motion(R[i], p[i], a_parent) + S[i] * qdd[i] + sp.cross_motion(v, vj)
        return v, a

    va = forward_pass(robot, visit, (zero, a0))
    return R, p, S, va


def rnea(
    robot: Robot,
    q: jax.Array,
    qd: jax.Array,
    qdd: jax.Array,
    *,
    params: RobotParams | None = None,
    gravity: jax.Array | None = None,
    f_ext: jax.Array | None = None,
) -> jax.Array:
    """Inverse dynamics ``tau = M(q) qdd + c(q, qd) - sum J^T f_ext`` (n,).

    Recursive Newton-Euler (Featherstone 2008, Table 5.1; lecture notes "RNEA"): body twists and
    accelerations outwards, ``f_i = I_i a_i + v_i x* I_i v_i - f_ext_i``, wrenches inwards,
    ``tau_i = s_i^T f_i``. Gravity enters as the base acceleration ``-g``.

    Raises:
        ValueError: q, qd or qdd not of shape (n,), f_ext not (n, 6).
    """
    check_state(robot, q=q, qd=qd, qdd=qdd)
    _check_f_ext(robot, f_ext)
    params, dtype = resolve(robot, params, q, qd, qdd)
    R, p, S, va = _kinematics(robot, params, q, qd, qdd, _base_acceleration(robot, gravity, dtype))
    theta = params.theta

    def body_force(i):
        v, a = va[i]
        f = sp.inertia_apply(theta[i], a) + sp.cross_force(v, sp.inertia_apply(theta[i], v))
        return f if f_ext is None else f - f_ext[i]

    def visit(i, f):
        return S[i] @ f, sp.act_force(R[i], p[i], f)

    tau = backward_pass(robot, visit, [body_force(i) for i in range(robot.n)])
    return jnp.stack(tau)


def aba(
    robot: Robot,
    q: jax.Array,
    qd: jax.Array,
    tau: jax.Array,
    *,
    params: RobotParams | None = None,
    gravity: jax.Array | None = None,
    f_ext: jax.Array | None = None,
) -> jax.Array:
    """Forward dynamics ``qdd = M^-1 (tau - c + sum J^T f_ext)`` (n,), the articulated-body algorithm.

    DiffNEA Algorithm 1 (Featherstone 2008, Table 7.1): velocities and bias accelerations
    outwards, articulated inertias ``Pi_i = M_i:n - M s Psi s^T M`` and bias forces inwards, joint
    accelerations outwards. Articulated inertias are (6, 6); transforms are applied blockwise.

    Raises:
        ValueError: q, qd or tau not of shape (n,), f_ext not (n, 6).
    """
    check_state(robot, q=q, qd=qd, tau=tau)
    _check_f_ext(robot, f_ext)
    params, dtype = resolve(robot, params, q, qd, tau)
    R, p = joint_transforms(robot, params, q)
    S = [jnp.asarray(robot.motion_subspace(i), dtype=dtype) for i in range(robot.n)]
    zero = jnp.zeros(6, dtype)

    def visit_velocity(i, parent):
        vj = S[i] * qd[i]
        v = sp.inv_act_motion(R[i], p[i], parent[0]) + vj
        return v, sp.cross_motion(v, vj)

    vc = forward_pass(robot, visit_velocity, (zero, zero))
    I_body = [sp.spatial_inertia(params.theta[i]) for i in range(robot.n)]
    init = []
    for i in range(robot.n):
        v = vc[i][0]
        bias = sp.cross_force(v, sp.inertia_apply(params.theta[i], v))
        init.append((I_body[i], bias if f_ext is None else bias - f_ext[i]))

    def visit_inertia(i, acc):
        IA, pA = acc
        U = IA @ S[i]
        D = S[i] @ U
        u = tau[i] - S[i] @ pA
        Ia = IA - jnp.outer(U, U) / D
        pa = pA + Ia @ vc[i][1] + U * (u / D)
        X = sp.inv_act_motion(R[i], p[i], jnp.eye(6, dtype=dtype))  # parent -> child motion
        return (U, D, u), (X.T @ Ia @ X, sp.act_force(R[i], p[i], pa))

    Udu = backward_pass(robot, visit_inertia, init)

    def visit_acceleration(i, a_parent):
        U, D, u = Udu[i]
        a = sp.inv_act_motion(R[i], p[i], a_parent) + vc[i][1]
        qdd_i = (u - U @ a) / D
        return a + S[i] * qdd_i, qdd_i

    a0 = _base_acceleration(robot, gravity, dtype)
    out = forward_pass(robot, lambda i, parent: visit_acceleration(i, parent[0]), (a0, None))
    return jnp.stack([o[1] for o in out])


def crba(robot: Robot, q: jax.Array, *, params: RobotParams | None = None) -> jax.Array:
    """Joint-space mass matrix ``M(q)`` (n, n), symmetric, by the composite-rigid-body algorithm.

    Featherstone 2008, Table 6.2: composite inertias ``I^c_parent += X^T I^c_i X`` inwards (kept
    as mass, first moment and 3x3 rotational inertia, see ``spatial.inertia_to_parent``), then
    ``M_ij = s_j^T X_{j<-i}^* I^c_i s_i`` along each body's ancestors.

    Raises:
        ValueError: q not of shape (n,).
    """
    check_state(robot, q=q)
    params, dtype = resolve(robot, params, q)
    R, p = joint_transforms(robot, params, q)
    S = [jnp.asarray(robot.motion_subspace(i), dtype=dtype) for i in range(robot.n)]

    def visit(i, Ic):
        return Ic, sp.inertia_to_parent(R[i], p[i], *Ic)

    theta = params.theta
    Ic = backward_pass(robot, visit, [(t[0], t[1:4], sp.rotational_inertia(t)) for t in theta])
    entries = {}
    for i in range(robot.n):
        F = sp.inertia_apply_parts(*Ic[i], S[i])
        entries[i, i] = S[i] @ F
        j = i
        while robot.parents[j] >= 0:
            F = sp.act_force(R[j], p[j], F)
            j = robot.parents[j]
            entries[i, j] = entries[j, i] = S[j] @ F
    zero = jnp.zeros((), dtype)
    return jnp.stack(
        [jnp.stack([entries.get((i, j), zero) for j in range(robot.n)]) for i in range(robot.n)]
    )


def nonlinear_effects(
    robot: Robot, q: jax.Array, qd: jax.Array, *, params=None, gravity=None
) -> jax.Array:
    """Bias torques ``c(q, qd) = C(q, qd) qd + g(q)`` (n,): RNEA with zero acceleration."""
    return rnea(robot, q, qd, jnp.zeros_like(qd), params=params, gravity=gravity)


def gravity_torques(robot: Robot, q: jax.Array, *, params=None, gravity=None) -> jax.Array:
    """Generalised gravity ``g(q)`` (n,): RNEA with zero velocity and acceleration."""
    z = jnp.zeros_like(q)
    return rnea(robot, q, z, z, params=params, gravity=gravity)


def coriolis_matrix(robot: Robot, q: jax.Array, qd: jax.Array, *, params=None) -> jax.Array:
    """Coriolis matrix ``C(q, qd)`` (n, n) from the Christoffel symbols of ``M`` (autodiff of CRBA).

    ``C_ij = sum_k 1/2 (dM_ij/dq_k + dM_ik/dq_j - dM_jk/dq_i) qd_k``; with it ``M_dot - 2C`` is
    skew-symmetric and ``C qd + g = nonlinear_effects`` (lecture notes, "Properties").
    """
    dM = jax.jacfwd(lambda x: crba(robot, x, params=params))(q)  # dM[i, j, k] = dM_ij / dq_k
    Gamma = 0.5 * (dM + jnp.transpose(dM, (0, 2, 1)) - jnp.transpose(dM, (2, 1, 0)))
    return Gamma @ qd


def forward_kinematics(
    robot: Robot, q: jax.Array, *, params: RobotParams | None = None
) -> tuple[jax.Array, jax.Array]:
    """World poses of all bodies: R (n, 3, 3), p (n, 3) with ``x_world = R x_body + p``."""
    check_state(robot, q=q)
    params, _ = resolve(robot, params, q)
    R, p = joint_transforms(robot, params, q)

    def visit(i, parent):
        if parent is None:
            return R[i], p[i]
        return sp.transform_compose(*parent, R[i], p[i])

    poses = forward_pass(robot, visit, None)
    return jnp.stack([P[0] for P in poses]), jnp.stack([P[1] for P in poses])


def kinetic_energy(robot: Robot, q: jax.Array, qd: jax.Array, *, params=None) -> jax.Array:
    """Kinetic energy ``1/2 sum_i v_i^T I_i v_i`` (scalar, J)."""
    check_state(robot, q=q, qd=qd)
    params, dtype = resolve(robot, params, q, qd)
    zero = jnp.zeros(6, dtype)
    _, _, _, va = _kinematics(robot, params, q, qd, jnp.zeros_like(qd), zero)
    return 0.5 * sum(v @ sp.inertia_apply(params.theta[i], v) for i, (v, _) in enumerate(va))


def potential_energy(robot: Robot, q: jax.Array, *, params=None, gravity=None) -> jax.Array:
    """Gravitational potential energy ``-sum_i m_i g^T c_i`` (scalar, J), zero at the base origin."""
    params, dtype = resolve(robot, params, q)
    R, p = forward_kinematics(robot, q, params=params)
    g = jnp.asarray(robot.gravity if gravity is None else gravity, dtype=dtype)
    m, h = params.theta[:, 0], params.theta[:, 1:4]
    first_moment_world = jnp.einsum("nij,nj->ni", R, h) + m[:, None] * p
    return -jnp.sum(first_moment_world @ g)


def total_energy(robot: Robot, q: jax.Array, qd: jax.Array, *, params=None, gravity=None):
    """Kinetic plus potential energy (scalar, J)."""
    return kinetic_energy(robot, q, qd, params=params) + potential_energy(
        robot, q, params=params, gravity=gravity
    )
