"""One benchmark cell: simulate a dataset, fit one variant, score it on held-out data and rollouts.

All variants of a (system, dataset kind) pair share one dataset (:func:`data_seed`), generated once
per worker process (:func:`cell_data`), as the paper compares its variants on the same data.

``fit_cell(cell, settings) -> metrics`` is the default cell function of
:func:`analysis.benchmark.run_benchmark`. Metrics (JSON-able):

- ``accel_nmse``: normalised MSE of the posterior-mean joint acceleration on the held-out split,
  averaged over joints (``mean((qdd_hat - qdd)^2) / var(qdd)``).
- ``rollout_rmse``: {horizon s: median over draws of the RMS position error} of the uncontrolled
  Figure-1 rollout against the true system from the same start state.
- ``coverage90``: fraction of (time, joint) points of the true rollout inside the 90% band.
- ``energy``: energy class fractions of the model's own energy (white-box) and the true-energy
  growth along predicted states; ``divergent_fraction``.
- ``plausible_fraction``: fraction of draws whose every body is physically consistent;
  ``mass_rel_error``: median relative error of the body masses.
- ``fit_seconds``, ``converged`` (the SVI fit's loss plateau and gradient test; None after
  NUTS), and a down-sampled ``band`` of the Figure-1 rollout for the report's figure.

Models are built with ``models.data_scales`` of the training split (network/noise normalisers).
"""

from __future__ import annotations

import functools
import hashlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from analysis.diagnostics import accel_nmse, heldout_predictions
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
from inference import fit_nuts, fit_svi
from models import build_model, data_scales, model_data

FIGURE1_START = {"cartpole": (0.0, 2.0), "furuta": (0.0, 2.0)}
"""Start state (q; qd = 0) of the uncontrolled Figure-1 rollouts: pendulum at 2 rad from hanging."""
BAND_RATE_HZ = 25.0


def cell_seed(cell: dict, base: int) -> int:
    """A seed per cell derived from its id and the base seed (stable across runs and machines)."""
    digest = hashlib.sha256(f"{base}:{cell['id']}".encode()).hexdigest()
    return int(digest[:8], 16)


def data_seed(cell: dict, base: int) -> int:
    """The seed of a cell's dataset: one per (system, dataset kind), so that all 26 variants are
    fitted to and scored on the same data, as in the paper."""
    digest = hashlib.sha256(f"{base}:{cell['system']}:{cell['dataset']}".encode()).hexdigest()
    return int(digest[:8], 16)


@functools.lru_cache(maxsize=8)
def cell_data(system: str, kind: str, seed: int, duration: float):
    """``(dataset, train, valid, test)``, generated once per worker process and kept (pure in
    its arguments; a worker runs many cells of the same dataset)."""
    dataset = generate_dataset(system, kind, seed=seed, duration=duration)
    train, valid, test = dataset.split(seed=seed)
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


@functools.lru_cache(maxsize=8)
def _cached_true_figure1_rollout(system: str, kind: str, seed: int, duration: float, steps: int):
    """Positions (steps + 1, n) of :func:`true_figure1_rollout` of a :func:`cell_data` dataset,
    once per worker process."""
    return np.asarray(true_figure1_rollout(cell_data(system, kind, seed, duration)[0], steps).q)


def fit_cell(cell: dict, settings: dict) -> dict:
    """Fit ``cell["variant"]`` on ``cell["dataset"]`` data of ``cell["system"]`` and score it."""
    seed = cell_seed(cell, int(settings["seed"]))
    data_key = (
        cell["system"],
        cell["dataset"],
        data_seed(cell, int(settings["seed"])),
        float(settings["duration"]),
    )
    dataset, train, valid, test = cell_data(*data_key)
    robot = dataset.robot()
    bm = build_model(cell["variant"], robot, scales=data_scales(model_data(train), robot))
    start = time.perf_counter()
    fit = fit_svi(
        bm,
        model_data(train),
        key=seed,
        steps=int(settings["svi_steps"]),
        learning_rate=float(settings["learning_rate"]),
        num_samples=int(settings["draws"]),
        # networks stop where the validation episodes say they overfit (inference.early_stopping)
        validation=model_data(valid) if bm.has_networks else None,
        progress=False,
    )
    if settings["method"] == "svi+nuts":
        # NUTS from the MAP with the Laplace metric: adapted metrics saturated the tree depth
        # (~1,000 leapfrog steps per draw) on the DiffNEA models (inference/laplace.py)
        fit = fit_nuts(
            bm,
            model_data(train),
            init=fit,
            metric="laplace",
            key=seed + 1,
            num_warmup=int(settings["num_warmup"]),
            num_samples=int(settings["num_samples"]),
            num_chains=int(settings["num_chains"]),
            progress=False,
        )
    fit_seconds = time.perf_counter() - start
    steps = rollout_steps(settings)
    q_true = _cached_true_figure1_rollout(*data_key, steps)
    return score_fit(bm, fit, dataset, test, settings, fit_seconds=fit_seconds, q_true=q_true)


def rollout_steps(settings: dict) -> int:
    """RK4 steps of the Figure-1 rollout."""
    return int(round(float(settings["rollout_seconds"]) / bn.DEFAULT_DT))


def score_fit(bm, fit, dataset, test, settings: dict, *, fit_seconds: float, q_true=None) -> dict:
    """The cell's metrics for a fitted model (see the module docstring); ``q_true``: the true
    system's Figure-1 rollout (steps + 1, n) if already computed."""
    robot = dataset.robot()
    draws = thin_draws(fit.posterior_samples(), int(settings["draws"]))
    d = num_draws(draws)

    # held-out accelerations
    pred = heldout_predictions(bm, draws, test)
    nmse = float(np.mean(accel_nmse(pred, test.arrays()[2])))

    # uncontrolled Figure-1 rollout against the true system
    dt = bn.DEFAULT_DT
    steps = rollout_steps(settings)
    q0 = jnp.asarray(FIGURE1_START.get(dataset.system, (0.0,) * robot.n))
    qd0 = jnp.zeros(robot.n)
    traj = make_rollout_fn(bm.qdd_fn, steps=steps, dt=dt)(draws, q0, qd0)
    if q_true is None:
        q_true = np.asarray(true_figure1_rollout(dataset, steps).q)
    qs, qds = np.asarray(traj.q), np.asarray(traj.qd)
    band = credible_band(qs, prob=0.9)
    coverage = band_coverage(band, q_true)
    horizon_steps = {
        f"{float(h):g}": max(1, min(steps, int(round(float(h) / dt)))) for h in settings["horizons"]
    }
    errors = rollout_error(qs, q_true, horizons_steps=set(horizon_steps.values()))
    horizons = {h: float(np.median(errors[k])) for h, k in horizon_steps.items()}

    # energy: the model's own (white-box) and the true energy along the predicted states
    div = divergence_flags(robot, qs, qds)
    e_true = rollout_energy(robot, qs, qds)
    true_cls = classify_energy(e_true, divergent=div)
    own = None
    physical = None
    if bm.family.white_box:
        physical = jax.vmap(bm.physical)(draws)
        if "theta" not in physical:  # identifiable geometry: theta | beta completed in the fit
            physical = thin_draws(fit.physical_samples(), int(settings["draws"]))
        dyn = bm.dynamics_robot
        params = params_from_physical(dyn, physical)
        own = classify_energy(rollout_energy(dyn, qs, qds, params=params), divergent=div)

    # physical plausibility
    plausible = mass_err = None
    if physical is not None:
        theta = np.asarray(physical["theta"])
        plausible = float(
            np.mean(np.all(np.asarray(bn.is_physically_consistent(jnp.asarray(theta))), axis=1))
        )
        m_true = np.asarray(dataset.true_plant().params.theta)[:, 0]
        mass_err = float(np.median(np.abs(theta[:, :, 0] - m_true[None]) / m_true[None]))

    stride = max(1, int(round(1.0 / (BAND_RATE_HZ * dt))))
    return {
        "variant": bm.name,
        "energy_class_declared": bm.energy_class,
        "accel_nmse": nmse,
        "rollout_rmse": horizons,
        "coverage90": coverage,
        "divergent_fraction": float(np.mean(div)),
        "energy_own": None if own is None else {"label": own.label, **own.fractions},
        "energy_true": {"label": true_cls.label, **true_cls.fractions},
        "energy_gain_true_J": float(np.median(true_cls.max_gain)),
        "plausible_fraction": plausible,
        "mass_rel_error": mass_err,
        "fit_seconds": fit_seconds,
        # SVI: loss plateau and gradient test (inference.fit_svi); None for other methods
        "converged": (fit.attrs.get("convergence") or {}).get("converged"),
        "draws": d,
        "band": {
            "t": np.asarray(traj.t)[::stride].tolist(),
            "lower": band.lower[::stride].tolist(),
            "median": band.median[::stride].tolist(),
            "upper": band.upper[::stride].tolist(),
            "truth": q_true[::stride].tolist(),
            "finite_fraction": band.finite_fraction,
        },
    }
