"""``bayes-nea simulate``: generate one of the paper's datasets (or an excitation log of a URDF
robot) and write it to a dataset file or a CSV log."""

from __future__ import annotations

from cli._args import SEED, real
from cli._robot import add_urdf_arguments, load_robot

HELP = (
    "generate a dataset (uniform, trajectories or hardware-like) for a built-in system, or an "
    "excitation log of a URDF robot; .csv output writes a log as `import` reads it"
)


def add_arguments(parser) -> None:
    parser.add_argument("--system", default="cartpole", help="cartpole or furuta")
    add_urdf_arguments(parser, required=False)
    parser.add_argument(
        "--dataset",
        default=None,
        help="uniform, trajectories or hardware (built-in systems; default uniform), or "
        "excitation (with --urdf, the default there: computed-torque tracking of Fourier "
        "trajectories of a fully actuated robot)",
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
    parser.add_argument(
        "--out",
        required=True,
        help="output path: .npz (a dataset file with the true parameters) or .csv (a log, as if "
        "recorded: no true parameters, no robot; read it with `bayes-nea import`)",
    )


def run(args) -> int:
    import os
    import time

    import data
    from data.io import check_output_path

    settings = {} if args.rate is None else {"rate_hz": args.rate}
    system = args.system
    if args.urdf is not None or args.lock_joint:
        kinds = ("excitation",)
        settings["robot"] = load_robot(args)
        system = settings["robot"].name
    else:
        kinds = ("uniform", "trajectories", "hardware")
    kind = args.dataset or kinds[0]
    if kind not in kinds:
        raise ValueError(
            f"--dataset {kind!r} is not available here; valid: {list(kinds)}"
            + (" (a URDF robot is simulated by excitation)" if args.urdf else "")
        )
    check_output_path(args.out, "--out")
    ext = os.path.splitext(args.out)[1].lower()
    if ext not in (".npz", ".csv"):
        raise ValueError(f"--out {args.out!r}: write a .npz dataset or a .csv log")
    start = time.perf_counter()
    dataset = data.generate_dataset(system, kind, seed=args.seed, duration=args.duration, **settings)
    if ext == ".csv":
        path = data.export_log(dataset, args.out)
    else:
        path = data.save_dataset(dataset, args.out)
    print(
        f"wrote {path}: {dataset.system} {dataset.kind}, {len(dataset.episodes)} episodes, "
        f"{dataset.n_samples} samples at {dataset.rate_hz:g} Hz ({dataset.duration:g} s), "
        f"measured {list(dataset.measured)}, estimated {list(dataset.estimated)}, "
        f"synthetic={dataset.synthetic} [{time.perf_counter() - start:.1f} s]"
    )
    return 0
