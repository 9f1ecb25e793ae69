"""The training support (analysis.support): nearest-neighbour distances against a brute-force
computation, the radius as the leave-one-episode-out quantile, and what it flags."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayes_nea as bn
from analysis.diagnostics import heldout_ppc
from analysis.support import state_inputs, training_support
from data import Dataset
from models import build_model

ROBOT = bn.get_system("cartpole")  # joints: cart (prismatic), pole (revolute)


def _dataset(q, qd, tau, episode_ids=None, qdd=None):
    n = len(q)
    return Dataset.from_arrays(
        system="cartpole", joint_names=ROBOT.joint_names, t=np.arange(n) / 250.0, q=q, qd=qd,
        qdd=np.zeros_like(q) if qdd is None else qdd, tau=tau, rate_hz=250.0,
        episode_ids=episode_ids,
    )


def _states(rng, n, shift=0.0):
    q = rng.normal(size=(n, 2)) * [0.3, 1.0]
    qd = rng.normal(size=(n, 2)) * [1.0, 4.0] + shift
    tau = np.stack([rng.normal(size=n) * 5.0, np.zeros(n)], axis=1)  # the pole is unactuated
    return q, qd, tau


def _brute_nearest(x, y):
    return np.sqrt(((x[:, None, :] - y[None, :, :]) ** 2).sum(-1)).min(axis=1)


def test_distances_and_radius_match_brute_force():
    rng = np.random.default_rng(0)
    q, qd, tau = _states(rng, 300)
    ids = np.repeat(np.arange(3), 100)
    support = training_support(_dataset(q, qd, tau, ids), quantile=0.9)
    x = state_inputs(ROBOT.joint_types, q, qd, tau)
    # inputs: sin, cos of the revolute pole angle, the cart position, velocities, efforts
    np.testing.assert_allclose(x[:, 0], np.sin(q[:, 1]))
    np.testing.assert_allclose(x[:, 1], np.cos(q[:, 1]))
    np.testing.assert_allclose(x[:, 2], q[:, 0])
    std = x.std(axis=0)
    assert np.isinf(support.scale[-1])  # the pole's effort is always 0: it counts for nothing
    z = np.where(np.isinf(support.scale), 0.0, x / np.where(std > 0, std, 1.0))
    loo = np.concatenate(
        [_brute_nearest(z[ids == e], z[ids != e]) for e in range(3)]  # other episodes only
    )
    assert support.radius == pytest.approx(np.quantile(loo, 0.9), rel=1e-12)
    qn, qdn, taun = _states(rng, 50)
    zn = state_inputs(ROBOT.joint_types, qn, qdn, taun)
    zn = np.where(np.isinf(support.scale), 0.0, zn / np.where(std > 0, std, 1.0))
    np.testing.assert_allclose(support.distance(qn, qdn, taun), _brute_nearest(zn, z), rtol=1e-10)


def test_flags_states_unlike_the_training_ones():
    rng = np.random.default_rng(1)
    q, qd, tau = _states(rng, 2000)
    support = training_support(_dataset(q, qd, tau, np.repeat(np.arange(5), 400)), quantile=0.95)
    # an episode drawn like the training ones: about 5 % outside (a new episode is measured
    # against all 5 training episodes, the radius against 4 of them, so a little fewer)
    inside = support.inside(*_states(rng, 2000))
    assert 0.005 < 1.0 - inside.mean() < 0.08
    # velocities 10 sd away: outside, all of them
    assert not support.inside(*_states(rng, 200, shift=40.0)).any()
    # one episode: cut into blocks so that a radius exists
    assert training_support(_dataset(q[:400], qd[:400], tau[:400])).radius > 0


def test_exit_time_of_rollouts():
    # three "rollouts" of 50 steps through training states: one stays, one leaves at step 20
    # (velocities 10 sd away), one turns NaN at step 10; efforts per draw or shared
    rng = np.random.default_rng(3)
    q, qd, tau = _states(rng, 1200)
    support = training_support(_dataset(q, qd, tau, np.repeat(np.arange(4), 300)))
    idx = rng.choice(1200, size=51)
    Q, QD = np.stack([q[idx]] * 3), np.stack([qd[idx]] * 3)
    QD[1, 20:] += 40.0
    Q[2, 10:] = np.nan
    dt = 0.004
    exit_s = support.exit_time(Q, QD, tau[idx[:50]], dt)
    # training states are at distance 0 from the training data: inside
    np.testing.assert_array_equal(exit_s, [np.inf, 20 * dt, 10 * dt])
    # the last state, which no effort follows, is not read; per-draw efforts broadcast alike
    QD[0, -1] += 40.0
    per_draw = np.stack([tau[idx[:50]]] * 3)
    np.testing.assert_array_equal(support.exit_time(Q, QD, per_draw, dt), exit_s)


def test_heldout_band_split_by_support():
    # the generating sample as every draw: inside and outside the support the band is the noise
    # distribution's, and the two coverages average to the overall one
    model = build_model("ffnn", ROBOT)
    sample = model.start_sample(jax.random.key(1))
    rng = np.random.default_rng(2)
    train = _dataset(*_states(rng, 600), np.repeat(np.arange(3), 200))
    support = training_support(train)
    near, far = _states(rng, 200), _states(rng, 100, shift=40.0)
    q, qd, tau = (jnp.asarray(np.concatenate([a, b])) for a, b in zip(near, far, strict=True))
    mean = jax.vmap(model.qdd_fn(sample))(q, qd, tau)
    qdd = model.noise_dist(mean, sample, "qdd", 2).sample(jax.random.key(4))

    class Draws:
        def posterior_samples(self):
            return jax.tree.map(lambda x: jnp.broadcast_to(x, (200, *jnp.shape(x))), sample)

    held = _dataset(q, qd, tau, qdd=qdd)
    ppc = heldout_ppc(model, Draws(), held, max_draws=200, support=support)
    expected_out = 1.0 - support.inside(q, qd, tau).mean()
    assert ppc["outside_support"] == pytest.approx(expected_out)
    assert 0.3 < ppc["outside_support"] < 0.4  # the 100 shifted states and a few others
    cov_in = np.asarray(ppc["coverage_inside_support_per_joint"])
    cov_out = np.asarray(ppc["coverage_outside_support_per_joint"])
    total = (1 - expected_out) * cov_in + expected_out * cov_out
    np.testing.assert_allclose(total, ppc["coverage_per_joint"], rtol=1e-12)
    assert np.all(np.abs(cov_in - 0.9) < 4 * np.sqrt(0.09 / 190))
    # the NMSE split the same way: squared errors of the mean over the whole set's variance
    near_mask = np.asarray(support.inside(q, qd, tau))
    sq = (np.asarray(mean) - np.asarray(qdd)) ** 2 / np.var(np.asarray(qdd), axis=0)
    np.testing.assert_allclose(ppc["nmse_inside_support_per_joint"], sq[near_mask].mean(0))
    np.testing.assert_allclose(ppc["nmse_outside_support_per_joint"], sq[~near_mask].mean(0))
    nmse_in, nmse_out = (
        np.asarray(ppc[f"nmse_{side}_support_per_joint"]) for side in ("inside", "outside")
    )
    total = (1 - expected_out) * nmse_in + expected_out * nmse_out
    np.testing.assert_allclose(total, ppc["nmse"], rtol=1e-10)
    # the training states themselves: nothing outside, no coverage to report there
    ppc = heldout_ppc(model, Draws(), train, max_draws=50, support=support)
    assert ppc["outside_support"] == 0.0
    assert ppc["coverage_outside_support_per_joint"] is None
    assert ppc["nmse_outside_support_per_joint"] is None


@pytest.mark.standard_promotion  # runs NumPyro's SVI (tests/conftest.py)
def test_a_stored_fit_keeps_the_episodes_its_support_is_built_from(tmp_path):
    """A fit of a dataset records its episodes' lengths, so the support of the stored fit (after
    a save and load) is that of the dataset's episodes; a fit of bare arrays has none recorded
    and counts as one episode, cut into contiguous blocks (its radius then from those blocks)."""
    from analysis.support import BLOCKS_WITHOUT_EPISODES, fit_support, support_of_blocks
    from inference import fit_svi, load_result, save_result
    from models import model_data

    rng = np.random.default_rng(3)
    q, qd, tau = _states(rng, 420)
    ids = np.repeat([0, 1, 2], [100, 200, 120])  # unequal episodes
    dataset = _dataset(q, qd, tau, episode_ids=ids)
    model = build_model("nea", ROBOT, noise_scale=1.0)
    fast = dict(key=0, steps=2, progress=False, num_predictive=0, log_likelihood=False)
    save_result(fit_svi(model, dataset, **fast), tmp_path / "episodes.nc")
    stored = load_result(tmp_path / "episodes.nc")
    assert stored.attrs["dataset"]["episode_lengths"] == [100, 200, 120]
    by_episode = training_support(dataset)
    support = fit_support(stored)
    assert support.radius == pytest.approx(by_episode.radius, rel=1e-12)
    np.testing.assert_allclose(support.scale, by_episode.scale, rtol=1e-12)

    arrays = fit_svi(model, model_data(dataset), **fast)
    assert arrays.attrs["dataset"] is None
    blocks = list(zip(*(np.array_split(x, BLOCKS_WITHOUT_EPISODES) for x in (q, qd, tau)), strict=True))
    expected = support_of_blocks(ROBOT.joint_types, blocks).radius
    assert fit_support(arrays).radius == pytest.approx(expected, rel=1e-12)
    assert fit_support(arrays).radius != pytest.approx(by_episode.radius, rel=1e-3)
