"""RK4 rollouts: exactness on polynomials, energy drift at fourth order, closed loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayes_nea as bn


@pytest.fixture(scope="module")
def cartpole():
    return bn.cartpole()


def test_free_fall_is_exact():
    """A prismatic body falling along gravity: q(t) = q0 + v0 t - g t^2 / 2, which RK4 integrates
    exactly (closed form)."""
    text = """<robot name="drop"><link name="base"/><link name="box"><inertial><mass value="2"/>
      <inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial></link>
      <joint name="z" type="prismatic"><parent link="base"/><child link="box"/><axis xyz="0 0 1"/>
      <limit lower="-100" upper="100" effort="10" velocity="100"/></joint></robot>"""
    robot = bn.load_urdf(text)
    traj = bn.integrate(
        bn.forward_dynamics(robot), jnp.array([1.0]), jnp.array([0.5]), jnp.zeros((250, 1))
    )
    t = np.asarray(traj.t)
    np.testing.assert_allclose(traj.q[:, 0], 1.0 + 0.5 * t - 0.5 * 9.81 * t**2, atol=1e-12)
    np.testing.assert_allclose(traj.qd[:, 0], 0.5 - 9.81 * t, atol=1e-12)


def test_energy_drift_is_fourth_order(cartpole):
    """Uncontrolled, frictionless swing: halving dt shrinks the energy error about 16x."""
    q0, qd0 = jnp.array([0.0, 2.5]), jnp.array([0.3, 0.0])
    energy = jax.vmap(lambda q, qd: bn.total_energy(cartpole, q, qd))
    drifts = []
    for dt in (1 / 125, 1 / 250, 1 / 500):
        steps = int(round(2.0 / dt))
        traj = bn.integrate(bn.forward_dynamics(cartpole), q0, qd0, jnp.zeros((steps, 2)), dt=dt)
        E = energy(traj.q, traj.qd)
        drifts.append(float(jnp.max(jnp.abs(E - E[0]))))
    ratios = [drifts[0] / drifts[1], drifts[1] / drifts[2]]
    assert all(12 < r < 20 for r in ratios), (drifts, ratios)
    assert drifts[1] < 1e-6  # at the paper's 250 Hz


def test_closed_loop_pd_holds_the_cart(cartpole):
    """A PD law on the cart (pendulum unactuated) brings the cart to its target."""

    def controller(t, q, qd):
        return jnp.array([-40.0 * (q[0] - 0.2) - 10.0 * qd[0], 0.0])

    traj = bn.integrate_closed_loop(
        bn.forward_dynamics(cartpole), controller, jnp.zeros(2), jnp.zeros(2), 2500
    )
    assert traj.q.shape == (2501, 2) and traj.tau.shape == (2500, 2)
    assert abs(float(traj.q[-1, 0]) - 0.2) < 0.02
    np.testing.assert_allclose(traj.tau[0], controller(0.0, traj.q[0], traj.qd[0]))


def test_rollouts_vmap_over_parameters(cartpole):
    """Rollouts under heavier poles differ, and vmapped equals looped."""
    scales = jnp.array([1.0, 1.5])

    def rollout(scale):
        theta = jnp.asarray(cartpole.nominal.theta).at[1].multiply(scale)  # scale the pole
        params = cartpole.params()._replace(theta=theta)
        return bn.integrate(
            bn.forward_dynamics(cartpole, params=params),
            jnp.array([0.0, 1.0]),
            jnp.zeros(2),
            jnp.zeros((100, 2)),
        ).q

    batched = jax.jit(jax.vmap(rollout))(scales)
    np.testing.assert_allclose(batched[1], rollout(scales[1]), atol=1e-12)
    assert np.abs(batched[0, -1] - batched[1, -1]).max() > 1e-3


def test_torque_shape_error(cartpole):
    with pytest.raises(ValueError, match=r"tau has shape \(10, 3\), expected \(T, 2\)"):
        bn.integrate(bn.forward_dynamics(cartpole), jnp.zeros(2), jnp.zeros(2), jnp.zeros((10, 3)))
