"""Fit a DiffNEA variant to simulated cart-pole data from a script, then save the posterior.

python examples/fit_from_script.py [--variant diffnea/viscous/informative] [--out fit.nc] [--tiny]

SVI (MAP, delta guide) first, then NUTS started at the MAP with the Laplace metric (the inverse
Hessian at the MAP as a fixed dense mass matrix): on these models an adapted diagonal metric
saturates NUTS's tree depth (~1,000 leapfrog steps per draw), the Laplace metric needs ~16.
"""

from __future__ import annotations

import argparse


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="diffnea/viscous/informative")
    parser.add_argument("--out", default="fit.nc")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes (a test runs this)")
    args = parser.parse_args(argv)

    from data import generate_dataset
    from inference import fit_nuts, fit_svi, save_result
    from models import build_model, model_data

    duration, steps, warmup, samples = (4.0, 300, 30, 30) if args.tiny else (30.0, 3000, 300, 1000)
    dataset = generate_dataset("cartpole", "trajectories", seed=args.seed, duration=duration)
    train, _, test = dataset.split(seed=args.seed)
    model = build_model(args.variant, dataset.robot())
    svi = fit_svi(model, model_data(train), key=args.seed, steps=steps, progress=not args.tiny)
    fit = fit_nuts(
        model,
        model_data(train),
        init=svi,
        metric="laplace",
        key=args.seed + 1,
        num_warmup=warmup,
        num_samples=samples,
        num_chains=1,
        progress=not args.tiny,
    )
    save_result(fit, args.out)
    print(fit.summary().to_string())
    print(f"posterior saved to {args.out}")
    return {"result": fit, "path": args.out, "test": test}


if __name__ == "__main__":
    main()
