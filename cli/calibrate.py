"""``bayes-nea calibrate``: simulation-based calibration of the identifiable-geometry posteriors."""

from __future__ import annotations

HELP = "simulation-based calibration (SBC) of diffnea posteriors; resumable, on dask"


def add_arguments(parser) -> None:
    parser.add_argument("--out", default="calibration-output", help="output folder")
    parser.add_argument(
        "--replicates", type=int, default=100, help="replicates per (system, variant)"
    )
    parser.add_argument("--systems", nargs="+", default=None, help="subset of: cartpole furuta")
    parser.add_argument(
        "--variants",
        nargs="+",
        default=None,
        help="diffnea variants (default: diffnea/viscous/informative diffnea/stribeck/informative)",
    )
    parser.add_argument("--n-samples", type=int, default=200, help="simulated states each")
    parser.add_argument("--batch-size", type=int, default=20, help="replicates per NUTS run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--coordinates",
        choices=("auto", "unconstrained", "softplus"),
        default="auto",
        help="where the chains move (auto: softplus scale coefficients for Stribeck, as fit_nuts)",
    )
    parser.add_argument("--scheduler", default=None, help="address of a running dask scheduler")
    parser.add_argument("--workers", type=int, default=None, help="local worker processes")


def run(args) -> int:
    from analysis.calibration import (
        SYSTEMS,
        VARIANTS,
        CalibrationSettings,
        batch_table,
        plot_ranks,
        run_calibration,
        summarise,
        summary_table,
    )
    from data.io import write_atomic

    settings = CalibrationSettings(
        n_samples=args.n_samples,
        batch_size=args.batch_size,
        seed=args.seed,
        coordinates=args.coordinates,
    )
    records = run_calibration(
        args.out,
        replicates=args.replicates,
        systems=args.systems or SYSTEMS,
        variants=args.variants or VARIANTS,
        settings=settings,
        scheduler=args.scheduler,
        n_workers=args.workers,
    )
    if not records:
        print("no finished batches")
        return 1
    table = summary_table(summarise(records))
    fits = batch_table(records)
    text = (
        f"# Simulation-based calibration\n\nSettings: {settings.to_dict()}\n\n{table}\n\n"
        f"## The fits\n\n{fits}\n"
    )
    write_atomic(f"{args.out}/report.md", lambda f: f.write(text.encode()))
    plot_ranks(records, f"{args.out}/ranks.png")
    print(table)
    print(fits)
    return 0
