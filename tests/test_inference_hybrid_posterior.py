"""The closed-form posterior of a hybrid's rigid body and sign friction on a 2-link arm with known
parameters: least squares in the flat-prior limit (numpy), draws that predict through RNEA what
the base parameters predict, calibrated intervals over replicates, predictive coverage, and the
effective-sample-size weight of autocorrelated residuals (AR(1) closed form)."""

import jax
import numpy as np
import pytest
from test_inference_hybrid_training import arm_data  # noqa: F401  (fixture)

import bayes_nea as bn
from inference import hybrid_posterior as hp
from inference import hybrid_training as ht
from models import hybrid as hy


@pytest.fixture(scope="module")
def arm(arm_data):  # noqa: F811
    robot, sigma, moves, scale = arm_data
    full = [ht.movement_arrays(robot, m) for m in moves]
    truth = hy.Hybrid(
        (hy.fixed_rigid_body(robot, robot.nominal.theta), hy.SignFriction(sigma)), ("rbd", "sign")
    )
    base = bn.base_parameters(robot)
    w_true = np.concatenate([base.beta(robot.nominal.theta), sigma])
    return robot, full, truth, base, w_true, scale


def noisy(full, noise_sd, rng):
    return [ht.Batchable(m.x, m.Y, m.tau + noise_sd * rng.normal(size=m.tau.shape)) for m in full]


def test_flat_prior_limit_is_weighted_least_squares(arm):
    robot, full, truth, base, _, _ = arm
    data = noisy(full, np.array([0.05, 0.02]), np.random.default_rng(1))
    flat = (np.zeros(base.n_base + 2), np.full(base.n_base + 2, 1e8))
    post = hp.rigid_body_posterior(robot, data, truth, base=base, prior=flat, correlated=False)
    F = np.concatenate([hp.features(base, m) for m in data])
    y = np.concatenate([m.tau for m in data])
    w = 1.0 / post.noise_sd
    A = (F * w[None, :, None]).reshape(-1, F.shape[-1])
    b = (y * w[None, :]).reshape(-1)
    lstsq = np.linalg.lstsq(A, b, rcond=None)[0]
    np.testing.assert_allclose(post.mean, lstsq, rtol=1e-6, atol=1e-9)
    # the noise estimate is the residual RMS at the mean (of the first of two passes)
    res = y - F @ post.mean
    np.testing.assert_allclose(post.noise_sd, np.sqrt(np.mean(res**2, axis=0)), rtol=1e-6)


def test_draws_predict_through_rnea_what_their_base_parameters_predict(arm):
    robot, full, truth, base, _, _ = arm
    data = noisy(full, np.array([0.05, 0.02]), np.random.default_rng(2))
    post = hp.rigid_body_posterior(robot, data, truth, base=base, correlated=False)
    theta, sigma = post.draws(jax.random.key(0), 5)
    m = full[0]
    n = robot.n
    q, qd, qdd = m.x[:50, :n], m.x[:50, n : 2 * n], m.x[:50, 2 * n :]
    F = hp.features(base, ht.Batchable(m.x[:50], m.Y[:50], m.tau[:50]))
    rnea = jax.jit(jax.vmap(lambda a, b, c, p: bn.rnea(robot, a, b, c, params=p), (0, 0, 0, None)))
    for d in range(5):
        params = bn.RobotParams(theta[d], *robot.nominal[1:])
        tau = np.asarray(rnea(q, qd, qdd, params))
        tau = tau + sigma[d] * np.clip(qd / hy.QD_LIMIT, -1.0, 1.0)
        w_d = np.concatenate([base.beta(theta[d]), sigma[d]])
        np.testing.assert_allclose(tau, F @ w_d, rtol=1e-9, atol=1e-9)


def test_intervals_are_calibrated_over_replicates(arm):
    """40 noise replicates: the 90 % intervals of every base parameter and friction coefficient
    hold the truth at the nominal rate (binomial), and predictive intervals cover held-out
    torques at 90 %."""
    robot, full, truth, base, w_true, scale = arm
    rng = np.random.default_rng(3)
    noise_sd = np.array([0.05, 0.02])
    inside, cover = [], []
    for _ in range(40):
        data = noisy(full[:3], noise_sd, rng)
        post = hp.rigid_body_posterior(robot, data, truth, base=base, correlated=False)
        inside.append(np.abs(post.mean - w_true) <= hp.Z90 * post.sd())
        cover.append(hp.predictive_check(post, noisy(full[3:], noise_sd, rng), scale).coverage)
    rate = np.mean(inside)
    se = np.sqrt(0.9 * 0.1 / np.size(inside))
    assert abs(rate - 0.9) < 4 * se, rate
    np.testing.assert_allclose(np.mean(cover, axis=0), 0.9, atol=0.02)


def test_ess_fraction_of_ar1_residuals_matches_the_closed_form():
    rng = np.random.default_rng(4)
    rho, T = np.array([0.0, 0.8, 0.95]), 40000
    x = np.zeros((T, 3))
    e = rng.normal(size=(T, 3))
    for t in range(1, T):
        x[t] = rho * x[t - 1] + e[t]
    frac = hp.residual_ess_fraction([x[: T // 2], x[T // 2 :]])
    np.testing.assert_allclose(frac, (1 - rho) / (1 + rho), rtol=0.2)


def test_correlated_residuals_widen_the_posterior(arm):
    """Smooth (autocorrelated) torque errors: the ESS weight widens the parameter intervals by
    about sqrt(N / ESS)."""
    robot, full, truth, base, _, _ = arm
    rng = np.random.default_rng(5)
    smooth = []
    for m in full:
        e = rng.normal(size=m.tau.shape)
        kernel = np.ones(25) / 5.0
        e = np.stack([np.convolve(e[:, j], kernel, mode="same") for j in range(2)], axis=1)
        smooth.append(ht.Batchable(m.x, m.Y, m.tau + 0.05 * e))
    white = hp.rigid_body_posterior(robot, smooth, truth, base=base, correlated=False)
    corr = hp.rigid_body_posterior(robot, smooth, truth, base=base)
    assert np.all(corr.ess_fraction < 0.2)
    ratio = corr.sd() / white.sd()
    assert np.all(ratio > 2.0), ratio
