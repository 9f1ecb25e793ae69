"""The main job: simulate cart-pole data, fit a variant with SVI then NUTS, summarise, plot, report.

``run_main_job()`` is what ``bayes-nea`` / the README run first; every step is a library call a
script could make the same way (``data.generate_dataset``, ``models.build_model``,
``inference.fit_svi`` / ``fit_nuts``, ``analysis`` rollouts, energy, plots).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from analysis.cells import FIGURE1_START, rollout_steps, score_fit, true_figure1_rollout
from analysis.diagnostics import diagnostic_plots
from analysis.energy import analyse_energy
from analysis.plots import plot_energy, plot_rollout_band
from analysis.rollouts import credible_band, make_rollout_fn
from data import generate_dataset
from data.io import write_text_atomic
from inference import fit_nuts, fit_svi, save_result
from inference.identified import identified_summary
from models import build_model, data_scales, model_data, variant_names
from models.identifiable import identifiable_where_possible

SIZES = {
    False: {
        "duration": 30.0,
        "svi_steps": 3000,
        "num_warmup": 200,
        "num_samples": 500,
        "draws": 500,
        "rollout_seconds": 4.0,
    },
    True: {
        "duration": 6.0,
        "svi_steps": 300,
        "num_warmup": 30,
        "num_samples": 30,
        "draws": 30,
        "rollout_seconds": 1.0,
    },
}


def run_main_job(
    *,
    variant: str = "diffnea/viscous/informative",
    out_dir: str | os.PathLike = "bayes-nea-output",
    seed: int = 0,
    quick: bool = False,
    dataset_kind: str = "trajectories",
    progress: bool = True,
) -> dict[str, Path]:
    """Simulate cart-pole data, fit ``variant`` (SVI, then NUTS from the SVI fit), print the ArviZ
    summary of the physical parameters, write the rollout figure with credible bands, the energy
    figure, diagnostics plots, the posterior (netCDF) and a short markdown report.

    Args:
        variant: one of ``models.variant_names()``.
        out_dir: folder for the outputs (created).
        seed: seeds the data, SVI and NUTS.
        quick: tiny sizes (seconds), for tests and smoke runs.
        dataset_kind: "uniform", "trajectories" or "hardware".
    Returns:
        {"report", "rollout", "energy", "posterior", "trace", "forest", "pair"} paths.
    """
    if variant not in variant_names():
        raise ValueError(f"unknown variant {variant!r}; valid variants are {list(variant_names())}")
    size = SIZES[bool(quick)]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    say = print if progress else (lambda *a, **k: None)

    t0 = time.perf_counter()
    dataset = generate_dataset("cartpole", dataset_kind, seed=seed, duration=size["duration"])
    train, _, test = dataset.split(seed=seed)
    robot = dataset.robot()
    bm, geometry = identifiable_where_possible(
        build_model(variant, robot, scales=data_scales(model_data(train), robot))
    )
    say(
        f"data: cart-pole, {dataset_kind}, {dataset.n_samples} samples ({train.n_samples} for "
        f"fitting); {geometry} geometry"
    )
    start = time.perf_counter()
    svi = fit_svi(
        bm,
        model_data(train),
        key=seed,
        steps=size["svi_steps"],
        progress=progress,
        polish=geometry == "identifiable",  # a checked MAP where the Hessian is small
    )
    svi_s = time.perf_counter() - start
    # two chains (R-hat) where the caller split the host into devices (cli/run.py does), else one
    chains = 2 if jax.local_device_count() >= 2 else 1
    start = time.perf_counter()
    fit = fit_nuts(
        bm,
        model_data(train),
        init=svi,
        metric="laplace",
        key=seed + 1,
        num_warmup=size["num_warmup"],
        num_samples=size["num_samples"],
        num_chains=chains,
        progress=progress,
    )
    nuts_s = time.perf_counter() - start
    paths = {"posterior": out / "posterior.nc"}
    save_result(fit, paths["posterior"])

    table = fit.summary()
    say("\nposterior of the physical parameters (ArviZ summary):")
    say(table.to_string())
    # convergence judged on what the data identify (base parameters, coefficients, noise and
    # predicted accelerations at held-out states), the truth beside it
    q_te, qd_te, _, tau_te = (x[:: max(1, test.n_samples // 20)][:20] for x in test.arrays())
    identified = identified_summary(
        fit, bm, states=(q_te, qd_te, tau_te), truth=true_identified(bm, dataset)
    )
    say("\nidentified quantities (convergence is judged on these):")
    say(identified.to_string())
    conv = fit.diagnostics()
    conv["identified_rhat_max"] = _max_or_none(identified["r_hat"])
    conv["identified_ess_bulk_min"] = float(identified["ess_bulk"].min())
    if "truth" in identified:
        known = identified["covered_90"].dropna()
        conv["identified_truth_covered"] = f"{int(known.sum())}/{len(known)}"
    stats = fit.idata["sample_stats"]
    conv["mean_leapfrog_steps"] = float(stats["n_steps"].mean())
    conv["max_tree_depth"] = int(stats["tree_depth"].max())

    settings = {
        "draws": size["draws"],
        "rollout_seconds": size["rollout_seconds"],
        "horizons": [0.1, 0.5, 1.0],
    }
    # the true system from the Figure-1 start state, shared by the metrics and the figures
    steps = rollout_steps(settings)
    q0, qd0 = jnp.asarray(FIGURE1_START["cartpole"]), jnp.zeros(robot.n)
    truth = true_figure1_rollout(dataset, steps)
    metrics = score_fit(
        bm,
        fit,
        dataset,
        test,
        settings,
        fit_seconds=svi_s + nuts_s,
        truth=(np.asarray(truth.q)[None], np.asarray(truth.qd)[None]),
    )
    ppc = metrics["accel_ppc"]

    # rollout figure: the posterior's band vs the true system
    draws = fit.posterior_samples()
    traj = make_rollout_fn(bm.qdd_fn, steps=steps)(draws, q0, qd0)
    band = credible_band(traj.q, prob=0.9)
    paths["rollout"] = plot_rollout_band(
        out / "rollout.png",
        traj.t,
        band,
        robot=robot,
        truth=truth.q,
        title=f"{variant}: uncontrolled cart-pole rollouts, 90% band ({jax.tree.leaves(draws)[0].shape[0]} draws)",
    )
    energy = analyse_energy(robot, traj.q, traj.qd)
    e_true = analyse_energy(robot, truth.q[None], truth.qd[None]).energy[0]
    paths["energy"] = plot_energy(
        out / "energy.png",
        traj.t,
        energy.energy,
        classes=energy.classes,
        truth=e_true,
        title=f"{variant}: energy (true parameters) along the predicted states",
    )
    paths.update(diagnostic_plots(fit, out))

    lines = [
        f"# bayes-nea main job: {variant} on simulated cart-pole data",
        "",
        f"- data: {dataset_kind}, {size['duration']} s, {dataset.n_samples} samples; seed {seed}",
        f"- fit: SVI {size['svi_steps']} steps ({svi_s:.1f} s), NUTS {size['num_warmup']} + {size['num_samples']} per chain ({nuts_s:.1f} s, Laplace metric included)",
        f"- NUTS: {chains} chain(s), Laplace metric (inverse Hessian at the SVI MAP), "
        f"{conv['mean_leapfrog_steps']:.1f} leapfrog steps per draw on average, max tree depth {conv['max_tree_depth']}",
        f"- geometry: {geometry}; convergence on the identified quantities (base parameters, "
        f"coefficients, noise, predicted held-out accelerations): R-hat max "
        f"{_fmt(conv['identified_rhat_max'], '.3f')}, bulk ESS min "
        f"{conv['identified_ess_bulk_min']:.0f}; divergences {conv.get('divergences')}; true "
        f"values inside the 90% interval: {conv.get('identified_truth_covered', 'n/a')}",
        f"- on all sampled sites: R-hat max {_fmt(conv.get('rhat_max'), '.3f')}, bulk ESS min "
        f"{_fmt(conv.get('ess_bulk_min'), '.0f')}",
        f"- held-out acceleration NMSE (posterior mean): {metrics['accel_nmse']:.3g}; 90% predictive coverage of held-out qdd {ppc['coverage']:.2f}",
        "- uncontrolled rollout RMSE vs the true system: "
        + ", ".join(f"{h} s: {v:.3g}" for h, v in metrics["rollout_rmse"].items()),
        f"- coverage of the true rollout by the 90% band: {metrics['coverage90']:.2f}",
        f"- energy (true parameters along predicted states): {energy.label} ({', '.join(f'{k} {v:.2f}' for k, v in energy.fractions.items())})",
        f"- physically consistent draws: {_fmt(metrics['plausible_fraction'], '.2f')}; largest "
        f"relative error of the posterior-mean base parameters "
        f"{_fmt(metrics.get('base_error'), '.3f')}, truth inside their 90% intervals "
        f"{_fmt(metrics.get('base_covered90'), '.2f')}",
        "",
        "## Identified quantities, with the truth",
        "",
        _markdown(identified),
        "",
        "## Posterior of the physical parameters",
        "",
        _markdown(table),
        "",
        "![rollouts](rollout.png)",
        "",
        "![energy](energy.png)",
        "",
        f"Total time {time.perf_counter() - t0:.0f} s.",
    ]
    paths["report"] = out / "report.md"
    write_text_atomic(paths["report"], "\n".join(lines) + "\n")
    metrics_json = {
        "metrics": {k: v for k, v in metrics.items() if k != "band"},
        "ppc": ppc,
        "convergence": conv,
    }
    write_text_atomic(out / "metrics.json", json.dumps(metrics_json, indent=1, default=float))
    say(
        f"\nwrote {', '.join(str(p) for p in paths.values())} (in {time.perf_counter() - t0:.0f} s)"
    )
    return paths


def true_identified(model, dataset) -> dict:
    """The true identified quantities of simulated data: base parameters ``B theta`` of the true
    bodies and the true friction coefficients (names as in ``inference.identified``)."""
    truth = {}
    if dataset.true_params is None:
        return truth
    theta = np.asarray(dataset.true_params["theta"], np.float64).reshape(-1)
    if not model.family.learns_kinematics and model.family.linear_in_theta:
        truth["base_parameters"] = np.asarray(bn.base_parameters(model.robot, 0).to_base) @ theta
    for name in ("viscous", "coulomb"):
        if name in dataset.true_params:
            truth[name] = np.asarray(dataset.true_params[name], np.float64)
    return truth


def _max_or_none(values):
    values = np.asarray(values, float)
    return float(np.nanmax(values)) if np.isfinite(values).any() else None


def _markdown(table) -> str:
    if hasattr(table, "to_markdown") and _has_tabulate():
        return table.to_markdown()
    return "```\n" + table.to_string() + "\n```"


def _fmt(value, spec: str) -> str:
    """``format(value, spec)``, or ``"n/a"`` for None (e.g. R-hat of a single chain)."""
    return "n/a" if value is None else format(value, spec)


def _has_tabulate() -> bool:
    try:  # an optional dependency of pandas' to_markdown, probed on purpose
        import tabulate  # noqa: F401
    except ImportError:
        return False
    return True
