"""``bayes-nea variants``: list the 26 model variants with one-line descriptions."""

from __future__ import annotations

HELP = "list the 26 model variants (family x actuator x prior, NEA, FF-NN) with their energy class"


def add_arguments(parser) -> None:
    parser.add_argument(
        "--names-only", action="store_true", help="print the names only, one per line"
    )


def run(args) -> int:
    from models import describe, variant_names

    names = variant_names()
    width = max(len(n) for n in names)
    for name in names:
        print(name if args.names_only else f"{name:<{width}}  {describe(name)}")
    return 0
