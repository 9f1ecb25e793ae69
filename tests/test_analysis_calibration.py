"""Simulation-based calibration harness (analysis.calibration): a reduced SBC (slow) and the
bookkeeping (resumable records, summary statistics against scipy)."""

import json

import jax
import numpy as np
import pytest
from scipy import stats

from analysis.calibration import (
    CalibrationSettings,
    batch_table,
    sbc_batch,
    summarise,
    summary_table,
)

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)

SMALL = CalibrationSettings(
    n_samples=30, num_warmup=100, num_samples=100, ranks=20, batch_size=10, seed=3
).to_dict()


@pytest.mark.slow
def test_reduced_sbc_is_calibrated_on_the_cartpole():
    out = sbc_batch("cartpole", "diffnea/viscous/informative", 0, SMALL)
    assert out["map_converged"], out["map_message"]
    reps = out["replicates"]
    # one chain per replicate, 100 draws after 100 warm-up steps on 30 states
    assert sum(r["divergences"] for r in reps) == out["divergences"]
    kept = [r for r in reps if r["divergences"] == 0]
    print("divergences per replicate", [r["divergences"] for r in reps])
    assert len(kept) >= 7
    assert all(r["consistent_draws"] >= 0.99 for r in reps)  # cart-pole: every beta has a body
    record = {"system": "cartpole", "variant": "v", "settings": SMALL, "metrics": out}
    rows = summarise([record])
    assert len(rows) == 8  # 4 base parameters, 2 viscous coefficients, 2 noise scales
    assert all(r["replicates"] == len(kept) for r in rows)  # divergent chains left out
    # ~10 replicates are too few for a 10-bin test per quantity (expected counts ~1: the
    # chi-square approximation fails); pooled over the 8 quantities, 7 bins of 3 rank values
    # (ranks 0..20), ~11 expected each
    ranks = np.array([q["rank"] for r in kept for q in r["quantities"].values()])
    counts = np.histogram(ranks, bins=7, range=(0, SMALL["ranks"] + 1))[0]
    assert stats.chisquare(counts).pvalue > 1e-3, (counts, summary_table(rows))
    # pooled 90 % coverage of the 8 x kept intervals within binomial's central 99.9 %
    covered = sum(round(r["cover90"] * r["replicates"]) for r in rows)
    lo, hi = stats.binom.ppf([0.0005, 0.9995], 8 * len(kept), 0.9)
    assert lo <= covered <= hi, summary_table(rows)
    json.dumps(out)  # records are JSON


def test_summary_statistics_match_scipy():
    rng = np.random.default_rng(0)
    reps = []
    for r in range(40):
        reps.append(
            {
                "replicate": r,
                "quantities": {
                    "a": {
                        "rank": int(rng.integers(0, 21)),
                        "in50": r % 2 == 0,
                        "in90": r % 10 != 0,
                    },
                    "b": {"rank": 0, "in50": False, "in90": False},
                },
            }
        )
    record = {
        "system": "s",
        "variant": "v",
        "settings": dict(SMALL, ranks=20),
        "metrics": {"replicates": reps},
    }
    failed = dict(record, metrics={"replicates": reps, "map_converged": False})
    rows = {r["quantity"]: r for r in summarise([record, failed], bins=7)}
    assert rows["a"]["replicates"] == 40  # the batch whose MAP failed is left out
    ranks = np.array([rep["quantities"]["a"]["rank"] for rep in reps])
    counts = np.histogram(ranks, bins=7, range=(0, 21))[0]
    assert rows["a"]["chi2_p"] == pytest.approx(stats.chisquare(counts).pvalue)
    assert rows["a"]["cover50"] == 0.5 and rows["a"]["cover90"] == 0.9
    assert rows["a"]["uniform"]
    assert not rows["b"]["uniform"]  # all ranks 0: chi-square p ~ 0
    # per-replicate flags: only the replicates whose own MAP failed are left out
    flagged = [dict(rep, map_converged=i % 4 != 0) for i, rep in enumerate(reps)]
    partial = dict(record, metrics={"replicates": flagged, "map_converged": False})
    assert summarise([partial])[0]["replicates"] == 30
    # a replicate with fewer than L = 20 of its 100 draws consistent is left out too
    few = [dict(rep, consistent_draws=0.1 if i == 1 else 0.9) for i, rep in enumerate(flagged)]
    assert summarise([dict(partial, metrics={"replicates": few})])[0]["replicates"] == 29
    fits = [
        dict(
            partial, seconds=s, metrics=dict(partial["metrics"], divergences=d, leapfrog_per_draw=k)
        )
        for s, d, k in ((10.0, 0, 7.0), (30.0, 4, 15.0), (20.0, 1, 31.0))
    ]
    # 3 batches, 5 divergences in 2 of them (counts per batch here), median/max steps 15/31,
    # 3 x 10 failed MAPs, every draw consistent (no flag recorded), 20 s
    assert "| s | v | 3 | 5 (2) | 15, 31 | 30 | 1.000 (0) | 20 |" in batch_table(fits)
    fits[0]["metrics"] = dict(fits[0]["metrics"], replicates=few)  # 40 x 0.9 or 0.1
    assert "| 30 | 0.960 (1) | 20 |" in batch_table(fits)  # (40 x 0.9 - 0.8 + 80) / 120
    with pytest.raises(ValueError, match="replicates"):
        from analysis.calibration import run_calibration

        run_calibration("/nonexistent-never-created", replicates=0)


def test_cells_draw_independent_streams_and_chance_coverage_matches_binomial_draws():
    from analysis.calibration import cell_key, cell_summary, coverage_outside

    a = jax.random.normal(cell_key(0, "cartpole", "diffnea/viscous/informative", 3), (4,))
    b = jax.random.normal(cell_key(0, "furuta", "diffnea/viscous/informative", 3), (4,))
    c = jax.random.normal(cell_key(0, "cartpole", "diffnea/stribeck/informative", 3), (4,))
    again = jax.random.normal(cell_key(0, "cartpole", "diffnea/viscous/informative", 3), (4,))
    assert np.array_equal(a, again)  # resumable: a batch redraws the same data
    assert not np.allclose(a, b) and not np.allclose(a, c)
    # chance of a coverage outside [0.85, 0.95] with exact 90 % intervals, against simulation
    rng = np.random.default_rng(1)
    for R in (40, 120, 300):
        cover = rng.binomial(R, 0.9, size=200_000) / R
        simulated = np.mean((cover < 0.85) | (cover > 0.95))
        assert coverage_outside(R) == pytest.approx(simulated, abs=3e-3)
    # E z^2 is 1 when truths are posterior draws (Gaussian posteriors of random widths)
    reps = []
    for r in range(4000):
        mean, sd = rng.normal(), rng.uniform(0.1, 3.0)
        truth = rng.normal(mean, sd)
        # "a": the posterior the truth was drawn from; "b": the same shifted by one sd
        a = {"truth": truth, "mean": mean, "sd": sd}
        b = {"truth": truth, "mean": mean + sd, "sd": sd}
        for x in (a, b):
            x.update(rank=0, in50=True, in90=abs(truth - x["mean"]) <= 1.6449 * sd)
        reps.append({"replicate": r, "quantities": {"a": a, "b": b}})
    record = {"system": "s", "variant": "v", "settings": SMALL, "metrics": {"replicates": reps}}
    rows = {r["quantity"]: r for r in summarise([record])}
    assert rows["a"]["z2"] == pytest.approx(1.0, abs=4 * rows["a"]["z2_se"])
    assert rows["b"]["z2"] == pytest.approx(2.0, abs=4 * rows["b"]["z2_se"])  # shifted by 1 sd
    (cell,) = cell_summary(list(rows.values()))
    assert cell["outside"] == ["b"] and cell["quantities"] == 2
    assert cell["expected_outside"] == pytest.approx(2 * coverage_outside(4000))


def test_replicate_metrics_are_each_replicates_laplace_metric_in_softplus_coordinates():
    """Each replicate's start maps back to its MAP and its metric is the inverse Hessian of its
    own posterior in the map's coordinates (against autodiff of the composed density)."""
    import jax.numpy as jnp
    import numpyro
    from jax.flatten_util import ravel_pytree
    from numpyro.infer.util import potential_energy

    import bayes_nea as bn
    from analysis.calibration import _replicate_loglik, replicate_metrics
    from inference.polish import polish_map_batched
    from models import ModelData, build_model
    from models.identifiable import identifiable_model

    robot = bn.get_system("cartpole")
    model = identifiable_model(build_model("diffnea/stribeck/informative", robot), moment_draws=500)
    R, N = 3, 40
    q, qd, _ = bn.sample_states(robot, jax.random.key(0), R * N)
    tau = jax.random.normal(jax.random.key(1), q.shape, q.dtype)
    truth = model.init_sample()
    qdd = jax.vmap(model.qdd_fn(truth))(q, qd, tau) + 0.1 * jax.random.normal(
        jax.random.key(2), q.shape, q.dtype
    )
    parts = [
        model.prepare(ModelData(*(x[r * N : (r + 1) * N] for x in (q, qd, qdd, tau))))
        for r in range(R)
    ]
    data = jax.tree.map(lambda *xs: jnp.stack(xs), *parts)
    init = jax.tree.map(lambda x: jnp.broadcast_to(x, (R, *x.shape)), truth)
    point, reports = polish_map_batched(model, data, init)  # each replicate's own MAP
    assert all(r.converged for r in reports)
    starts, metrics, knees, cmap = replicate_metrics(model, data, point, softplus=True)
    assert knees.shape == (R, cmap.index.size) and cmap.index.size == 6  # 3 laws x 2 joints
    assert not np.allclose(knees[0], knees[1])  # each replicate's own map

    def single(d):
        sample = model.sample_latent(q.dtype)
        numpyro.factor("obs_qdd", _replicate_loglik(model, sample, d))

    for r in range(R):
        own = {k: v[r] for k, v in point.items()}
        flat, unravel = ravel_pytree(own)
        cm = cmap._replace(knee=np.asarray(knees[r]))
        np.testing.assert_allclose(cm.forward(starts[r])[0], flat, rtol=1e-10, atol=1e-12)
        data_r = jax.tree.map(lambda x, r=r: x[r], data)

        def potential(s, cm=cm, data_r=data_r, unravel=unravel):
            z, log_jac = cm.forward(s)
            return potential_energy(single, (data_r,), {}, unravel(z)) - log_jac

        H = np.asarray(jax.hessian(potential)(starts[r]))
        assert np.linalg.eigvalsh(H).min() > 0  # at a MAP: no eigenvalue floored
        np.testing.assert_allclose(
            np.linalg.inv(np.asarray(metrics[r])), H, rtol=1e-6, atol=1e-8 * np.abs(H).max()
        )
