"""Identities of rigid-body dynamics that must hold whatever the implementation.

Lecture notes, "Properties": tau = Y theta; aba inverts rnea; M symmetric positive definite and
equal to RNEA's columns with zero velocity and gravity; M_dot - 2C skew-symmetric; gradients
with respect to every parameter match central finite differences.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayes_nea as bn


@pytest.fixture(scope="module")
def case(reference):
    rng = np.random.default_rng(7)
    q, qd, qdd = (x[0] for x in reference.random_states(rng, 1))
    return reference.robot, q, qd, qdd


def test_regressor_times_theta_is_rnea(case):
    robot, q, qd, qdd = case
    Y = bn.joint_torque_regressor(robot, q, qd, qdd)
    tau = bn.rnea(robot, q, qd, qdd)
    np.testing.assert_allclose(Y @ robot.nominal.theta.reshape(-1), tau, rtol=1e-11, atol=1e-11)


def test_regressor_uses_kinematic_params(case):
    robot, q, qd, qdd = case
    rng = np.random.default_rng(3)
    params = robot.nominal._replace(
        rpy=robot.nominal.rpy + rng.normal(0, 0.1, robot.nominal.rpy.shape),
        xyz=robot.nominal.xyz + rng.normal(0, 0.05, robot.nominal.xyz.shape),
    )
    Y = bn.joint_torque_regressor(robot, q, qd, qdd, params=params)
    tau = bn.rnea(robot, q, qd, qdd, params=params)
    np.testing.assert_allclose(Y @ params.theta.reshape(-1), tau, rtol=1e-11, atol=1e-11)
    assert not np.allclose(tau, bn.rnea(robot, q, qd, qdd))


def test_aba_inverts_rnea(case):
    robot, q, qd, qdd = case
    tau = bn.rnea(robot, q, qd, qdd)
    np.testing.assert_allclose(bn.aba(robot, q, qd, tau), qdd, rtol=1e-10, atol=1e-10)


def test_mass_matrix_spd_and_equal_to_rnea_columns(case):
    robot, q, _, _ = case
    M = np.asarray(bn.crba(robot, q))
    np.testing.assert_allclose(M, M.T, atol=1e-14)
    assert np.linalg.eigvalsh(M).min() > 0
    zero = jnp.zeros(robot.n)
    columns = np.stack(
        [bn.rnea(robot, q, zero, e, gravity=jnp.zeros(3)) for e in jnp.eye(robot.n)], axis=1
    )
    np.testing.assert_allclose(M, columns, rtol=1e-12, atol=1e-14)


def test_mdot_minus_2c_is_skew_symmetric(case):
    robot, q, qd, _ = case
    _, M_dot = jax.jvp(lambda x: bn.crba(robot, x), (q,), (qd,))
    C = bn.coriolis_matrix(robot, q, qd)
    N = np.asarray(M_dot - 2 * C)
    np.testing.assert_allclose(N, -N.T, atol=1e-12)
    # and C qd + g = c(q, qd)
    np.testing.assert_allclose(
        C @ qd + bn.gravity_torques(robot, q), bn.nonlinear_effects(robot, q, qd), atol=1e-11
    )


def _central_difference(f, x, floor, rel_step=1e-4):
    """Five-point central differences, step ``rel_step * max(|x_i|, floor)`` for each entry.

    Inertias span 1e-6 to 1, so theta takes a floor of 1e-4; angles and lengths take 1e-3.
    """
    x = np.asarray(x, dtype=float)
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        h = rel_step * max(abs(x[idx]), floor)
        e = np.zeros_like(x)
        e[idx] = h
        grad[idx] = (-f(x + 2 * e) + 8 * f(x + e) - 8 * f(x - e) + f(x - 2 * e)) / (12 * h)
    return grad


def _relative_error(grad, fd, value):
    """Largest error relative to the largest derivative.

    Some derivatives are exactly zero (a cart-pole's joint offsets along its rail); their finite
    differences are round-off, about 1e-9 |f|, so the scale has a floor of 1e-2 |f|.
    """
    return np.abs(np.asarray(grad) - fd).max() / max(np.abs(fd).max(), 1e-2 * abs(value), 1e-12)


@pytest.mark.parametrize("algorithm", ["rnea", "aba"])
def test_parameter_gradients_match_finite_differences(case, algorithm):
    """d/d(theta, rpy, xyz) of a random projection of rnea / aba."""
    robot, q, qd, qdd = case
    w = np.random.default_rng(11).normal(size=robot.n)
    fn = bn.rnea if algorithm == "rnea" else bn.aba
    # one compiled program gives the value (for the differences) and the gradient
    value_and_grad = jax.jit(
        jax.value_and_grad(lambda params: jnp.dot(w, fn(robot, q, qd, qdd, params=params)))
    )
    value, grads = value_and_grad(robot.nominal)
    for field in ("theta", "rpy", "xyz"):
        x0 = np.asarray(getattr(robot.nominal, field))
        fd = _central_difference(
            lambda x, field=field: float(value_and_grad(robot.nominal._replace(**{field: x}))[0]),
            x0,
            floor=1e-4 if field == "theta" else 1e-3,
        )
        err = _relative_error(getattr(grads, field), fd, float(value))
        assert err < 1e-6, (field, err)


def test_state_gradients_match_finite_differences(case):
    robot, q, qd, qdd = case
    w = np.random.default_rng(12).normal(size=robot.n)
    value_and_grad = jax.jit(  # one program: the value (differences) and the gradient
        jax.value_and_grad(lambda q, qd, tau: jnp.dot(w, bn.aba(robot, q, qd, tau)), (0, 1, 2))
    )
    tau = bn.rnea(robot, q, qd, qdd)
    value, grads = value_and_grad(q, qd, tau)
    for k, x in enumerate((q, qd, tau)):

        def f(y, k=k):
            args = [q, qd, tau]
            args[k] = y
            return float(value_and_grad(*args)[0])

        fd = _central_difference(f, x, floor=1e-3)
        err = _relative_error(grads[k], fd, float(value))
        assert err < 1e-6, (k, err)
