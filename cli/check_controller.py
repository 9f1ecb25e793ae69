"""``bayes-nea check-controller``: success rate of the swing-up + LQR controller over a posterior."""

from __future__ import annotations

HELP = "run the swing-up + LQR controller on every posterior draw of a fit; report success and settling"


def add_arguments(parser) -> None:
    parser.add_argument("result", help="posterior file written by 'bayes-nea fit' (netCDF)")
    parser.add_argument("--seconds", type=float, default=8.0, help="closed-loop duration, s")
    parser.add_argument("--draws", type=int, default=500, help="at most this many draws")
    parser.add_argument(
        "--out", default=None, help="optional figure path (PNG) of the closed-loop bands"
    )
    parser.add_argument(
        "--data",
        default=None,
        help="simulated dataset file (bayes-nea simulate): also run on its true system",
    )
    parser.add_argument(
        "--respect-limits",
        action="store_true",
        help="count a cart leaving its rail as a failure (the provided swing-up overshoots it)",
    )


def run(args) -> int:
    import json

    from analysis.workflows import check_controller_result

    dataset = None
    if args.data is not None:
        from data import load_dataset

        dataset = load_dataset(args.data)
    summary = check_controller_result(
        args.result,
        seconds=args.seconds,
        max_draws=args.draws,
        out=args.out,
        respect_limits=args.respect_limits,
        dataset=dataset,
    )
    print(json.dumps(summary, indent=1, default=str))
    return 0
