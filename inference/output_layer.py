"""Laplace approximation of the networks' output layers around each ensemble member.

An ensemble of MAPs (``fit_svi``'s ``"ensemble"`` guide) carries weight uncertainty only through
its members' disagreement; where a single member carries all the weight (the others failed,
``inference.svi.MEMBER_SCORE_GAP``) its draws are one point and every posterior rollout is the
same curve. Given the rest of a member's values, the prediction of the ``ffnn`` family and of
the residual and FF-NN actuators is linear in their networks' output layers, so with Normal
noise the conditional posterior of those layers is Gaussian and the Laplace approximation at
the member is exact for it (Bayesian linear regression on the last hidden layer's features; the
"last-layer Laplace" of Daxberger et al. 2021, around each mode of the ensemble as in
Eschenhagen et al. 2021's mixtures of Laplace approximations). The friction networks pass their
output through ``|.|`` and are left out (``models`` ``output_layer_prior_sd``). The other
weights stay at the member.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import potential_energy

from inference.laplace import hessian_columns, shareable
from models.arguments import held_model, model_argument


def output_layer_hessians(bayes_model, data, members: dict, sites) -> np.ndarray:
    """Hessians (R, d, d) of ``-log p(z, data)`` over the output-layer ``sites`` (flattened in
    ``ravel_pytree`` order of ``{site: value}`` sorted by name) at each member of ``members``
    (``{latent site: (R, ...)}``, unconstrained values), the other sites held at the member.
    One vmapped program: d Hessian-vector products per member."""
    sites = tuple(sorted(sites))
    if shareable(bayes_model, data):
        out = _shared_hessians(model_argument(bayes_model), data, members, sites)
    else:
        out = jax.jit(lambda m, d: _hessians(bayes_model, d, m, sites))(members, data)
    return np.asarray(out, np.float64)


def _hessians(bayes_model, data, members, sites):
    model = held_model(bayes_model).model

    def one(point):
        flat, unravel = ravel_pytree({s: point[s] for s in sites})
        rest = {k: v for k, v in point.items() if k not in sites}

        def grad(x):
            return jax.grad(
                lambda y: potential_energy(model, (data,), {}, {**rest, **unravel(y)})
            )(x)

        return hessian_columns(grad, flat, 8)

    return jax.vmap(one)(members)


# traced once per model structure, the data and members as arguments (models.arguments)
_shared_hessians = jax.jit(_hessians, static_argnums=3)


def output_layer_draws(
    bayes_model, data, members: dict, draw_member: np.ndarray, key
) -> tuple[dict, dict]:
    """Posterior draws with each draw's output layers drawn from the Laplace approximation at
    its member (module docstring), the other sites at the member.

    Args:
        bayes_model: a model whose ``output_layer_prior_sd`` names its output-layer sites.
        data: the prepared training data the members were fitted to.
        members: ``{latent site: (R, ...)}`` the members' values.
        draw_member: (S,) member index of each draw (``inference.svi.allocate_draws``).
        key: ``jax.random`` key.

    Returns:
        ``(draws {site: (S, ...)}, record)``; ``record`` holds per member the smallest and
        largest posterior sd of the output layer and how many Hessian eigenvalues were raised to
        the prior's smallest precision (at a member that is not a minimum in these directions,
        the posterior there is taken no wider than the prior).
    """
    prior_sd = bayes_model.output_layer_prior_sd
    sites = sorted(prior_sd)
    draw_member = np.asarray(draw_member)
    draws = {k: np.asarray(v)[draw_member] for k, v in members.items()}
    used = np.unique(draw_member)
    H = output_layer_hessians(bayes_model, data, {k: v[used] for k, v in members.items()}, sites)
    floor = 1.0 / max(prior_sd.values()) ** 2  # the prior's smallest precision
    unravel = ravel_pytree({s: members[s][0] for s in sites})[1]
    eps = np.asarray(jax.random.normal(key, (draw_member.size, H.shape[-1])), np.float64)
    record = {"sites": sites, "members": used.tolist(), "sd_min": [], "sd_max": [], "floored": []}
    offsets = np.zeros((draw_member.size, H.shape[-1]))
    for j, m in enumerate(used):
        w, V = np.linalg.eigh(0.5 * (H[j] + H[j].T))
        raised = np.maximum(w, floor)
        rows = draw_member == m
        offsets[rows] = (eps[rows] / np.sqrt(raised)[None, :]) @ V.T
        sd = np.sqrt(np.diag((V / raised[None, :]) @ V.T))
        record["sd_min"].append(float(sd.min()))
        record["sd_max"].append(float(sd.max()))
        record["floored"].append(int(np.count_nonzero(w < floor)))
    dtype = np.asarray(members[sites[0]]).dtype
    centre = jax.vmap(lambda p: ravel_pytree(p)[0])({s: jnp.asarray(draws[s]) for s in sites})
    moved = jax.vmap(unravel)(centre + jnp.asarray(offsets, dtype))
    draws.update({s: np.asarray(moved[s]) for s in sites})
    return draws, record
