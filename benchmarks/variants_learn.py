"""Do the network and weak-prior variants learn? Held-out acceleration NMSE per variant (issue 11).

For each system and dataset kind: simulate ``--duration`` s, split by episode (70/15/15 %),
derive the network/noise normalisers from the training split (``models.data_scales``, stored in
the model spec), fit each variant by SVI (MAP, ``fit_svi`` defaults: prior-draw starts with
restarts where the model has networks or learned placements) and print one table row per
variant: held-out acceleration NMSE per joint, whether the fit converged (loss plateau and
gradient test), the restarts' loss spread and wall time. ``--compare-mean`` adds the peer
measured in the same run: the same fit started at the prior mean (the start the library used
before, where network gradients vanish). ``--bands`` adds, for the network variants, a low-rank
Gaussian guide over all latents (network weights included) after the MAP: the 90 % band's mean
width and its coverage of the held-out accelerations (posterior-predictive, noise included).

    python benchmarks/variants_learn.py [--systems cartpole furuta --kinds trajectories hardware
        --duration 30 --steps 3000 --compare-mean --bands]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from data import generate_dataset  # noqa: E402
from inference import fit_svi  # noqa: E402
from models import build_model, data_scales, model_data  # noqa: E402

DEFAULT_VARIANTS = (
    "ffnn",
    "diffnea/viscous/informative",
    "diffnea/stribeck/informative",
    "diffnea/nn-friction/informative",
    "diffnea/nn-residual/informative",
    "diffnea/ffnn/informative",
    "diffnea/viscous/weak",
    "nokin-diffnea/viscous/informative",
    "nokin-diffnea/viscous/weak",
)


def nmse(pred, truth) -> np.ndarray:
    pred, truth = np.asarray(pred), np.asarray(truth)
    return np.mean((pred - truth) ** 2, axis=0) / np.var(truth, axis=0)


def point_prediction(model, fit, test):
    s = {k: jnp.asarray(v[0, 0]) for k, v in fit.posterior_samples(group_by_chain=True).items()}
    return jax.jit(jax.vmap(model.qdd_fn(s)))(test.q, test.qd, test.tau)


def band(model, fit, test, key):
    """90 % posterior-predictive band of held-out accelerations: (mean width (n,), coverage (n,))."""
    draws = {k: jnp.asarray(v[0]) for k, v in fit.posterior_samples(group_by_chain=True).items()}

    def one(sample, k):
        qdd = jax.vmap(model.qdd_fn(sample))(test.q, test.qd, test.tau)
        sigma = model.noise_sigma(sample, "qdd", qdd.dtype)
        return qdd + sigma * jax.random.normal(k, qdd.shape, qdd.dtype)

    n_draws = next(iter(draws.values())).shape[0]
    pred = jax.jit(jax.vmap(one))(draws, jax.random.split(key, n_draws))
    lo, hi = np.percentile(np.asarray(pred), [5, 95], axis=0)
    truth = np.asarray(test.qdd)
    return (hi - lo).mean(axis=0), ((truth >= lo) & (truth <= hi)).mean(axis=0)


def fmt(x) -> str:
    return "/".join(f"{v:.3g}" for v in np.atleast_1d(x))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="+", default=["cartpole", "furuta"])
    p.add_argument("--kinds", nargs="+", default=["trajectories", "hardware"])
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--compare-mean", action="store_true")
    p.add_argument("--bands", action="store_true")
    p.add_argument("--band-steps", type=int, default=1000)
    args = p.parse_args(argv)
    print(
        f"# variants learn: {args.duration:g} s per dataset, {args.steps} SVI steps (MAP), "
        f"seed {args.seed}, {jax.local_device_count()} device(s)\n"
    )
    for system in args.systems:
        for kind in args.kinds:
            ds = generate_dataset(system, kind, seed=args.seed, duration=args.duration)
            train, _, test = ds.split(seed=args.seed)
            robot = ds.robot()
            md, mt = model_data(train, robot=robot), model_data(test, robot=robot)
            scales = data_scales(md, robot)
            print(f"## {system} / {kind}: {md.q.shape[0]} training, {mt.q.shape[0]} held-out samples")
            head = "| variant | held-out NMSE (per joint) | converged | grad rms/sqrt(N) | restarts spread | s |"
            if args.compare_mean:
                head += " NMSE from the prior mean |"
            if args.bands:
                head += " 90 % band width | coverage | band fit s |"
            print(head)
            print("|" + " --- |" * (head.count("|") - 1))
            for variant in args.variants:
                model = build_model(variant, robot, scales=scales)
                t0 = time.perf_counter()
                fit = fit_svi(
                    model, md, key=args.seed, steps=args.steps, progress=False,
                    num_predictive=0, log_likelihood=False,
                )
                wall = time.perf_counter() - t0
                c, r = fit.attrs["convergence"], fit.attrs["restarts"]
                spread = "-" if r is None else f"{r['spread']:.3g} ({r['restarts']})"
                row = (
                    f"| {variant} | {fmt(nmse(point_prediction(model, fit, mt), mt.qdd))} | "
                    f"{c['converged']} (loss {c['loss_converged']}) | {c['grad_relative']:.3g} | "
                    f"{spread} | {wall:.0f} |"
                )
                if args.compare_mean:
                    zero = {k: jnp.zeros_like(v) for k, v in model.start_sample(jax.random.key(0)).items()}
                    mean_fit = fit_svi(
                        model, md, key=args.seed, steps=args.steps, init=zero, progress=False,
                        num_predictive=0, log_likelihood=False,
                    )
                    row += f" {fmt(nmse(point_prediction(model, mean_fit, mt), mt.qdd))} |"
                if args.bands:
                    if model.has_networks:
                        t0 = time.perf_counter()
                        gfit = fit_svi(
                            model, md, key=args.seed, guide="lowrank", steps=args.band_steps,
                            init=fit, num_samples=200, progress=False, num_predictive=0,
                            log_likelihood=False,
                        )
                        width, cover = band(model, gfit, mt, jax.random.key(args.seed))
                        row += f" {fmt(width)} | {fmt(cover)} | {time.perf_counter() - t0:.0f} |"
                    else:
                        row += " - | - | - |"
                print(row, flush=True)
            print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
