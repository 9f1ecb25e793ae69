"""Checks at the boundary of the ``fit_*`` functions: the model object and the data it is fitted to.

Every check runs on the host before anything is traced, and a problem raises ``ValueError``
naming the bad value and what was expected (STYLE.md, "Errors").
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

DATA_FIELDS = ("q", "qd", "qdd", "tau")
MODEL_ATTRIBUTES = ("spec", "robot", "likelihood", "model", "physical", "qdd_fn")


class FitData(NamedTuple):
    """The arrays a model is fitted to, in the field order of ``models.ModelData``.

    Fields:
        q, qd, qdd, tau: (N, n) joint positions, velocities, accelerations and commanded efforts,
            joint order = ``robot.joint_names``.
    """

    q: Any
    qd: Any
    qdd: Any
    tau: Any


def check_model(bayes_model) -> None:
    """Raise ``ValueError`` unless ``bayes_model`` follows the ``models.BayesianModel`` protocol."""
    missing = [a for a in MODEL_ATTRIBUTES if not hasattr(bayes_model, a)]
    if missing:
        raise ValueError(
            f"{type(bayes_model).__name__} is not a BayesianModel: it lacks {missing}; a model "
            f"needs {list(MODEL_ATTRIBUTES)} (build one with models.build_model(name, robot))"
        )


def variant_name(bayes_model) -> str:
    """The registry name of a model's variant (``spec.name`` where the spec has one)."""
    spec = bayes_model.spec
    name = getattr(spec, "name", None)
    return str(name if name is not None else spec)


def dataset_summary(dataset) -> dict:
    """A JSON-able summary of a ``data.Dataset`` (metadata only, no arrays)."""
    true_params = getattr(dataset, "true_params", None)
    return {
        "system": str(dataset.system),
        "kind": str(dataset.kind),
        "joint_names": list(dataset.joint_names),
        "rate_hz": float(dataset.rate_hz),
        "n_episodes": len(dataset.episodes),
        "n_samples": int(dataset.n_samples),
        "measured": list(dataset.measured),
        "estimated": list(dataset.estimated),
        "synthetic": bool(dataset.synthetic),
        "settings": _jsonable(dataset.settings),
        "true_params": None if true_params is None else _jsonable(true_params),
    }


def _jsonable(value):
    """``value`` with arrays turned into lists, so that ``json.dumps`` accepts it."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray | np.generic) or hasattr(value, "__array__"):
        return np.asarray(value).tolist()
    try:
        json.dumps(value)
    except TypeError:
        return repr(value)
    return value


def prepare_data(bayes_model, data) -> tuple[Any, dict | None]:
    """Check ``data`` against the model's robot and return it ready to fit.

    Args:
        bayes_model: a ``BayesianModel`` (its ``robot`` gives the joint count and names).
        data: a ``models.ModelData`` (or any object with fields ``q, qd, qdd, tau``, each (N, n)),
            or a ``data.Dataset`` (converted with ``models.model_data`` after its joint names are
            checked against the robot's).

    Returns:
        ``(model_data, summary)``: the data with JAX arrays (same container type as given, or
        ``models.ModelData`` for a dataset), and a JSON-able dataset summary (``None`` unless a
        dataset was given).

    Raises:
        ValueError: missing fields, wrong rank, joint count or names that do not match the robot,
            fields of different lengths, no samples, non-finite values, non-float dtype.
    """
    check_model(bayes_model)
    robot = bayes_model.robot
    summary = None
    if hasattr(data, "episodes") and hasattr(data, "joint_names"):
        if tuple(data.joint_names) != tuple(robot.joint_names):
            raise ValueError(
                f"dataset joints {list(data.joint_names)} do not match robot {robot.name!r} "
                f"joints {list(robot.joint_names)} (same names in the same order are required)"
            )
        if data.n_samples == 0:
            raise ValueError("dataset is empty: it has no samples")
        summary = dataset_summary(data)
        from models import model_data

        data = model_data(data)
    missing = [f for f in DATA_FIELDS if not hasattr(data, f)]
    if missing:
        raise ValueError(
            f"data lacks fields {missing}; expected a models.ModelData with fields "
            f"{list(DATA_FIELDS)} or a data.Dataset"
        )
    n = robot.n
    lengths = {}
    arrays = {}
    for field in DATA_FIELDS:
        value = getattr(data, field)
        arr = np.asarray(value)
        if not np.issubdtype(arr.dtype, np.floating):
            raise ValueError(f"data.{field} has dtype {arr.dtype}; expected float32 or float64")
        if arr.ndim != 2:
            raise ValueError(f"data.{field} has shape {arr.shape}; expected (N, {n}) (N samples)")
        if arr.shape[1] != n:
            raise ValueError(
                f"data.{field} has {arr.shape[1]} joints (shape {arr.shape}) but robot "
                f"{robot.name!r} has {n}: {list(robot.joint_names)}"
            )
        if arr.shape[0] == 0:
            raise ValueError(f"data is empty: data.{field} has shape {arr.shape}")
        bad = ~np.isfinite(arr)
        if bad.any():
            rows = np.flatnonzero(bad.any(axis=1))
            raise ValueError(
                f"data.{field} has {int(bad.sum())} non-finite (NaN or inf) values, first in "
                f"sample {int(rows[0])}; drop or repair those samples before fitting"
            )
        lengths[field] = arr.shape[0]
        arrays[field] = jnp.asarray(value)
    if len(set(lengths.values())) != 1:
        raise ValueError(f"data fields have different lengths {lengths}; all must be (N, {n})")
    try:
        data = data._replace(**arrays)
    except AttributeError:
        data = FitData(**arrays)
    return data, summary


def fingerprint(data) -> str:
    """SHA-256 of the data's arrays (float64 bytes), to check that a resumed fit sees the same data."""
    digest = hashlib.sha256()
    for field in DATA_FIELDS:
        arr = np.ascontiguousarray(np.asarray(getattr(data, field), dtype=np.float64))
        digest.update(str(arr.shape).encode())
        digest.update(arr.tobytes())
    return digest.hexdigest()


def check_positive_int(name: str, value, *, allow_zero: bool = False) -> int:
    """``value`` as an int; ``ValueError`` if it is not an integer > 0 (or >= 0)."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
    return int(value)


def check_choice(name: str, value, valid) -> str:
    """``value`` if it is one of ``valid``; ``ValueError`` listing the valid values otherwise."""
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid values are {list(valid)}")
    return value
