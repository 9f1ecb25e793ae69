"""Sampler and optimiser states (JAX pytrees) to and from ``xarray.Dataset``, for resuming fits.

A state is stored as its flattened leaves (``leaf_0000``, ``leaf_0001``, ...); it is restored by
flattening a *template* state of the same structure (made by initialising the same kernel or SVI
object again) and putting the stored arrays in its place. Typed PRNG keys are stored as their key
data and wrapped again on load.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import xarray as xr


def _is_key(leaf) -> bool:
    return hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jax.dtypes.prng_key)


def state_to_dataset(state, *, kind: str) -> xr.Dataset:
    """The leaves of ``state`` as a dataset (attrs: ``kind``, ``n_leaves``, typed-key leaves)."""
    variables = {}
    key_leaves = {}
    for i, leaf in enumerate(jax.tree.leaves(state)):
        if _is_key(leaf):
            key_leaves[i] = str(jax.random.key_impl(leaf))
            leaf = jax.random.key_data(leaf)
        arr = np.asarray(leaf)
        name = f"leaf_{i:04d}"
        variables[name] = xr.Variable(tuple(f"{name}_dim_{k}" for k in range(arr.ndim)), arr)
    attrs = {
        "state_kind": kind,
        "n_leaves": len(variables),
        "key_leaves": json.dumps(key_leaves),
    }
    return xr.Dataset(variables, attrs=attrs)


def state_from_dataset(ds: xr.Dataset, template, *, kind: str):
    """Rebuild a state with the structure of ``template`` (arrays, or shapes and dtypes from
    ``jax.eval_shape``) from :func:`state_to_dataset` output.

    Raises:
        ValueError: the stored state is of another kind or has another number of leaves.
    """
    if ds.attrs.get("state_kind") != kind:
        raise ValueError(
            f"stored state is a {ds.attrs.get('state_kind')!r} state, expected {kind!r}"
        )
    leaves, treedef = jax.tree.flatten(template)
    n = int(ds.attrs["n_leaves"])
    if n != len(leaves):
        raise ValueError(
            f"stored {kind} state has {n} leaves but the model's has {len(leaves)}: the result was "
            "made with another model or settings"
        )
    key_leaves = {int(k): v for k, v in json.loads(ds.attrs["key_leaves"]).items()}
    restored = []
    for i, leaf in enumerate(leaves):
        arr = np.asarray(ds[f"leaf_{i:04d}"].values)
        if i in key_leaves:
            restored.append(jax.random.wrap_key_data(jnp.asarray(arr), impl=key_leaves[i]))
        else:
            dtype = leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype
            restored.append(jnp.asarray(arr, dtype=dtype))
    return jax.tree.unflatten(treedef, restored)
