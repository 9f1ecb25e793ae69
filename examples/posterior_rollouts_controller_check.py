"""Sample posterior rollouts of a stored cart-pole fit and check how likely the swing-up + LQR
controller is to work on the real system.

    python examples/posterior_rollouts_controller_check.py fit.nc [--out rollouts/] [--tiny]

With ``--truth-seed K`` the simulated dataset of seed K (the one the fit was made from, e.g. by
``examples/fit_from_script.py --seed K``) is regenerated and the controller is also run on its true
system (the plant that generated the data: true parameters, friction, motor, delay), beside the
posterior's success rate.
"""

from __future__ import annotations

import argparse


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result")
    parser.add_argument("--out", default="rollouts")
    parser.add_argument(
        "--truth-seed",
        type=int,
        default=None,
        help="seed of the simulated data: also check the controller on its true system",
    )
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)

    from pathlib import Path

    from analysis.workflows import check_controller_result, rollout_result
    from data import generate_dataset
    from inference import load_result

    out = Path(args.out)
    seconds, draws = (1.0, 20) if args.tiny else (4.0, 1000)
    roll = rollout_result(args.result, out=out / "rollout.png", seconds=seconds, max_draws=draws)
    print(f"uncontrolled rollouts: {roll['label']} ({roll['figure']})")
    dataset = None
    if args.truth_seed is not None:
        system = load_result(args.result).system
        dataset = generate_dataset(system, "trajectories", seed=args.truth_seed, duration=1.0)
    check = check_controller_result(
        args.result,
        seconds=6.0 if args.tiny else 8.0,
        max_draws=draws,
        out=out / "closed_loop.png",
        dataset=dataset,
    )
    print(f"controller success rate over the posterior: {check['success_rate']:.0%}")
    print(f"settling time quantiles (s): {check['settling_time_s']}")
    if dataset is not None:
        print(f"controller success on the true system: {check['true_system']['success_rate']:.0%}")
    return {"rollout": roll, "check": check}


if __name__ == "__main__":
    main()
