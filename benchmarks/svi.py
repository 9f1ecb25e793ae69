"""SVI speed on the main job's data, and the gradient cost per sample of each likelihood.

The main job's cart-pole trajectories (30 s at 250 Hz, the first ``--samples`` training states),
``--variant`` (default ``diffnea/stribeck/informative``). Prints

1. the compile time and the cost per sample of one jitted gradient of the negative log joint
   (``numpyro.infer.util.potential_energy``) at the model's start point, for the forward (ABA),
   inverse (RNEA) and rollout (RK4 windows of ``--horizon`` steps, cut from the episodes)
   likelihoods; "rows" is what the model is conditioned on (states or windows);
2. ``fit_svi`` (delta guide, ``--steps`` Adam steps, forward likelihood) as the user runs it: its
   compile time and steps per second (``attrs["timing"]``).

    python benchmarks/svi.py [--samples 2500] [--steps 3000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

# benchmarks/inference.py is named like the package: import the package, not that script.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import jax  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer.util import potential_energy  # noqa: E402

from data import generate_dataset  # noqa: E402
from inference import fit_svi  # noqa: E402
from models import build_model, data_scales, model_data  # noqa: E402


def gradient_cost(model, data, repeats: int) -> tuple[float, float, int]:
    """(compile s, seconds per gradient, conditioned samples) of ``grad(-log p(z, data))``."""
    prepared = model.prepare(model.observations(data))
    point = model.start_sample(jax.random.PRNGKey(0))
    grad = jax.jit(jax.grad(lambda z, d: potential_energy(model.model, (d,), {}, z)))
    start = time.perf_counter()
    jax.block_until_ready(grad(point, prepared))
    compile_s = time.perf_counter() - start
    best = np.inf
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            out = grad(point, prepared)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / repeats)
    leaves = jax.tree.leaves(prepared)
    rows = max((x.shape[0] for x in leaves if getattr(x, "ndim", 0) >= 1), default=1)
    return compile_s, best, rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="diffnea/stribeck/informative")
    parser.add_argument("--samples", type=int, default=2500)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--horizon", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)

    dataset = generate_dataset("cartpole", "trajectories", seed=0, duration=30.0)
    train, _, _ = dataset.split(seed=0)
    robot = dataset.robot()
    full = model_data(train)
    data = type(full)(*(x[: args.samples] for x in full))
    scales = data_scales(data, robot)
    n = int(data.q.shape[0])
    print(
        f"cart-pole trajectories, {n} training states, {args.variant}, "
        f"jax {jax.__version__} on {jax.devices()[0].platform}, "
        f"{'float64' if jax.config.jax_enable_x64 else 'float32'}"
    )
    header = (
        f"{'likelihood':<10} {'rows':>6} {'compile s':>10} {'ms / gradient':>14} "
        f"{'us / sample':>12}"
    )
    print(header)
    print("-" * len(header))
    dt = 1.0 / dataset.rate_hz
    for likelihood in ("forward", "inverse", "rollout"):
        extra = {"horizon": args.horizon, "dt": dt} if likelihood == "rollout" else {}
        model = build_model(args.variant, robot, scales=scales, likelihood=likelihood, **extra)
        compile_s, per_call, rows = gradient_cost(model, data, args.repeats)
        per_sample = per_call / n * 1e6
        print(
            f"{likelihood:<10} {rows:>6d} {compile_s:>10.2f} {per_call * 1e3:>14.3f} "
            f"{per_sample:>12.3f}"
        )

    model = build_model(args.variant, robot, scales=scales)
    fit = fit_svi(model, data, key=0, guide="delta", steps=args.steps)
    timing = fit.attrs["timing"]
    print(
        f"\nfit_svi (delta guide, {args.steps} steps, forward likelihood): "
        f"compile {timing['compile_s']:.2f} s, {timing['steps_per_s']:.0f} steps/s, "
        f"converged: {fit.attrs['convergence']['converged']}"
    )


if __name__ == "__main__":
    main()
