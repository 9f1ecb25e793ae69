"""Dataset generators against independent references: RNEA identities with the true parameters,
hand-written friction/motor formulas, finite differences, and the known true signals."""

import jax
import numpy as np
import pytest

import bayes_nea as bn
import data
from analysis.cells import true_figure1_rollout, true_rollouts
from data.excitation import fourier_excitation

ARM_URDF = """
<robot name="arm2">
  <link name="base"/>
  <link name="upper"><inertial><origin xyz="0.15 0 0"/><mass value="1.2"/>
    <inertia ixx="0.001" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
  <link name="lower"><inertial><origin xyz="0.1 0 0"/><mass value="0.6"/>
    <inertia ixx="0.0005" ixy="0" ixz="0" iyy="0.004" iyz="0" izz="0.004"/></inertial></link>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="upper"/>
    <origin xyz="0 0 0.1"/><axis xyz="0 1 0"/>
    <limit lower="-1.5" upper="1.5" effort="40" velocity="2"/><dynamics damping="0.05" friction="0.02"/></joint>
  <joint name="elbow" type="revolute"><parent link="upper"/><child link="lower"/>
    <origin xyz="0.3 0 0"/><axis xyz="0 1 0"/>
    <limit lower="-2" upper="2" effort="20" velocity="3"/><dynamics damping="0.02" friction="0.01"/></joint>
</robot>
"""

SHORT = {"duration": 8.0, "episode_duration": 2.0}


def _rnea_batch(robot, q, qd, qdd):
    return np.asarray(jax.jit(jax.vmap(lambda a, b, c: bn.rnea(robot, a, b, c)))(q, qd, qdd))


def _friction_np(qd, viscous, coulomb, amplitude, v_s, eps):
    return viscous * qd + np.tanh(qd / eps) * (coulomb + amplitude * np.exp(-((qd / v_s) ** 2)))


@pytest.fixture(scope="module")
def trajectories():
    return data.simulate_dataset("cartpole", "trajectories", seed=3, **SHORT)


@pytest.fixture(scope="module")
def hardware():
    return data.simulate_dataset("cartpole", "hardware", seed=5, duration=40.0)


@pytest.mark.parametrize("system", ["cartpole", "furuta"])
def test_uniform_satisfies_rnea_with_true_parameters(system):
    ds = data.generate_dataset(system, "uniform", seed=1, duration=4.0, chunk=250)
    robot = ds.robot()
    q, qd, qdd, tau = ds.arrays()
    assert q.shape == (1000, 2) and len(ds.episodes) == 4
    np.testing.assert_allclose(_rnea_batch(robot, q, qd, qdd), tau, rtol=0, atol=1e-9)
    dom = data.simulate.UNIFORM_DOMAIN[system]
    assert np.all(q >= np.asarray(dom["q_low"])) and np.all(q <= np.asarray(dom["q_high"]))
    assert np.all(tau[:, 1] == 0.0)  # the pendulum is unactuated
    assert np.abs(tau[:, 0]).max() <= robot.effort_limit[0]
    assert ds.synthetic and ds.true_params["theta"].shape == (2, 10)
    np.testing.assert_array_equal(ds.true_params["theta"], np.asarray(robot.nominal.theta))


def test_uniform_measurement_noise_is_added_to_the_noise_free_draws():
    clean = data.generate_dataset("cartpole", "uniform", seed=2, duration=8.0)
    noisy = data.generate_dataset(
        "cartpole", "uniform", seed=2, duration=8.0, velocity_noise=0.01, acceleration_noise=0.05
    )
    (q0, qd0, qdd0, tau0), (q1, qd1, qdd1, tau1) = clean.arrays(), noisy.arrays()
    np.testing.assert_array_equal(q1, q0)  # no position noise asked for
    np.testing.assert_array_equal(tau1, tau0)  # the same states and efforts as the clean set
    for measured, exact, sd in ((qd1, qd0, 0.01), (qdd1, qdd0, 0.05)):
        err = (measured - exact).ravel()  # 4,000 draws: sd within 5 %, mean within 4 se
        assert abs(err.std() / sd - 1.0) < 0.05 and abs(err.mean()) < 4 * sd / np.sqrt(err.size)
    assert clean.settings["noise"] is None and noisy.settings["noise"] == "measurement"
    with pytest.raises(ValueError, match="noise sds must be finite and >= 0"):
        data.generate_dataset("cartpole", "uniform", seed=0, acceleration_noise=-1.0)


def test_trajectories_reproduce_bit_for_bit(trajectories):
    ds, _ = trajectories
    again = data.generate_dataset("cartpole", "trajectories", seed=3, **SHORT)
    assert again == ds
    for a, b in zip(ds.episodes, again.episodes, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.tobytes() == y.tobytes()
    other = data.generate_dataset("cartpole", "trajectories", seed=4, **SHORT)
    assert not np.array_equal(other.episodes[0].q, ds.episodes[0].q)


def test_trajectories_obey_dynamics_with_viscous_friction():
    # Without action noise, the true samples satisfy rnea(q, qd, qdd) = tau_d - mu_v qd exactly.
    ds, truth = data.simulate_dataset("cartpole", "trajectories", seed=3, action_noise=0.0, **SHORT)
    robot = ds.robot()
    n = robot.n
    q, qd, qdd = (truth[k].reshape(-1, n) for k in ("q", "qd", "qdd"))
    tau = np.concatenate([ep.tau for ep in ds.episodes])
    viscous = ds.true_params["viscous"]
    np.testing.assert_allclose(_rnea_batch(robot, q, qd, qdd), tau - viscous * qd, atol=1e-9)
    # measurement noise of the stated size on the recorded signals
    noise = np.concatenate([ep.qd for ep in ds.episodes]) - qd
    assert 0.8e-3 < noise.std() < 1.2e-3
    assert ds.measured == ("q", "qd", "qdd", "tau") and ds.estimated == ()


def test_hardware_dynamics_match_motor_and_stribeck_model(hardware):
    # True joint torque = gain sat(V) - back_emf qd - Stribeck/Coulomb/viscous friction, with the
    # commanded effort applied one sample late (actuation delay), written out here in numpy.
    ds, truth = hardware
    robot = ds.robot()
    p = ds.true_params
    e = 0
    q, qd, qdd = truth["q"][e], truth["qd"][e], truth["qdd"][e]
    tau_d = ds.episodes[e].tau
    delay = int(round(p["delay_s"] * ds.rate_hz))
    assert delay == 1
    applied = np.concatenate([np.zeros((delay, 2)), tau_d[:-delay]])
    gain = p["motor_gain"]
    volts = np.clip(np.divide(applied, gain, out=np.zeros_like(applied), where=gain != 0), -24, 24)
    fr = _friction_np(
        qd,
        p["viscous"],
        p["coulomb"],
        p["stribeck_amplitude"],
        p["stribeck_velocity"],
        p["friction_smoothing"],
    )
    expected = gain * volts - p["back_emf"] * qd - fr
    np.testing.assert_allclose(_rnea_batch(robot, q, qd, qdd), expected, atol=1e-9)


def test_grid_rolls_out_the_simulators_plant(hardware):
    """The benchmark grid's true rollouts (``analysis.cells``: ``Dataset.true_dynamics``) are the
    function the simulator integrated, Stribeck friction, motor and delay included: from the
    simulator's own true state at the start of a zero-effort phase of the protocol, the grid's
    uncontrolled rollout reproduces the simulator's true trajectory to 1e-12."""
    ds, truth = hardware
    plant = ds.true_plant()
    assert float(plant.friction.stribeck_amplitude[0]) > 0 and plant.motor is not None
    delay = bn.delay_steps(plant, 1.0 / ds.rate_hz)
    assert delay == 1
    steps, compared = 250, 0  # 1 s windows; each call compiles its rollout, so two of them
    for e, ep in enumerate(ds.episodes):
        if compared == 2:
            break
        idle = np.all(ep.tau == 0.0, axis=1)  # commanded effort exactly zero: the release phase
        runs = np.flatnonzero(np.diff(np.r_[0, idle.astype(int), 0]))
        starts, ends = runs[::2], runs[1::2]
        k = int(np.argmax(ends - starts))
        first = starts[k] + delay  # the plant receives zero effort from this sample on
        if ends[k] - first < steps + 1:  # no long release phase in this episode
            continue
        window = slice(first, first + steps + 1)
        q0, qd0 = truth["q"][e, first], truth["qd"][e, first]
        roll = true_figure1_rollout(ds, steps, q0=q0, qd0=qd0)
        np.testing.assert_allclose(roll.q, truth["q"][e, window], rtol=0, atol=1e-12)
        np.testing.assert_allclose(roll.qd, truth["qd"][e, window], rtol=0, atol=1e-12)
        # the grid scores against several starts at once (one vmapped call): the same function
        q_grid, qd_grid = true_rollouts(ds, q0[None], qd0[None], steps)
        np.testing.assert_allclose(q_grid[0], truth["q"][e, window], rtol=0, atol=1e-12)
        np.testing.assert_allclose(qd_grid[0], truth["qd"][e, window], rtol=0, atol=1e-12)
        compared += 1
    assert compared == 2  # two 1 s windows of free motion


def test_true_plant_round_trips_through_true_params(hardware, tmp_path):
    ds, _ = hardware
    path = tmp_path / "hw.npz"
    data.save_dataset(ds, path)
    back = data.load_dataset(path).true_plant()
    for a, b in zip(jax.tree.leaves(ds.true_plant()), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="no true parameters"):
        ds.replace(true_params=None).true_plant()
    with pytest.raises(ValueError, match=r"lack the plant entries \['stribeck_amplitude'\]"):
        params = {k: v for k, v in ds.true_params.items() if k != "stribeck_amplitude"}
        ds.replace(true_params=params).true_plant()


def test_hardware_estimates_are_bounded_and_positions_quantised(hardware):
    ds, truth = hardware
    assert ds.synthetic and "SYNTHETIC" in ds.settings["note"]
    assert ds.measured == ("q", "tau") and ds.estimated == ("qd", "qdd")
    res = np.asarray(ds.true_params["theta"]).shape and np.asarray(
        ds.settings["encoder_resolution"]
    )
    q = np.concatenate([ep.q for ep in ds.episodes])
    counts = q / res
    np.testing.assert_allclose(counts, np.round(counts), atol=1e-6)
    n = 2
    err_qd = np.concatenate([ep.qd for ep in ds.episodes]) - truth["qd"].reshape(-1, n)
    err_qdd = np.concatenate([ep.qdd for ep in ds.episodes]) - truth["qdd"].reshape(-1, n)
    rms_qdd = np.sqrt((truth["qdd"].reshape(-1, n) ** 2).mean(0))
    # Measured (seed 5, 40 s, 20 Hz cut-off): qd rms error 0.007 m/s and 0.033 rad/s (1% of the
    # signal's rms); qdd rms error 1.6 m/s^2 and 6.0 rad/s^2 (0.23 and 0.24 of the signal's rms,
    # 99th percentile 7.2 and 23), the residue of the swing-up's effort steps and of friction.
    rms_err_qd = np.sqrt((err_qd**2).mean(0))
    rms_err_qdd = np.sqrt((err_qdd**2).mean(0))
    assert np.all(rms_err_qd < [0.015, 0.06])
    assert np.all(rms_err_qdd < 0.35 * rms_qdd)
    assert np.all(np.percentile(np.abs(err_qdd), 99, axis=0) < [12.0, 40.0])


def test_fourier_excitation_limits_and_derivatives():
    lower, upper = np.array([-1.0, -2.0, 0.1]), np.array([1.0, 0.5, 0.3])
    ref = fourier_excitation(
        lower,
        upper,
        seed=0,
        velocity_limit=[1.0, 2.0, 0.5],
        acceleration_limit=3.0,
        harmonics=4,
        base_frequency_hz=0.2,
    )
    t = np.linspace(0, 5, 20001)
    q, qd, qdd = ref.sample(t)
    inner = slice(1, -1)  # central differences (second order) away from the ends
    np.testing.assert_allclose(qd[inner], np.gradient(q, t, axis=0)[inner], atol=1e-5)
    np.testing.assert_allclose(qdd[inner], np.gradient(qd, t, axis=0)[inner], atol=1e-4)
    assert np.all(q >= lower) and np.all(q <= upper)
    assert np.all(np.abs(qd) <= np.array([1.0, 2.0, 0.5]) * (1 + 1e-6))
    assert np.all(np.abs(qdd) <= 3.0 * (1 + 1e-6))
    jq, jqd, jqdd = ref(np.float64(1.3))
    np.testing.assert_allclose(np.asarray(jq), ref.sample(np.array([1.3]))[0][0], atol=1e-12)
    np.testing.assert_allclose(q[0], q[-1], atol=1e-9)  # periodic (period 5 s)


def test_excitation_dataset_tracks_within_limits():
    robot = bn.load_urdf(ARM_URDF)
    ds, truth = data.simulate_dataset(
        "arm2", "excitation", seed=2, duration=10.0, robot=robot, base_frequency_hz=0.2
    )
    assert ds.system == "arm2" and len(ds.episodes) == 3 and ds.kind == "excitation"
    q, qd, qdd = (truth[k].reshape(-1, 2) for k in ("q", "qd", "qdd"))
    assert np.all(q >= np.asarray(robot.lower) - 1e-3) and np.all(
        q <= np.asarray(robot.upper) + 1e-3
    )
    tau = np.concatenate([ep.tau for ep in ds.episodes])
    fr = _friction_np(qd, np.asarray(robot.damping), np.asarray(robot.friction), 0.0, 1.0, 0.01)
    np.testing.assert_allclose(_rnea_batch(robot, q, qd, qdd), tau - fr, atol=1e-9)
    fourier = ds.settings["fourier"]
    ref = data.FourierTrajectory(
        np.asarray(fourier["q0"][0]),
        np.asarray(fourier["a"][0]),
        np.asarray(fourier["b"][0]),
        fourier["w_f"],
    )
    q_ref = ref.sample(ds.episodes[0].t)[0]
    # CT-PD tracks; unmodelled friction leaves a few-centiradian lag on this light arm (kp = 100)
    assert np.abs(truth["q"][0] - q_ref).max() < 0.1


def test_split_by_whole_episodes(trajectories):
    ds, _ = trajectories
    train, val, test = ds.split((0.5, 0.25, 0.25), seed=0)
    assert (len(train.episodes), len(val.episodes), len(test.episodes)) == (2, 1, 1)
    seen = [ep.q.tobytes() for part in (train, val, test) for ep in part.episodes]
    assert sorted(seen) == sorted(ep.q.tobytes() for ep in ds.episodes)
    assert [len(p.episodes) for p in train.split((0.5, 0.5), seed=1)] == [1, 1]
    with pytest.raises(ValueError, match="cannot split 1 episode"):
        test.split((0.5, 0.5), seed=0)


def test_envelope_split_trains_on_the_extreme_episodes(trajectories):
    ds, _ = trajectories
    base = ds.episodes[0]
    assert np.all(base.tau[:, 1] == 0.0)  # the pole is not actuated: its effort sets no envelope

    def scaled(qd0=1.0, qd1=1.0, tau=1.0):
        return base._replace(qd=base.qd * [qd0, qd1], tau=base.tau * tau)

    episodes = [scaled() for _ in range(10)]
    episodes[7] = scaled(qd0=1.3)
    episodes[3] = scaled(qd1=1.2)
    episodes[5] = scaled(tau=1.1)
    ds = ds.replace(episodes=tuple(episodes))
    assert ds.envelope_episodes() == (7, 3, 5)
    for seed in range(20):
        train, val, test = ds.split(seed=seed, envelope=True)
        assert {3, 5, 7} <= set(train.settings["split"]["episodes"])
        assert train.settings["split"]["envelope"] is True
        # the other episodes keep the shuffle's order
        shuffled = [i for i in np.random.default_rng(seed).permutation(10) if i not in (3, 5, 7)]
        rest = sorted(shuffled[4:6]), sorted(shuffled[6:])  # parts of 7, 2 and 1 episodes
        assert (val.settings["split"]["episodes"], test.settings["split"]["episodes"]) == rest
    # a training part smaller than the envelope takes its first episodes
    first, _ = ds.split((0.1, 0.9), seed=0, envelope=True)
    assert first.settings["split"]["episodes"] == [7]
    # without the envelope the extreme episodes land anywhere
    held = [set(p.settings["split"]["episodes"]) for s in range(20) for p in ds.split(seed=s)[1:]]
    assert any(h & {3, 5, 7} for h in held)


@pytest.mark.parametrize("kind", ["uniform", "trajectories"])
def test_short_datasets_still_split(kind):
    ds = data.generate_dataset("cartpole", kind, seed=0, duration=2.0)
    assert len(ds.episodes) == 3 and ds.n_samples == 500 + (kind == "trajectories")
    assert all(len(part.episodes) == 1 for part in ds.split(seed=0))


def test_generator_errors():
    with pytest.raises(ValueError, match="unknown dataset kind 'real'"):
        data.generate_dataset("cartpole", "real", seed=0)
    with pytest.raises(ValueError, match="built-in systems are"):
        data.generate_dataset("acrobot", "uniform", seed=0)
    with pytest.raises(ValueError, match="valid settings are"):
        data.generate_dataset("cartpole", "uniform", seed=0, noise_level=0.1)
    with pytest.raises(ValueError, match="fully actuated"):
        data.generate_dataset("cartpole", "excitation", seed=0)


@pytest.mark.slow
def test_furuta_hardware_model_and_estimation_bounds():
    ds, truth = data.simulate_dataset("furuta", "hardware", seed=5, duration=20.0)
    robot = ds.robot()
    p = ds.true_params
    q, qd, qdd = truth["q"][0], truth["qd"][0], truth["qdd"][0]
    tau_d = ds.episodes[0].tau
    applied = np.concatenate([np.zeros((1, 2)), tau_d[:-1]])  # one-sample actuation delay
    gain = p["motor_gain"]
    volts = np.clip(np.divide(applied, gain, out=np.zeros_like(applied), where=gain != 0), -5, 5)
    fr = _friction_np(
        qd,
        p["viscous"],
        p["coulomb"],
        p["stribeck_amplitude"],
        p["stribeck_velocity"],
        p["friction_smoothing"],
    )
    np.testing.assert_allclose(
        _rnea_batch(robot, q, qd, qdd), gain * volts - p["back_emf"] * qd - fr, atol=1e-9
    )
    err = np.concatenate([ep.qdd for ep in ds.episodes]) - truth["qdd"].reshape(-1, 2)
    rms = np.sqrt((truth["qdd"].reshape(-1, 2) ** 2).mean(0))
    # measured (seed 5, 40 s): rms error 0.17 and 0.09 of the signal's rms
    assert np.all(np.sqrt((err**2).mean(0)) < 0.3 * rms)
    swung = np.abs(np.mod(truth["q"][..., 1], 2 * np.pi) - np.pi) < 0.3
    assert swung.mean() > 0.1  # the protocol reaches the upright
