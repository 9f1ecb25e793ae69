"""The one friction law and plant of bayes_nea against their closed forms (numpy), in float64 and
float32."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayes_nea as bn

FRICTION = bn.FrictionParams(
    viscous=np.array([4.3, 0.0024]),
    coulomb=np.array([0.5, 0.002]),
    stribeck_amplitude=np.array([0.3, 0.001]),
    stribeck_velocity=np.array([0.05, 0.1]),
)


@pytest.mark.parametrize("smoothing", [None, 0.01])
def test_joint_friction_closed_form_and_dissipation(smoothing):
    p = FRICTION._replace(smoothing=smoothing)
    qd = np.random.default_rng(0).normal(0, 0.2, (200, 2))
    tau_f = np.asarray(jax.vmap(lambda v: bn.joint_friction(p, v))(jnp.asarray(qd)))
    direction = np.sign(qd) if smoothing is None else np.tanh(qd / smoothing)
    level = p.coulomb + p.stribeck_amplitude * np.exp(-((qd / p.stribeck_velocity) ** 2))
    np.testing.assert_allclose(tau_f, p.viscous * qd + direction * level, rtol=1e-14, atol=1e-17)
    assert np.all(tau_f * qd >= 0)  # friction only dissipates
    # breakaway friction at rest is coulomb + stribeck_amplitude (exact sign), the limit of tanh
    at_rest = bn.joint_friction(p, jnp.full(2, 1e-9))
    if smoothing is None:
        np.testing.assert_allclose(at_rest, p.coulomb + p.stribeck_amplitude, rtol=1e-6)


def test_plant_dynamics_float32_and_motor_saturation():
    robot = bn.cartpole()
    motor = bn.DCMotor(np.array([1.7, 0.0]), np.array([7.7, 0.0]), 24.0)
    plant = bn.Plant(robot.params(), FRICTION._replace(smoothing=0.01), motor)
    f = bn.plant_dynamics(robot, plant)
    q, qd = np.array([0.1, 2.0]), np.array([0.3, -1.0])
    big = f(jnp.asarray(q), jnp.asarray(qd), jnp.array([1e3, 0.0]))
    # a command beyond the voltage limit saturates: the same as commanding exactly the limit
    at_limit = f(jnp.asarray(q), jnp.asarray(qd), jnp.array([1.7 * 24.0, 0.0]))
    np.testing.assert_allclose(np.asarray(big), np.asarray(at_limit), rtol=1e-14)
    tau = 1.7 * 24.0 - 7.7 * qd[0] - np.asarray(bn.joint_friction(plant.friction, jnp.asarray(qd)))
    tau[1] = -np.asarray(bn.joint_friction(plant.friction, jnp.asarray(qd)))[1]
    np.testing.assert_allclose(
        np.asarray(big), np.asarray(bn.aba(robot, q, qd, tau)), rtol=1e-12, atol=1e-12
    )
    low = f(*(jnp.asarray(x, jnp.float32) for x in (q, qd, [3.0, 0.0])))
    assert low.dtype == jnp.float32
    np.testing.assert_allclose(
        np.asarray(low),
        np.asarray(f(jnp.asarray(q), jnp.asarray(qd), jnp.array([3.0, 0.0]))),
        rtol=1e-4,
    )
