"""PNG figures (matplotlib, Agg backend): rollout bands vs truth, energy over time, the benchmark
grid and a Figure-1-like panel of every variant's rollout (DiffNEA, Lutter et al. 2020, Fig. 1).

Every function writes one PNG atomically (temporary file, then ``os.replace``) and returns its path.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from data.io import write_atomic  # noqa: E402

CLASS_COLOURS = {
    "conserving": "tab:blue",
    "dissipating": "tab:green",
    "gaining": "tab:orange",
    "divergent": "tab:red",
}


def joint_unit(robot, i: int, *, derivative: int = 0) -> str:
    """Unit of joint i's position (derivative 0), velocity (1) or acceleration (2)."""
    base = "m" if robot.joint_types[i] == "prismatic" else "rad"
    return base + ("", "/s", "/s²")[derivative]


def save_figure(fig, path: str | os.PathLike, *, dpi: int = 120) -> Path:
    """Save ``fig`` as PNG atomically (:func:`data.io.write_atomic`) and close it."""
    path = Path(path)
    try:
        write_atomic(path, lambda f: fig.savefig(f, dpi=dpi, format="png", bbox_inches="tight"))
    finally:
        plt.close(fig)
    return path


def plot_rollout_band(
    path,
    t,
    band,
    *,
    robot,
    truth=None,
    draws=None,
    title: str = "posterior-predictive rollout",
    truth_label: str = "true system",
) -> Path:
    """Median and credible band of each joint's position over time, with the true trajectory.

    Args:
        t: (T + 1,) s. band: :class:`analysis.rollouts.Band` of ``q`` ((T + 1, n) fields).
        truth: optional (T + 1, n) true positions (or a reference: ``truth_label``).
        draws: optional (k, T + 1, n) sample paths.
    """
    t = np.asarray(t)
    n = robot.n
    fig, axes = plt.subplots(n, 1, figsize=(8, 2.6 * n), sharex=True, squeeze=False)
    for i, ax in enumerate(axes[:, 0]):
        ax.fill_between(
            t,
            band.lower[:, i],
            band.upper[:, i],
            color="tab:blue",
            alpha=0.25,
            label=f"{band.prob:.0%} credible band",
        )
        ax.plot(t, band.median[:, i], color="tab:blue", lw=1.5, label="posterior median")
        if draws is not None:
            for path_k in np.asarray(draws)[:, :, i]:
                ax.plot(t, path_k, color="tab:blue", lw=0.4, alpha=0.3)
        if truth is not None:
            ax.plot(t, np.asarray(truth)[:, i], color="black", lw=1.2, ls="--", label=truth_label)
        ax.set_ylabel(f"{robot.joint_names[i]} [{joint_unit(robot, i)}]")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("time [s]")
    frac = getattr(band, "finite_fraction", 1.0)
    fig.suptitle(f"{title}\n({frac:.0%} of draws finite)", fontsize=11)
    return save_figure(fig, path)


def plot_energy(
    path, t, energy, *, classes=None, truth=None, title: str = "energy of the uncontrolled rollout"
) -> Path:
    """Total energy (J) over time per draw (coloured by class), with the truth's energy.

    Args:
        t: (T + 1,) s. energy: (D, T + 1) J. classes: optional (D,) energy classes.
        truth: optional (T + 1,) J.
    """
    t, energy = np.asarray(t), np.asarray(energy)
    fig, ax = plt.subplots(figsize=(8, 4))
    shown = set()
    for k in range(energy.shape[0]):
        c = classes[k] if classes is not None else "conserving"
        ax.plot(
            t,
            energy[k],
            color=CLASS_COLOURS.get(c, "gray"),
            lw=0.6,
            alpha=0.5,
            label=None if c in shown else c,
        )
        shown.add(c)
    if truth is not None:
        ax.plot(t, np.asarray(truth), color="black", ls="--", lw=1.5, label="true system")
    ax.set_xlabel("time [s]")
    ax.set_ylabel("total energy T + V [J]")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def record_metric(record: dict, key: str):
    """A cell record's metric ``key``: a top-level name, or ``"name.inner"`` for a value inside a
    dict-valued metric (``"rollout_rmse.0.1"``: horizon ``"0.1"``); None where it is missing."""
    head, _, inner = key.partition(".")
    value = record.get("metrics", {}).get(head)
    if inner:
        value = value.get(inner) if isinstance(value, dict) else None
    return value


def _metric(record, metric: str) -> float:
    value = record_metric(record, metric)
    return float(value) if isinstance(value, int | float) else np.nan


def plot_grid(
    path, records, *, metric: str = "accel_nmse", log: bool = True, title: str | None = None
) -> Path:
    """Heat map of one metric: variants (rows) x system/dataset (columns).

    Args:
        records: cell records from :func:`analysis.benchmark.load_records`.
        metric: a key of the cell metrics, dotted for nested ones (e.g. ``"rollout_rmse.1"``).
    """
    variants = sorted({r["cell"]["variant"] for r in records})
    columns = sorted({(r["cell"]["system"], r["cell"]["dataset"]) for r in records})
    grid = np.full((len(variants), len(columns)), np.nan)
    for r in records:
        if r["status"] == "ok":
            grid[
                variants.index(r["cell"]["variant"]),
                columns.index((r["cell"]["system"], r["cell"]["dataset"])),
            ] = _metric(r, metric)
    shown = np.log10(np.where(grid > 0, grid, np.nan)) if log else grid
    fig, ax = plt.subplots(figsize=(2 + 1.3 * len(columns), 1.5 + 0.3 * len(variants)))
    im = ax.imshow(shown, aspect="auto", cmap="viridis_r")
    ax.set_xticks(range(len(columns)), [f"{s}\n{d}" for s, d in columns], fontsize=8)
    ax.set_yticks(range(len(variants)), variants, fontsize=7)
    for (i, j), v in np.ndenumerate(grid):
        ax.text(
            j,
            i,
            "n/a" if not np.isfinite(v) else f"{v:.2g}",
            ha="center",
            va="center",
            fontsize=6,
            color="white",
        )
    fig.colorbar(im, ax=ax, label=f"log10 {metric}" if log else metric)
    ax.set_title(title or f"benchmark: {metric}")
    return save_figure(fig, path)


def plot_figure1(path, records, *, joint: int = -1) -> Path:
    """Figure-1-like panel: each variant's uncontrolled rollout band (one joint) vs the truth,
    rows = variants, columns = system x dataset; panel colour = the rollout's energy class."""
    ok = [r for r in records if r["status"] == "ok" and "band" in r.get("metrics", {})]
    if not ok:
        raise ValueError("no finished cell with a rollout band to plot")
    variants = sorted({r["cell"]["variant"] for r in ok})
    columns = sorted({(r["cell"]["system"], r["cell"]["dataset"]) for r in ok})
    fig, axes = plt.subplots(
        len(variants),
        len(columns),
        figsize=(2.4 * len(columns), 0.9 * len(variants) + 1),
        squeeze=False,
        sharex=True,
    )
    for ax in axes.flat:
        ax.set_xticks([])
        ax.set_yticks([])
    for r in ok:
        i = variants.index(r["cell"]["variant"])
        j = columns.index((r["cell"]["system"], r["cell"]["dataset"]))
        ax = axes[i, j]
        b = r["metrics"]["band"]
        t = np.asarray(b["t"])
        lo, med, hi, tr = (
            np.asarray(b[k], float)[:, joint] for k in ("lower", "median", "upper", "truth")
        )
        label = (r["metrics"].get("energy_true") or {}).get("label", "conserving")
        colour = CLASS_COLOURS.get(label, "gray")
        ax.fill_between(t, lo, hi, color=colour, alpha=0.3)
        ax.plot(t, med, color=colour, lw=0.8)
        ax.plot(t, tr, color="black", lw=0.6, ls="--")
        span = np.nanmax(np.abs(tr)) * 2 + 0.5
        ax.set_ylim(-span, span)
    for j, (s, d) in enumerate(columns):
        axes[0, j].set_title(f"{s}\n{d}", fontsize=8)
    for i, v in enumerate(variants):
        axes[i, 0].set_ylabel(v, rotation=0, ha="right", va="center", fontsize=6)
    handles = [plt.Line2D([], [], color=c, lw=4, alpha=0.5) for c in CLASS_COLOURS.values()] + [
        plt.Line2D([], [], color="black", ls="--")
    ]
    fig.legend(handles, [*CLASS_COLOURS, "true system"], loc="lower center", ncol=5, fontsize=8)
    fig.suptitle(
        "Uncontrolled rollouts (pendulum angle [rad] vs time [s]), 90% bands, RK4 at 250 Hz",
        fontsize=10,
    )
    return save_figure(fig, path, dpi=90)
