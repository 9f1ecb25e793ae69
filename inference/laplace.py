"""Laplace approximation of a posterior at a point: the inverse Hessian of the potential energy.

Used as a fixed NUTS metric (``fit_nuts(..., metric="laplace")``): for a Gaussian posterior it is
the exact covariance (Bishop 2006, sec. 4.4); on the white-box DiffNEA models it shortens the
NUTS trajectories many times over (docs/measurements.md).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import potential_energy, unconstrain_fn


def laplace_inverse_mass(
    bayes_model, data, point: dict, *, rtol: float | None = None, batch_size: int = 8
) -> jax.Array:
    """Inverse Hessian of ``-log p(z, data)`` in NumPyro's unconstrained space at ``point``.

    Args:
        bayes_model: an object with ``.model(data)`` (a NumPyro model).
        data: the model's argument.
        point: ``{latent site: value}`` in constrained space (e.g. an SVI MAP).
        rtol: eigenvalues of the Hessian below ``rtol`` times the largest are raised to it (a
            positive definite result also at saddle points and flat directions). Default
            ``1000 eps`` of the latent dtype (2.2e-13 in float64): the eigenvalues an eigensolver
            resolves. A larger floor misfits weakly identified sites whenever the data pin other
            sites tightly (base parameters with a weak prior: Hessian eigenvalues 12 .. 2.8e12).
        batch_size: Hessian columns computed at once (Hessian-vector products, forward over
            reverse); memory is ``batch_size`` gradients' worth, so networks with thousands of
            weights on long datasets fit in memory (a dense ``jax.hessian`` asked 178 GB there).

    Returns:
        (d, d) symmetric positive definite matrix over the unconstrained latent sites flattened
        in NumPyro's order (``ravel_pytree``: sorted site names); non-finite entries when the
        Hessian is not finite at ``point``.
    """
    unconstrained = unconstrain_fn(bayes_model.model, (data,), {}, point)
    flat, _ = ravel_pytree(unconstrained)
    H = potential_hessian(bayes_model, data, unconstrained, batch_size=batch_size)
    H = np.asarray(H, dtype=np.float64)
    if not np.all(np.isfinite(H)):
        return jnp.full(H.shape, jnp.nan, dtype=flat.dtype)
    w, V = np.linalg.eigh(0.5 * (H + H.T))
    if rtol is None:
        rtol = 1e3 * float(jnp.finfo(flat.dtype).eps)
    w = np.maximum(w, rtol * np.abs(w).max())
    return jnp.asarray((V / w[None, :]) @ V.T, dtype=flat.dtype)


def potential_hessian(bayes_model, data, unconstrained: dict, *, batch_size: int = 8) -> jax.Array:
    """Hessian (d, d) of ``-log p(z, data)`` at ``unconstrained`` ({latent site: value} in
    NumPyro's unconstrained space), over the sites flattened in ``ravel_pytree`` order.

    d Hessian-vector products (forward over reverse), ``batch_size`` at a time. Compiled once per
    model object and data / point shapes, with the data as an argument: :func:`inference.polish_map`
    and :func:`laplace_inverse_mass` share the program (on the ``nokin-diffnea`` cart-pole its
    compile is ~20 s, the evaluation milliseconds). A model that cannot be hashed, or data that
    are not arrays, get a program of their own.
    """
    batch_size = max(1, min(batch_size, int(ravel_pytree(unconstrained)[0].shape[0])))
    try:
        hash(bayes_model)
        arrays = all(isinstance(x, (jax.Array, np.ndarray)) for x in jax.tree.leaves(data))
    except TypeError:
        arrays = False
    if arrays:
        return _shared_hessian(bayes_model, data, unconstrained, batch_size)
    return jax.jit(lambda z: _hessian(bayes_model, data, z, batch_size))(unconstrained)


def hessian_columns(grad, x: jax.Array, batch_size: int) -> jax.Array:
    """Dense Hessian (d, d) of the function whose gradient is ``grad`` at ``x`` (d,): d
    Hessian-vector products (forward over reverse), ``batch_size`` at a time."""

    def column(v):
        return jax.jvp(grad, (x,), (v,))[1]

    basis = jnp.eye(x.shape[0], dtype=x.dtype)
    return jax.lax.map(column, basis, batch_size=min(batch_size, x.shape[0]))


def _hessian(bayes_model, data, unconstrained, batch_size):
    flat, unravel = ravel_pytree(unconstrained)
    grad = jax.grad(lambda x: potential_energy(bayes_model.model, (data,), {}, unravel(x)))
    return hessian_columns(grad, flat, batch_size)


_shared_hessian = functools.partial(jax.jit, static_argnums=(0, 3))(_hessian)
