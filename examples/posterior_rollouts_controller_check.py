"""Sample posterior rollouts of a stored cart-pole fit and check how likely the swing-up + LQR
controller is to work on the real system.

    python examples/posterior_rollouts_controller_check.py fit.nc [--out rollouts/] [--tiny]
"""

from __future__ import annotations

import argparse


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result")
    parser.add_argument("--out", default="rollouts")
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)

    from pathlib import Path

    from analysis.workflows import check_controller_result, rollout_result

    out = Path(args.out)
    seconds, draws = (1.0, 20) if args.tiny else (4.0, 1000)
    roll = rollout_result(args.result, out=out / "rollout.png", seconds=seconds, max_draws=draws)
    print(f"uncontrolled rollouts: {roll['label']} ({roll['figure']})")
    check = check_controller_result(
        args.result, seconds=3.0 if args.tiny else 8.0, max_draws=draws, out=out / "closed_loop.png"
    )
    print(f"controller success rate over the posterior: {check['success_rate']:.0%}")
    print(f"settling time quantiles (s): {check['settling_time_s']}")
    return {"rollout": roll, "check": check}


if __name__ == "__main__":
    main()
