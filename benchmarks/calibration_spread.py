"""How much a network ensemble's band coverage depends on which episode calibrates its noise.

Fits ``variant`` on ``system``/``kind`` as ``benchmarks/variants_learn.py`` does (30 s in 5 s
episodes, 3,000 steps, early stopping and noise calibration on the validation episode), undoes
the stored calibration, then calibrates the noise factor on each set of ``--calibrate-on K``
of the 8 episodes the fit did not train on in turn (validation, test and 6 further episodes
of an independent recording; every one of the C(8, K) sets) and prints the mean 90 % band
coverage (``analysis.diagnostics.heldout_ppc``, the band the variants benchmark scores) of
the other 8 - K per joint, and the mean, sd and range over the sets: how much the number of
validation episodes decides a row's coverage.

    python benchmarks/calibration_spread.py cartpole foreign ffnn [--calibrate-on 2]
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

import numpy as np  # noqa: E402
import variants_learn as vl  # noqa: E402

from analysis.diagnostics import heldout_ppc  # noqa: E402
from inference import fit_svi  # noqa: E402
from inference._validate import fit_inputs  # noqa: E402
from inference.svi import _calibrate_noise  # noqa: E402
from models import build_model, data_scales, model_data  # noqa: E402


def main() -> None:
    import tempfile

    workdir = tempfile.mkdtemp()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("system")
    p.add_argument("kind")
    p.add_argument("variant")
    p.add_argument("--calibrate-on", type=int, default=1, help="episodes per calibration set")
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
    members = fit.ensemble_members()
    R = next(iter(members.values())).shape[0]
    (site,) = model.noise_sites
    f = np.asarray(fit.attrs["ensemble"]["noise_calibration"]["factor"][site.name])
    profiled = dict(members)  # the calibration undone: the members' own noise MAPs
    profiled[site.site] = members[site.site] - np.log(f) / site.prior.scale
    episodes = [
        valid.replace(episodes=(ep,)) for ep in valid.episodes + test.episodes + extra.episodes
    ]

    class Mixture:
        """The members as 200 draws, draw i = member i % R (as ``fit_svi`` stores them)."""

        def __init__(self, stacked):
            self.stacked = stacked

        def posterior_samples(self):
            return {k: v[np.arange(200) % R] for k, v in self.stacked.items()}

    if not 1 <= cli.calibrate_on < len(episodes):
        p.error(f"--calibrate-on must be in [1, {len(episodes) - 1}]")
    rows = []
    for chosen in itertools.combinations(range(len(episodes)), cli.calibrate_on):
        cal = valid.replace(episodes=tuple(episodes[i].episodes[0] for i in chosen))
        obs, vdata, _ = fit_inputs(model, model_data(cal, robot=robot))
        calibrated, rec = _calibrate_noise(model, vdata, int(np.size(obs.q)), profiled)
        covs = np.array(
            [
                heldout_ppc(model, Mixture(calibrated), ds)["coverage_per_joint"]
                for j, ds in enumerate(episodes)
                if j not in chosen
            ]
        )
        rows.append(covs.mean(0))
        print(
            f"calibrated on episodes {chosen}: factor {np.round(rec['factor'][site.name], 2)}, "
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
