"""Smooth maps from unconstrained reals to positive values, for friction and actuator parameters.

Viscous, Coulomb and Stribeck coefficients, motor gains and noise scales must be non-negative.
A model samples or optimises an unconstrained ``u`` and uses ``y = forward(u) > 0``. Two maps:

``"softplus"``: ``y = log(1 + e^u)``, inverse ``u = y + log(-expm1(-y))``; close to the identity for
    large values, so gradients do not grow with the parameter (a good default for coefficients that
    may be near zero or of order one).
``"exp"``: ``y = e^u``, inverse ``u = log y``; scale-free (a log-normal prior in ``u``), suited to
    coefficients spanning orders of magnitude.

Both are elementwise, any shape, float64 or float32, and run under ``jit``/``grad``/``vmap``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array


def softplus(u: Array) -> Array:
    """``log(1 + e^u)`` (elementwise, overflow-safe). (...,) -> (...,), > 0."""
    return jax.nn.softplus(jnp.asarray(u))


def softplus_inverse(y: Array) -> Array:
    """Inverse of :func:`softplus` for ``y > 0``: ``y + log(-expm1(-y))`` (accurate for small y).

    Raises:
        ValueError: a concrete ``y`` with an entry that is not positive and finite.
    """
    y = jnp.asarray(y)
    _check_positive(y, "softplus_inverse")
    return y + jnp.log(-jnp.expm1(-y))


def exp_positive(u: Array) -> Array:
    """``e^u`` (elementwise). (...,) -> (...,), > 0."""
    return jnp.exp(jnp.asarray(u))


def exp_positive_inverse(y: Array) -> Array:
    """Inverse of :func:`exp_positive`: ``log y``.

    Raises:
        ValueError: a concrete ``y`` with an entry that is not positive and finite.
    """
    y = jnp.asarray(y)
    _check_positive(y, "exp_positive_inverse")
    return jnp.log(y)


@dataclasses.dataclass(frozen=True)
class PositiveMap:
    """An elementwise bijection ``R -> (0, inf)`` (final; hashable, usable as a static argument).

    Fields:
        name: registry name.
        forward: ``u -> y > 0``.
        inverse: ``y -> u``; raises ``ValueError`` on a concrete non-positive ``y``.
    """

    name: str
    forward: Callable[[Array], Array] = dataclasses.field(repr=False)
    inverse: Callable[[Array], Array] = dataclasses.field(repr=False)


_POSITIVE_MAPS = {
    "softplus": PositiveMap("softplus", softplus, softplus_inverse),
    "exp": PositiveMap("exp", exp_positive, exp_positive_inverse),
}
POSITIVE_MAP_NAMES = tuple(_POSITIVE_MAPS)


def get_positive_map(name: str) -> PositiveMap:
    """The positive map called ``name`` (``"softplus"`` or ``"exp"``).

    Raises:
        ValueError: unknown name (the message lists the valid ones).
    """
    if name not in _POSITIVE_MAPS:
        raise ValueError(
            f"unknown positive map {name!r}; valid names are {list(POSITIVE_MAP_NAMES)}"
        )
    return _POSITIVE_MAPS[name]


def _check_positive(y: Array, what: str) -> None:
    if isinstance(y, jax.core.Tracer):
        return
    values = np.asarray(y)
    bad = ~(np.isfinite(values) & (values > 0))
    if np.any(bad):
        first = tuple(int(k) for k in np.argwhere(bad)[0])
        raise ValueError(
            f"{what}: expected positive finite values, got {values[first]!r} at index {first} "
            f"({int(bad.sum())} of {values.size} entries); friction and actuator parameters "
            "must be > 0 to have an unconstrained preimage"
        )
