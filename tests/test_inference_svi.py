"""SVI against the closed-form posterior of a conjugate linear-Gaussian model (Bishop eq. 3.50)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayes_nea as bn
from inference import convergence_report, fit_svi, make_optimizer
from inference.reference import linear_gaussian_model, simulate
from inference.svi import WHITE_BOX_RESTARTS

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)

FAST = {"progress": False, "num_predictive": 0, "log_likelihood": False}


@pytest.fixture(scope="module")
def problem():
    model = linear_gaussian_model(bn.get_system("cartpole"), noise_sd=0.1)
    data, w_true = simulate(model, key=3, n_samples=30)
    mean, cov = model.posterior(data)
    return model, data, mean, cov


def _w(samples):
    return np.concatenate(
        [np.asarray(samples["beta"]), np.asarray(samples["actuator/viscous"])], -1
    )


@pytest.fixture(scope="module")
def delta_fit(problem):
    model, data, _, _ = problem
    return fit_svi(model, data, key=0, guide="delta", steps=1500, learning_rate=0.02, **FAST)


def test_delta_guide_finds_the_posterior_mode(problem, delta_fit):
    # Gaussian posterior: mode = mean. Adam with a constant rate hovers within ~1e-3 of it.
    _, _, mean, cov = problem
    sd = np.sqrt(np.diag(cov))
    w = _w(delta_fit.posterior_samples())
    assert w.shape == (1, mean.size)
    np.testing.assert_array_less(np.abs(w[0] - mean) / sd, 0.05)
    report = delta_fit.attrs["convergence"]
    assert report["converged"], report["message"]
    assert report["steps"] == 1500
    assert delta_fit.attrs["timing"]["steps_per_s"] > 0


def test_mean_field_guide_matches_conditional_sds(problem):
    # The optimal mean-field Gaussian of a Gaussian posterior has the posterior mean and
    # sds 1 / sqrt(diag(precision)) (Bishop 2006, sec. 10.1.2).
    model, data, mean, cov = problem
    fit = fit_svi(
        model,
        data,
        key=1,
        guide="normal",
        steps=3000,
        map_steps=1000,
        learning_rate=0.01,
        schedule="cosine",
        num_samples=4000,
        num_particles=4,
        **FAST,
    )
    w = _w(fit.posterior_samples())
    sd_mf = 1.0 / np.sqrt(np.diag(np.linalg.inv(cov)))
    # 4000 draws: Monte-Carlo error of the mean 0.016 sd, of the sd 1.1%; ELBO noise adds more.
    np.testing.assert_array_less(np.abs(w.mean(0) - mean) / sd_mf, 0.25)
    np.testing.assert_allclose(w.std(0), sd_mf, rtol=0.2)


@pytest.mark.slow
def test_full_rank_guide_matches_posterior(problem):
    model, data, mean, cov = problem
    fit = fit_svi(
        model,
        data,
        key=2,
        guide="mvn",
        steps=4000,
        map_steps=1000,
        learning_rate=0.01,
        schedule="cosine",
        num_samples=4000,
        num_particles=4,
        **FAST,
    )
    w = _w(fit.posterior_samples())
    sd = np.sqrt(np.diag(cov))
    np.testing.assert_array_less(np.abs(w.mean(0) - mean) / sd, 0.25)
    np.testing.assert_allclose(w.std(0), sd, rtol=0.25)


def test_resume_continues_exactly(problem):
    # 100 + 100 steps resumed from the stored optimiser state = 200 uninterrupted steps.
    model, data, _, _ = problem
    opts = dict(key=5, guide="delta", learning_rate=0.02, chunk_size=50, **FAST)
    whole = fit_svi(model, data, steps=200, **opts)
    first = fit_svi(model, data, steps=100, **opts)
    resumed = fit_svi(model, data, steps=100, resume=first, **opts)
    np.testing.assert_allclose(
        _w(resumed.posterior_samples()), _w(whole.posterior_samples()), rtol=1e-10
    )
    np.testing.assert_allclose(
        resumed.idata["svi_loss"]["loss"].values, whole.idata["svi_loss"]["loss"].values, rtol=1e-10
    )
    assert resumed.attrs["settings"]["steps"] == 200


def test_float32_data_give_float32_posterior(problem):
    # NumPyro draws float64 noise beside float32 scales when x64 is on, which strict promotion
    # rejects inside its distributions; our code is float32-clean (BAYES_NEA_X64=0 runs all in
    # float32, see benchmarks/inference.py).
    model, data, mean, cov = problem
    data32 = data._replace(**{f: jnp.asarray(getattr(data, f), jnp.float32) for f in data._fields})
    with jax.numpy_dtype_promotion("standard"):
        fit = fit_svi(model, data32, key=0, steps=1500, learning_rate=0.02, **FAST)
    samples = fit.posterior_samples()
    assert samples["beta"].dtype == jnp.float32
    np.testing.assert_array_less(np.abs(_w(samples)[0] - mean) / np.sqrt(np.diag(cov)), 0.1)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"q": np.zeros((30, 3))}, "has 3 joints"),
        (
            {
                "q": np.zeros((0, 2)),
                "qd": np.zeros((0, 2)),
                "qdd": np.zeros((0, 2)),
                "tau": np.zeros((0, 2)),
            },
            "empty",
        ),
        ({"tau": np.full((30, 2), np.nan)}, "non-finite"),
        ({"qd": np.zeros((29, 2))}, "different lengths"),
        ({"q": np.zeros(30)}, "expected"),
    ],
)
def test_bad_data_raise(problem, change, message):
    model, data, _, _ = problem
    with pytest.raises(ValueError, match=message):
        fit_svi(model, data._replace(**change), key=0, steps=10, progress=False)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"guide": "laplace"}, "unknown guide 'laplace'; valid values are"),
        ({"optimizer": "adagrad"}, "unknown optimizer"),
        ({"schedule": "step"}, "unknown schedule"),
        ({"steps": 0}, "steps must be > 0"),
        ({"subsample_size": 1000}, "subsample_size"),
    ],
)
def test_bad_options_raise(problem, options, message):
    model, data, _, _ = problem
    with pytest.raises(ValueError, match=message):
        fit_svi(model, data, key=0, progress=False, **{"steps": 10, **options})


def test_not_a_model_raises(problem):
    _, data, _, _ = problem
    with pytest.raises(ValueError, match="is not a BayesianModel"):
        fit_svi(object(), data, key=0)


def test_convergence_report_on_known_traces():
    rng = np.random.default_rng(0)
    flat = 100.0 + 0.01 * rng.standard_normal(1000)
    assert convergence_report(flat).converged
    decaying = 100.0 * np.exp(-np.arange(1000) / 800.0)
    report = convergence_report(decaying)
    assert not report.converged
    assert report.window == 100
    # Least-squares slope of the last 100 steps of 100 exp(-t/800): about -100/800 exp(-950/800).
    assert report.slope == pytest.approx(-100 / 800 * np.exp(-950 / 800), rel=0.01)
    assert not convergence_report(np.array([1.0, np.nan, 1.0])).converged


@pytest.mark.parametrize(
    ("schedule", "lr_at"),
    [
        ("constant", lambda t: 0.1),
        ("cosine", lambda t: 0.1 * (0.01 + 0.99 * 0.5 * (1 + np.cos(np.pi * min(t, 100) / 100)))),
        ("linear", lambda t: 0.1 + (0.001 - 0.1) * min(t, 100) / 100),
        ("exponential", lambda t: max(0.1 * 0.01 ** (t / 100), 0.001)),
    ],
)
def test_schedules_follow_their_formulas(schedule, lr_at):
    # SGD on a unit gradient moves each step by the learning rate of that step.
    opt = make_optimizer("sgd", 0.1, schedule=schedule, steps=100)
    params = jnp.zeros(())
    state = opt.init(params)
    rates = []
    for _ in range(151):
        updates, state = opt.update(jnp.ones(()), state, params)
        rates.append(-float(updates))
    for t in (0, 1, 50, 99, 150):
        assert rates[t] == pytest.approx(lr_at(t), rel=1e-5), (schedule, t)


def test_gradient_norm_matches_the_gaussian_posterior(problem):
    # Negative log joint of a linear-Gaussian model: 0.5 (w - m)^T P (w - m) + const, so its
    # gradient at m + d is P d (Bishop eq. 3.50-3.51), P = inverse posterior covariance.
    from inference.svi import gradient_check, gradient_norm, gradient_norms

    model, data, mean, cov = problem
    b = model.n_base
    d = 0.3 * np.sqrt(np.diag(cov)) * np.cos(np.arange(mean.size))
    point = {"beta": jnp.asarray(mean[:b] + d[:b]), "actuator/viscous": jnp.asarray(mean[b:] + d[b:])}
    expect = np.linalg.norm(np.linalg.solve(cov, d))
    assert gradient_norm(model, data, point) == pytest.approx(expect, rel=1e-6)
    # an ensemble's members in one program: each point's own norm (the mode's is 0)
    scales = np.array([1.0, 0.0, -2.5])
    stacked = {
        "beta": jnp.asarray(mean[:b] + scales[:, None] * d[:b]),
        "actuator/viscous": jnp.asarray(mean[b:] + scales[:, None] * d[b:]),
    }
    norms = gradient_norms(model, data, stacked)
    assert norms.shape == (3,)
    np.testing.assert_allclose(norms, np.abs(scales) * expect, rtol=1e-6, atol=1e-6 * expect)
    ok, rel = gradient_check(expect, dimension=mean.size, num_obs=30, tol=1.0)
    assert rel == pytest.approx(expect / np.sqrt(mean.size) / np.sqrt(30))
    assert ok == (rel <= 1.0)


def test_subsampled_fit_checks_its_gradient_on_all_the_data(problem):
    """Minibatch SVI (``subsample_size``) runs to its end and its convergence report's gradient
    is the full-data gradient of the negative log joint at its point (the minibatch's would
    be a random number), checked against the closed form at that point."""
    model, data, mean, cov = problem
    fit = fit_svi(
        model, data, key=0, guide="delta", steps=1500, learning_rate=0.01, subsample_size=10, **FAST
    )
    w = _w(fit.posterior_samples())[0]
    sd = np.sqrt(np.diag(cov))
    np.testing.assert_array_less(np.abs(w - mean) / sd, 1.0)  # near the mode, with SGD noise
    expect = np.linalg.norm(np.linalg.solve(cov, w - mean))  # P (w - m), Bishop eq. 3.50-3.51
    assert fit.attrs["convergence"]["grad_norm"] == pytest.approx(expect, rel=1e-6)
    assert fit.attrs["settings"]["subsample_size"] == 10


def test_converged_needs_a_small_gradient(problem, delta_fit):
    model, data, _, _ = problem
    report = delta_fit.attrs["convergence"]
    assert report["converged"] and report["loss_converged"]
    assert report["grad_relative"] <= report["gradient_tol"]
    # a loss that looks flat only because the steps are tiny: far from the mode (5 posterior
    # sds on every coordinate) the gradient test says "not converged"
    _, _, mean, cov = problem
    b = model.n_base
    far = mean + 5 * np.sqrt(np.diag(cov))
    init = {"beta": jnp.asarray(far[:b]), "actuator/viscous": jnp.asarray(far[b:])}
    slow = fit_svi(model, data, key=0, steps=100, learning_rate=1e-9, init=init, **FAST)
    report = slow.attrs["convergence"]
    assert report["loss_converged"], report
    assert report["grad_relative"] > 1.0
    assert not report["converged"]
    assert "gradient" in report["message"]


@pytest.fixture(scope="module")
def restart_fit():
    from models import ModelData, build_model

    robot = bn.get_system("cartpole")
    q, qd, qdd = bn.sample_states(robot, 1, 40)
    tau = jax.random.normal(jax.random.key(2), q.shape, q.dtype)
    model = build_model("ffnn", robot)
    fit = fit_svi(
        model, ModelData(q, qd, qdd, tau), key=0, guide="delta", steps=60, restarts=3,
        restart_steps=20, **FAST
    )
    return model, fit


def test_restarts_from_prior_draws_keep_the_best(restart_fit):
    model, fit = restart_fit
    info = fit.attrs["restarts"]
    assert model.multimodal_start
    assert info["restarts"] == 3 and info["restart_steps"] == 20
    scores = np.asarray(info["scores"])
    assert len(set(scores.round(6))) == 3  # distinct starts
    assert info["best"] == int(np.argmin(scores))
    assert info["spread"] == pytest.approx(scores.max() - scores.min())
    losses = np.asarray(fit.idata["svi_loss"]["loss"].values)
    assert losses.size == 60
    # the kept restart's score is the mean of the last tenth (2 steps) of its screening losses
    assert losses[18:20].mean() == pytest.approx(scores.min())
    assert fit.attrs["settings"]["start"] == "prior draws"


def test_later_starts_share_one_guide_and_get_the_state_of_a_guide_placed_there():
    """``_init_starts`` places one delta guide and sets the later starts' loc params: each state
    must equal, leaf for leaf (params, optimiser moments, step count, key), the state of an
    ``AutoDelta`` placed at that start by NumPyro itself."""
    from numpyro.infer import SVI
    from numpyro.infer.autoguide import AutoDelta
    from numpyro.infer.initialization import init_to_value
    from numpyro.optim import optax_to_numpyro

    from inference.svi import SortedTrace_ELBO, _init_starts
    from models import ModelData, build_model

    robot = bn.get_system("cartpole")
    q, qd, qdd = bn.sample_states(robot, 1, 20)
    tau = jax.random.normal(jax.random.key(2), q.shape, q.dtype)
    model = build_model("diffnea/nn-residual/weak", robot)
    data = model.prepare(ModelData(q, qd, qdd, tau))
    points = [model.start_sample(jax.random.key(i)) for i in (3, 4, 5)]
    opt = make_optimizer("adam", 1e-2)
    key = jax.random.key(7)
    svi, guide, states = _init_starts(
        model, lambda fn: AutoDelta(model.model, init_loc_fn=fn), opt, SortedTrace_ELBO(), data,
        key=key, starts=points, model_kwargs={},
    )
    for point, k, state in zip(points, jax.random.split(key, 3), states, strict=True):
        placed = AutoDelta(model.model, init_loc_fn=init_to_value(values=point))
        expected = SVI(model.model, placed, optax_to_numpyro(opt), SortedTrace_ELBO()).init(k, data)
        assert jax.tree.structure(state.optim_state) == jax.tree.structure(expected.optim_state)
        for a, b in zip(jax.tree.leaves(state.optim_state), jax.tree.leaves(expected.optim_state),
                        strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b)
        assert np.array_equal(
            jax.random.key_data(state.rng_key), jax.random.key_data(expected.rng_key)
        )
        median = guide.median(svi.get_params(state))
        for site, value in point.items():
            if site in median:
                assert np.array_equal(median[site], value)  # the guide sits at this start


def test_auto_guide_gives_network_weights_a_posterior():
    from inference import default_guide
    from models import ModelData, build_model

    robot = bn.get_system("cartpole")
    q, qd, qdd = bn.sample_states(robot, 3, 40)
    tau = jax.random.normal(jax.random.key(5), q.shape, q.dtype)
    data = ModelData(q, qd, qdd, tau)
    model = build_model("ffnn", robot)
    assert default_guide(model) == "ensemble"
    assert default_guide(build_model("diffnea/viscous/informative", robot)) == "delta"
    vq, vqd, vqdd = bn.sample_states(robot, 4, 30)
    vtau = jax.random.normal(jax.random.key(6), vq.shape, vq.dtype)
    valid = ModelData(vq, vqd, vqdd, vtau)
    # validation with a patience longer than the run: no member stops early, the noise scales
    # are calibrated on it
    fit = fit_svi(model, data, key=0, steps=40, restarts=3, validation=valid, patience=100, **FAST)
    assert fit.attrs["settings"]["guide"] == "ensemble" and fit.attrs["restarts"] is None
    assert fit.attrs["settings"]["members"] == 3 and fit.attrs["ensemble"]["kept"] == [0, 1, 2]
    # one MAP per member, each from its own prior draw, all trained for every step
    member_losses = np.asarray(fit.idata["svi_loss"]["member_loss"].values)
    assert member_losses.shape == (40, 3)
    assert np.all(member_losses[-1] < member_losses[0])
    np.testing.assert_allclose(fit.idata["svi_loss"]["loss"].values, member_losses.mean(axis=1))
    w = np.asarray(fit.posterior_samples()["ffnn_net/layers[1].weight"])
    assert w.shape[0] == 1000 and float(np.std(w, axis=0).min()) > 0  # every weight varies
    # the draws carry the mixture weights: member i has round(1000 w_i) draws
    ens = fit.attrs["ensemble"]
    weights = np.asarray(ens["weights"])
    assert weights.shape == (3,) and weights.sum() == pytest.approx(1.0)
    member = np.asarray(ens["draw_member"])
    assert np.all(np.abs(np.bincount(member, minlength=3) - 1000 * weights) <= 1)
    # the members themselves; a start taken from the fit is a member, not a mean of weights
    from inference._common import point_values

    members = fit.ensemble_members()
    np.testing.assert_array_equal(fit.ensemble_weights(), weights)
    np.testing.assert_array_equal(w, np.asarray(members["ffnn_net/layers[1].weight"])[member])
    start = point_values(fit, list(members))
    best = int(np.argmax(weights))
    np.testing.assert_array_equal(
        start["ffnn_net/layers[1].weight"], members["ffnn_net/layers[1].weight"][best]
    )
    # the band of the predicted accelerations has width: not a point estimate
    draws = fit.posterior_samples()
    qdd_pred = jax.vmap(lambda s: jax.vmap(model.qdd_fn(s))(q, qd, tau))(draws)
    assert float(np.std(np.asarray(qdd_pred), axis=0).min()) > 0
    with pytest.raises(ValueError, match="'ensemble' guide starts its members"):
        fit_svi(model, data, key=0, steps=10, guide="ensemble", init=draws, **FAST)
    # noise scales and weights, checked with scipy: (1) each member's noise is its conditional
    # MAP given its weights (the 1-D optimum of the Gaussian likelihood of its own training
    # residuals plus the whitened N(0, 1) prior) times (2) one factor per joint that maximises the
    # mixture's log predictive density of the validation data; (3) members whose training NLL
    # per scalar (at the profiled noise) exceeds the best's by more than MEMBER_SCORE_GAP get
    # weight 0, the others equal
    from scipy.optimize import minimize, minimize_scalar
    from scipy.special import logsumexp
    from scipy.stats import norm

    from inference.svi import (
        CALIBRATION_FLOOR,
        MEMBER_SCORE_GAP,
        _calibrate_mixture,
        _member_weights,
    )

    (site,) = model.noise_sites
    assert all(r["converged"] for r in ens["noise_profile"])
    calibration = ens["noise_calibration"]
    factor = np.asarray(calibration["factor"]["log_sigma_qdd"])
    loc, scale = site.prior.loc, site.prior.scale
    sigma = np.exp(loc + scale * np.asarray(members[site.site]))  # (3, n)
    for i in range(3):
        member = {k: v[i] for k, v in members.items()}
        resid = np.asarray(qdd - jax.vmap(model.qdd_fn(member))(q, qd, tau))
        for j in range(robot.n):

            def energy(z, r=resid[:, j], j=j):
                return -norm.logpdf(r, 0.0, np.exp(loc[j] + scale[j] * z)).sum() - norm.logpdf(z)

            best = minimize_scalar(
                energy, bounds=(-30, 30), method="bounded", options={"xatol": 1e-10}
            )
            profiled = np.exp(loc[j] + scale[j] * best.x)
            assert sigma[i, j] == pytest.approx(profiled * factor[j], rel=1e-6)

    def predictions(members):
        count = len(next(iter(members.values())))
        return np.stack(
            [
                jax.vmap(model.qdd_fn({k: v[i] for k, v in members.items()}))(vq, vqd, vtau)
                for i in range(count)
            ]
        )

    mean = predictions(members)
    member_lp = norm.logpdf(np.asarray(vqdd), mean, sigma[:, None] / factor).sum(-1)  # profiled
    member_nll = -member_lp.sum(-1) / np.size(vqdd)
    np.testing.assert_allclose(calibration["member_validation_nll"], member_nll, rtol=1e-9)
    train_mean = np.stack(
        [jax.vmap(model.qdd_fn({k: v[i] for k, v in members.items()}))(q, qd, tau) for i in range(3)]
    )
    train_lp = norm.logpdf(np.asarray(qdd), train_mean, sigma[:, None] / factor).sum(-1)
    train_nll = -train_lp.sum(-1) / np.size(qdd)
    np.testing.assert_allclose(ens["member_training_nll"], train_nll, rtol=1e-9)
    keep = train_nll <= train_nll.min() + MEMBER_SCORE_GAP
    np.testing.assert_allclose(weights, keep / keep.sum())

    def mixture_nlpd(log_c, w=weights):  # per observed scalar
        lp = norm.logpdf(np.asarray(vqdd), mean, sigma[:, None] * np.exp(log_c)).sum(-1)
        with np.errstate(divide="ignore"):
            return -np.sum(logsumexp(lp + np.log(w)[:, None], axis=0)) / np.size(vqdd)

    # the factors are at least CALIBRATION_FLOOR (1): the optimum over factors >= 1, i.e. over
    # log_c >= -log(factor) relative to the stored scales
    assert np.all(factor >= CALIBRATION_FLOOR)
    floor = np.log(CALIBRATION_FLOOR) - np.log(factor)
    best = minimize(
        mixture_nlpd, floor + 0.3, method="Nelder-Mead", bounds=[(f, None) for f in floor],
        options={"xatol": 1e-8, "fatol": 1e-14},
    )
    np.testing.assert_allclose(best.x, 0.0, atol=1e-4)  # the stored scales are at the optimum
    # here the floor acts: a joint's unconstrained optimum would narrow its band below the
    # training residual's
    at_floor = np.isclose(factor, CALIBRATION_FLOOR)
    free = minimize(
        mixture_nlpd, np.zeros(robot.n), method="Nelder-Mead",
        options={"xatol": 1e-8, "fatol": 1e-14},
    )
    assert at_floor.any() and np.all(free.x[at_floor] < -1e-3), (factor, free.x)
    before = calibration["validation_nlpd_before"]
    after = calibration["validation_nlpd_after"]
    assert after <= before + 1e-12 * abs(before)
    assert after == pytest.approx(mixture_nlpd(np.zeros(robot.n)), rel=1e-8)
    assert before == pytest.approx(mixture_nlpd(-np.log(factor), np.full(3, 1 / 3)), rel=1e-8)
    # a member whose output layer is scaled 5x is a failed optimisation: weight 0, and the
    # noise factors are fitted on the others alone
    bad = {k: jnp.concatenate([v, v[:1]]) for k, v in members.items()}
    out_w = "ffnn_net/layers[1].weight"
    bad[out_w] = bad[out_w].at[3].multiply(5.0)
    from inference._validate import fit_inputs

    _, prep, _ = fit_inputs(model, data)
    bad_weights, bad_train = _member_weights(model, prep, int(np.size(qdd)), bad)
    bad_pred = jax.vmap(model.qdd_fn({k: v[3] for k, v in bad.items()}))(q, qd, tau)
    bad_nll = -norm.logpdf(np.asarray(qdd), np.asarray(bad_pred), sigma[0]).sum()  # as passed
    assert bad_train[3] == pytest.approx(bad_nll / np.size(qdd), rel=1e-9)
    assert bad_train[3] > min(bad_train) + MEMBER_SCORE_GAP
    expected = np.r_[keep, False]
    np.testing.assert_allclose(bad_weights, expected / expected.sum())
    _, vprep, _ = fit_inputs(model, valid)
    _, record = _calibrate_mixture(model, vprep, int(np.size(vqdd)), bad, bad_weights)
    if np.array_equal(bad_weights[:3], weights):  # the same mixture: the factors stay 1
        np.testing.assert_allclose(record["factor"]["log_sigma_qdd"], np.ones(robot.n), rtol=1e-3)


def test_lbfgs_ensemble_reaches_the_closed_form_posterior_mode(problem):
    """``optimizer="lbfgs"``: the member (one, started at the prior mean: the model has no prior
    draws to start from) ends at the conjugate posterior's mode, its mean (Bishop eq. 3.53);
    other guides and minibatches are refused."""
    model, data, mean, _ = problem
    fit = fit_svi(model, data, key=0, guide="ensemble", optimizer="lbfgs", steps=40, **FAST)
    assert fit.attrs["settings"]["optimizer"] == "lbfgs"
    assert fit.idata["svi_loss"]["member_loss"].shape == (40, 1)
    draws = _w(fit.posterior_samples())
    np.testing.assert_allclose(draws[0], mean, rtol=1e-9, atol=1e-9)
    np.testing.assert_array_equal(draws, draws[:1].repeat(len(draws), 0))  # one member
    with pytest.raises(ValueError, match="'lbfgs' fits the 'ensemble' guide"):
        fit_svi(model, data, key=0, steps=10, guide="delta", optimizer="lbfgs", **FAST)
    with pytest.raises(ValueError, match="subsample_size 10"):
        fit_svi(model, data, key=0, steps=10, guide="ensemble", optimizer="lbfgs",
                subsample_size=10, **FAST)


def test_early_stopping_counts_only_gains_larger_than_min_delta():
    from inference.early_stopping import EarlyStopping

    # each score 0.01 below the last: gains, but smaller than min_delta 0.05
    monitor = EarlyStopping(lambda x: -0.01 * x, patience=3, label="ensemble", min_delta=0.05)
    for state in range(20):
        monitor.record(jnp.asarray(float(state)), step=state)
        if monitor.exhausted:
            break
    assert state == 3  # the first score is the reference; three small gains in a row stop
    assert float(monitor.best_state) == 3.0  # the best state still follows every gain
    assert monitor.report()["min_delta"] == 0.05
    with pytest.raises(ValueError, match="min_delta"):
        EarlyStopping(lambda x: x, patience=1, label="delta", min_delta=-1.0)


def test_allocate_draws_carries_the_weights_in_a_random_order():
    from inference.svi import allocate_draws

    key = jax.random.key(0)
    weights = np.array([0.5, 0.3, 0.2, 0.0])
    member = allocate_draws(weights, 1000, key)
    np.testing.assert_array_equal(np.bincount(member, minlength=4), [500, 300, 200, 0])
    # the order is drawn: not blocks of one member; another key, another order, same counts
    assert len(set(member[:20].tolist())) == 3
    other = allocate_draws(weights, 1000, jax.random.key(1))
    assert np.any(other != member) and np.array_equal(np.sort(other), np.sort(member))
    # largest remainder: 10 draws of (0.46, 0.46, 0.08) are 5, 4 or 4, 5, and 1
    assert sorted(np.bincount(allocate_draws([0.46, 0.46, 0.08], 10, key))) == [1, 4, 5]
    for bad in ([], [0.5, -0.1], [np.nan, 1.0], [0.0, 0.0]):
        with pytest.raises(ValueError, match="weights must be"):
            allocate_draws(bad, 10, key)


# --- early stopping on held-out data (inference.early_stopping) ---------------------------------


def _point(model, w):
    b = model.n_base
    return {"beta": jnp.asarray(w[:b]), "actuator/viscous": jnp.asarray(w[b:])}


def test_heldout_nll_is_the_gaussian_negative_log_likelihood(problem):
    from scipy.stats import norm

    from inference.early_stopping import heldout_nll

    model, _, mean, _ = problem
    held_out, _ = simulate(model, key=11, n_samples=25)
    nll = heldout_nll(model, held_out, int(np.size(held_out.q)))
    w = mean + 0.3  # any point
    F = np.asarray(model.features(held_out.q, held_out.qd, held_out.qdd))
    expected = -norm.logpdf(np.asarray(held_out.tau), F @ w, model.noise_sd).mean()
    assert float(jax.jit(nll)(_point(model, w))) == pytest.approx(expected, rel=1e-12)


def test_early_stopping_keeps_the_best_state_and_stops_on_patience():
    from inference.early_stopping import EarlyStopping

    monitor = EarlyStopping(lambda x: (x - 3.0) ** 2, patience=2, label="delta")
    for state in range(10):
        monitor.record(jnp.asarray(float(state)), step=10 * (state + 1))
        if monitor.exhausted:
            break
    assert state == 5  # 4 and 5 did not beat 3
    assert float(monitor.best_state) == 3.0 and monitor.best_step == 40
    report = monitor.report()
    assert report["steps"] == [10, 20, 30, 40, 50, 60] and report["stopped"]
    assert report["scores"][:4] == [9.0, 4.0, 1.0, 0.0] and report["best_score"] == 0.0


def test_batched_early_stopping_keeps_each_members_best():
    from inference.early_stopping import EarlyStopping

    targets = jnp.array([1.0, 4.0])  # member 0 is best at x = 1, member 1 at x = 4
    monitor = EarlyStopping(
        lambda x: (x - targets) ** 2, patience=2, label="ensemble", batched=True
    )
    for x in range(10):
        monitor.record(jnp.full(2, float(x)), step=x)
        if monitor.exhausted:
            break
    assert x == 6  # member 0 stopped at 3, the run only when member 1 stopped too
    np.testing.assert_array_equal(monitor.best_state, [1.0, 4.0])
    assert monitor.best_step == [1, 4] and monitor.report()["best_score"] == [0.0, 0.0]


def test_fit_svi_stops_where_the_validation_likelihood_is_best(problem):
    from inference.early_stopping import heldout_nll

    # held-out data made by a point 20 prior sds from the training posterior: starting there,
    # every step towards the training MAP makes them less likely, so the first score is the best
    model, data, mean, _ = problem
    start = mean + 20.0 * model.prior_sd
    held_out, _ = simulate(model, key=12, n_samples=30, w=start)
    fit = fit_svi(
        model, data, key=0, guide="delta", steps=400, chunk_size=20, learning_rate=0.02,
        init=_point(model, start), validation=held_out, patience=3, **FAST,
    )
    (stage,) = fit.attrs["early_stopping"]
    assert stage["stage"] == "delta" and stage["stopped"] and stage["patience"] == 3
    assert stage["best_step"] == 20 and stage["steps"] == [20, 40, 60, 80]
    assert np.all(np.diff(stage["scores"]) > 0)
    assert fit.idata["svi_loss"]["loss"].size == 80  # stopped after 3 scores without improvement
    report = fit.attrs["convergence"]
    assert report["early_stopped"] and report["converged"]
    assert "early stopping" in report["message"]
    # the kept point is the best-scored state, not the last one
    kept = {k: v[0] for k, v in fit.posterior_samples().items()}
    nll = heldout_nll(model, held_out, int(np.size(held_out.q)))
    assert float(nll(kept)) == pytest.approx(stage["best_score"], rel=1e-10)
    assert fit.attrs["settings"]["validation"] == {
        "samples": 30,
        "patience": 3,
        "min_delta": 0.0,
    }


def test_fit_svi_without_validation_runs_every_step(problem, delta_fit):
    assert delta_fit.attrs["early_stopping"] is None
    assert delta_fit.attrs["convergence"]["early_stopped"] is False
    model, data, _, _ = problem
    with pytest.raises(ValueError, match="polish contradict"):
        fit_svi(model, data, key=0, guide="delta", steps=10, polish=True, validation=data, **FAST)


_PROGRAM_HASH = """
import hashlib, jax
from numpyro.infer import SVI
from numpyro.infer.autoguide import AutoNormal
from numpyro.optim import Adam
import bayes_nea as bn
from inference.reference import linear_gaussian_model, simulate
from inference.svi import SortedTrace_ELBO
model = linear_gaussian_model(bn.get_system("cartpole"), noise_sd=0.1)
data, _ = simulate(model, key=3, n_samples=30)
svi = SVI(model.model, AutoNormal(model.model), Adam(1e-3), SortedTrace_ELBO(num_particles=2))
state = svi.init(jax.random.key(0), data)
print(hashlib.sha256(jax.jit(svi.update).lower(state, data).as_text().encode()).hexdigest())
"""


def test_sorted_elbo_is_numpyros_elbo_in_one_program_for_every_process(problem):
    """``SortedTrace_ELBO`` gives NumPyro's ``Trace_ELBO`` value and gradient (same key, two
    particles), and its SVI program is the same in processes with different string-hash seeds
    (``Trace_ELBO`` orders its terms by a set of site names: its program, and so its
    compilation-cache key, changes with ``PYTHONHASHSEED``)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal
    from numpyro.optim import Adam

    from inference.svi import SortedTrace_ELBO

    model, data, _, _ = problem
    guide = AutoNormal(model.model, init_scale=0.3)
    values = []
    for elbo in (Trace_ELBO(num_particles=2), SortedTrace_ELBO(num_particles=2)):
        svi = SVI(model.model, guide, Adam(1e-3), elbo)
        state = svi.init(jax.random.key(0), data)
        params = svi.get_params(state)

        def loss(p, elbo=elbo):
            return elbo.loss(jax.random.key(5), p, model.model, guide, data)

        values.append(jax.value_and_grad(loss)(params))
    (v0, g0), (v1, g1) = values
    assert v1 == pytest.approx(float(v0), rel=1e-12)
    for k in g0:
        np.testing.assert_allclose(g1[k], g0[k], rtol=1e-10, atol=1e-12)
    root = Path(__file__).resolve().parents[1]
    hashes = {
        subprocess.run(
            [sys.executable, "-c", _PROGRAM_HASH],
            env=dict(os.environ, PYTHONPATH=str(root), PYTHONHASHSEED=str(h)),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for h in (1, 3)  # Trace_ELBO's programs differ between these two seeds
    }
    assert len(hashes) == 1


def test_output_layer_laplace_is_the_conditional_linear_gaussian_posterior():
    """Given the hidden layers and the noise, ``ffnn``'s accelerations are linear in its output
    layer, so with Normal noise that layer's conditional posterior is Bayesian linear regression:
    precision ``sum_j A_j^T A_j / sigma_j^2 + diag(1 / prior sd^2)`` with ``A_j`` the design
    of joint j. The design is read off the model's own predictions at unit output weights (not
    from any Hessian code); the Laplace Hessian must equal the precision, and the draws must
    have its inverse as covariance and leave every other site at the member."""
    from inference.output_layer import output_layer_draws, output_layer_hessians
    from models import ModelData, build_model

    robot = bn.get_system("cartpole")
    q, qd, qdd = bn.sample_states(robot, 3, 40)
    tau = jax.random.normal(jax.random.key(5), q.shape, q.dtype)
    model = build_model("ffnn", robot)
    data = model.prepare(ModelData(q, qd, qdd, tau))
    starts = [model.start_sample(key=jax.random.key(i)) for i in (11, 12)]
    members = {k: jnp.stack([s[k] for s in starts]) for k in starts[0]}
    prior_sd = model.output_layer_prior_sd
    sites = sorted(prior_sd)
    assert sites == ["ffnn_net/layers[2].bias", "ffnn_net/layers[2].weight"]
    # the friction networks' output passes through |.|: not linear in the output layer
    assert build_model("diffnea/nn-friction/weak", robot).output_layer_prior_sd == {}
    assert sorted(build_model("diffnea/nn-residual/weak", robot).output_layer_prior_sd) == [
        f"actuator/{net}/layers[2].{leaf}"
        for net in ("residual_joint_net_0", "residual_joint_net_1", "residual_net")
        for leaf in ("bias", "weight")
    ]
    H = output_layer_hessians(model, data, members, sites)
    sizes = [int(np.prod(members[s].shape[1:])) for s in sites]
    d = sum(sizes)
    assert H.shape == (2, d, d)
    for m, start in enumerate(starts):

        def predict(flat, start=start):
            parts = np.split(np.asarray(flat, np.float64), np.cumsum(sizes)[:-1])
            sample = dict(start)
            for s, part in zip(sites, parts, strict=True):
                sample[s] = jnp.asarray(part.reshape(start[s].shape))
            return np.asarray(jax.vmap(model.qdd_fn(sample))(q, qd, tau))  # (N, n)

        base = predict(np.zeros(d))
        design = np.stack([predict(np.eye(d)[k]) - base for k in range(d)], axis=-1)  # (N, n, d)
        sigma = np.asarray(model.noise_sigma(start, "qdd", jnp.float64))
        precision = np.einsum("inj,ink->jk", design / sigma[None, :, None] ** 2, design)
        sd = np.concatenate([np.full(k, prior_sd[s]) for s, k in zip(sites, sizes, strict=True)])
        precision += np.diag(1.0 / sd**2)
        np.testing.assert_allclose(H[m], precision, rtol=1e-8, atol=1e-8 * np.abs(precision).max())
    # draws: member 0's output layer ~ N(member, precision^-1); every other site the member's
    member = np.repeat([0, 1], 3000)
    draws, record = output_layer_draws(model, data, members, member, jax.random.key(3))
    assert record["sites"] == sites and record["members"] == [0, 1]
    assert record["floored"] == [0, 0]
    for k in members:
        if k not in sites:
            np.testing.assert_array_equal(draws[k], np.asarray(members[k])[member])
    flat = np.concatenate([draws[s][:3000].reshape(3000, -1) for s in sites], axis=1)
    centre = np.concatenate([np.asarray(members[s][0]).ravel() for s in sites])
    cov = np.linalg.inv(H[0])
    sd0 = np.sqrt(np.diag(cov))
    assert np.max(np.abs(flat.mean(axis=0) - centre) / sd0) < 5 / np.sqrt(3000) * 4
    np.testing.assert_allclose(np.std(flat, axis=0), sd0, rtol=0.08)
    corr = cov / np.outer(sd0, sd0)
    assert np.max(np.abs(np.corrcoef(flat.T) - corr)) < 0.12
    assert record["sd_max"][0] == pytest.approx(float(sd0.max()))


def test_a_lone_ensemble_member_gets_its_output_layer_posterior():
    """``output_layer="auto"``: one member carrying all the weight draws its output layer from
    the Laplace approximation (the band gets weight uncertainty); the other weights stay at the
    member."""
    from models import ModelData, build_model

    robot = bn.get_system("cartpole")
    q, qd, qdd = bn.sample_states(robot, 3, 40)
    tau = jax.random.normal(jax.random.key(5), q.shape, q.dtype)
    model = build_model("ffnn", robot)
    data = ModelData(q, qd, qdd, tau)
    fit = fit_svi(model, data, key=0, steps=20, restarts=1, num_samples=50, **FAST)
    assert fit.attrs["settings"]["output_layer"] == "auto"
    record = fit.attrs["ensemble"]["output_layer"]
    assert record["members"] == [0] and record["sd_min"][0] > 0
    draws = fit.posterior_samples()
    members = fit.ensemble_members()
    for k, v in draws.items():
        varies = float(np.ptp(np.asarray(v), axis=0).max()) > 0
        assert varies == (k in record["sites"]), k
        if not varies:
            np.testing.assert_array_equal(np.asarray(v)[0], np.asarray(members[k][0]))
    with pytest.raises(ValueError, match="output_layer"):
        fit_svi(model, data, key=0, steps=2, output_layer="last", **FAST)


def test_learned_student_df_is_profiled_per_member_and_kept_by_the_calibration():
    """``student_df=None``: each ensemble member's noise scale *and* degrees of freedom are its
    conditional MAP (checked against scipy's Student-t density and a Nelder-Mead optimum), they
    recover known tails (t(3) errors on the cart, Normal ones on the pole), and the validation
    calibration scales the noise scales only."""
    from scipy.optimize import minimize
    from scipy.stats import norm, t

    from inference._validate import fit_inputs
    from inference.svi import _calibrate_mixture, _profile_noise
    from models import ModelData, build_model

    robot = bn.get_system("cartpole")
    model = build_model("ffnn", robot, noise="student-t", student_df=None, nn_width=4, nn_depth=1)
    assert [s.site for s in model.noise_sites] == ["log_sigma_qdd_z", "log_df_qdd_z"]
    starts = [model.start_sample(jax.random.key(k)) for k in range(2)]
    members = {k: jnp.stack([s[k] for s in starts]) for k in starts[0]}
    truth = {k: v[0] for k, v in members.items()}  # member 0's network generates the data
    rng = np.random.default_rng(0)

    def dataset(seed, count):
        q, qd, _ = bn.sample_states(robot, seed, count)
        tau = jax.random.normal(jax.random.key(seed), q.shape, q.dtype)
        pred = np.asarray(jax.vmap(model.qdd_fn(truth))(q, qd, tau))
        noise = np.stack([0.3 * rng.standard_t(3.0, count), 0.5 * rng.standard_normal(count)], 1)
        return ModelData(q, qd, jnp.asarray(pred + noise), tau), pred

    data, pred = dataset(1, 1500)
    _, prep, _ = fit_inputs(model, data)
    profiled, reports = _profile_noise(model, prep, members)
    assert all(r["converged"] for r in reports)
    phys = jax.vmap(model.physical)(profiled)
    sigma, df = np.asarray(phys["sigma_qdd"]), np.asarray(phys["df_qdd"])
    s_site, d_site = model.noise_sites
    resid = np.asarray(data.qdd) - pred
    for j in range(robot.n):  # member 0: its own residuals are the noise

        def energy(z, r=resid[:, j], j=j):  # whitened N(0, 1) priors on both latents
            s = np.exp(s_site.prior.loc[j] + s_site.prior.scale[j] * z[0])
            nu = np.exp(d_site.prior.loc[j] + d_site.prior.scale[j] * z[1])
            return -t.logpdf(r, nu, 0.0, s).sum() - norm.logpdf(z).sum()

        best = minimize(
            energy,
            np.zeros(2),
            method="Nelder-Mead",
            options={"xatol": 1e-9, "fatol": 1e-12, "maxfev": 20000},
        )
        assert best.success, best.message
        z = np.array([profiled[s_site.site][0, j], profiled[d_site.site][0, j]])
        np.testing.assert_allclose(z, best.x, atol=1e-4)
    assert 2.2 < df[0, 0] < 4.2 and abs(sigma[0, 0] / 0.3 - 1) < 0.1  # t(3) with scale 0.3
    assert df[0, 1] > 20 and abs(sigma[0, 1] / 0.5 - 1) < 0.1  # Normal: large df
    valid, _ = dataset(2, 500)
    _, vprep, _ = fit_inputs(model, valid)
    calibrated, record = _calibrate_mixture(
        model, vprep, int(np.size(valid.qdd)), profiled, [0.5, 0.5]
    )
    assert list(record["factor"]) == ["log_sigma_qdd"]
    np.testing.assert_array_equal(calibrated[d_site.site], profiled[d_site.site])
    factor = np.asarray(record["factor"]["log_sigma_qdd"])
    scaled = np.asarray(jax.vmap(model.physical)(calibrated)["sigma_qdd"])
    np.testing.assert_allclose(scaled / sigma, np.broadcast_to(factor, sigma.shape), rtol=1e-10)


def test_weak_prior_hybrids_start_their_rigid_body_at_the_white_box_map():
    """A weak-prior hybrid (a rigid body drawn from a broad prior, networks in the actuator)
    starts its members' inertia at the Newton-polished MAP of the same model with viscous
    friction (``BayesianModel.white_box_start``): on data of the nominal cart-pole that start's
    base parameters are those of the truth, where the prior draw it replaces is far off.
    Informative hybrids (nominal start), white-box models and the black box are not staged."""
    from models import ModelData, build_model

    robot = bn.get_system("cartpole")
    for name in ("diffnea/nn-friction/informative", "diffnea/viscous/weak", "ffnn", "nea"):
        assert build_model(name, robot).white_box_start() is None, name
    assert build_model("nokin-diffnea/ffnn/weak", robot).white_box_start()[1] == (
        "inertia_z", "rpy_z", "xyz_z"
    )
    model = build_model("diffnea/nn-friction/weak", robot, nn_width=4, nn_depth=1)
    counterpart, sites = model.white_box_start()
    assert counterpart.spec.name == "diffnea/viscous/weak" and sites == ("inertia_z",)
    assert counterpart.spec.replace(actuator="nn-friction") == model.spec
    # data of the nominal robot with viscous friction, 1 % acceleration noise
    q, qd, _ = bn.sample_states(robot, 7, 100)
    tau = 5.0 * jax.random.normal(jax.random.key(8), q.shape, q.dtype)
    damping = jnp.asarray([2.0, 0.005])
    qdd = jax.vmap(lambda a, b, t: bn.aba(robot, a, b, t - damping * b))(q, qd, tau)
    qdd = qdd + 0.01 * jnp.std(qdd, axis=0) * jax.random.normal(jax.random.key(9), qdd.shape)
    data = ModelData(q, qd, qdd, tau)
    to_base = np.asarray(bn.base_parameters(robot, 0).to_base)

    def base(inertia_z):
        theta = counterpart.family.params({"inertia_z": jnp.asarray(inertia_z)}).theta
        return to_base @ np.asarray(theta).reshape(-1)

    truth = to_base @ np.asarray(robot.nominal.theta).reshape(-1)
    scale = np.abs(truth).max()
    # two steps of a MAP (an ensemble's members start the same way): still where it started
    fit = fit_svi(model, data, key=0, guide="delta", steps=2, restarts=1, **FAST)
    record = fit.attrs["settings"]["white_box_start"]
    assert record["variant"] == "diffnea/viscous/weak" and record["sites"] == ["inertia_z"]
    # fitted from several prior draws, the lowest loss kept
    restarts = record["restarts"]
    assert restarts["restarts"] == WHITE_BOX_RESTARTS == len(restarts["scores"]) > 1
    assert restarts["scores"][restarts["best"]] == min(restarts["scores"])
    point = np.asarray(fit.posterior_samples()["inertia_z"])[0]
    assert np.abs(base(point) - truth).max() < 0.05 * scale
    for k in range(2):  # the prior draws they would have started from
        draw = model.start_sample(jax.random.key(k))["inertia_z"]
        assert np.abs(base(draw) - truth).max() > 0.5 * scale


def test_float32_steps_reach_the_closed_form_mode_and_return_float64(problem):
    """``train_dtype="float32"``: the optimisation steps run in single precision (the stored
    optimiser state is float32), the point found is the conjugate posterior's mode (Bishop eq.
    3.53) within 0.05 sd as in float64, and the result's draws are float64."""
    model, data, mean, cov = problem
    fit = fit_svi(model, data, key=0, guide="delta", steps=1500, learning_rate=0.02,
                  train_dtype="float32", **FAST)
    assert fit.attrs["settings"]["train_dtype"] == "float32"
    state = fit.idata["svi_state"].to_dataset()
    floats = [v for v in state.data_vars.values() if np.issubdtype(v.dtype, np.floating)]
    assert floats and all(v.dtype == np.float32 for v in floats)
    draws = fit.posterior_samples()
    assert all(np.asarray(v).dtype == np.float64 for v in draws.values())
    sd = np.sqrt(np.diag(cov))
    np.testing.assert_array_less(np.abs(_w(draws)[0] - mean) / sd, 0.05)
    with pytest.raises(ValueError, match="train_dtype"):
        fit_svi(model, data, key=0, steps=2, train_dtype="float16", **FAST)


def test_float32_ensemble_members_follow_the_float64_ones():
    """A network ensemble trained in float32 follows the float64 one step for step (loss traces
    within 1e-4 relative after 150 Adam steps from the same prior draws); noise profiling,
    weights and draws run in float64 on the cast-back members."""
    from models import ModelData, build_model

    robot = bn.get_system("cartpole")
    q, qd, qdd = bn.sample_states(robot, 3, 60)
    tau = jax.random.normal(jax.random.key(5), q.shape, q.dtype)
    model = build_model("ffnn", robot, nn_width=8, nn_depth=1)
    data = ModelData(q, qd, qdd, tau)
    fits = {
        dt: fit_svi(model, data, key=0, steps=150, restarts=2, num_samples=20,
                    train_dtype=dt, **FAST)
        for dt in ("float64", "float32")
    }
    losses = {dt: np.asarray(f.idata["svi_loss"]["member_loss"]) for dt, f in fits.items()}
    assert losses["float32"].shape == losses["float64"].shape == (150, 2)
    assert losses["float64"][-1].max() < losses["float64"][0].min()  # it trained
    np.testing.assert_allclose(losses["float32"], losses["float64"], rtol=1e-4)
    assert not np.array_equal(losses["float32"], losses["float64"])  # single precision ran
    members = fits["float32"].ensemble_members()
    assert all(np.asarray(v).dtype == np.float64 for v in members.values())
    for k, v in fits["float64"].ensemble_members().items():
        np.testing.assert_allclose(np.asarray(members[k]), np.asarray(v), rtol=1e-3, atol=1e-4)


def test_profiled_tails_train_the_weights_at_held_degrees_of_freedom():
    """``tails="profiled"`` (``"auto"`` for an ensemble): the members' network weights are those
    of the same model with its degrees of freedom fixed at ``HELD_DF`` (started from the same
    prior draws), and only then are each member's scale and degrees of freedom profiled. Where
    it does not apply it is refused; ``_holding`` leaves its sites in place."""
    import optax

    from inference.svi import HELD_DF, _holding
    from models import ModelData, build_model

    params = {"a_z_auto_loc": jnp.ones(2), "b_z_auto_loc": jnp.ones(2)}
    opt = _holding(optax.adam(0.1), ["a_z"])
    updates, _ = opt.update({k: jnp.ones(2) for k in params}, opt.init(params), params)
    moved = optax.apply_updates(params, updates)
    np.testing.assert_array_equal(moved["a_z_auto_loc"], params["a_z_auto_loc"])
    assert np.all(np.asarray(moved["b_z_auto_loc"]) < 1.0)

    robot = bn.get_system("cartpole")
    small = {"nn_width": 4, "nn_depth": 1}
    learned = build_model("ffnn", robot, noise="student-t", student_df=None, **small)
    fixed = build_model("ffnn", robot, noise="student-t", student_df=HELD_DF, **small)
    truth = learned.start_sample(jax.random.key(9))
    q, qd, _ = bn.sample_states(robot, 1, 400)
    tau = jax.random.normal(jax.random.key(1), q.shape, q.dtype)
    rng = np.random.default_rng(0)
    noise = np.stack([0.3 * rng.standard_t(3.0, 400), 0.5 * rng.standard_normal(400)], 1)
    qdd = jax.vmap(learned.qdd_fn(truth))(q, qd, tau) + noise
    data = ModelData(q, qd, qdd, tau)
    run = {"key": 0, "steps": 40, "restarts": 2, "num_samples": 20, "output_layer": "none"}
    profiled = fit_svi(learned, data, **run, **FAST)  # tails="auto": profiled
    held = fit_svi(fixed, data, **run, **FAST)
    assert profiled.attrs["settings"]["tails"] == "profiled"
    assert held.attrs["settings"]["tails"] == "trained"  # "auto" where nothing is learned
    a, b = profiled.ensemble_members(), held.ensemble_members()
    weights = [k for k in b if not k.startswith("log_")]
    assert weights
    for k in weights:
        np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=1e-6, atol=1e-9)
    # the profile moved the held degrees of freedom to each member's conditional MAP
    assert all(r["converged"] for r in profiled.attrs["ensemble"]["noise_profile"])
    df = np.asarray(jax.vmap(learned.physical)(a)["df_qdd"])
    assert np.all(np.isfinite(df)) and np.all(df < HELD_DF / 10)
    with pytest.raises(ValueError, match="tails='profiled'"):
        fit_svi(fixed, data, tails="profiled", **run, **FAST)
    with pytest.raises(ValueError, match="tails='profiled'"):
        fit_svi(learned, data, tails="profiled", optimizer="lbfgs", **run, **FAST)
    with pytest.raises(ValueError, match="tails"):
        fit_svi(learned, data, tails="after", **run, **FAST)
