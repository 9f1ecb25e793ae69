"""``bayes-nea report``: write report.md (tables, figures, the paper's conclusions) from benchmark cells."""

from __future__ import annotations

HELP = "write the benchmark report (markdown, Figure-1-like PNG, metric grids) from finished cells"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--out", default="benchmark-output", help="benchmark output folder (with cells/)"
    )
    parser.add_argument("--report", default=None, help="report path (default: OUT/report.md)")


def run(args) -> int:
    from analysis.report import write_report
    from data.io import check_output_path

    if args.report is not None:
        check_output_path(args.report, "--report")
    print(f"report: {write_report(args.out, report_path=args.report)}")
    return 0
