"""NUTS (Hoffman & Gelman 2014) over a model's latent sites with NumPyro's NUTS kernel.

Chains that run one after the other without a progress bar (the benchmark grid's) run as
:mod:`inference._chains` programs, shared by every model of a structure, and so do their
``extend``-ed continuations; parallel chains and runs with a progress bar use NumPyro's
``MCMC``. Both give the same draws up to rounding.

Chains run in parallel (``chain_method="parallel"``) when JAX sees at least as many devices as
chains, else one after the other. On a CPU, JAX sees one device unless the host is split *before
JAX initialises*: call ``numpyro.set_host_device_count(k)`` first thing in a script (the command
line does; this library function never changes global state). On 2 cores, 2 parallel chains took
1.5x the time of one (docs/stack.md).
"""

from __future__ import annotations

import json
import time
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer import MCMC, NUTS
from numpyro.infer.initialization import init_to_mean
from numpyro.infer.util import constrain_fn, potential_energy, unconstrain_fn

from inference._chains import (
    ChainProgram,
    constrained_draws,
    layout_of,
    run_chains,
    state_template,
)
from inference._common import (
    base_attrs,
    check_same_fit,
    point_values,
    raw_key,
)
from inference._state import state_from_dataset, state_to_dataset
from inference._validate import check_positive_int, fit_inputs
from inference.curved import fit_curved_map
from inference.laplace import floored_inverse, laplace_inverse_mass, potential_hessian
from inference.result import FitResult, build_idata, trace_sites
from inference.softplus_map import SoftplusCoefficientMap, fit_softplus_map

EXTRA_FIELDS = ("num_steps", "energy", "accept_prob", "adapt_state.step_size", "potential_energy")
METRICS = (
    "auto",
    "adapt",
    "laplace",
    "laplace-adapt",
    "softplus-adapt",
    "laplace-slices",
    "laplace-curved",
    "laplace-curved-or-adapt",
)
MAPPED_METRICS = ("laplace-curved", "softplus-adapt")
"""Metrics whose runs sample in coordinates of their own map. ``softplus-adapt`` runs store
their map and can be ``extend``-ed; ``laplace-curved`` runs cannot (run ``fit_nuts`` again with
more draws)."""
NOT_EXTENDABLE = ("laplace-curved",)
"""Metrics whose runs ``extend`` refuses."""
CURVED_ADAPT_MIN_WARMUP = 200
"""``metric="laplace-curved"`` adapts a diagonal metric only with at least this many warm-up
steps; shorter warm-ups keep the map's unit metric (a cart-pole run of 120 warm-up steps reached
R-hat 1.07 with the adapted one)."""
CURVED_MIN_QUARTIC = 10.0
"""``metric="laplace-curved-or-adapt"`` samples in the curved Laplace map where one of its
fourth-order axes has a rise ``a t^2 + b t^4`` along the straight Laplace axis with ``b`` at least
this (the rise at one Laplace sd ``a + b``; a Gaussian's is 0.5), and with ``"laplace-adapt"``
otherwise. Measured on ``nokin-diffnea/stribeck/informative`` at 5,000 states: the Furuta's ``b``
is 30.8, and there the curved map mixed where the adapted metric diverged; the cart-pole's is 3.0,
and there the curved map diverged where the adapted metric did not
(docs/inference-geometry.md)."""
DEFAULT_TARGET_ACCEPT = 0.8
"""NUTS's step-size target where the model names none (NumPyro's and Stan's default)."""


def model_target_accept(bayes_model) -> float:
    """The step-size target ``fit_nuts(target_accept="auto")`` uses: the model's
    ``nuts_target_accept``, or :data:`DEFAULT_TARGET_ACCEPT` where it names none."""
    return float(getattr(bayes_model, "nuts_target_accept", DEFAULT_TARGET_ACCEPT))


def _sample_stats(extra: dict, max_tree_depth: int) -> dict[str, np.ndarray]:
    """NumPyro's extra fields (C, D) as ArviZ sample statistics."""
    n_steps = np.asarray(extra["num_steps"])
    # A tree of depth d holds up to 2^d - 1 leapfrog steps (Hoffman & Gelman 2014, Alg. 3).
    depth = np.ceil(np.log2(n_steps.astype(np.float64) + 1.0)).astype(np.int64)
    return {
        "diverging": np.asarray(extra["diverging"]).astype(bool),
        "n_steps": n_steps.astype(np.int64),
        "tree_depth": depth,
        "reached_max_tree_depth": depth >= max_tree_depth,
        "energy": np.asarray(extra["energy"]),
        "lp": -np.asarray(extra["potential_energy"]),
        "acceptance_rate": np.asarray(extra["accept_prob"]),
        "step_size": np.asarray(extra["adapt_state.step_size"]),
    }


def _initial_params(bayes_model, data, init, latent, num_chains):
    """Unconstrained starting points (num_chains, ...) per site from a result or values."""
    if isinstance(init, FitResult):
        samples = init.posterior_samples(consistent_only=False)
        missing = sorted(set(latent) - set(samples))
        if missing:
            raise ValueError(f"init result lacks the model's latent sites {missing}")
        total = next(iter(samples.values())).shape[0]
        if total >= num_chains:
            idx = np.linspace(0, total - 1, num_chains).round().astype(int)
            points = [{k: samples[k][i] for k in latent} for i in idx]
        else:
            points = [point_values(init, latent)] * num_chains
    elif isinstance(init, jax.Array):  # a key: one prior draw per chain (start_sample)
        points = [
            {k: v for k, v in bayes_model.start_sample(k_chain).items() if k in latent}
            for k_chain in jax.random.split(init, num_chains)
        ]
    else:
        points = [{k: jnp.asarray(init[k]) for k in latent}] * num_chains
    unconstrained = [unconstrain_fn(bayes_model.model, (data,), {}, p) for p in points]
    if num_chains == 1:
        return unconstrained[0]
    return {k: jnp.stack([u[k] for u in unconstrained]) for k in unconstrained[0]}


class _Metric(NamedTuple):
    """What ``fit_nuts`` samples with: the name stored in the settings, the fixed inverse mass
    matrix (None: adapted, or a map's own metric), the map whose coordinates NUTS runs in
    (``MAPPED_METRICS``; else None) and its record for the settings (the curved map's also
    where ``laplace-curved-or-adapt`` set it aside)."""

    name: str
    inverse_mass: jax.Array | None = None
    transform: object = None
    record: dict | None = None


def _adapt_instead(metric: str) -> _Metric:
    """Warn (at ``fit_nuts``'s caller) that the Hessian of the log joint at init is not finite,
    and fall back to an adapted dense metric instead of ``metric``."""
    warnings.warn(
        f"the Hessian of the log joint at init is not finite; NUTS adapts a dense metric instead "
        f"of {metric}",
        RuntimeWarning,
        stacklevel=4,
    )
    return _Metric("adapt")


def strongly_bent(record: dict) -> bool:
    """Whether a curved Laplace map (``inference.curved.fit_curved_map``'s ``record``) has a
    fourth-order axis whose straight rise's ``t^4`` coefficient reaches
    :data:`CURVED_MIN_QUARTIC`."""
    straight = np.asarray(record.get("straight", []), np.float64).reshape(-1, 2)
    return bool(straight.size and straight[:, 1].max() >= CURVED_MIN_QUARTIC)


def _stored_state(previous: FitResult, template, num_chains: int):
    """The last sampler state stored with ``previous`` (chains first, as the fits store it)
    in the structure of ``template``; one chain's without the chain axis, as NumPyro runs it."""
    state = state_from_dataset(previous.idata["nuts_state"].to_dataset(), template, kind="nuts")
    return jax.tree.map(lambda x: x[0], state) if num_chains == 1 else state


def _fixed_metric(bayes_model, data, metric, init, latent) -> _Metric:
    """The :class:`_Metric` for ``fit_nuts``'s ``metric``."""
    if isinstance(metric, str):
        if metric == "auto":
            metric = "adapt" if init is None else "laplace"
        if metric == "adapt":
            return _Metric("adapt")
        if metric not in METRICS:
            raise ValueError(f"unknown metric {metric!r}; valid: {list(METRICS)} or an array")
        if init is None:
            raise ValueError(f"metric={metric!r} needs init (e.g. an SVI fit) to expand around")
        if isinstance(init, FitResult):
            point = point_values(init, latent)
        else:
            point = {k: jnp.asarray(init[k]) for k in latent}
        record = None
        if metric in ("laplace-curved", "laplace-curved-or-adapt"):
            curved, record = fit_curved_map(bayes_model, data, point)
            if not np.all(np.isfinite(curved.axes)):
                return _adapt_instead("the curved Laplace map")
            if metric == "laplace-curved" or strongly_bent(record):
                return _Metric("laplace-curved", transform=curved, record=record)
            metric = "laplace-adapt"  # the record says why the map was set aside
        if metric == "softplus-adapt":
            cmap, inverse_mass, record = _softplus_metric(bayes_model, data, point)
            if not np.all(np.isfinite(inverse_mass)):
                return _adapt_instead("the softplus map's Laplace metric")
            return _Metric(metric, inverse_mass, cmap, record)
        inverse_mass = np.asarray(
            laplace_inverse_mass(bayes_model, data, point, slices=metric == "laplace-slices")
        )
        if not np.all(np.isfinite(inverse_mass)):
            return _adapt_instead("the Laplace metric")
        return _Metric(metric, jnp.asarray(inverse_mass), record=record)
    inverse_mass = np.asarray(metric)
    size = sum(int(np.prod(np.shape(v))) for v in latent.values())
    if inverse_mass.shape not in ((size,), (size, size)):
        raise ValueError(
            f"metric: expected shape ({size},) or ({size}, {size}) over the latent sites "
            f"{sorted(latent)}, got {inverse_mass.shape}"
        )
    if not np.all(np.isfinite(inverse_mass)):
        raise ValueError("metric: the inverse mass matrix has non-finite entries")
    if inverse_mass.ndim == 1 and np.any(inverse_mass <= 0):
        raise ValueError("metric: a diagonal inverse mass matrix must be positive")
    if inverse_mass.ndim == 2:
        if not np.allclose(inverse_mass, inverse_mass.T, rtol=1e-8, atol=0.0):
            raise ValueError("metric: the inverse mass matrix is not symmetric")
        if np.linalg.eigvalsh(inverse_mass).min() <= 0:
            raise ValueError("metric: the inverse mass matrix is not positive definite")
    return _Metric("given", jnp.asarray(inverse_mass))


def _softplus_metric(bayes_model, data, point: dict):
    """``(map, inverse mass in its coordinates (d, d), record)`` at ``point`` for
    ``metric="softplus-adapt"`` (:mod:`inference.softplus_map`): the Laplace metric of the log
    density in the map's coordinates (the log joint's Hessian and gradient at ``point``
    through the elementwise map). A non-finite Hessian gives non-finite entries."""
    unconstrained = unconstrain_fn(bayes_model.model, (data,), {}, point)
    flat, unravel = ravel_pytree(unconstrained)
    H = np.asarray(potential_hessian(bayes_model, data, unconstrained), np.float64)
    g = jax.grad(lambda z: potential_energy(bayes_model.model, (data,), {}, unravel(z)))(flat)
    g = np.asarray(g, np.float64)
    if not (np.all(np.isfinite(H)) and np.all(np.isfinite(g))):
        return None, jnp.full(H.shape, jnp.nan, flat.dtype), {}
    cmap = fit_softplus_map(bayes_model, unconstrained, H, g)
    Hs = cmap.hessian(cmap.inverse(np.asarray(flat, np.float64)), H, g)
    record = cmap.to_record()
    return cmap, jnp.asarray(floored_inverse(Hs, flat.dtype, None)[0], flat.dtype), record


def _whitened_warmup(
    potential,
    inverse_mass,
    starts,
    key,
    *,
    num_warmup: int,
    num_chains: int,
    chain_method: str,
    target_accept: float,
    max_tree_depth: int,
    progress: bool,
    shared: tuple | None = None,
):
    """Stan's windowed adaptation of a dense metric in coordinates whitened by ``inverse_mass``.

    ``x = x_0 + L u`` with ``L L^T = inverse_mass`` (the Laplace covariance at the start), ``x``
    the flat coordinates of ``potential`` (the unconstrained latent sites in NumPyro's order, or
    a map's coordinates) and ``x_0`` the first chain's start. In ``u`` every direction has a
    posterior scale near 1, so the adaptation's regularisation towards ``1e-3 I`` (Stan;
    NumPyro's ``regularize_mass_matrix``) no longer inflates the variance of tightly identified
    sites (base parameters with sd ~1e-4 in the prior-whitened coordinates), and the adapted
    metric fits the skew of weakly identified ones that the Laplace metric misses.

    Args:
        potential: ``x (d,) -> -log density``.
        starts: (C, d) the chains' starts.
        shared: ``(bayes_model, data, layout, transform)`` of ``potential``
            (:func:`_potential`) where the chains run one after the other without a progress
            bar: they then run as :func:`inference._chains.run_chains`, a program shared by
            every model of the structure.

    Returns:
        (the chains' adapted inverse mass matrices mapped back to ``x`` and averaged, (d, d);
        the chains' end points (C, d)).
    """
    x0 = starts[0]
    L = jnp.linalg.cholesky(jnp.asarray(inverse_mass, x0.dtype))
    u0 = jax.scipy.linalg.solve_triangular(L, (starts - x0).T, lower=True).T
    if shared is not None and not progress and (chain_method == "sequential" or num_chains == 1):
        bayes_model, data, layout, transform = shared
        program = ChainProgram(
            "flat",
            layout,
            True,
            num_warmup,
            0,
            _kernel(dense_mass=True, target_accept=target_accept, max_tree_depth=max_tree_depth),
        )
        aux = {"transform": transform, "x0": x0, "L": L}
        _, state = run_chains(program, bayes_model, data, aux, u0[:num_chains], key)
        metric_u = state.adapt_state.inverse_mass_matrix.mean(0)
        ends = x0 + state.z @ L.T
        metric_x = L @ metric_u @ L.T
        return 0.5 * (metric_x + metric_x.T), ends
    kernel = NUTS(
        potential_fn=lambda u: potential(x0 + L @ u),
        dense_mass=True,
        target_accept_prob=target_accept,
        max_tree_depth=max_tree_depth,
    )
    mcmc = MCMC(
        kernel,
        num_warmup=num_warmup,
        num_samples=1,
        num_chains=num_chains,
        chain_method=chain_method,
        progress_bar=progress,
    )
    mcmc.warmup(key, init_params=u0 if num_chains > 1 else u0[0])
    state = mcmc.post_warmup_state
    metric_u = jnp.reshape(state.adapt_state.inverse_mass_matrix, (-1, *L.shape)).mean(0)
    metric_x = L @ metric_u @ L.T
    ends = x0 + jnp.reshape(state.z, (-1, x0.size)) @ L.T
    return 0.5 * (metric_x + metric_x.T), ends


def _potential(bayes_model, data, unravel, transform=None):
    """``x (d,) -> -log density`` over flat coordinates: the unconstrained latent sites, or with
    ``transform`` its coordinates (``transform.forward``'s log-Jacobian included)."""

    def potential(x):
        if transform is None:
            return potential_energy(bayes_model.model, (data,), {}, unravel(x))
        z, log_jac = transform.forward(x)
        return potential_energy(bayes_model.model, (data,), {}, unravel(z)) - log_jac

    return potential


def _kernel(*, dense_mass: bool, target_accept: float, max_tree_depth: int, adapt_mass=True):
    """:attr:`inference._chains.ChainProgram.kernel` of NUTS with these options."""
    return (
        ("adapt_mass_matrix", bool(adapt_mass)),
        ("dense_mass", bool(dense_mass)),
        ("max_tree_depth", int(max_tree_depth)),
        ("target_accept_prob", float(target_accept)),
    )


def _chain_axis(init_params, num_chains):
    """``init_params`` (per site, a leading chain axis where ``num_chains > 1``) with a leading
    chain axis everywhere."""
    return init_params if num_chains > 1 else jax.tree.map(lambda x: x[None], init_params)


def _layout(init_params, num_chains):
    """:func:`inference._chains.layout_of` one chain's ``init_params``."""
    return layout_of(jax.tree.map(lambda x: x[0], _chain_axis(init_params, num_chains)))


def _flat_chains(init_params, num_chains):
    """``(starts (C, d), unravel)`` of unconstrained starting points (per site, a leading chain
    axis where ``num_chains > 1``)."""
    chains = _chain_axis(init_params, num_chains)
    unravel = ravel_pytree(jax.tree.map(lambda x: x[0], chains))[1]
    return jax.vmap(lambda p: ravel_pytree(p)[0])(chains), unravel


def _run_program(
    coordinates: str,
    bayes_model,
    data,
    aux: dict,
    init_params,
    starts,
    key,
    *,
    num_warmup: int,
    num_samples: int,
    num_chains: int,
    kernel: tuple,
    max_tree_depth: int,
    previous: FitResult | None,
):
    """Sequential chains as one shared :mod:`inference._chains` program each, from ``starts``
    (C, ...) in ``coordinates`` (``"sites"`` or ``"flat"``); with ``previous``, its stored
    chains continued instead (a ``continued`` program, no warm-up). Returns ``(samples
    {site: (C, D, ...)} constrained, sample stats, last state)``."""
    program = ChainProgram(
        coordinates,
        _layout(init_params, num_chains),
        False,
        0 if previous is not None else num_warmup,
        num_samples,
        kernel,
        EXTRA_FIELDS,
        continued=previous is not None,
    )
    if previous is not None:  # the stored states, in the structure of one chain's state
        first = jax.tree.map(lambda x: x[0], starts)
        template = state_template(program, bayes_model, data, aux, first, key)
        starts = state_from_dataset(
            previous.idata["nuts_state"].to_dataset(), template, kind="nuts"
        )
        key = None
    collected, last_state = run_chains(program, bayes_model, data, aux, starts, key)
    samples = constrained_draws(program, bayes_model, data, aux, collected["z"])
    samples = {k: np.asarray(v) for k, v in jax.block_until_ready(samples).items()}
    return samples, _sample_stats(collected, max_tree_depth), last_state


def _run_mapped(
    bayes_model,
    data,
    transform,
    init_params,
    *,
    run_key,
    num_warmup: int,
    num_samples: int,
    num_chains: int,
    settings: dict,
    progress: bool,
    inverse_mass=None,
    starts=None,
    previous=None,
):
    """NUTS in the coordinates ``s`` of ``transform`` (``forward(s) -> (z, log |dz/ds|)``,
    ``inverse(z) -> s``: :class:`inference.curved.CurvedLaplaceMap`,
    :class:`inference.softplus_map.SoftplusCoefficientMap`). With ``inverse_mass`` (d, d) that
    fixed metric (only the step size adapts); without, a diagonal adapted from the unit one
    where the warm-up has :data:`CURVED_ADAPT_MIN_WARMUP` steps (Stan's windows; the curved map
    whitens). Chains start at ``starts`` (C, d) in ``s``, else at the preimage of
    ``init_params``. With ``previous`` (a result of such a run) its chains continue from their
    stored last state (step size and metric included, no warm-up). Returns ``(samples
    {latent site: (chains, draws, ...)} constrained, sample stats, last state)``; the stats'
    ``lp`` is the log density in ``s`` (the map's log-Jacobian included)."""
    flat, unravel = _flat_chains(init_params, num_chains)
    if starts is None:
        starts = jnp.asarray(transform.inverse(np.asarray(flat)), flat.dtype)
    potential = _potential(bayes_model, data, unravel, transform)
    if previous is not None:  # the stored state holds the metric; this one shapes the template
        inverse_mass = jnp.eye(starts.shape[-1], dtype=starts.dtype)
    if inverse_mass is None:
        # the map whitens: a diagonal adapted only where the warm-up has room for Stan's windows
        metric = {"adapt_mass_matrix": num_warmup >= CURVED_ADAPT_MIN_WARMUP}
    else:
        metric = {
            "inverse_mass_matrix": inverse_mass,
            "dense_mass": True,
            "adapt_mass_matrix": False,
        }
    if not progress and (settings["chain_method"] == "sequential" or num_chains == 1):
        aux = {"transform": transform}
        if inverse_mass is not None:
            aux["inverse_mass"] = jnp.asarray(inverse_mass, starts.dtype)
        kernel = _kernel(
            dense_mass=metric.get("dense_mass", False),
            target_accept=settings["target_accept"],
            max_tree_depth=settings["max_tree_depth"],
            adapt_mass=metric["adapt_mass_matrix"],
        )
        return _run_program(
            "flat", bayes_model, data, aux, init_params, starts, run_key,
            num_warmup=num_warmup, num_samples=num_samples, num_chains=num_chains,
            kernel=kernel, max_tree_depth=settings["max_tree_depth"], previous=previous,
        )
    kernel = NUTS(
        potential_fn=potential,
        **metric,
        target_accept_prob=settings["target_accept"],
        max_tree_depth=settings["max_tree_depth"],
    )
    mcmc = MCMC(
        kernel,
        num_warmup=0 if previous is not None else num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=settings["chain_method"],
        progress_bar=progress,
    )
    if previous is not None:
        template = kernel.init(run_key, 0, starts[0], model_args=(), model_kwargs={})
        state = _stored_state(previous, template, num_chains)
        mcmc.post_warmup_state = state
        run_key = state.rng_key
    mcmc.run(
        run_key, extra_fields=EXTRA_FIELDS, init_params=starts if num_chains > 1 else starts[0]
    )
    s = jnp.reshape(mcmc.get_samples(group_by_chain=True), (num_chains, num_samples, -1))

    @jax.jit
    def constrained(s):
        return jax.vmap(
            lambda x: constrain_fn(bayes_model.model, (data,), {}, unravel(transform.forward(x)[0]))
        )(s)

    samples = jax.vmap(constrained)(s)
    jax.block_until_ready(samples)
    samples = {k: np.asarray(v) for k, v in samples.items()}
    stats = _sample_stats(mcmc.get_extra_fields(group_by_chain=True), settings["max_tree_depth"])
    last_state = mcmc.last_state
    if num_chains == 1:
        last_state = jax.tree.map(lambda x: x[None], last_state)
    return samples, stats, last_state


def fit_nuts(
    bayes_model,
    data,
    *,
    key,
    num_warmup: int = 1000,
    num_samples: int = 1000,
    num_chains: int = 2,
    init=None,
    extend: FitResult | None = None,
    dense_mass: bool = False,
    metric="auto",
    target_accept: float | str = "auto",
    max_tree_depth: int = 10,
    chain_method: str | None = None,
    num_predictive: int = 200,
    log_likelihood: bool = True,
    complete: bool = True,
    progress: bool = True,
) -> FitResult:
    """Sample the posterior of ``bayes_model`` given ``data`` with NUTS.

    Args:
        bayes_model: a ``models.BayesianModel`` (or any object with its protocol).
        data: ``models.ModelData`` (fields ``q, qd, qdd, tau`` (N, n)) or a ``data.Dataset``.
        key: ``jax.random`` key or int seed.
        num_warmup: adaptation steps per chain (step size and mass matrix; Stan's windows).
        num_samples: draws per chain kept.
        num_chains: independent chains (parallel where ``jax.local_device_count()`` allows).
        init: starting point: a ``FitResult`` (e.g. from :func:`inference.fit_svi`; chains start
            at distinct posterior draws where it has enough, else at its mean) or
            ``{site: value}``; default: one prior draw per chain (``bayes_model.start_sample``;
            noise scales at their medians), never the prior mean.
        extend: a NUTS ``FitResult`` of the same variant and data: continue its chains from their
            stored last state (adapted step size and mass matrix, no new warm-up) for
            ``num_samples`` more draws each, and return all draws (earlier ones first).
        dense_mass: adapt a dense (True) or diagonal (False) mass matrix (``metric="adapt"``).
        metric: the inverse mass matrix. ``"auto"`` (default): the model's ``nuts_metric``
            (``"laplace"`` when it names none) when ``init`` is given, else ``"adapt"``.
            ``"adapt"``: adapted during warm-up from the identity (Stan's windows).
            ``"laplace"``: fixed, the inverse Hessian of the negative log joint at ``init``'s
            posterior mean (:func:`inference.laplace.laplace_inverse_mass`); needs ``init``
            (a MAP is the intended start); falls back to an adapted dense metric, with a
            warning, when the Hessian is not finite. ``"laplace-adapt"``: a dense metric adapted
            during warm-up (Stan's windows) in coordinates whitened by the Laplace metric, then
            fixed (averaged over chains) for a step-size-only warm-up (the last fifth, at most
            100 steps) and the draws: for posteriors with skewed, weakly identified directions
            whose spread the MAP's curvature misses (docs/inference-geometry.md).
            ``"softplus-adapt"``: the same in the coordinates of
            :class:`inference.softplus_map.SoftplusCoefficientMap` fitted at ``init`` (the
            friction law's scale coefficients as ``c = k softplus(s)``, ``k`` their likelihood
            width: log-like where only the prior sees them, linear where the data do), the
            Laplace metric of the density there as the start; the Stribeck models' default.
            The map is stored with the run, so ``extend`` continues its chains in it.
            ``"laplace-slices"``: the Laplace metric with the variance of each of its axes
            that the log joint shows to be far from Gaussian taken from the fitted slice
            (``laplace_inverse_mass(slices=True)``). ``"laplace-curved"``: NUTS in the
            coordinates of :class:`inference.curved.CurvedLaplaceMap` fitted at ``init``
            (the Laplace axes bent onto the ridge to third order, the fourth-order axes'
            tails mapped to Gaussian ones; a diagonal metric adapted there from
            :data:`CURVED_ADAPT_MIN_WARMUP` warm-up steps on): for posteriors that bend away
            from the MAP (learned placements: ``nokin-diffnea``'s default). Such a run cannot
            be ``extend``-ed. ``"laplace-curved-or-adapt"``: the curved map where its
            straight fourth-order rise is strong (:func:`strongly_bent`), else
            ``"laplace-adapt"`` (``nokin-diffnea`` with Stribeck friction); the settings name
            the metric that ran and keep the map's record (``curved_map``). An array: that
            fixed inverse mass matrix, (d,) diagonal or (d, d) dense, over the latent sites
            flattened in NumPyro's order (sorted site names). With a fixed metric only the step
            size is adapted. The Laplace metrics cost d Hessian-vector products (d latent values)
            before sampling.
        target_accept: target acceptance probability of the step-size adaptation, in (0, 1).
            ``"auto"`` (default): the model's ``nuts_target_accept`` (0.8 when it names none;
            ``models.identifiable``: 0.95 for Stribeck friction, whose posterior diverges at
            0.8, and 0.99 with learned placements). A higher target takes smaller steps: fewer
            divergences, more gradients.
        max_tree_depth: maximum tree depth (at most ``2^depth - 1`` leapfrog steps per draw).
        chain_method: ``"parallel"`` or ``"sequential"``; default parallel when there are enough
            devices.
        num_predictive: posterior-predictive draws (0: none).
        log_likelihood: add the pointwise log-likelihood group.
        complete: the identifiable geometry (``models.identifiable``): draw every draw's theta
            and virtual parameters given its base parameters (about 3 ms a draw on 2-DoF
            robots); False leaves them out of the posterior, for callers that complete only
            the draws they use (``model.complete``; the benchmark grid's cells).
        progress: NumPyro's progress bar.

    Returns:
        A :class:`FitResult` with ``method="nuts"``; ``diagnostics()`` gives R-hat, ESS,
        divergences; root attribute ``timing`` has ``wall_s`` and ``ess_bulk_per_s``.

    Raises:
        ValueError: bad data for the robot, bad option values, an ``extend`` result that does not
            match (variant, data, number of chains).
    """
    observations, data, summary = fit_inputs(bayes_model, data)
    num_warmup = check_positive_int("num_warmup", num_warmup, allow_zero=True)
    num_samples = check_positive_int("num_samples", num_samples)
    num_chains = check_positive_int("num_chains", num_chains)
    max_tree_depth = check_positive_int("max_tree_depth", max_tree_depth)
    num_predictive = check_positive_int("num_predictive", num_predictive, allow_zero=True)
    if isinstance(target_accept, str) and target_accept == "auto":
        target_accept = model_target_accept(bayes_model)
    if isinstance(target_accept, str) or not 0 < target_accept < 1:
        raise ValueError(f"target_accept must be 'auto' or in (0, 1), got {target_accept!r}")
    if chain_method is None:
        chain_method = "parallel" if jax.local_device_count() >= num_chains else "sequential"
    if chain_method not in ("parallel", "sequential"):
        raise ValueError(
            f"unknown chain_method {chain_method!r}; valid: ['parallel', 'sequential']"
        )
    if init is not None and extend is not None:
        raise ValueError("give either init or extend, not both")
    if isinstance(metric, str) and metric == "auto" and init is not None and extend is None:
        # a model may name the metric that suits its posterior (models.identifiable: a dense
        # metric adapted from the Laplace one where the MAP's curvature misfits skewed friction
        # sites)
        metric = getattr(bayes_model, "nuts_metric", "laplace")
    key, seed = raw_key(key)
    k_run, k_pred = jax.random.split(key)
    latent, _ = trace_sites(bayes_model, data)
    fixed_metric, metric_name = None, "adapt"
    transform = map_record = None  # a run in a map's coordinates (MAPPED_METRICS)
    if extend is None:
        metric_name, fixed_metric, transform, map_record = _fixed_metric(
            bayes_model, data, metric, init, latent
        )
        if metric_name == "laplace-curved":
            dense_mass = False
        elif metric_name == "softplus-adapt":
            dense_mass = True
        elif metric_name != "adapt":
            dense_mass = fixed_metric.ndim == 2
    settings = {
        "num_warmup": num_warmup,
        "num_samples": num_samples,
        "num_chains": num_chains,
        "dense_mass": bool(dense_mass),
        "metric": metric_name,
        "target_accept": float(target_accept),
        "max_tree_depth": max_tree_depth,
        "chain_method": chain_method,
    }
    if map_record is not None:
        settings["softplus_map" if metric_name == "softplus-adapt" else "curved_map"] = map_record
    init_params = None
    init_strategy = init_to_mean()
    previous = None
    if extend is not None:
        check_same_fit(extend, bayes_model, observations, method="nuts", what="extend")
        old = extend.attrs["settings"]
        if old["num_chains"] != num_chains:
            raise ValueError(
                f"extend: result has {old['num_chains']} chains, asked for {num_chains}"
            )
        if old.get("metric") == "softplus-adapt":
            try:
                transform = SoftplusCoefficientMap.from_record(old.get("softplus_map", {}))
            except ValueError as err:
                raise ValueError(
                    f"extend: this softplus-adapt run cannot be continued ({err}); run fit_nuts "
                    "again with more draws"
                ) from None
            settings["softplus_map"] = transform.to_record()
        elif old.get("metric") in NOT_EXTENDABLE:
            raise ValueError(
                f"extend: a NUTS run with metric={old['metric']!r} samples in the coordinates "
                "of its own map and cannot be continued; run fit_nuts again with more draws"
            )
        for k in ("dense_mass", "target_accept", "max_tree_depth"):
            settings[k] = old[k]
        settings["metric"] = old.get("metric", "adapt")
        settings["num_warmup"] = old["num_warmup"]
        previous = extend
        # the chains' last draws: the coordinates' structure
        last = extend.posterior_samples(group_by_chain=True)
        init_params = _initial_params(
            bayes_model, data, {k: last[k][0, -1] for k in latent}, latent, num_chains
        )
    elif init is not None:
        init_params = _initial_params(bayes_model, data, init, latent, num_chains)
    elif hasattr(bayes_model, "start_sample"):
        # never the prior mean: network weights at 0 and weak placements along gravity have
        # vanishing gradients there; each chain starts at its own prior draw
        k_start, k_run = jax.random.split(k_run)
        init_params = _initial_params(bayes_model, data, k_start, latent, num_chains)
    run_warmup = num_warmup
    t0 = time.perf_counter()
    starts = None
    if metric_name in ("laplace-adapt", "softplus-adapt") and num_warmup > 0:
        # the metric is adapted in Laplace-whitened coordinates (of the map, if any); the
        # sampler below then runs with it fixed, after a short step-size-only warm-up of its own
        run_warmup = min(100, num_warmup // 5)
        k_warm, k_run = jax.random.split(k_run)
        flat, unravel = _flat_chains(init_params, num_chains)
        if transform is not None:
            flat = jnp.asarray(transform.inverse(np.asarray(flat)), flat.dtype)
        layout = _layout(init_params, num_chains)
        fixed_metric, ends = _whitened_warmup(
            _potential(bayes_model, data, unravel, transform),
            fixed_metric,
            flat,
            k_warm,
            num_warmup=num_warmup - run_warmup,
            num_chains=num_chains,
            chain_method=chain_method,
            target_accept=settings["target_accept"],
            max_tree_depth=settings["max_tree_depth"],
            progress=progress,
            shared=(bayes_model, data, layout, transform),
        )
        if transform is None:
            init_params = jax.vmap(unravel)(ends)
            if num_chains == 1:
                init_params = jax.tree.map(lambda x: x[0], init_params)
        else:
            starts = ends
    if transform is not None:
        samples, stats, last_state = _run_mapped(
            bayes_model,
            data,
            transform,
            init_params,
            run_key=k_run,
            num_warmup=run_warmup,
            num_samples=num_samples,
            num_chains=num_chains,
            settings=settings,
            progress=progress,
            inverse_mass=None if settings["metric"] == "laplace-curved" else fixed_metric,
            starts=starts,
            previous=previous,
        )
        wall_s = time.perf_counter() - t0
        if previous is not None:
            samples, stats, wall_s = _with_previous(previous, samples, stats, settings, wall_s)
        return _nuts_result(
            bayes_model, observations, samples, stats, last_state, settings, wall_s,
            seed=seed, summary=summary, key=k_pred, num_predictive=num_predictive,
            log_likelihood=log_likelihood, complete=complete,
        )
    sequential = chain_method == "sequential" or num_chains == 1
    if init_params is not None and sequential and not progress:
        kernel = _kernel(
            dense_mass=settings["dense_mass"],
            target_accept=settings["target_accept"],
            max_tree_depth=settings["max_tree_depth"],
            adapt_mass=fixed_metric is None,
        )
        samples, stats, last_state = _run_program(
            "sites", bayes_model, data,
            {} if fixed_metric is None else {"inverse_mass": fixed_metric},
            init_params, _chain_axis(init_params, num_chains), k_run,
            num_warmup=run_warmup, num_samples=num_samples, num_chains=num_chains,
            kernel=kernel, max_tree_depth=settings["max_tree_depth"], previous=previous,
        )
        wall_s = time.perf_counter() - t0
        if previous is not None:
            samples, stats, wall_s = _with_previous(previous, samples, stats, settings, wall_s)
        return _nuts_result(
            bayes_model, observations, {k: samples[k] for k in latent},
            stats, last_state, settings, wall_s,
            seed=seed, summary=summary, key=k_pred, num_predictive=num_predictive,
            log_likelihood=log_likelihood, complete=complete,
        )
    metric_options = {}
    if fixed_metric is not None:
        metric_options = dict(inverse_mass_matrix=fixed_metric, adapt_mass_matrix=False)
    kernel = NUTS(
        bayes_model.model,
        init_strategy=init_strategy,
        dense_mass=settings["dense_mass"],
        **metric_options,
        target_accept_prob=settings["target_accept"],
        max_tree_depth=settings["max_tree_depth"],
    )
    mcmc = MCMC(
        kernel,
        num_warmup=0 if previous is not None else run_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        chain_method=chain_method,
        progress_bar=progress,
    )
    if previous is not None:
        # Template of one chain's state (same pytree structure), then the stored chains' leaves.
        template = kernel.init(k_run, 0, None, model_args=(data,), model_kwargs={})
        state = _stored_state(previous, template, num_chains)
        mcmc.post_warmup_state = state
        run_key = state.rng_key
    else:
        run_key = k_run
    mcmc.run(run_key, data, extra_fields=EXTRA_FIELDS, init_params=init_params)
    samples = mcmc.get_samples(group_by_chain=True)
    jax.block_until_ready(samples)
    wall_s = time.perf_counter() - t0
    samples = {k: np.asarray(samples[k]) for k in latent}
    stats = _sample_stats(mcmc.get_extra_fields(group_by_chain=True), settings["max_tree_depth"])
    last_state = mcmc.last_state
    if num_chains == 1:
        last_state = jax.tree.map(lambda x: x[None], last_state)
    if previous is not None:
        samples, stats, wall_s = _with_previous(previous, samples, stats, settings, wall_s)
    return _nuts_result(
        bayes_model, observations, samples, stats, last_state, settings, wall_s,
        seed=seed, summary=summary, key=k_pred, num_predictive=num_predictive,
        log_likelihood=log_likelihood, complete=complete,
    )


def _with_previous(previous: FitResult, samples: dict, stats: dict, settings: dict, wall_s: float):
    """``(samples, stats, wall_s)`` of an ``extend``-ed run: ``previous``'s draws and sample
    stats followed by the new ones (chains, draws, ...), its wall time added; sets
    ``settings["num_samples"]`` to the total."""
    old_samples = previous.posterior_samples(group_by_chain=True)
    samples = {k: np.concatenate([np.asarray(old_samples[k]), v], 1) for k, v in samples.items()}
    old_stats = previous.idata["sample_stats"]
    stats = {k: np.concatenate([np.asarray(old_stats[k].values), v], 1) for k, v in stats.items()}
    settings["num_samples"] = int(next(iter(samples.values())).shape[1])
    return samples, stats, wall_s + float(previous.attrs["timing"]["wall_s"])


def _nuts_result(
    bayes_model, observations, samples, stats, last_state, settings, wall_s, *, seed, summary,
    key, num_predictive, log_likelihood, complete,
) -> FitResult:
    """The :class:`FitResult` of a NUTS run: ``samples`` {latent site: (chains, draws, ...)}
    (constrained), ``stats`` (:func:`_sample_stats`), the chains' last state."""
    attrs = base_attrs(bayes_model, observations, method="nuts", seed=seed, summary=summary)
    attrs.update(settings=settings, timing={"wall_s": wall_s})
    extra = {"nuts_state": state_to_dataset(last_state, kind="nuts")}
    tree = build_idata(
        bayes_model,
        observations,
        samples,
        key=key,
        sample_stats=stats,
        num_predictive=num_predictive,
        compute_log_likelihood=log_likelihood,
        attrs=attrs,
        extra_groups=extra,
        complete=complete,
    )
    result = FitResult(idata=tree, variant=attrs["variant"], system=attrs["system"], method="nuts")
    diag = result.diagnostics()
    timing = dict(attrs["timing"], ess_bulk_per_s=diag["ess_bulk_min"] / max(wall_s, 1e-12))
    result.idata.attrs["timing"] = json.dumps(timing)
    result.idata.attrs["diagnostics"] = json.dumps(diag)
    return result
