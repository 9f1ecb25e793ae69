"""``bayes-nea run``: the main job (simulate cart-pole data, fit SVI then NUTS, summary, figure, report)."""

from __future__ import annotations

from cli._args import SEED

HELP = "main job: simulate cart-pole data, fit a variant (SVI then NUTS), write rollout figure + report"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--variant",
        default="diffnea/viscous/informative",
        help="variant name (see `bayes-nea variants`; default diffnea/viscous/informative)",
    )
    parser.add_argument(
        "--out", default="bayes-nea-output", help="output folder (default bayes-nea-output)"
    )
    parser.add_argument("--seed", type=SEED, default=0, help="integer seed (default 0)")
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes (about a minute; a smoke run)"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars or summary")


def run(args) -> int:
    import os

    import numpyro

    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ValueError(f"--out {args.out!r} is a file; give a folder")

    # Two parallel NUTS chains (R-hat) need the host split into devices before JAX starts; the
    # library function never changes global state, the command line does it here (as `fit`).
    numpyro.set_host_device_count(max(1, min(2, os.cpu_count() or 1)))

    from analysis.main_job import run_main_job
    from models import variant_names

    if args.variant not in variant_names():
        raise ValueError(f"--variant: unknown {args.variant!r}; see `bayes-nea variants`")

    run_main_job(
        variant=args.variant,
        out_dir=args.out,
        seed=args.seed,
        quick=args.quick,
        progress=not args.quiet,
    )
    return 0
