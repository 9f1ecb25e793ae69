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
from bayes_nea import spatial_pairs as sv
from bayes_nea.robot import Robot, RobotParams
from bayes_nea.tree import backward_pass, forward_pass, joint_transforms, resolve, traced_once


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


ZERO = (0.0, 0.0, 0.0)


def _base_acceleration(robot: Robot, gravity, dtype) -> sv.Pair:
    """The base's spatial acceleration ``(-g, 0)``: gravity enters every algorithm this way.

    The robot's own gravity is static (Python floats: its zero components cost nothing).
    """
    if gravity is None:
        return tuple(-float(g) for g in robot.gravity), ZERO
    return sv.vec(-jnp.asarray(gravity, dtype=dtype)), ZERO


def _subspaces(robot: Robot) -> list[sv.Pair]:
    """Motion subspaces ``s_i`` as static lanes, so that their zero entries cost nothing."""
    return [sv.subspace(robot.motion_subspace(i)) for i in range(robot.n)]


def _external(f_ext, i: int) -> sv.Pair | None:
    return None if f_ext is None else (sv.vec(f_ext[i, :3]), sv.vec(f_ext[i, 3:]))


def _minus(f: sv.Pair, g: sv.Pair | None) -> sv.Pair:
    return f if g is None else sv.psub(f, g)


def _kinematics(robot, params, q, qd, qdd, a0):
    """Forward pass of RNEA: transforms, subspaces and body twists / accelerations (pairs)."""
    T = joint_transforms(robot, params, q, staged=True)
    S = _subspaces(robot)

    def visit(i, parent):
        v_parent, a_parent = parent
        vj = sv.pscale(S[i], qd[i])
        v = sv.padd(sv.inv_act_motion(*T[i], v_parent), vj)
        a = sv.padd(sv.inv_act_motion(*T[i], a_parent), sv.pscale(S[i], qdd[i]))
        return sv.stage((v, sv.padd(a, sv.cross_motion(v, vj))))

    va = forward_pass(robot, visit, ((ZERO, ZERO), a0))
    return T, S, va


@traced_once
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
    T, S, va = _kinematics(robot, params, q, qd, qdd, _base_acceleration(robot, gravity, dtype))

    def body_force(i):
        body = sv.rigid_body(params.theta[i])
        v, a = va[i]
        f = sv.padd(sv.inertia_apply(body, a), sv.cross_force(v, sv.inertia_apply(body, v)))
        return sv.stage(_minus(f, _external(f_ext, i)))

    def visit(i, f):
        return sv.stage((sv.pair_dot(S[i], f), sv.act_force(*T[i], f)))

    tau = backward_pass(robot, visit, [body_force(i) for i in range(robot.n)])
    return jnp.stack(tau)


@traced_once
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
    accelerations outwards. Articulated inertias are kept as their three (3, 3) blocks and carried
    to the parent blockwise (``spatial_pairs.articulated_to_parent``).

    Raises:
        ValueError: q, qd or tau not of shape (n,), f_ext not (n, 6).
    """
    check_state(robot, q=q, qd=qd, tau=tau)
    _check_f_ext(robot, f_ext)
    params, dtype = resolve(robot, params, q, qd, tau)
    T = joint_transforms(robot, params, q, staged=True)
    S = _subspaces(robot)

    def visit_velocity(i, parent):
        vj = sv.pscale(S[i], qd[i])
        v = sv.padd(sv.inv_act_motion(*T[i], parent[0]), vj)
        return sv.stage((v, sv.cross_motion(v, vj)))

    vc = forward_pass(robot, visit_velocity, ((ZERO, ZERO), None))

    def articulated_body(i):
        body = sv.rigid_body(params.theta[i])
        v = vc[i][0]
        bias = sv.cross_force(v, sv.inertia_apply(body, v))
        return sv.stage((sv.articulated(body), _minus(bias, _external(f_ext, i))))

    def visit_inertia(i, acc):
        (A, B, C), pA = acc
        U = sv.articulated_apply((A, B, C), S[i])
        D_inv = 1 / sv.pair_dot(S[i], U)
        u = tau[i] - sv.pair_dot(S[i], pA)
        Ia = (
            sv.msub(A, sv.mscale(sv.outer(U[0], U[0]), D_inv)),
            sv.msub(B, sv.mscale(sv.outer(U[0], U[1]), D_inv)),
            sv.msub(C, sv.mscale(sv.outer(U[1], U[1]), D_inv)),
        )
        pa = sv.padd(sv.padd(pA, sv.articulated_apply(Ia, vc[i][1])), sv.pscale(U, u * D_inv))
        Ia, pa = sv.stage((Ia, pa))
        to_parent = (sv.articulated_to_parent(*T[i], Ia), sv.act_force(*T[i], pa))
        return sv.stage(((U, D_inv, u), to_parent))

    Udu = backward_pass(robot, visit_inertia, [articulated_body(i) for i in range(robot.n)])

    def visit_acceleration(i, parent):
        U, D_inv, u = Udu[i]
        a = sv.padd(sv.inv_act_motion(*T[i], parent[0]), vc[i][1])
        qdd_i = (u - sv.pair_dot(U, a)) * D_inv
        return sv.stage((sv.padd(a, sv.pscale(S[i], qdd_i)), qdd_i))

    a0 = _base_acceleration(robot, gravity, dtype)
    out = forward_pass(robot, visit_acceleration, (a0, None))
    return jnp.stack([o[1] for o in out])


@traced_once
def crba(robot: Robot, q: jax.Array, *, params: RobotParams | None = None) -> jax.Array:
    """Joint-space mass matrix ``M(q)`` (n, n), symmetric, by the composite-rigid-body algorithm.

    Featherstone 2008, Table 6.2: composite inertias ``I^c_parent += X^T I^c_i X`` inwards (kept
    as mass, first moment and 3x3 rotational inertia, see ``spatial_pairs.inertia_to_parent``),
    then ``M_ij = s_j^T X_{j<-i}^* I^c_i s_i`` along each body's ancestors.

    Raises:
        ValueError: q not of shape (n,).
    """
    check_state(robot, q=q)
    params, dtype = resolve(robot, params, q)
    T = joint_transforms(robot, params, q, staged=True)
    S = _subspaces(robot)

    def visit(i, Ic):
        return Ic, sv.stage(sv.inertia_to_parent(*T[i], Ic))

    bodies = [sv.rigid_body(t) for t in params.theta]
    Ic = backward_pass(robot, visit, bodies)
    entries = {}
    for i in range(robot.n):
        F = sv.articulated_apply(sv.articulated(Ic[i]), S[i])
        entries[i, i] = sv.pair_dot(S[i], F)
        j = i
        while robot.parents[j] >= 0:
            F = sv.stage(sv.act_force(*T[j], F))
            j = robot.parents[j]
            entries[i, j] = entries[j, i] = sv.pair_dot(S[j], F)
    zero = jnp.zeros((), dtype)
    return jnp.stack(
        [
            jnp.stack([jnp.asarray(entries.get((i, j), zero), dtype) for j in range(robot.n)])
            for i in range(robot.n)
        ]
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
    params, dtype = resolve(robot, params, q)
    T = [(sv.array(R, dtype), sv.array(p, dtype)) for R, p in joint_transforms(robot, params, q)]

    def visit(i, parent):
        return T[i] if parent is None else sp.transform_compose(*parent, *T[i])

    poses = forward_pass(robot, visit, None)
    return jnp.stack([P[0] for P in poses]), jnp.stack([P[1] for P in poses])


def kinetic_energy(robot: Robot, q: jax.Array, qd: jax.Array, *, params=None) -> jax.Array:
    """Kinetic energy ``1/2 sum_i v_i^T I_i v_i`` (scalar, J)."""
    check_state(robot, q=q, qd=qd)
    params, dtype = resolve(robot, params, q, qd)
    _, _, va = _kinematics(robot, params, q, qd, jnp.zeros_like(qd), (ZERO, ZERO))
    bodies = [sv.rigid_body(t) for t in params.theta]
    return 0.5 * sum(sv.pair_dot(v, sv.inertia_apply(bodies[i], v)) for i, (v, _) in enumerate(va))


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
