"""One benchmark cell: simulate a dataset, fit one variant's posterior, score it on held-out data.

All variants of a (system, dataset kind, dataset seed) share one dataset (:func:`data_seed`),
generated once per worker process (:func:`cell_data`) and split by whole episodes into training,
validation and held-out episodes, as the paper compares its variants on the same data. Their
models' normalisers are those of dataset seed 0 of the same (system, kind), for every seed
(:func:`grid_scales`: compiled programs are shared across seeds).

The posterior of a cell (:func:`fit_posterior`) is the library's own path for its variant:

- white-box variants without networks (``diffnea`` / ``nokin-diffnea`` with the ideal, viscous or
  Stribeck actuator): the identifiable (base-parameter) geometry, a Newton-polished MAP, then NUTS
  from it (``fit_nuts``'s default metric for the model); when it did not converge, its
  chains are extended by as many draws again if only R-hat or ESS fell short, or re-run with
  twice the warm-up, a higher step-size target (:func:`next_target_accept`) and a new key after
  divergences, up to ``nuts_attempts`` runs;
- ``nokin-diffnea`` without networks, when ``settings["kinematics_posterior"]`` is ``"laplace"``
  (the quick setting): the Laplace approximation at the polished MAP in the same coordinates,
  its axes' shapes fitted to the log joint (fourth-order directions of learned placements) and
  corrected by Pareto-smoothed importance resampling where the weights' Pareto k is below its
  threshold, the proposal's draws kept uncorrected above it where the Hessian at the MAP is
  positive definite (:func:`inference.fit_laplace`'s ``importance="auto"``), converged when the
  MAP is checked and k is below: NUTS there costs
  ~4 min per cell on 6,000 states (docs/measurements.md), beyond the quick grid's budget; the
  full setting runs NUTS;
- ``nea``: NUTS from its MAP with the torque noise fixed at the nominal model's residual
  (:func:`models.nominal_torque_residual`), where its posterior is the conjugate Gaussian of
  :func:`models.nea_posterior` (tested against it in ``tests/test_models_identification.py``);
- variants with networks: ``fit_svi``'s ensemble of MAPs from prior draws (each fitted by
  ``settings["ensemble_optimizer"]``, Adam unless asked), early-stopped and
  noise-calibrated on the validation episodes (issue 11); converged when every member stopped on
  its validation minimum and at least two members did not fail (``inference.svi.
  MEMBER_SCORE_GAP``: with one, the band holds only that mode's output-layer Laplace
  uncertainty, ``fit_svi``'s ``output_layer="auto"``, or none for friction networks; where
  fewer did, the cell is fitted once more with twice the members, :data:`ENSEMBLE_ATTEMPTS`).

``fit_cell(cell, settings) -> metrics`` (JSON-able) is the default cell function of
:func:`analysis.benchmark.run_benchmark`; :func:`score_fit` computes:

- ``accel_nmse``: NMSE of the posterior-mean joint acceleration on the held-out episodes
  (mean over joints); ``accel_coverage90``: coverage of the held-out accelerations by the 90 %
  posterior-predictive band (noise included).
- ``base_error``: largest relative error of the posterior-mean base parameters ``B theta``
  (Gautier 1991; what the data identify, unlike masses) and ``base_covered90``: fraction of base
  parameters whose truth lies inside the central 90 % interval; fixed-kinematics white-box
  variants only.
- ``rollout_rmse`` / ``rollout_coverage90``: {horizon s: value}: the median over draws of the RMS
  position error up to the horizon, and the fraction of (start, joint) whose true position at the
  horizon lies inside the 90 % band, averaged over ``rollout_starts`` uncontrolled rollouts (the
  Figure-1 start :data:`FIGURE1_START` and states of the held-out episodes), against the dataset's
  own plant (:meth:`data.Dataset.true_dynamics`); ``coverage90``: the Figure-1 rollout's
  coverage over all its points.
- ``energy_own``: energy classes of the model's *own* energy along its own uncontrolled
  Figure-1 rollout (white-box rigid bodies; ``gaining`` is the fraction of draws whose energy
  grows), ``energy_true``: the true system's energy along the predicted states.
- ``divergent_fraction`` = ``left_domain_fraction`` (finite rollouts that leave the state domain)
  + ``nonfinite_fraction`` (rollouts that blow up).
- ``controller``: success rate of the provided swing-up controller (designed on the nominal
  model) in closed loop on every draw, beside its success on the true plant.
- ``posterior``: method, whether it converged and why not, attempts, R-hat / ESS / divergences.
- ``plausible_fraction`` (draws with a physically consistent body), ``fit_seconds`` and a
  down-sampled ``band`` of the Figure-1 rollout for the report's figure.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from analysis.controllers import default_controller, evaluate_closed_loop, swing_up_task
from analysis.diagnostics import heldout_ppc
from analysis.energy import classify_energy, divergence_flags, params_from_physical, rollout_energy
from analysis.rollouts import (
    band_coverage,
    credible_band,
    make_rollout_fn,
    num_draws,
    rollout_error,
    thin_draws,
    true_rollout,
)
from data import generate_dataset
from data.io import file_lock, write_json_atomic
from data.simulate import DEFAULT_RATE_HZ, MEASUREMENT_NOISE
from inference import WhiteBoxStart, fit_laplace, fit_nuts, fit_svi, fit_white_box_start
from inference.nuts import NOT_EXTENDABLE, model_target_accept
from models import build_model, data_scales, model_data, nominal_torque_residual
from models.identifiable import identifiable_where_possible
from models.variants import START_FORMAT

FIGURE1_START = {"cartpole": (0.0, 2.0), "furuta": (0.0, 2.0)}
"""Start state (q; qd = 0) of the uncontrolled Figure-1 rollouts: pendulum at 2 rad from hanging."""
BAND_RATE_HZ = 25.0
RHAT_MAX = 1.01
"""A NUTS posterior converged when every latent site's R-hat is at most this (Vehtari et al. 2021),
no transition diverged and the bulk ESS reaches ``min_ess`` of the settings."""


def cell_seed(cell: dict, base: int) -> int:
    """A seed per cell derived from its id and the base seed (stable across runs and machines)."""
    digest = hashlib.sha256(f"{base}:{cell['id']}".encode()).hexdigest()
    return int(digest[:8], 16)


def data_seed(cell: dict, base: int) -> int:
    """The seed of a cell's dataset: one per (system, dataset kind, dataset seed), so that all 26
    variants are fitted to and scored on the same data, as in the paper."""
    tag = f"{base}:{cell['system']}:{cell['dataset']}"
    if cell.get("seed", 0):  # seed 0 keeps the seeds of the single-seed grids before the axis
        tag += f":{cell['seed']}"
    digest = hashlib.sha256(tag.encode()).hexdigest()
    return int(digest[:8], 16)


def white_box_start_seed(cell: dict, counterpart: str, base: int) -> int:
    """The seed of a weak-prior hybrid cell's white-box start (``inference.fit_white_box_start``):
    one per (system, dataset kind, dataset seed, white-box counterpart), so that the three hybrids
    of a family (``nn-friction``, ``nn-residual``, ``ffnn``) start their rigid body from the same
    MAP, fitted once per grid (:func:`grid_white_box_start`)."""
    tag = f"{base}:{cell['system']}:{cell['dataset']}:{cell.get('seed', 0)}:{counterpart}"
    return int(hashlib.sha256(f"white-box start:{tag}".encode()).hexdigest()[:8], 16)


def grid_white_box_start(
    bm, train, cell: dict, settings: dict, *, shared_dir=None
) -> WhiteBoxStart | None:
    """The white-box start of a weak-prior hybrid cell (``inference.WhiteBoxStart``; None for
    other variants): ``inference.fit_white_box_start`` with the cell's ensemble steps, rate and
    dtype from :func:`white_box_start_seed`. With ``shared_dir`` it is fitted once per grid: the
    first cell to ask fits it under a lock and stores it there
    (``<system>__<kind>__<counterpart>__s<seed>.json``, atomically), the others load it (the same
    values: JSON keeps float64 exactly). A stored start computed from other settings or data is
    fitted again. Its record says whether it was ``loaded``."""
    staged = bm.white_box_start() if hasattr(bm, "white_box_start") else None
    if staged is None:
        return None
    counterpart = staged[0].spec.name
    fields = {
        "counterpart": counterpart,
        "data": [list(x) if isinstance(x, tuple) else x for x in _data_key(cell, settings)],
        "data_options": cell.get("data") or {},
        "seed": white_box_start_seed(cell, counterpart, int(settings["seed"])),
        "steps": int(settings["ensemble_steps"]),
        "learning_rate": float(settings["learning_rate"]),
        "train_dtype": settings["ensemble_dtype"],
        "start_format": START_FORMAT,
    }

    def fit():
        return fit_white_box_start(
            bm, model_data(train), key=fields["seed"], steps=fields["steps"],
            learning_rate=fields["learning_rate"], train_dtype=fields["train_dtype"],
        )

    if shared_dir is None:
        start = fit()
    else:
        name = f"{cell['system']}__{cell['dataset']}__{counterpart.replace('/', '-')}"
        path = os.path.join(os.fspath(shared_dir), f"{name}__s{cell.get('seed', 0)}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with file_lock(path, wait=True):
            try:
                with open(path) as f:
                    stored = json.load(f)
            except (OSError, ValueError):
                stored = None
            if stored is not None and stored.get("fields") == fields:
                values = {k: np.asarray(v, float) for k, v in stored["values"].items()}
                return WhiteBoxStart(values, {**stored["record"], "loaded": True})
            start = fit()
            values = {k: np.asarray(v).tolist() for k, v in start.values.items()}
            write_json_atomic(path, {"fields": fields, "values": values, "record": start.record})
    return start._replace(record={**start.record, "loaded": False})


def grid_dataset_options(kind: str) -> dict:
    """Generator options of the grid's ``kind`` datasets beyond their defaults (stored in each
    cell, so that a record computed on other data is not kept): the uniform set gets the
    trajectories set's measurement noise (:data:`data.simulate.MEASUREMENT_NOISE`). The paper's
    uniform set is noise-free, and on noise-free data a model that learns its noise scale has
    no proper posterior: the scale's MAP is 0 (measured on the cart-pole, 40 s: every white-box
    NUTS cell R-hat 1.8-3.0, up to 581 divergences; every Laplace cell without a stationary
    MAP)."""
    return dict(MEASUREMENT_NOISE) if kind == "uniform" else {}


@functools.lru_cache(maxsize=8)
def cell_data(
    system: str,
    kind: str,
    seed: int,
    duration: float,
    episode_duration: float,
    split: tuple[float, ...],
):
    """``(dataset, train, valid, test)``: ``duration`` s of ``kind`` data in episodes of
    ``episode_duration`` s split by whole episode in the fractions ``split``; generated once per
    worker process and kept (pure in its arguments; a worker runs many cells of the same dataset)."""
    episodes = (
        {"chunk": int(round(episode_duration * DEFAULT_RATE_HZ))}
        if kind == "uniform"
        else {"episode_duration": float(episode_duration)}
    )
    dataset = generate_dataset(
        system, kind, seed=seed, duration=duration, **episodes, **grid_dataset_options(kind)
    )
    train, valid, test = dataset.split(tuple(split), seed=seed)
    return dataset, train, valid, test


def true_figure1_rollout(dataset, steps: int, *, q0=None, qd0=None) -> bn.Trajectory:
    """The true system's uncontrolled rollout: the dataset's own plant
    (:meth:`data.Dataset.true_dynamics`, the function its generator integrated), ``steps`` RK4
    steps at :data:`bayes_nea.DEFAULT_DT` from ``q0, qd0`` (n,) (default: the Figure-1 start
    :data:`FIGURE1_START`, at rest); ``q``/``qd`` (steps + 1, n)."""
    n = dataset.n
    q0 = jnp.asarray(FIGURE1_START.get(dataset.system, (0.0,) * n) if q0 is None else q0)
    qd0 = jnp.zeros(n) if qd0 is None else jnp.asarray(qd0)
    return true_rollout(dataset.true_dynamics(), q0, qd0, steps=steps, dt=bn.DEFAULT_DT)


def rollout_starts(dataset, test, count: int) -> tuple[np.ndarray, np.ndarray]:
    """``(q0, qd0)`` each (count, n): the Figure-1 start (at rest) and ``count - 1`` states of the
    held-out episodes, evenly spaced through them."""
    n = dataset.n
    q0 = [np.asarray(FIGURE1_START.get(dataset.system, (0.0,) * n), float)]
    qd0 = [np.zeros(n)]
    if count > 1:
        q, qd = (np.asarray(x, float) for x in test.arrays()[:2])
        idx = np.linspace(0, q.shape[0] - 1, count - 1).round().astype(int)
        q0 += list(q[idx])
        qd0 += list(qd[idx])
    return np.stack(q0), np.stack(qd0)


@functools.lru_cache(maxsize=8)
def _cached_truth(system, kind, seed, duration, episode_duration, split, steps, starts):
    """The true rollouts' positions and velocities, each (starts, steps + 1, n), from
    :func:`rollout_starts`, once per worker process."""
    dataset, _, _, test = cell_data(system, kind, seed, duration, episode_duration, split)
    return true_rollouts(dataset, *rollout_starts(dataset, test, starts), steps)


def true_rollouts(dataset, q0, qd0, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """The true system's uncontrolled rollouts from ``q0, qd0`` (S, n), as
    :func:`true_figure1_rollout` from each start, in one vmapped call: ``(q, qd)`` each
    (S, steps + 1, n)."""
    qdd = dataset.true_dynamics()
    run = make_rollout_fn(lambda _: qdd, steps=steps, dt=bn.DEFAULT_DT)
    traj = run({"start": jnp.zeros((len(q0),))}, jnp.asarray(q0), jnp.asarray(qd0))
    return np.asarray(traj.q), np.asarray(traj.qd)


def _data_key(cell: dict, settings: dict) -> tuple:
    return (
        cell["system"],
        cell["dataset"],
        data_seed(cell, int(settings["seed"])),
        float(settings["duration"]),
        float(settings["episode_duration"]),
        tuple(float(x) for x in settings["split"]),
    )


def grid_scales(cell: dict, settings: dict) -> dict:
    """The normalisers of a cell's model (:func:`models.data_scales`, per joint): those of the
    training episodes of the cell's (system, dataset kind) at dataset seed 0, for every seed.

    Scales enter the compiled programs as constants (JAX's persistent compilation cache keys on
    them), so with one set per (system, kind) the programs compiled for one dataset seed serve
    the others. They are normalisers of the same experiment's magnitudes, which differ by
    0.3-10 % between seeds (docs/measurements.md).
    """
    return _reference_scales(*_data_key({**cell, "seed": 0}, settings))


@functools.lru_cache(maxsize=16)
def _reference_scales(*data_key) -> dict:
    dataset, train, _, _ = cell_data(*data_key)
    return data_scales(model_data(train), dataset.robot())


def nuts_converged(diagnostics: dict, *, min_ess: float) -> tuple[bool, str | None]:
    """``(converged, reason)`` of a NUTS fit from :meth:`inference.FitResult.diagnostics` over its
    latent sites (in the identifiable geometry: base parameters, coefficients, noise scales)."""
    reasons = []
    if diagnostics.get("divergences", 0) > 0:
        reasons.append(f"{diagnostics['divergences']} divergent transitions")
    rhat, ess = diagnostics.get("rhat_max"), diagnostics.get("ess_bulk_min")
    if rhat is None or not np.isfinite(rhat):
        reasons.append("R-hat needs >= 2 chains")
    elif rhat > RHAT_MAX:
        reasons.append(f"R-hat {rhat:.3f} > {RHAT_MAX}")
    if ess is not None and np.isfinite(ess) and ess < min_ess:
        reasons.append(f"bulk ESS {ess:.0f} < {min_ess:g}")
    return not reasons, "; ".join(reasons) or None


ENSEMBLE_ATTEMPTS = 2
"""Fits of a network cell's ensemble: where fewer than two members did not fail
(``inference.svi.MEMBER_SCORE_GAP``), one more with twice the members from new prior draws
(cart-pole hardware-like ``diffnea/nn-residual/weak``: one of four)."""


def fit_posterior(
    bm, geometry: str, train, valid, settings: dict, *, key: int, white_box_start=None
):
    """``(fit, posterior_info)``: the cell's posterior by the library's path for its variant
    (module docstring). ``posterior_info`` (JSON-able) records the method, convergence and why
    not, the attempts and the sampler's diagnostics. ``white_box_start``: a weak-prior hybrid's
    rigid-body start (:func:`grid_white_box_start`; None: ``fit_svi`` fits one from ``key``)."""
    md = model_data(train)
    # no theta completion of the identifiable geometry's draws in the fits: score_fit completes
    # only the draws it uses (a NUTS run completed 1,000-2,000 draws for the 100 it scores)
    common = {"progress": False, "num_predictive": 0, "log_likelihood": False, "complete": False}
    svi_args = dict(
        key=key,
        steps=int(settings["svi_steps"]),
        learning_rate=float(settings["learning_rate"]),
        **common,
    )
    if getattr(bm, "has_networks", False):
        steps = int(settings["ensemble_steps"])
        member_args = dict(
            svi_args,
            steps=steps,
            optimizer=settings["ensemble_optimizer"],
            min_delta=float(settings["ensemble_min_delta"]),
            train_dtype=settings["ensemble_dtype"],
            white_box_start=white_box_start,
        )
        restarts, attempts = None, 0  # fit_svi's default number of members first
        while True:  # fewer than two members that did not fail: twice the members, a new key
            fit = fit_svi(
                bm,
                md,
                num_samples=int(settings["draws"]),
                validation=model_data(valid),
                restarts=restarts,
                **dict(member_args, key=key + attempts),
            )
            attempts += 1
            weights = np.asarray(fit.attrs["ensemble"]["weights"])
            members = int(np.count_nonzero(weights))
            if members >= 2 or attempts >= ENSEMBLE_ATTEMPTS:
                break
            restarts = 2 * int(fit.attrs["settings"]["members"])
        conv = fit.attrs.get("convergence") or {}
        kept = [np.asarray(s["best_step"]).tolist() for s in fit.attrs.get("early_stopping") or ()]
        converged = bool(conv.get("converged"))
        still = any(np.max(k) >= steps for k in kept)
        patience = (fit.attrs["settings"].get("validation") or {}).get("patience")
        reasons = [] if converged else [
            "a member still improved at the last step"
            if still
            else f"a member's best validation score was fewer than {patience} checks before "
            "the last step (not yet stopped)"
            if kept
            else "the loss or gradient test failed"
        ]
        if members < 2:  # the other members failed (inference.svi.MEMBER_SCORE_GAP)
            reasons.append(
                f"{members} of {weights.size} members did not fail (training NLL within "
                "MEMBER_SCORE_GAP of the best): the band holds "
                + (
                    "only that mode's output-layer Laplace uncertainty"
                    if fit.attrs["ensemble"].get("output_layer")
                    else "no uncertainty about the weights"
                )
            )
        calibration = fit.attrs["ensemble"].get("noise_calibration") or {}
        return fit, {
            "method": fit.attrs["settings"]["guide"],
            "optimizer": fit.attrs["settings"]["optimizer"],
            "converged": not reasons,
            "reason": "; ".join(reasons) or None,
            "attempts": attempts,
            "kept_steps": kept,
            "members_weighted": members,
            "member_training_nll": fit.attrs["ensemble"].get("member_training_nll"),
            "member_validation_nll": calibration.get("member_validation_nll"),
            "white_box_start": fit.attrs["settings"].get("white_box_start"),
        }
    svi = fit_svi(bm, md, polish=True, **svi_args)  # a checked MAP (Newton): the Laplace metric
    map_converged = bool((svi.attrs.get("convergence") or {}).get("converged"))
    if bm.family.learns_kinematics and settings.get("kinematics_posterior") == "laplace":
        fit = fit_laplace(
            bm,
            md,
            init=svi,
            key=key + 1,
            num_samples=int(settings["num_samples"]),
            num_chains=int(settings["num_chains"]),
            num_predictive=0,
            log_likelihood=False,
            complete=False,
        )
        report = fit.attrs["laplace"]
        eig = report["hessian_eig_min"]
        reasons = []
        if not map_converged:
            reasons.append("the MAP is not a checked stationary point")
        if eig <= 0:
            reasons.append(
                f"the Hessian at the MAP is not positive definite (eigenvalue {eig:.3g})"
            )
        if not report["reliable"]:
            k = report["pareto_k"]
            reasons.append(
                (
                    f"importance weights' Pareto k {k:.2f} > {report['pareto_k_max']:.2f}: the "
                    "Laplace proposal misses posterior mass"
                    if not np.isnan(k)
                    else "importance weights' tail could not be fitted (Pareto k NaN)"
                )
                + ("" if report["resampled"] else " (its draws kept, not resampled)")
            )
        return fit, {
            "method": "laplace+psis",
            "geometry": geometry,
            "attempts": 1,
            "converged": not reasons,
            "reason": "; ".join(reasons) or None,
            "map_converged": map_converged,
            "hessian_eig_min": eig,
            **{
                k: report[k]
                for k in (
                    "pareto_k",
                    "pareto_k_max",
                    "importance_ess",
                    "distinct_draws",
                    "nonquadratic_axes",
                )
            },
            "proposal": fit.attrs["settings"]["proposal"],
        }
    warmup = int(settings["num_warmup"])
    info: dict = {"method": "nuts", "geometry": geometry, "attempts": 0, "extended": 0}
    nuts_args = dict(
        num_samples=int(settings["num_samples"]),
        num_chains=int(settings["num_chains"]),
        chain_method="sequential",
        **common,
    )
    fit = None
    target = model_target_accept(bm)
    for attempt in range(max(1, int(settings.get("nuts_attempts", 2)))):
        extendable = fit is not None and fit.attrs["settings"]["metric"] not in NOT_EXTENDABLE
        if extendable and not info["divergences"]:
            # no divergence, only R-hat / ESS short: more draws of the same chains (R-hat's
            # sampling noise over tens of sites exceeds 1.01 at a few hundred draws)
            fit = fit_nuts(bm, md, key=key + 1 + attempt, extend=fit, **nuts_args)
            info["extended"] += 1
        else:  # a first run, or divergences: a new start, longer warm-up, smaller steps
            # (a laplace-curved run cannot be extended: it is re-run)
            if fit is not None and info["divergences"]:
                target = next_target_accept(target)
            fit = fit_nuts(
                bm,
                md,
                init=svi,
                key=key + 1 + attempt,
                metric="auto",
                num_warmup=warmup * 2**attempt,
                target_accept=target,
                max_tree_depth=int(settings.get("max_tree_depth", 10)),
                **nuts_args,
            )
        diag = fit.diagnostics()
        converged, reason = nuts_converged(diag, min_ess=float(settings.get("min_ess", 100)))
        stats = fit.idata["sample_stats"]
        info.update(
            attempts=attempt + 1,
            converged=converged,
            reason=reason,
            rhat_max=diag.get("rhat_max"),
            ess_bulk_min=diag.get("ess_bulk_min"),
            divergences=diag.get("divergences"),
            leapfrog_per_draw=float(stats["n_steps"].mean()),
            target_accept=target,
            map_converged=map_converged,
        )
        if converged:
            break
    return fit, info


def fit_cell(cell: dict, settings: dict, *, shared_dir=None) -> dict:
    """Fit ``cell["variant"]``'s posterior on the cell's training episodes and score it.
    ``shared_dir``: where the grid keeps what its cells share (:func:`grid_white_box_start`)."""
    seed = cell_seed(cell, int(settings["seed"]))
    data_key = _data_key(cell, settings)
    dataset, train, valid, test = cell_data(*data_key)
    robot = dataset.robot()
    md = model_data(train)
    # NEA: noise fixed at the nominal model's residual (models.nominal_torque_residual: learned
    # with the weights it has no mode), so its posterior is the conjugate Gaussian
    options = (
        {"noise_scale": nominal_torque_residual(robot, md)} if cell["variant"] == "nea" else {}
    )
    scales = grid_scales(cell, settings)
    bm = build_model(cell["variant"], robot, scales=scales, **options)
    bm, geometry = identifiable_where_possible(bm)
    start = time.perf_counter()
    white_box = grid_white_box_start(bm, train, cell, settings, shared_dir=shared_dir)
    fit, info = fit_posterior(
        bm, geometry, train, valid, settings, key=seed, white_box_start=white_box
    )
    fit_seconds = time.perf_counter() - start
    truth = _cached_truth(
        *data_key, rollout_steps(settings), int(settings.get("rollout_starts", 1))
    )
    seconds = float(settings.get("controller_seconds", 0))
    swing_up = seconds > 0 and not all(robot.actuated)
    true_success = _cached_true_controller(*data_key, seconds) if swing_up else None
    metrics = score_fit(
        bm,
        fit,
        dataset,
        test,
        settings,
        fit_seconds=fit_seconds,
        truth=truth,
        true_success=true_success,
        controller=_cached_controller(*data_key) if swing_up else None,
    )
    metrics["posterior"] = info
    metrics["scales"] = {k: list(v) for k, v in scales.items()}
    return metrics


def next_target_accept(target: float) -> float:
    """The step-size target of a NUTS re-run after divergences: a quarter of the distance to 1
    (0.8 -> 0.95 -> 0.9875), Stan's advice for divergent transitions: smaller steps where the
    posterior's curvature changes faster than one step size can follow."""
    return 1.0 - (1.0 - target) / 4.0


def rollout_steps(settings: dict) -> int:
    """RK4 steps of the uncontrolled rollouts."""
    return int(round(float(settings["rollout_seconds"]) / bn.DEFAULT_DT))


def base_parameter_error(bm, physical: dict, dataset) -> dict:
    """``{"base_error", "base_covered90"}`` of a fixed-kinematics white-box posterior (module
    docstring); true values below 1 % of the largest are compared relative to 1 % of the
    largest. Empty for models that learn their kinematics (their base parameters move with them)."""
    if bm.family.learns_kinematics or dataset.true_params is None or "theta" not in physical:
        return {}
    to_base = np.asarray(bn.base_parameters(bm.robot, 0).to_base)
    true = to_base @ np.asarray(dataset.true_params["theta"], float).reshape(-1)
    draws = np.asarray(physical["theta"], float).reshape(len(physical["theta"]), -1) @ to_base.T
    scale = np.maximum(np.abs(true), 0.01 * np.abs(true).max())
    lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
    return {
        "base_error": float(np.max(np.abs(draws.mean(axis=0) - true) / scale)),
        "base_covered90": float(np.mean((true >= lo) & (true <= hi))),
    }


def score_fit(
    bm,
    fit,
    dataset,
    test,
    settings: dict,
    *,
    fit_seconds: float,
    truth=None,
    true_success=None,
    controller=None,
) -> dict:
    """The cell's metrics for a fitted model (see the module docstring); ``truth``: the true
    rollouts ``(q, qd)`` each (starts, steps + 1, n) from :func:`rollout_starts`,
    ``true_success``: the controller's success on the true plant, and ``controller``: the
    provided controller of ``dataset``'s robot, each if already computed."""
    robot = dataset.robot()
    draws = thin_draws(fit.posterior_samples(), int(settings["draws"]))
    d = num_draws(draws)

    # held-out accelerations: posterior mean and the predictive band (noise included)
    ppc = heldout_ppc(bm, fit, test, max_draws=int(settings["draws"]))
    nmse = float(np.mean(ppc["nmse"]))

    # uncontrolled rollouts from the Figure-1 start and held-out states, against the true plant
    dt = bn.DEFAULT_DT
    steps = rollout_steps(settings)
    starts = int(settings.get("rollout_starts", 1))
    q0s, qd0s = rollout_starts(dataset, test, starts)
    if truth is None:
        truth = true_rollouts(dataset, q0s, qd0s, steps)
    q_true = np.asarray(truth[0])
    # every (start, draw) pair in one vmapped rollout: start-major, draws repeated per start
    tiled = jax.tree.map(lambda x: jnp.concatenate([x] * starts), draws)
    traj = make_rollout_fn(bm.qdd_fn, steps=steps, dt=dt)(
        tiled, jnp.asarray(np.repeat(q0s, d, axis=0)), jnp.asarray(np.repeat(qd0s, d, axis=0))
    )
    q_all = np.asarray(traj.q).reshape(starts, d, steps + 1, robot.n)
    horizon_steps = {
        f"{float(h):g}": max(1, min(steps, int(round(float(h) / dt)))) for h in settings["horizons"]
    }
    rmse = {h: [] for h in horizon_steps}
    cover = {h: [] for h in horizon_steps}
    for s in range(starts):
        band = credible_band(q_all[s], prob=0.9)
        errors = rollout_error(q_all[s], q_true[s], horizons_steps=set(horizon_steps.values()))
        for h, k in horizon_steps.items():
            rmse[h].append(float(np.median(errors[k])))
            inside = (q_true[s, k] >= band.lower[k]) & (q_true[s, k] <= band.upper[k])
            cover[h].append(np.asarray(inside, float))
        if s == 0:  # the Figure-1 rollout: energy, divergence, the report's figure
            fig_band = band
    qs = q_all[0]
    qds = np.asarray(traj.qd).reshape(starts, d, steps + 1, robot.n)[0]
    coverage = band_coverage(fig_band, q_true[0])

    # divergence, split; energy: the true energy along the predicted states, and the model's own
    finite = np.all(np.isfinite(qs) & np.isfinite(qds), axis=(1, 2))
    div = divergence_flags(robot, qs, qds)
    true_cls = classify_energy(rollout_energy(robot, qs, qds), divergent=div)
    own = physical = None
    if bm.family.white_box:
        physical = jax.vmap(bm.physical)(draws)
        if "theta" not in physical:  # identifiable geometry: theta | beta of the scored draws
            physical = {**physical, **_completion(bm, fit, draws)}
        dyn = bm.dynamics_robot
        params = params_from_physical(dyn, physical)
        own = classify_energy(rollout_energy(dyn, qs, qds, params=params), divergent=div)

    plausible = None
    base = {}
    if physical is not None:
        theta = np.asarray(physical["theta"])
        consistent = np.all(np.asarray(bn.is_physically_consistent(jnp.asarray(theta))), axis=1)
        plausible = float(np.mean(consistent))
        base = base_parameter_error(bm, physical, dataset)

    success = None
    if float(settings.get("controller_seconds", 0)) > 0 and not all(robot.actuated):
        success = controller_success(
            bm, draws, dataset, settings, true_success=true_success, controller=controller
        )

    stride = max(1, int(round(1.0 / (BAND_RATE_HZ * dt))))
    return {
        "variant": bm.name,
        "energy_class_declared": bm.energy_class,
        "accel_nmse": nmse,
        "accel_coverage90": ppc["coverage"],
        "accel_ppc": ppc,
        **base,
        "rollout_rmse": {h: float(np.median(v)) for h, v in rmse.items()},
        "rollout_coverage90": {h: float(np.mean(v)) for h, v in cover.items()},
        "rollout_starts": starts,
        "coverage90": coverage,
        "band_width": float(np.mean(fig_band.upper - fig_band.lower)),
        "divergent_fraction": float(np.mean(div)),
        "left_domain_fraction": float(np.mean(div & finite)),
        "nonfinite_fraction": float(np.mean(~finite)),
        "energy_own": None if own is None else {"label": own.label, **own.fractions},
        "energy_true": {"label": true_cls.label, **true_cls.fractions},
        "energy_gain_true_J": float(np.median(true_cls.max_gain)),
        "plausible_fraction": plausible,
        "controller": success,
        "fit_seconds": fit_seconds,
        "draws": d,
        "band": {
            "t": np.asarray(traj.t)[::stride].tolist(),
            "lower": fig_band.lower[::stride].tolist(),
            "median": fig_band.median[::stride].tolist(),
            "upper": fig_band.upper[::stride].tolist(),
            "truth": q_true[0][::stride].tolist(),
            "finite_fraction": fig_band.finite_fraction,
        },
    }


def _completion(bm, fit, draws: dict) -> dict:
    """theta and virtual parameters ``{name: (D, ...)}`` of the identifiable geometry's ``draws``
    (``bm.complete``: from the prior given each draw's base parameters; the fits skip it), or the
    fit's own where it completed them. The base-parameter error and physical consistency
    depend on theta only through the base parameters (and placements) the draws fix; the
    model's own energy up to a constant, which moves ``classify_energy``'s tolerance (its
    shares moved by up to 0.13 in 19 of a seed's 72 white-box cells: docs/measurements.md)."""
    if "theta" in fit.physical_names:
        thinned = thin_draws(fit.physical_samples(), num_draws(draws))
        return {k: thinned[k] for k in ("theta", "virtual") if k in thinned}
    key = jax.random.fold_in(jax.random.key(max(0, int(fit.attrs.get("seed", 0)))), 7)
    out = bm.complete(key, draws)
    return {k: out[k] for k in ("theta", "virtual")}


def controller_success(
    bm, draws, dataset, settings: dict, *, true_success=None, controller=None
) -> dict:
    """``{"success_rate", "true_system_success", "seconds"}``: the provided swing-up controller
    (:func:`analysis.controllers.default_controller`, designed on the nominal model) in closed
    loop for ``controller_seconds`` from the pendulum at 0.1 rad, on every draw and on the true
    plant (its actuation delay included; ``true_success`` if already known). Rail limits are
    not enforced: the provided cart-pole swing-up uses more than its rail even on the true
    system (``check_controller_result``). ``controller``: that controller, if already built."""
    seconds = float(settings["controller_seconds"])
    robot = dataset.robot()
    controller = default_controller(robot) if controller is None else controller
    check = _swing_up(robot, bm.qdd_fn, draws, seconds, controller=controller)
    return {
        "success_rate": check.success_rate,
        "true_system_success": true_controller_success(dataset, seconds, controller=controller)
        if true_success is None
        else bool(true_success),
        "seconds": seconds,
    }


def true_controller_success(dataset, seconds: float, *, controller=None) -> bool:
    """The provided controller's success on the true plant (see :func:`controller_success`)."""
    qdd = dataset.true_dynamics()
    delay = bn.delay_steps(dataset.true_plant(), bn.DEFAULT_DT)
    check = _swing_up(
        dataset.robot(),
        lambda _: qdd,
        {"x": jnp.zeros((1,))},
        seconds,
        delay_steps=delay,
        controller=controller,
    )
    return bool(check.success[0])


def _swing_up(
    robot, qdd_fn_of_draw, draws, seconds: float, *, delay_steps: int = 0, controller=None
):
    """The swing-up check of :func:`controller_success` on ``draws`` (a ``ControllerCheck``);
    ``controller``: :func:`analysis.controllers.default_controller` of ``robot`` if None."""
    n = robot.n
    run = make_rollout_fn(
        qdd_fn_of_draw,
        steps=int(round(seconds / bn.DEFAULT_DT)),
        controller=default_controller(robot) if controller is None else controller,
        delay_steps=delay_steps,
    )
    traj = run(draws, jnp.asarray(np.r_[np.zeros(n - 1), 0.1]), jnp.zeros(n))
    task = swing_up_task(robot)._replace(respect_limits=False)
    return evaluate_closed_loop(robot, traj, task, dt=bn.DEFAULT_DT)


@functools.lru_cache(maxsize=8)
def _cached_true_controller(system, kind, seed, duration, episode_duration, split, seconds):
    """:func:`true_controller_success` of a :func:`cell_data` dataset, once per worker process."""
    dataset = cell_data(system, kind, seed, duration, episode_duration, split)[0]
    controller = _cached_controller(system, kind, seed, duration, episode_duration, split)
    return true_controller_success(dataset, seconds, controller=controller)


@functools.lru_cache(maxsize=8)
def _cached_controller(system, kind, seed, duration, episode_duration, split):
    """The provided controller of a :func:`cell_data` dataset's robot, built once per worker
    process and robot: designing it (the swing-up's LQR linearises the nominal model) took
    3.6-3.8 s of each cell (profiled on a core shared with a grid worker). One object for the
    dataset kinds of a system (equal robots), so their closed-loop rollouts share one program
    (``analysis.rollouts.make_rollout_fn`` keys it by the controller)."""
    dataset = cell_data(system, kind, seed, duration, episode_duration, split)[0]
    return _robot_controller(dataset.robot())


@functools.lru_cache(maxsize=8)
def _robot_controller(robot):
    return default_controller(robot)
