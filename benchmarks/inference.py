"""Inference benchmark: cart-pole DiffNEA + viscous friction (informative prior) on 5,000 samples.

Prints compile time, SVI steps per second, NUTS wall time (2 chains x 1,000 warm-up + 1,000
draws) and ESS per second, in float64 and float32 (float32 runs in a child process with
``BAYES_NEA_X64=0``, since precision is fixed when JAX starts). Target: NUTS under 60 s.
NUTS starts at the SVI MAP with the Laplace metric (``fit_nuts``'s default with an init);
``--metric adapt`` measures adapted metrics instead.

    python benchmarks/inference.py [--samples 5000 --warmup 1000 --draws 1000 --steps 3000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

# This file is named like the package it measures: import the package, not this script.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))


def run_once(args) -> dict:
    import numpyro

    numpyro.set_host_device_count(min(2, os.cpu_count() or 1))
    import time

    import jax
    import jax.numpy as jnp

    import bayes_nea as bn
    from inference import fit_nuts, fit_svi
    from models import ModelData, build_model

    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    robot = bn.get_system("cartpole")
    model = build_model("diffnea/viscous/informative", robot, likelihood="forward")
    truth = model.init_sample(dtype=dtype)
    q, qd, _ = bn.sample_states(robot, jax.random.PRNGKey(1), args.samples)
    q, qd = q.astype(dtype), qd.astype(dtype)
    tau = jax.random.normal(jax.random.PRNGKey(2), q.shape, dtype)
    qdd = jax.jit(jax.vmap(model.qdd_fn(truth)))(q, qd, tau)
    qdd = qdd + 0.05 * jnp.std(qdd, axis=0) * jax.random.normal(
        jax.random.PRNGKey(3), qdd.shape, dtype
    )
    data = ModelData(q, qd, qdd, tau)
    out = {"dtype": str(dtype.__name__), "devices": jax.local_device_count()}
    t0 = time.perf_counter()
    svi = fit_svi(
        model, data, key=0, steps=args.steps, progress=False, num_predictive=0, log_likelihood=False
    )
    out["svi_total_s"] = time.perf_counter() - t0
    out["svi_compile_s"] = svi.attrs["timing"]["compile_s"]
    out["svi_steps_per_s"] = svi.attrs["timing"]["steps_per_s"]
    out["svi_converged"] = svi.attrs["convergence"]["converged"]
    t0 = time.perf_counter()
    nuts = fit_nuts(
        model,
        data,
        key=0,
        num_warmup=args.warmup,
        num_samples=args.draws,
        num_chains=2,
        init=svi,
        metric=args.metric,
        dense_mass=args.metric == "adapt",
        max_tree_depth=args.max_tree_depth,
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )
    out["nuts_total_s"] = time.perf_counter() - t0
    out["nuts_wall_s"] = nuts.attrs["timing"]["wall_s"]
    out["leapfrog_per_draw"] = float(nuts.idata["sample_stats"]["n_steps"].mean())
    d = nuts.diagnostics()
    out.update(
        ess_bulk_min=d["ess_bulk_min"],
        ess_per_s=d["ess_bulk_min"] / out["nuts_wall_s"],
        rhat_max=d["rhat_max"],
        divergences=d["divergences"],
    )
    return out


def _efforts(robot, key, shape, dtype, kind: str):
    """Efforts (N, n) of the identifiable table. ``"limit"`` (the default since 2026-11-30):
    N(0, limit^2) on each joint with an effort limit and 0 on the others, as the library's own
    uniform dataset (``data.simulate``) and any robot's log: an unactuated joint gets no effort.
    ``"unit"``: N(0, 1) N or N m on every joint, unactuated ones included (the table's data
    until 2026-11-30; on the Furuta 40 x the arm motor's limit and 1 N m on the pendulum, which
    has no motor)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    tau = jax.random.normal(key, shape, dtype)
    if kind == "unit":
        return tau
    limit = np.abs(np.asarray(robot.effort_limit, dtype=np.float64))
    return tau * jnp.asarray(np.where(np.isfinite(limit), limit, 0.0), dtype)


def identifiable_rows(system, actuator, prior, args, family="diffnea") -> list[dict]:
    """One cell of the identifiable-geometry table: Newton MAP then NUTS (the model's metric),
    one row per NUTS key ``0 .. args.nuts_keys - 1`` from the same MAP (replicates of the
    sampler on the same posterior: a divergence count of one run is a draw of a random count).

    Data: ``args.samples`` uniform states with efforts from :func:`_efforts` (``args.efforts``),
    accelerations of the nominal robot with the prior-median friction of
    ``diffnea/<actuator>/informative`` (the same data for both priors) plus 5 % noise.
    ``family`` ``"nokin-diffnea"`` learns the placements too (its base parameters at each
    draw's placements; truth at the nominal ones). Besides the latent sites' R-hat / ESS the
    row gives those of the identified quantities
    (``inference.identified``: base parameters, coefficients, noise scales and the predicted
    accelerations at 20 held-out states).
    """
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    import bayes_nea as bn
    from inference import fit_nuts
    from inference.identified import identified_summary
    from inference.polish import polish_map
    from models import ModelData, build_model
    from models.identifiable import identifiable_model

    dtype = jnp.float64 if jax.config.jax_enable_x64 else jnp.float32
    robot = bn.get_system(system)
    truth_model = build_model(f"diffnea/{actuator}/informative", robot)
    truth = truth_model.init_sample(dtype=dtype)
    q, qd, _ = bn.sample_states(robot, jax.random.PRNGKey(1), args.samples)
    q, qd = q.astype(dtype), qd.astype(dtype)
    tau = _efforts(robot, jax.random.PRNGKey(2), q.shape, dtype, args.efforts)
    qdd = jax.jit(jax.vmap(truth_model.qdd_fn(truth)))(q, qd, tau)
    qdd = qdd + 0.05 * jnp.std(qdd, axis=0) * jax.random.normal(
        jax.random.PRNGKey(3), qdd.shape, dtype
    )
    data = ModelData(q, qd, qdd, tau)
    t_start = time.perf_counter()
    model = identifiable_model(build_model(f"{family}/{actuator}/{prior}", robot))
    data = model.prepare(data)
    point, report = polish_map(model, data, model.init_sample(dtype=dtype))
    t_map = time.perf_counter() - t_start
    # what every NUTS run of the cell is scored against: the true base parameters and the
    # held-out states of the predicted accelerations
    nominal = model.dynamics_robot.nominal
    if hasattr(model, "basis"):  # learned placements: B at the true (nominal) ones
        B = np.asarray(model.basis(jnp.asarray(nominal.rpy), jnp.asarray(nominal.xyz)))
    else:
        B = np.asarray(model.base.to_base)
    beta_true = B @ np.asarray(nominal.theta).reshape(-1)
    hq, hqd, _ = bn.sample_states(robot, jax.random.PRNGKey(11), 20)
    htau = _efforts(robot, jax.random.PRNGKey(12), hq.shape, dtype, args.efforts)
    held_out = (hq.astype(dtype), hqd.astype(dtype), htau)
    rows = []
    for key in range(args.nuts_keys):
        t_nuts = time.perf_counter()
        fit = fit_nuts(
            model,
            data,
            key=key,
            num_warmup=args.warmup,
            num_samples=args.draws,
            num_chains=2,
            init=point,
            metric=args.metric or "auto",
            dense_mass=args.metric == "adapt",
            target_accept=args.target_accept or "auto",
            max_tree_depth=args.max_tree_depth,
            progress=False,
            num_predictive=0,
            log_likelihood=False,
        )
        total = t_map + time.perf_counter() - t_nuts
        d = fit.diagnostics()
        post = fit.idata["posterior"]
        beta = np.asarray(post["base_parameters"].values).reshape(-1, beta_true.size)
        z = np.abs(beta.mean(0) - beta_true) / beta.std(0)
        table = identified_summary(fit, model, states=held_out)
        is_accel = table.index.str.startswith("qdd_pred")
        accel, params = table[is_accel], table[~is_accel]
        settings = fit.attrs["settings"]
        dense = "-dense" if settings["metric"] == "adapt" and settings["dense_mass"] else ""
        rows.append(
            {
                "system": system,
                "variant": f"{family}/{actuator}/{prior}",
                "key": key,
                "metric": f"{settings['metric']}{dense}/{settings['target_accept']:g}",
                "map_s": t_map,
                "map_converged": report.converged,
                "nuts_wall_s": fit.attrs["timing"]["wall_s"],
                "total_s": total,
                "leapfrog_per_draw": float(fit.idata["sample_stats"]["n_steps"].mean()),
                "max_depth_hit": float(fit.idata["sample_stats"]["reached_max_tree_depth"].mean()),
                "rhat_max": d["rhat_max"],
                "ess_bulk_min": d["ess_bulk_min"],
                "divergences": d["divergences"],
                "rhat_params_max": float(params["r_hat"].max()),
                "ess_params_min": float(params["ess_bulk"].min()),
                "rhat_identified_max": float(table["r_hat"].max()),
                "ess_identified_min": float(table["ess_bulk"].min()),
                "rhat_qdd_max": float(accel["r_hat"].max()),
                "completed": d["consistent_fraction"],
                "beta_z_max": float(z.max()),
            }
        )
    return rows


def run_identifiable(args) -> list[dict]:
    import numpyro

    numpyro.set_host_device_count(min(2, os.cpu_count() or 1))
    rows = []
    for family in args.families.split(","):
        for system in args.systems.split(","):
            for actuator in args.actuators.split(","):
                for prior in args.priors.split(","):
                    rows.extend(identifiable_rows(system, actuator, prior, args, family))
                    print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    return rows


def print_identifiable(rows, args) -> None:
    print(
        f"identifiable geometry (models.identifiable), forward likelihood, {args.samples} "
        f"uniform samples, efforts '{args.efforts}'; Newton MAP, then NUTS 2 chains x "
        f"({args.warmup} warm-up + {args.draws} draws, tree depth <= {args.max_tree_depth}: "
        "max_depth_hit = fraction of transitions that reached it), metric/target acceptance as "
        "listed; "
        "rhat_max/ess_bulk_min over the latent sites, *_params over base parameters, "
        "coefficients and noise scales (in their units), *_identified over those and predicted "
        "accelerations at 20 held-out states (rhat_qdd_max: those alone); total = MAP + NUTS "
        "incl. compile"
    )
    columns = [
        ("system", "{}"),
        ("variant", "{}"),
        ("key", "{}"),
        ("metric", "{}"),
        ("map_converged", "{}"),
        ("total_s", "{:.1f}"),
        ("nuts_wall_s", "{:.1f}"),
        ("leapfrog_per_draw", "{:.1f}"),
        ("max_depth_hit", "{:.3f}"),
        ("rhat_max", "{:.4f}"),
        ("ess_bulk_min", "{:.0f}"),
        ("divergences", "{}"),
        ("rhat_params_max", "{:.4f}"),
        ("ess_params_min", "{:.0f}"),
        ("rhat_identified_max", "{:.4f}"),
        ("ess_identified_min", "{:.0f}"),
        ("rhat_qdd_max", "{:.4f}"),
        ("completed", "{:.3f}"),
        ("beta_z_max", "{:.2f}"),
    ]
    print("| " + " | ".join(name for name, _ in columns) + " |")
    print("|" + " --- |" * len(columns))
    for r in rows:
        print("| " + " | ".join(fmt.format(r[name]) for name, fmt in columns) + " |")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=5000)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--draws", type=int, default=1000)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument(
        "--metric",
        choices=(
            "laplace", "adapt", "laplace-adapt", "softplus-adapt", "laplace-slices",
            "laplace-curved", "laplace-curved-or-adapt",
        ),
        default=None,
        help="default: laplace; identifiable: the model's nuts_metric (fit_nuts 'auto')",
    )
    p.add_argument(
        "--max-tree-depth",
        type=int,
        default=10,
        help="NUTS tree depth cap (at most 2^depth - 1 leapfrog steps per draw; default 10)",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--precision", choices=("float64", "float32", "both"), default="both")
    p.add_argument(
        "--geometry",
        choices=("whitened", "identifiable"),
        default="whitened",
        help="identifiable: the base-parameter table over systems x {viscous, stribeck} x priors",
    )
    p.add_argument("--systems", default="cartpole,furuta")
    p.add_argument("--families", default="diffnea", help="identifiable: diffnea,nokin-diffnea")
    p.add_argument("--actuators", default="viscous,stribeck")
    p.add_argument("--priors", default="informative,weak")
    p.add_argument(
        "--target-accept",
        type=float,
        default=None,
        help="NUTS step-size target (default: 0.8; identifiable: the model's, fit_nuts 'auto')",
    )
    p.add_argument(
        "--efforts",
        choices=("limit", "unit"),
        default="limit",
        help="identifiable: N(0, limit^2) on the driven joints only (default, as the library's "
        "uniform dataset), or N(0, 1) on every joint (unactuated ones included)",
    )
    p.add_argument(
        "--nuts-keys",
        type=int,
        default=1,
        help="identifiable: NUTS runs per cell (keys 0..N-1) from the same MAP",
    )
    args = p.parse_args(argv)
    if args.geometry == "identifiable":
        print_identifiable(run_identifiable(args), args)
        return 0
    args.metric = args.metric or "laplace"
    if args.child:
        print(json.dumps(run_once(args)))
        return 0
    precisions = ("float64", "float32") if args.precision == "both" else (args.precision,)
    rows = []
    for precision in precisions:
        env = dict(os.environ, BAYES_NEA_X64="1" if precision == "float64" else "0")
        cmd = [sys.executable, __file__, "--child", *(argv if argv is not None else sys.argv[1:])]
        cmd = [c for c in cmd if not c.startswith("--precision") and c not in precisions]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            print(proc.stderr[-3000:], file=sys.stderr)
            return proc.returncode
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(
        f"cart-pole diffnea/viscous/informative, forward likelihood, {args.samples} samples; "
        f"NUTS {rows[0]['devices']} device(s), 2 chains x ({args.warmup} warm-up + {args.draws} "
        f"draws), metric {args.metric}"
    )
    columns = [
        ("dtype", "{}"),
        ("svi_compile_s", "{:.1f}"),
        ("svi_steps_per_s", "{:.0f}"),
        ("svi_total_s", "{:.1f}"),
        ("svi_converged", "{}"),
        ("nuts_wall_s", "{:.1f}"),
        ("nuts_total_s", "{:.1f}"),
        ("leapfrog_per_draw", "{:.1f}"),
        ("ess_bulk_min", "{:.0f}"),
        ("ess_per_s", "{:.1f}"),
        ("rhat_max", "{:.4f}"),
        ("divergences", "{}"),
    ]
    print(" | ".join(name for name, _ in columns))
    for r in rows:
        print(" | ".join(fmt.format(r[name]) for name, fmt in columns))
    return 0


if __name__ == "__main__":
    sys.exit(main())
