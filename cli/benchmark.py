"""``bayes-nea benchmark``: run (or resume) the variant x system x dataset grid on dask.distributed."""

from __future__ import annotations

from cli._args import integer

HELP = "run or resume the benchmark grid (26 variants x cart-pole/Furuta x 3 datasets) on dask"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--out", default="benchmark-output", help="output folder (cells/ and report.md)"
    )
    parser.add_argument(
        "--setting", default="quick", help="tiny, quick (40 s of data, 3 seeds) or full (120 s, 10 seeds)"
    )
    parser.add_argument("--systems", nargs="+", default=None, help="subset of: cartpole furuta")
    parser.add_argument(
        "--datasets", nargs="+", default=None, help="subset of: uniform trajectories hardware"
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=None,
        help="subset of the variant names (bayes-nea variants)",
    )
    parser.add_argument(
        "--scheduler",
        default=None,
        help="address of a running dask scheduler (default: a local cluster)",
    )
    parser.add_argument(
        "--workers",
        type=integer(1, 1024),
        default=None,
        help="local worker processes (default: CPU count)",
    )
    parser.add_argument(
        "--svi-steps",
        type=integer(1, 10**7),
        default=None,
        help="override the setting's SVI steps of the MAP before NUTS",
    )
    parser.add_argument(
        "--ensemble-optimizer",
        default=None,
        help="how network cells fit each ensemble member: adam (every setting), lbfgs, or "
        "another of fit_svi's optimisers",
    )
    parser.add_argument(
        "--ensemble-steps",
        type=integer(1, 10**7),
        default=None,
        help="override the setting's steps (iterations with lbfgs) per ensemble member",
    )
    parser.add_argument(
        "--ensemble-min-delta",
        type=float,
        default=None,
        help="early stopping: smallest validation gain that counts (per observation)",
    )
    parser.add_argument(
        "--ensemble-dtype",
        choices=("float64", "float32"),
        default=None,
        help="dtype of the ensemble members' optimisation steps (default: the setting's; "
        "quick float32, full and tiny float64; float32 is faster on the CPU; everything after "
        "the steps runs in float64)",
    )
    parser.add_argument(
        "--seeds",
        type=integer(0, 2**31 - 1),
        nargs="+",
        default=None,
        help="override the setting's dataset seeds (the grid's seed axis)",
    )
    parser.add_argument(
        "--no-report", action="store_true", help="do not write report.md afterwards"
    )


def run(args) -> int:
    import os

    from analysis.benchmark import DATASET_KINDS, SYSTEMS, run_benchmark
    from models import variant_names

    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out!r} is a file; give a folder")
    unknown = sorted(set(args.variants or ()) - set(variant_names()))
    if unknown:
        raise ValueError(f"--variants: unknown {unknown}; see `bayes-nea variants`")
    overrides = {
        k: v
        for k, v in (
            ("svi_steps", args.svi_steps),
            ("ensemble_optimizer", args.ensemble_optimizer),
            ("ensemble_steps", args.ensemble_steps),
            ("ensemble_min_delta", args.ensemble_min_delta),
            ("ensemble_dtype", args.ensemble_dtype),
        )
        if v is not None
    }
    if args.seeds is not None:
        overrides["seeds"] = tuple(args.seeds)
    result = run_benchmark(
        args.out,
        setting=args.setting,
        systems=args.systems or SYSTEMS,
        datasets=args.datasets or DATASET_KINDS,
        variants=args.variants,
        scheduler=args.scheduler,
        n_workers=args.workers,
        **overrides,
    )
    print(
        f"{len(result.records)} cells ({len(result.ran)} run now, {len(result.kept)} kept, {len(result.failed)} failed) in {result.seconds:.0f} s"
    )
    if not args.no_report:
        from analysis.report import write_report

        print(f"report: {write_report(args.out)}")
    return 0 if not result.failed else 1
