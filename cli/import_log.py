"""``bayes-nea import``: a user's URDF and logs (CSV or NPZ) into a validated dataset file."""

from __future__ import annotations

from cli._args import real
from cli._robot import add_urdf_arguments, load_robot

HELP = "import your own robot's logs (CSV or NPZ) with its URDF into a dataset file for `fit`"


def add_arguments(parser) -> None:
    add_urdf_arguments(parser, required=True)
    parser.add_argument(
        "--log",
        nargs="+",
        required=True,
        metavar="RUN",
        help="log files (.csv: columns t, q_<joint>, qd_<joint>, qdd_<joint>, tau_<joint>, "
        "optional trajectory; .npz: arrays t, q, qd, qdd, tau, optional joint_names)",
    )
    parser.add_argument(
        "--estimate-derivatives",
        action="store_true",
        help="estimate qd and qdd from q (filtered central differences); they need not be logged",
    )
    parser.add_argument(
        "--cutoff-hz",
        type=real(0.0, 1e6, open_low=True),
        default=None,
        help="low-pass cut-off of the derivative estimate, Hz (default 20)",
    )
    parser.add_argument("--out", required=True, help="dataset file (.npz), written atomically")


def run(args) -> int:
    import os

    import numpy as np

    from data import import_log, save_dataset
    from data.estimate import DEFAULT_CUTOFF_HZ
    from data.io import check_output_path

    if os.path.splitext(args.out)[1].lower() != ".npz":
        raise ValueError(f"--out {args.out!r}: datasets are written as .npz files")
    if args.cutoff_hz is not None and not args.estimate_derivatives:
        raise ValueError("--cutoff-hz sets the derivative estimate: add --estimate-derivatives")
    check_output_path(args.out, "--out")
    robot = load_robot(args)
    dataset = import_log(
        args.log,
        robot,
        estimate_derivatives=args.estimate_derivatives,
        cutoff_hz=args.cutoff_hz or DEFAULT_CUTOFF_HZ,
    )
    path = save_dataset(dataset, args.out)
    _, _, _, tau = dataset.arrays()
    locked = ", ".join(f"{n}={v:g}" for n, v in args.lock_joint) or "none"
    print(f"wrote {path}: robot {robot.name!r}, {robot.n} joints (locked: {locked})")
    print(
        f"  {dataset.n_samples} samples in {len(dataset.episodes)} episode(s) at "
        f"{dataset.rate_hz:g} Hz ({dataset.duration:g} s); measured {list(dataset.measured)}, "
        f"estimated {list(dataset.estimated) or 'none'}"
    )
    for j, name in enumerate(dataset.joint_names):
        print(f"  {name:>20s}: tau in [{np.min(tau[:, j]):+.4g}, {np.max(tau[:, j]):+.4g}]")
    for source, columns in dataset.settings["ignored_columns"].items():
        print(f"  ignored in {source}: {columns}")
    return 0
