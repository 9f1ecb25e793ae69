"""SVI steps in float32 against float64 (``fit_svi(train_dtype=...)``) on the quick grid's data.

For each network variant, on one dataset of the quick benchmark grid (default: cart-pole
trajectories, dataset seed 2; 6,250 training states), prints

1. the cost of one jitted gradient of the negative log joint at a prior draw, float64 and
   float32 (median of ``--repeats``), and their ratio;
2. the grid's ensemble fit of that cell (``analysis.cells.fit_cell``: 4 members, 1,000 Adam
   steps, early stopping, noise profiling, calibration, then scoring) with the members' steps in
   each dtype: cell and fit seconds of a second, warm run (the first compiles), held-out
   acceleration NMSE and 90 % coverage. float64 is the peer.

    python benchmarks/train_dtype.py [--system cartpole] [--dataset trajectories] [--seed 2]
        [--variants ...] [--repeats 30] [--no-cells]
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

from cli.main import share_programs_across_constants, use_compilation_cache  # noqa: E402

use_compilation_cache()
share_programs_across_constants()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from numpyro.infer.util import potential_energy  # noqa: E402

from analysis import cells  # noqa: E402
from analysis.benchmark import get_settings, make_grid  # noqa: E402
from inference.svi import with_float_dtype  # noqa: E402
from models import build_model, model_data  # noqa: E402

VARIANTS = (
    "ffnn",
    "diffnea/nn-friction/informative",
    "diffnea/nn-residual/informative",
    "diffnea/ffnn/informative",
    "nokin-diffnea/nn-friction/informative",
)


def gradient_seconds(model, data, dtype: str, repeats: int) -> float:
    """Median seconds of one jitted gradient of ``-log p(z, data)`` with data and z in ``dtype``."""
    prepared = with_float_dtype(model.prepare(model_data(data)), dtype)
    point = with_float_dtype(model.start_sample(jax.random.PRNGKey(0)), dtype)
    grad = jax.jit(jax.grad(lambda z: potential_energy(model.model, (prepared,), {}, z)))
    jax.block_until_ready(grad(point))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(grad(point))
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", default="cartpole")
    parser.add_argument("--dataset", default="trajectories")
    parser.add_argument("--seed", type=int, default=2)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS))
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--no-cells", action="store_true", help="gradients only")
    args = parser.parse_args()
    settings = get_settings("quick").to_dict()
    grid = make_grid(
        systems=[args.system], datasets=[args.dataset], variants=args.variants, seeds=[args.seed]
    )

    print(f"## {args.system} / {args.dataset}, dataset seed {args.seed}\n")
    print("| variant | gradient float64 ms | float32 ms | ratio |")
    print("| --- | --- | --- | --- |")
    for cell in grid:
        dataset, train, _, _ = cells.cell_data(*cells._data_key(cell, settings))
        model = build_model(
            cell["variant"], dataset.robot(), scales=cells.grid_scales(cell, settings)
        )
        t64, t32 = (gradient_seconds(model, train, d, args.repeats) for d in ("float64", "float32"))
        print(f"| {cell['variant']} | {1e3 * t64:.2f} | {1e3 * t32:.2f} | {t32 / t64:.2f} |")
    if args.no_cells:
        return

    print("\n| variant | steps in | cell s (warm) | fit s (warm) | held-out NMSE | coverage |")
    print("| --- | --- | --- | --- | --- | --- |")
    for cell in grid:
        for dtype in ("float64", "float32"):
            run = dict(settings, ensemble_dtype=dtype)
            cells.fit_cell(cell, run)  # compiles
            t = time.perf_counter()
            m = cells.fit_cell(cell, run)
            seconds = time.perf_counter() - t
            nmse = "/".join(f"{x:.4g}" for x in np.atleast_1d(m["accel_nmse"]))
            cov = "/".join(f"{x:.3f}" for x in np.atleast_1d(m["accel_coverage90"]))
            print(
                f"| {cell['variant']} | {dtype} | {seconds:.1f} | {m['fit_seconds']:.1f} | "
                f"{nmse} | {cov} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
