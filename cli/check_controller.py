"""``bayes-nea check-controller``: a controller in closed loop on every posterior draw of a fit:
the swing-up + LQR of the pendulums, or reference tracking (computed torque or joint impedance,
feed-forward from the posterior mean model) for any fully actuated robot."""

from __future__ import annotations

import argparse
import math

from cli._args import SEED, integer, real

HELP = (
    "run a controller on every posterior draw of a fit (swing-up + LQR for the pendulums, "
    "computed-torque / impedance tracking for arms); report success, tracking error and spread"
)


def gains(text: str) -> tuple[float, float]:
    """An ``argparse`` type: ``KP,KD``, two non-negative finite numbers."""
    parts = text.split(",")
    try:
        kp, kd = (float(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected KP,KD (two numbers), got {text!r}") from None
    if not all(math.isfinite(g) and g >= 0 for g in (kp, kd)):
        raise argparse.ArgumentTypeError(f"gains must be finite and >= 0, got {text!r}")
    return kp, kd


def add_arguments(parser) -> None:
    parser.add_argument("result", help="posterior file written by 'bayes-nea fit' (netCDF)")
    parser.add_argument(
        "--controller",
        choices=("swing-up", "computed-torque", "impedance"),
        default=None,
        help="swing-up (pendulums, the default there), computed-torque (the default for fully "
        "actuated robots) or impedance; the last two track --trajectory or --excitation",
    )
    reference = parser.add_mutually_exclusive_group()
    reference.add_argument(
        "--trajectory",
        default=None,
        help="reference CSV: columns t, q_<joint> (optional qd_<joint>, qdd_<joint>)",
    )
    reference.add_argument(
        "--excitation",
        type=real(0.0, 3600.0, open_low=True),
        default=None,
        metavar="SECONDS",
        help="track a random Fourier excitation within the joint limits for SECONDS",
    )
    parser.add_argument(
        "--gains",
        type=gains,
        default=(100.0, 20.0),
        metavar="KP,KD",
        help="tracking gains (default 100,20): 1/s^2, 1/s for computed torque; for impedance "
        "scaled by each joint's mass-matrix diagonal",
    )
    parser.add_argument(
        "--feedforward",
        choices=("posterior-mean", "nominal"),
        default="posterior-mean",
        help="the tracking controller's model: the posterior mean fit or the nominal URDF",
    )
    parser.add_argument(
        "--tolerance",
        type=real(0.0, 1e3, open_low=True),
        default=0.02,
        help="tracking: success means ||q - q_ref|| settles below this (rad or m; default 0.02)",
    )
    parser.add_argument("--seed", type=SEED, default=0, help="seed of the --excitation reference")
    parser.add_argument(
        "--seconds",
        type=real(0.0, 3600.0, open_low=True),
        default=None,
        help="closed-loop duration, s (default 8 for the swing-up; the reference's length)",
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

    from analysis.workflows import check_controller_result, check_tracking_result
    from data import load_dataset
    from data.excitation import robot_excitation
    from data.importing import read_reference
    from data.io import check_output_path
    from inference import load_result

    if args.out is not None:
        check_output_path(args.out, "--out")
    tracking = args.trajectory is not None or args.excitation is not None
    controller = args.controller or ("computed-torque" if tracking else "swing-up")
    if controller == "swing-up":
        if tracking:
            raise ValueError("the swing-up tracks no reference: drop --trajectory/--excitation")
    else:
        if not tracking:
            raise ValueError(
                f"--controller {controller} tracks a reference: give --trajectory "
                "CSV or --excitation SECONDS"
            )
        if args.data is not None or args.respect_limits:
            raise ValueError("--data and --respect-limits belong to the swing-up check")
        result = load_result(args.result)  # read once: the reference needs its robot
        robot = result.robot()
        if args.trajectory is not None:
            reference = read_reference(args.trajectory, robot)
            seconds = args.seconds or reference.duration
        else:
            reference = robot_excitation(robot, seed=args.seed)
            seconds = args.seconds or args.excitation
        summary = check_tracking_result(
            result,
            reference,
            seconds,
            controller=controller,
            kp=args.gains[0],
            kd=args.gains[1],
            feedforward=args.feedforward,
            max_draws=args.draws,
            tolerance=args.tolerance,
            out=args.out,
        )
        print(json.dumps(finite_or_null(summary), indent=1, default=str, allow_nan=False))
        return 0
    dataset = None if args.data is None else load_dataset(args.data)
    summary = check_controller_result(
        args.result,
        seconds=args.seconds or 8.0,
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
