"""The one dataset type every later module reads: episodes of ``t, q, qd, qdd, tau`` plus metadata.

Arrays are numpy float64; joint order is ``joint_names`` (the robot's). ``tau`` is the commanded
joint effort ``tau_d`` (what a user logs); friction and motor effects between ``tau_d`` and the
true joint torque are what actuator models learn. See docs/conventions.md, "Data".
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

import bayes_nea as bn
from bayes_nea.integrate import QddFn

SIGNALS = ("q", "qd", "qdd", "tau")
KINDS = ("uniform", "trajectories", "hardware", "excitation", "imported")
PLANT_KEYS = ("theta", "rpy", "xyz", *bn.FRICTION_FIELDS, "friction_smoothing", "delay_s")
"""``true_params`` entries of every simulated plant (:func:`plant_params`)."""
MOTOR_KEYS = ("motor_gain", "back_emf", "voltage_limit")
"""``true_params`` entries of a plant with a DC motor."""

PLAUSIBLE_LIMITS = {"t": 1e9, "q": 1e6, "qd": 1e6, "qdd": 1e8, "tau": 1e8}
"""Largest magnitude accepted per signal (SI units: s, rad or m, N m or N): far beyond any robot,
yet refusing values (1e305 torques) that only a corrupted or mis-scaled log holds."""
MAX_RATE_HZ = 1e6
"""Highest sampling rate accepted (Hz); robot logs run at a few kHz at most."""


def _real_array(x, name: str, where: str) -> np.ndarray:
    """``x`` as float64; complex, boolean, string or object values are refused by name."""
    arr = np.asarray(x)
    if arr.dtype.kind not in "fiu":
        raise ValueError(
            f"{where}: {name} has dtype {arr.dtype}; expected real numbers (float or int)"
        )
    return arr.astype(np.float64, copy=False)


class Episode(NamedTuple):
    """One trajectory (or one chunk of independent samples), numpy float64.

    Fields:
        t: (T,) time stamps in seconds, strictly increasing.
        q, qd, qdd, tau: (T, n) joint positions, velocities, accelerations and commanded efforts,
            columns in the dataset's ``joint_names`` order.
    """

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau: np.ndarray


def check_values(x: np.ndarray, name: str, where: str) -> None:
    """Refuse NaN/inf values and values beyond :data:`PLAUSIBLE_LIMITS` of signal ``name``.

    Raises:
        ValueError: naming ``where``, the signal, the count and the first row.
    """
    bad = ~np.isfinite(x)
    if bad.any():
        row = int(np.argwhere(bad)[0][0])
        raise ValueError(
            f"{where}: {name} has {int(bad.sum())} NaN/inf values (first at row {row})"
        )
    big = np.abs(x) > PLAUSIBLE_LIMITS[name]
    if big.any():
        row = int(np.argwhere(big)[0][0])
        raise ValueError(
            f"{where}: {name} has {int(big.sum())} implausible values beyond "
            f"+-{PLAUSIBLE_LIMITS[name]:g} (first at row {row}: {x[np.nonzero(big)][0]:g}); "
            "check the units and the log"
        )


def make_episode(t, q, qd, qdd, tau, *, n: int | None = None, where: str = "episode") -> Episode:
    """An :class:`Episode` from array-likes, validated and converted to float64.

    Raises:
        ValueError: wrong shapes (``(T,)`` and ``(T, n)``), non-finite values, or time stamps
            that are not strictly increasing; the message names the signal and the problem.
    """
    t = _real_array(t, "t", where)
    if t.ndim != 1 or t.shape[0] < 1:
        raise ValueError(f"{where}: t has shape {t.shape}, expected (T,) with T >= 1")
    out = {"t": t}
    for name, x in zip(SIGNALS, (q, qd, qdd, tau), strict=True):
        x = _real_array(x, name, where)
        expected = (t.shape[0], x.shape[1] if (n is None and x.ndim == 2) else n)
        if x.ndim != 2 or x.shape != expected:
            raise ValueError(
                f"{where}: {name} has shape {x.shape}, expected (T, n) = {expected} "
                "(one row per time stamp, one column per joint)"
            )
        out[name] = x
    for name, x in out.items():
        check_values(x, name, where)
    if t.shape[0] > 1 and not np.all(np.diff(t) > 0):
        k = int(np.flatnonzero(np.diff(t) <= 0)[0])
        raise ValueError(
            f"{where}: time stamps must be strictly increasing; t[{k + 1}] = {t[k + 1]} <= "
            f"t[{k}] = {t[k]}"
        )
    for name, x in out.items():
        if x.flags.writeable:  # own a private, read-only copy
            x = x.copy()
            x.setflags(write=False)
            out[name] = x
    return Episode(**out)


def plant_params(plant: bn.Plant) -> dict:
    """The ``true_params`` entries (numpy float64) of a simulated plant: :data:`PLANT_KEYS`, and
    :data:`MOTOR_KEYS` when it has a motor. :func:`plant_from_params` reads them back."""
    if plant.friction.smoothing is None:
        raise ValueError("a simulated plant needs a friction smoothing velocity (got None)")
    values = [*plant.params, *plant.friction, plant.delay_s]
    out = {k: np.asarray(v, dtype=np.float64) for k, v in zip(PLANT_KEYS, values, strict=True)}
    if plant.motor is not None:
        out.update(
            {
                k: np.asarray(v, dtype=np.float64)
                for k, v in zip(MOTOR_KEYS, plant.motor, strict=True)
            }
        )
    return out


def plant_from_params(true_params: dict) -> bn.Plant:
    """The :class:`bayes_nea.Plant` that ``true_params`` (written by :func:`plant_params`) describe.

    Raises:
        ValueError: a plant entry is missing (data without a known true plant).
    """
    missing = [k for k in PLANT_KEYS if k not in true_params]
    if missing:
        raise ValueError(
            f"true_params lack the plant entries {missing} (need {list(PLANT_KEYS)}); only data "
            "simulated by data.generate_dataset has a known true plant"
        )
    f64 = {k: np.asarray(v, dtype=np.float64) for k, v in true_params.items() if k in PLANT_KEYS}
    motor = None
    if any(k in true_params for k in MOTOR_KEYS):
        absent = [k for k in MOTOR_KEYS if k not in true_params]
        if absent:
            raise ValueError(f"true_params have a motor but lack {absent}")
        motor = bn.DCMotor(*(np.asarray(true_params[k], dtype=np.float64) for k in MOTOR_KEYS))
    return bn.Plant(
        bn.RobotParams(f64["theta"], f64["rpy"], f64["xyz"]),
        bn.FrictionParams(*(f64[k] for k in (*bn.FRICTION_FIELDS, "friction_smoothing"))),
        motor,
        float(f64["delay_s"]),
    )


def _json_able(value: Any) -> Any:
    """Numpy scalars and arrays turned into plain Python (lists) for JSON."""
    if isinstance(value, dict):
        return {str(k): _json_able(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_able(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _normalise_params(value: Any) -> Any:
    """True parameters with numeric array-likes as float64 numpy arrays (nested dicts kept)."""
    if isinstance(value, dict):
        return {str(k): _normalise_params(v) for k, v in value.items()}
    if isinstance(value, str | bool) or value is None:
        return value
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return value
    return arr


def _values_equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_values_equal(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray | list | tuple) or isinstance(b, np.ndarray | list | tuple):
        try:
            x, y = np.asarray(a), np.asarray(b)
        except ValueError:
            return False
        if x.dtype == object or y.dtype == object:
            return len(a) == len(b) and all(_values_equal(u, v) for u, v in zip(a, b, strict=True))
        return x.shape == y.shape and bool(np.array_equal(x, y))
    return a == b


@dataclass(frozen=True)
class Dataset:
    """Episodes of one system with their metadata.

    Fields:
        system: ``"cartpole"``, ``"furuta"`` or a user's robot name.
        kind: one of ``"uniform"``, ``"trajectories"``, ``"hardware"``, ``"excitation"``,
            ``"imported"``.
        joint_names: (n,) joint order of every array's columns.
        rate_hz: sampling rate (Hz); for uniform data the nominal rate used for ``t``.
        episodes: the trajectories (whole units for splitting).
        measured: which of ``("q", "qd", "qdd", "tau")`` are measured.
        estimated: which were estimated from other signals (e.g. ``qd``, ``qdd`` by filtered
            finite differences); ``measured`` and ``estimated`` are disjoint.
        synthetic: True for simulated data (also for the "hardware-like" kind).
        settings: JSON-able generation settings (seed, duration, noise, friction, delay, filter).
        true_params: for simulated data the true parameters (``"theta"`` (n, 10), ``"rpy"``,
            ``"xyz"`` (n, 3), friction and motor values), else None.
        robot_description: the robot the data belong to (:func:`bayes_nea.robot_to_dict`, exact),
            e.g. the user's URDF of an imported log; None for data of a built-in system that
            predate it (:meth:`robot` then looks the system up by name).
    """

    system: str
    kind: str
    joint_names: tuple[str, ...]
    rate_hz: float
    episodes: tuple[Episode, ...]
    measured: tuple[str, ...]
    estimated: tuple[str, ...]
    synthetic: bool
    settings: dict
    true_params: dict | None
    robot_description: dict | None = None

    def __post_init__(self):
        object.__setattr__(self, "joint_names", tuple(str(j) for j in self.joint_names))
        object.__setattr__(self, "measured", tuple(self.measured))
        object.__setattr__(self, "estimated", tuple(self.estimated))
        try:
            object.__setattr__(self, "rate_hz", float(self.rate_hz))
        except (TypeError, ValueError):
            raise ValueError(f"rate_hz must be a number, got {self.rate_hz!r}") from None
        n = len(self.joint_names)
        if n == 0 or len(set(self.joint_names)) != n:
            raise ValueError(f"joint_names must be non-empty and unique, got {self.joint_names}")
        if self.kind not in KINDS:
            raise ValueError(f"unknown dataset kind {self.kind!r}; valid kinds are {KINDS}")
        if not 0 < self.rate_hz <= MAX_RATE_HZ:
            raise ValueError(
                f"rate_hz must be a positive number of at most {MAX_RATE_HZ:g} Hz, got {self.rate_hz}"
            )
        for field in ("measured", "estimated"):
            unknown = set(getattr(self, field)) - set(SIGNALS)
            if unknown:
                raise ValueError(
                    f"{field} names unknown signals {sorted(unknown)}; valid: {SIGNALS}"
                )
        if set(self.measured) & set(self.estimated):
            raise ValueError(
                f"signals {sorted(set(self.measured) & set(self.estimated))} are listed as both "
                "measured and estimated"
            )
        if not self.episodes:
            raise ValueError("a dataset needs at least one episode")
        episodes = tuple(
            make_episode(*ep, n=n, where=f"episode {i}") for i, ep in enumerate(self.episodes)
        )
        object.__setattr__(self, "episodes", episodes)
        object.__setattr__(self, "settings", _json_able(dict(self.settings)))
        if self.true_params is not None:
            object.__setattr__(self, "true_params", _normalise_params(dict(self.true_params)))
        if self.robot_description is not None:
            if isinstance(self.robot_description, bn.Robot):
                object.__setattr__(self, "robot_description", bn.robot_to_dict(self.robot_description))
            robot = bn.robot_from_dict(self.robot_description)
            if robot.joint_names != self.joint_names:
                raise ValueError(
                    f"the dataset's joints {list(self.joint_names)} differ from its robot "
                    f"{robot.name!r}'s {list(robot.joint_names)}"
                )

    @classmethod
    def from_arrays(
        cls,
        *,
        system: str,
        joint_names,
        t,
        q,
        qd,
        qdd,
        tau,
        rate_hz: float | None = None,
        kind: str = "imported",
        episode_ids=None,
        measured=SIGNALS,
        estimated=(),
        synthetic: bool = False,
        settings: dict | None = None,
        true_params: dict | None = None,
        robot_description: dict | None = None,
    ) -> Dataset:
        """A dataset from concatenated arrays ``t`` (N,), ``q..tau`` (N, n).

        ``episode_ids`` (N,) labels the trajectory of each row (rows of one label, in order, form
        one episode); without it everything is one episode. ``rate_hz`` defaults to
        ``1 / median(diff(t))``.
        """
        t = _real_array(t, "t", "from_arrays")
        arrays = [
            _real_array(x, k, "from_arrays")
            for k, x in zip(SIGNALS, (q, qd, qdd, tau), strict=True)
        ]
        if episode_ids is None:
            groups = [np.arange(t.shape[0])]
        else:
            ids = np.asarray(episode_ids)
            if ids.shape != t.shape:
                raise ValueError(f"episode_ids has shape {ids.shape}, expected {t.shape} (like t)")
            _, first = np.unique(ids, return_index=True)
            groups = [np.flatnonzero(ids == ids[k]) for k in np.sort(first)]
        episodes = tuple(
            make_episode(
                t[g], *(x[g] for x in arrays), n=len(tuple(joint_names)), where=f"episode {i}"
            )
            for i, g in enumerate(groups)
        )
        if rate_hz is None:
            steps = np.concatenate([np.diff(ep.t) for ep in episodes])
            if steps.size == 0:
                raise ValueError("rate_hz is needed when no episode has two samples")
            rate_hz = 1.0 / float(np.median(steps))
        return cls(
            system=system,
            kind=kind,
            joint_names=tuple(joint_names),
            rate_hz=rate_hz,
            episodes=episodes,
            measured=tuple(measured),
            estimated=tuple(estimated),
            synthetic=synthetic,
            settings=settings or {},
            true_params=true_params,
            robot_description=robot_description,
        )

    @property
    def n(self) -> int:
        """Number of joints."""
        return len(self.joint_names)

    @property
    def n_samples(self) -> int:
        """Total number of samples over all episodes."""
        return sum(ep.t.shape[0] for ep in self.episodes)

    @property
    def duration(self) -> float:
        """Total duration in seconds (samples / rate)."""
        return self.n_samples / self.rate_hz

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(q, qd, qdd, tau)``, each (N, n), concatenated over episodes."""
        return tuple(
            np.concatenate([getattr(ep, name) for ep in self.episodes], axis=0) for name in SIGNALS
        )

    def replace(self, **changes) -> Dataset:
        """A copy with fields replaced, validated again."""
        return dataclasses.replace(self, **changes)

    def split(
        self,
        fractions: tuple[float, ...] = (0.7, 0.15, 0.15),
        *,
        seed: int,
        envelope: bool = False,
    ) -> tuple[Dataset, ...]:
        """Datasets made of whole episodes, shuffled with ``seed``, in the given fractions.

        Each non-zero fraction gets at least one episode. With ``envelope=True`` the first part
        (the training part) first takes the episodes of :meth:`envelope_episodes`, those that
        reach the largest speed of some joint or the largest effort of some actuated joint, and
        the rest are shuffled as before: the later parts then lie within the speeds and efforts
        the first part spans, so that their error measures interpolation, not extrapolation.

        Raises:
            ValueError: fractions not non-negative summing to 1, or too few episodes.
        """
        f = np.asarray(fractions, dtype=float)
        if f.ndim != 1 or f.size < 1 or np.any(f < 0) or not np.isclose(f.sum(), 1.0):
            raise ValueError(f"fractions must be non-negative and sum to 1, got {fractions}")
        count = len(self.episodes)
        need = int(np.count_nonzero(f))
        if count < need:
            raise ValueError(
                f"cannot split {count} episode(s) into {need} non-empty parts; splits are by whole "
                "episodes: generate more (shorter) episodes"
            )
        sizes = np.floor(f * count).astype(int)
        sizes[(f > 0) & (sizes == 0)] = 1
        while sizes.sum() > count:
            sizes[np.argmax(sizes)] -= 1
        order = np.argsort(-(f * count - sizes))
        k = 0
        while sizes.sum() < count:
            if f[order[k % f.size]] > 0:
                sizes[order[k % f.size]] += 1
            k += 1
        perm = np.random.default_rng(seed).permutation(count)
        if envelope and f[0] > 0:
            first = list(self.envelope_episodes())[: sizes[0]]
            perm = np.concatenate([first, [i for i in perm if i not in first]]).astype(int)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        parts = []
        for i in range(f.size):
            idx = np.sort(perm[bounds[i] : bounds[i + 1]])
            if idx.size == 0:
                parts.append(None)
                continue
            split = {"fractions": list(f), "seed": seed, "part": i, "episodes": idx.tolist()}
            if envelope:  # only then: a random split's settings stay as they were
                split["envelope"] = True
            settings = dict(self.settings, split=split)
            parts.append(
                self.replace(episodes=tuple(self.episodes[j] for j in idx), settings=settings)
            )
        return tuple(parts)

    def envelope_episodes(self) -> tuple[int, ...]:
        """Indices of the episodes that set the recording's envelope: for each joint the episode
        with the largest ``|qd|``, then for each joint whose effort is not identically 0 the one
        with the largest ``|tau|``; without repeats, in that order."""
        order: list[int] = []
        for name in ("qd", "tau"):
            peaks = np.stack([np.max(np.abs(getattr(ep, name)), axis=0) for ep in self.episodes])
            for j in range(self.n):
                top = int(np.argmax(peaks[:, j]))
                if peaks[top, j] > 0 and top not in order:
                    order.append(top)
        return tuple(order)

    def robot(self) -> bn.Robot:
        """The data's :class:`bayes_nea.Robot`: the stored ``robot_description`` (never swapped for
        a built-in of the same name), else the built-in system ``system``.

        Raises:
            ValueError: no description and ``system`` is not built in (import the log with its
                URDF: ``data.import_log`` or ``bayes-nea import``).
        """
        if self.robot_description is not None:
            return bn.robot_from_dict(self.robot_description)
        try:
            robot = bn.get_system(self.system)
        except ValueError:
            raise ValueError(
                f"dataset of {self.system!r} carries no robot and {self.system!r} is not a "
                "built-in system: import the log with its URDF (bayes-nea import --urdf ...)"
            ) from None
        if robot.joint_names != self.joint_names:
            raise ValueError(
                f"dataset joints {self.joint_names} differ from {self.system!r}'s {robot.joint_names}"
            )
        return robot

    def true_plant(self) -> bn.Plant:
        """The plant that simulated this data (true inertia, friction, motor).

        Raises:
            ValueError: no true parameters (imported data) or no plant among them.
        """
        if self.true_params is None:
            raise ValueError(
                f"dataset of {self.system!r} ({self.kind}) has no true parameters: not simulated"
            )
        return plant_from_params(self.true_params)

    def true_dynamics(self, robot: bn.Robot | None = None) -> QddFn:
        """The true system's forward dynamics ``(q, qd, tau_d) -> qdd``: the function the
        generator integrated (:func:`bayes_nea.plant_dynamics` of :meth:`true_plant`). The
        actuation delay of hardware-like data (``true_plant().delay_s``) acts in closed loop
        (:func:`bayes_nea.delay_steps`).

        Args:
            robot: the data's robot; default :meth:`robot` (built-in systems).
        """
        return bn.plant_dynamics(self.robot() if robot is None else robot, self.true_plant())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Dataset):
            return NotImplemented
        same_meta = all(
            _values_equal(getattr(self, f.name), getattr(other, f.name))
            for f in dataclasses.fields(self)
            if f.name != "episodes"
        )
        return (
            same_meta
            and len(self.episodes) == len(other.episodes)
            and all(
                np.array_equal(a, b)
                for ea, eb in zip(self.episodes, other.episodes, strict=True)
                for a, b in zip(ea, eb, strict=True)
            )
        )

    __hash__ = None

    def __repr__(self) -> str:
        return (
            f"Dataset(system={self.system!r}, kind={self.kind!r}, joints={self.joint_names}, "
            f"episodes={len(self.episodes)}, samples={self.n_samples}, rate_hz={self.rate_hz:g}, "
            f"synthetic={self.synthetic})"
        )
