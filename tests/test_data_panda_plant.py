"""The simulated Panda plant: LuGre friction against its closed forms, static equilibrium against
the rigid-body gravity torques (Pinocchio-checked), energy balance, and the excitation data."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayes_nea as bn
from data import panda_plant as pp


@pytest.fixture(scope="module")
def plant():
    return pp.make_plant()


def test_lugre_steady_state_is_the_stribeck_curve(plant):
    """At constant velocity z converges to g(v) sign(v) / sigma0: tau_f = g(v) sign(v) + sigma2 v."""
    p = plant.params
    v = jnp.array([0.01, -0.03, 0.05, -0.2, 0.5, -1.0, 2.0])
    z = jnp.zeros(7)
    for _ in range(200):
        z, tau = pp.lugre_update(p, z, v, 0.05)
    g = p.coulomb + (p.static - p.coulomb) * np.exp(-((np.asarray(v) / p.stribeck_velocity) ** 2))
    np.testing.assert_allclose(tau, g * np.sign(v) + p.viscous * np.asarray(v), rtol=1e-6)


def test_lugre_presliding_is_a_spring_and_hysteretic(plant):
    """A tiny displacement dx from z = 0 gives tau ~ sigma0 dx + damping (pre-sliding); the
    torque at v = 0 depends on the direction of the last sliding (state, not a function of v)."""
    p = plant.params
    h, v = 1e-4, jnp.full(7, 1e-4)
    z = jnp.zeros(7)
    for _ in range(10):  # dx = 1e-7 rad
        z, tau = pp.lugre_update(p, z, v, h)
    # sigma0 dx + (sigma1 + sigma2) v: z ~ dx and zd ~ v while |v| << v_s
    expected = p.bristle_stiffness * 1e-7 + (p.bristle_damping + p.viscous) * 1e-4
    np.testing.assert_allclose(tau, expected, rtol=0.02)
    # memory: after sliding forwards or backwards, the same input v = 0 gives opposite torques
    # (+-F_c within 5 %: the bristles hold the last sliding force)
    held = []
    for sign in (1.0, -1.0):
        z = jnp.zeros(7)
        for _ in range(100):
            z, _ = pp.lugre_update(p, z, jnp.full(7, sign * 0.2), 1e-2)
        held.append(np.asarray(pp.lugre_update(p, z, jnp.zeros(7), 1e-3)[1]))
    np.testing.assert_allclose(held[0], p.coulomb, rtol=0.05)
    np.testing.assert_allclose(held[1], -p.coulomb, rtol=0.05)


@pytest.fixture(scope="module")
def period_step(plant):
    """One jitted control period with the plant parameters as an argument (one compile shared by
    the tests below), no delay: ``(params, state, tau) -> (state, tau_s)``."""
    return jax.jit(
        lambda params, s, tau: pp.plant_period(
            pp.PandaPlant(plant.robot, params, delay_steps=0), s, tau
        )
    )


def test_plant_holds_still_under_gravity_torque(plant, period_step):
    """Commanding tau = g(q0) from the gravity-deflected initial state, without friction, the link
    stays at q0 and the spring (sensor) torque is g(q0)."""
    params = plant.params._replace(
        coulomb=np.full(7, 1e-9), static=np.full(7, 1e-9), viscous=np.zeros(7),
    )  # fmt: skip
    q0 = jnp.asarray(pp.PANDA_HOME)
    g = bn.gravity_torques(plant.robot, q0)
    s = pp.initial_state(pp.PandaPlant(plant.robot, params, delay_steps=0), q0, jnp.zeros(7))
    for _ in range(300):
        s, tau_s = period_step(params, s, g)
    np.testing.assert_allclose(s.q, q0, atol=1e-6)
    np.testing.assert_allclose(tau_s, g, rtol=1e-5, atol=1e-6)


def test_energy_balance_without_dissipation(plant, period_step):
    """No friction, no spring damping, zero command: the total energy (link kinetic + potential +
    motor kinetic + spring) drifts by < 0.2 % of the potential energy exchanged over 0.2 s
    (semi-implicit Euler at 10 kHz; M held over 1 ms)."""
    p = plant.params._replace(
        coulomb=np.full(7, 1e-9), static=np.full(7, 1e-9), viscous=np.zeros(7),
        bristle_stiffness=np.full(7, 1e-6), bristle_damping=np.zeros(7), spring_damping=np.zeros(7),
    )  # fmt: skip
    robot = plant.robot
    q0 = jnp.asarray(pp.PANDA_HOME)
    s = pp.PlantState(
        q0, jnp.full(7, 0.3), q0 + 0.002, jnp.full(7, 0.3), jnp.zeros(7), jnp.zeros((0, 7))
    )

    def moving(s):
        spring = 0.5 * jnp.sum(p.stiffness * (s.th - s.q) ** 2)
        motor = 0.5 * jnp.sum(p.motor_inertia * s.thd**2)
        return bn.kinetic_energy(robot, s.q, s.qd) + spring + motor

    energy = lambda s: moving(s) + bn.potential_energy(robot, s.q)
    e0, pe0 = energy(s), bn.potential_energy(robot, s.q)
    exchanged = 0.0
    for _ in range(200):
        s, _ = period_step(p, s, jnp.zeros(7))
        exchanged = max(exchanged, abs(float(bn.potential_energy(robot, s.q) - pe0)))
    drift = abs(float(energy(s) - e0))
    assert drift < 2e-3 * exchanged, (drift, exchanged)
    assert float(jnp.abs(s.q - q0).max()) > 0.01  # it did move


@pytest.fixture(scope="module")
def split():
    return pp.excitation_data(trajectories=4, period=1.0, seed=3)


@pytest.mark.slow
def test_excitation_split_by_trajectory_and_speed(split):
    train = {(m.trajectory, m.speed) for m in split.train}
    test = {(m.trajectory, m.speed) for m in split.test}
    valid = {(m.trajectory, m.speed) for m in split.valid}
    assert {k for k, _ in train}.isdisjoint({k for k, _ in test})
    assert {s for _, s in test} == {"slow", "fast"} and len(test) == 4
    assert train.isdisjoint(valid) and test.isdisjoint(valid)
    assert {(m.trajectory, m.speed) for m in split.sysid} == {(0, "slow"), (0, "fast")}


@pytest.mark.slow
def test_excitation_speeds_and_tracking(split):
    """Slow runs are the fast path stretched 4x in time (peak velocities 0.1 / 0.4 of the limit),
    and the stiff data-collection controller tracks them to within 1 degree."""
    vlim = np.asarray(pp.panda_robot().velocity_limit)
    for m in split.train + split.valid + split.test:
        frac = pp.SPEED_FRACTIONS[m.speed]
        assert np.all(np.abs(m.qd_des).max(0) <= frac * vlim * (1 + 1e-6))
        assert np.abs(m.q_true - m.q_des).max() < np.deg2rad(1.0)
    slow = next(m for m in split.valid if m.speed == "slow")
    fast = next(m for m in split.valid if m.speed == "fast" and m.trajectory == slow.trajectory)
    np.testing.assert_allclose(slow.q_des[::4][: len(fast.t)], fast.q_des, atol=1e-9)
    # the target torque = rigid body + what it misses (friction, motor inertia, elasticity):
    # the residual is of the order of the Coulomb levels, not of the gravity torques
    rb = np.asarray(jax.vmap(lambda q, qd, qdd: bn.rnea(pp.panda_robot(), q, qd, qdd))(
        fast.q, fast.qd, fast.qdd))  # fmt: skip
    resid = np.sqrt(((fast.tau - rb) ** 2).mean(0))
    assert np.all(resid < 5 * pp.default_plant_params().static + 0.5)
    assert np.all(resid > 0.1 * pp.default_plant_params().coulomb)


def test_saturated_movement_is_refused_with_its_path_joint_and_time():
    robot = pp.panda_robot()
    tau = np.zeros((2, 50, 7))
    tau[1, 20, 3] = -robot.effort_limit[3]
    with pytest.raises(ValueError, match=r"path 1 \(slow\).*joint 4.*t = 0\.020 s"):
        pp.check_not_saturated(robot, tau, speed="slow", rate_hz=1000.0)
    pp.check_not_saturated(robot, tau * 0.99, speed="slow", rate_hz=1000.0)


@pytest.mark.slow
def test_data_collection_loop_is_stable_where_light_spring_damping_was_not():
    """Path seed 10 run slow: with the springs damped at 10 % of critical the stiff tracking loop
    (1 ms delay) grows a 10-12 Hz oscillation of joints 2 and 4 up to the effort limit after
    ~18 s, and the run is refused; at the plant's damping it tracks within 0.5 degree."""
    robot = pp.panda_robot()
    paths = pp.fourier_paths(robot, [10], period=5.0)
    key = jax.random.key(1)
    (m,) = pp.run_paths(pp.make_plant(), paths, speed="slow", key=key)
    assert np.abs(m.q_true - m.q_des).max() < np.deg2rad(0.5)
    p = pp.default_plant_params()
    light = p._replace(spring_damping=2 * 0.1 * np.sqrt(p.stiffness * p.motor_inertia))
    with pytest.raises(ValueError, match="effort limit"):
        pp.run_paths(pp.make_plant(params=light), paths, speed="slow", key=key)
