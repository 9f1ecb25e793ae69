"""Import of a user's own logs (CSV or NPZ) into a validated :class:`data.Dataset`.

CSV: a header row; columns ``t``, then ``q_<joint>``, ``qd_<joint>``, ``qdd_<joint>``,
``tau_<joint>`` for every joint of the robot (any column order, extra columns ignored), and
optionally ``trajectory`` (rows with the same value form one episode, kept in order of first
appearance). NPZ: arrays ``t`` (T,), ``q``, ``qd``, ``qdd``, ``tau`` (T, n) in the robot's joint
order, or in the order of an optional string array ``joint_names`` (n,) (mapped by name),
optionally ``trajectory`` (T,). Several paths give one episode per file (or per
trajectory label within a file).

With ``estimate_derivatives=True``, ``qd`` and ``qdd`` are estimated from ``q`` (central
differences + zero-phase Butterworth, :mod:`data.estimate`) and need not be in the file; they are
then listed in ``dataset.estimated``.

Each problem raises ``ValueError`` naming the file and the problem: a missing file or column,
shapes that do not match the robot's joints, NaN/inf values, non-increasing time stamps, or
irregular sampling.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from data.dataset import MAX_RATE_HZ, SIGNALS, Dataset, check_values, make_episode
from data.estimate import DEFAULT_CUTOFF_HZ, DEFAULT_ORDER
from data.estimate import estimate_derivatives as _estimate
from data.io import read_npz, write_text_atomic

TRAJECTORY_COLUMN = "trajectory"
JOINT_NAMES_ARRAY = "joint_names"
"""Optional NPZ array (n,) naming the log's columns; they are then mapped to the robot by name."""


def _robot_of(robot):
    if isinstance(robot, str):
        return bn.get_system(robot)
    if not hasattr(robot, "joint_names"):
        raise ValueError(
            f"robot must be a bayes_nea.Robot or a built-in system name, got {type(robot).__name__}"
        )
    return robot


def _read_csv(
    path: str, joints: tuple[str, ...], needed: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # -sig: a byte-order mark is ok
            reader = csv.reader(f)
            try:
                header = [h.strip() for h in next(reader)]
            except StopIteration:
                raise ValueError(f"{path}: the file is empty (expected a header row)") from None
            rows = [r for r in reader if r and any(c.strip() for c in r)]
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path}: not UTF-8 text (byte {err.object[err.start]:#04x} at offset {err.start}); "
            "save the log as UTF-8 CSV"
        ) from None
    except csv.Error as err:
        raise ValueError(f"{path}: malformed CSV ({err})") from None
    if "\0" in "".join(header):
        raise ValueError(f"{path}: the header holds NUL bytes; not a CSV text file")
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise ValueError(
            f"{path}: duplicate columns {duplicated}; each column name may appear once"
        )
    logged = [h.removeprefix("q_") for h in header if h.startswith("q_")]
    _check_joints_logged(path, joints, logged)
    needed = needed + tuple(s for s in optional if all(f"{s}_{j}" in header for j in joints))
    columns = ["t"] + [f"{s}_{j}" for s in needed for j in joints]
    missing = [c for c in columns if c not in header]
    if missing:
        derivatives_only = all(c.startswith(("qd_", "qdd_")) for c in missing)
        raise ValueError(
            f"{path}: missing columns {missing}; expected 't' and '<signal>_<joint>' for signals "
            f"{list(needed)} and joints {list(joints)}"
            + (
                " (without logged velocities and accelerations, estimate them from q: "
                "--estimate-derivatives, import_log(..., estimate_derivatives=True))"
                if derivatives_only
                else ""
            )
        )
    index = {h: i for i, h in enumerate(header)}
    for k, r in enumerate(rows):
        if len(r) != len(header):
            raise ValueError(
                f"{path}: row {k + 2} has {len(r)} fields, the header has {len(header)} "
                "(shape mismatch)"
            )

    def column(name, as_float=True):
        values = [r[index[name]].strip() for r in rows]
        if not as_float:
            return np.asarray(values)
        out = np.empty(len(values), dtype=np.float64)
        for k, v in enumerate(values):
            try:
                out[k] = float(v)
            except ValueError:
                raise ValueError(
                    f"{path}: column {name!r} has a non-numeric value {v[:40]!r} at row {k + 2}"
                ) from None
        return out

    out = {"t": column("t")}
    for s in needed:
        out[s] = (
            np.stack([column(f"{s}_{j}") for j in joints], axis=1)
            if rows
            else np.zeros((0, len(joints)))
        )
    if TRAJECTORY_COLUMN in index:
        out[TRAJECTORY_COLUMN] = column(TRAJECTORY_COLUMN, as_float=False)
    out["ignored"] = [h for h in header if h not in columns and h != TRAJECTORY_COLUMN]
    return out


def _check_joints_logged(path: str, joints: tuple[str, ...], logged) -> None:
    """Refuse a log that lacks some of the robot's joints, naming them and the log's own."""
    absent = [j for j in joints if j not in logged]
    if absent:
        raise ValueError(
            f"{path}: the robot's joint(s) {absent} are not in the log (it has joints "
            f"{list(logged)}); log every movable joint of the URDF or lock the others "
            "(load_urdf(lock_joints=...), bayes-nea import --lock-joint NAME=VALUE)"
        )


def _read_npz(path: str, joints: tuple[str, ...], needed: tuple[str, ...]) -> dict:
    content = read_npz(path, ".npz log")
    if "meta" in content and "offsets" in content:
        raise ValueError(
            f"{path}: this is a bayes-nea dataset file; read it with data.load_dataset, not "
            "import_log"
        )
    missing = [k for k in ("t", *needed) if k not in content]
    if missing:
        raise ValueError(
            f"{path}: missing arrays {missing}; expected 't' (T,) and {list(needed)} (T, n) with "
            f"n = {len(joints)} joints {list(joints)}"
        )
    for name in ("t", *needed):
        if content[name].dtype.kind not in "fiu":
            raise ValueError(
                f"{path}: {name} has dtype {content[name].dtype}; expected real numbers "
                "(float or int)"
            )
    if content["t"].ndim != 1:
        raise ValueError(f"{path}: t has shape {content['t'].shape}, expected (T,)")
    out = {"t": np.asarray(content["t"], dtype=np.float64), "ignored": []}
    order = np.arange(len(joints))
    if JOINT_NAMES_ARRAY in content:  # columns named: map them onto the robot's joint order
        logged = [str(j) for j in np.atleast_1d(content[JOINT_NAMES_ARRAY])]
        if len(set(logged)) != len(logged):
            raise ValueError(f"{path}: {JOINT_NAMES_ARRAY} repeats a name: {logged}")
        _check_joints_logged(path, joints, logged)
        order = np.array([logged.index(j) for j in joints])
        out["ignored"] = [j for j in logged if j not in joints]
    width = len(joints) if JOINT_NAMES_ARRAY not in content else len(logged)
    for s in needed:
        x = np.asarray(content[s], dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != width:
            raise ValueError(
                f"{path}: {s} has shape {x.shape}, expected (T, {width}) for joints "
                f"{logged if JOINT_NAMES_ARRAY in content else list(joints)} (shape mismatch "
                "with the robot's joints)"
            )
        out[s] = x[:, order]
    if TRAJECTORY_COLUMN in content:
        out[TRAJECTORY_COLUMN] = np.asarray(content[TRAJECTORY_COLUMN])
    return out


def _check_sampling(path: str, t: np.ndarray, tolerance: float) -> float:
    """Sampling period of ``t`` (checked regular within ``tolerance``, relative)."""
    dt = np.diff(t)
    if dt.size == 0:
        raise ValueError(f"{path}: a trajectory needs at least 2 samples")
    if np.any(dt <= 0):
        k = int(np.flatnonzero(dt <= 0)[0])
        raise ValueError(
            f"{path}: time is not increasing at row {k + 1}: t = {t[k + 1]} after {t[k]}"
        )
    period = float(np.median(dt))
    if period < 1.0 / MAX_RATE_HZ:
        raise ValueError(
            f"{path}: time step {period:.3g} s is a sampling rate of {1 / period:.3g} Hz, above "
            f"{MAX_RATE_HZ:g} Hz: are the time stamps in seconds?"
        )
    worst = int(np.argmax(np.abs(dt - period)))
    if abs(dt[worst] - period) > tolerance * period:
        raise ValueError(
            f"{path}: irregular sampling: step {dt[worst]:.6g} s at row {worst + 1} differs from "
            f"the median {period:.6g} s by more than {tolerance:.0%} (resample the log first)"
        )
    return period


def import_log(
    path_or_paths: str | os.PathLike | Sequence[str | os.PathLike],
    robot,
    *,
    estimate_derivatives: bool = False,
    cutoff_hz: float = DEFAULT_CUTOFF_HZ,
    filter_order: int = DEFAULT_ORDER,
    rate_tolerance: float = 0.01,
    system: str | None = None,
) -> Dataset:
    """A :class:`data.Dataset` (kind ``"imported"``) from CSV or NPZ logs.

    Args:
        path_or_paths: one file or a list of files (``.csv`` or ``.npz``).
        robot: the :class:`bayes_nea.Robot` whose joints the logs describe, or a built-in name.
        estimate_derivatives: estimate ``qd`` and ``qdd`` from ``q`` (cut-off ``cutoff_hz``, order
            ``filter_order``) instead of reading them.
        rate_tolerance: largest relative deviation of a time step from the median step.
        system: name stored in the dataset (default ``robot.name``).

    Raises:
        ValueError: missing file or columns, shape mismatch with the robot's joints, NaN/inf
            values, non-increasing time, irregular sampling, different rates across files.
    """
    robot = _robot_of(robot)
    joints = tuple(robot.joint_names)
    if isinstance(path_or_paths, str | os.PathLike):
        paths = [os.fspath(path_or_paths)]
    else:
        paths = [os.fspath(p) for p in path_or_paths]
    if not paths:
        raise ValueError("no log files given")
    needed = ("q", "tau") if estimate_derivatives else SIGNALS
    episodes, periods, sources, ignored = [], [], [], {}
    for path in paths:
        if os.path.isdir(path):
            raise ValueError(f"log file {path!r} is a directory")
        if not os.path.isfile(path):
            raise ValueError(f"log file {path!r} does not exist")
        ext = os.path.splitext(path)[1].lower()
        if ext == ".csv":
            content = _read_csv(path, joints, needed)
        elif ext == ".npz":
            content = _read_npz(path, joints, needed)
        else:
            raise ValueError(f"{path}: unsupported file type {ext!r}; use .csv or .npz")
        if content["ignored"]:
            ignored[path] = content["ignored"]
        T = content["t"].shape[0]
        for s in needed:
            if content[s].shape[0] != T:
                raise ValueError(
                    f"{path}: {s} has {content[s].shape[0]} rows but t has {T} (shape mismatch)"
                )
        for name in ("t", *needed):
            bad = ~np.isfinite(content[name])
            if bad.any():
                row = int(np.argwhere(bad)[0][0])
                raise ValueError(
                    f"{path}: {name} has {int(bad.sum())} NaN/inf value(s), first at row {row}"
                )
            check_values(content[name], name, path)
        labels = content.get(TRAJECTORY_COLUMN)
        if labels is None:
            groups = [(None, np.arange(T))]
        else:
            if labels.shape != (T,):
                raise ValueError(f"{path}: trajectory has shape {labels.shape}, expected ({T},)")
            _, first = np.unique(labels, return_index=True)
            groups = [(labels[k], np.flatnonzero(labels == labels[k])) for k in np.sort(first)]
        for label, rows in groups:
            where = path if label is None else f"{path} (trajectory {label})"
            t = content["t"][rows]
            periods.append(_check_sampling(where, t, rate_tolerance))
            q, tau = content["q"][rows], content["tau"][rows]
            if estimate_derivatives:
                qd, qdd = _estimate(t, q, cutoff_hz=cutoff_hz, order=filter_order)
            else:
                qd, qdd = content["qd"][rows], content["qdd"][rows]
            episodes.append(make_episode(t, q, qd, qdd, tau, n=len(joints), where=where))
            sources.append(where)
    rates = 1.0 / np.asarray(periods)
    if np.ptp(rates) > rate_tolerance * rates.min():
        raise ValueError(
            f"logs have different sampling rates {sorted({round(r, 6) for r in rates})} Hz; "
            "resample them to one rate"
        )
    return Dataset(
        system=system or robot.name,
        kind="imported",
        joint_names=joints,
        rate_hz=float(np.median(rates)),
        episodes=tuple(episodes),
        measured=needed,
        estimated=("qd", "qdd") if estimate_derivatives else (),
        synthetic=False,
        settings={
            "sources": sources,
            "estimate_derivatives": estimate_derivatives,
            "filter": {"cutoff_hz": cutoff_hz, "order": filter_order}
            if estimate_derivatives
            else None,
            "rate_tolerance": rate_tolerance,
            "ignored_columns": ignored,
        },
        true_params=None,
        robot_description=bn.robot_to_dict(robot),
    )


def export_log(dataset: Dataset, path: str | os.PathLike) -> str:
    """Write ``dataset`` as a CSV log in the form :func:`import_log` reads (atomically).

    Columns: ``t``, ``q_<joint>``, ``qd_<joint>``, ``qdd_<joint>``, ``tau_<joint>`` for the
    measured and estimated signals, and ``trajectory`` (the episode index); floats with 17
    significant digits, so importing the file gives back the same numbers. What a recorded log
    has and nothing else: no true parameters, no robot.

    Returns:
        The path written.
    """
    if not isinstance(dataset, Dataset):
        raise ValueError(f"export_log expects a data.Dataset, got {type(dataset).__name__}")
    if os.path.splitext(os.fspath(path))[1].lower() != ".csv":
        raise ValueError(f"{os.fspath(path)}: a log is written as .csv")
    signals = [s for s in SIGNALS if s in dataset.measured or s in dataset.estimated]
    header = ["t", *(f"{s}_{j}" for s in signals for j in dataset.joint_names), TRAJECTORY_COLUMN]
    lines = [",".join(header)]
    for e, ep in enumerate(dataset.episodes):
        block = np.concatenate([ep.t[:, None], *(getattr(ep, s) for s in signals)], axis=1)
        lines += [",".join(f"{v:.17g}" for v in row) + f",{e}" for row in block]
    return write_text_atomic(path, "\n".join(lines) + "\n")


class SampledReference(NamedTuple):
    """A reference trajectory sampled at times ``t``; called as ``reference(t) -> (q, qd, qdd)``
    (n,) each, linearly interpolated (held constant outside ``[t[0], t[-1]]``), jittable.

    Fields:
        t: (T,) s, increasing. q, qd, qdd: (T, n) in the robot's joint order.
    """

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray

    def __call__(self, t):
        dtype = jnp.result_type(float, t)
        grid = jnp.asarray(self.t, dtype)

        def interp(x):
            return jax.vmap(lambda col: jnp.interp(t, grid, col), in_axes=1)(jnp.asarray(x, dtype))

        return interp(self.q), interp(self.qd), interp(self.qdd)

    @property
    def duration(self) -> float:
        return float(self.t[-1] - self.t[0])


def read_reference(path: str | os.PathLike, robot) -> SampledReference:
    """A reference trajectory for a tracking check from a CSV file: columns ``t`` and
    ``q_<joint>`` for every joint of ``robot`` (any order, mapped by name), optionally
    ``qd_<joint>`` and ``qdd_<joint>``; missing derivatives are central differences of ``q``
    (``numpy.gradient``, second order). Time is shifted to start at 0.

    Raises:
        ValueError: as :func:`import_log`, naming the file and the problem.
    """
    robot = _robot_of(robot)
    path = os.fspath(path)
    if os.path.splitext(path)[1].lower() != ".csv":
        raise ValueError(f"{path}: a reference trajectory is a .csv file")
    if not os.path.isfile(path):
        raise ValueError(f"reference trajectory {path!r} does not exist")
    content = _read_csv(path, tuple(robot.joint_names), ("q",), optional=("qd", "qdd"))
    t = content["t"]
    if t.shape[0] < 3:
        raise ValueError(f"{path}: a reference trajectory needs at least 3 rows, got {t.shape[0]}")
    _check_sampling(path, t, tolerance=0.5)
    for name in ("t", "q", "qd", "qdd"):
        if name in content:
            check_values(content[name], name, path)
    q = content["q"]
    qd = content["qd"] if "qd" in content else np.gradient(q, t, axis=0, edge_order=2)
    qdd = content["qdd"] if "qdd" in content else np.gradient(qd, t, axis=0, edge_order=2)
    return SampledReference(t - t[0], q, qd, qdd)
