"""RNEA, ABA, CRBA, regressor, energies and kinematics against Pinocchio on random states.

Tolerance: 1e-9 relative to the largest magnitude of Pinocchio's result (float64), for the Panda
(fingers locked), the built-in cart-pole and Furuta pendulum, and a branching tree with fixed,
prismatic and continuous joints.
"""

import jax
import numpy as np
import pinocchio as pin
import pytest

import bayes_nea as bn

RTOL = 1e-9
SAMPLES = 8


def assert_close(ours, theirs, rtol=RTOL):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    scale = max(np.abs(theirs).max(), 1.0)
    err = np.abs(ours - theirs).max() / scale
    assert err < rtol, f"relative error {err:.3e} >= {rtol}"


@pytest.fixture(scope="module")
def states(reference):
    rng = np.random.default_rng(42)
    return reference.random_states(rng, SAMPLES)


@pytest.fixture(scope="module")
def batched(reference):
    """jit(vmap(...)) of each algorithm for this robot, compiled once per module."""
    robot = reference.robot
    return {
        "rnea": jax.jit(jax.vmap(lambda q, qd, qdd: bn.rnea(robot, q, qd, qdd))),
        "aba": jax.jit(jax.vmap(lambda q, qd, tau: bn.aba(robot, q, qd, tau))),
        "crba": jax.jit(jax.vmap(lambda q: bn.crba(robot, q))),
        "regressor": jax.jit(
            jax.vmap(lambda q, qd, qdd: bn.joint_torque_regressor(robot, q, qd, qdd))
        ),
    }


def test_joint_order_and_parameters_match_pinocchio(reference):
    model, robot = reference.model, reference.robot
    assert tuple(model.names[i] for i in range(1, model.njoints)) == robot.joint_names
    assert tuple(model.parents[i] - 1 for i in range(1, model.njoints)) == robot.parents
    theta_pin = np.stack([model.inertias[i].toDynamicParameters() for i in range(1, model.njoints)])
    assert_close(robot.nominal.theta, theta_pin, 1e-12)


def test_rnea(reference, states, batched):
    q, qd, qdd = states
    ours = batched["rnea"](q, qd, qdd)
    for k in range(SAMPLES):
        theirs = pin.rnea(reference.model, reference.data, reference.q_pin(q[k]), qd[k], qdd[k])
        assert_close(ours[k], theirs)


def test_aba(reference, states, batched):
    q, qd, tau = states
    ours = batched["aba"](q, qd, tau)
    for k in range(SAMPLES):
        theirs = pin.aba(reference.model, reference.data, reference.q_pin(q[k]), qd[k], tau[k])
        assert_close(ours[k], theirs)


def test_crba(reference, states, batched):
    q = states[0]
    ours = batched["crba"](q)
    for k in range(SAMPLES):
        assert_close(ours[k], reference.mass_matrix(q[k]))


def test_joint_torque_regressor(reference, states, batched):
    q, qd, qdd = states
    ours = batched["regressor"](q, qd, qdd)
    for k in range(SAMPLES):
        Y = pin.computeJointTorqueRegressor(
            reference.model, reference.data, reference.q_pin(q[k]), qd[k], qdd[k]
        )
        assert_close(ours[k], Y)


def test_single_state_calls_match_pinocchio(reference, states):
    """A direct call on one state runs the one-function program (``loops.one_function``)."""
    robot, model, data = reference.robot, reference.model, reference.data
    q, qd, qdd = states
    for k in range(2):
        qp = reference.q_pin(q[k])
        tau = pin.rnea(model, data, qp, qd[k], qdd[k])
        assert_close(bn.rnea(robot, q[k], qd[k], qdd[k]), tau)
        assert_close(bn.aba(robot, q[k], qd[k], tau), pin.aba(model, data, qp, qd[k], tau))
        assert_close(bn.crba(robot, q[k]), reference.mass_matrix(q[k]))
        assert_close(
            bn.joint_torque_regressor(robot, q[k], qd[k], qdd[k]),
            pin.computeJointTorqueRegressor(model, data, qp, qd[k], qdd[k]),
        )


def test_bias_gravity_energy_and_coriolis(reference, states):
    robot, model, data = reference.robot, reference.model, reference.data
    q, qd, _ = states
    for k in range(2):
        qp = reference.q_pin(q[k])
        assert_close(
            bn.nonlinear_effects(robot, q[k], qd[k]), pin.nonLinearEffects(model, data, qp, qd[k])
        )
        assert_close(
            bn.gravity_torques(robot, q[k]), pin.computeGeneralizedGravity(model, data, qp)
        )
        assert_close(
            bn.kinetic_energy(robot, q[k], qd[k]), pin.computeKineticEnergy(model, data, qp, qd[k])
        )
        assert_close(bn.potential_energy(robot, q[k]), pin.computePotentialEnergy(model, data, qp))
        assert_close(
            bn.coriolis_matrix(robot, q[k], qd[k]),
            pin.computeCoriolisMatrix(model, data, qp, qd[k]),
        )


def test_forward_kinematics(reference, states):
    robot, model, data = reference.robot, reference.model, reference.data
    q = states[0][0]
    R, p = bn.forward_kinematics(robot, q)
    pin.forwardKinematics(model, data, reference.q_pin(q))
    for i in range(robot.n):
        assert_close(R[i], data.oMi[i + 1].rotation)
        assert_close(p[i], data.oMi[i + 1].translation)


def test_external_wrenches(reference, states):
    robot, model, data = reference.robot, reference.model, reference.data
    q, qd, qdd = (x[0] for x in states)
    f_ext = np.random.default_rng(1).normal(size=(robot.n, 6))
    fext_pin = [pin.Force.Zero()] + [pin.Force(f[:3], f[3:]) for f in f_ext]
    qp = reference.q_pin(q)
    tau_pin = pin.rnea(model, data, qp, qd, qdd, fext_pin)
    assert_close(bn.rnea(robot, q, qd, qdd, f_ext=f_ext), tau_pin)
    assert_close(
        bn.aba(robot, q, qd, tau_pin, f_ext=f_ext), pin.aba(model, data, qp, qd, tau_pin, fext_pin)
    )


def test_gravity_is_settable(reference, states):
    robot, model, data = reference.robot, reference.model, reference.data
    q = states[0][0]
    g = np.array([0.3, -1.0, -9.80665])
    model.gravity.linear = g
    try:
        theirs = pin.computeGeneralizedGravity(model, data, reference.q_pin(q))
    finally:
        model.gravity.linear = np.array([0.0, 0.0, -9.81])
    assert_close(bn.gravity_torques(robot, q, gravity=g), theirs)
