"""The Newton polish against SciPy's trust-region Newton methods, from the grid's SVI points.

For each benchmark-grid cell (``analysis.cells``: its data, scales and identifiable model), SVI
runs the grid's steps (delta guide, the grid's key) and every method starts from that point in
NumPyro's unconstrained space, with the same energy, gradient and dense Hessian programs:

- ``polish``: :func:`inference.polish.polish_map` (damped saddle-free Newton with extended steps);
- ``trust-exact`` / ``trust-krylov``: ``scipy.optimize.minimize`` with the exact Hessian
  (More-Sorensen and GLTR trust-region subproblems), ``gtol`` 1e-6 on the gradient norm, at
  most the polish's iteration limit.

Prints per cell and method: wall time (the second of two runs: every program is compiled by
then, ``polish_map``'s shared per model object),
iterations, Hessian evaluations, end energy, gradient norm, Newton decrement where the Hessian
is positive definite, and its smallest eigenvalue.

    python benchmarks/polish.py [--cells CELL ...] [--max-iter 100]

Cells are named as in ``results/benchmark-quick/cells`` (system__dataset__variant[__sSEED]).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import time

# benchmarks/inference.py would shadow the inference package: run from the repository root
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.flatten_util import ravel_pytree  # noqa: E402
from numpyro.infer.util import unconstrain_fn  # noqa: E402
from scipy.optimize import minimize  # noqa: E402

from analysis.cells import _data_key, cell_data, cell_seed, grid_scales  # noqa: E402
from inference import fit_svi  # noqa: E402
from inference._common import point_values  # noqa: E402
from inference.laplace import potential_hessian  # noqa: E402
from inference.polish import _SHARED, _end_report, polish_map  # noqa: E402
from inference.result import trace_sites  # noqa: E402
from models import build_model, model_data  # noqa: E402
from models.identifiable import identifiable_where_possible  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_CELLS = (
    "cartpole__hardware__nokin-diffnea-stribeck-weak",
    "furuta__trajectories__nokin-diffnea-ideal-weak",
    "furuta__uniform__nokin-diffnea-stribeck-weak__s2",
)


def cell_problem(name: str):
    """``(model, data, svi point {site: value})`` of a grid cell, as ``analysis.cells`` fits it."""
    record = json.loads((ROOT / "results/benchmark-quick/cells" / f"{name}.json").read_text())
    cell, settings = record["cell"], record["settings"]
    dataset, train, _, _ = cell_data(*_data_key(cell, settings))
    data = model_data(train)
    model, _ = identifiable_where_possible(
        build_model(cell["variant"], dataset.robot(), scales=grid_scales(cell, settings))
    )
    svi = fit_svi(
        model,
        data,
        guide="delta",
        key=cell_seed(cell, int(settings["seed"])),
        steps=int(settings["svi_steps"]),
        learning_rate=float(settings["learning_rate"]),
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )
    return model, data, point_values(svi, trace_sites(model, data)[0])


def run_methods(model, data, point, max_iter: int) -> list[dict]:
    unconstrained = unconstrain_fn(model.model, (data,), {}, point)
    x0, unravel = ravel_pytree(unconstrained)
    counts = {"hessians": 0}

    def fun(x):  # polish_map's own (shared) energy-and-gradient program
        e, g = _SHARED["value_and_grad"](model, jnp.asarray(x), data, unconstrained, {})
        return float(e), np.asarray(g, np.float64)

    def hess(x):
        counts["hessians"] += 1
        return np.asarray(potential_hessian(model, data, unravel(jnp.asarray(x))), np.float64)

    rows = []
    for method in ("polish", "trust-exact", "trust-krylov"):
        for _ in range(2):  # the second run is timed: compiles shared
            counts["hessians"] = 0
            t0 = time.perf_counter()
            if method == "polish":
                out, report = polish_map(model, data, point, max_iter=max_iter)
                x = np.asarray(ravel_pytree(unconstrain_fn(model.model, (data,), {}, out))[0])
                iterations = report.iterations
                hessians = report.iterations + 1  # one per step and one for the report
            else:
                res = minimize(
                    fun,
                    np.asarray(x0, np.float64),
                    jac=True,
                    hess=hess,
                    method=method,
                    options={"gtol": 1e-6, "maxiter": max_iter},
                )
                x, iterations, hessians = res.x, int(res.nit), counts["hessians"]
            seconds = time.perf_counter() - t0
        e, g = fun(x)
        end = _end_report(hess(x), g, e, iterations, 1e-6, float(np.finfo(np.float64).eps))
        rows.append(
            dict(
                method=method,
                seconds=seconds,
                iterations=iterations,
                hessians=hessians,
                energy=e,
                grad_norm=float(np.linalg.norm(g)),
                decrement=end.newton_decrement,
                eig_min=end.min_eigenvalue,
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="+", default=list(DEFAULT_CELLS))
    parser.add_argument("--max-iter", type=int, default=100)
    args = parser.parse_args()
    print(
        "| cell | method | s | iterations | Hessians | energy | gradient norm | Newton "
        "decrement | min eigenvalue |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in args.cells:
        model, data, point = cell_problem(name)
        for r in run_methods(model, data, point, args.max_iter):
            print(
                f"| {name} | {r['method']} | {r['seconds']:.1f} | {r['iterations']} | "
                f"{r['hessians']} | {r['energy']:.3f} | {r['grad_norm']:.3g} | "
                f"{r['decrement']:.3g} | {r['eig_min']:.3g} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
