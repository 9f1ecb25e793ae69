"""The benchmark report: markdown tables, figures and the paper's three conclusions, measured.

DiffNEA (Lutter et al. 2020), sections 5-6: (1) energy-bounded models do not diverge; (2) no-Kin
DiffNEA is about as good as DiffNEA; (3) informative priors (the paper's "with prior") change
little. :func:`conclusions` computes each from the cell records; :func:`write_report` writes
``report.md`` beside ``figure1.png`` and the metric grids.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from analysis.benchmark import load_records
from analysis.plots import plot_figure1, plot_grid
from data.io import write_text_atomic


def _get(record: dict, key: str):
    value = record.get("metrics", {})
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


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


def _paired(records, a: str, b: str, key: str):
    """Ratios metric(variant a) / metric(variant b) over cells matched on the rest of the name."""
    by = {}
    for r in records:
        if r["status"] == "ok":
            by[(r["cell"]["system"], r["cell"]["dataset"], r["cell"]["variant"])] = _num(
                _get(r, key)
            )
    ratios = []
    for (s, d, v), x in by.items():
        if v.startswith(a):
            other = by.get((s, d, b + v[len(a) :]))
            if other is not None and np.isfinite(x) and np.isfinite(other):
                ratios.append(_ratio(x, other))
    return np.asarray(ratios)


def _paired_suffix(records, a: str, b: str, key: str):
    by = {}
    for r in records:
        if r["status"] == "ok":
            by[(r["cell"]["system"], r["cell"]["dataset"], r["cell"]["variant"])] = _num(
                _get(r, key)
            )
    ratios = []
    for (s, d, v), x in by.items():
        if v.endswith(a):
            other = by.get((s, d, v[: -len(a)] + b))
            if other is not None and np.isfinite(x) and np.isfinite(other):
                ratios.append(_ratio(x, other))
    return np.asarray(ratios)


def conclusions(records) -> dict:
    """The paper's three claims, measured on the records.

    Returns:
        {"energy_bounded": {...}, "nokin_vs_diffnea": {...}, "priors": {...}}, each with the numbers
        and a ``holds`` verdict (None when the grid lacks the cells to judge).
    """
    ok = [r for r in records if r["status"] == "ok"]
    h = _largest_horizon(ok)
    key = f"rollout_rmse.{h}" if h else "accel_nmse"
    out = {}
    div = {}
    for cls in ("conserving", "dissipative", "unbounded"):
        fr = [
            _num(_get(r, "divergent_fraction"))
            for r in ok
            if _get(r, "energy_class_declared") == cls
        ]
        gain = [
            (_get(r, "energy_true") or {}).get("gaining", np.nan)
            for r in ok
            if _get(r, "energy_class_declared") == cls
        ]
        finite = [
            _num((_get(r, "band") or {}).get("finite_fraction"))
            for r in ok
            if _get(r, "energy_class_declared") == cls
        ]
        div[cls] = {
            # cells where some draw's rollout became non-finite (blew up), a subset of the
            # divergent ones (which also count rollouts leaving the state domain, e.g. the rail)
            "cells_with_nonfinite": int(np.sum(np.asarray(finite) < 1.0)) if finite else 0,
            "cells": len(fr),
            "mean_divergent_fraction": float(np.nanmean(fr)) if fr else None,
            "cells_with_divergence": int(np.sum(np.asarray(fr) > 0)) if fr else 0,
            "mean_gaining_fraction": float(np.nanmean(gain)) if gain else None,
        }
    d = div["dissipative"]
    out["energy_bounded"] = {
        **div,
        "holds": None if not d["cells"] else bool(d["cells_with_divergence"] == 0),
    }
    for name, ratios in (
        ("nokin_vs_diffnea", _paired(ok, "nokin-diffnea/", "diffnea/", key)),
        ("priors", _paired_suffix(ok, "/informative", "/weak", key)),
    ):
        if ratios.size:
            med = float(np.median(ratios))
            out[name] = {
                "metric": key,
                "pairs": int(ratios.size),
                "median_ratio": med,
                "q25": float(np.quantile(ratios, 0.25)),
                "q75": float(np.quantile(ratios, 0.75)),
                # "about as good" / "changes little": the median paired ratio within a factor 2
                "holds": bool(0.5 <= med <= 2.0),
            }
        else:
            out[name] = {"metric": key, "pairs": 0, "holds": None}
    return out


def _fmt(x, spec=".3g") -> str:
    x = _num(x)
    return "n/a" if not np.isfinite(x) else format(x, spec)


def _table(records, system: str, dataset: str, horizons) -> list[str]:
    head = [
        "variant",
        "acc. NMSE",
        *[f"rollout RMSE {h} s" for h in horizons],
        "cov. 90%",
        "energy (true)",
        "diverged",
        "plausible",
        "mass err.",
        "fit s",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    rows = sorted(
        (r for r in records if r["cell"]["system"] == system and r["cell"]["dataset"] == dataset),
        key=lambda r: r["cell"]["variant"],
    )
    for r in rows:
        if r["status"] != "ok":
            lines.append(
                f"| {r['cell']['variant']} | failed: {str(r.get('error'))[:60]} |"
                + " |" * (len(head) - 2)
            )
            continue
        m = r["metrics"]
        cells = [
            r["cell"]["variant"],
            _fmt(m.get("accel_nmse")),
            *[_fmt((m.get("rollout_rmse") or {}).get(h)) for h in horizons],
            _fmt(m.get("coverage90"), ".2f"),
            (m.get("energy_true") or {}).get("label", "n/a"),
            _fmt(m.get("divergent_fraction"), ".2f"),
            _fmt(m.get("plausible_fraction"), ".2f"),
            _fmt(m.get("mass_rel_error"), ".2f"),
            _fmt(m.get("fit_seconds"), ".1f"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def _verdict(x) -> str:
    return {True: "**holds**", False: "**does not hold**", None: "**not measurable on this grid**"}[
        x
    ]


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
    if ok:
        figs["figure1"] = plot_figure1(fig_dir / "figure1.png", ok)
        figs["nmse"] = plot_grid(
            fig_dir / "grid_nmse.png",
            records,
            metric="accel_nmse",
            title="held-out acceleration NMSE",
        )
        if horizons:
            figs["rollout"] = plot_grid(
                fig_dir / "grid_rollout.png",
                records,
                metric=f"rollout_rmse.{horizons[-1]}",
                title=f"rollout RMSE at {horizons[-1]} s",
            )
    concl = conclusions(records)
    settings = records[0].get("settings", {})
    total_fit = sum(_num(_get(r, "fit_seconds")) for r in ok)
    total_cell = sum(_num(r.get("seconds")) for r in records)
    lines = [
        f"# {title}",
        "",
        f"Cells: {len(records)} ({len(ok)} finished, {len(records) - len(ok)} failed). Setting: "
        f"`{settings.get('name')}` (method {settings.get('method')}, {settings.get('svi_steps')} SVI steps, "
        f"{settings.get('duration')} s of data per dataset, {settings.get('draws')} posterior draws). "
        f"Summed fit time {total_fit:.0f} s; summed cell time {total_cell:.0f} s.",
        "",
        *(
            [
                "With the SVI delta guide (MAP) every cell has a single point estimate: the 90% "
                "bands have zero width, so `cov. 90%` only says whether the MAP rollout equals the "
                "truth; posterior bands need the `full` setting (SVI then NUTS).",
                "",
            ]
            if settings.get("method") == "svi"
            else []
        ),
        "## Conclusions of the paper, measured",
        "",
    ]
    eb = concl["energy_bounded"]
    lines.append(
        f"1. *Energy-bounded models do not diverge*: {_verdict(eb['holds'])}. Dissipative variants: "
        f"{eb['dissipative']['cells_with_divergence']} of {eb['dissipative']['cells']} cells had a divergent draw "
        f"(mean divergent fraction {_fmt(eb['dissipative']['mean_divergent_fraction'])}); energy-unbounded: "
        f"{eb['unbounded']['cells_with_divergence']} of {eb['unbounded']['cells']} "
        f"(mean {_fmt(eb['unbounded']['mean_divergent_fraction'])}, mean fraction of draws gaining energy "
        f"{_fmt(eb['unbounded']['mean_gaining_fraction'])}); conserving: {eb['conserving']['cells_with_divergence']} of "
        f"{eb['conserving']['cells']}. Divergent counts rollouts that leave the state domain "
        f"(rail, velocity bound) or become non-finite; non-finite (blow-up) cells: dissipative "
        f"{eb['dissipative']['cells_with_nonfinite']}, unbounded {eb['unbounded']['cells_with_nonfinite']}, "
        f"conserving {eb['conserving']['cells_with_nonfinite']}."
    )
    for i, (name, text) in enumerate(
        (
            ("nokin_vs_diffnea", "No-Kin DiffNEA is about as good as DiffNEA"),
            ("priors", "Informative priors change little"),
        ),
        start=2,
    ):
        c = concl[name]
        if c["pairs"]:
            lines.append(
                f"{i}. *{text}*: {_verdict(c['holds'])}. Median paired ratio of `{c['metric']}` "
                f"{c['median_ratio']:.3g} (IQR {c['q25']:.3g}-{c['q75']:.3g}) over {c['pairs']} matched cells "
                "(verdict: median within a factor of 2)."
            )
        else:
            lines.append(f"{i}. *{text}*: {_verdict(None)}.")
    lines += ["", "## Figures", ""]
    for key, caption in (
        ("figure1", "Uncontrolled rollouts of every variant (cf. DiffNEA Figure 1)"),
        ("nmse", "Held-out acceleration NMSE"),
        ("rollout", "Rollout RMSE"),
    ):
        if key in figs:
            lines.append(f"![{caption}]({os.path.relpath(figs[key], report_path.parent)})")
            lines.append("")
    lines += [
        "## Tables",
        "",
        "Metrics: acceleration NMSE on the held-out split (posterior mean); median over draws of the RMS "
        "position error of the uncontrolled rollout from the Figure-1 start state against the true system; "
        "coverage of the true rollout by the 90% band; energy class of the true energy along the predicted "
        "states (most frequent over draws); fraction of divergent draws; fraction of draws with physically "
        "consistent inertia; median relative mass error; fit time.",
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
