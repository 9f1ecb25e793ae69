"""NUTS coordinates for positive friction coefficients: log-like where only the prior sees a
coefficient, linear where the data do (``fit_nuts(metric="softplus-adapt")``).

A friction coefficient ``c = exp(x)`` with a Gaussian prior on ``x`` (``models.actuators``) that
scales one term of the friction law (viscous, Coulomb, Stribeck amplitude) enters the torque
linearly, so the likelihood is about Gaussian in ``c`` with some width ``w`` (the inverse square
root of its curvature in ``c`` at the MAP). In ``x`` its log density then falls like
``-(c / w)^2 / 2 = -exp(2 x) / (2 w^2)``: a wall whose curvature grows with ``c^2``, beside the
prior's long tail towards small ``c``. One NUTS step size cannot serve both (the Stribeck
posteriors took 22-48 leapfrog steps per draw in ``x``: docs/inference-geometry.md). This map
samples each such coordinate as ``c = k softplus(s)`` with the knee ``k = KNEE w``: ``s``
behaves like ``log c`` below the knee and like ``c / k`` above it. The model (its prior and
likelihood) is unchanged: the density in ``s`` carries the map's log-Jacobian.

Coordinates (NumPyro's unconstrained latent values flattened in ``ravel_pytree`` order): the
coefficient's latent value is ``(x - a) / b`` (``a, b`` its prior's location and scale for a
whitened site, ``0, 1`` otherwise), so ``z = (log(k softplus(s)) - a) / b``; every other
coordinate is ``z = s``.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree

KNEE = 1.0
"""The knee ``k`` in units of the coefficient's likelihood width ``w`` at the MAP. On the
Stribeck cells of ``benchmarks/inference.py`` (docs/inference-geometry.md) a scratch run with
0.5, 1 and 2 times a cruder width (without the gradient term) gave 15-25 leapfrog steps per draw
and the same few divergences for each; the library's path at 1: 14-23 steps, none in 12 runs."""
MAX_KNEE_RATIO = 1e6
"""``k <= MAX_KNEE_RATIO c_MAP``: where the data see a coefficient not at all (its likelihood
curvature ~0) the knee would be infinite; there the map is ``log c`` shifted, as far below the
knee as this."""


class SoftplusCoefficientMap(NamedTuple):
    """The map ``s -> z`` of the module docstring (numpy float64 fields; m mapped coordinates).

    Fields:
        index: (m,) the mapped coordinates' positions in the flat latent vector.
        loc, scale: (m,) ``a, b``: latent value ``(log c - a) / b``.
        knee: (m,) ``k`` (the coefficient's unit).
    """

    index: np.ndarray
    loc: np.ndarray
    scale: np.ndarray
    knee: np.ndarray

    def forward(self, s: jax.Array) -> tuple[jax.Array, jax.Array]:
        """``(z (d,), log |dz/ds|)`` of NUTS coordinates ``s`` (d,)."""
        idx = jnp.asarray(self.index)
        a, b, k = (jnp.asarray(v, s.dtype) for v in (self.loc, self.scale, self.knee))
        t = s[idx]
        log_softplus = jnp.log(jax.nn.softplus(t))
        z = s.at[idx].set((jnp.log(k) + log_softplus - a) / b)
        log_jac = jnp.sum(jax.nn.log_sigmoid(t) - log_softplus - jnp.log(b))
        return z, log_jac

    def inverse(self, z: np.ndarray) -> np.ndarray:
        """NUTS coordinates ``s`` (..., d) of unconstrained points ``z`` (..., d) (numpy)."""
        s = np.array(z, np.float64)
        y = np.exp(self.loc + self.scale * s[..., self.index]) / self.knee  # c / k
        s[..., self.index] = y + np.log(-np.expm1(-y))  # softplus^-1, stable at both ends
        return s

    def to_record(self) -> dict:
        """JSON-serialisable fields (stored with a NUTS run, so that ``extend`` continues it)."""
        return {
            "mapped": int(self.index.size),
            "index": np.asarray(self.index).tolist(),
            "loc": np.asarray(self.loc).tolist(),
            "scale": np.asarray(self.scale).tolist(),
            "knee": np.asarray(self.knee).tolist(),
        }

    @classmethod
    def from_record(cls, record: dict) -> SoftplusCoefficientMap:
        """The map of :meth:`to_record`'s output.

        Raises:
            ValueError: the record lacks a field (runs saved before the map was stored whole).
        """
        missing = [k for k in ("index", "loc", "scale", "knee") if k not in record]
        if missing:
            raise ValueError(f"the stored softplus map lacks {missing}")
        return cls(
            np.asarray(record["index"], int),
            *(np.asarray(record[k], np.float64) for k in ("loc", "scale", "knee")),
        )

    def hessian(self, s: np.ndarray, H: np.ndarray, g: np.ndarray) -> np.ndarray:
        """Hessian (d, d) in ``s`` of ``U(z(s)) - log |dz/ds|`` from ``U``'s Hessian ``H`` and
        gradient ``g`` at ``z(s)`` (chain rule; the map is elementwise, so only the diagonal
        gains terms)."""
        t = np.asarray(s, np.float64)[self.index]
        sp = np.logaddexp(0.0, t)  # softplus
        sig = 0.5 * (1.0 + np.tanh(0.5 * t))  # sigmoid
        dsig = sig * (1.0 - sig)
        d2_log_sp = (dsig * sp - sig**2) / sp**2  # (log softplus)''
        dz = sig / (sp * self.scale)
        d2z = d2_log_sp / self.scale
        d2_log_dz = -dsig - d2_log_sp  # of log sig - log sp - log b
        D = np.ones(np.shape(s)[-1])
        D[self.index] = dz
        out = D[:, None] * np.asarray(H, np.float64) * D[None, :]
        out[self.index, self.index] += np.asarray(g, np.float64)[self.index] * d2z - d2_log_dz
        return 0.5 * (out + out.T)


def coefficient_coordinates(bayes_model, unconstrained: dict) -> tuple[np.ndarray, ...]:
    """``(index, a, b, m, s)`` (m,) of the latent coordinates that are logs of scale
    coefficients of ``bayes_model``'s friction law (its actuator's ``log_scale_coefficients()``:
    ``{site: (a, b, m, s)}``, latent value ``(log c - a) / b`` with prior ``N(m, s^2)``), in
    ``ravel_pytree`` order of ``unconstrained``; empty where the model names none."""
    actuator = getattr(bayes_model, "actuator", None)
    sites = getattr(actuator, "log_scale_coefficients", dict)()
    columns = ([], [], [], [], [])
    for site, values in sites.items():
        if site not in unconstrained:
            continue
        shape = jnp.shape(unconstrained[site])
        size = int(np.prod(shape))
        marker = {k: jnp.zeros(jnp.shape(v)) for k, v in unconstrained.items()}
        marker[site] = jnp.arange(1.0, size + 1.0).reshape(shape)
        flat = np.asarray(ravel_pytree(marker)[0])
        where = np.flatnonzero(flat)
        columns[0].extend(where[np.argsort(flat[where])])
        for column, v in zip(columns[1:], values, strict=True):
            column.extend(np.broadcast_to(np.asarray(v, np.float64), shape).ravel())
    return (np.asarray(columns[0], int), *(np.asarray(c, np.float64) for c in columns[1:]))


def fit_softplus_map(
    bayes_model, unconstrained: dict, H: np.ndarray, g: np.ndarray, *, knee: float = KNEE
) -> SoftplusCoefficientMap:
    """The map at ``unconstrained`` ({latent site: value}, NumPyro's unconstrained space; the
    MAP) from the Hessian ``H`` (d, d) and gradient ``g`` (d,) of ``-log p(z, data)`` there.
    With ``f(c)`` the coefficient's part of ``-log p`` other than its prior, ``c = exp(a + b z)``:
    ``f''(c) = (H_zz - 1 / s^2 - b f'_z) / (b c)^2``, ``f'_z = g_z - (z - m) / s^2``; the width is
    ``w = f''(c)^-1/2`` and the knee ``k = knee w`` (at most :data:`MAX_KNEE_RATIO` ``c``)."""
    index, a, b, m, s = coefficient_coordinates(bayes_model, unconstrained)
    z = np.asarray(ravel_pytree(unconstrained)[0], np.float64)[index]
    c = np.exp(a + b * z)
    slope = np.asarray(g, np.float64)[index] - (z - m) / s**2
    curvature = (np.asarray(H, np.float64)[index, index] - 1.0 / s**2 - b * slope) / (b * c) ** 2
    with np.errstate(divide="ignore"):
        width = 1.0 / np.sqrt(np.maximum(curvature, 0.0))
    return SoftplusCoefficientMap(index, a, b, np.minimum(knee * width, MAX_KNEE_RATIO * c))
