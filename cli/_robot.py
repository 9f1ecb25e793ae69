"""The ``--urdf`` / ``--lock-joint`` options shared by ``import`` and ``simulate``."""

from __future__ import annotations

import argparse
import math


def lock_joint(text: str) -> tuple[str, float]:
    """An ``argparse`` type: ``NAME`` (locked at 0) or ``NAME=VALUE`` (rad or m)."""
    name, sep, value = text.partition("=")
    name = name.strip()
    if not name:
        raise argparse.ArgumentTypeError(f"expected NAME or NAME=VALUE, got {text!r}")
    if not sep:
        return name, 0.0
    try:
        position = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"the position of joint {name!r} must be a number, got {value!r}"
        ) from None
    if not math.isfinite(position):
        raise argparse.ArgumentTypeError(f"the position of joint {name!r} must be finite")
    return name, position


def add_urdf_arguments(parser, *, required: bool) -> None:
    parser.add_argument(
        "--urdf", required=required, default=None, help="the robot's URDF file (fixed base)"
    )
    parser.add_argument(
        "--lock-joint",
        type=lock_joint,
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="treat this URDF joint as fixed at VALUE (default 0), e.g. a gripper finger; repeatable",
    )


def load_robot(args):
    """The :class:`bayes_nea.Robot` of ``--urdf`` with the ``--lock-joint`` joints fixed."""
    import bayes_nea as bn

    locks = dict(args.lock_joint)
    if len(locks) != len(args.lock_joint):
        raise ValueError(f"--lock-joint names a joint twice: {[n for n, _ in args.lock_joint]}")
    if locks and args.urdf is None:
        raise ValueError("--lock-joint needs --urdf")
    return bn.load_urdf(args.urdf, lock_joints=locks or None)
