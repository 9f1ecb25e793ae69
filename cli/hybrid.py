"""``bayes-nea hybrid``: the hybrid inverse-dynamics study on a simulated Panda (Reuss et al. 2022)."""

from __future__ import annotations

HELP = "hybrid inverse dynamics (RBD + friction + LSTM, DeLaN, SDP) on a simulated Panda: Tables I-III analogues"


def add_arguments(parser) -> None:
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--quick", action="store_true", help="the 2-core setting (default; 3 seeds, about 20 min)"
    )
    size.add_argument("--full", action="store_true", help="larger data, 3 seeds, longer training")
    size.add_argument(
        "--tiny", action="store_true", help="smoke test (minutes, meaningless numbers)"
    )
    parser.add_argument(
        "--out", default="hybrid-output", help="output folder (report.md, results.json, figures)"
    )
    parser.add_argument("--seed", type=int, default=0, help="data and training seed")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite report.md and figures from OUT/results.json",
    )


def run(args) -> int:
    from analysis.hybrid import rerender, run_study

    if args.report_only:
        print(f"report: {rerender(args.out)}")
        return 0
    setting = "full" if args.full else "tiny" if args.tiny else "quick"
    run_study(setting, args.out, seed=args.seed)
    print(f"report: {args.out}/report.md")
    return 0
