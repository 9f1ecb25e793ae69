"""RK4 rollouts: exactness on polynomials, energy drift at fourth order, closed loop."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayes_nea as bn

DROP_URDF = """<robot name="drop"><link name="base"/><link name="box"><inertial><mass value="2"/>
  <inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial></link>
  <joint name="z" type="prismatic"><parent link="base"/><child link="box"/><axis xyz="0 0 1"/>
  <limit lower="-100" upper="100" effort="100" velocity="100"/></joint></robot>"""
"""A 2 kg box on a vertical prismatic joint: free fall under gravity (closed forms)."""


@pytest.fixture(scope="module")
def cartpole():
    return bn.cartpole()


def test_free_fall_is_exact():
    """A prismatic body falling along gravity: q(t) = q0 + v0 t - g t^2 / 2, which RK4 integrates
    exactly (closed form)."""
    robot = bn.load_urdf(DROP_URDF)
    traj = bn.integrate(
        bn.forward_dynamics(robot), jnp.array([1.0]), jnp.array([0.5]), jnp.zeros((250, 1))
    )
    t = np.asarray(traj.t)
    np.testing.assert_allclose(traj.q[:, 0], 1.0 + 0.5 * t - 0.5 * 9.81 * t**2, atol=1e-12)
    np.testing.assert_allclose(traj.qd[:, 0], 0.5 - 9.81 * t, atol=1e-12)


def test_energy_drift_is_fourth_order(cartpole):
    """Uncontrolled, frictionless swing: halving dt shrinks the energy error about 16x."""
    q0, qd0 = jnp.array([0.0, 2.5]), jnp.array([0.3, 0.0])
    tau = jnp.zeros((1000, 2))

    @jax.jit  # one compile for the three step sizes: dt traced, the same number of steps
    def energy(dt):
        traj = bn.integrate(bn.forward_dynamics(cartpole), q0, qd0, tau, dt=dt)
        return jax.vmap(lambda q, qd: bn.total_energy(cartpole, q, qd))(traj.q, traj.qd)

    drifts = []
    for dt in (1 / 125, 1 / 250, 1 / 500):
        E = energy(jnp.asarray(dt))[: int(round(2.0 / dt)) + 1]  # the first 2 s
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


def _oscillator(k=4.0, c=0.3):
    """Damped oscillator qdd = -k q - c qd + tau (one joint), and its state matrix A."""
    A = np.array([[0.0, 1.0], [-k, -c]])
    return (lambda q, qd, tau: -k * q - c * qd + tau), A


@pytest.mark.parametrize("known_slope", [False, True])
@pytest.mark.parametrize("scan_stages", [False, True])
def test_rk4_step_is_the_fourth_order_taylor_map_of_a_linear_ode(known_slope, scan_stages):
    """On x' = A x, classical RK4 is exactly x1 = (I + hA + (hA)^2/2 + (hA)^3/6 + (hA)^4/24) x0
    (closed form), whichever way the first slope and stages 2-4 are computed."""
    f, A = _oscillator()
    h, q, qd, tau = 0.05, jnp.array([0.7]), jnp.array([-0.2]), jnp.zeros(1)
    qdd = f(q, qd, tau) if known_slope else None
    q1, qd1 = jax.jit(lambda a, b: bn.rk4_step(f, a, b, tau, h, qdd, scan_stages=scan_stages))(
        q, qd
    )
    hA = h * A
    taylor = sum(np.linalg.matrix_power(hA, k) / np.prod(np.arange(1, k + 1)) for k in range(5))
    expected = taylor @ np.array([0.7, -0.2])
    np.testing.assert_allclose([float(q1[0]), float(qd1[0])], expected, rtol=1e-14, atol=1e-15)


def test_rk4_known_slope_saves_one_call_and_scan_stages_keep_the_arithmetic(cartpole):
    f = bn.forward_dynamics(cartpole)
    q, qd, tau = jnp.array([0.1, 2.0]), jnp.array([0.3, -1.0]), jnp.array([2.0, 0.0])
    calls = []

    def counted(a, b, u):
        calls.append(1)
        return f(a, b, u)

    plain = bn.rk4_step(counted, q, qd, tau, 0.004)
    assert len(calls) == 4
    calls.clear()
    known = bn.rk4_step(counted, q, qd, tau, 0.004, f(q, qd, tau))
    assert len(calls) == 3
    scanned = bn.rk4_step(f, q, qd, tau, 0.004, scan_stages=True)
    for a, b, c in zip(plain, known, scanned, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        np.testing.assert_allclose(np.asarray(c), np.asarray(a), rtol=1e-15, atol=0)


def test_closed_loop_delay_and_action_noise():
    """A free mass m under gravity, commanded F = c from t = 0 but applied ``d`` steps late plus
    a known disturbance: q(t) is the closed-form piecewise quadratic (RK4 exact on it)."""
    robot = bn.load_urdf(DROP_URDF)
    m, g, c, d, dt, steps = 2.0, 9.81, 30.0, 3, 0.01, 20
    w = np.zeros((steps, 1))
    w[10] = 4.0  # one disturbed step

    def closed_loop(stepper, **options):
        force = lambda t, q, qd: jnp.array([c])  # noqa: E731
        f = bn.forward_dynamics(robot)
        return stepper(f, force, jnp.zeros(1), jnp.zeros(1), steps, dt=dt, **options)

    run = closed_loop(bn.run_closed_loop, delay_steps=d, action_noise=jnp.asarray(w))
    applied = np.where(np.arange(steps)[:, None] < d, 0.0, c) + w
    np.testing.assert_array_equal(np.asarray(run.applied), applied)
    np.testing.assert_array_equal(np.asarray(run.trajectory.tau), np.full((steps, 1), c))
    acc = applied[:, 0] / m - g
    np.testing.assert_allclose(np.asarray(run.qdd)[:, 0], acc, rtol=1e-14)
    qd = np.r_[0.0, np.cumsum(acc * dt)]
    q = np.r_[0.0, np.cumsum(qd[:-1] * dt + 0.5 * acc * dt**2)]
    np.testing.assert_allclose(np.asarray(run.trajectory.q)[:, 0], q, atol=1e-13)
    np.testing.assert_allclose(np.asarray(run.trajectory.qd)[:, 0], qd, atol=1e-13)
    # integrate_closed_loop is the same stepper
    traj = closed_loop(bn.integrate_closed_loop, delay_steps=d)
    before = slice(0, 11)  # up to the disturbed step both are the same rollout
    np.testing.assert_array_equal(np.asarray(traj.q[before]), np.asarray(run.trajectory.q[before]))
    with pytest.raises(ValueError, match="action_noise has shape"):
        closed_loop(bn.run_closed_loop, action_noise=jnp.zeros((3, 1)))
