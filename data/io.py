"""Files: the project's one atomic writer, array checksums, and the dataset file format.

Layout (schema 1): arrays ``t`` (N,), ``q``, ``qd``, ``qdd``, ``tau`` (N, n) concatenated over
episodes, ``offsets`` (E + 1,) episode boundaries, and ``meta``: a JSON string with ``schema``,
``format`` (``"bayes-nea-dataset"``), system, kind, joint names, rate, measured/estimated signals,
synthetic flag, settings, true parameters (arrays as nested lists) and ``sha256``, the checksum of
the arrays and of the rest of ``meta`` (:func:`checksum_arrays`), verified on load. No pickles.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import socket
import tempfile
import zipfile
from collections.abc import Callable, Iterable

import numpy as np

from data.dataset import SIGNALS, Dataset, Episode, _json_able

SCHEMA_VERSION = 1
FORMAT = "bayes-nea-dataset"
FILE_MODE = 0o644
"""Permissions of every file the project writes (rw-r--r--)."""

_HOST = re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-[^.]+\.tmp$")


def temporary_owner(filename: str) -> tuple[str, str, int] | None:
    """``(target name, host, pid)`` of a temporary file made by :func:`write_atomic`, else None."""
    m = _TEMPORARY.match(filename)
    return (m["name"], m["host"], int(m["pid"])) if m else None


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(directory: str | os.PathLike) -> list[str]:
    """Delete the temporaries of :func:`write_atomic` in ``directory`` whose writer (a process on
    this host) is dead, e.g. killed mid-write; those of live processes (another run writing into the
    same folder) are kept. Returns the paths removed."""
    removed = []
    try:
        names = os.listdir(directory)
    except OSError:
        return removed
    for name in names:
        owner = temporary_owner(name)
        if owner is None or owner[1] != _HOST or _process_alive(owner[2]):
            continue
        path = os.path.join(directory, name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            removed.append(path)
    return removed


def check_output_path(path: str | os.PathLike, what: str = "output file") -> str:
    """Check, before any expensive work, that a file can be written at ``path``.

    The path must not be a directory, its folder must exist and accept a new file (probed by
    creating and removing a temporary file there, so read-only file systems are caught too).

    Raises:
        ValueError: naming ``what`` and ``path`` and the problem.
    """
    path = os.fspath(path)
    if not path:
        raise ValueError(f"{what}: empty path")
    if os.path.isdir(path):
        raise ValueError(f"{what} {path!r} is a directory; give a file path")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        problem = "is not a directory" if os.path.exists(directory) else "does not exist"
        raise ValueError(f"{what} {path!r}: its folder {directory!r} {problem}")
    try:
        fd, probe = tempfile.mkstemp(  # named like write_atomic's: removed if left by a kill
            prefix=f".probe.{_HOST}-{os.getpid()}-", suffix=".tmp", dir=directory
        )
    except OSError as err:
        raise ValueError(
            f"{what} {path!r}: cannot write in {directory!r} ({err.strerror or err})"
        ) from None
    os.close(fd)
    os.unlink(probe)
    return path


def write_atomic(
    path: str | os.PathLike,
    write: Callable,
    *,
    by_path: bool = False,
    create_dirs: bool = True,
) -> str:
    """Write a file atomically: the project's one writer of files.

    ``write(fileobj)`` (binary) -- or ``write(temporary_path)`` with ``by_path=True`` -- fills a
    temporary file ``.<name>.<host>-<pid>-<random>.tmp`` in ``path``'s folder, which is then
    flushed, given mode :data:`FILE_MODE` and renamed over ``path`` (``os.replace``). A failure
    removes the temporary and leaves an existing ``path`` untouched; temporaries of dead writers
    in that folder are removed first (:func:`remove_stale_temporaries`).

    Args:
        create_dirs: create missing parent folders (else a missing folder is an error).

    Returns:
        ``path`` as a string.

    Raises:
        ValueError: ``path`` is a directory, its folder is missing (``create_dirs=False``) or not
            writable. Errors raised by ``write`` propagate unchanged.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"cannot write {path!r}: it is a directory")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        if create_dirs:
            os.makedirs(directory, exist_ok=True)
        elif not os.path.isdir(directory):
            raise ValueError(f"cannot write {path!r}: folder {directory!r} does not exist")
        remove_stale_temporaries(directory)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{os.path.basename(path)}.{_HOST}-{os.getpid()}-", suffix=".tmp", dir=directory
        )
    except OSError as err:
        raise ValueError(f"cannot write {path!r}: {err.strerror or err}") from None
    try:
        if by_path:
            os.close(fd)
            write(tmp)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        else:
            with os.fdopen(fd, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def file_lock(path: str | os.PathLike, *, wait: bool):
    """Hold an exclusive lock on ``path`` (``flock`` of the hidden ``.<name>.lock`` beside it);
    yields False without waiting when another process (or thread's descriptor) holds it and
    ``wait`` is False. The kernel releases the lock when its holder dies, so a killed run
    leaves no stale lock. The grid's cells and shared starts are computed under it."""
    path = os.fspath(path)
    lock_path = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.lock")
    fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, FILE_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)  # releases the lock


def write_text_atomic(path: str | os.PathLike, text: str, **kwargs) -> str:
    """:func:`write_atomic` of a UTF-8 text."""
    return write_atomic(path, lambda f: f.write(text.encode("utf-8")), **kwargs)


def write_json_atomic(path: str | os.PathLike, obj, *, allow_nan: bool = True, **kwargs) -> str:
    """:func:`write_atomic` of ``obj`` as indented JSON (``allow_nan=False``: strict JSON)."""
    try:
        text = json.dumps(obj, indent=1, allow_nan=allow_nan)
    except ValueError as err:
        raise ValueError(f"cannot write {os.fspath(path)!r} as JSON: {err}") from None
    return write_text_atomic(path, text + "\n", **kwargs)


def checksum_arrays(named: Iterable[tuple[str, np.ndarray]]) -> str:
    """SHA-256 (hex) of named arrays: each name, dtype, shape and C-ordered bytes, in the order given."""
    h = hashlib.sha256()
    for name, value in named:
        arr = np.ascontiguousarray(value)
        h.update(f"{name}|{arr.dtype.str}|{arr.shape}|".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


_META_KEYS = {
    "system": str,
    "kind": str,
    "joint_names": list,
    "rate_hz": (int, float),
    "measured": list,
    "estimated": list,
    "synthetic": bool,
    "settings": dict,
    "true_params": (dict, type(None)),
}


def _dataset_checksum(arrays: dict, meta: dict) -> str:
    rest = json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True)
    named = [(k, arrays[k]) for k in ("t", *SIGNALS, "offsets")]
    return checksum_arrays([*named, ("meta", np.frombuffer(rest.encode(), np.uint8))])


def save_dataset(dataset: Dataset, path: str | os.PathLike) -> str:
    """Write ``dataset`` to ``path`` (``.npz``, schema :data:`SCHEMA_VERSION`), atomically.

    Returns:
        The path written.
    """
    if not isinstance(dataset, Dataset):
        raise ValueError(f"save_dataset expects a data.Dataset, got {type(dataset).__name__}")
    lengths = [ep.t.shape[0] for ep in dataset.episodes]
    meta = {
        "format": FORMAT,
        "schema": SCHEMA_VERSION,
        "system": dataset.system,
        "kind": dataset.kind,
        "joint_names": list(dataset.joint_names),
        "rate_hz": dataset.rate_hz,
        "measured": list(dataset.measured),
        "estimated": list(dataset.estimated),
        "synthetic": bool(dataset.synthetic),
        "settings": dataset.settings,
        "true_params": _json_able(dataset.true_params),
    }
    if dataset.robot_description is not None:  # optional: older files have none
        meta["robot"] = dataset.robot_description
    arrays = {
        "t": np.concatenate([ep.t for ep in dataset.episodes]),
        **{
            name: np.concatenate([getattr(ep, name) for ep in dataset.episodes]) for name in SIGNALS
        },
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
    }
    meta = json.loads(json.dumps(meta, allow_nan=True))  # the form it is read back in
    meta["sha256"] = _dataset_checksum(arrays, meta)
    arrays["meta"] = np.array(json.dumps(meta, allow_nan=True))
    return write_atomic(path, lambda f: np.savez(f, **arrays))


def _kind_of_file(head: bytes) -> str:
    """What a file that is not a zip archive looks like, from its first bytes."""
    if head.startswith(b"\x93NUMPY"):
        return "a single .npy array"
    if head.startswith(b"\x89HDF") or head.startswith(b"CDF"):
        return "a netCDF/HDF5 file (a fit result? read it with inference.load_result)"
    if head.lstrip().startswith(b"<"):
        return "an XML/HTML text"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return "an unknown binary file"
    return "a text file (a CSV log? import it with data.import_log)"


def read_npz(path: str, what: str = ".npz file") -> dict[str, np.ndarray]:
    """All arrays of an ``.npz`` file (no pickles), or a ``ValueError`` naming ``path`` and why not:
    missing, a directory, empty, not a zip archive (and what it looks like), damaged."""
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a directory, not a {what}")
    if not os.path.isfile(path):
        raise ValueError(f"{what} {path!r} does not exist")
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as err:
        raise ValueError(f"{path!r}: cannot read the {what} ({err.strerror or err})") from None
    if not head:
        raise ValueError(f"{path!r} is empty (0 bytes), not a {what}")
    if not head.startswith(b"PK"):
        raise ValueError(f"{path!r} is not a {what}: it is {_kind_of_file(head)}")
    try:
        with np.load(path, allow_pickle=False) as f:
            content = {k: f[k] for k in f.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError, KeyError) as err:
        detail = str(err) or type(err).__name__
        if "pickle" in detail:
            detail = "it holds pickled (object) arrays, which are never loaded"
        raise ValueError(f"{path!r} is a damaged or truncated {what} ({detail})") from None
    except Exception as err:  # zlib and other decoder errors of a damaged archive
        raise ValueError(f"{path!r} is a damaged {what} ({type(err).__name__}: {err})") from None
    return content


def load_dataset(path: str | os.PathLike) -> Dataset:
    """Read a dataset written by :func:`save_dataset`, verifying its checksum.

    Raises:
        ValueError: naming the file and the problem: missing, not a bayes-nea dataset (and what it
            is instead), damaged (checksum, zip), an unsupported schema version, metadata or arrays
            missing or of the wrong type, shape or range.
    """
    path = os.fspath(path)
    content = read_npz(path, "bayes-nea dataset (.npz)")
    if "meta" not in content:
        raise ValueError(
            f"{path!r} is not a bayes-nea dataset (no 'meta' entry; arrays {sorted(content)}); "
            "import a log of your own with data.import_log"
        )
    raw = content.pop("meta")
    if raw.shape != () or raw.dtype.kind != "U":
        raise ValueError(
            f"{path!r}: 'meta' is not a JSON string (dtype {raw.dtype}, shape {raw.shape})"
        )
    try:
        meta = json.loads(str(raw))
    except ValueError as err:
        raise ValueError(f"{path!r}: damaged metadata, not valid JSON ({err})") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        fmt = meta.get("format") if isinstance(meta, dict) else None
        raise ValueError(f"{path!r} is not a bayes-nea dataset (format {fmt!r})")
    if meta.get("schema") != SCHEMA_VERSION:
        raise ValueError(
            f"{path!r} has dataset schema {meta.get('schema')!r}; this version reads schema "
            f"{SCHEMA_VERSION}"
        )
    missing = [k for k in ("t", *SIGNALS, "offsets") if k not in content]
    if missing:
        raise ValueError(f"{path!r} lacks arrays {missing}")
    missing = sorted(set(_META_KEYS) - set(meta))
    if missing:
        raise ValueError(f"{path!r}: metadata lacks {missing}")
    for key, types in _META_KEYS.items():
        if not isinstance(meta[key], types) or (
            types == (int, float) and isinstance(meta[key], bool)
        ):
            raise ValueError(f"{path!r}: metadata {key!r} = {meta[key]!r} has the wrong type")
    if not isinstance(meta.get("robot", {}), dict):
        raise ValueError(f"{path!r}: metadata 'robot' is not a robot description (a JSON object)")
    if "sha256" not in meta:
        raise ValueError(
            f"{path!r} has no checksum (written by an older bayes-nea): re-create it with "
            "data.save_dataset or `bayes-nea simulate`"
        )
    for name in ("t", *SIGNALS, "offsets"):
        if content[name].dtype.kind not in "fiu":
            raise ValueError(
                f"{path!r}: array {name!r} has dtype {content[name].dtype}; expected real numbers"
            )
    if _dataset_checksum(content, meta) != meta["sha256"]:
        raise ValueError(
            f"{path!r} is corrupted: the checksum of its arrays does not match the one stored "
            "when it was written"
        )
    t, off = content["t"], content["offsets"]
    n = len(meta["joint_names"])
    if t.ndim != 1:
        raise ValueError(f"{path!r}: t has shape {t.shape}, expected (N,)")
    for name in SIGNALS:
        if content[name].shape != (t.shape[0], n):
            raise ValueError(
                f"{path!r}: {name} has shape {content[name].shape}, expected (N, n) = "
                f"{(t.shape[0], n)} for joints {meta['joint_names']}"
            )
    if (
        off.dtype.kind not in "iu"
        or off.ndim != 1
        or off.shape[0] < 2
        or off[0] != 0
        or off[-1] != t.shape[0]
        or np.any(np.diff(off) <= 0)
    ):
        raise ValueError(
            f"{path!r}: offsets {off.tolist()[:8]}{'...' if off.size > 8 else ''} do not split "
            f"the {t.shape[0]} rows into episodes (expected integers increasing from 0 to "
            f"{t.shape[0]})"
        )
    episodes = tuple(
        Episode(*(content[k][a:b] for k in ("t", *SIGNALS)))
        for a, b in zip(off[:-1], off[1:], strict=True)
    )
    try:
        return Dataset(
            system=meta["system"],
            kind=meta["kind"],
            joint_names=tuple(meta["joint_names"]),
            rate_hz=meta["rate_hz"],
            episodes=episodes,
            measured=tuple(meta["measured"]),
            estimated=tuple(meta["estimated"]),
            synthetic=meta["synthetic"],
            settings=meta["settings"],
            true_params=meta["true_params"],
            robot_description=meta.get("robot"),
        )
    except ValueError as err:
        raise ValueError(f"{path!r}: {err}") from None
