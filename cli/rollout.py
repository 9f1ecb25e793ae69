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
    parser.add_argument(
        "--data",
        default=None,
        help="dataset file (`simulate` or `import`): replay an episode's logged efforts from its "
        "first state and draw the band over the logged positions",
    )
    parser.add_argument(
        "--episode", type=integer(0, 10**6), default=0, help="which episode --data replays"
    )


def run(args) -> int:
    from analysis.workflows import rollout_result
    from data import load_dataset
    from data.io import check_output_path

    check_output_path(args.out, "--out")
    res = rollout_result(
        args.result,
        out=args.out,
        q0=args.q0,
        seconds=args.seconds,
        max_draws=args.draws,
        dataset=None if args.data is None else load_dataset(args.data),
        episode=args.episode,
    )
    print(f"figure: {res['figure']}")
    ex = {
        k: "not within the rollout" if v == float("inf") else f"{v:.2f} s"
        for k, v in res["support_exit_s"].items()
    }
    print(
        f"the rollouts leave the fitted data's support after {ex['q50']} (median over the draws; "
        f"10 %: {ex['q10']}, 90 %: {ex['q90']}); past that a network extrapolates"
    )
    if args.data is None:
        print(
            f"energy of the uncontrolled rollouts: {res['label']} "
            + ", ".join(f"{k} {v:.2f}" for k, v in res["energy"].items())
        )
    else:
        print(
            f"replay of episode {args.episode} ({res['replay']['seconds']:g} s): "
            f"{res['coverage']:.0%} of the logged positions inside the band, "
            f"{res['finite_fraction']:.0%} of the draws finite; "
            f"{res['outside_support']:.0%} of its logged states outside the fitted data "
            "(a network's band there is extrapolation)"
        )
    return 0
