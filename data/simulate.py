"""Dataset generators: the DiffNEA paper's three datasets, plus excitation trajectories for arms.

Kinds (``generate_dataset(system, kind, *, seed, duration, **settings)``):

- ``"uniform"``: ``q``, ``qd``, ``tau`` drawn uniformly over the state and input domain
  (:data:`UNIFORM_DOMAIN`), ``qdd = aba(q, qd, tau)`` of the true model; no friction, and no
  noise unless ``position_noise`` / ``velocity_noise`` / ``acceleration_noise`` (sd, default 0:
  the paper's noise-free set) add Gaussian measurement noise to the recorded ``q``, ``qd``,
  ``qdd`` (a model that learns its noise scale has no proper posterior on noise-free data).
  Samples are independent; they are cut into episodes of ``chunk`` samples (at least 3 when
  there are 150 samples) only so that splits have units, and ``t`` is the sample index divided
  by ``rate_hz``. Trajectory kinds likewise get at least 3 episodes (:data:`MIN_EPISODES`).
- ``"trajectories"``: the ideal system plus viscous friction (:data:`TRAJECTORY_VISCOUS`),
  driven by :func:`bayes_nea.control.swing_up_protocol` (energy swing-up at
  :data:`SWING_EFFORT_FRACTION` of the effort limit, LQR near the upright, the known damping of
  the actuated joint cancelled; then zero effort), integrated with RK4 at ``rate_hz``;
  action noise (Gaussian, a fraction of the effort limit, held over each step, not recorded) and
  measurement noise on ``q``, ``qd``, ``qdd``. ``qdd`` is the true forward dynamics at each
  sample (the RK4 stage-1 slope).
- ``"hardware"``: synthetic stand-in for the Quanser logs (``synthetic=True``, said in
  ``settings["note"]``): Stribeck + Coulomb + viscous friction on every joint
  (:func:`bayes_nea.joint_friction`), the actuated joint driven through a voltage DC motor with
  back-EMF and saturation (:func:`bayes_nea.motor_torque`), an actuation delay, encoder
  quantisation and measurement noise on ``q``; ``qd`` and ``qdd`` are *estimated* from the quantised positions (:mod:`data.estimate`). The recorded
  ``tau`` is the commanded effort ``tau_d = gain V``.
- ``"excitation"``: a fully actuated robot (``robot=`` a :class:`bayes_nea.Robot`, or a built-in
  name) tracks finite Fourier series (:mod:`data.excitation`) with computed-torque PD; the plant
  has the robot's URDF viscous damping and (smoothed) Coulomb friction.

All randomness comes from ``seed``; the same seed reproduces the same arrays bit for bit on the
same machine. Each batch of episodes is one jitted ``lax.scan`` over time, vmapped over episodes.
Every generator stores its plant (:class:`bayes_nea.Plant`) in ``true_params``
(:func:`data.dataset.plant_params`); ``Dataset.true_dynamics()`` gives back the function it
integrated.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from bayes_nea import control
from data.dataset import MAX_RATE_HZ, Dataset, Episode, plant_params
from data.estimate import DEFAULT_CUTOFF_HZ, DEFAULT_ORDER, estimate_derivatives
from data.excitation import FourierTrajectory, robot_excitation

DEFAULT_RATE_HZ = 250.0
GENERATED_KINDS = ("uniform", "trajectories", "hardware", "excitation")
DEFAULT_DURATION = {"uniform": 40.0, "trajectories": 60.0, "hardware": 60.0, "excitation": 40.0}

UNIFORM_DOMAIN = {
    "cartpole": {"q_low": (-0.407, -math.pi), "q_high": (0.407, math.pi), "qd_max": (2.0, 15.0)},
    "furuta": {"q_low": (-math.pi, -math.pi), "q_high": (math.pi, math.pi), "qd_max": (10.0, 20.0)},
}
"""State domain of the uniform dataset (m, rad; m/s, rad/s): the cart's rail, all angles, and
velocities beyond those the swing-up reaches. Torques span ``+-effort_limit`` (0 on the pendulum)."""

MEASUREMENT_NOISE = {"position_noise": 1e-4, "velocity_noise": 1e-3, "acceleration_noise": 1e-2}
"""Measurement noise sds of the recorded ``q``, ``qd``, ``qdd`` of the trajectories set (m or rad,
per s, per s^2); the benchmark grid adds the same to its uniform set (``analysis.cells``)."""

ENCODER_RESOLUTION = {
    "cartpole": (2.275e-5, 2 * math.pi / 4096),  # IP02 cart encoder 22.7 um; 4096-count pendulum
    "furuta": (2 * math.pi / 2048, 2 * math.pi / 2048),  # QUBE-Servo 2: 2048 counts/rev
}
"""Encoder quantum per joint (m or rad), from the Quanser user manuals."""

HARDWARE_FRICTION = {
    "cartpole": {
        "viscous": (4.3, 0.0024),
        "coulomb": (0.5, 0.002),
        "stribeck_amplitude": (0.3, 0.001),
        "stribeck_velocity": (0.05, 0.1),
    },
    "furuta": {
        "viscous": (1.5e-5, 5e-6),
        "coulomb": (5e-4, 1e-5),
        "stribeck_amplitude": (3e-4, 5e-6),
        "stribeck_velocity": (0.1, 0.1),
    },
}
"""Friction of the hardware-like data (assumed; N, N m, s). Cart-pole: the IP02's ``B_eq``, ``B_p``
as viscous terms. Furuta: the smaller of the two published damping sets (sources disagree by
100x); with the larger one (``bayes_nea.furuta().damping``) the 0.025 N m motor cannot swing the
pendulum up at all."""

FRICTION_SMOOTHING = 0.01
"""Velocity (m/s or rad/s) of the ``tanh`` that smooths ``sign(qd)`` in the simulated friction
(:func:`bayes_nea.joint_friction`), so that the plant is a smooth ODE for RK4."""

SWING_EFFORT_FRACTION = {"cartpole": 0.5, "furuta": 1.0}
"""Swing-up effort (and centring gains) of the data protocol as a fraction of the effort limit.
On the hardware-like cart-pole (60 s, seed 0) half the 41 N limit swung the pendulum up (57% of
the time within 0.3 rad of upright) with pendulum acceleration estimates 3.5x closer to the truth
than at the full limit (rms error 6.7 against 41 rad/s^2), whose force steps the 20 Hz filter
cannot follow; the Furuta pendulum needs its full 0.025 N m. The simulator has no rail ends: the
cart reaches about +-0.8 m (the IP02 rail is +-0.41 m)."""

TRAJECTORY_VISCOUS = {"cartpole": (4.3, 0.0024), "furuta": (1.5e-5, 5e-6)}
"""Viscous friction of the ``"trajectories"`` dataset (same choice as above)."""


MIN_EPISODES = 3
"""Short datasets are cut into at least this many episodes (of at least
:data:`MIN_EPISODE_SAMPLES` samples) so that a train/validation/test split by whole episodes
exists."""
MIN_EPISODE_SAMPLES = 50
MAX_SAMPLES = 5_000_000
"""Most samples one generated dataset may have (5.5 h at 250 Hz; memory stays below ~1 GB)."""


def _episode_split(duration: float, episode_duration: float, rate: float) -> tuple[int, int]:
    """``(count, steps)``: ``round(duration / episode_duration)`` episodes, at least
    :data:`MIN_EPISODES` where each then keeps :data:`MIN_EPISODE_SAMPLES` samples."""
    if not duration > 0 or not episode_duration > 0:
        raise ValueError(
            f"duration and episode_duration must be > 0, got {duration}, {episode_duration}"
        )
    total = int(round(duration * rate))
    count = max(1, int(round(duration / episode_duration)))
    if count < MIN_EPISODES:
        count = max(count, min(MIN_EPISODES, total // MIN_EPISODE_SAMPLES))
    steps = int(round(duration * rate / count))
    if steps < 2:
        raise ValueError(
            f"duration {duration} s at {rate} Hz gives fewer than 2 samples per episode"
        )
    return count, steps


def _check_settings(kind: str, given: dict, allowed: dict) -> dict:
    unknown = sorted(set(given) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown settings {unknown} for kind {kind!r}; valid settings are {sorted(allowed)}"
        )
    return {**allowed, **given}


def _as_joint_vector(value, n: int, name: str) -> np.ndarray:
    arr = np.asarray(value, dtype=float)
    try:
        return np.broadcast_to(arr, (n,)).copy()
    except ValueError:
        raise ValueError(f"{name} must be a scalar or have {n} entries, got {arr.shape}") from None


def _nominal_params(robot: bn.Robot) -> bn.RobotParams:
    """The true rigid bodies of every generated dataset: the robot's nominal parameters."""
    return bn.RobotParams(*(np.asarray(x, dtype=np.float64) for x in robot.nominal))


def _rigid_plant(robot: bn.Robot) -> bn.Plant:
    """The plant of the uniform data: rigid bodies, no friction, no motor."""
    n = robot.n
    fr = bn.FrictionParams(
        np.zeros(n), np.zeros(n), np.zeros(n), np.ones(n), np.asarray(FRICTION_SMOOTHING)
    )
    return bn.Plant(_nominal_params(robot), fr)


# --- uniform ------------------------------------------------------------------------------------


@functools.cache
def _uniform_fn(system: str):
    robot = bn.get_system(system)
    return jax.jit(jax.vmap(bn.plant_dynamics(robot, _rigid_plant(robot))))


def _uniform(system: str, *, seed: int, duration: float, settings: dict) -> Dataset:
    robot = bn.get_system(system)
    s = _check_settings(
        "uniform",
        settings,
        {
            "rate_hz": DEFAULT_RATE_HZ,
            "chunk": 1000,
            **UNIFORM_DOMAIN[system],
            **dict.fromkeys(MEASUREMENT_NOISE, 0.0),
        },
    )
    n, rate = robot.n, float(s["rate_hz"])
    total = int(round(duration * rate))
    if total < 1:
        raise ValueError(f"duration {duration} s at {rate} Hz gives no samples")
    low = _as_joint_vector(s["q_low"], n, "q_low")
    high = _as_joint_vector(s["q_high"], n, "q_high")
    vmax = _as_joint_vector(s["qd_max"], n, "qd_max")
    umax = np.abs(np.asarray(robot.effort_limit, dtype=float))
    kq, kv, ku = jax.random.split(jax.random.key(seed), 3)
    unit = lambda k: jax.random.uniform(k, (total, n), jnp.float64)  # noqa: E731
    q = jnp.asarray(low)[None, :] + unit(kq) * jnp.asarray(high - low)[None, :]
    qd = (2.0 * unit(kv) - 1.0) * jnp.asarray(vmax)[None, :]
    tau = (2.0 * unit(ku) - 1.0) * jnp.asarray(umax)[None, :]
    qdd = _uniform_fn(system)(q, qd, tau)
    q, qd, qdd, tau = (np.asarray(x, dtype=np.float64) for x in (q, qd, qdd, tau))
    sds = [float(s[k]) for k in MEASUREMENT_NOISE]  # q, qd, qdd
    if any(sd < 0 or not np.isfinite(sd) for sd in sds):
        raise ValueError(f"measurement noise sds must be finite and >= 0, got {sds}")
    if any(sds):  # its own stream: the noise-free draws of a seed stay what they were
        k_meas = jax.random.fold_in(jax.random.key(seed), 1)
        meas = np.asarray(jax.random.normal(k_meas, (3, total, n), jnp.float64))
        q, qd, qdd = (x + m * sd for x, m, sd in zip((q, qd, qdd), meas, sds, strict=True))
    chunk = int(s["chunk"])
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 samples, got {chunk}")
    if -(-total // chunk) < MIN_EPISODES and total >= MIN_EPISODES * MIN_EPISODE_SAMPLES:
        chunk = -(-total // MIN_EPISODES)  # at least 3 chunks, so that splits exist
    s["chunk"] = chunk
    episodes = []
    for a in range(0, total, chunk):
        b = min(a + chunk, total)
        t = np.arange(a, b, dtype=np.float64) / rate
        episodes.append(Episode(t, q[a:b], qd[a:b], qdd[a:b], tau[a:b]))
    return Dataset(
        system=system,
        kind="uniform",
        joint_names=robot.joint_names,
        rate_hz=rate,
        episodes=tuple(episodes),
        measured=("q", "qd", "qdd", "tau"),
        estimated=(),
        synthetic=True,
        settings={
            "seed": seed,
            "duration": duration,
            "friction": None,
            "noise": "measurement" if any(sds) else None,
            **s,
        },
        true_params=plant_params(_rigid_plant(robot)),
        robot_description=bn.robot_to_dict(robot),
    )


# --- closed-loop trajectories (ideal + viscous, and hardware-like) ------------------------------


@functools.cache
def _closed_loop_fn(
    system: str,
    steps: int,
    delay_steps: int,
    swing_time: float,
    release_time: float,
    rate: float,
    smoothing: float,
    frac: float,
):
    """Jitted ``(q0, qd0, offsets, action_noise, plant, compensation) -> (q, qd, qdd, tau_d)``
    (E, T, n) each; ``plant`` (a :class:`bayes_nea.Plant`) and ``compensation`` (n,) (the
    damping the controller cancels: ``tau_d += compensation qd``) are traced."""
    robot = bn.get_system(system)
    dt = 1.0 / rate
    d = control.SWING_UP_DEFAULTS.get(system, {})
    inner = control.swing_up_and_stabilize(
        robot,
        smoothing=smoothing,
        max_effort=frac * np.abs(np.asarray(robot.effort_limit, dtype=float)),
        center_kp=d.get("center_kp", 0.0) * frac,
        center_kd=d.get("center_kd", 0.0) * frac,
    )
    limit = np.abs(np.asarray(robot.effort_limit, dtype=float))

    def run(q0, qd0, offset, noise, plant: bn.Plant, compensation):
        def compensated(t, q, qd):
            u = inner(t, q, qd) + jnp.asarray(compensation, qd.dtype) * qd
            return jnp.clip(u, -limit, limit)

        ctrl = control.swing_up_protocol(
            robot,
            swing_time=swing_time,
            release_time=release_time,
            offset=offset,
            controller=compensated,
        )
        out = bn.run_closed_loop(
            bn.plant_dynamics(robot, plant),
            ctrl,
            q0,
            qd0,
            steps,
            dt=dt,
            delay_steps=delay_steps,
            action_noise=noise,
            scan_stages=True,
        )
        traj = out.trajectory
        return traj.q[:-1], traj.qd[:-1], out.qdd, traj.tau

    return jax.jit(jax.vmap(run, in_axes=(0, 0, 0, 0, None, None)))


def _closed_loop(
    system: str,
    kind: str,
    *,
    seed: int,
    duration: float,
    settings: dict,
    return_truth: bool = False,
):
    robot = bn.get_system(system)
    n = robot.n
    hardware = kind == "hardware"
    defaults = {
        "rate_hz": DEFAULT_RATE_HZ,
        "episode_duration": 10.0,
        "swing_time": 8.0,
        "release_time": 4.0,
        "swing_smoothing": 0.5,
        "swing_effort_fraction": SWING_EFFORT_FRACTION[system],
        "init_angle": 0.3,
        "damping_compensation": True,
        "action_noise": 0.0 if hardware else 0.02,
        "viscous": HARDWARE_FRICTION[system]["viscous"] if hardware else TRAJECTORY_VISCOUS[system],
    }
    if hardware:
        defaults |= {k: v for k, v in HARDWARE_FRICTION[system].items() if k != "viscous"}
        defaults |= {
            "friction_smoothing": FRICTION_SMOOTHING,
            "delay_s": 1.0 / DEFAULT_RATE_HZ,
            "encoder_resolution": ENCODER_RESOLUTION[system],
            "position_noise": tuple(0.5 * r for r in ENCODER_RESOLUTION[system]),
            "filter_cutoff_hz": DEFAULT_CUTOFF_HZ,
            "filter_order": DEFAULT_ORDER,
        }
    else:
        defaults |= MEASUREMENT_NOISE
    s = _check_settings(kind, settings, defaults)
    rate = float(s["rate_hz"])
    count, steps = _episode_split(duration, float(s["episode_duration"]), rate)
    delay_steps = int(round(float(s.get("delay_s", 0.0)) * rate))
    if delay_steps < 0:
        raise ValueError(f"delay_s must be >= 0, got {s['delay_s']}")
    vec = lambda name: _as_joint_vector(s[name], n, name)  # noqa: E731
    zeros = np.zeros(n)
    fr = bn.FrictionParams(
        viscous=vec("viscous"),
        coulomb=vec("coulomb") if hardware else zeros,
        stribeck_amplitude=vec("stribeck_amplitude") if hardware else zeros,
        stribeck_velocity=vec("stribeck_velocity") if hardware else np.ones(n),
        smoothing=np.asarray(float(s.get("friction_smoothing", FRICTION_SMOOTHING))),
    )
    mot = bn.get_motor(system) if hardware else None
    if mot is not None:
        mot = bn.DCMotor(np.asarray(mot.gain), np.asarray(mot.back_emf), mot.voltage_limit)
    plant = bn.Plant(_nominal_params(robot), fr, mot, delay_steps / rate)
    # The controller cancels the joint's known viscous damping (and the motor's back-EMF), as
    # Quanser's swing-up does through its motor model; without it the cart-pole's 12 N s/m
    # never lets the swing-up reach the upright.
    damping = fr.viscous + (mot.back_emf if mot is not None else 0.0)
    actuated = np.asarray(robot.actuated, dtype=float)
    compensation = damping * actuated * float(bool(s["damping_compensation"]))

    key = jax.random.key(seed)
    k_init, k_off, k_act, k_meas = jax.random.split(key, 4)
    p_idx = robot.actuated.index(False)
    q0 = jax.random.uniform(k_init, (count, n), jnp.float64, -1.0, 1.0) * float(s["init_angle"])
    q0 = q0 * jnp.asarray([1.0 if i == p_idx else 0.3 for i in range(n)])[None, :]
    qd0 = jnp.zeros((count, n))
    period = float(s["swing_time"]) + float(s["release_time"])
    offsets = jax.random.uniform(k_off, (count,), jnp.float64, 0.0, period)
    umax = np.abs(np.asarray(robot.effort_limit, dtype=float))
    noise = (
        jax.random.normal(k_act, (count, steps, n), jnp.float64)
        * jnp.asarray(float(s["action_noise"]) * umax)[None, None, :]
    )
    fn = _closed_loop_fn(
        system,
        steps,
        delay_steps,
        float(s["swing_time"]),
        float(s["release_time"]),
        rate,
        float(s["swing_smoothing"]),
        float(s["swing_effort_fraction"]),
    )
    q, qd, qdd, tau = (
        np.asarray(x, dtype=np.float64) for x in fn(q0, qd0, offsets, noise, plant, compensation)
    )
    t = np.arange(steps, dtype=np.float64) / rate
    truth = {"q": q, "qd": qd, "qdd": qdd}

    meas = np.asarray(jax.random.normal(k_meas, (3, count, steps, n), jnp.float64))
    if hardware:
        res = vec("encoder_resolution")
        q_m = np.round((q + meas[0] * vec("position_noise")) / res) * res
        est = [
            estimate_derivatives(
                t, q_m[e], cutoff_hz=float(s["filter_cutoff_hz"]), order=int(s["filter_order"])
            )
            for e in range(count)
        ]
        qd_m = np.stack([x[0] for x in est])
        qdd_m = np.stack([x[1] for x in est])
        measured, estimated = ("q", "tau"), ("qd", "qdd")
        true_extra = {
            "stribeck_nu": 1.0 / fr.stribeck_velocity**2,
            "effective_viscous": fr.viscous + mot.back_emf,
        }
        note = (
            "SYNTHETIC hardware-like data: simulated, not recorded on a Quanser device (the "
            "paper's logs are not available). Stribeck+Coulomb+viscous friction, DC motor with "
            "back-EMF and saturation, actuation delay, encoder quantisation, position noise; "
            "qd and qdd estimated from quantised q (central differences + zero-phase Butterworth)."
        )
    else:
        q_m = q + meas[0] * float(s["position_noise"])
        qd_m = qd + meas[1] * float(s["velocity_noise"])
        qdd_m = qdd + meas[2] * float(s["acceleration_noise"])
        measured, estimated = ("q", "qd", "qdd", "tau"), ()
        true_extra = {"action_noise_std": float(s["action_noise"]) * umax}
        note = "simulated: ideal rigid bodies with viscous friction, action and measurement noise"
    episodes = tuple(Episode(t, q_m[e], qd_m[e], qdd_m[e], tau[e]) for e in range(count))
    dataset = Dataset(
        system=system,
        kind=kind,
        joint_names=robot.joint_names,
        rate_hz=rate,
        episodes=episodes,
        measured=measured,
        estimated=estimated,
        synthetic=True,
        settings={
            "seed": seed,
            "duration": duration,
            "episodes": count,
            "steps_per_episode": steps,
            "integrator": "rk4",
            "controller": "swing_up_protocol (energy swing-up + LQR with damping compensation, "
            "then zero effort); the controller sees the true state",
            "note": note,
            **s,
        },
        true_params={**plant_params(plant), **true_extra},
        robot_description=bn.robot_to_dict(robot),
    )
    return (dataset, truth) if return_truth else dataset


# --- excitation (fully actuated arms) -----------------------------------------------------------

EXCITATION_OPTIONS = (
    "velocity_fraction",
    "acceleration_limit",
    "harmonics",
    "base_frequency_hz",
    "margin",
)
"""Settings of the excitation data passed to :func:`data.excitation.robot_excitation`."""


def _excitation(
    system: str, *, seed: int, duration: float, settings: dict, return_truth: bool = False
):
    settings = dict(settings)
    robot = settings.pop("robot", None)
    if robot is None:
        robot = bn.get_system(system)
    if not all(robot.actuated):
        raise ValueError(
            f"excitation data needs a fully actuated robot; {robot.name!r} has unactuated joints "
            f"{[j for j, a in zip(robot.joint_names, robot.actuated, strict=True) if not a]}"
        )
    n = robot.n
    s = _check_settings(
        "excitation",
        settings,
        {
            "rate_hz": DEFAULT_RATE_HZ,
            "harmonics": 5,
            "base_frequency_hz": 0.1,
            "velocity_fraction": 0.4,
            "acceleration_limit": 5.0,
            "margin": 0.1,
            "kp": 100.0,
            "kd": 20.0,
            "position_noise": 1e-5,
            "velocity_noise": 1e-4,
            "acceleration_noise": 1e-3,
            "friction_smoothing": FRICTION_SMOOTHING,
        },
    )
    rate = float(s["rate_hz"])
    count, steps = _episode_split(duration, 1.0 / float(s["base_frequency_hz"]), rate)
    refs = [
        robot_excitation(
            robot,
            seed=seed * 1000 + e,
            **{k: s[k] for k in EXCITATION_OPTIONS},
        )
        for e in range(count)
    ]
    fr = bn.FrictionParams(
        viscous=np.asarray(robot.damping, dtype=float),
        coulomb=np.asarray(robot.friction, dtype=float),
        stribeck_amplitude=np.zeros(n),
        stribeck_velocity=np.ones(n),
        smoothing=np.asarray(float(s["friction_smoothing"])),
    )
    plant = bn.Plant(_nominal_params(robot), fr)
    qdd_fn = bn.plant_dynamics(robot, plant)
    dt = 1.0 / rate
    coeffs = tuple(np.stack([getattr(r, f) for r in refs]) for f in ("q0", "a", "b"))
    w_f = refs[0].w_f

    def run(q0_off, a, b):
        ref = FourierTrajectory(q0_off, a, b, w_f)
        ctrl = control.computed_torque_pd(robot, ref, kp=s["kp"], kd=s["kd"])
        qa, qda, _ = ref(jnp.asarray(0.0))
        out = bn.run_closed_loop(qdd_fn, ctrl, qa, qda, steps, dt=dt, scan_stages=True)
        traj = out.trajectory
        return traj.q[:-1], traj.qd[:-1], out.qdd, traj.tau

    q, qd, qdd, tau = (np.asarray(x, dtype=np.float64) for x in jax.jit(jax.vmap(run))(*coeffs))
    meas = np.asarray(jax.random.normal(jax.random.key(seed), (3, count, steps, n), jnp.float64))
    t = np.arange(steps, dtype=np.float64) / rate
    episodes = tuple(
        Episode(
            t,
            q[e] + meas[0, e] * float(s["position_noise"]),
            qd[e] + meas[1, e] * float(s["velocity_noise"]),
            qdd[e] + meas[2, e] * float(s["acceleration_noise"]),
            tau[e],
        )
        for e in range(count)
    )
    dataset = Dataset(
        system=robot.name,
        kind="excitation",
        joint_names=robot.joint_names,
        rate_hz=rate,
        episodes=episodes,
        measured=("q", "qd", "qdd", "tau"),
        estimated=(),
        synthetic=True,
        settings={
            "seed": seed,
            "duration": duration,
            "episodes": count,
            "controller": "computed_torque_pd",
            "fourier": {"q0": coeffs[0], "a": coeffs[1], "b": coeffs[2], "w_f": w_f},
            **s,
        },
        true_params=plant_params(plant),
        robot_description=bn.robot_to_dict(robot),
    )
    truth = {"q": q, "qd": qd, "qdd": qdd}
    return (dataset, truth) if return_truth else dataset


# --- entry point --------------------------------------------------------------------------------


def simulate_dataset(
    system: str, kind: str, *, seed: int, duration: float | None = None, **settings
) -> tuple[Dataset, dict]:
    """Like :func:`generate_dataset`, also returning the true ``q, qd, qdd`` (E, T, n) before
    noise, quantisation and estimation (``{}`` for uniform data, which has none of these)."""
    if kind not in GENERATED_KINDS:
        raise ValueError(f"unknown dataset kind {kind!r}; generated kinds are {GENERATED_KINDS}")
    if not isinstance(seed, int | np.integer) or isinstance(seed, bool):
        raise ValueError(f"seed must be an int, got {seed!r}")
    duration = DEFAULT_DURATION[kind] if duration is None else float(duration)
    if not duration > 0 or not np.isfinite(duration):
        raise ValueError(f"duration must be a finite number > 0 seconds, got {duration}")
    rate = settings.get("rate_hz", DEFAULT_RATE_HZ)
    if not isinstance(rate, int | float | np.number) or not 0 < float(rate) <= MAX_RATE_HZ:
        raise ValueError(f"rate_hz must be a number in (0, {MAX_RATE_HZ:g}] Hz, got {rate!r}")
    if duration * float(rate) > MAX_SAMPLES:
        raise ValueError(
            f"duration {duration:g} s at {float(rate):g} Hz is {duration * float(rate):.3g} samples, "
            f"more than {MAX_SAMPLES:.0e}: generate several shorter datasets"
        )
    if kind != "excitation" and system not in UNIFORM_DOMAIN:
        raise ValueError(
            f"unknown system {system!r} for kind {kind!r}; built-in systems are {sorted(UNIFORM_DOMAIN)}"
        )
    seed = int(seed)
    if kind == "uniform":
        return _uniform(system, seed=seed, duration=duration, settings=settings), {}
    if kind == "excitation":
        return _excitation(
            system, seed=seed, duration=duration, settings=settings, return_truth=True
        )
    return _closed_loop(
        system, kind, seed=seed, duration=duration, settings=settings, return_truth=True
    )


def generate_dataset(
    system: str, kind: str, *, seed: int, duration: float | None = None, **settings
) -> Dataset:
    """Generate a synthetic dataset.

    Args:
        system: ``"cartpole"`` or ``"furuta"`` (for ``"excitation"`` any name, with ``robot=``
            a fully actuated :class:`bayes_nea.Robot` in ``settings``).
        kind: ``"uniform"``, ``"trajectories"``, ``"hardware"`` or ``"excitation"``.
        seed: integer seed of every random draw.
        duration: total seconds of data (default :data:`DEFAULT_DURATION`: 40 s uniform = 10,000
            samples, 60 s of trajectories in 10 s episodes).
        settings: kind-specific options (``rate_hz``, ``episode_duration``, noise, friction,
            ``delay_s``, ``filter_cutoff_hz`` ...); an unknown name raises ``ValueError`` listing
            the valid ones. All values are stored in ``dataset.settings``.

    Returns:
        A :class:`data.Dataset` with ``true_params`` filled in.
    """
    return simulate_dataset(system, kind, seed=seed, duration=duration, **settings)[0]
