"""A simulated Franka Panda with the effects a rigid-body model misses, and its excitation data.

The study of Reuss et al. (2022, "End-to-end learning of hybrid inverse dynamics models") runs on a
real Panda; its data are not public. This plant stands in for it (synthetic, said everywhere):

- **Rigid body**: the Panda URDF of ``example-robot-data``, fingers locked (:func:`panda_robot`).
- **Joint elasticity** (Spong 1987 flexible-joint model): each link is driven through a spring-damper
  from a motor of (apparent) inertia ``B``: ``M(q) qdd + h(q, qd) = tau_s``,
  ``B thdd + tau_f + tau_s = tau_m``, ``tau_s = K (th - q) + D (thd - qd)``.
- **Friction with state** on the motor side: LuGre (Canudas de Wit et al. 1995; Astrom &
  Canudas de Wit 2008, eqs. 1-3): ``zd = v - sigma0 |v| z / g(v)``,
  ``g(v) = F_c + (F_s - F_c) exp(-(v / v_s)^2)``, ``tau_f = sigma0 z + sigma1(v) zd + sigma2 v`` with
  ``sigma1(v) = sigma1 exp(-(v / v_d)^2)`` (their velocity-dependent bristle damping). Stiction,
  pre-sliding hysteresis and frictional lag: the effects the paper's LSTM exists for.
- **Delay**: the commanded torque reaches the motor ``delay_steps`` control periods later.
- **Sensor noise**: Gaussian on the measured link positions and velocities (the controller sees
  them, so the commanded torque carries it) and on the joint-torque sensor ``tau_J = tau_s``.

Parameters (:func:`default_plant_params`) and their sources are in :data:`PLANT_SOURCES`.

Integration: the control loop runs at ``rate_hz`` (1 kHz, as the paper); inside each period the
plant takes ``substeps`` semi-implicit Euler steps, with ``M(q)`` and ``h(q, qd)`` of the rigid body
evaluated once per period (held over the substeps: the link moves < 1 mrad in 1 ms) and the LuGre
state advanced by its exact solution for constant velocity (stable at any stiffness). One
``lax.scan`` over control periods, vmapped over movements.

Data as the paper collects them (:func:`excitation_data`): finite Fourier series (Swevers et al.
1997; :mod:`data.excitation`) with random coefficients, each executed on the same path twice:
"fast" with peak velocity ``0.4 qd_max`` and "slow" (time-stretched 4x) with ``0.1 qd_max``, tracked
by the paper's inverse-dynamics PD (joint impedance) law (its eq. 23; feed-forward: the URDF's
rigid body, where the paper used its SDP model) with stiff gains
``[400, 400, 200, 200, 200, 200, 200]`` N m/rad and critical damping. Recorded: measured ``q``,
``qd``; ``qdd`` from the measured velocity by a zero-phase 5 Hz Butterworth low-pass of its finite
difference (the paper's filter); the target torque is the commanded ``tau_ref`` (eq. 14), as the
paper uses. Train / validation / test are split by trajectory (:func:`split_movements`).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import site
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from data.estimate import lowpass
from data.excitation import FourierTrajectory, fourier_excitation

PANDA_FINGERS = ("panda_finger_joint1", "panda_finger_joint2")
PANDA_URDF = "cmeel.prefix/share/example-robot-data/robots/panda_description/urdf/panda.urdf"

PANDA_ACCELERATION_LIMIT = (15.0, 7.5, 10.0, 12.5, 15.0, 20.0, 20.0)
"""Joint acceleration limits (rad/s^2), Franka Control Interface documentation."""

STIFF_GAINS = (400.0, 400.0, 200.0, 200.0, 200.0, 200.0, 200.0)
"""The paper's stiff impedance gains (N m/rad; it lists six values, the seventh is taken as 200)."""
MEDIUM_GAINS = (50.0,) * 7
SOFT_GAINS = (1.0,) * 7
GAIN_LEVELS = {"soft": SOFT_GAINS, "medium": MEDIUM_GAINS, "stiff": STIFF_GAINS}
"""The paper's three gain settings of Section V-A (N m/rad), damping tuned for critical damping."""

SPEED_FRACTIONS = {"slow": 0.1, "fast": 0.4}
"""Peak joint velocity as a fraction of the manufacturer's limit (paper, Section IV-B)."""

PLANT_SOURCES = {
    "coulomb": "Gaz, Cognetti, Oliva, Robuffo Giordano, De Luca (RA-L 2019), identified Panda "
    "friction, saturation levels phi_1 (N m)",
    "static": "assumed 1.3 x Coulomb (typical stiction ratio, Olsson et al. 1998)",
    "stribeck_velocity": "assumed 0.05 rad/s (Gaz et al.'s sigmoid widths 1/phi_2 are 0.06-0.2 rad/s)",
    "viscous": "assumed small (Gaz et al.'s model has no linear term); 0.05 N m s/rad",
    "bristle_stiffness": "assumed 1000 N m/rad: pre-sliding range F_c / sigma0 of about 0.3-1.3 mrad",
    "bristle_damping": "sqrt(sigma0 B), velocity-weighted with v_d = 0.05 rad/s (Astrom & Canudas de "
    "Wit 2008 recommend sigma1 ~ sqrt(sigma0 m) and a decaying sigma1(v))",
    "motor_inertia": "assumed apparent motor inertia after the Panda's internal torque loop "
    "(0.3 ... 0.05 kg m^2 from base to wrist; the loop scales the rotor's reflected inertia down, "
    "Albu-Schaeffer, Ott & Hirzinger 2007)",
    "stiffness": "assumed 5000 N m/rad (joints 1-4), 2000 (5-7): below the ~1e4 of harmonic drives "
    "in lightweight arms (Albu-Schaeffer et al. 2007) so that deflections (~10 mrad) are visible",
    "spring_damping": "30 % of critical for the motor inertia, 2 * 0.3 * sqrt(K B): the joint's "
    "own damping plus what the torque loop injects (Albu-Schaeffer, Ott & Hirzinger 2007). At 10 % "
    "the stiff data-collection loop (1 ms delay, link-side PD) went unstable on 4 of 40 slow paths "
    "(growing 10-12 Hz oscillation of joints 2 and 4 up to the effort limit); at 20 % and 30 %: 0 "
    "of 80 runs",
    "delay": "1 control period (1 ms), the FCI's one-cycle command latency",
    "noise": "assumed: q 5e-5 rad, qd 1e-3 rad/s, tau_J 0.05 N m (standard deviations)",
}


class PlantParams(NamedTuple):
    """Per-joint plant parameters, (n,) each (link-side units: N m, rad, s), and noise levels.

    Fields:
        motor_inertia: ``B`` (kg m^2). stiffness: ``K`` (N m/rad). spring_damping: ``D`` (N m s/rad).
        coulomb, static: LuGre ``F_c``, ``F_s`` (N m). stribeck_velocity: ``v_s`` (rad/s).
        viscous: ``sigma2`` (N m s/rad). bristle_stiffness: ``sigma0`` (N m/rad).
        bristle_damping: ``sigma1`` (N m s/rad). bristle_damping_velocity: ``v_d`` (rad/s).
        q_noise, qd_noise, torque_noise: scalar standard deviations (rad, rad/s, N m).
    """

    motor_inertia: np.ndarray
    stiffness: np.ndarray
    spring_damping: np.ndarray
    coulomb: np.ndarray
    static: np.ndarray
    stribeck_velocity: np.ndarray
    viscous: np.ndarray
    bristle_stiffness: np.ndarray
    bristle_damping: np.ndarray
    bristle_damping_velocity: np.ndarray
    q_noise: float
    qd_noise: float
    torque_noise: float


def default_plant_params() -> PlantParams:
    """The Panda plant's parameters (7 joints); sources in :data:`PLANT_SOURCES`."""
    coulomb = np.array([0.546, 0.872, 0.641, 1.279, 0.839, 0.303, 0.565])
    B = np.array([0.3, 0.3, 0.2, 0.2, 0.05, 0.05, 0.05])
    K = np.array([5000.0, 5000.0, 5000.0, 5000.0, 2000.0, 2000.0, 2000.0])
    sigma0 = np.full(7, 1000.0)
    return PlantParams(
        motor_inertia=B,
        stiffness=K,
        spring_damping=2 * 0.3 * np.sqrt(K * B),
        coulomb=coulomb,
        static=1.3 * coulomb,
        stribeck_velocity=np.full(7, 0.05),
        viscous=np.full(7, 0.05),
        bristle_stiffness=sigma0,
        bristle_damping=np.sqrt(sigma0 * B),
        bristle_damping_velocity=np.full(7, 0.05),
        q_noise=5e-5,
        qd_noise=1e-3,
        torque_noise=0.05,
    )


def panda_urdf_path() -> str:
    """Path of the Panda URDF shipped by ``example-robot-data`` (a test dependency).

    Raises:
        FileNotFoundError: the package is not installed.
    """
    for root in site.getsitepackages():
        found = glob.glob(f"{root}/{PANDA_URDF}")
        if found:
            return found[0]
    raise FileNotFoundError(
        "the Panda URDF comes from the example-robot-data package; install the test extras "
        "(pip install -e '.[test]')"
    )


@functools.cache
def panda_robot() -> bn.Robot:
    """The 7-DoF Panda (fingers locked at 0, their mass merged into the hand)."""
    return bn.load_urdf(panda_urdf_path(), lock_joints=dict.fromkeys(PANDA_FINGERS, 0.0))


@dataclasses.dataclass(frozen=True, eq=False)
class PandaPlant:
    """The simulated Panda: rigid body + elastic joints + LuGre friction + delay + noise.

    Fields:
        robot: the rigid-body model (:func:`panda_robot`). params: :class:`PlantParams`.
        rate_hz: control rate (Hz). substeps: plant steps per control period.
        delay_steps: command delay in control periods (>= 0).
    """

    robot: bn.Robot
    params: PlantParams
    rate_hz: float = 1000.0
    substeps: int = 10
    delay_steps: int = 1

    def __post_init__(self):
        if not self.rate_hz > 0 or self.substeps < 1 or self.delay_steps < 0:
            raise ValueError(
                f"need rate_hz > 0, substeps >= 1, delay_steps >= 0; got {self.rate_hz}, "
                f"{self.substeps}, {self.delay_steps}"
            )
        n = self.robot.n
        for name, value in self.params._asdict().items():
            if np.ndim(value) and np.shape(value) != (n,):
                raise ValueError(
                    f"plant parameter {name} has shape {np.shape(value)}, expected ({n},)"
                )

    @property
    def dt(self) -> float:
        return 1.0 / self.rate_hz


def make_plant(**changes) -> PandaPlant:
    """The default Panda plant; ``changes`` replace :class:`PandaPlant` fields."""
    return PandaPlant(**{"robot": panda_robot(), "params": default_plant_params(), **changes})


def lugre_update(p: PlantParams, z: jax.Array, v: jax.Array, h: float):
    """One LuGre step at constant velocity ``v`` over ``h``: ``(z_new, tau_f)`` (n,) each.

    ``zd = sigma0 |v| / g(v) (z_ss - z)`` with ``z_ss = g(v) sign(v) / sigma0`` is solved exactly:
    ``z_new = z_ss + (z - z_ss) exp(-sigma0 |v| h / g(v))``; ``tau_f`` uses the mean ``zd`` over h.
    """
    dtype = v.dtype
    c = lambda x: jnp.asarray(x, dtype)
    s0 = c(p.bristle_stiffness)
    g = c(p.coulomb) + (c(p.static) - c(p.coulomb)) * jnp.exp(-((v / c(p.stribeck_velocity)) ** 2))
    rate = s0 * jnp.abs(v) / g
    z_ss = g * jnp.sign(v) / s0
    z_new = z_ss + (z - z_ss) * jnp.exp(-rate * h)
    zd = (z_new - z) / h
    s1 = c(p.bristle_damping) * jnp.exp(-((v / c(p.bristle_damping_velocity)) ** 2))
    return z_new, s0 * z_new + s1 * zd + c(p.viscous) * v


class PlantState(NamedTuple):
    """Plant state, (n,) each: link ``q, qd``, motor ``th, thd``, LuGre ``z``; ``queue`` (d, n)
    commanded torques not yet applied (oldest first)."""

    q: jax.Array
    qd: jax.Array
    th: jax.Array
    thd: jax.Array
    z: jax.Array
    queue: jax.Array


def initial_state(plant: PandaPlant, q0: jax.Array, qd0: jax.Array) -> PlantState:
    """At ``q0, qd0`` with the springs deflected by gravity (``th = q + K^-1 g(q)``), ``z = 0``,
    and the delay queue holding the gravity torque."""
    dtype = jnp.result_type(float, q0)
    g = bn.gravity_torques(plant.robot, q0)
    th = q0 + g / jnp.asarray(plant.params.stiffness, dtype)
    queue = jnp.broadcast_to(g, (plant.delay_steps, plant.robot.n)).astype(dtype)
    return PlantState(q0, qd0, th, qd0, jnp.zeros_like(q0), queue)


def plant_period(
    plant: PandaPlant, state: PlantState, tau_cmd: jax.Array
) -> tuple[PlantState, jax.Array]:
    """Advance one control period with command ``tau_cmd`` (n,): ``(state, tau_s)`` where
    ``tau_s`` (n,) is the spring torque at the end (what the joint-torque sensor measures)."""
    p, robot = plant.params, plant.robot
    dtype = state.q.dtype
    c = lambda x: jnp.asarray(x, dtype)
    if plant.delay_steps:
        tau_m = state.queue[0]
        queue = jnp.concatenate([state.queue[1:], tau_cmd[None]], axis=0)
    else:
        tau_m, queue = tau_cmd, state.queue
    h = plant.dt / plant.substeps
    M = bn.crba(robot, state.q)
    chol = jnp.linalg.cholesky(M)
    bias = bn.rnea(robot, state.q, state.qd, jnp.zeros_like(state.q))
    K, D, B = c(p.stiffness), c(p.spring_damping), c(p.motor_inertia)

    def sub(carry, _):
        q, qd, th, thd, z = carry
        tau_s = K * (th - q) + D * (thd - qd)
        qdd = jax.scipy.linalg.cho_solve((chol, True), tau_s - bias)
        z, tau_f = lugre_update(p, z, thd, h)
        thdd = (tau_m - tau_f - tau_s) / B
        qd, thd = qd + h * qdd, thd + h * thdd
        return (q + h * qd, qd, th + h * thd, thd, z), None

    (q, qd, th, thd, z), _ = jax.lax.scan(
        sub, (state.q, state.qd, state.th, state.thd, state.z), None, length=plant.substeps
    )
    tau_s = K * (th - q) + D * (thd - qd)
    return PlantState(q, qd, th, thd, z, queue), tau_s


# A controller maps (its state, measured q, qd, reference q, qd, qdd at this step) to
# (new state, commanded torque (n,)). Stateless controllers carry an empty tuple.
Controller = Callable[[object, jax.Array, jax.Array, jax.Array, jax.Array, jax.Array], tuple]


class ClosedLoop(NamedTuple):
    """A closed-loop run, each (T, n): measured ``q, qd``, commanded ``tau``, sensor ``tau_J``,
    true link ``q_true, qd_true``, LuGre state ``z``."""

    q: jax.Array
    qd: jax.Array
    tau: jax.Array
    tau_J: jax.Array
    q_true: jax.Array
    qd_true: jax.Array
    z: jax.Array


def closed_loop(
    plant: PandaPlant,
    controller: Controller,
    ctrl_state,
    reference: tuple[jax.Array, jax.Array, jax.Array],
    key: jax.Array,
) -> ClosedLoop:
    """Run ``controller`` on the plant along ``reference = (q_des, qd_des, qdd_des)`` (T, n) each.

    One ``lax.scan`` over the T control periods; jit and vmap it from outside. The plant starts on
    the reference (:func:`initial_state`). Noise draws come from ``key``.
    """
    q_des, qd_des, qdd_des = reference
    T, n = q_des.shape
    dtype = q_des.dtype
    p = plant.params
    noise = jax.random.normal(key, (T, 3, n), dtype)
    state0 = initial_state(plant, q_des[0], qd_des[0])
    limit = jnp.asarray(np.abs(np.asarray(plant.robot.effort_limit, dtype=float)), dtype)

    def step(carry, xs):
        state, cs = carry
        qr, qdr, qddr, eps = xs
        q_m = state.q + p.q_noise * eps[0]
        qd_m = state.qd + p.qd_noise * eps[1]
        cs, tau = controller(cs, q_m, qd_m, qr, qdr, qddr)
        tau = jnp.clip(tau, -limit, limit)
        new, tau_s = plant_period(plant, state, tau)
        out = (q_m, qd_m, tau, tau_s + p.torque_noise * eps[2], state.q, state.qd, state.z)
        return (new, cs), out

    _, out = jax.lax.scan(step, (state0, ctrl_state), (q_des, qd_des, qdd_des, noise))
    return ClosedLoop(*out)


def critical_damping(robot: bn.Robot, kp, q_home=None) -> np.ndarray:
    """Damping gains ``2 sqrt(kp_j M_jj(q_home))`` (n,) for critical damping of each joint alone."""
    q_home = np.zeros(robot.n) if q_home is None else q_home
    m = np.diag(np.asarray(bn.crba(robot, jnp.asarray(q_home, dtype=jnp.float64))))
    return 2.0 * np.sqrt(np.asarray(kp, dtype=float) * m)


PANDA_HOME = (0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785)
"""The Panda's usual ready pose (rad)."""


def impedance_controller(feedforward: Callable, kp, kd) -> Controller:
    """The paper's joint impedance law (eq. 23): ``tau = f(q, qd, qdd_des) - Kd (qd - qd_des) - Kp (q - q_des)``.

    ``feedforward(state, q, qd, qdd) -> (state, tau_ff)``: an inverse dynamics model (for the data
    collection the rigid-body model, ``f = rnea``).
    """
    kp = jnp.asarray(kp)
    kd = jnp.asarray(kd)

    def controller(cs, q, qd, qr, qdr, qddr):
        cs, ff = feedforward(cs, q, qd, qddr)
        return cs, ff + kp.astype(q.dtype) * (qr - q) + kd.astype(q.dtype) * (qdr - qd)

    return controller


def rigid_body_feedforward(robot: bn.Robot, params=None) -> Callable:
    """Stateless feed-forward ``rnea(q, qd, qdd)`` of a rigid-body model."""

    def ff(cs, q, qd, qdd):
        return cs, bn.rnea(robot, q, qd, qdd, params=params)

    return ff


# --- excitation data ----------------------------------------------------------------------------


class Movement(NamedTuple):
    """One recorded movement (T samples at the plant's rate).

    Fields:
        trajectory: index of the Fourier path. speed: ``"slow"`` or ``"fast"``.
        t: (T,) s. q, qd: (T, n) measured. qdd: (T, n) estimated (5 Hz zero-phase filter).
        tau: (T, n) commanded torque ``tau_ref`` (the learning target). tau_J: (T, n) sensor torque.
        q_des, qd_des, qdd_des: (T, n) the reference. q_true, qd_true: (T, n) noise-free link state.
    """

    trajectory: int
    speed: str
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau: np.ndarray
    tau_J: np.ndarray
    q_des: np.ndarray
    qd_des: np.ndarray
    qdd_des: np.ndarray
    q_true: np.ndarray
    qd_true: np.ndarray


def fourier_paths(
    robot: bn.Robot, seeds, *, period: float, harmonics: int = 5
) -> list[FourierTrajectory]:
    """Random Fourier paths at the "fast" speed (peak velocity ``0.4 qd_max``), one per seed."""
    vlim = np.asarray(robot.velocity_limit, dtype=float) * SPEED_FRACTIONS["fast"]
    return [
        fourier_excitation(
            robot.lower,
            robot.upper,
            seed=int(s),
            velocity_limit=vlim,
            acceleration_limit=np.asarray(PANDA_ACCELERATION_LIMIT) * SPEED_FRACTIONS["fast"],
            harmonics=harmonics,
            base_frequency_hz=1.0 / period,
            margin=0.15,
        )
        for s in seeds
    ]


def time_stretched(path: FourierTrajectory, factor: float) -> FourierTrajectory:
    """The same path traversed ``factor`` times slower: ``q'(t) = q(t / factor)``."""
    return FourierTrajectory(path.q0, path.a / factor, path.b / factor, path.w_f / factor)


@functools.partial(jax.jit, static_argnums=(0,))
def _collect(plant: PandaPlant, kp, kd, refs, keys):
    ctrl = impedance_controller(rigid_body_feedforward(plant.robot), kp, kd)
    run = lambda ref, key: closed_loop(plant, ctrl, (), ref, key)
    return jax.vmap(run)(refs, keys)


def run_paths(
    plant: PandaPlant,
    paths: list[FourierTrajectory],
    *,
    speed: str,
    key: jax.Array,
    gains=STIFF_GAINS,
) -> list[Movement]:
    """Execute ``paths`` (fast-speed Fourier series) at ``speed`` with the data-collection
    controller (rigid-body feed-forward, impedance gains ``gains``); one period of each path."""
    factor = SPEED_FRACTIONS["fast"] / SPEED_FRACTIONS[speed]
    stretched = [time_stretched(p, factor) for p in paths]
    period = 2 * np.pi / stretched[0].w_f
    T = int(round(period * plant.rate_hz))
    t = np.arange(T) / plant.rate_hz
    refs = [p.sample(t) for p in stretched]
    ref = tuple(jnp.asarray(np.stack([r[k] for r in refs])) for k in range(3))
    keys = jax.random.split(key, len(paths))
    kp = np.asarray(gains, dtype=float)
    kd = critical_damping(plant.robot, kp, PANDA_HOME)
    out = _collect(plant, kp, kd, ref, keys)
    out = ClosedLoop(*(np.asarray(x) for x in out))
    check_not_saturated(plant.robot, out.tau, speed=speed, rate_hz=plant.rate_hz)
    movements = []
    for e in range(len(paths)):
        qd = out.qd[e]
        qdd = lowpass(np.gradient(qd, t, axis=0), plant.rate_hz, cutoff_hz=5.0, order=2)
        movements.append(
            Movement(
                e, speed, t, out.q[e], qd, qdd, out.tau[e], out.tau_J[e],
                refs[e][0], refs[e][1], refs[e][2], out.q_true[e], out.qd_true[e],
            )
        )  # fmt: skip
    return movements


def check_not_saturated(robot: bn.Robot, tau: np.ndarray, *, speed: str, rate_hz: float) -> None:
    """Raise if a recorded movement's commanded torque (E, T, n) reached an effort limit.

    A tracking run that saturates is not excitation data: on this plant it has meant a closed
    loop gone unstable (a growing oscillation), whose torques no inverse dynamics model explains.
    """
    limit = np.abs(np.asarray(robot.effort_limit, dtype=float))
    hit = np.abs(tau) >= (1.0 - 1e-9) * limit
    if hit.any():
        e, t, j = (int(v[0]) for v in np.nonzero(hit))
        raise ValueError(
            f"data collection: path {e} ({speed}) reached joint {j + 1}'s effort limit "
            f"({limit[j]:g} N m) at t = {t / rate_hz:.3f} s: the tracking loop went unstable or the "
            "path demands more than the robot can give; change the plant parameters, the gains or "
            "the path seed"
        )


class Split(NamedTuple):
    """Movements by role; ``sysid`` is the small system-identification subset (Table I)."""

    train: list[Movement]
    valid: list[Movement]
    test: list[Movement]
    sysid: list[Movement]


def excitation_data(
    plant: PandaPlant | None = None,
    *,
    trajectories: int = 6,
    period: float = 5.0,
    seed: int = 0,
) -> Split:
    """The excitation data set, split by trajectory (paper, Section IV-B, scaled down).

    ``trajectories`` Fourier paths (>= 4), each run fast (period ``period`` s) and slow (4x longer).
    Test: the last two paths, both speeds (unseen in training). Validation: the third-last path
    (both speeds, unseen) and the fast run of path 0 (its slow run is in training), as the
    paper's mix. Training: the rest. System identification subset: path 0, slow and fast.
    """
    if trajectories < 4:
        raise ValueError(f"need at least 4 trajectories (train, valid, 2 test), got {trajectories}")
    plant = make_plant() if plant is None else plant
    paths = fourier_paths(
        plant.robot, [seed * 1000 + k for k in range(trajectories)], period=period
    )
    k_slow, k_fast = jax.random.split(jax.random.key(seed))
    runs = {
        "slow": run_paths(plant, paths, speed="slow", key=k_slow),
        "fast": run_paths(plant, paths, speed="fast", key=k_fast),
    }
    for speed, ms in runs.items():
        runs[speed] = [m._replace(trajectory=k) for k, m in enumerate(ms)]
    N = trajectories
    test = [runs[s][k] for k in (N - 2, N - 1) for s in ("slow", "fast")]
    valid = [runs["slow"][N - 3], runs["fast"][N - 3], runs["fast"][0]]
    train = [runs["slow"][0]] + [runs[s][k] for k in range(1, N - 3) for s in ("slow", "fast")]
    sysid = [runs["slow"][0], runs["fast"][0]]
    return Split(train, valid, test, sysid)
