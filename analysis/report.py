"""The benchmark report: markdown tables, figures and the paper's three conclusions, measured.

DiffNEA (Lutter et al. 2020), sections 5-6: (1) energy-bounded models do not diverge; (2) no-Kin
DiffNEA is about as good as DiffNEA; (3) informative priors (the paper's "with prior") change
little. :func:`conclusions` computes each from the cell records; :func:`write_report` writes
``report.md`` beside ``figure1.png`` and the metric grids.
"""

from __future__ import annotations

import collections
import os
import re
from pathlib import Path

import numpy as np

from analysis.benchmark import load_records, recorded_settings
from analysis.cells import ENSEMBLE_ATTEMPTS
from analysis.plots import plot_figure1, plot_grid, record_metric
from data.io import write_text_atomic

_get = record_metric


def _num(x) -> float:
    return float(x) if isinstance(x, int | float) and x is not None else np.nan


def _largest_horizon(records) -> str | None:
    keys = set()
    for r in records:
        keys |= set((_get(r, "rollout_rmse") or {}).keys())
    return max(keys, key=float) if keys else None


ERROR_FLOOR = 1e-6
"""Errors (m, rad, or NMSE) below this are treated as equal in paired ratios: a noise-free fit of
an exact model reaches 1e-19, and ratios of rounding errors would swamp the median."""


def _ratio(x: float, other: float) -> float:
    return max(x, ERROR_FLOOR) / max(other, ERROR_FLOOR)


def _key(r) -> tuple:
    c = r["cell"]
    return c["system"], c["dataset"], c.get("seed", 0), c["variant"]


def _paired(records, a: str, b: str, key: str, *, suffix: bool = False):
    """``(ratios, seeds)``: metric(variant a) / metric(variant b) over cells matched on system,
    dataset, seed and the rest of the variant name (``a``/``b`` replace its prefix, or its
    suffix), and each pair's dataset seed."""
    by = {_key(r): _num(_get(r, key)) for r in records if r["status"] == "ok"}
    ratios, seeds = [], []
    for (s, d, k, v), x in by.items():
        if suffix and v.endswith(a):
            other = by.get((s, d, k, v[: -len(a)] + b))
        elif not suffix and v.startswith(a):
            other = by.get((s, d, k, b + v[len(a) :]))
        else:
            continue
        if other is not None and np.isfinite(x) and np.isfinite(other):
            ratios.append(_ratio(x, other))
            seeds.append(k)
    return np.asarray(ratios), np.asarray(seeds, int)


BOOTSTRAP = 2000
"""Bootstrap resamples of the verdicts' intervals (percentile intervals, fixed seed)."""
FACTOR = 2.0
"""Conclusions 2 and 3 ("about as good", "change little"): the median paired ratio within
``[1/FACTOR, FACTOR]``."""
DIVERGENCE_BOUND = 0.01
"""Conclusion 1 ("do not diverge"): the mean fraction of divergent draws below this."""


def bootstrap_interval(
    values, statistic=np.median, *, groups=None, prob: float = 0.95, seed: int = 0
):
    """``(estimate, lower, upper)``: ``statistic`` of ``values`` and its percentile bootstrap
    interval (Efron & Tibshirani 1993) over ``BOOTSTRAP`` resamples; NaNs when there are no
    values.

    Without ``groups`` (or with one group) the values (cells or matched pairs) are resampled.
    With ``groups`` (one label per value: the dataset seed) and more than one group, each
    resample is two-stage: the groups with replacement, then the values within each chosen
    group with replacement (the cluster bootstrap of Davison & Hinkley 1997, sec. 3.8), so the
    interval carries the variation between dataset seeds as well as within one.
    """
    values = np.asarray(values, float)
    keep = np.isfinite(values)
    values = values[keep]
    if values.size == 0:
        return np.nan, np.nan, np.nan
    rng = np.random.default_rng(seed)
    labels = None if groups is None else np.asarray(groups)[keep]
    clusters = [] if labels is None else [values[labels == g] for g in np.unique(labels)]
    if len(clusters) <= 1:
        idx = rng.integers(0, values.size, size=(BOOTSTRAP, values.size))
        stats = np.apply_along_axis(statistic, 1, values[idx])
    else:
        stats = np.empty(BOOTSTRAP)
        for b in range(BOOTSTRAP):
            chosen = rng.integers(0, len(clusters), size=len(clusters))
            stats[b] = statistic(
                np.concatenate(
                    [clusters[c][rng.integers(0, clusters[c].size, clusters[c].size)] for c in chosen]
                )
            )
    lo, hi = np.quantile(stats, [(1 - prob) / 2, (1 + prob) / 2])
    return float(statistic(values)), float(lo), float(hi)


def _interval_verdict(lo: float, hi: float, low: float, high: float):
    """True if ``[lo, hi]`` lies inside ``[low, high]``, False if it lies outside, None if it
    straddles a bound or is undefined (the data cannot decide)."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return None
    if low <= lo and hi <= high:
        return True
    if hi < low or lo > high:
        return False
    return None


def conclusions(records) -> dict:
    """The paper's three claims as hypotheses, measured on the records with 95 % bootstrap
    intervals, per prior (informative, weak) where the claim is about one prior.

    1. ``energy_bounded``: for variants declared conserving or dissipative the mean fraction of
       posterior draws whose uncontrolled rollout diverges (leaves the state domain or becomes
       non-finite) is below :data:`DIVERGENCE_BOUND` (interval over seeds and cells), beside the same for
       the unbounded variants and the fraction of draws whose *own* energy grows.
    2. ``nokin_vs_diffnea``: the median over matched cells of rollout RMSE(no-Kin) / RMSE(DiffNEA)
       lies within a factor :data:`FACTOR` (interval over seeds and pairs).
    3. ``priors``: the median of RMSE(informative) / RMSE(weak) lies within a factor
       :data:`FACTOR`, per family.

    A verdict is True when the whole interval satisfies the hypothesis, False when none of it
    does, None when the interval straddles the bound or there are no cells.

    Returns:
        {"energy_bounded": {prior: {...}}, "nokin_vs_diffnea": {prior: {...}},
        "priors": {family: {...}}, "metric": the rollout RMSE key used}.
    """
    ok = [r for r in records if r["status"] == "ok"]
    h = "1" if any("1" in (_get(r, "rollout_rmse") or {}) for r in ok) else _largest_horizon(ok)
    key = f"rollout_rmse.{h}" if h else "accel_nmse"
    out: dict = {"metric": key}

    def prior_of(r):  # "nea" has the informative prior, "ffnn" the weak one (models.spec)
        v = r["cell"]["variant"]
        return v.rsplit("/", 1)[-1] if "/" in v else ("weak" if v == "ffnn" else "informative")

    energy = {}
    for prior in ("informative", "weak"):
        rows = {}
        for label, classes in (
            ("bounded", ("conserving", "dissipative")),
            ("unbounded", ("unbounded",)),
        ):
            cells = [
                r
                for r in ok
                if _get(r, "energy_class_declared") in classes and prior_of(r) == prior
            ]
            div = [_num(_get(r, "divergent_fraction")) for r in cells]
            seeds = [r["cell"].get("seed", 0) for r in cells]
            est, lo, hi = bootstrap_interval(div, np.mean, groups=seeds)
            own = [_num((_get(r, "energy_own") or {}).get("gaining")) for r in cells]
            rows[label] = {
                "cells": len(cells),
                "converged_cells": sum(bool(_get(r, "posterior.converged")) for r in cells),
                "mean_divergent_fraction": est,
                "interval": [lo, hi],
                "cells_with_divergence": int(np.sum(np.asarray(div) > 0)),
                "mean_left_domain_fraction": _nanmean(
                    _get(r, "left_domain_fraction") for r in cells
                ),
                "mean_nonfinite_fraction": _nanmean(_get(r, "nonfinite_fraction") for r in cells),
                "mean_own_energy_gaining_fraction": _nanmean(own),
                "mean_true_energy_gaining_fraction": _nanmean(
                    (_get(r, "energy_true") or {}).get("gaining") for r in cells
                ),
            }
        b = rows["bounded"]
        rows["holds"] = _interval_verdict(*b["interval"], 0.0, DIVERGENCE_BOUND)
        energy[prior] = rows
    out["energy_bounded"] = energy

    def ratio_claim(paired):
        ratios, seeds = paired
        est, lo, hi = bootstrap_interval(ratios, np.median, groups=seeds)
        return {
            "pairs": int(np.size(ratios)),
            "seeds": sorted({int(k) for k in seeds}),
            "median_ratio": est,
            "interval": [lo, hi],
            "holds": _interval_verdict(lo, hi, 1.0 / FACTOR, FACTOR),
        }

    out["nokin_vs_diffnea"] = {
        prior: ratio_claim(
            _paired(
                [r for r in ok if r["cell"]["variant"].endswith("/" + prior)],
                "nokin-diffnea/",
                "diffnea/",
                key,
            )
        )
        for prior in ("informative", "weak")
    }
    out["priors"] = {
        family: ratio_claim(
            _paired(
                [r for r in ok if r["cell"]["variant"].startswith(family + "/")],
                "/informative",
                "/weak",
                key,
                suffix=True,
            )
        )
        for family in ("diffnea", "nokin-diffnea")
    }
    return out


def _nanmean(values) -> float:
    x = np.asarray([_num(v) for v in values], float)
    return float(np.nanmean(x)) if np.isfinite(x).any() else np.nan


def _fmt(x, spec=".3g") -> str:
    x = _num(x)
    return "n/a" if not np.isfinite(x) else format(x, spec)


COLUMNS = (
    ("posterior", None),
    ("converged", None),
    ("acc. NMSE", "accel_nmse"),
    ("acc. cov. 90%", "accel_coverage90"),
    ("base err.", "base_error"),
    ("base cov. 90%", "base_covered90"),
    ("rollout RMSE {h} s", "rollout_rmse.{h}"),
    ("rollout cov. {h} s", "rollout_coverage90.{h}"),
    ("band width", "band_width"),
    ("own energy gains", "energy_own.gaining"),
    ("left domain", "left_domain_fraction"),
    ("non-finite", "nonfinite_fraction"),
    ("controller success", "controller.success_rate"),
    ("fit s", "fit_seconds"),
)


def _table(records, system: str, dataset: str, horizons) -> list[str]:
    """One row per variant: the mean over the dataset seeds of each metric (module
    :data:`COLUMNS`), the posterior's method and how many seeds' posteriors converged."""
    head, keys = [], []
    for label, key in COLUMNS:
        if key and "{h}" in key:
            head += [label.format(h=h) for h in horizons]
            keys += [key.format(h=h) for h in horizons]
        else:
            head.append(label)
            keys.append(key)
    lines = ["| variant | " + " | ".join(head) + " |", "|" + "---|" * (len(head) + 1)]
    mine = [r for r in records if r["cell"]["system"] == system and r["cell"]["dataset"] == dataset]
    for variant in sorted({r["cell"]["variant"] for r in mine}):
        rows = [r for r in mine if r["cell"]["variant"] == variant]
        done = [r for r in rows if r["status"] == "ok"]
        if not done:
            error = str(rows[0].get("error"))[:60]
            lines.append(f"| {variant} | failed: {error} |" + " |" * (len(head) - 1))
            continue
        methods = sorted({str(_get(r, "posterior.method")) for r in done})
        converged = sum(bool(_get(r, "posterior.converged")) for r in done)
        cells = [variant, "/".join(methods), f"{converged}/{len(rows)}"]
        for key in keys[2:]:
            shares = ("cov", "fraction", "gaining", "success")
            spec = ".2f" if any(w in key for w in shares) else ".3g"
            spec = ".0f" if key == "fit_seconds" else spec
            cells.append(_fmt(_nanmean(_get(r, key) for r in done), spec))
        lines.append("| " + " | ".join(cells) + " |")
    return lines


_NUMBER = re.compile(r"-?\d+(\.\d+)?(e[+-]?\d+)?")


def not_converged(records) -> dict:
    """The finished cells without a converged posterior, and why.

    Returns ``{"cells": [...], "reasons": {method: Counter}}``: each cell as ``(system, dataset,
    seed, variant, method, attempts, reason)`` (the reason as the cell recorded it), and per
    posterior method how often each kind of reason occurs (a record's reason split at ``"; "``,
    its numbers replaced by ``#``, so "2 divergent transitions" and "5 divergent transitions"
    count as one kind).
    """
    cells, reasons = [], collections.defaultdict(collections.Counter)
    for r in sorted(records, key=_key):
        if r["status"] != "ok" or _get(r, "posterior.converged"):
            continue
        method = str(_get(r, "posterior.method"))
        reason = str(_get(r, "posterior.reason") or "not recorded")
        cells.append((*_key(r), method, _get(r, "posterior.attempts"), reason))
        for clause in reason.split("; "):
            reasons[method][_NUMBER.sub("#", clause)] += 1
    return {"cells": cells, "reasons": dict(reasons)}


def _not_converged_lines(records) -> list[str]:
    """The report's section on cells without a converged posterior: counts per method and kind
    of reason, then every such cell with its reason (in a collapsed block)."""
    nc = not_converged(records)
    ok = [r for r in records if r["status"] == "ok"]
    if not nc["cells"]:
        return ["## Cells without a converged posterior", "", "None.", ""]
    lines = [
        "## Cells without a converged posterior",
        "",
        f"{len(nc['cells'])} of {len(ok)} finished cells. Their metrics are in the tables and "
        "the conclusions (every finished cell counts); what a cell's posterior lacks is below. "
        "Kinds of reason (a cell may give several; `#` stands for the cell's numbers):",
        "",
        "| posterior | cells | not converged | reason | cells with it |",
        "|---|---|---|---|---|",
    ]
    for method in sorted(nc["reasons"]):
        total = sum(str(_get(r, "posterior.method")) == method for r in ok)
        missed = sum(cell[4] == method for cell in nc["cells"])
        for i, (kind, count) in enumerate(nc["reasons"][method].most_common()):
            head = f"{method} | {total} | {missed}" if i == 0 else " | | "
            lines.append(f"| {head} | {kind} | {count} |")
    lines += [
        "",
        "<details><summary>Every cell without a converged posterior, with its reason</summary>",
        "",
        "| system | dataset | seed | variant | posterior | attempts | reason |",
        "|---|---|---|---|---|---|---|",
    ]
    for system, dataset, seed, variant, method, attempts, reason in nc["cells"]:
        reason = reason.replace("|", "/")
        lines.append(
            f"| {system} | {dataset} | {seed} | {variant} | {method} | {attempts} | {reason} |"
        )
    return lines + ["", "</details>", ""]


def _verdict(x) -> str:
    return {True: "**holds**", False: "**does not hold**", None: "**undecided**"}[x]


def _ratio_text(c: dict) -> str:
    if not c["pairs"]:
        return "No matched cells."
    lo, hi = c["interval"]
    return f"Median {_fmt(c['median_ratio'])} [{_fmt(lo)}, {_fmt(hi)}] over {c['pairs']} pairs."


def write_report(
    out_dir: str | os.PathLike,
    *,
    report_path: str | os.PathLike | None = None,
    title: str = "Benchmark report",
) -> Path:
    """Write ``report.md`` (tables, figures, conclusions) from the cells under ``out_dir``.

    Figures ``figure1.png``, ``grid_nmse.png`` and ``grid_rollout.png`` go beside the report.
    Returns the report's path.
    """
    records = load_records(out_dir)
    if not records:
        raise ValueError(f"no cell records under {out_dir}/cells")
    report_path = Path(report_path) if report_path else Path(out_dir) / "report.md"
    fig_dir = report_path.parent
    ok = [r for r in records if r["status"] == "ok"]
    horizons = sorted({h for r in ok for h in (_get(r, "rollout_rmse") or {})}, key=float)
    figs = {}
    first_seed = min(r["cell"].get("seed", 0) for r in records)
    first = [r for r in records if r["cell"].get("seed", 0) == first_seed]  # figures: one seed
    if ok:
        figs["figure1"] = plot_figure1(fig_dir / "figure1.png", [r for r in first if r in ok])
        figs["nmse"] = plot_grid(
            fig_dir / "grid_nmse.png",
            first,
            metric="accel_nmse",
            title="held-out acceleration NMSE",
        )
        if horizons:
            figs["rollout"] = plot_grid(
                fig_dir / "grid_rollout.png",
                first,
                metric=f"rollout_rmse.{horizons[-1]}",
                title=f"rollout RMSE at {horizons[-1]} s",
            )
    concl = conclusions(records)
    settings = records[0].get("settings", {})
    total_fit = sum(_num(_get(r, "fit_seconds")) for r in ok)
    total_cell = sum(_num(r.get("seconds")) for r in records)
    per_seed = collections.Counter(r["cell"].get("seed", 0) for r in records)
    seeds = ", ".join(f"{k} ({per_seed[k]} cells)" for k in sorted(per_seed))
    converged = [r for r in ok if _get(r, "posterior.converged")]
    ensembles = [
        recorded_settings(r.get("settings", {}))
        for r in ok
        if _get(r, "posterior.method") == "ensemble"
    ]
    optimizers = collections.Counter(
        f"{s['ensemble_optimizer']} x {s['ensemble_steps']} in {s['ensemble_dtype']}"
        for s in ensembles
    )
    members = ", ".join(f"{k} ({n} cells)" for k, n in sorted(optimizers.items())) or "none"
    lines = [
        f"# {title}",
        "",
        f"Cells: {len(records)} ({len(ok)} finished, {len(records) - len(ok)} failed; "
        f"{len(converged)} with a converged posterior) over dataset seeds {seeds}. Setting "
        f"`{settings.get('name')}`: {settings.get('duration')} s of data per dataset in "
        f"{settings.get('episode_duration')} s episodes (split {settings.get('split')}), "
        f"{settings.get('svi_steps')} SVI steps, ensemble members by {members}, "
        f"NUTS {settings.get('num_chains')} x "
        f"({settings.get('num_warmup')} + {settings.get('num_samples')}), "
        f"{settings.get('draws')} posterior draws per cell. Summed fit time {total_fit:.0f} s; "
        f"summed cell time {total_cell:.0f} s.",
        "",
        "Posteriors (`posterior` column): `nuts` for white-box variants without networks and "
        "NEA, `ensemble` (early-stopped MAPs from prior draws; members whose training "
        "negative log-likelihood is more than 1 nat per scalar above the best member's are "
        "failed optimisations with weight 0, the others equal weights; noise calibrated on the "
        "validation episodes) for variants with networks, `laplace+psis` (the Laplace "
        "approximation at the MAP with each axis's shape fitted to the log joint along it, "
        "corrected by Pareto-smoothed importance resampling where the weights' Pareto k says "
        "the correction is reliable, its draws kept uncorrected where not) for "
        "learned kinematics where the setting says so. Not converged means: NUTS with "
        "divergences, R-hat above 1.01 or bulk ESS below the setting's `min_ess` after its "
        "re-runs; an ensemble with a member not stopped on its validation minimum by the last "
        "step, or with fewer than two members left; a Laplace fit whose MAP "
        "is not a checked stationary point or whose importance weights' Pareto k is above "
        "`min(1 - 1/log10(S), 0.7)`. Re-runs of a cell that did not converge (the budget): "
        f"NUTS up to {settings.get('nuts_attempts')} runs (its chains extended by as many "
        "draws again where only R-hat or ESS fell short, re-run with twice the warm-up, a "
        "step-size target a quarter closer to 1 and a new key after divergences; the first run "
        "at the model's target: 0.95 for Stribeck friction, else 0.8); an ensemble with fewer "
        "than two members left fitted "
        f"once more with twice the members (up to {ENSEMBLE_ATTEMPTS} fits); a Laplace fit "
        "once.",
        "",
        "## Conclusions of the paper, measured",
        "",
        f"Each claim as a hypothesis, with its 95 % bootstrap interval ({BOOTSTRAP} resamples; "
        "with several dataset seeds two-stage: the seeds, then the cells or matched pairs "
        "within each; every finished cell counts, converged or not). A claim "
        "**holds** when the whole interval satisfies it, **does not hold** when none of it "
        "does, and is **undecided** otherwise.",
        "",
    ]
    for prior, c in concl["energy_bounded"].items():
        b, u = c["bounded"], c["unbounded"]
        lines.append(
            f"1. *Energy-bounded models do not diverge* ({prior} prior; hypothesis: the mean "
            f"fraction of divergent draws of conserving and dissipative variants is below "
            f"{DIVERGENCE_BOUND:g}): {_verdict(c['holds'])}. Bounded: "
            f"{_fmt(b['mean_divergent_fraction'])} [{_fmt(b['interval'][0])}, "
            f"{_fmt(b['interval'][1])}] over {b['cells']} cells ({b['cells_with_divergence']} "
            f"with a divergent draw; left the domain {_fmt(b['mean_left_domain_fraction'])}, "
            f"non-finite {_fmt(b['mean_nonfinite_fraction'])}; draws whose own energy grows "
            f"{_fmt(b['mean_own_energy_gaining_fraction'])}). Unbounded: "
            f"{_fmt(u['mean_divergent_fraction'])} [{_fmt(u['interval'][0])}, "
            f"{_fmt(u['interval'][1])}] over {u['cells']} cells (true energy grows along the "
            f"predicted states in {_fmt(u['mean_true_energy_gaining_fraction'])} of draws)."
        )
    metric = concl["metric"]
    for prior, c in concl["nokin_vs_diffnea"].items():
        lines.append(
            f"2. *No-Kin DiffNEA is about as good as DiffNEA* ({prior} prior; hypothesis: the "
            f"median ratio of `{metric}`, no-Kin over DiffNEA, lies within a factor {FACTOR:g}): "
            f"{_verdict(c['holds'])}. {_ratio_text(c)}"
        )
    for family, c in concl["priors"].items():
        lines.append(
            f"3. *Informative priors change little* (`{family}`; hypothesis: the median ratio "
            f"of `{metric}`, informative over weak, lies within a factor {FACTOR:g}): "
            f"{_verdict(c['holds'])}. {_ratio_text(c)}"
        )
    lines += ["", "## Figures", ""]
    for key, caption in (
        ("figure1", "Uncontrolled rollouts of every variant (cf. DiffNEA Figure 1)"),
        ("nmse", "Held-out acceleration NMSE"),
        ("rollout", "Rollout RMSE"),
    ):
        if key in figs:
            lines.append(f"![{caption}]({os.path.relpath(figs[key], report_path.parent)})")
            lines.append("")
    lines += _not_converged_lines(records)
    lines += [
        "## Tables",
        "",
        "Each row: the mean over the dataset seeds. `acc. NMSE`: held-out acceleration NMSE of "
        "the posterior mean; `acc. cov. 90%`: coverage of the held-out accelerations by the 90 % "
        "posterior-predictive band (noise included); `base err.`: largest relative error of the "
        "posterior-mean base parameters (what the data identify; fixed-kinematics white-box "
        "variants), `base cov. 90%`: fraction of base parameters whose truth is inside the "
        "90 % interval; `rollout RMSE` / `rollout cov.` at each horizon: median over draws of "
        "the RMS position error up to it, and the fraction of (start, joint) whose true position "
        "is inside the 90 % band there, over uncontrolled rollouts from the Figure-1 start and "
        "held-out states against the true plant; `band width`: mean width of the Figure-1 "
        "rollout's band; `own energy gains`: fraction of draws whose model energy grows along "
        "its own uncontrolled rollout (white-box rigid bodies); `left domain` / `non-finite`: "
        "fractions of divergent Figure-1 rollouts; `controller success`: fraction of draws on "
        "which the provided swing-up controller succeeds.",
        "",
    ]
    for system in sorted({r["cell"]["system"] for r in records}):
        for dataset in sorted(
            {r["cell"]["dataset"] for r in records if r["cell"]["system"] == system}
        ):
            lines += [
                f"### {system}, {dataset}",
                "",
                *_table(records, system, dataset, horizons),
                "",
            ]
    text = "\n".join(lines) + "\n"
    write_text_atomic(report_path, text)
    return report_path
