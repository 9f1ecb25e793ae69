"""``bayes-nea rollout``: uncontrolled posterior rollouts of a stored fit, with credible bands."""

from __future__ import annotations

from cli._args import integer, real

HELP = "roll out every posterior draw of a fit (RK4, 250 Hz) and plot the credible band (PNG)"


def add_arguments(parser) -> None:
    parser.add_argument("result", help="posterior file written by 'bayes-nea fit' (netCDF)")
    parser.add_argument("--out", default="rollout.png", help="figure path (PNG)")
    parser.add_argument(
        "--seconds", type=real(0.0, 3600.0, open_low=True), default=4.0, help="rollout length, s"
    )
    parser.add_argument(
        "--q0", type=real(-1e6, 1e6), nargs="+", default=None, help="start positions (rad or m)"
    )
    parser.add_argument(
        "--draws", type=integer(1, 10**6), default=1000, help="at most this many draws"
    )


def run(args) -> int:
    from analysis.workflows import rollout_result
    from data.io import check_output_path

    check_output_path(args.out, "--out")
    res = rollout_result(
        args.result, out=args.out, q0=args.q0, seconds=args.seconds, max_draws=args.draws
    )
    print(f"figure: {res['figure']}")
    print(
        f"energy of the uncontrolled rollouts: {res['label']} "
        + ", ".join(f"{k} {v:.2f}" for k, v in res["energy"].items())
    )
    return 0
