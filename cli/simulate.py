"""``bayes-nea simulate``: generate one of the paper's datasets and write it to a file."""

from __future__ import annotations

from cli._args import SEED, real

HELP = "generate a dataset (uniform, trajectories or hardware-like) for a built-in system"


def add_arguments(parser) -> None:
    parser.add_argument("--system", default="cartpole", help="cartpole or furuta")
    parser.add_argument(
        "--dataset", default="uniform", help="uniform, trajectories or hardware (kind of data)"
    )
    parser.add_argument("--seed", type=SEED, default=0, help="integer seed (default 0)")
    parser.add_argument(
        "--duration",
        type=real(0.0, 1e6, open_low=True),
        default=None,
        help="seconds of data (default: per kind)",
    )
    parser.add_argument(
        "--rate",
        type=real(0.0, 1e5, open_low=True),
        default=None,
        help="sampling rate, Hz (default 250)",
    )
    parser.add_argument("--out", required=True, help="output path (.npz)")


def run(args) -> int:
    import time

    import data
    from data.io import check_output_path

    settings = {} if args.rate is None else {"rate_hz": args.rate}
    kinds = ("uniform", "trajectories", "hardware")
    if args.dataset not in kinds:
        raise ValueError(f"unknown --dataset {args.dataset!r}; valid: {list(kinds)}")
    check_output_path(args.out, "--out")
    start = time.perf_counter()
    dataset = data.generate_dataset(
        args.system, args.dataset, seed=args.seed, duration=args.duration, **settings
    )
    path = data.save_dataset(dataset, args.out)
    print(
        f"wrote {path}: {dataset.system} {dataset.kind}, {len(dataset.episodes)} episodes, "
        f"{dataset.n_samples} samples at {dataset.rate_hz:g} Hz ({dataset.duration:g} s), "
        f"measured {list(dataset.measured)}, estimated {list(dataset.estimated)}, "
        f"synthetic={dataset.synthetic} [{time.perf_counter() - start:.1f} s]"
    )
    return 0
