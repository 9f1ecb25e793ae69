"""Stochastic variational inference with optax optimisers, in a jitted ``lax.scan`` over chunks.

The ELBO (:class:`SortedTrace_ELBO`; Wingate & Weber 2013, Ranganath et al. 2014) is maximised
by an optax optimiser. Steps run as a compiled ``lax.scan`` of ``chunk_size`` updates (about 10x
faster than ``SVI.run``'s Python loop, docs/stack.md); progress and non-finite losses are
checked between chunks. Guides: ``"delta"`` (MAP, ``AutoDelta``), ``"normal"`` (mean field,
``AutoNormal``), ``"mvn"`` (full-rank Gaussian), ``"lowrank"`` (low-rank plus diagonal
Gaussian) and ``"ensemble"`` (MAPs from several prior draws, a mixture of those that did not
fail); the default ``"auto"`` is ``"ensemble"`` for models with networks (a posterior over their weights,
so their bands have width; :func:`default_guide` says why) and ``"delta"`` otherwise
(white-box models go on to NUTS). Gaussian guides start at the MAP (an ``AutoDelta`` fit of
``map_steps`` steps, or ``init``) with a small ``init_scale``: their default of 0.1 does not
converge against posterior spreads of ~0.003. With ``validation`` data every stage stops early
(``inference.early_stopping``).
"""

from __future__ import annotations

import functools
import time
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
import xarray as xr
from jax import lax
from numpyro import handlers
from numpyro.distributions import biject_to
from numpyro.infer import SVI
from numpyro.infer.autoguide import (
    AutoDelta,
    AutoLowRankMultivariateNormal,
    AutoMultivariateNormal,
    AutoNormal,
)
from numpyro.infer.elbo import ELBO
from numpyro.infer.initialization import init_to_mean, init_to_value
from numpyro.infer.svi import SVIState
from numpyro.infer.util import log_density, potential_energy
from numpyro.optim import optax_to_numpyro

from inference._common import (
    base_attrs,
    check_same_fit,
    point_values,
    raw_key,
)
from inference._progress import ProgressLine
from inference._state import state_from_dataset, state_to_dataset
from inference._validate import check_choice, check_positive_int, fit_inputs
from inference.early_stopping import EarlyStopping, heldout_log_likelihood, heldout_nll
from inference.laplace import shareable
from inference.output_layer import output_layer_draws
from inference.polish import polish_map, polish_map_batched
from inference.result import FitResult, build_idata, stored_name, trace_sites
from models.arguments import SharedStatic, held_model, model_argument

GUIDES = ("auto", "delta", "normal", "mvn", "lowrank", "ensemble")
OPTIMIZERS = {
    "adam": optax.adam,
    "adamw": optax.adamw,
    "adabelief": optax.adabelief,
    "radam": optax.radam,
    "rmsprop": optax.rmsprop,
    "sgd": optax.sgd,
    "lamb": optax.lamb,
}
SCHEDULES = ("constant", "cosine", "exponential", "linear", "warmup_cosine")
LBFGS = "lbfgs"
"""The ``"ensemble"`` guide's other optimiser: L-BFGS with a zoom line search on each member's
negative log joint (:func:`_lbfgs_step`); ``steps`` count its iterations, the line search sets
the step length (``learning_rate``, ``schedule`` and ``clip_norm`` do not apply)."""
FINAL_FRACTION = 0.01  # decaying schedules end at 1% of the peak learning rate


class ConvergenceReport(NamedTuple):
    """How the loss settled over the last steps of an SVI fit.

    Fields:
        steps: optimisation steps run (all stages after resumption included).
        final_loss: the last loss (negative ELBO).
        last_mean: mean loss over the last ``window`` steps.
        previous_mean: mean loss over the ``window`` steps before those.
        relative_change: ``|last_mean - previous_mean| / max(|previous_mean|, 1)``.
        slope: least-squares slope of the loss over the last ``window`` steps, per step.
        noise: standard error of ``last_mean - previous_mean`` from the losses' scatter.
        window: steps in each window (a tenth of the steps, at least 1).
        converged: ``relative_change <= rtol`` or the change is within 3 ``noise``.
        message: one line for people.
    """

    steps: int
    final_loss: float
    last_mean: float
    previous_mean: float
    relative_change: float
    slope: float
    noise: float
    window: int
    converged: bool
    message: str


def convergence_report(losses, *, rtol: float = 1e-4) -> ConvergenceReport:
    """Compare the mean loss of the last tenth of the steps with the tenth before it.

    Args:
        losses: (steps,) loss trace.
        rtol: relative change below which the loss counts as settled.
    """
    losses = np.asarray(losses, dtype=np.float64)
    steps = losses.size
    if steps == 0:
        raise ValueError("no losses to report on (steps = 0)")
    window = max(1, steps // 10)
    last = losses[-window:]
    prev = losses[-2 * window : -window] if steps >= 2 * window else losses[:window]
    last_mean, prev_mean = float(last.mean()), float(prev.mean())
    change = abs(last_mean - prev_mean) / max(abs(prev_mean), 1.0)
    noise = float(np.sqrt(last.var() / last.size + prev.var() / prev.size))
    slope = float(np.polyfit(np.arange(last.size), last, 1)[0]) if last.size > 1 else 0.0
    finite = bool(np.all(np.isfinite(losses)))
    converged = finite and (change <= rtol or abs(last_mean - prev_mean) <= 3 * noise)
    if not finite:
        message = "not converged: the loss became non-finite; lower the learning rate"
    elif converged:
        message = (
            f"converged: mean loss {last_mean:.6g} over the last {window} steps, relative change "
            f"{change:.2e} from the {window} before (rtol {rtol:g}; noise {noise:.2e})"
        )
    else:
        message = (
            f"not converged: mean loss {last_mean:.6g} over the last {window} steps moved by "
            f"{change:.2e} (relative, rtol {rtol:g}) from the {window} before, slope "
            f"{slope:.3g}/step; run more steps (fit_svi(..., resume=result)) or adjust the "
            "learning rate"
        )
    return ConvergenceReport(
        steps=steps,
        final_loss=float(losses[-1]),
        last_mean=last_mean,
        previous_mean=prev_mean,
        relative_change=float(change),
        slope=slope,
        noise=noise,
        window=window,
        converged=converged,
        message=message,
    )


def make_optimizer(
    name: str = "adam",
    learning_rate: float = 1e-2,
    *,
    schedule: str = "constant",
    steps: int = 1000,
    clip_norm: float | None = None,
) -> optax.GradientTransformation:
    """An optax optimiser by name with a learning-rate schedule.

    Args:
        name: one of ``OPTIMIZERS`` (adam, adamw, adabelief, radam, rmsprop, sgd, lamb).
        learning_rate: peak learning rate (> 0).
        schedule: ``"constant"``, ``"cosine"`` (cosine decay to 1% over ``steps``),
            ``"exponential"`` (to 1% over ``steps``), ``"linear"`` (to 1%), ``"warmup_cosine"``
            (linear warm-up over the first 10% of ``steps``, then cosine decay to 1%).
        steps: the schedule's horizon; past it the final rate is kept.
        clip_norm: clip the gradient's global norm to this value first (None: no clipping).

    Raises:
        ValueError: unknown name or schedule, non-positive rate or steps.
    """
    check_choice("optimizer", name, tuple(OPTIMIZERS))
    check_choice("schedule", schedule, SCHEDULES)
    if not learning_rate > 0:
        raise ValueError(f"learning_rate must be > 0, got {learning_rate}")
    steps = check_positive_int("steps", steps)
    return _optimizer(name, float(learning_rate), schedule, steps, clip_norm)


@functools.lru_cache(maxsize=64)
def _optimizer(name, learning_rate, schedule, steps, clip_norm):
    """:func:`make_optimizer`'s transformation, one object per setting: equal settings give the
    same object, so SVI programs of other fits with it are shared (:func:`_shared_svi`)."""
    end = FINAL_FRACTION * learning_rate
    if schedule == "constant":
        lr = learning_rate
    elif schedule == "cosine":
        lr = optax.cosine_decay_schedule(learning_rate, steps, alpha=FINAL_FRACTION)
    elif schedule == "exponential":
        lr = optax.exponential_decay(learning_rate, steps, FINAL_FRACTION, end_value=end)
    elif schedule == "linear":
        lr = optax.linear_schedule(learning_rate, end, steps)
    else:
        lr = optax.warmup_cosine_decay_schedule(
            0.0, learning_rate, max(1, steps // 10), steps, end_value=end
        )
    if callable(lr):
        # optax counts steps in int32; a float count keeps the schedule's arithmetic in one
        # floating dtype (no int/float mixing)
        schedule_fn = lr
        lr = lambda count: schedule_fn(jnp.asarray(count).astype(jnp.result_type(float)))
    opt = OPTIMIZERS[name](lr)
    if clip_norm is not None:
        opt = optax.chain(optax.clip_by_global_norm(clip_norm), opt)
    return opt


class SortedTrace_ELBO(ELBO):
    """The ELBO of NumPyro's ``Trace_ELBO`` (one sample of the guide per particle, the model
    replayed on it, ``log p(x, z) - log q(z)``), each density summed in trace order.

    ``Trace_ELBO`` subtracts and sums the per-site terms over a Python ``set`` of site names,
    whose order follows the process's string-hash seed (``PYTHONHASHSEED``): its SVI program
    then differs from process to process in the order of its operations (so in its last bits,
    and in its compilation-cache key: JAX's persistent cache never reuses an SVI program that
    another process compiled). Here both densities come from ``numpyro.infer.util.log_density``
    (sites in the order the model and guide run). Mutable state (``numpyro.mutable``) is not
    supported.
    """

    def _key(self):
        return (type(self), self.num_particles, self.vectorize_particles)

    def __eq__(self, other):  # by value: equal ELBOs share SVI programs (:func:`_shared_svi`)
        return isinstance(other, SortedTrace_ELBO) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def loss_with_mutable_state(self, rng_key, param_map, model, guide, *args, **kwargs):
        def single_particle_elbo(key):
            model_seed, guide_seed = jax.random.split(key)
            guide_density, guide_trace = log_density(
                handlers.seed(guide, guide_seed), args, kwargs, param_map
            )
            model_density, _ = log_density(
                handlers.replay(handlers.seed(model, model_seed), guide_trace),
                args,
                kwargs,
                param_map,
            )
            return model_density - guide_density

        if self.num_particles == 1:
            elbo = single_particle_elbo(rng_key)
        else:
            keys = jax.random.split(rng_key, self.num_particles)
            elbo = jnp.mean(self.vectorize_particles_fn(single_particle_elbo, keys))
        return {"loss": -elbo, "mutable_state": None}


def default_guide(bayes_model) -> str:
    """The guide ``fit_svi(guide="auto")`` uses: ``"ensemble"`` where the model has network
    weights, else ``"delta"``.

    A MAP of a network is a point: its rollout bands would have zero width. The ensemble
    (Lakshminarayanan et al. 2017) fits a MAP from each of ``restarts`` prior draws (4 by
    default) in one vmapped program, each stopped on its own validation minimum where
    ``validation`` is given; the posterior is their equal-weight mixture, a Bayesian model
    average over modes (Wilson & Izmailov 2020), less the members that failed
    (:func:`_member_weights`). Why not the low-rank Gaussian around one MAP
    (``"lowrank"``, the default before): its scales start at ``init_scale`` (1e-3) and Adam moves
    them by about the learning rate per step, so in a few thousand steps a weight's sd stays near
    1e-3, and where the held-out error is the network's own (it generalises worse than it fits)
    its bands under-covered (Furuta ``ffnn``: 57 % / 28 % for 90 % bands; the ensemble of four
    early-stopped MAPs: 93 % / 90 %, docs/measurements.md). NUTS over ~10^3 weights does not mix
    in a usable time. White-box models keep the MAP: NUTS from it is their posterior.
    """
    return "ensemble" if getattr(bayes_model, "has_networks", False) else "delta"


def _make_guide(name: str, model, *, init_loc_fn, init_scale: float, rank):
    if name == "delta":
        return AutoDelta(model, init_loc_fn=init_loc_fn)
    if name == "normal":
        return AutoNormal(model, init_loc_fn=init_loc_fn, init_scale=init_scale)
    if name == "mvn":
        return AutoMultivariateNormal(model, init_loc_fn=init_loc_fn, init_scale=init_scale)
    return AutoLowRankMultivariateNormal(
        model, init_loc_fn=init_loc_fn, init_scale=init_scale, rank=rank
    )


def _run_svi(
    svi,
    state,
    data,
    *,
    steps,
    chunk_size,
    model_kwargs,
    label,
    progress,
    batched=False,
    monitor=None,
    step=None,
    shared=None,
):
    """Run ``steps`` SVI updates as compiled chunks. Returns (state, losses, compile_s, run_s).

    With ``batched`` the state's leaves carry a leading restart axis (R, ...) and the updates are
    vmapped over it (losses (steps, R)); a restart whose loss turns non-finite keeps running
    (it is scored out later) and only all of them turning non-finite stops the run.

    With a ``monitor`` (an :class:`EarlyStopping`) the state is scored after every chunk; the run
    stops after ``monitor.patience`` scores without improvement and returns the best-scored
    state (the losses are those of every step run).

    ``step``: a ``(state, data) -> (state, loss)`` update run in place of ``svi.update`` (its
    own batching; e.g. :func:`_lbfgs_step`), ``svi`` then unused.

    ``shared``: :func:`_shared_svi`'s ``(program, model argument)`` for ``svi``: the chunks
    then run the program shared by every model of the same structure (``svi`` and ``batched``
    unused; ``model_kwargs`` are the program's).
    """
    if shared is not None:
        program, held = shared
        batched = program.value[1]

        def compile_chunk(length):
            return _SHARED_CHUNK.lower(program, held, state, data, length).compile()

        def run_chunk(compiled, state):
            return compiled(held, state, data)

    else:
        if step is None:

            def update(s, d):
                return svi.update(s, d, **model_kwargs)

            step = jax.vmap(update, in_axes=(0, None)) if batched else update

        def chunk(state, data, length):  # the data an argument, not constants of the program
            def body(s, _):
                return step(s, data)

            return lax.scan(body, state, None, length=length)

        def compile_chunk(length):
            return jax.jit(chunk, static_argnums=2).lower(state, data, length).compile()

        def run_chunk(compiled, state):
            return compiled(state, data)

    return _run_chunks(
        compile_chunk,
        run_chunk,
        state,
        steps=steps,
        chunk_size=chunk_size,
        batched=batched,
        label=label,
        progress=progress,
        monitor=monitor,
    )


def _held_model_fn(data, *, held_model_argument, **kwargs):
    """The model a :class:`models.arguments.ModelArgument` holds, on ``data``: the model of
    SVI programs shared across models (:func:`_shared_svi`)."""
    return held_model(held_model_argument).model(data, **kwargs)


def _shared_svi(bayes_model, svi, opt, data, *, model_kwargs, batched):
    """``(program, model argument)`` for :func:`_run_svi`: ``svi``'s update as a program
    traced once for every model of ``bayes_model``'s structure, its array constants an argument
    (``models.arguments``; a variant's two priors and a system's dataset kinds: measured in
    docs/measurements.md). ``svi`` must be initialised (``SVI.init``); ``opt`` is its optax
    transformation (:func:`make_optimizer`'s, one object per setting).

    None where it cannot be shared: guides other than the delta guide (the others' post-processing
    holds the model they were set up with), data that are not arrays, unhashable model kwargs.
    The program's key names what of ``svi`` it runs besides the model: the optimiser, the ELBO,
    the guide's kind and prefix (its sites follow from the model's structure), the batching.
    """
    if type(svi.guide) is not AutoDelta or not shareable(bayes_model, data):
        return None
    key = ("svi", opt, svi.loss, svi.guide.prefix, batched, tuple(sorted(model_kwargs.items())))
    try:
        hash(key)
    except TypeError:
        return None
    program = SVI(_held_model_fn, svi.guide, svi.optim, svi.loss)
    program.constrain_fn = svi.constrain_fn  # the guide's parameter constraints, from SVI.init
    return SharedStatic(key, (program, batched, dict(model_kwargs))), model_argument(bayes_model)


def _shared_chunk(program, held, state, data, length):
    svi, batched, model_kwargs = program.value

    def update(s, d):
        return svi.update(s, d, held_model_argument=held, **model_kwargs)

    step = jax.vmap(update, in_axes=(0, None)) if batched else update
    return lax.scan(lambda s, _: step(s, data), state, None, length=length)


_SHARED_CHUNK = jax.jit(_shared_chunk, static_argnums=(0, 4))


def _shared_score_of(shared, latent, num_obs: int):
    """``(state, data) -> score``: :class:`~inference.early_stopping.EarlyStopping`'s held-out
    negative log-likelihood per observation at the delta guide's median, compiled as a program
    shared like the SVI chunk of ``shared`` (:func:`_shared_svi`); (R,) for batched states."""
    program, held = shared
    key = (*program.key, "score", tuple(latent), num_obs)
    score = SharedStatic(key, (*program.value, latent, num_obs))
    return functools.partial(_SHARED_SCORE, score, held)


def _shared_score(program, held, state, data):
    svi, batched, model_kwargs, latent, num_obs = program.value
    nll = heldout_nll(held_model(held), data, num_obs)

    def score(s):
        point = svi.guide.median(svi.get_params(s))
        return nll({k: point[k] for k in latent}, data)

    return jax.vmap(score)(state) if batched else score(state)


_SHARED_SCORE = jax.jit(_shared_score, static_argnums=0)


def _run_chunks(
    compile_chunk, run_chunk, state, *, steps, chunk_size, batched, label, progress, monitor
):
    """:func:`_run_svi`'s loop: ``compile_chunk(length)`` a program of ``length`` steps,
    ``run_chunk(compiled, state) -> (state, losses)``."""
    chunk_size = min(chunk_size, steps)
    compiled = {}
    t0 = time.perf_counter()
    compiled[chunk_size] = compile_chunk(chunk_size)
    compile_s = time.perf_counter() - t0
    bar = ProgressLine(label, steps, enabled=progress)
    losses = []
    done = 0
    t0 = time.perf_counter()
    while done < steps:
        length = min(chunk_size, steps - done)
        if length not in compiled:
            compiled[length] = compile_chunk(length)
        new_state, chunk_losses = run_chunk(compiled[length], state)
        chunk_losses = np.asarray(chunk_losses)
        if batched and np.any(np.isfinite(chunk_losses[-1])):
            state = new_state
            losses.append(chunk_losses)
            done += length
            score = None if monitor is None else monitor.record(state, monitor.start + done)
            bar.update(done, loss=float(np.nanmin(chunk_losses[-1])), validation=score)
            if monitor is not None and monitor.exhausted:
                break
            continue
        nonfinite = ~np.isfinite(chunk_losses)
        if nonfinite.ndim > 1:
            nonfinite = nonfinite.all(axis=1)
        if np.any(nonfinite):
            bad = done + int(np.flatnonzero(nonfinite)[0])
            warnings.warn(
                f"SVI loss became non-finite at step {bad}; stopped and kept the state of step "
                f"{done}. Lower the learning rate or start closer to the MAP.",
                RuntimeWarning,
                stacklevel=3,
            )
            losses.append(chunk_losses[: bad - done])
            break
        state = new_state
        losses.append(chunk_losses)
        done += length
        if monitor is None:
            bar.update(done, loss=float(chunk_losses[-1]))
            continue
        score = monitor.record(state, monitor.start + done)
        bar.update(done, loss=float(chunk_losses[-1]), validation=score)
        if monitor.exhausted:
            break
    bar.close()
    if monitor is not None and monitor.best_state is not None:
        state = monitor.best_state
    run_s = time.perf_counter() - t0
    return state, np.concatenate(losses) if losses else np.zeros(0), compile_s, run_s


TRAIN_DTYPES = ("float32", "float64")


def with_float_dtype(tree, dtype):
    """``tree`` with its floating arrays cast to ``dtype`` (None: unchanged; integer arrays and
    other leaves are kept)."""
    if dtype is None:
        return tree
    return jax.tree.map(
        lambda x: jnp.asarray(x, dtype)
        if isinstance(x, jax.Array | np.ndarray) and jnp.issubdtype(x.dtype, jnp.floating)
        else x,
        tree,
    )


def _start_points(bayes_model, key, restarts: int):
    """Prior draws to start from (``bayes_model.start_sample``), or None (prior means)."""
    if not hasattr(bayes_model, "start_sample"):
        return None
    return [bayes_model.start_sample(k) for k in jax.random.split(key, restarts)]


WHITE_BOX_RESTARTS = 4
"""Prior draws the white-box start (:func:`fit_white_box_start`) is fitted from; the lowest loss
after the restart steps continues (``fit_svi``'s ``restarts``). From one draw, two quick-grid
cells started their every member in a poor mode: Furuta trajectories ``diffnea/ffnn/weak`` and
Furuta uniform ``nokin-diffnea/nn-friction/weak`` (seed 1; held-out NMSE 0.59 and 0.45 with
L-BFGS members); from four, 0.0006 and 1.2e-6 with the grid's Adam members (docs/
measurements.md, "The white-box start from four prior draws")."""


class WhiteBoxStart(NamedTuple):
    """Where a weak-prior hybrid starts its rigid body (:func:`fit_white_box_start`).

    ``values``: ``{site: array}`` of the white-box counterpart's MAP (the family's latent
    sites); ``record`` (JSON-able): ``variant`` (the counterpart's name), ``sites``,
    ``restarts`` (its restarts' scores), ``map_converged`` and ``seconds`` (the fit's time)."""

    values: dict
    record: dict


def _white_box_counterpart(bayes_model):
    """``bayes_model.white_box_start()`` (``(counterpart model, sites)``), None where the model
    names none or has no such method (any object with the model protocol)."""
    return bayes_model.white_box_start() if hasattr(bayes_model, "white_box_start") else None


def fit_white_box_start(
    bayes_model, observations, *, key, steps, learning_rate=1e-2, train_dtype=None,
    progress=False,
) -> WhiteBoxStart | None:
    """The rigid-body start of a model whose ``white_box_start()`` names one
    (``models.BayesianModel.white_box_start``: weak-prior hybrids): the Newton-polished MAP of
    its white-box counterpart after ``steps`` SVI steps in ``train_dtype`` from ``key``,
    continuing the best of :data:`WHITE_BOX_RESTARTS` prior draws; None for other models. It
    depends on the counterpart and the data only, so the hybrids of one dataset that share a
    counterpart (``nn-friction``, ``nn-residual``, ``ffnn`` actuators) can share it
    (``fit_svi``'s ``white_box_start``)."""
    staged = _white_box_counterpart(bayes_model)
    if staged is None:
        return None
    model, sites = staged
    started = time.perf_counter()
    fit = fit_svi(
        model,
        observations,
        key=key,
        steps=steps,
        learning_rate=learning_rate,
        polish=True,
        restarts=WHITE_BOX_RESTARTS,
        train_dtype=train_dtype,
        progress=progress,
        num_predictive=0,
        log_likelihood=False,
    )
    record = {
        "variant": model.spec.name,
        "sites": list(sites),
        "restarts": fit.attrs.get("restarts"),
        "map_converged": bool((fit.attrs.get("convergence") or {}).get("converged")),
        "seconds": time.perf_counter() - started,
    }
    return WhiteBoxStart(point_values(fit, sites), record)


def _check_white_box_start(bayes_model, start: WhiteBoxStart) -> None:
    """ValueError unless ``start`` is a start of ``bayes_model``'s white-box counterpart."""
    staged = _white_box_counterpart(bayes_model)
    if staged is None:
        raise ValueError(
            f"white_box_start: {bayes_model.name!r} does not start from a white-box MAP "
            "(only weak-prior hybrids with a rigid body do)"
        )
    model, sites = staged
    if start.record.get("variant") != model.spec.name or set(start.values) != set(sites):
        raise ValueError(
            f"white_box_start: {bayes_model.name!r} starts from a MAP of {model.spec.name!r} "
            f"over sites {list(sites)}; got one of {start.record.get('variant')!r} over "
            f"{sorted(start.values)}"
        )


def _init_starts(bayes_model, make_guide, opt, elbo, data, *, key, starts, model_kwargs):
    """One SVI object and guide and an initial state per start. ``starts``: init_loc_fns or
    ``{site: value}`` points, several only as points (delta guides). The guide is placed at the
    first by ``SVI.init``; each later point's state is the one ``SVI.init`` gives with the delta
    guide's loc params set to the point (tested leaf for leaf), built from the first state's
    parameters without running the model again (each ``SVI.init`` evaluates the model on the
    whole training set op by op: about 1 s a start on 6,250 cart-pole states). Returns
    ``(svi, guide, states)``."""
    first = starts[0] if callable(starts[0]) else init_to_value(values=starts[0])
    guide = make_guide(first)
    svi = SVI(bayes_model.model, guide, optax_to_numpyro(opt), elbo)
    keys = jax.random.split(key, len(starts))
    states = [svi.init(keys[0], data, **model_kwargs)]
    base = svi.optim.get_params(states[0].optim_state)  # unconstrained, as SVI.init stores them
    for point, k in zip(starts[1:], keys[1:], strict=True):
        params = dict(base)
        for site, value in point.items():
            name = f"{site}_{guide.prefix}_loc"
            if name not in params:
                raise ValueError(f"start point site {site!r} is not a latent site of the guide")
            support = guide.prototype_trace[site]["fn"].support
            value = biject_to(support).inv(jnp.asarray(value))
            params[name] = lax.convert_element_type(value, jnp.result_type(value))
        # SVI.init keeps the first of three keys split from its own
        rng_key = jax.random.split(k, 3)[0]
        states.append(SVIState(svi.optim.init(params), states[0].mutable_state, rng_key))
    return svi, guide, states


def _optimise(
    bayes_model,
    make_guide,
    opt,
    elbo,
    data,
    *,
    key,
    starts,
    steps,
    restart_steps,
    chunk_size,
    model_kwargs,
    label,
    progress,
    monitor_factory=None,
):
    """Optimise a guide from one or several starting points (``starts``: :func:`_init_starts`).

    With several, each runs ``restart_steps`` steps (vmapped: one compiled program), the one with
    the lowest mean loss over the last tenth of those steps is kept and runs the remaining
    ``steps - restart_steps``. Returns ``(svi, guide, state, losses, restart_info, timing)``;
    ``restart_info`` is None for one start, else ``{"restarts", "restart_steps", "best",
    "scores"}`` (scores: each restart's mean loss over its last tenth of steps, inf where it
    turned non-finite). ``monitor_factory(point_of)`` (optional; ``point_of(state)``: the
    guide's median) gives the
    :class:`~inference.early_stopping.EarlyStopping` of the remaining steps.
    """
    svi, guide, states = _init_starts(
        bayes_model, make_guide, opt, elbo, data, key=key, starts=starts, model_kwargs=model_kwargs
    )
    timing = {"compile_s": 0.0, "run_s": 0.0}
    info = None
    losses = []
    best = 0
    state = states[0]
    remaining = steps
    if len(states) > 1:
        stacked = jax.tree.map(lambda *x: jnp.stack(x), *states)
        screen = min(restart_steps, steps)
        stacked, batch_losses, c_s, r_s = _run_svi(
            svi,
            stacked,
            data,
            steps=screen,
            chunk_size=max(1, min(chunk_size, screen)),
            model_kwargs=model_kwargs,
            label=f"{label} x{len(states)} starts",
            progress=progress,
            batched=True,
            shared=_shared_svi(
                bayes_model, svi, opt, data, model_kwargs=model_kwargs, batched=True
            ),
        )
        timing["compile_s"] += c_s
        timing["run_s"] += r_s
        tail = batch_losses[-max(1, batch_losses.shape[0] // 10) :]
        scores = np.where(np.all(np.isfinite(tail), axis=0), tail.mean(axis=0), np.inf)
        best = int(np.argmin(scores))
        state = jax.tree.map(lambda x: x[best], stacked)
        losses.append(batch_losses[:, best])
        remaining = steps - batch_losses.shape[0] if np.isfinite(scores[best]) else 0
        info = {
            "restarts": len(states),
            "restart_steps": int(batch_losses.shape[0]),
            "best": best,
            "scores": [float(x) for x in scores],
        }
    if remaining > 0:
        shared = _shared_svi(bayes_model, svi, opt, data, model_kwargs=model_kwargs, batched=False)
        monitor = (
            None if monitor_factory is None else monitor_factory(_median_of(svi, guide), shared)
        )
        if monitor is not None:
            monitor.start = steps - remaining  # its steps count from the stage's start
        state, rest, c_s, r_s = _run_svi(
            svi,
            state,
            data,
            steps=remaining,
            chunk_size=chunk_size,
            model_kwargs=model_kwargs,
            label=label,
            progress=progress,
            monitor=monitor,
            shared=shared,
        )
        timing["compile_s"] += c_s
        timing["run_s"] += r_s
        losses.append(rest)
    losses = np.concatenate(losses) if losses else np.zeros(0)
    return svi, guide, state, losses, info, timing


def _median_of(svi, guide):
    """``state -> {site: value}``: the guide's median at an SVI state."""
    return lambda state: guide.median(svi.get_params(state))


def _lbfgs_step(bayes_model, model_kwargs):
    """``(init, step)`` of L-BFGS (optax's, zoom line search) on each ensemble member's negative
    log joint: ``init(points)`` gives the state ``(points, optimiser state)`` of stacked members
    ``{site: (R, ...)}``, ``step(state, data) -> (state, losses (R,))`` one iteration of each.

    The members run one after another (``lax.map``): under ``vmap`` the line search's branches
    would all be evaluated for every member (cart-pole ``nn-friction``, 4 members: 0.21 s an
    iteration against 0.51 s vmapped; docs/measurements.md).
    """
    opt = optax.lbfgs()

    def member(carry, data):
        z, opt_state = carry

        def loss(x):
            return potential_energy(bayes_model.model, (data,), model_kwargs, x)

        value, grad = optax.value_and_grad_from_state(loss)(z, state=opt_state)
        updates, opt_state = opt.update(
            grad, opt_state, z, value=value, grad=grad, value_fn=loss
        )
        return (optax.apply_updates(z, updates), opt_state), value

    def init(points):
        return points, jax.vmap(opt.init)(points)

    def step(state, data):
        return lax.map(lambda c: member(c, data), state)

    return init, step


def _optimise_ensemble(
    bayes_model, make_guide, opt, data, *, key, starts, steps, chunk_size, model_kwargs,
    progress, monitor_factory=None,
):
    """MAPs from every start (``starts``: points, :func:`_init_starts`), all run for ``steps``
    in one program (a deep ensemble; each member stops on its own validation minimum where
    ``monitor_factory`` gives a batched monitor). ``opt``: an optax optimiser (Adam etc.: SVI
    steps, vmapped over the members) or ``LBFGS`` (:func:`_lbfgs_step`: ``steps`` iterations).
    Returns ``(stacked points {site: (R, ...)}, guide, stacked state, losses (steps, R),
    timing)``; ``guide`` names the members' parameters (a delta guide, placed at the first).
    """
    if opt == LBFGS:
        # a callable start is init_to_mean() (a model without prior draws): the latent sites at
        # their prior means, as trace_sites gives them (traced once for all such starts)
        if not all(isinstance(s, dict) for s in starts):
            means = trace_sites(bayes_model, data)[0]
            starts = [s if isinstance(s, dict) else means for s in starts]
        guide = make_guide(init_to_value(values=starts[0]))
        init, step = _lbfgs_step(bayes_model, model_kwargs)
        state = init(jax.tree.map(lambda *x: jnp.stack(x), *starts))
        point_of, svi, label = (lambda s: s[0]), None, f"l-bfgs ensemble x{len(starts)}"
        shared = None
    else:
        svi, guide, states = _init_starts(
            bayes_model, make_guide, opt, SortedTrace_ELBO(), data, key=key, starts=starts,
            model_kwargs=model_kwargs,
        )
        state = jax.tree.map(lambda *x: jnp.stack(x), *states)
        point_of, step, label = _median_of(svi, guide), None, f"svi ensemble x{len(states)}"
        shared = _shared_svi(bayes_model, svi, opt, data, model_kwargs=model_kwargs, batched=True)
    monitor = None if monitor_factory is None else monitor_factory(point_of, shared)
    state, losses, c_s, r_s = _run_svi(
        svi,
        state,
        data,
        steps=steps,
        chunk_size=chunk_size,
        model_kwargs=model_kwargs,
        label=label,
        progress=progress,
        batched=True,
        monitor=monitor,
        step=step,
        shared=shared,
    )
    points = jax.vmap(point_of)(state)
    return points, guide, state, losses, {"compile_s": c_s, "run_s": r_s}


def _noise_sites(bayes_model, members: dict) -> list:
    """The model's latent noise sites (``GaussianSite``: log scales, learned log degrees of
    freedom) present in ``members``."""
    return [s for s in getattr(bayes_model, "noise_sites", ()) if s.site in members]


def _profile_noise(bayes_model, data, members: dict) -> tuple[dict, list]:
    """Each member's noise scales at their conditional MAP given its other values.

    Adam at a constant rate leaves the log-noise sites behind the residual while the weights
    still move (measured, cart-pole foreign log, ``nn-friction``: sigma 1.4-1.8x the training
    residual's rms at the kept step, bands covering 0.99 instead of 0.90); a few damped Newton
    steps on those sites alone (:func:`inference.polish.polish_map_batched` with ``sites``, a
    convex problem for Normal noise) put them where the member's own likelihood has them.
    ``members``: ``{latent site: (R, ...)}``. Returns ``(members, [MapReport._asdict() per
    member])``; unchanged and ``[]`` where the model has no latent noise sites.
    """
    sites = _noise_sites(bayes_model, members)
    if not sites:
        return members, []
    R = next(iter(members.values())).shape[0]
    batched = jax.tree.map(lambda x: jnp.broadcast_to(x, (R, *jnp.shape(x))), data)
    out, reports = polish_map_batched(
        bayes_model, batched, members, sites=[s.site for s in sites], max_iter=50
    )
    return out, [r._asdict() for r in reports]


TAILS = ("auto", "trained", "profiled")
"""How learned Student-t degrees of freedom (``student_df=None``) are fitted: ``"trained"``
with the other latent values, ``"profiled"`` after an ensemble's network weights
(:data:`HELD_DF`); ``"auto"``: ``"profiled"`` for an ensemble, else ``"trained"``."""

HELD_DF = 1e3
"""Degrees of freedom held while an ensemble's members train with ``tails="profiled"``: errors
all but Normal, so the weights minimise squared error, as with Normal noise. Then each member's
scales and degrees of freedom are profiled on its training residuals (:func:`_profile_noise`).
Tails learned with the weights let a network leave large errors unexplained: on 60 s of the
Furuta foreign log (seed 2) ``ffnn`` reached held-out NMSE 0.129 on the arm against 0.0058 with
Normal noise (docs/measurements.md, "Tails fitted after the weights")."""


def _df_sites(bayes_model) -> list:
    """The model's learned log degrees of freedom (``GaussianSite``), [] for none."""
    return [s for s in getattr(bayes_model, "noise_sites", ()) if s.name.startswith("log_df_")]


def _holding(opt, sites) -> optax.GradientTransformation:
    """``opt`` leaving the delta guide's parameters of the latent ``sites`` where they start
    (one object per ``opt`` and sites, as :func:`make_optimizer`)."""
    return _held_sites(opt, tuple(sites))


@functools.lru_cache(maxsize=64)
def _held_sites(opt, sites: tuple) -> optax.GradientTransformation:
    prefixes = tuple(f"{site}_" for site in sites)

    def labels(params):
        return {k: "held" if k.startswith(prefixes) else "trained" for k in params}

    return optax.multi_transform({"trained": opt, "held": optax.set_to_zero()}, labels)


MEMBER_SCORE_GAP = 1.0
"""Nats per observed scalar by which an ensemble member's training negative log-likelihood (at
its profiled noise) may exceed the best member's before the member counts as a failed
optimisation and gets no weight (for Gaussian errors: a residual variance about ``e^2`` = 7.4x
the best member's)."""


def _member_weights(bayes_model, data, num_obs: int, members: dict) -> tuple[np.ndarray, list]:
    """Mixture weights of the members ``{latent site: (R, ...)}``: 0 for a failed optimisation,
    equal for the others (the deep ensemble). Returns ``(weights (R,), training NLL per observed
    scalar of each member)``.

    A member fails where its negative log-likelihood of the training data (``data``, prepared;
    ``num_obs`` observed scalars) exceeds the best member's by more than
    :data:`MEMBER_SCORE_GAP`: it ended in a poor mode (cart-pole hardware-like
    ``diffnea/nn-residual/weak`` after 1,000 steps: training loss 14.0 / 47.0 / 2.65 / 83.4 per
    scalar; the equal-weight mixture's held-out NMSE 1.57). Judged on the validation episode
    instead, members that fit their training data equally well but extrapolate worse to that one
    episode were dropped (Furuta ``ffnn``: validation NLL 4.95 / 4.75 / 6.84 / 5.90 at training
    losses 3.0-3.2), and the band of the other two under-covered the test episodes. Stacking
    weights (Yao et al. 2018) fitted on the validation episode put 0.87 on one of four members
    of equal quality (cart-pole ``ffnn``): they collapse the mixture's spread, so not used.
    """
    lp = jax.vmap(heldout_log_likelihood(bayes_model, data))(members)  # (R, M)
    nll = -np.asarray(jnp.sum(lp, axis=1), np.float64) / num_obs
    finite = np.isfinite(nll)
    best = np.min(nll, where=finite, initial=np.inf)
    keep = finite & (nll <= best + MEMBER_SCORE_GAP)
    keep = keep if keep.any() else np.ones(nll.size, bool)
    return keep / keep.sum(), nll.tolist()


CALIBRATION_FLOOR = 1.0
"""Smallest noise factor :func:`_calibrate_mixture` fits: the validation episodes may widen the
members' noise scales, never narrow them below the training residual's. A model errs on
episodes it has not seen at least as much as on those it was fitted to, in expectation; a
factor below 1 came from a validation episode quieter than the others and carried that
episode's luck to every prediction (cart-pole hardware-like ``diffnea/nn-residual/informative``,
seed 1: factors 0.79 / 0.57, the pole's band covering 0.75 of the held-out episode; 0.91 with
the floor). The cost, measured: where the members' spread already widens the mixture, a factor
below 1 was right (Furuta foreign log, seed 0: further episodes covered 0.94-0.97 with the
floor, 0.93-0.95 without). Over-coverage is kept as the safer error (docs/measurements.md,
"Noise on the effort, and a floor under the noise factor")."""


def _calibrate_mixture(
    bayes_model, val_data, num_obs: int, members: dict, weights
) -> tuple[dict, dict]:
    """Scale the members' noise by one factor per noise element (e.g. per joint), at least
    :data:`CALIBRATION_FLOOR`, to maximise the log predictive density of the validation data
    under the mixture with ``weights`` (R,) (:func:`_member_weights`).

    A member's noise scales are its training residual's (:func:`_profile_noise`); a network
    stopped at its validation minimum errs more on episodes it has not seen, and the
    disagreement of a few members stands in for the weight posterior only roughly: measured on
    Furuta ``ffnn`` (trajectories), training-residual noise gave held-out 90 % bands covering
    0.87 / 0.79. The factors are fitted on the validation episodes by the logarithmic score (a
    proper scoring rule, the criterion stacking uses), one L-BFGS optimisation of a few
    numbers. ``members``: ``{latent site: (R, ...)}``. Returns ``(members, record)``: ``record``
    holds each member's ``member_validation_nll`` (per observed scalar, ``num_obs``),
    ``factor`` per noise site and the validation negative log predictive density per observed
    scalar of the equal-weight mixture of all members before and of the weighted, scaled one
    after.
    """
    from scipy.optimize import minimize
    from scipy.special import logsumexp

    # the scales only: learned Student-t degrees of freedom keep their profiled values
    sites = [s for s in _noise_sites(bayes_model, members) if s.name.startswith("log_sigma_")]
    R = next(iter(members.values())).shape[0]
    loglik = jax.vmap(heldout_log_likelihood(bayes_model, val_data), in_axes=(0, None))
    dtype = next(iter(members.values())).dtype
    # a log factor d moves the latent by d / scale where the site is whitened (log sigma = loc +
    # scale z), by d where it is log sigma itself
    per_unit = [
        jnp.asarray(1.0 / s.prior.scale if s.whitened else np.ones(s.shape), dtype) for s in sites
    ]
    sizes = [int(np.prod(s.shape)) for s in sites]

    def shifted(d, members=members):
        out = dict(members)
        if not sites:
            return out
        for s, part, unit in zip(
            sites, jnp.split(d, np.cumsum(sizes)[:-1]), per_unit, strict=True
        ):
            out[s.site] = members[s.site] + (part.reshape(s.shape) * unit)[None]
        return out

    lp = np.asarray(loglik(members, val_data), np.float64)  # (R, M)
    member_nll = -lp.sum(axis=1) / num_obs
    weights = np.asarray(weights, np.float64)
    kept = np.flatnonzero(weights > 0)
    # the weighted members and data as arguments of the compiled objective, not its constants
    log_w = jnp.asarray(np.log(weights[kept]), dtype)
    operands = (val_data, {k: v[kept] for k, v in members.items()}, log_w)

    def nlpd(d, data, kept_members, log_w):  # summed (per-observation means stop L-BFGS early)
        lpd = loglik(shifted(d, kept_members), data)  # (kept, M)
        return -jnp.sum(jax.scipy.special.logsumexp(lpd + log_w[:, None], axis=0))

    before = float(-np.sum(logsumexp(lp, axis=0) - np.log(R)))
    if sites:
        value_and_grad = jax.jit(jax.value_and_grad(nlpd))  # the data an argument

        def fun(d):
            v, g = value_and_grad(jnp.asarray(d, dtype), *operands)
            return float(v), np.asarray(g, np.float64)

        x = np.zeros(sum(sizes))
        after = fun(x)[0]
        bounds = [(np.log(CALIBRATION_FLOOR), 3.0)] * x.size
        opt = minimize(fun, x, jac=True, method="L-BFGS-B", bounds=bounds)
        if np.isfinite(opt.fun) and opt.fun <= after:
            x, after = opt.x, float(opt.fun)
    else:
        x, after = np.zeros(0), float(nlpd(jnp.zeros(0, dtype), *operands))
    parts = np.split(np.asarray(x, np.float64), np.cumsum(sizes)[:-1]) if sites else []
    record = {
        "member_validation_nll": member_nll.tolist(),
        "factor": {s.name: np.exp(part).tolist() for s, part in zip(sites, parts, strict=True)},
        "validation_nlpd_before": before / num_obs,
        "validation_nlpd_after": after / num_obs,
    }
    return shifted(jnp.asarray(x, dtype)), record


def _members_dataset(members: dict, weights) -> xr.Dataset:
    """The ensemble's members ``{site: (R, ...)}`` and their mixture weights as the result's
    ``ensemble`` group (dimension ``member``; read by ``FitResult.ensemble_members``)."""
    out = {"weight": ("member", np.asarray(weights, np.float64))}
    for site, v in members.items():
        name = stored_name(site)
        dims = tuple(f"{name}_dim_{i}" for i in range(np.ndim(v) - 1))
        out[name] = (("member", *dims), np.asarray(v))
    return xr.Dataset(out)


def allocate_draws(weights, num_samples: int, key) -> np.ndarray:
    """Member index of each of ``num_samples`` draws of a mixture with ``weights`` (R,).

    Member i gets ``n_i`` draws, ``n_i`` the largest-remainder rounding of ``num_samples *
    w_i`` (a stratified allocation: the draws carry the weights exactly up to rounding), in an
    order drawn with ``key`` (a ``jax.random`` key), so that any prefix or evenly spaced subset
    (``analysis.rollouts.thin_draws``) is a random sample of the mixture, not of one member.
    """
    w = np.asarray(weights, np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be a non-empty vector of non-negative numbers, got {w}")
    share = num_samples * w / w.sum()
    counts = np.floor(share).astype(int)
    remainder = share - counts
    counts[np.argsort(-remainder, kind="stable")[: num_samples - counts.sum()]] += 1
    member = np.repeat(np.arange(w.size), counts)
    return member[np.asarray(jax.random.permutation(key, num_samples))]


def _gradient_norm(bayes_model, data, point: dict, model_kwargs: dict):
    """Euclidean norm of the gradient of the negative log joint at ``point`` (a JAX scalar)."""
    g = jax.grad(lambda z: potential_energy(bayes_model.model, (data,), model_kwargs, z))(point)
    return jnp.sqrt(sum(jnp.sum(jnp.square(v)) for v in jax.tree.leaves(g)))


def gradient_norm(bayes_model, data, point: dict, *, model_kwargs=None) -> float:
    """Euclidean norm of the gradient of the negative log joint at ``point`` ({site: value}).

    Every latent site of the models is real-valued, so the gradient is in the coordinates the
    optimiser moves (whitened by default). Evaluated like NumPyro's setup evaluates it (outside
    ``jit``), so it reuses the programs that setup compiled instead of compiling the gradient
    once more; for several points see :func:`gradient_norms`.
    """
    return float(_gradient_norm(bayes_model, data, point, model_kwargs or {}))


def _gradient_norms(bayes_model, data, points: dict):
    bayes_model = held_model(bayes_model)
    return jax.vmap(lambda p: _gradient_norm(bayes_model, data, p, {}))(points)


# traced once per model structure and data / point shapes (models.arguments)
_shared_gradient_norms = jax.jit(_gradient_norms)


def gradient_norms(bayes_model, data, points: dict) -> np.ndarray:
    """:func:`gradient_norm` (R,) at each of the stacked ``points`` ({site: (R, ...)}), in one
    compiled, vmapped program: an ensemble's members (op by op each member's took ~1 s on a
    quick-grid network model of 6,250 states; measured on three network cells of dataset seed
    2, the four members' norms took 1.9-2.5 s in all against 2.8-4.5 s)."""
    if shareable(bayes_model, data):
        out = _shared_gradient_norms(model_argument(bayes_model), data, points)
    else:
        out = jax.jit(lambda p: _gradient_norms(bayes_model, data, p))(points)
    return np.asarray(out, np.float64)


def gradient_check(grad_norm: float, *, dimension: int, num_obs: int, tol: float = 1.0):
    """Whether the gradient is small: ``rms gradient / sqrt(num_obs) <= tol``.

    A sum of ``num_obs`` per-observation scores of unit size has a sampling spread of
    ``sqrt(num_obs)``; a gradient below it puts the point within about one posterior standard
    deviation of the mode along each (whitened) coordinate. Returns ``(ok, relative)``.
    """
    relative = grad_norm / np.sqrt(max(dimension, 1)) / np.sqrt(max(num_obs, 1))
    return bool(np.isfinite(relative) and relative <= tol), float(relative)


def fit_svi(
    bayes_model,
    data,
    *,
    key,
    guide: str = "auto",
    steps: int = 3000,
    learning_rate: float = 1e-2,
    optimizer: str = "adam",
    schedule: str = "constant",
    clip_norm: float | None = None,
    map_steps: int | None = None,
    init_scale: float = 1e-3,
    rank: int | None = None,
    num_particles: int = 1,
    num_samples: int = 1000,
    chunk_size: int | None = None,
    subsample_size: int | None = None,
    init=None,
    restarts: int | None = None,
    restart_steps: int | None = None,
    white_box_start: WhiteBoxStart | None = None,
    resume: FitResult | None = None,
    validation=None,
    output_layer: str = "auto",
    patience: int = 5,
    min_delta: float = 0.0,
    convergence_rtol: float = 1e-4,
    polish: bool = False,
    gradient_tol: float = 1.0,
    num_predictive: int = 200,
    log_likelihood: bool = True,
    complete: bool = True,
    train_dtype: str | None = None,
    tails: str = "auto",
    progress: bool = True,
) -> FitResult:
    """Fit ``bayes_model`` to ``data`` by SVI and return the guide's posterior as a result.

    Args:
        bayes_model: a ``models.BayesianModel`` (or any object with its protocol).
        data: ``models.ModelData`` (fields ``q, qd, qdd, tau`` (N, n)) or a ``data.Dataset``.
        key: ``jax.random`` key or int seed (MAP stage, ELBO noise, guide draws, predictive).
        guide: ``"delta"`` (MAP), ``"normal"``, ``"mvn"``, ``"lowrank"`` (Gaussians started at
            a MAP), ``"ensemble"`` (MAPs from ``restarts`` prior draws, an equal-weight
            mixture of the members that did not fail, :func:`_member_weights`: ``num_samples``
            draws allocated by weight in a random order, ``attrs["ensemble"]["draw_member"]``;
            the members and weights in the result's ``ensemble`` group,
            ``FitResult.ensemble_members``; each member's noise scales at their conditional MAP
            given its other values, :func:`_profile_noise`; recorded in ``attrs["ensemble"]``)
            or ``"auto"``
            (:func:`default_guide`: ``"ensemble"`` where the model has network weights, else
            ``"delta"``; ``"delta"`` with ``polish``). The resolved name is recorded. An explicit
            ``"lowrank"`` etc. runs its Gaussian stage at ``learning_rate``.
        steps: optimisation steps of the guide.
        learning_rate, optimizer, schedule, clip_norm: see :func:`make_optimizer`; with the
            ``"ensemble"`` guide ``optimizer`` may also be ``"lbfgs"`` (:data:`LBFGS`).
        map_steps: steps of the ``AutoDelta`` fit that places a Gaussian guide (default
            ``steps``; 0 or an ``init`` skips it).
        init_scale: initial scale of a Gaussian guide (unconstrained space).
        rank: rank of the ``"lowrank"`` guide (default: NumPyro's, about sqrt of the dimension).
        num_particles: ELBO particles per step.
        num_samples: posterior draws from a Gaussian guide (a delta guide gives 1 draw).
        chunk_size: steps per compiled chunk (default ``max(1, steps // 20)``).
        subsample_size: minibatch size passed to ``bayes_model.model`` (None: all data).
        init: a ``FitResult`` (its posterior mean) or ``{site: value}`` to start the guide from.
            Without one the (MAP) optimisation starts from prior draws
            (``bayes_model.start_sample``; noise scales at their prior medians), never at the
            prior mean, where network gradients and weak-prior placement gradients vanish; a
            weak-prior hybrid's rigid body starts at the Newton-polished MAP of its white-box
            counterpart (``bayes_model.white_box_start()``, :func:`fit_white_box_start`;
            recorded in ``attrs["settings"]["white_box_start"]``).
        restarts: number of prior draws to start from (default 4 where the model has networks
            or learned placements, ``bayes_model.multimodal_start``, else 1); each runs
            ``restart_steps`` (default a tenth of the steps, at least 100) in one vmapped
            program, the best (lowest loss) continues. Recorded in ``attrs["restarts"]``.
            With the ``"ensemble"`` guide: its members, each run for every step.
        white_box_start: a weak-prior hybrid's rigid-body start already fitted
            (:func:`fit_white_box_start` of this model and data; the grid shares one among the
            hybrids of a dataset); None fits it here, from a key split from ``key``. Not with
            ``init`` or ``resume``.
        resume: an SVI ``FitResult`` of the same variant, guide and data to continue from (its
            stored optimiser state, optimiser settings and loss trace); ``steps`` more are run.
        validation: held-out data (``ModelData`` or a ``data.Dataset``, e.g. the validation
            episodes of ``Dataset.split``) for early stopping: after every chunk of steps of
            each optimisation stage (each ensemble member; the MAP and the Gaussian stage of a
            Gaussian guide) the model's negative log-likelihood of it per observation is
            scored at the guide's median; a stage (member) stops after ``patience`` scores
            without improvement and keeps its best state
            (:mod:`inference.early_stopping`; how networks stop overfitting a few episodes).
            Recorded in ``attrs["early_stopping"]``. The ensemble also scales its noise by one
            factor per noise element fitted to it (``attrs["ensemble"]["noise_calibration"]``,
            :func:`_calibrate_mixture`). None: every step runs.
        patience: see ``validation`` (scores, i.e. chunks of ``chunk_size`` steps).
        min_delta: with ``validation``: a score counts as a gain (restarts the patience count)
            only where it falls more than this (nats per observation) below the last gain's
            (:class:`~inference.early_stopping.EarlyStopping`).
        output_layer: the ``"ensemble"`` guide's draws of the networks' output layers:
            ``"laplace"``: from the Laplace approximation at each draw's member given its other
            values (:mod:`inference.output_layer`; exact for the conditional with Normal noise
            where the output enters linearly); ``"none"``: the member's values; ``"auto"``:
            ``"laplace"`` where fewer than two members carry weight (one mode: the band would
            otherwise hold no weight uncertainty), else ``"none"``. Recorded in
            ``attrs["ensemble"]["output_layer"]``.
        convergence_rtol: relative loss change for :func:`convergence_report`.
        polish: delta guide only: finish with damped Newton from the SVI point
            (:func:`inference.polish.polish_map`; dense Hessian, so for small models such as the
            identifiable geometry). The result's draw is the polished point, root attribute
            ``map`` holds the :class:`~inference.polish.MapReport`, ``convergence.grad_*`` are
            those of the polished point (``svi_grad_*`` the SVI point's), ``convergence.converged``
            then means a stationary point with a positive definite Hessian.
        gradient_tol: the gradient test of :func:`gradient_check` at the point estimate;
            ``attrs["convergence"]["converged"]`` is true only where the loss settled *and* the
            gradient is small (fields ``loss_converged``, ``grad_norm``, ``grad_relative``), or,
            with ``validation``, where the last stage stopped early at a validation minimum
            (field ``early_stopped``; the training gradient is then not small by design).
        num_predictive: posterior-predictive draws (0: none).
        log_likelihood: add the pointwise log-likelihood group.
        complete: as :func:`inference.fit_nuts` (theta and virtual parameters of the
            identifiable geometry's draws).
        train_dtype: floating dtype of the optimisation steps (``"float32"`` or ``"float64"``;
            None: the data's, float64 by default). ``"float32"`` runs the steps (and the early
            stopping scores) on the data and starts cast to single precision: network models'
            gradients cost 0.44-0.62x on the CPU, a grid cell about 0.7-0.95x
            (docs/measurements.md, "Ensemble members in single precision"). The points found
            are cast back to the data's dtype and everything after the steps (noise
            profiling, member weights, calibration, the gradient test, the Newton polish,
            draws, predictive) runs in it; a weak-prior hybrid's white-box start takes its
            steps in this dtype too. Recorded.
        tails: learned Student-t degrees of freedom: ``"trained"`` with the other latent
            values, ``"profiled"`` (the ``"ensemble"`` guide with an optax optimiser: the
            weights trained with the degrees of freedom held at :data:`HELD_DF`, then each
            member's scales and degrees of freedom profiled) or ``"auto"`` (``"profiled"``
            where it applies). The resolved choice is recorded (``"trained"`` also for models
            without learned degrees of freedom).
        progress: print a progress line per chunk on stderr.

    Returns:
        A :class:`FitResult` with ``method="svi"``; root attributes ``settings``, ``convergence``
        (a :class:`ConvergenceReport` as a dict plus the gradient test), ``restarts`` (None, or
        the restarts' scores, best index and spread), ``early_stopping`` (None, or each stage's
        :meth:`~inference.early_stopping.EarlyStopping.report`), ``timing`` (compile s, run s,
        steps/s).

    Raises:
        ValueError: bad data for the robot (joint count, empty, NaN), unknown guide, optimiser or
            schedule, a ``resume`` result that does not match, a ``white_box_start`` of
            another counterpart.
    """
    observations, data, summary = fit_inputs(bayes_model, data)
    check_choice("guide", guide, GUIDES)
    if train_dtype is not None:
        check_choice("train_dtype", train_dtype, TRAIN_DTYPES)
    check_choice("output_layer", output_layer, ("auto", "laplace", "none"))
    if guide == "auto":
        guide = "delta" if polish else default_guide(bayes_model)
    if guide == "ensemble" and (resume is not None or init is not None or polish):
        raise ValueError(
            "the 'ensemble' guide starts its members from prior draws and is not resumed, "
            "started at an init or polished; use guide='delta' for those"
        )
    check_choice("optimizer", optimizer, (*OPTIMIZERS, LBFGS))
    check_choice("tails", tails, TAILS)
    if white_box_start is not None:
        if resume is not None or init is not None:
            raise ValueError(
                "white_box_start places the rigid body of a fit that starts from prior draws; "
                "it does not apply with init or resume"
            )
        _check_white_box_start(bayes_model, white_box_start)
    df_sites = _df_sites(bayes_model)
    profiles = guide == "ensemble" and optimizer != LBFGS and bool(df_sites)
    if tails == "auto":
        tails = "profiled" if profiles else "trained"
    if tails == "profiled" and not profiles:
        raise ValueError(
            "tails='profiled' holds learned Student-t degrees of freedom (noise='student-t', "
            "student_df=None) while an 'ensemble' guide's members train with an optax optimiser "
            f"such as 'adam'; got guide {guide!r}, optimizer {optimizer!r} and "
            f"{'no' if not df_sites else len(df_sites)} learned degrees of freedom"
        )
    if optimizer == LBFGS and (guide != "ensemble" or subsample_size is not None):
        raise ValueError(
            f"optimizer {LBFGS!r} fits the 'ensemble' guide's members (deterministic MAPs) on "
            f"all the data; got guide {guide!r}"
            + ("" if subsample_size is None else f" and subsample_size {subsample_size}")
            + ": use an optax optimiser such as 'adam'"
        )
    steps = check_positive_int("steps", steps)
    num_samples = check_positive_int("num_samples", num_samples)
    num_particles = check_positive_int("num_particles", num_particles)
    num_predictive = check_positive_int("num_predictive", num_predictive, allow_zero=True)
    if chunk_size is None:
        chunk_size = max(1, steps // 20)
    chunk_size = check_positive_int("chunk_size", chunk_size)
    if not init_scale > 0:
        raise ValueError(f"init_scale must be > 0, got {init_scale}")
    if subsample_size is not None:
        subsample_size = check_positive_int("subsample_size", subsample_size)
        if bayes_model.linear_exact:
            raise ValueError(
                "subsample_size does not apply: this model is fitted on exact sufficient "
                "statistics (every step already costs the same whatever the data size)"
            )
        if subsample_size > observations.q.shape[0]:
            raise ValueError(
                f"subsample_size {subsample_size} > number of samples {observations.q.shape[0]}"
            )
    if rank is not None:
        rank = check_positive_int("rank", rank)
    patience = check_positive_int("patience", patience)
    val_nll = None
    if validation is not None:
        if polish:
            raise ValueError(
                "validation (early stopping) and polish contradict: a polished MAP is the "
                "training optimum; pass one of them"
            )
        val_obs, val_data, _ = fit_inputs(bayes_model, validation)
        val_num_obs = int(np.size(val_obs.q))
        val_nll = heldout_nll(bayes_model, val_data, val_num_obs)
    key, seed = raw_key(key)
    k_map, k_init, k_draw, k_pred = jax.random.split(key, 4)
    model_kwargs = {} if subsample_size is None else {"subsample_size": subsample_size}
    latent, _ = trace_sites(bayes_model, data)
    settings = {
        "guide": guide,
        "optimizer": optimizer,
        "learning_rate": float(learning_rate),
        "schedule": schedule,
        "schedule_steps": steps,
        "clip_norm": clip_norm,
        "init_scale": float(init_scale),
        "rank": rank,
        "num_particles": num_particles,
        "chunk_size": chunk_size,
        "subsample_size": subsample_size,
        "output_layer": output_layer,
        "train_dtype": train_dtype,
        "tails": tails,
    }
    if val_nll is not None:
        settings["validation"] = {
            "samples": int(val_obs.q.shape[0]),
            "patience": patience,
            "min_delta": float(min_delta),
        }
    previous_losses = np.zeros(0)
    map_losses = np.zeros(0)
    timing = {"compile_s": 0.0, "run_s": 0.0}
    restart_info = None
    stored = None
    if restarts is None:
        restarts = 4 if getattr(bayes_model, "multimodal_start", False) else 1
    restarts = check_positive_int("restarts", restarts)
    if restart_steps is None:
        restart_steps = max(100, steps // 10)
    restart_steps = check_positive_int("restart_steps", restart_steps)

    def add_timing(t):
        timing["compile_s"] += t["compile_s"]
        timing["run_s"] += t["run_s"]

    data_dtype = jnp.result_type(observations.q)

    def for_steps(tree):
        """``tree`` (data, start points) in the dtype the optimisation steps run in."""
        return with_float_dtype(tree, settings["train_dtype"])

    monitors = []

    def monitor_factory(label, batched=False):
        if val_nll is None:
            return None

        def make(point_of, shared=None):
            def score(state, d):
                point = point_of(state)
                return val_nll({k: point[k] for k in latent}, d)

            if shared is not None:  # the guide's median of the SVI program shared by the chunks
                score = _shared_score_of(shared, latent, val_num_obs)
            elif batched:
                score = jax.vmap(score, in_axes=(0, None))
            monitors.append(
                EarlyStopping(
                    score,
                    patience=patience,
                    label=label,
                    batched=batched,
                    data=for_steps(val_data),
                    min_delta=min_delta,
                    jit=shared is None,
                )
            )
            return monitors[-1]

        return make

    def guide_factory(name):
        return lambda fn: _make_guide(
            name, bayes_model.model, init_loc_fn=fn, init_scale=settings["init_scale"],
            rank=settings["rank"],
        )

    k_start, k_init = jax.random.split(k_init)
    # inits: where the guide starts, init_loc_fns or start points (:func:`_init_starts`)
    if resume is not None:
        check_same_fit(resume, bayes_model, observations, method="svi", what="resume")
        old = resume.attrs["settings"]
        if old["guide"] != guide:
            raise ValueError(f"resume: result used guide {old['guide']!r}, asked for {guide!r}")
        if "svi_state" not in resume.idata.children:
            raise ValueError("resume: the result holds no SVI state")
        # results from before a setting existed ran with its default
        settings.update({k: old[k] for k in settings if k != "chunk_size" and k in old})
        stored = resume.idata["svi_state"].to_dataset()
        previous_losses = np.asarray(resume.idata["svi_loss"]["loss"].values)
        if "map_loss" in resume.idata["svi_loss"]:
            map_losses = np.asarray(resume.idata["svi_loss"]["map_loss"].values)
        inits = [init_to_mean()]
    elif init is not None:
        values = point_values(init, latent) if isinstance(init, FitResult) else dict(init)
        inits = [init_to_value(values=for_steps(values))]
    else:
        starts = _start_points(bayes_model, k_start, restarts)
        if white_box_start is None and starts is not None:
            white_box_start = fit_white_box_start(
                bayes_model,
                observations,
                key=jax.random.fold_in(k_start, 1),
                steps=steps,
                learning_rate=learning_rate,
                train_dtype=train_dtype,
                progress=progress,
            )
        if white_box_start is not None and starts is not None:
            values = white_box_start.values
            settings["white_box_start"] = dict(white_box_start.record)
            starts = [
                {**p, **{k: jnp.asarray(v, p[k].dtype) for k, v in values.items()}} for p in starts
            ]
        inits = (
            [init_to_mean()]
            if starts is None
            else [for_steps({k: p[k] for k in latent}) for p in starts]
        )
        if tails == "profiled":
            if starts is None:
                raise ValueError(f"tails='profiled': {bayes_model.name!r} draws no start points")
            inits = [
                {**p, **{s.site: s.latent_of(np.log(HELD_DF), p[s.site].dtype) for s in df_sites}}
                for p in inits
            ]
        settings["start"] = "prior draws" if starts is not None else "prior mean"
        settings["restarts"] = len(inits)
        if guide not in ("delta", "ensemble"):
            map_steps = steps if map_steps is None else map_steps
            map_steps = check_positive_int("map_steps", map_steps, allow_zero=True)
            if map_steps > 0:
                opt = make_optimizer(
                    optimizer,
                    learning_rate,
                    schedule=schedule,
                    steps=map_steps,
                    clip_norm=clip_norm,
                )
                map_svi, delta, map_state, map_losses, restart_info, t = _optimise(
                    bayes_model,
                    guide_factory("delta"),
                    opt,
                    SortedTrace_ELBO(),
                    for_steps(data),
                    key=k_map,
                    starts=inits,
                    steps=map_steps,
                    restart_steps=restart_steps,
                    chunk_size=max(1, map_steps // 20),
                    model_kwargs=model_kwargs,
                    label="svi map",
                    progress=progress,
                    monitor_factory=monitor_factory("map"),
                )
                add_timing(t)
                point = delta.median(map_svi.get_params(map_state))
                inits = [init_to_value(values={k: point[k] for k in latent})]
            settings["map_steps"] = map_steps
    opt = (
        LBFGS
        if settings["optimizer"] == LBFGS
        else make_optimizer(
            settings["optimizer"],
            settings["learning_rate"],
            schedule=settings["schedule"],
            steps=settings["schedule_steps"],
            clip_norm=settings["clip_norm"],
        )
    )
    elbo = SortedTrace_ELBO(num_particles=settings["num_particles"])
    if stored is not None:
        guide_obj = guide_factory(guide)(inits[0])
        svi = SVI(bayes_model.model, guide_obj, optax_to_numpyro(opt), elbo)
        steps_data = for_steps(data)
        state = svi.init(k_init, steps_data, **model_kwargs)
        state = state_from_dataset(stored, state, kind=f"svi/{guide}")
        shared = _shared_svi(
            bayes_model, svi, opt, steps_data, model_kwargs=model_kwargs, batched=False
        )
        make_monitor = monitor_factory(guide)
        state, losses, c_s, r_s = _run_svi(
            svi,
            state,
            steps_data,
            steps=steps,
            chunk_size=chunk_size,
            model_kwargs=model_kwargs,
            label=f"svi {guide}",
            progress=progress,
            monitor=None
            if make_monitor is None
            else make_monitor(_median_of(svi, guide_obj), shared),
            shared=shared,
        )
        add_timing({"compile_s": c_s, "run_s": r_s})
        restart_info = resume.attrs.get("restarts")
    elif guide == "ensemble":
        stacked_points, guide_obj, state, losses, t = _optimise_ensemble(
            bayes_model,
            guide_factory("delta"),
            _holding(opt, [s.site for s in df_sites]) if tails == "profiled" else opt,
            for_steps(data),
            key=k_init,
            starts=inits,
            steps=steps,
            chunk_size=chunk_size,
            model_kwargs=model_kwargs,
            progress=progress,
            monitor_factory=monitor_factory("ensemble", batched=True),
        )
        add_timing(t)
        stacked_points = with_float_dtype(stacked_points, data_dtype)
    else:
        svi, guide_obj, state, losses, info, t = _optimise(
            bayes_model,
            guide_factory(guide),
            opt,
            elbo,
            for_steps(data),
            key=k_init,
            starts=inits,
            steps=steps,
            restart_steps=restart_steps,
            chunk_size=chunk_size,
            model_kwargs=model_kwargs,
            label=f"svi {guide}",
            progress=progress,
            monitor_factory=monitor_factory(guide),
        )
        add_timing(t)
        restart_info = restart_info or info
    if restart_info is not None:
        sc = np.asarray(restart_info["scores"], dtype=np.float64)
        finite = sc[np.isfinite(sc)]
        restart_info["spread"] = float(finite.max() - finite.min()) if finite.size else None
    members = None
    if guide == "ensemble":  # losses (steps, R): members whose loss stayed finite are kept
        last = monitors[-1] if monitors else None
        kept = np.isfinite(losses[-1] if last is None else np.asarray(last.best_score))
        if not kept.any():
            raise FloatingPointError("every ensemble member's loss became non-finite")
        params = {f"{k}_{guide_obj.prefix}_loc": v for k, v in stacked_points.items()}
        members = {
            "members": int(kept.size),
            "kept": np.flatnonzero(kept).tolist(),
            "final_losses": [float(x) for x in losses[-1]],
        }
        settings["members"] = int(kept.size)
        member_losses = losses
        losses = np.nanmean(np.where(kept, losses, np.nan), axis=1)  # the kept members' mean
    timing["steps_per_s"] = float(losses.size / max(timing["run_s"], 1e-12))
    all_losses = np.concatenate([previous_losses, losses])
    report = convergence_report(all_losses, rtol=convergence_rtol)._asdict()
    settings["steps"] = int(all_losses.size)

    if members is None:
        params = svi.get_params(state)
        points = [with_float_dtype(guide_obj.median(params), data_dtype)]
    else:
        kept_points = {k: stacked_points[k][np.asarray(members["kept"])] for k in latent}
        if tails == "profiled":  # the held sites' profile starts at their prior median
            for s in df_sites:
                held = kept_points[s.site]
                kept_points[s.site] = jnp.broadcast_to(s.init(held.dtype), held.shape)
        kept_points, members["noise_profile"] = _profile_noise(bayes_model, data, kept_points)
        weights, members["member_training_nll"] = _member_weights(
            bayes_model, data, int(np.size(observations.q)), kept_points
        )
        weighted = int(np.count_nonzero(weights))
        if weighted < 2 <= weights.size:
            warnings.warn(
                f"only {weighted} of {weights.size} ensemble members did not fail (training "
                f"NLL within {MEMBER_SCORE_GAP} nat per scalar of the best): the posterior holds "
                "one mode and its band at most the output layer's uncertainty (output_layer); "
                "fit again with more restarts or another key",
                stacklevel=2,
            )
        if val_nll is not None:
            kept_points, members["noise_calibration"] = _calibrate_mixture(
                bayes_model, val_data, int(np.size(val_obs.q)), kept_points, weights
            )
        points = [{k: v[i] for k, v in kept_points.items()} for i in range(len(members["kept"]))]
    grad_rel = grad = -np.inf
    # the gradient test at every point estimate (on all the data, also when subsampled): the
    # worst one counts
    dim = int(sum(np.size(points[0][k]) for k in latent))
    if len(points) > 1:
        norms = gradient_norms(
            bayes_model, data, {k: jnp.stack([jnp.asarray(p[k]) for p in points]) for k in latent}
        )
    else:
        norms = [gradient_norm(bayes_model, data, {k: points[0][k] for k in latent})]
    for g in norms:
        _, rel = gradient_check(
            float(g), dimension=dim, num_obs=int(np.size(observations.q)), tol=gradient_tol
        )
        grad, grad_rel = max(grad, float(g)), max(grad_rel, rel)
    grad_ok = bool(np.isfinite(grad_rel) and grad_rel <= gradient_tol)
    # with validation: the last stage's early stopping (None: it ran no monitored steps)
    last = monitors[-1] if monitors and monitors[-1].label == guide else None
    early_stopped = bool(last is not None and last.exhausted)
    report.update(
        loss_converged=report["converged"],
        grad_norm=grad,
        grad_relative=grad_rel,
        gradient_tol=float(gradient_tol),
        early_stopped=early_stopped,
        converged=bool((report["converged"] and grad_ok) or early_stopped),
    )
    if early_stopped:
        best = np.atleast_1d(last.best_score)[members["kept"] if members else slice(None)]
        report["message"] = (
            f"converged (early stopping): validation negative log-likelihood "
            f"{', '.join(f'{b:.6g}' for b in best)} per observation at step(s) {last.best_step} "
            f"of the {guide} stage, not improved in the {patience} scores after; training "
            f"gradient rms {grad_rel:.3g} x sqrt(observations)"
        )
    elif report["loss_converged"] and not grad_ok:
        report["message"] = (
            f"not converged: the loss settled but the gradient is large (rms "
            f"{grad_rel:.3g} x sqrt(observations), tolerance {gradient_tol:g}); run more steps "
            "(fit_svi(..., resume=result)) or lower the learning rate"
        )
    else:
        report["message"] += f"; gradient rms {grad_rel:.3g} x sqrt(observations)"
    if members is not None:  # the kept members' mixture as num_samples draws
        # failed members 0, the others equal (_member_weights); draws allocated by weight in a
        # random order (allocate_draws)
        idx = allocate_draws(weights, num_samples, k_draw)
        members["weights"] = [float(w) for w in weights]
        members["draw_member"] = idx.tolist()
        samples = {k: v[idx][None] for k, v in kept_points.items()}
        if getattr(bayes_model, "output_layer_prior_sd", None) and (
            output_layer == "laplace" or (output_layer == "auto" and weighted < 2)
        ):
            draws, members["output_layer"] = output_layer_draws(
                bayes_model, data, kept_points, idx, jax.random.fold_in(k_draw, 1)
            )
            samples = {k: jnp.asarray(v)[None] for k, v in draws.items()}
    else:
        params = svi.get_params(state)
        draws = 1 if guide == "delta" else num_samples
        post = guide_obj.sample_posterior(k_draw, params, sample_shape=(draws,))
        samples = {k: jnp.asarray(post[k], data_dtype)[None] for k in latent}
    map_report = None
    if polish:
        if guide != "delta":
            raise ValueError(f"polish applies to the 'delta' guide (a MAP), not {guide!r}")
        point, map_report = polish_map(bayes_model, data, {k: samples[k][0, 0] for k in latent})
        samples = {k: jnp.asarray(point[k])[None, None] for k in latent}
        # the gradient test at the polished point (the SVI point's is kept as svi_grad_*)
        grad = gradient_norm(bayes_model, data, point)
        _, grad_rel = gradient_check(
            grad, dimension=dim, num_obs=int(np.size(observations.q)), tol=gradient_tol
        )
        report.update(
            svi_grad_norm=report["grad_norm"],
            svi_grad_relative=report["grad_relative"],
            grad_norm=grad,
            grad_relative=grad_rel,
            converged=bool(map_report.converged),
            message=f"{map_report.message} (SVI: {report['message']})",
        )
    loss_vars = {"loss": ("step", all_losses)}
    if map_losses.size:
        loss_vars["map_loss"] = ("map_step", np.asarray(map_losses))
    if members is not None:
        loss_vars["member_loss"] = (("step", "member"), np.asarray(member_losses))
    attrs = base_attrs(bayes_model, observations, method="svi", seed=seed, summary=summary)
    attrs.update(
        settings=settings,
        convergence=report,
        restarts=restart_info,
        ensemble=members,
        early_stopping=[m.report() for m in monitors] or None,
        timing=timing,
    )
    if map_report is not None:
        attrs["map"] = map_report._asdict()
    extra = {} if members is None else {"ensemble": _members_dataset(kept_points, weights)}
    extra |= {
        "svi_state": state_to_dataset(state, kind=f"svi/{guide}"),
        "svi_loss": xr.Dataset(loss_vars),
        "guide_params": xr.Dataset(
            {
                k.replace("/", "."): (
                    tuple(f"{k.replace('/', '.')}_dim_{i}" for i in range(np.ndim(v))),
                    np.asarray(v),
                )
                for k, v in params.items()
                # random_eqx_module also registers the network's structure as a parameter
                if isinstance(v, jax.Array | np.ndarray)
            }
        ),
    }
    tree = build_idata(
        bayes_model,
        observations,
        samples,
        key=k_pred,
        num_predictive=num_predictive,
        compute_log_likelihood=log_likelihood,
        attrs=attrs,
        extra_groups=extra,
        complete=complete,
    )
    return FitResult(idata=tree, variant=attrs["variant"], system=attrs["system"], method="svi")
