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



