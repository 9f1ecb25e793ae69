"""Checks at the boundary of the ``fit_*`` functions: the model object and the data it is fitted to.

Every check runs on the host before anything is traced, and a problem raises ``ValueError``
naming the bad value and what was expected. The data themselves are checked by the model
(``bayes_model.observations``): each likelihood owns its data form.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NamedTuple

import numpy as np

from models.likelihoods import is_dataset

DATA_FIELDS = ("q", "qd", "qdd", "tau")
MODEL_ATTRIBUTES = (
    "spec",
    "robot",
    "likelihood",
    "model",
    "physical",
    "qdd_fn",
    "observations",
    "prepare",
)


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
        "episode_lengths": [len(ep.t) for ep in dataset.episodes],
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


class FitInputs(NamedTuple):
    """The data of one fit in the forms inference needs.

    Fields:
        observations: validated arrays in the likelihood's layout (``models.ModelData``): what the
            result stores and what the pointwise log-likelihood and predictive are computed on.
        prepared: what the model is conditioned on while fitting (``bayes_model.prepare``: the
            observations, or their exact sufficient statistics where the model is linear).
        summary: JSON-able dataset summary (None unless a ``data.Dataset`` was given).
    """

    observations: Any
    prepared: Any
    summary: dict | None


def fit_inputs(bayes_model, data) -> FitInputs:
    """Ask the model to check and prepare ``data`` (a ``data.Dataset`` or arrays).

    Raises:
        ValueError: the data cannot condition the model (joint names or count, shapes, empty,
            non-finite values, non-float dtype), with the model's own message.
    """
    check_model(bayes_model)
    summary = dataset_summary(data) if is_dataset(data) else None
    observations = bayes_model.observations(data)
    return FitInputs(observations, bayes_model.prepare(observations), summary)


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
