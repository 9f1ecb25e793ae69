"""The held-out posterior-predictive band (analysis.diagnostics.heldout_ppc) against closed forms:
draws at the parameters that generated the data give the noise distribution's own quantiles."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

import bayes_nea as bn
from analysis.diagnostics import heldout_ppc
from models import build_model

N_DRAWS, N_POINTS = 400, 300


class _Draws:
    """A result holding ``N_DRAWS`` copies of one latent sample."""

    def __init__(self, sample):
        self.sample = sample

    def posterior_samples(self):
        return jax.tree.map(lambda x: jnp.broadcast_to(x, (N_DRAWS, *jnp.shape(x))), self.sample)


class _Held:
    def __init__(self, *arrays):
        self._arrays = arrays

    def arrays(self):
        return self._arrays


def test_band_matches_the_noise_quantiles():
    # Student-t noise: the band has the t quantile (wider than the normal's 1.645 sd); the normal
    # noise goes through the same model.noise_dist
    robot = bn.get_system("cartpole")
    model = build_model("ffnn", robot, noise="student-t")
    quantile = stats.t.ppf(0.95, model.spec.student_df)
    sample = model.start_sample(jax.random.key(1))
    q, qd, _ = bn.sample_states(robot, 2, N_POINTS)
    tau = jax.random.normal(jax.random.key(3), q.shape, q.dtype) * jnp.array([[5.0, 0.0]])
    mean = jax.vmap(model.qdd_fn(sample))(q, qd, tau)
    qdd = model.noise_dist(mean, sample, "qdd", 2).sample(jax.random.key(4))
    ppc = heldout_ppc(model, _Draws(sample), _Held(q, qd, qdd, tau), max_draws=N_DRAWS)
    sigma = np.asarray(model.noise_sigma(sample, "qdd", mean.dtype))
    assert ppc["with_noise"]
    # width: 2 x the 95 % quantile x sigma, up to the quantile's sampling error over 400 draws
    np.testing.assert_allclose(ppc["width_per_joint"], 2 * quantile * sigma, rtol=0.06)
    # coverage of data drawn from the same distribution: 0.9 within 4 binomial sds
    sd = np.sqrt(0.09 / N_POINTS)
    assert np.all(np.abs(np.asarray(ppc["coverage_per_joint"]) - 0.9) < 4 * sd), ppc
    assert ppc["nmse"][0] > 0
    # every draw is the generating sample: the residuals are the noise itself, heavy-tailed
    resid = np.asarray(qdd - mean)
    np.testing.assert_allclose(
        ppc["residual_excess_kurtosis_per_joint"], stats.kurtosis(resid, axis=0), rtol=1e-10
    )
    assert min(ppc["residual_excess_kurtosis_per_joint"]) > 0.5  # t(4): infinite in theory


def test_band_of_a_model_observing_efforts_carries_their_noise():
    # NEA (inverse likelihood, fixed torque noise): tau_obs = tau(qdd) + e, so the predicted
    # qdd is Gaussian with covariance J diag(sigma^2) J^T, J = d qdd / d tau (M^-1 for a rigid
    # body): the band's width per point is 2 x 1.645 x sqrt(diag(J S J^T))
    robot = bn.get_system("cartpole")
    sigma = np.array([0.4, 0.05])
    model = build_model("nea", robot, noise_scale=sigma)
    assert model.likelihood.noise_keys == ("tau",)
    sample = model.start_sample(jax.random.key(1))
    q, qd, _ = bn.sample_states(robot, 2, N_POINTS)
    tau = jax.random.normal(jax.random.key(3), q.shape, q.dtype) * jnp.array([[5.0, 0.0]])
    e = jax.random.normal(jax.random.key(4), tau.shape, tau.dtype) * jnp.asarray(sigma)[None]
    forward = jax.vmap(model.qdd_fn(sample))
    qdd = forward(q, qd, tau - e)  # data drawn from the model's own generative story
    ppc = heldout_ppc(model, _Draws(sample), _Held(q, qd, qdd, tau), max_draws=N_DRAWS)
    assert ppc["with_noise"]
    jac = jax.vmap(jax.jacfwd(model.qdd_fn(sample), argnums=2))(q, qd, tau)  # (N, n, n)
    sd = np.sqrt(np.einsum("nij,j,nij->ni", np.asarray(jac), sigma**2, np.asarray(jac)))
    np.testing.assert_allclose(
        ppc["width_per_joint"], 2 * stats.norm.ppf(0.95) * sd.mean(axis=0), rtol=0.06
    )
    binomial = np.sqrt(0.09 / N_POINTS)
    assert np.all(np.abs(np.asarray(ppc["coverage_per_joint"]) - 0.9) < 4 * binomial), ppc


def test_band_of_effort_noise_has_the_state_dependent_width():
    # likelihood="forward-effort": qdd = M^-1 (tau + w - h) + r, so each point's band is
    # 2 x 1.645 x sqrt(diag(M^-1 S M^-T + R)) with M Pinocchio's CRBA of the nominal robot (the
    # informative prior's centre); data drawn from that Gaussian are covered at 90 %
    from conftest import system_reference

    robot = bn.get_system("cartpole")
    model = build_model("diffnea/ideal/informative", robot, likelihood="forward-effort")
    s_qdd, s_tau = np.array([0.05, 0.2]), np.array([0.3, 0.02])
    sample = model.init_sample()
    for site, value in zip(model.noise_sites, (s_qdd, s_tau), strict=True):
        sample[site.site] = jnp.asarray((np.log(value) - site.prior.loc) / site.prior.scale)
    q, qd, _ = bn.sample_states(robot, 2, N_POINTS)
    tau = jax.random.normal(jax.random.key(3), q.shape, q.dtype) * jnp.array([[5.0, 0.0]])
    ref = system_reference("cartpole")
    cov = []
    for a in np.asarray(q):
        Minv = np.linalg.inv(ref.mass_matrix(a))
        cov.append(Minv @ np.diag(s_tau**2) @ Minv.T + np.diag(s_qdd**2))
    cov = np.array(cov)
    mean = np.asarray(jax.vmap(model.qdd_fn(sample))(q, qd, tau))
    rng = np.random.default_rng(4)
    qdd = mean + np.einsum("kij,kj->ki", np.linalg.cholesky(cov), rng.standard_normal(q.shape))
    ppc = heldout_ppc(model, _Draws(sample), _Held(q, qd, jnp.asarray(qdd), tau), max_draws=N_DRAWS)
    assert ppc["with_noise"]
    sd = np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
    assert np.ptp(sd[:, 1]) > 0.2 * sd[:, 1].mean()  # the pole's noise depends on the state
    np.testing.assert_allclose(
        ppc["width_per_joint"], 2 * stats.norm.ppf(0.95) * sd.mean(axis=0), rtol=0.06
    )
    binomial = np.sqrt(0.09 / N_POINTS)
    assert np.all(np.abs(np.asarray(ppc["coverage_per_joint"]) - 0.9) < 4 * binomial), ppc
