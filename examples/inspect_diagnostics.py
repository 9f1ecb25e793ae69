"""Inspect a stored fit with ArviZ: summary, R-hat/ESS, held-out posterior-predictive check, and
trace/forest/pair plots as PNG.

    python examples/inspect_diagnostics.py fit.nc [--out diagnostics/] [--tiny]
"""

from __future__ import annotations

import argparse


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("result", help="netCDF posterior (examples/fit_from_script.py writes one)")
    parser.add_argument("--out", default="diagnostics")
    parser.add_argument("--seed", type=int, default=1, help="seed of the held-out dataset")
    parser.add_argument("--tiny", action="store_true")
    args = parser.parse_args(argv)

    from analysis.diagnostics import diagnostic_plots, heldout_ppc
    from data import generate_dataset
    from inference import load_result

    result = load_result(args.result)
    print(result.summary().to_string())
    print(result.idata)  # the ArviZ DataTree: posterior (virtual + physical), sample_stats, ...
    print("convergence:", result.diagnostics())
    heldout = generate_dataset(
        result.system, "trajectories", seed=args.seed, duration=2.0 if args.tiny else 10.0
    )
    ppc = heldout_ppc(result.model(), result, heldout)
    print(f"held-out PPC: NMSE per joint {ppc['nmse']}, 90% coverage {ppc['coverage']:.2f}")
    plots = diagnostic_plots(result, args.out)
    print("plots:", {k: str(v) for k, v in plots.items()})
    return {"ppc": ppc, "plots": plots}


if __name__ == "__main__":
    main()
