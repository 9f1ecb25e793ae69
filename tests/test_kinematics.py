"""Kinematic maps: SO(3) exponential coordinates, RPY placements, and the no-Kin z-axis form.

References: Pinocchio's ``exp3``/``log3``/``rpy`` and its ``rnea``/``aba``/``crba`` on the
original model (tolerance 1e-10 on torques and accelerations), plus identities between our two
equivalent robots (rnea, aba, crba and their parameter Jacobians).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from conftest import BRANCHING_URDF, panda_reference, system_reference, urdf_reference

import bayes_nea as bn
from bayes_nea import kinematics as kin


def test_so3_exp_and_log_agree_with_pinocchio():
    rng = np.random.default_rng(0)
    exp, log = jax.jit(kin.so3_exp), jax.jit(kin.so3_log)
    axes = rng.normal(size=(60, 3))
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    angles = np.concatenate([[0.0, 1e-12, 1e-6, 1e-3], rng.uniform(0, np.pi, 50), [np.pi - 1e-6, np.pi - 1e-9]])
    for u, t in zip(axes, angles, strict=False):
        r = u * t
        R = np.asarray(exp(jnp.asarray(r)))
        np.testing.assert_allclose(R, pin.exp3(r), atol=1e-14)
        back = np.asarray(log(jnp.asarray(R)))
        np.testing.assert_allclose(pin.exp3(back), R, atol=1e-13)
        if t < np.pi - 1e-5:
            np.testing.assert_allclose(back, r, atol=1e-10)
            np.testing.assert_allclose(back, pin.log3(R), atol=1e-10)
    # at exactly pi either sign is right
    R_pi = pin.exp3(np.array([0.0, np.pi, 0.0]))
    np.testing.assert_allclose(np.abs(np.asarray(log(jnp.asarray(R_pi)))), [0, np.pi, 0], atol=1e-7)


def test_so3_gradients_are_finite_at_zero_and_match_pinocchio_jacobian():
    g = jax.jacfwd(lambda r: kin.so3_exp(r).reshape(-1))(jnp.zeros(3))
    assert bool(jnp.all(jnp.isfinite(g)))
    # d exp(S(r)) / dr at r = 0 is the skew generator: column k is vec(S(e_k))
    np.testing.assert_allclose(np.asarray(g).T.reshape(3, 3, 3), [pin.skew(e) for e in np.eye(3)], atol=1e-15)
    assert bool(jnp.all(jnp.isfinite(jax.jacfwd(kin.so3_log)(jnp.eye(3)))))
    # right Jacobian of the log against Pinocchio's Jlog3: d log(R exp(S(w))) / dw at w = 0
    r = np.array([0.4, -0.3, 0.9])
    R = jnp.asarray(pin.exp3(r))
    ours = jax.jacfwd(lambda w: kin.so3_log(R @ kin.so3_exp(w)))(jnp.zeros(3))
    np.testing.assert_allclose(np.asarray(ours), pin.Jlog3(np.asarray(R)), atol=1e-10)


def test_joint_placement_and_z_joint_transform_agree_with_pinocchio():
    rng = np.random.default_rng(1)
    for _ in range(10):
        rpy, xyz, q = rng.uniform(-np.pi, np.pi, 3), rng.normal(size=3), rng.normal()
        placement = pin.SE3(pin.rpy.rpyToMatrix(rpy), xyz)
        R, p = bn.joint_placement(jnp.asarray(rpy), jnp.asarray(xyz))
        np.testing.assert_allclose(np.asarray(R), placement.rotation, atol=1e-14)
        np.testing.assert_allclose(np.asarray(p), xyz, atol=0)
        rpy2, _ = kin.placement_parameters(R, p)
        np.testing.assert_allclose(pin.rpy.rpyToMatrix(np.asarray(rpy2)), placement.rotation, atol=1e-13)
        revolute = placement * pin.SE3(pin.exp3(np.array([0, 0, q])), np.zeros(3))
        prismatic = placement * pin.SE3(np.eye(3), np.array([0, 0, q]))
        for kind, ref in (("revolute", revolute), ("prismatic", prismatic)):
            R, p = bn.z_joint_transform(jnp.asarray(rpy), jnp.asarray(xyz), jnp.asarray(q), kind)
            np.testing.assert_allclose(np.asarray(R), ref.rotation, atol=1e-14)
            np.testing.assert_allclose(np.asarray(p), ref.translation, atol=1e-14)
    with pytest.raises(ValueError, match="valid kinds"):
        bn.z_joint_transform(jnp.zeros(3), jnp.zeros(3), jnp.asarray(0.0), "helical")
    with pytest.raises(ValueError, match=r"rpy has shape \(2,\)"):
        bn.joint_placement(jnp.zeros(2), jnp.zeros(3))
    with pytest.raises(ValueError, match=r"expected \(\) \(one joint position\)"):
        bn.z_joint_transform(jnp.zeros(3), jnp.zeros(3), jnp.zeros(2))


REFERENCES = {
    "branching": lambda: urdf_reference(BRANCHING_URDF),
    "panda": panda_reference,
    "cartpole": lambda: system_reference("cartpole"),
    "furuta": lambda: system_reference("furuta"),
}


@pytest.fixture(scope="module", params=sorted(REFERENCES))
def pair(request):
    ref = REFERENCES[request.param]()
    return ref, bn.z_axis_form(ref.robot)


def test_z_axis_form_has_z_axes_and_keeps_joint_data(pair):
    ref, z = pair
    assert z.axes == ((0.0, 0.0, 1.0),) * ref.robot.n
    for field in ("joint_names", "parents", "joint_types", "lower", "upper", "effort_limit", "continuous"):
        assert getattr(z, field) == getattr(ref.robot, field)
    np.testing.assert_allclose(z.nominal.theta[:, 0], ref.robot.nominal.theta[:, 0], rtol=1e-15)
    assert bool(jnp.all(bn.is_physically_consistent(z.nominal.theta)))


def test_z_axis_form_dynamics_agree_with_original_and_pinocchio(pair):
    ref, z = pair
    robot = ref.robot
    q, qd, qdd = ref.random_states(np.random.default_rng(2), 6)
    fns = {
        "rnea": jax.jit(lambda r, q, qd, u: jax.vmap(lambda a, b, c: bn.rnea(r, a, b, c))(q, qd, u)),
        "aba": jax.jit(lambda r, q, qd, u: jax.vmap(lambda a, b, c: bn.aba(r, a, b, c))(q, qd, u)),
    }
    tau = np.asarray(fns["rnea"](z, q, qd, qdd))
    np.testing.assert_allclose(tau, np.asarray(fns["rnea"](robot, q, qd, qdd)), atol=1e-10, rtol=1e-10)
    qdd_z = np.asarray(fns["aba"](z, q, qd, tau))
    np.testing.assert_allclose(qdd_z, qdd, atol=1e-9, rtol=1e-9)
    for k in range(len(q)):
        qp = ref.q_pin(q[k])
        np.testing.assert_allclose(tau[k], pin.rnea(ref.model, ref.data, qp, qd[k], qdd[k]), atol=1e-10, rtol=1e-10)
        M = ref.mass_matrix(q[k])
        np.testing.assert_allclose(np.asarray(bn.crba(z, jnp.asarray(q[k]))), M, atol=1e-10, rtol=1e-10)


def test_z_axis_form_exported_urdf_reads_back_in_pinocchio():
    ref = urdf_reference(BRANCHING_URDF)
    z = bn.z_axis_form(ref.robot)
    model = pin.buildModelFromXML(bn.to_urdf(z))
    data = model.createData()
    model.gravity.linear = ref.model.gravity.linear
    q, qd, qdd = ref.random_states(np.random.default_rng(3), 4)
    for k in range(len(q)):
        qp = ref.q_pin(q[k])
        np.testing.assert_allclose(
            pin.rnea(model, data, qp, qd[k], qdd[k]), pin.rnea(ref.model, ref.data, qp, qd[k], qdd[k]), atol=1e-10
        )


def test_z_axis_params_is_differentiable_and_preserves_the_torque_map():
    """d tau / d params is the same through the z-form map as on the original robot."""
    ref = urdf_reference(BRANCHING_URDF)
    robot, z = ref.robot, bn.z_axis_form(ref.robot)
    q, qd, qdd = (jnp.asarray(a[0]) for a in ref.random_states(np.random.default_rng(4), 1))
    params = robot.params(jnp.float64)

    def original(p):
        return bn.rnea(robot, q, qd, qdd, params=p)

    def through_z(p):
        return bn.rnea(z, q, qd, qdd, params=bn.z_axis_params(robot, p))

    J0, J1 = jax.jit(jax.jacfwd(original))(params), jax.jit(jax.jacfwd(through_z))(params)
    for a, b in zip(jax.tree_util.tree_leaves(J0), jax.tree_util.tree_leaves(J1), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-9, rtol=1e-9)
    # float32 runs
    out = bn.z_axis_params(robot, robot.params(jnp.float32))
    assert out.theta.dtype == jnp.float32 and out.rpy.dtype == jnp.float32
