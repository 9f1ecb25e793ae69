"""How much a network ensemble's band coverage depends on which episode calibrates its noise.

Fits ``variant`` on ``system``/``kind`` as ``benchmarks/variants_learn.py`` does (30 s in 5 s
episodes, 3,000 steps, early stopping and noise calibration on the validation episode), undoes
the stored calibration, then calibrates the noise factor on each set of ``--calibrate-on K``
of the 8 episodes the fit did not train on in turn (validation, test and 6 further episodes
of an independent recording; every one of the C(8, K) sets) and prints the mean 90 % band
coverage (``analysis.diagnostics.heldout_ppc``, the band the variants benchmark scores) of
the other 8 - K per joint, and the mean, sd and range over the sets: how much the number of
validation episodes decides a row's coverage. ``--rule coverage`` replaces the log-score
factor by the one at which the 90 % band covers 90 % of the calibration set per joint (a
split-conformal style recalibration; Kuleshov et al. 2018 recalibrate the whole predictive CDF
the same way), for comparison.

    python benchmarks/calibration_spread.py cartpole foreign ffnn [--calibrate-on 2] [--rule coverage]
"""

import argparse
import itertools
import os
import sys
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)

import jax  # noqa: E402
import numpy as np  # noqa: E402
import variants_learn as vl  # noqa: E402

from analysis.diagnostics import heldout_ppc, heldout_predictions  # noqa: E402
from inference import fit_svi  # noqa: E402
from inference._validate import fit_inputs  # noqa: E402
from inference.svi import _calibrate_mixture  # noqa: E402
from models import build_model, data_scales, model_data  # noqa: E402


def main() -> None:
    import tempfile

    workdir = tempfile.mkdtemp()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("system")
    p.add_argument("kind")
    p.add_argument("variant")
    p.add_argument("--calibrate-on", type=int, default=1, help="episodes per calibration set")
    p.add_argument(
        "--rule",
        choices=("log-score", "coverage"),
        default="log-score",
        help="log-score: the factor fit_svi fits; coverage: the factor per joint at which the "
        "90 %% band covers 90 %% of the calibration episodes (split-conformal style)",
    )
    cli = p.parse_args()
    system, kind, variant = cli.system, cli.kind, cli.variant
    args = types.SimpleNamespace(duration=30.0, episode_duration=5.0, seed=0, extra_test=30.0)
    train, valid, test, robot, clean, tt = vl.dataset_for(system, kind, args, workdir)
    extra = vl.extra_test_for(system, kind, args, workdir, robot, tt)
    md = model_data(train, robot=robot)
    scales = data_scales(md, robot)
    model = build_model(variant, robot, scales=scales)
    fit = fit_svi(
        model,
        md,
        key=0,
        steps=3000,
        num_samples=200,
        progress=False,
        num_predictive=0,
        log_likelihood=False,
        validation=model_data(valid, robot=robot),
    )
    members = vl.weighted_members(fit)  # the members that did not fail, equal weights
    R = next(iter(members.values())).shape[0]
    (site,) = model.noise_sites
    f = np.asarray(fit.attrs["ensemble"]["noise_calibration"]["factor"][site.name])
    profiled = dict(members)  # the calibration undone: the members' own noise MAPs
    profiled[site.site] = members[site.site] - np.log(f) / site.prior.scale
    episodes = [
        valid.replace(episodes=(ep,)) for ep in valid.episodes + test.episodes + extra.episodes
    ]

    class Mixture:
        """The kept members as 200 draws with equal weights, draw i = member i % R."""

        def __init__(self, stacked):
            self.stacked = stacked

        def posterior_samples(self):
            return {k: v[np.arange(200) % R] for k, v in self.stacked.items()}

    if not 1 <= cli.calibrate_on < len(episodes):
        p.error(f"--calibrate-on must be in [1, {len(episodes) - 1}]")
    if cli.rule == "coverage":  # noise-free predictions and unit noise per episode, once
        if model.spec.noise != "normal":
            p.error(
                "--rule coverage scales Normal noise; this model's noise is " + model.spec.noise
            )
        draws = Mixture(profiled).posterior_samples()
        sigma = np.asarray(jax.vmap(model.physical)(draws)["sigma_qdd"])  # (D, n)
        rng = np.random.default_rng(0)
        per_ep = []
        for ds in episodes:
            pred = heldout_predictions(model, draws, ds)
            per_ep.append((pred, rng.standard_normal(pred.shape), np.asarray(ds.arrays()[2])))

        def coverage(i, f):  # (n,) coverage of episode i's 90 % band with noise factors f (n,)
            pred, z, qdd = per_ep[i]
            lo, hi = np.quantile(pred + f * sigma[:, None, :] * z, [0.05, 0.95], axis=0)
            return ((qdd >= lo) & (qdd <= hi)).mean(0)

    def calibrate(chosen):
        """``(factor (n,), coverage (8 - K, n) of the episodes not in chosen)``."""
        others = [j for j in range(len(episodes)) if j not in chosen]
        if cli.rule == "coverage":
            lo, hi = np.full(model.robot.n, 0.05), np.full(model.robot.n, 20.0)
            for _ in range(40):  # bisection in log f on the pooled coverage of the chosen set
                mid = np.sqrt(lo * hi)
                c = np.mean([coverage(i, mid) for i in chosen], axis=0)
                lo, hi = np.where(c < 0.9, mid, lo), np.where(c < 0.9, hi, mid)
            f = np.sqrt(lo * hi)
            return f, np.array([coverage(j, f) for j in others])
        cal = valid.replace(episodes=tuple(episodes[i].episodes[0] for i in chosen))
        obs, vdata, _ = fit_inputs(model, model_data(cal, robot=robot))
        calibrated, rec = _calibrate_mixture(
            model, vdata, int(np.size(obs.q)), profiled, np.full(R, 1.0 / R)
        )
        covs = [
            heldout_ppc(model, Mixture(calibrated), episodes[j])["coverage_per_joint"]
            for j in others
        ]
        return np.asarray(rec["factor"][site.name]), np.array(covs)

    rows = []
    for chosen in itertools.combinations(range(len(episodes)), cli.calibrate_on):
        factor, covs = calibrate(chosen)
        rows.append(covs.mean(0))
        print(
            f"calibrated on episodes {chosen}: factor {np.round(factor, 2)}, "
            f"mean coverage of the other {len(covs)}: {np.round(covs.mean(0), 3)}",
            flush=True,
        )
    rows = np.array(rows)
    print(
        f"over {len(rows)} calibration sets of {cli.calibrate_on}: mean",
        np.round(rows.mean(0), 3),
        "sd",
        np.round(rows.std(0, ddof=1), 3),
        "min",
        np.round(rows.min(0), 3),
        "max",
        np.round(rows.max(0), 3),
    )


if __name__ == "__main__":
    main()
