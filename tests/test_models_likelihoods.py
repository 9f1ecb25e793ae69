"""Likelihoods and priors: the sufficient-statistics form equals the per-sample one, rollout
windows reproduce RK4, Student-t matches scipy, subsampling scales, informative priors are centred
on the nominal robot, and float32 works."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats
from numpyro import handlers
from numpyro.infer.util import log_density

import bayes_nea as bn
from models import ModelData, build_model, rollout_windows
from models.likelihoods import JointMajorNoise


@pytest.fixture(scope="module")
def furuta():
    return bn.get_system("furuta")


@pytest.fixture(scope="module")
def data(furuta):
    q, qd, qdd = bn.sample_states(furuta, 21, 30)
    tau = jax.random.normal(jax.random.key(22), q.shape, q.dtype) * 0.01
    return ModelData(q, qd, qdd, tau)


@pytest.mark.parametrize("name", ["diffnea/viscous/weak", "diffnea/ideal/informative", "nea"])
def test_sufficient_statistics_equal_the_per_sample_likelihood(name, furuta, data):
    model = build_model(name, furuta, likelihood="inverse")
    assert model.linear_exact
    stats = model.prepare(data)
    assert stats.A.shape[0] == furuta.n
    for seed in range(2):
        sample = handlers.seed(model.sample_latent, seed)(jnp.float64)
        full = log_density(model.model, (data,), {}, sample)[0]  # rnea per sample
        fast = log_density(model.model, (stats,), {}, sample)[0]  # regressor statistics
        np.testing.assert_allclose(float(fast), float(full), rtol=1e-9)


def test_non_linear_variants_keep_their_data(furuta, data):
    for name, likelihood in (
        ("diffnea/stribeck/weak", "inverse"),
        ("diffnea/viscous/weak", "forward"),
    ):
        model = build_model(name, furuta, likelihood=likelihood)
        assert not model.linear_exact
        assert model.prepare(data) is data


def test_rollout_windows_reproduce_rk4(furuta):
    """Windows cut from an RK4 trajectory of the nominal robot are predicted exactly, by the
    compiled predictions as by the plain code."""
    dt = 0.01
    tau = 0.002 * jnp.sin(jnp.arange(40.0)[:, None] * jnp.array([[0.3, 0.0]]))
    traj = jax.jit(
        lambda tau: bn.integrate(
            bn.forward_dynamics(furuta), jnp.array([0.1, 2.0]), jnp.zeros(2), tau, dt=dt
        )
    )(tau)
    tau_full = jnp.concatenate([tau, tau[-1:]], axis=0)
    run = ModelData(traj.q, traj.qd, jnp.zeros_like(traj.q), tau_full)
    windows = rollout_windows(run, 5)
    assert windows.q.shape == (8, 6, 2)
    np.testing.assert_array_equal(np.asarray(windows.q[1, 0]), np.asarray(traj.q[5]))
    model = build_model("diffnea/ideal/informative", furuta, likelihood="rollout", dt=dt)
    tr = handlers.trace(handlers.substitute(model.model, data=model.init_sample())).get_trace(
        windows
    )
    np.testing.assert_allclose(
        np.asarray(tr["obs_q"]["fn"].mean), np.asarray(windows.q[:, 1:]), atol=1e-9
    )
    np.testing.assert_allclose(
        np.asarray(tr["obs_qd"]["fn"].mean), np.asarray(windows.qd[:, 1:]), atol=1e-8
    )
    # the windows run through one jax.jit (models.likelihoods.predictions); without any jit
    # (the plain code) the predictions and log densities are the same to rounding
    with jax.disable_jit():
        plain = handlers.trace(handlers.substitute(model.model, data=model.init_sample())).get_trace(
            windows
        )
    for site in ("obs_q", "obs_qd"):
        np.testing.assert_allclose(tr[site]["fn"].mean, plain[site]["fn"].mean, rtol=1e-12, atol=1e-15)
        logp = [float(t[site]["fn"].log_prob(t[site]["value"]).sum()) for t in (tr, plain)]
        np.testing.assert_allclose(logp[0], logp[1], rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="horizon"):
        rollout_windows(run, 0)


@pytest.mark.parametrize("student_df", [3.0, None])
def test_student_t_matches_scipy(furuta, data, student_df):
    """Fixed degrees of freedom, or learned ones (``student_df=None``): a latent per joint whose
    prior is ``log df ~ N(log 10, 1)``, here set to df = (2.5, 40)."""
    model = build_model(
        "diffnea/ideal/weak", furuta, noise="student-t", student_df=student_df, noise_scale=0.5
    )
    sample = model.init_sample()
    df = np.full(furuta.n, student_df or 0.0)
    if student_df is None:
        (site,) = model.noise_sites  # the scale is fixed: the degrees of freedom alone
        assert site.site == "log_df_qdd_z"
        np.testing.assert_allclose(site.prior.loc, np.log(10.0))
        np.testing.assert_allclose(site.prior.scale, 1.0)
        df = np.array([2.5, 40.0])
        sample[site.site] = jnp.asarray((np.log(df) - site.prior.loc) / site.prior.scale)
        np.testing.assert_allclose(model.physical(sample)["df_qdd"], df, rtol=1e-12)
    tr = handlers.trace(handlers.substitute(model.model, data=sample)).get_trace(data)
    pred = jax.vmap(model.qdd_fn(sample))(data.q, data.qd, data.tau)
    expected = scipy.stats.t.logpdf(np.asarray(data.qdd), df, np.asarray(pred), 0.5).sum()
    got = tr["obs_qdd"]["fn"].log_prob(data.qdd).sum()
    np.testing.assert_allclose(float(got), expected, rtol=1e-10)


@pytest.mark.parametrize("df", [None, 3.0, (2.5, 40.0)])
def test_joint_major_noise_matches_scipy(df):
    """The identifiable forward likelihood's noise on (n, N) prediction rows: per-sample log
    densities (summed over joints) as scipy's on the (N, n) values; draws are (N, n) with the
    rows' means and the scales' spread."""
    rng = np.random.default_rng(0)
    rows, scale = rng.standard_normal((2, 40)), np.array([0.3, 2.0])
    value = rng.standard_normal((40, 2))
    noise = JointMajorNoise(jnp.asarray(rows), jnp.asarray(scale), None if df is None else jnp.asarray(df))
    assert noise.batch_shape == (40,) and noise.event_shape == (2,)
    ref = scipy.stats.norm if df is None else scipy.stats.t(np.asarray(df))  # one df per joint
    expected = ref.logpdf((value - rows.T) / scale).sum(axis=1) - np.log(scale).sum()
    np.testing.assert_allclose(np.asarray(noise.log_prob(jnp.asarray(value))), expected, rtol=1e-12)
    draws = np.asarray(noise.sample(jax.random.key(1), (4000,)))
    assert draws.shape == (4000, 40, 2)
    standard_error = scale * ref.std() / np.sqrt(draws.shape[0])
    assert np.all(np.abs(draws.mean(0) - rows.T) < 5 * standard_error)
    spread = np.median(np.abs(draws - rows.T), axis=(0, 1))  # median absolute deviation
    np.testing.assert_allclose(spread, scale * ref.ppf(0.75), rtol=0.05)


def test_subsampling_scales_the_likelihood(furuta, data):
    model = build_model("diffnea/ideal/weak", furuta)
    tr = handlers.trace(handlers.seed(model.model, 0)).get_trace(data, subsample_size=7)
    assert tr["obs_qdd"]["value"].shape == (7, 2)
    assert tr["obs_qdd"]["scale"] == pytest.approx(30 / 7)


def test_informative_priors_are_centred_on_the_nominal_robot(furuta, data):
    q, qd, tau = data.q[:5], data.qd[:5], data.tau[:5]
    reference = jax.vmap(lambda a, b, t: bn.aba(furuta, a, b, t))(q, qd, tau)
    for name in ("diffnea/ideal/informative", "nokin-diffnea/ideal/informative", "nea"):
        model = build_model(name, furuta)
        sample = model.init_sample()
        if name == "diffnea/ideal/informative":  # same frames: theta itself
            np.testing.assert_allclose(
                np.asarray(model.physical(sample)["theta"]), furuta.nominal.theta, atol=1e-12
            )
        # no-Kin works in rotated (z-axis) frames: compare the dynamics
        qdd = jax.vmap(model.qdd_fn(sample))(q, qd, tau)
        np.testing.assert_allclose(np.asarray(qdd), np.asarray(reference), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize(
    "name", ["nokin-diffnea/stribeck/weak", "diffnea/nn-friction/weak", "ffnn", "nea"]
)
def test_float32_log_density(name, furuta, data):
    data32 = ModelData(*(x.astype(jnp.float32) for x in data))
    model = build_model(name, furuta)
    sample = model.init_sample(dtype=jnp.float32)
    density = log_density(model.model, (data32,), {}, sample)[0]
    assert density.dtype == jnp.float32 and np.isfinite(float(density))
    qdd = model.qdd_fn(sample)(data32.q[0], data32.qd[0], data32.tau[0])
    assert qdd.dtype == jnp.float32





@pytest.fixture(scope="module")
def effort_model(furuta):
    """``diffnea/ideal/informative`` with noise on the effort at its prior mean (the nominal
    robot), noise scales sigma_qdd = (0.3, 0.7), sigma_tau = (0.01, 0.002)."""
    model = build_model("diffnea/ideal/informative", furuta, likelihood="forward-effort")
    assert [s.name for s in model.noise_sites] == ["log_sigma_qdd", "log_sigma_tau"]
    sample = model.init_sample()
    for site, value in zip(model.noise_sites, ((0.3, 0.7), (0.01, 0.002)), strict=True):
        sample[site.site] = jnp.asarray((np.log(value) - site.prior.loc) / site.prior.scale)
    return model, sample


def _pinocchio_effort_moments(furuta, q, qd, tau, s_qdd, s_tau):
    """Mean (N, n) and covariance (N, n, n) of ``M^-1 (tau + w - h) + r`` by Pinocchio's ABA and
    CRBA of the nominal robot; also ``M^-1`` (N, n, n)."""
    import pinocchio as pin
    from conftest import system_reference

    ref = system_reference("furuta")
    means, inverses = [], []
    for a, b, c in zip(*(np.asarray(x, np.float64) for x in (q, qd, tau)), strict=True):
        means.append(np.array(pin.aba(ref.model, ref.data, ref.q_pin(a), b, c)))
        inverses.append(np.linalg.inv(ref.mass_matrix(a)))
    Minv = np.array(inverses)
    return np.array(means), _effort_covariance(Minv, s_qdd, s_tau), Minv


def _effort_covariance(Minv, s_qdd, s_tau):
    return Minv @ np.diag(np.square(s_tau)) @ np.swapaxes(Minv, 1, 2) + np.diag(np.square(s_qdd))


def test_effort_noise_matches_scipy_and_pinocchio(furuta, data, effort_model):
    """``likelihood="forward-effort"``: each sample's log density is scipy's multivariate
    Normal around Pinocchio's ABA with covariance ``M^-1 diag(sigma_tau^2) M^-T +
    diag(sigma_qdd^2)``, ``M`` Pinocchio's CRBA."""
    model, sample = effort_model
    np.testing.assert_allclose(model.physical(sample)["sigma_tau"], (0.01, 0.002), rtol=1e-12)
    tr = handlers.trace(handlers.substitute(model.model, data=sample)).get_trace(data)
    got = np.asarray(tr["obs_qdd"]["fn"].log_prob(data.qdd))
    mean, cov, _ = _pinocchio_effort_moments(
        furuta, data.q, data.qd, data.tau, (0.3, 0.7), (0.01, 0.002)
    )
    expected = [scipy.stats.multivariate_normal(m, c).logpdf(v) for m, c, v in zip(
        mean, cov, np.asarray(data.qdd), strict=True
    )]
    np.testing.assert_allclose(got, expected, rtol=1e-9)
    # the acceleration noise depends on the state: its sd differs between samples
    sd = np.sqrt(np.diagonal(cov, axis1=1, axis2=2))
    assert np.ptp(sd[:, 0]) > 0.1 * sd[:, 0].mean()


def test_effort_noise_draws_have_the_effort_covariance(furuta, data, effort_model):
    """``ForwardEffort.sample_noisy`` (the posterior-predictive draws of ``heldout_ppc``): around
    the prediction with the covariance of the Pinocchio-built closed form, at two states."""
    model, sample = effort_model
    q = jnp.repeat(data.q[:2], 20000, axis=0)
    pred = jnp.zeros_like(q)
    draws = np.asarray(
        jax.jit(lambda k: model.likelihood.sample_noisy(model, sample, q, pred, k))(
            jax.random.key(3)
        )
    ).reshape(2, 20000, furuta.n)
    _, cov, _ = _pinocchio_effort_moments(
        furuta, data.q[:2], data.qd[:2], data.tau[:2], (0.3, 0.7), (0.01, 0.002)
    )
    for d, c in zip(draws, cov, strict=True):
        assert np.all(np.abs(d.mean(0)) < 5 * np.sqrt(np.diag(c) / 20000))
        np.testing.assert_allclose(np.cov(d.T), c, rtol=0.05, atol=0.05 * np.sqrt(np.outer(*[np.diag(c)] * 2)).max())


def test_effort_noise_scales_are_recovered(furuta):
    """Data made by the plant ``qdd = M^-1 (tau + w - h) + r`` (Pinocchio, known sigma_tau,
    sigma_qdd, 3,000 samples): the noise scales' conditional MAP at the true rigid body is the
    optimum that scipy's Nelder-Mead finds for the Pinocchio-built Gaussian likelihood plus the
    whitened priors, and recovers both scales within 20 % (three data seeds: 0.86-1.11 of the
    truth)."""
    from scipy.optimize import minimize

    from inference.polish import polish_map_batched

    model = build_model("diffnea/ideal/informative", furuta, likelihood="forward-effort")
    q, qd, _ = bn.sample_states(furuta, 5, 3000)
    rng = np.random.default_rng(5)
    tau = rng.normal(0, 0.02, q.shape) * np.array([1.0, 0.0])
    s_qdd, s_tau = np.array([0.2, 0.3]), np.array([1e-4, 5e-5])  # comparable parts (M^-1 ~ 1e3)
    mean, cov, Minv = _pinocchio_effort_moments(furuta, q, qd, tau, s_qdd, s_tau)
    noise = np.einsum("kij,kj->ki", np.linalg.cholesky(cov), rng.standard_normal(q.shape))
    qdd = mean + noise
    data = ModelData(q, qd, jnp.asarray(qdd), jnp.asarray(tau))
    start = jax.tree.map(lambda x: x[None], model.init_sample())
    sites = [s.site for s in model.noise_sites]
    point, (report,) = polish_map_batched(
        model, jax.tree.map(lambda x: x[None], data), start, sites=sites, max_iter=100
    )
    assert report.converged
    phys = model.physical(jax.tree.map(lambda x: x[0], point))
    np.testing.assert_allclose(phys["sigma_qdd"], s_qdd, rtol=0.2)
    np.testing.assert_allclose(phys["sigma_tau"], s_tau, rtol=0.2)

    locs = np.concatenate([s.prior.loc for s in model.noise_sites])
    scales = np.concatenate([s.prior.scale for s in model.noise_sites])

    def energy(z):  # -log p(z, data) in the whitened coordinates
        sig = np.exp(locs + scales * z)
        c = _effort_covariance(Minv, sig[:2], sig[2:])
        r = qdd - mean
        quad = np.einsum("ki,ki->k", r, np.linalg.solve(c, r[..., None])[..., 0])
        logpdf = -0.5 * (quad + np.linalg.slogdet(c)[1] + 2 * np.log(2 * np.pi))
        return -logpdf.sum() - scipy.stats.norm.logpdf(z).sum()

    z0 = (np.log(np.concatenate([s_qdd, s_tau])) - locs) / scales
    opt = minimize(energy, z0, method="Nelder-Mead", options={"xatol": 1e-8, "fatol": 1e-10})
    got = np.concatenate([np.asarray(point[s][0]) for s in sites])
    np.testing.assert_allclose(got, opt.x, atol=1e-4)


def test_effort_noise_is_refused_where_it_does_not_apply(furuta):
    for options, match in (
        ({"noise": "student-t"}, "Normal noise"),
        ({"noise_scale": 0.1}, "latent scales"),
    ):
        with pytest.raises(ValueError, match=match):
            build_model("diffnea/viscous/weak", furuta, likelihood="forward-effort", **options)
    with pytest.raises(ValueError, match="mass matrix"):
        build_model("ffnn", furuta, likelihood="forward-effort")
    with pytest.raises(ValueError, match="likelihoods"):
        build_model(
            "diffnea/viscous/weak", furuta, likelihood="forward-effort", geometry="identifiable"
        )
