"""``bayes-nea check-controller``: success rate of the swing-up + LQR controller over a posterior."""

from __future__ import annotations

import math

from cli._args import integer, real

HELP = "run the swing-up + LQR controller on every posterior draw of a fit; report success and settling"


def add_arguments(parser) -> None:
    parser.add_argument("result", help="posterior file written by 'bayes-nea fit' (netCDF)")
    parser.add_argument(
        "--seconds",
        type=real(0.0, 3600.0, open_low=True),
        default=8.0,
        help="closed-loop duration, s",
    )
    parser.add_argument(
        "--draws", type=integer(1, 10**6), default=500, help="at most this many draws"
    )
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
    from data import load_dataset
    from data.io import check_output_path

    if args.out is not None:
        check_output_path(args.out, "--out")
    dataset = None if args.data is None else load_dataset(args.data)
    summary = check_controller_result(
        args.result,
        seconds=args.seconds,
        max_draws=args.draws,
        out=args.out,
        respect_limits=args.respect_limits,
        dataset=dataset,
    )
    print(json.dumps(finite_or_null(summary), indent=1, default=str, allow_nan=False))
    return 0


def finite_or_null(value):
    """``value`` with NaN and infinities replaced by None (JSON has no NaN)."""
    if isinstance(value, dict):
        return {k: finite_or_null(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:
        return finite_or_null(value.item())
    return value
