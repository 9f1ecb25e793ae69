"""How much a network ensemble's band coverage depends on which episode calibrates its noise.

Fits ``variant`` on ``system``/``kind`` as ``benchmarks/variants_learn.py`` does (30 s in 5 s
episodes, 3,000 steps, early stopping and noise calibration on the validation episode), undoes
the stored calibration, then calibrates the noise factor on each of the 8 episodes the fit did
not train on in turn (validation, test and 6 further episodes of an independent recording) and
prints the mean 90 % band coverage (``analysis.diagnostics.heldout_ppc``, the band the
variants benchmark scores) of the other 7 per joint, and the mean, sd and range over the
choices.

    python benchmarks/calibration_spread.py cartpole foreign ffnn
"""

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
    system, kind, variant = sys.argv[1], sys.argv[2], sys.argv[3]
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

    rows = []
    for i, cal in enumerate(episodes):
        obs, vdata, _ = fit_inputs(model, model_data(cal, robot=robot))
        calibrated, rec = _calibrate_noise(model, vdata, int(np.size(obs.q)), profiled)
        covs = np.array(
            [
                heldout_ppc(model, Mixture(calibrated), ds)["coverage_per_joint"]
                for j, ds in enumerate(episodes)
                if j != i
            ]
        )
        rows.append(covs.mean(0))
        print(
            f"calibrated on episode {i}: factor {np.round(rec['factor'][site.name], 2)}, "
            f"mean coverage of the other {len(covs)}: {np.round(covs.mean(0), 3)}",
            flush=True,
        )
    rows = np.array(rows)
    print(
        "over calibration episodes: mean",
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
