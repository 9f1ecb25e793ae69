"""NUTS against the closed-form posterior of a conjugate linear-Gaussian model (Bishop eq. 3.50)."""

import numpy as np
import pytest
from scipy import stats

import bayes_nea as bn
from inference import (
    fit_laplace,
    fit_nuts,
    fit_svi,
    laplace_inverse_mass,
    load_result,
    save_result,
)
from inference.reference import linear_gaussian_model, simulate

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)

NOISE = 0.1


@pytest.fixture(scope="module")
def problem():
    model = linear_gaussian_model(bn.get_system("cartpole"), noise_sd=NOISE)
    data, _ = simulate(model, key=7, n_samples=30)
    mean, cov = model.posterior(data)
    return model, data, mean, cov


@pytest.fixture(scope="module")
def nuts_fit(problem):
    model, data, _, _ = problem
    return fit_nuts(
        model,
        data,
        key=0,
        num_warmup=250,
        num_samples=250,
        num_chains=2,
        progress=False,
        num_predictive=40,
    )


def _w(samples):
    return np.concatenate(
        [np.asarray(samples["beta"]), np.asarray(samples["actuator/viscous"])], -1
    )


def test_posterior_matches_closed_form(problem, nuts_fit):
    _, _, mean, cov = problem
    sd = np.sqrt(np.diag(cov))
    w = _w(nuts_fit.posterior_samples())
    assert w.shape == (500, mean.size)
    # ESS >= 200 per coordinate (checked below): MC error of the mean <= 0.07 sd, of the sd ~5%.
    np.testing.assert_array_less(np.abs(w.mean(0) - mean) / sd, 0.3)
    np.testing.assert_allclose(w.std(0), sd, rtol=0.2)


def test_diagnostics_reported(nuts_fit):
    d = nuts_fit.diagnostics()
    assert d["divergences"] == 0
    assert nuts_fit.attrs["settings"]["metric"] == "adapt"  # the default without an init
    assert d["rhat_max"] < 1.05
    assert d["ess_bulk_min"] > 100
    stats_ = nuts_fit.idata["sample_stats"]
    for name in (
        "diverging",
        "tree_depth",
        "energy",
        "n_steps",
        "acceptance_rate",
        "step_size",
        "lp",
    ):
        assert stats_[name].shape == (2, 250), name
    # a tree of depth d holds at most 2^d - 1 leapfrog steps
    assert np.all(stats_["n_steps"].values <= 2 ** stats_["tree_depth"].values - 1)
    assert 0.5 < float(stats_["acceptance_rate"].mean()) <= 1.0
    assert nuts_fit.attrs["timing"]["ess_bulk_per_s"] > 0


def test_groups_and_physical_quantities(problem, nuts_fit):
    model, data, _, _ = problem
    idata = nuts_fit.idata
    post = idata["posterior"]
    beta = post["beta"].values
    # base parameters of the reported theta = E beta are beta again (B E = 1, Gautier 1991)
    np.testing.assert_allclose(post["base_parameters"].values, beta, atol=1e-12)
    np.testing.assert_allclose(post["mass"].values, post["theta"].values[..., 0])
    np.testing.assert_allclose(post["viscous"].values, post["actuator.viscous"].values)
    assert list(post["theta"].coords["joint"].values) == ["cart", "pole"]
    # pointwise log likelihood against scipy's normal density on the features
    ll = idata["log_likelihood"]["obs_tau"].values
    assert ll.shape == (2, 250, 30)
    F = np.asarray(model.features(data.q, data.qd, data.qdd))
    w = _w({"beta": beta[1, 7], "actuator/viscous": post["actuator.viscous"].values[1, 7]})
    ref = stats.norm.logpdf(np.asarray(data.tau), F @ w, NOISE).sum(-1)
    np.testing.assert_allclose(ll[1, 7], ref, rtol=1e-10)
    np.testing.assert_allclose(idata["observed_data"]["obs_tau"].values, np.asarray(data.tau))
    pp = idata["posterior_predictive"]["obs_tau"]
    assert pp.shape == (2, 20, 30, 2)
    # predictive residuals have the noise sd (+ small parameter spread): 1200 values, ~2% error
    resid = pp.values - np.asarray(data.tau)[None, None]
    assert 0.08 < resid.std() < 0.2


def test_extend_keeps_draws_and_adds_new(problem, nuts_fit, tmp_path):
    model, data, mean, cov = problem
    path = tmp_path / "nuts.nc"
    save_result(nuts_fit, path)
    loaded = load_result(path)
    more = fit_nuts(
        model,
        data,
        key=1,
        num_samples=100,
        num_chains=2,
        extend=loaded,
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )
    old = nuts_fit.posterior_samples(group_by_chain=True)["beta"]
    new = more.posterior_samples(group_by_chain=True)["beta"]
    assert new.shape == (2, 350, old.shape[-1])
    np.testing.assert_array_equal(new[:, :250], old)
    # new draws come from the same posterior without new warm-up
    w_new = np.asarray(new[:, 250:]).reshape(-1, old.shape[-1])
    b = old.shape[-1]
    np.testing.assert_array_less(np.abs(w_new.mean(0) - mean[:b]) / np.sqrt(np.diag(cov))[:b], 0.5)
    assert more.idata["sample_stats"]["diverging"].shape == (2, 350)
    assert more.attrs["settings"]["num_samples"] == 350


def test_extending_one_chain_continues_that_chain(problem):
    """A single-chain run (stored with a chain axis) extended by 30 draws gives exactly the
    draws of one run 30 draws longer: the stored state is NumPyro's, and nothing is re-warmed."""
    model, data, _, _ = problem
    options = dict(key=0, num_warmup=100, num_chains=1, progress=False, num_predictive=0,
                   log_likelihood=False)
    longer = fit_nuts(model, data, num_samples=60, **options)
    shorter = fit_nuts(model, data, num_samples=30, **options)
    more = fit_nuts(model, data, **{**options, "key": 1}, extend=shorter, num_samples=30)
    np.testing.assert_array_equal(
        more.posterior_samples(group_by_chain=True)["beta"],
        longer.posterior_samples(group_by_chain=True)["beta"],
    )


def test_extend_rejects_other_data(problem, nuts_fit):
    model, data, _, _ = problem
    other = data._replace(tau=data.tau + 1.0)
    with pytest.raises(ValueError, match="data differ"):
        fit_nuts(model, other, key=0, num_samples=10, extend=nuts_fit, progress=False)
    with pytest.raises(ValueError, match="chains"):
        fit_nuts(model, data, key=0, num_samples=10, num_chains=3, extend=nuts_fit, progress=False)


def _numpyro_order(cov, n_base):
    """Covariance of [beta; d] (closed form's order) in NumPyro's flattening order (sorted site
    names: actuator/viscous, beta)."""
    perm = np.r_[n_base : cov.shape[0], 0:n_base]
    return cov[np.ix_(perm, perm)]


def test_laplace_metric_is_the_closed_form_covariance(problem):
    model, data, mean, cov = problem
    b = model.n_base
    point = {"beta": mean[:b], "actuator/viscous": mean[b:]}
    cov_sorted = _numpyro_order(cov, b)
    inverse_mass = np.asarray(laplace_inverse_mass(model, data, point))
    # Gaussian posterior: the inverse Hessian of -log p is its covariance (Bishop eq. 3.54)
    np.testing.assert_allclose(inverse_mass, cov_sorted, rtol=1e-7, atol=1e-12 * np.abs(cov).max())


def test_polish_and_laplace_share_one_compiled_hessian(problem):
    """``polish_map`` then ``laplace_inverse_mass`` on one model compile one Hessian program (the
    second call finds the first's); a model that cannot be hashed gets a program of its own with
    the same Hessian, the closed-form posterior precision."""
    from numpyro.infer.util import unconstrain_fn

    from inference.laplace import _shared_hessian, potential_hessian
    from inference.polish import polish_map

    _, data, mean, cov = problem
    model = linear_gaussian_model(bn.get_system("cartpole"), noise_sd=NOISE)  # no program yet
    b = model.n_base
    start = {"beta": mean[:b] + 0.1, "actuator/viscous": mean[b:] - 0.1}
    programs = _shared_hessian._cache_size()
    point, report = polish_map(model, data, start)
    assert report.converged, report.message
    assert _shared_hessian._cache_size() == programs + 1
    inverse_mass = np.asarray(laplace_inverse_mass(model, data, point))
    assert _shared_hessian._cache_size() == programs + 1
    np.testing.assert_allclose(inverse_mass, _numpyro_order(cov, b), rtol=1e-7, atol=1e-14)

    class Unhashable:
        __hash__ = None

        def model(self, data):
            return model.model(data)

    H = potential_hessian(Unhashable(), data, unconstrain_fn(model.model, (data,), {}, point))
    assert _shared_hessian._cache_size() == programs + 1
    precision = np.linalg.inv(_numpyro_order(cov, b))
    np.testing.assert_allclose(
        np.asarray(H), precision, rtol=1e-7, atol=1e-9 * np.abs(precision).max()
    )


@pytest.fixture(scope="module")
def svi_map(problem):
    model, data, _, _ = problem
    return fit_svi(
        model,
        data,
        key=0,
        steps=1000,
        learning_rate=0.02,
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )


def test_init_from_svi_with_fixed_metrics(problem, svi_map):
    model, data, mean, cov = problem
    b = model.n_base
    cov_sorted = _numpyro_order(cov, b)
    options = dict(
        key=4,
        num_warmup=100,
        num_samples=300,
        num_chains=1,
        init=svi_map,
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )
    laplace = fit_nuts(model, data, **options)  # the default metric with an init
    given = fit_nuts(model, data, metric=cov_sorted, **options)
    assert laplace.attrs["settings"]["metric"] == "laplace"
    assert given.attrs["settings"]["metric"] == "given"
    for fit in (laplace, given):
        assert fit.attrs["settings"]["dense_mass"] is True
        w = _w(fit.posterior_samples())
        np.testing.assert_array_less(np.abs(w.mean(0) - mean) / np.sqrt(np.diag(cov)), 0.4)
        np.testing.assert_allclose(w.std(0), np.sqrt(np.diag(cov)), rtol=0.3)
        # the exact covariance as metric whitens the posterior: short trajectories (a standard
        # normal needs ~3 leapfrog steps per draw at the adapted step size)
        assert float(fit.idata["sample_stats"]["n_steps"].mean()) < 8
        assert fit.diagnostics()["divergences"] == 0


@pytest.mark.parametrize(
    ("metric", "init", "message"),
    [
        ("identity", True, "unknown metric"),
        ("laplace", False, "needs init"),
        (np.ones(3), True, "expected shape"),
        (-np.ones(6), True, "must be positive"),
        (np.diag(np.r_[np.ones(5), -1.0]), True, "not positive definite"),
        (np.triu(np.ones((6, 6))), True, "not symmetric"),
    ],
)
def test_bad_metric_raise(problem, metric, init, message):
    model, data, mean, _ = problem
    b = model.n_base
    assert mean.size == 6  # the cart-pole: 4 base parameters + 2 viscous coefficients
    start = {"beta": mean[:b], "actuator/viscous": mean[b:]} if init else None
    with pytest.raises(ValueError, match=message):
        fit_nuts(model, data, key=0, num_samples=10, metric=metric, init=start, progress=False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"target_accept": 1.5}, "target_accept must be 'auto' or in"),
        ({"target_accept": "high"}, "target_accept must be 'auto' or in"),
        ({"num_chains": 0}, "num_chains must be > 0"),
        ({"num_samples": 2.5}, "num_samples must be an integer"),
        ({"chain_method": "vectorized"}, "unknown chain_method"),
        ({"key": "seed"}, "key must be"),
    ],
)
def test_bad_options_raise(problem, options, message):
    model, data, _, _ = problem
    with pytest.raises(ValueError, match=message):
        fit_nuts(model, data, **{"key": 0, "num_samples": 10, "progress": False, **options})


def test_nan_data_raise(problem):
    model, data, _, _ = problem
    q = np.array(data.q)
    q[3, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite .* first in sample 3"):
        fit_nuts(model, data._replace(q=q), key=0, progress=False)


def test_laplace_fit_draws_the_closed_form_posterior(problem):
    """On a Gaussian posterior the Laplace fit at the MAP is exact: its draws' mean and
    covariance match the closed form (Bishop eq. 3.50-3.51) within Monte Carlo error, and a
    point away from the MAP is not taken for it (the draws centre where they were told)."""
    model, data, mean, cov = problem
    b = model.n_base
    fit = fit_laplace(
        model,
        data,
        init={"beta": mean[:b], "actuator/viscous": mean[b:]},
        key=3,
        num_samples=2000,
        num_chains=2,
        num_predictive=0,
        log_likelihood=False,
    )
    assert fit.method == "laplace" and fit.num_chains == 2 and fit.num_draws == 2000
    assert fit.attrs["laplace"]["hessian_eig_min"] > 0
    s = fit.posterior_samples()
    w = np.concatenate([np.asarray(s["beta"]), np.asarray(s["actuator/viscous"])], axis=1)
    sd = np.sqrt(np.diag(cov))
    z = (w.mean(axis=0) - mean) / (sd / np.sqrt(w.shape[0]))
    assert np.max(np.abs(z)) < 4.5  # every coordinate's mean within 4.5 Monte Carlo sds
    np.testing.assert_allclose(np.std(w, axis=0), sd, rtol=0.06)
    corr = np.corrcoef(w.T)
    np.testing.assert_allclose(corr, cov / np.outer(sd, sd), atol=0.06)
    assert fit.attrs["laplace"]["reliable"] and fit.attrs["laplace"]["distinct_draws"] == 4000
    shifted = {"beta": mean[:b] + 5 * sd[:b], "actuator/viscous": mean[b:]}
    options = dict(key=3, num_samples=500, num_chains=1, num_predictive=0, log_likelihood=False)
    plain = fit_laplace(model, data, init=shifted, importance="none", **options)
    beta = np.asarray(plain.posterior_samples()["beta"])
    assert np.all(np.abs(beta.mean(axis=0) - mean[:b] - 5 * sd[:b]) < 0.5 * sd[:b])
    # importance weights see that N(init, H^-1) misses the posterior: flagged, not trusted
    corrected = fit_laplace(model, data, init=shifted, importance="psis", **options)
    assert corrected.attrs["laplace"]["pareto_k"] > corrected.attrs["laplace"]["pareto_k_max"]
    assert not corrected.attrs["laplace"]["reliable"] and corrected.attrs["laplace"]["resampled"]
    # "auto": the same diagnostics, but the unreliable weights resample nothing: the draws are
    # the proposal's (the "none" draws of the same key); at the MAP it resamples as "psis"
    auto = fit_laplace(model, data, init=shifted, importance="auto", **options)
    assert auto.attrs["laplace"]["pareto_k"] == corrected.attrs["laplace"]["pareto_k"]
    assert not auto.attrs["laplace"]["resampled"]
    np.testing.assert_array_equal(np.asarray(auto.posterior_samples()["beta"]), beta)
    from inference.laplace import _keep_finite

    kept = _keep_finite(np.array([0.0, -np.inf, 1.0, 2.0, -np.inf, 0.5]))
    assert kept.size == 6 and set(kept) == {0, 2, 3, 5}  # every finite draw, no other
    at_map = {"beta": mean[:b], "actuator/viscous": mean[b:]}
    auto = fit_laplace(model, data, init=at_map, importance="auto", **options)
    psis = fit_laplace(model, data, init=at_map, importance="psis", **options)
    assert auto.attrs["laplace"]["reliable"] and auto.attrs["laplace"]["resampled"]
    np.testing.assert_array_equal(
        np.asarray(auto.posterior_samples()["beta"]), np.asarray(psis.posterior_samples()["beta"])
    )


def _with_extra_site(model, name: str, prior, log_factor=None):
    """``model`` with one more scalar site ``name`` drawn from ``prior``, and ``log_factor(x)``
    added to its log density where given."""
    import dataclasses

    import numpyro

    @dataclasses.dataclass(frozen=True, eq=False)
    class WithSite(type(model)):
        def model(self, data, *, subsample_size=None):
            x = numpyro.sample(name, prior)
            if log_factor is not None:
                numpyro.factor("extra_" + name, log_factor(x))
            super().model(data, subsample_size=subsample_size)

    return WithSite(**{f.name: getattr(model, f.name) for f in dataclasses.fields(model)})


def test_laplace_importance_correction_recovers_a_skewed_posterior(problem):
    """A site whose posterior is Gamma(3, 1) (prior only) is lognormal under the Laplace
    approximation in NumPyro's log space (mean 3 e^(1/6) = 3.54 at the log-space mode 3);
    Pareto-smoothed importance resampling recovers the Gamma's mean 3 and sd sqrt(3)."""
    import numpyro.distributions as dist

    model, data, mean, _ = problem
    skewed = _with_extra_site(model, "rate", dist.Gamma(3.0, 1.0))
    b = model.n_base
    init = {"beta": mean[:b], "actuator/viscous": mean[b:], "rate": 3.0}
    options = dict(key=3, num_samples=2000, num_chains=2, num_predictive=0, log_likelihood=False)
    plain = np.asarray(
        fit_laplace(skewed, data, init=init, importance="none", **options).posterior_samples()[
            "rate"
        ]
    )
    fit = fit_laplace(skewed, data, init=init, **options)
    rate = np.asarray(fit.posterior_samples()["rate"])
    assert abs(plain.mean() - 3 * np.exp(1 / 6)) < 0.15  # the uncorrected Laplace draws
    assert abs(rate.mean() - 3.0) < 0.15 and abs(rate.std() - np.sqrt(3.0)) < 0.15
    report = fit.attrs["laplace"]
    assert report["reliable"] and 0.3 < report["pareto_k"] < report["pareto_k_max"]
    assert 1000 < report["importance_ess"] < 4000 and fit.attrs["settings"]["importance"] == "auto"
    assert report["resampled"]


def test_laplace_auto_resamples_where_the_hessian_is_indefinite(problem):
    """At a point that is no mode (a site with log density x^2 - x^4 - x^2/200, double-welled,
    started at its saddle x = 0) the Hessian is indefinite and the floored covariance says nothing:
    ``importance="auto"`` resamples there as ``"psis"`` does, even with an unreliable k."""
    import numpyro.distributions as dist

    model, data, mean, _ = problem
    saddle = _with_extra_site(model, "x", dist.Normal(0.0, 10.0), lambda x: x**2 - x**4)
    b = model.n_base
    init = {"beta": mean[:b], "actuator/viscous": mean[b:], "x": 0.0}
    options = dict(key=2, num_samples=500, num_chains=1, num_predictive=0, log_likelihood=False)
    fit = fit_laplace(saddle, data, init=init, proposal="gaussian", **options)
    report = fit.attrs["laplace"]
    assert report["hessian_eig_min"] < 0 and not report["reliable"] and report["resampled"]
    psis = fit_laplace(saddle, data, init=init, proposal="gaussian", importance="psis", **options)
    np.testing.assert_array_equal(
        np.asarray(fit.posterior_samples()["x"]), np.asarray(psis.posterior_samples()["x"])
    )


def _quartic_moments(a: float, b: float) -> tuple[float, float]:
    """Variance and fourth moment of the density proportional to exp(-(a t^2 + b t^4)) by
    quadrature (the closed form involves Bessel functions)."""
    t = np.linspace(-20, 20, 400_001)
    p = np.exp(-(a * t**2 + b * t**4))
    p /= np.trapezoid(p, t)
    return float(np.trapezoid(t**2 * p, t)), float(np.trapezoid(t**4 * p, t))


def test_slice_proposal_draws_its_own_density():
    """A Gaussian and a quartic axis: the draws' second and fourth moments match quadrature of
    exp(-(a t^2 + b t^4)), and the log density the importance weights use integrates to 1."""
    import jax

    from inference.laplace import SliceProposal

    coefficients = np.array([[0.5, 0.0], [0.3, 40.0]])
    slices = SliceProposal.from_coefficients(coefficients)
    t = slices.sample(jax.random.PRNGKey(0), 200_000)
    np.testing.assert_allclose(np.var(t[:, 0]), 1.0, rtol=0.02)
    var, fourth = _quartic_moments(0.3, 40.0)
    np.testing.assert_allclose(np.var(t[:, 1]), var, rtol=0.02)
    np.testing.assert_allclose(np.mean(t[:, 1] ** 4), fourth, rtol=0.04)
    # the variances the NUTS metric takes from the slices: the draws' own, exactly
    np.testing.assert_allclose(slices.variances(), [1.0, var], rtol=2e-3)
    grid = np.linspace(-3, 3, 60_001)
    points = np.stack([np.zeros_like(grid), grid], axis=1)
    # the quartic axis's density, the Gaussian axis held at 0 (its density there 1 / sqrt(2 pi))
    density = np.exp(slices.log_density(points)) * np.sqrt(2 * np.pi)
    np.testing.assert_allclose(np.trapezoid(density, grid), 1.0, rtol=1e-3)
    assert np.isneginf(slices.log_density(np.array([[0.0, 50.0]]))[0])  # outside the support


def test_laplace_slices_recover_a_fourth_order_posterior(problem):
    """A site whose log density is -x^2/2 - c x^4 (a direction the data constrain only at
    fourth order, as learned placements at a symmetric MAP): the Hessian there sees only the
    prior (variance 1 against the posterior's 0.0075), so the Gaussian proposal wastes its draws
    (importance ESS 13 % of them in theory: E[w]^2 / E[w^2] with w = exp(-c x^4); over many
    such axes the fractions multiply); the slice proposal fits (a, b) = (1/2, c) exactly from
    the log joint and recovers the posterior's variance (quadrature) with nearly equal
    weights."""
    import numpyro.distributions as dist

    model, data, mean, cov = problem
    c = 2000.0
    quartic = _with_extra_site(model, "x", dist.Normal(0.0, 1.0), lambda x: -c * x**4)
    b = model.n_base
    init = {"beta": mean[:b], "actuator/viscous": mean[b:], "x": 0.0}
    options = dict(key=5, num_samples=1000, num_chains=2, num_predictive=0, log_likelihood=False)
    gaussian = fit_laplace(quartic, data, init=init, proposal="gaussian", **options)
    assert 0.08 < gaussian.attrs["laplace"]["importance_ess"] / 2000 < 0.2
    fit = fit_laplace(quartic, data, init=init, **options)
    report = fit.attrs["laplace"]
    assert report["reliable"] and report["nonquadratic_axes"] == 1
    assert report["importance_ess"] > 0.95 * 2000
    coefficients = np.asarray(report["slice_coefficients"])
    quartic_axis = int(np.argmax(coefficients[:, 1]))
    np.testing.assert_allclose(coefficients[quartic_axis], [0.5, c], rtol=1e-6)
    others = np.delete(coefficients, quartic_axis, axis=0)
    np.testing.assert_allclose(others, np.tile([0.5, 0.0], (len(others), 1)), atol=1e-6)
    x = np.asarray(fit.posterior_samples()["x"])
    var, _ = _quartic_moments(0.5, c)
    np.testing.assert_allclose(np.var(x), var, rtol=0.12)
    beta = np.asarray(fit.posterior_samples()["beta"])
    np.testing.assert_allclose(np.std(beta, axis=0), np.sqrt(np.diag(cov))[:b], rtol=0.12)
    # the NUTS metric with slices: along x (the last site in sorted order, independent of the
    # others) the slice's variance instead of the prior's 1; the other block unchanged
    from inference import laplace_inverse_mass

    plain = np.asarray(laplace_inverse_mass(quartic, data, init))
    shaped = np.asarray(laplace_inverse_mass(quartic, data, init, slices=True))
    assert plain[-1, -1] == pytest.approx(1.0, rel=1e-8)
    assert shaped[-1, -1] == pytest.approx(var, rel=2e-3)
    np.testing.assert_allclose(shaped[:-1, :-1], plain[:-1, :-1], rtol=1e-8)
    assert np.abs(shaped[-1, :-1]).max() < 1e-8 * np.abs(plain).max()


BANANA_BEND, BANANA_SD = 1.0, 0.1


def _banana_moments() -> dict:
    """``E y^2``, ``E x``, ``E x^2`` of ``p(y, x) ~ exp(-y^2/2 - x^2/2 - (x - k y^2)^2 / (2 s^2))``
    (``k`` = BANANA_BEND, ``s`` = BANANA_SD) by quadrature on a grid."""
    y = np.linspace(-4.0, 4.0, 1601)[:, None]
    x = np.linspace(-1.0, 4.0, 2001)[None, :]
    log_p = -(y**2) / 2 - x**2 / 2 - (x - BANANA_BEND * y**2) ** 2 / (2 * BANANA_SD**2)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    return {"y2": float((p * y**2).sum()), "x": float((p * x).sum()), "x2": float((p * x**2).sum())}


@pytest.fixture(scope="module")
def banana(problem):
    """The linear-Gaussian model with a site ``banana`` = (y, x), prior N(0, I), and the factor
    ``-(x - k y^2)^2 / (2 s^2)``: at the mode (0, 0) the slice along y rises as
    ``y^2 / 2 + k^2 y^4 / (2 s^2)`` (fourth order) while the ridge ``x = k y^2`` bends."""
    import numpyro.distributions as dist

    model, data, mean, _ = problem
    site = _with_extra_site(
        model,
        "banana",
        dist.Normal(0.0, 1.0).expand([2]).to_event(1),
        lambda v: -((v[1] - BANANA_BEND * v[0] ** 2) ** 2) / (2 * BANANA_SD**2),
    )
    b = model.n_base
    init = {"beta": mean[:b], "actuator/viscous": mean[b:], "banana": np.zeros(2)}
    return site, data, init


def test_curved_map_follows_a_bent_ridge(banana):
    """``fit_curved_map`` finds the one fourth-order axis (y), bends the Laplace axes onto the
    exact ridge ``x = k' y^2`` (``k' = k / (1 + s^2)``: the ridge of the prior times the factor),
    leaves the other sites alone, and fits the rise along the bend in closed form:
    ``y^2 / 2 + (k'^2 / 2 + (k' - k)^2 / (2 s^2)) y^4``. The map's inverse and its log-Jacobian
    (against the determinant of its autodiff Jacobian) hold at random points."""
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree
    from numpyro.infer.util import unconstrain_fn

    from inference.curved import fit_curved_map

    model, data, init = banana
    curved, record = fit_curved_map(model, data, init)
    assert record["quartic"] == curved.quartic.tolist() and curved.quartic.size == 1
    q = int(curved.quartic[0])
    flat, unravel = ravel_pytree(unconstrain_fn(model.model, (data,), {}, init))
    # sites flatten in sorted order: "actuator/viscous", "banana" (y, x), "beta"
    d_visc = np.size(init["actuator/viscous"])
    iy, ix = d_visc, d_visc + 1
    k_ridge = BANANA_BEND / (1 + BANANA_SD**2)
    for tau in (0.3, 1.0, 2.5):
        u = np.zeros(flat.size)
        u[q] = tau
        z = curved.centre + curved.axes @ np.asarray(curved.bend(jnp.asarray(u)))
        y, x = z[iy] - curved.centre[iy], z[ix] - curved.centre[ix]
        assert abs(y) == pytest.approx(tau, rel=1e-9)  # the y axis: Laplace sd 1
        assert x == pytest.approx(k_ridge * y**2, rel=1e-8)
        others = np.delete(z - curved.centre, [iy, ix])
        assert np.abs(others).max() < 1e-9
    quartic_rise = k_ridge**2 / 2 + (k_ridge - BANANA_BEND) ** 2 / (2 * BANANA_SD**2)
    np.testing.assert_allclose(record["bent"][0], [0.5, quartic_rise], rtol=1e-6)
    # the tails map: a u^2 + b u^4 = s^2 / 2 along q; the inverse; the log-Jacobian
    s = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (5, flat.size))) * 2.0
    for point in s:
        z, log_jac = curved.forward(jnp.asarray(point))
        np.testing.assert_allclose(curved.inverse(np.asarray(z)), point, rtol=1e-9, atol=1e-9)
        u = np.asarray(curved.tails(jnp.asarray(point))[0])
        a, b = curved.a[q], curved.b[q]
        assert a * u[q] ** 2 + b * u[q] ** 4 == pytest.approx(point[q] ** 2 / 2, rel=1e-10)
        J = np.asarray(jax.jacobian(lambda v: curved.forward(v)[0])(jnp.asarray(point)))
        expected = np.linalg.slogdet(J)[1] - np.linalg.slogdet(curved.axes)[1]
        assert float(log_jac) == pytest.approx(expected, abs=1e-8)


def test_nuts_in_the_curved_map_samples_a_banana(banana, problem):
    """``fit_nuts(metric="laplace-curved")`` on the banana: no divergences, and the draws'
    moments of (y, x) match quadrature of the exact density within Monte Carlo error; the
    other sites keep the closed-form posterior's spread. ``extend`` refuses such a run."""
    model, data, init = banana
    fit = _fit_in_a_map(model, data, init, "laplace-curved", num_warmup=400)
    settings = fit.attrs["settings"]
    assert settings["metric"] == "laplace-curved" and len(settings["curved_map"]["quartic"]) == 1
    v = np.asarray(fit.posterior_samples(group_by_chain=True)["banana"])  # (chains, draws, 2)
    moments = {"y2": v[..., 0] ** 2, "x": v[..., 1], "x2": v[..., 1] ** 2}
    _assert_a_mapped_run(fit, problem, moments, _banana_moments())
    with pytest.raises(ValueError, match="laplace-curved"):
        fit_nuts(model, data, key=2, extend=fit, num_samples=10, progress=False)


def _fit_in_a_map(model, data, init, metric: str, *, num_warmup: int):
    """``fit_nuts`` with ``metric`` (one of ``MAPPED_METRICS``): 2 x (num_warmup + 1,000)."""
    return fit_nuts(
        model,
        data,
        key=1,
        num_warmup=num_warmup,
        num_samples=1000,
        num_chains=2,
        init=init,
        metric=metric,
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )


def _assert_a_mapped_run(fit, problem, moments: dict, ref: dict):
    """A run in a map's coordinates on the linear-Gaussian problem with one extra site: no
    divergences, R-hat < 1.02, each ``moments[name]`` (chains, draws) with its mean within 4
    Monte Carlo standard errors of ``ref[name]``, the base parameters' spread the closed form's."""
    from numpyro.diagnostics import effective_sample_size

    d = fit.diagnostics()
    assert d["divergences"] == 0 and d["rhat_max"] < 1.02
    for name, draws in moments.items():
        se = float(np.std(draws)) / np.sqrt(float(effective_sample_size(draws[..., None])[0]))
        assert abs(float(np.mean(draws)) - ref[name]) < 4 * se, (name, np.mean(draws), ref[name])
    b = problem[0].n_base
    beta = np.asarray(fit.posterior_samples()["beta"])
    np.testing.assert_allclose(np.std(beta, axis=0), np.sqrt(np.diag(problem[3]))[:b], rtol=0.12)


def test_laplace_curved_proposal_follows_a_banana(banana):
    """``fit_laplace(proposal="curved")`` on the banana: the push-forward of a standard normal
    through the curved map is close to the posterior (Pareto k low, most of the weight kept) and
    the resampled draws' moments of (y, x) match quadrature; the straight slice proposal misses
    the bend (its weights are unreliable)."""
    model, data, init = banana
    options = dict(key=4, num_samples=1000, num_chains=2, num_predictive=0, log_likelihood=False)
    straight = fit_laplace(model, data, init=init, importance="psis", **options)
    assert not straight.attrs["laplace"]["reliable"]
    fit = fit_laplace(model, data, init=init, importance="psis", proposal="curved", **options)
    report = fit.attrs["laplace"]
    assert report["reliable"] and report["pareto_k"] < 0.5
    assert report["importance_ess"] > 0.5 * 2000
    assert len(report["curved_map"]["quartic"]) == report["nonquadratic_axes"] == 1
    assert fit.attrs["settings"]["proposal"] == "curved"
    v = np.asarray(fit.posterior_samples()["banana"])
    ref = _banana_moments()
    n = report["importance_ess"]
    for name, draws in (("y2", v[:, 0] ** 2), ("x", v[:, 1]), ("x2", v[:, 1] ** 2)):
        assert abs(float(np.mean(draws)) - ref[name]) < 4 * float(np.std(draws)) / np.sqrt(n), name


WALL_PRIOR = (float(np.log(0.5)), 1.5)
"""``x = log c ~ N(loc, sd)`` of the wall problem's coefficient (prior median 0.5)."""
WALL_WIDTH = 0.05
"""The wall problem's likelihood ``exp(-c^2 / (2 w^2))`` in the coefficient ``c``: the data
bound ``c`` far below the prior's median, as friction that 5,000 states barely see."""


def _wall_moments() -> dict:
    """``E x``, ``E x^2`` of ``p(x) ~ N(x; loc, sd) exp(-exp(2 x) / (2 w^2))`` by quadrature."""
    loc, sd = WALL_PRIOR
    x = np.linspace(loc - 10 * sd, np.log(WALL_WIDTH) + 3.0, 40001)
    log_p = -((x - loc) ** 2) / (2 * sd**2) - np.exp(2 * x) / (2 * WALL_WIDTH**2)
    p = np.exp(log_p - log_p.max())
    p /= p.sum()
    return {"x": float((p * x).sum()), "x2": float((p * x**2).sum()), "mode": float(x[p.argmax()])}


@pytest.fixture(scope="module")
def wall(problem):
    """The linear-Gaussian model with a positive coefficient ``c = exp(x)``, site ``friction``
    (not whitened: prior ``N(WALL_PRIOR)`` on ``x``), and the factor ``-c^2 / (2 w^2)``: in
    ``x`` a wall whose curvature grows like ``c^2`` beside the prior's tail (the Stribeck
    posteriors' shape). Its actuator names the site a log scale coefficient."""
    import dataclasses
    import types

    import jax.numpy as jnp
    import numpyro.distributions as dist

    model, data, mean, _ = problem
    loc, sd = WALL_PRIOR
    base = _with_extra_site(
        model,
        "friction",
        dist.Normal(loc, sd),
        lambda x: -jnp.exp(2 * x) / (2 * WALL_WIDTH**2),
    )

    @dataclasses.dataclass(frozen=True, eq=False)
    class WithCoefficient(type(base)):
        @property
        def actuator(self):
            return types.SimpleNamespace(
                log_scale_coefficients=lambda: {"friction": (0.0, 1.0, loc, sd)}
            )

    site = WithCoefficient(**{f.name: getattr(base, f.name) for f in dataclasses.fields(base)})
    b = model.n_base
    init = {"beta": mean[:b], "actuator/viscous": mean[b:], "friction": _wall_moments()["mode"]}
    return site, data, init


def test_softplus_map_knee_inverse_jacobian_and_hessian(wall):
    """``fit_softplus_map`` puts the knee at the likelihood's width in ``c`` (closed form:
    ``f(c) = c^2 / (2 w^2)``, so ``w``) at any point, not only the mode; the map's inverse, its
    log-Jacobian (against the determinant of its autodiff Jacobian) and its Hessian (against
    autodiff of the composed potential) hold at random points."""
    import jax
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree
    from numpyro.infer.util import potential_energy, unconstrain_fn

    from inference.softplus_map import KNEE, coefficient_coordinates, fit_softplus_map

    model, data, init = wall
    unconstrained = unconstrain_fn(model.model, (data,), {}, init)
    flat, unravel = ravel_pytree(unconstrained)
    index = coefficient_coordinates(model, unconstrained)[0]
    # sites flatten in sorted order: "actuator/viscous" (n,), "beta" (b,), "friction"
    assert index.tolist() == [flat.size - 1]

    def U(z):
        return potential_energy(model.model, (data,), {}, unravel(z))

    for shift in (0.0, -1.3, 0.8):  # the mode and two other points
        z = flat.at[-1].add(shift)
        cmap = fit_softplus_map(
            model, unravel(z), np.asarray(jax.hessian(U)(z)), np.asarray(jax.grad(U)(z))
        )
        assert cmap.knee[0] == pytest.approx(KNEE * WALL_WIDTH, rel=1e-8)
    s = np.asarray(jax.random.normal(jax.random.PRNGKey(0), (4, flat.size))) * 2.0
    for point in s:
        z, log_jac = cmap.forward(jnp.asarray(point))
        np.testing.assert_allclose(cmap.inverse(np.asarray(z)), point, rtol=1e-9, atol=1e-9)
        J = np.asarray(jax.jacobian(lambda v: cmap.forward(v)[0])(jnp.asarray(point)))
        assert float(log_jac) == pytest.approx(np.linalg.slogdet(J)[1], abs=1e-9)
        assert np.linalg.slogdet(J)[0] == 1.0  # increasing in every coordinate

        def V(v):
            zz, lj = cmap.forward(v)
            return U(zz) - lj

        expected = np.asarray(jax.hessian(V)(jnp.asarray(point)))
        got = cmap.hessian(point, np.asarray(jax.hessian(U)(z)), np.asarray(jax.grad(U)(z)))
        np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-7 * np.abs(expected).max())


def test_nuts_in_softplus_coordinates_samples_a_wall(wall, problem, tmp_path):
    """``fit_nuts(metric="softplus-adapt")`` on the wall: no divergences, the draws' moments of
    ``x`` match quadrature of the exact density within Monte Carlo error, and the other sites
    keep the closed-form posterior's spread. ``extend`` (after a save and load) continues the
    chains in the stored map: the old draws kept, the new ones from the same posterior."""
    model, data, init = wall
    fit = _fit_in_a_map(model, data, init, "softplus-adapt", num_warmup=500)
    settings = fit.attrs["settings"]
    assert settings["metric"] == "softplus-adapt" and settings["dense_mass"]
    assert settings["softplus_map"]["mapped"] == 1
    x = np.asarray(fit.posterior_samples(group_by_chain=True)["friction"])  # (chains, draws)
    _assert_a_mapped_run(fit, problem, {"x": x, "x2": x**2}, _wall_moments())

    save_result(fit, tmp_path / "wall.nc")
    more = fit_nuts(
        model,
        data,
        key=2,
        extend=load_result(tmp_path / "wall.nc"),
        num_samples=1000,
        num_chains=2,
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )
    assert more.attrs["settings"]["softplus_map"] == settings["softplus_map"]
    assert more.attrs["settings"]["num_samples"] == 2000
    x_all = np.asarray(more.posterior_samples(group_by_chain=True)["friction"])
    np.testing.assert_array_equal(x_all[:, :1000], x)
    new = x_all[:, 1000:]
    _assert_a_mapped_run(more, problem, {"x": new, "x2": new**2}, _wall_moments())


def test_curved_or_adapt_takes_the_curved_map_only_where_the_posterior_bends(banana, problem):
    """``metric="laplace-curved-or-adapt"``: the banana's straight rise along y is
    ``y^2 / 2 + k^2 y^4 / (2 s^2)`` (``t^4`` coefficient 50, above ``CURVED_MIN_QUARTIC``), so
    the curved map; the linear-Gaussian posterior has no fourth-order axis, so the adapted
    Laplace metric (the closed-form covariance as its start)."""
    from inference.nuts import CURVED_MIN_QUARTIC, _fixed_metric, strongly_bent
    from inference.result import trace_sites

    assert BANANA_BEND**2 / (2 * BANANA_SD**2) > CURVED_MIN_QUARTIC
    model, data, init = banana
    latent, _ = trace_sites(model, data)
    bent = _fixed_metric(model, data, "laplace-curved-or-adapt", init, latent)
    assert bent.name == "laplace-curved" and bent.transform is not None
    assert strongly_bent(bent.record)
    np.testing.assert_allclose(
        bent.record["straight"][0][1], BANANA_BEND**2 / (2 * BANANA_SD**2), rtol=1e-3
    )
    plain, data, mean, cov = problem
    b = plain.n_base
    point = {"beta": mean[:b], "actuator/viscous": mean[b:]}
    latent, _ = trace_sites(plain, data)
    flat = _fixed_metric(plain, data, "laplace-curved-or-adapt", point, latent)
    assert flat.name == "laplace-adapt" and flat.transform is None
    assert np.shape(flat.inverse_mass) == (mean.size, mean.size)
    assert flat.record["quartic"] == [] and not strongly_bent(flat.record)  # why set aside
    assert not strongly_bent({"straight": [[0.5, CURVED_MIN_QUARTIC * 0.99]]})
    assert not strongly_bent({"quartic": [], "straight": []})
