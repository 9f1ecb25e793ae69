"""Helpers shared by the SVI and NUTS drivers: keys, initial values, result attributes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from inference._validate import fingerprint, variant_name
from models.actuators import NETWORK_FORMAT


def raw_key(key) -> tuple[jax.Array, int | None]:
    """A raw ``uint32[2]`` PRNG key from an int seed or a (typed or raw) JAX key, and the seed."""
    if isinstance(key, bool):
        raise ValueError(f"key must be an int seed or a jax.random key, got {key!r}")
    if isinstance(key, int | np.integer):
        return jax.random.PRNGKey(int(key)), int(key)
    arr = key
    if hasattr(arr, "dtype") and jnp.issubdtype(arr.dtype, jax.dtypes.prng_key):
        arr = jax.random.key_data(arr)
    try:
        arr = jnp.asarray(arr)
    except TypeError:
        raise ValueError(f"key must be an int seed or a jax.random key, got {key!r}") from None
    if arr.shape != (2,) or arr.dtype != jnp.uint32:
        raise ValueError(
            f"key must be an int seed or a single jax.random key, got shape {arr.shape} {arr.dtype}"
        )
    return arr, None


def point_values(result, latent_sites) -> dict:
    """Posterior mean of each latent site of a ``FitResult`` (a starting point), constrained space;
    for an ensemble its member of largest mixture weight (the mean of several modes' weights is
    no network of any).

    Raises:
        ValueError: the result lacks some of the model's latent sites.
    """
    samples = result.posterior_samples(consistent_only=False)
    missing = sorted(set(latent_sites) - set(samples))
    if missing:
        raise ValueError(
            f"cannot initialise from a {result.variant!r} result: it lacks the sites {missing}"
        )
    members = result.ensemble_members()
    if members is not None:  # an ensemble: its member of largest weight (one mode, not a mean)
        best = int(np.argmax(result.ensemble_weights()))
        return {k: members[k][best] for k in latent_sites}
    return {k: jnp.mean(samples[k], axis=0) for k in latent_sites}


def check_same_fit(result, bayes_model, data, *, method: str, what: str) -> None:
    """``ValueError`` unless ``result`` is a ``method`` fit of the same variant on the same data."""
    if result.method != method:
        raise ValueError(f"{what} needs a {method!r} result, got a {result.method!r} result")
    if result.variant != variant_name(bayes_model):
        raise ValueError(
            f"{what}: result is of variant {result.variant!r}, model is "
            f"{variant_name(bayes_model)!r}"
        )
    if result.attrs.get("data_fingerprint") != fingerprint(data):
        raise ValueError(f"{what}: the data differ from the data the result was fitted to")


def base_attrs(bayes_model, data, *, method: str, seed, summary) -> dict:
    """Root attributes shared by SVI and NUTS results (``model_spec``: the complete spec as JSON,
    from which ``FitResult.model()`` rebuilds the model)."""
    to_json = getattr(bayes_model.spec, "to_json", None)
    return {
        "model_spec": to_json() if to_json is not None else None,
        "variant": variant_name(bayes_model),
        "system": bayes_model.robot.name,
        "likelihood": str(bayes_model.spec.likelihood),
        "method": method,
        "seed": -1 if seed is None else int(seed),
        "dataset": summary,
        "n_samples": int(np.shape(data.q)[0]),
        "n_joints": int(np.shape(data.q)[-1]),
        "data_dtype": str(np.asarray(data.q).dtype),
        "data_fingerprint": fingerprint(data),
        "network_format": NETWORK_FORMAT,
    }
