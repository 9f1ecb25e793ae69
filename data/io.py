"""Dataset files: one ``.npz`` per dataset with a schema version, written atomically.

Layout (schema 1): arrays ``t`` (N,), ``q``, ``qd``, ``qdd``, ``tau`` (N, n) concatenated over
episodes, ``offsets`` (E + 1,) episode boundaries, and ``meta``: a JSON string with ``schema``,
``format`` (``"bayes-nea-dataset"``), system, kind, joint names, rate, measured/estimated signals,
synthetic flag, settings and true parameters (arrays as nested lists). No pickles.
"""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np

from data.dataset import SIGNALS, Dataset, Episode, _json_able

SCHEMA_VERSION = 1
FORMAT = "bayes-nea-dataset"


def write_atomic(path: str | os.PathLike, write) -> None:
    """Call ``write(fileobj)`` on a temporary file in ``path``'s directory, then rename it there."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".part", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


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
    arrays = {
        "t": np.concatenate([ep.t for ep in dataset.episodes]),
        **{
            name: np.concatenate([getattr(ep, name) for ep in dataset.episodes]) for name in SIGNALS
        },
        "offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        "meta": np.array(json.dumps(meta, allow_nan=True)),
    }
    write_atomic(path, lambda f: np.savez(f, **arrays))
    return os.fspath(path)


def load_dataset(path: str | os.PathLike) -> Dataset:
    """Read a dataset written by :func:`save_dataset`.

    Raises:
        ValueError: missing file, not a bayes-nea dataset, or an unsupported schema version.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"dataset file {path!r} does not exist")
    try:
        with np.load(path, allow_pickle=False) as f:
            content = {k: f[k] for k in f.files}
    except (OSError, ValueError) as err:
        raise ValueError(f"{path!r} is not a readable .npz dataset file ({err})") from err
    if "meta" not in content:
        raise ValueError(f"{path!r} is not a bayes-nea dataset (no 'meta' entry)")
    meta = json.loads(str(content["meta"]))
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path!r} is not a bayes-nea dataset (format {meta.get('format')!r})")
    if meta.get("schema") != SCHEMA_VERSION:
        raise ValueError(
            f"{path!r} has dataset schema {meta.get('schema')!r}; this version reads schema "
            f"{SCHEMA_VERSION}"
        )
    missing = [k for k in ("t", *SIGNALS, "offsets") if k not in content]
    if missing:
        raise ValueError(f"{path!r} lacks arrays {missing}")
    off = content["offsets"]
    episodes = tuple(
        Episode(*(content[k][a:b] for k in ("t", *SIGNALS)))
        for a, b in zip(off[:-1], off[1:], strict=True)
    )
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
    )
