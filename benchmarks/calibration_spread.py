"""How much a network ensemble's band coverage depends on which episode calibrates its noise.

Fits ``variant`` on ``system``/``kind`` as ``benchmarks/variants_learn.py`` does (30 s in 5 s
episodes, 3,000 steps, early stopping and noise calibration on the validation episode), undoes
the stored calibration, then calibrates the noise factor on each of the 8 episodes the fit did
not train on in turn (validation, test and 6 further episodes of an independent recording) and
prints the mean 90 % band coverage of the other 7 per joint, and the mean, sd and range over
the choices.

    python benchmarks/calibration_spread.py cartpole foreign ffnn
"""

import os
import sys
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))
sys.path.insert(0, _HERE)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import variants_learn as vl  # noqa: E402

from analysis.diagnostics import heldout_predictions  # noqa: E402
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
    latent = list(members)
    prof = dict(members)
    prof[site.site] = members[site.site] - np.log(f) / site.prior.scale
    points = [{k: v[i] for k, v in prof.items()} for i in range(R)]
    episodes = [
        valid.replace(episodes=(ep,)) for ep in valid.episodes + test.episodes + extra.episodes
    ]

    def coverage(pts, ds):
        """Mean 90 % band coverage per joint of the members' mixture (200 draws, Normal noise)."""
        st = {k: jnp.stack([p[k] for p in pts]) for k in latent}
        mu = np.asarray(heldout_predictions(model, st, ds))  # (R, N, n)
        sig = np.exp(site.prior.loc + site.prior.scale * np.asarray(st[site.site]))  # (R, n)
        rng = np.random.default_rng(0)
        draws = mu[np.arange(200) % R] + sig[np.arange(200) % R][:, None] * rng.standard_normal(
            (200,) + mu.shape[1:]
        )
        lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
        y = np.asarray(ds.arrays()[2])
        return ((y >= lo) & (y <= hi)).mean(0)

    rows = []
    for i, cal in enumerate(episodes):
        obs, vdata, _ = fit_inputs(model, model_data(cal, robot=robot))
        pts, rec = _calibrate_noise(model, vdata, int(np.size(obs.q)), points, latent)
        covs = np.array([coverage(pts, ds) for j, ds in enumerate(episodes) if j != i])
        rows.append(covs.mean(0))
        print(
            f"calibrated on episode {i}: factor {np.round(rec['factor'][site.name], 2)}, mean coverage of the other {len(covs)}: {np.round(covs.mean(0), 3)}",
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
