"""Controllers: swing-up energy, LQR stabilisation, computed-torque tracking vs its closed form."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import PANDA_FINGERS, panda_urdf_path

import bayes_nea as bn
from bayes_nea import control

RATE = 250.0
SYSTEMS = ("cartpole", "furuta")


def _relative_energy(robot, traj):
    """(E - E_down) / (E_up - E_down) along a trajectory: 0 hanging at rest, 1 upright at rest."""
    zero = jnp.zeros(robot.n)
    e_down = bn.total_energy(robot, zero, zero)
    e_up = control.upright_energy(robot, zero)
    energy = jax.vmap(lambda q, qd: control.pendulum_energy(robot, q, qd))(traj.q, traj.qd)
    return np.asarray((energy - e_down) / (e_up - e_down))


def _rollout(robot, ctrl, q0, qd0, seconds):
    qdd = bn.forward_dynamics(robot)
    steps = int(seconds * RATE)
    return jax.jit(lambda a, b: bn.integrate_closed_loop(qdd, ctrl, a, b, steps, dt=1 / RATE))(
        jnp.asarray(q0), jnp.asarray(qd0)
    )


def test_pendulum_energy_closed_form_cartpole():
    # 1/2 (J_c + m l^2) qd^2 - m g l cos(q): the pole about its pivot, cart velocity masked.
    robot = bn.get_system("cartpole")
    m, l, J = 0.127, 0.1778, 1.1987e-3
    q = jnp.array([0.2, 0.7])
    qd = jnp.array([1.5, -2.0])
    expected = 0.5 * (J + m * l * l) * 4.0 - m * 9.81 * l * np.cos(0.7)
    np.testing.assert_allclose(control.pendulum_energy(robot, q, qd), expected, rtol=1e-12)
    np.testing.assert_allclose(control.upright_energy(robot, q), m * 9.81 * l, rtol=1e-12)


@pytest.mark.parametrize("name", SYSTEMS)
def test_lqr_holds_upright_from_perturbation(name):
    robot = bn.get_system(name)
    ctrl = control.lqr_stabilizer(robot)
    traj = _rollout(robot, ctrl, [0.05, np.pi + 0.1], [0.0, -0.3], 5.0)
    err = np.abs(np.asarray(control.wrap_angle(traj.q[:, 1] - np.pi)))
    assert err.max() < 0.2
    assert err[-int(RATE) :].max() < 1e-3
    assert abs(float(traj.q[-1, 0])) < 1e-2  # the actuated joint returns to its target


def test_lqr_gain_matches_riccati_residual():
    # K = R^-1 B^T P must make A - B K Hurwitz (closed-loop stable linearisation).
    robot = bn.get_system("cartpole")
    ctrl = control.lqr_stabilizer(robot)
    A, B, _ = control._linearise(
        bn.forward_dynamics(robot), np.array([0.0, np.pi]), np.array([True, False])
    )
    eig = np.linalg.eigvals(A - B @ ctrl.gain)
    assert np.all(eig.real < 0)
    assert np.any(np.linalg.eigvals(A).real > 0)  # the open-loop upright is unstable


@pytest.mark.parametrize("name", SYSTEMS)
def test_swing_up_reaches_upright_energy_then_balances(name):
    # Far from the upright only the energy controller acts, so the first phase tests it alone.
    robot = bn.get_system(name)
    ctrl = control.swing_up_and_stabilize(robot)
    traj = _rollout(robot, ctrl, [0.0, 0.1], [0.0, 0.0], 10.0)
    rel = _relative_energy(robot, traj)
    assert rel[0] < 0.01
    reached = np.flatnonzero(rel >= 0.95)
    assert reached.size, f"{name}: energy never reached the upright level (max {rel.max():.3f})"
    assert reached[0] / RATE < 2.0, f"{name}: took {reached[0] / RATE:.2f} s"
    tau = np.asarray(traj.tau)
    assert np.all(np.abs(tau) <= np.asarray(robot.effort_limit) + 1e-12)
    assert np.all(tau[:, 1] == 0.0)  # the pendulum joint is never driven
    err = np.abs(np.asarray(control.wrap_angle(traj.q[:, 1] - np.pi)))
    assert err[-2 * int(RATE) :].max() < 0.05


def test_protocol_releases_with_zero_effort():
    robot = bn.get_system("cartpole")
    ctrl = control.swing_up_protocol(robot, swing_time=2.0, release_time=1.0)
    traj = _rollout(robot, ctrl, [0.0, 0.1], [0.0, 0.0], 6.0)
    t = np.asarray(traj.t[:-1])
    tau = np.asarray(traj.tau[:, 0])
    released = np.mod(t, 3.0) >= 2.0
    assert np.all(tau[released] == 0.0)
    assert np.abs(tau[~released]).max() > 1.0


def test_swing_up_rejects_fully_actuated():
    robot = bn.load_urdf(panda_urdf_path(), lock_joints=dict.fromkeys(PANDA_FINGERS, 0.0))
    with pytest.raises(ValueError, match="exactly one unactuated revolute joint"):
        control.energy_swing_up(robot)


def test_computed_torque_pd_error_follows_closed_form():
    # With the exact model, e'' + kd e' + kp e = 0; kd = 2 sqrt(kp) gives e = e0 (1 + w t) exp(-w t).
    robot = bn.load_urdf(panda_urdf_path(), lock_joints=dict.fromkeys(PANDA_FINGERS, 0.0))
    n, w, dt = robot.n, 20.0, 1e-3
    base = jnp.asarray([0.0, -0.5, 0.0, -2.0, 0.0, 1.5, 0.7])
    amp = jnp.linspace(0.1, 0.3, n)

    def reference(t):
        return base + amp * jnp.sin(t), amp * jnp.cos(t), -amp * jnp.sin(t)

    ctrl = control.computed_torque_pd(robot, reference, kp=w * w, kd=2 * w)
    e0 = 0.02 * jnp.ones(n)
    steps = 500
    traj = jax.jit(
        lambda q0, qd0: bn.integrate_closed_loop(
            bn.forward_dynamics(robot), ctrl, q0, qd0, steps, dt=dt
        )
    )(base + e0, amp)
    t = np.asarray(traj.t)
    q_ref = np.asarray(jax.vmap(lambda s: reference(s)[0])(traj.t))
    err = np.asarray(traj.q) - q_ref
    expected = 0.02 * (1 + w * t) * np.exp(-w * t)
    # zero-order hold over 1 ms steps: O(dt) deviation from the continuous closed form
    np.testing.assert_allclose(err, np.broadcast_to(expected[:, None], err.shape), atol=5e-4)
    assert np.abs(err[-1]).max() < 1e-3


@pytest.mark.parametrize("name", SYSTEMS)
def test_controllers_run_in_float32(name):
    robot = bn.get_system(name)
    ctrl = jax.jit(control.swing_up_protocol(robot, swing_time=2.0, release_time=1.0))
    rng = np.random.default_rng(0)
    for _ in range(3):
        q, qd = rng.normal(size=2), rng.normal(size=2)
        u64 = ctrl(np.float64(0.5), jnp.asarray(q), jnp.asarray(qd))
        u32 = ctrl(np.float32(0.5), jnp.asarray(q, jnp.float32), jnp.asarray(qd, jnp.float32))
        assert u32.dtype == jnp.float32 and u64.dtype == jnp.float64
        np.testing.assert_allclose(u32, u64, rtol=1e-3, atol=1e-4 * robot.effort_limit[0])
