"""Identifiable geometry (models.identifiable) and the Newton MAP (inference.polish).

References we did not write: the closed-form Gaussian conditional by regression on joint Gaussian
draws, the conjugate linear-Gaussian posterior on the joint-torque regressor (tested against
Pinocchio elsewhere), Pinocchio's pseudo-inertia (physical consistency), and an independent
rejection sample of the truncated conditional (numpy).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
import xarray as xr

import bayes_nea as bn
from inference import fit_nuts
from inference.polish import polish_map, polish_map_batched
from models import ModelData, build_model
from models.identifiable import (
    BASE_SITE,
    DEFAULT_COMPLETION_STEPS,
    GaussianCondition,
    identifiable_model,
)

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)

NOISE = 0.02


def _pinocchio_consistent(theta):
    """(..., n, 10) -> (...,): every body's Pinocchio pseudo-inertia positive definite."""
    theta = np.asarray(theta, np.float64)
    flat = theta.reshape(-1, 10)
    lam = np.array(
        [np.linalg.eigvalsh(pin.PseudoInertia.FromDynamicParameters(t).toMatrix())[0] for t in flat]
    )
    return np.all((lam > 0).reshape(theta.shape[:-1]), axis=-1)


def _pseudo_inertia_np(theta):
    """(..., 10) -> (..., 4, 4), written out here (checked against Pinocchio in the test)."""
    m, hx, hy, hz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz = np.moveaxis(theta, -1, 0)
    tr = 0.5 * (Ixx + Iyy + Izz)
    rows = [
        [tr - Ixx, -Ixy, -Ixz, hx],
        [-Ixy, tr - Iyy, -Iyz, hy],
        [-Ixz, -Iyz, tr - Izz, hz],
        [hx, hy, hz, m],
    ]
    return np.stack([np.stack(r, -1) for r in rows], -2)


@pytest.fixture(scope="module")
def cartpole_model():
    robot = bn.get_system("cartpole")
    m = identifiable_model(build_model("diffnea/viscous/informative", robot))
    return dataclasses.replace(m, completion_steps=40)  # small: these tests check consistency


def test_gaussian_condition_matches_regression_on_joint_draws():
    rng = np.random.default_rng(1)
    p, b = 6, 2
    A = rng.normal(size=(p, p))
    cov = A @ A.T + 0.1 * np.eye(p)
    mu = rng.normal(size=p)
    B = rng.normal(size=(b, p))
    cond = GaussianCondition.build(B, mu, cov)
    theta = rng.multivariate_normal(mu, cov, size=200_000)
    beta = theta @ B.T
    X = np.c_[np.ones(len(beta)), beta]
    coef, *_ = np.linalg.lstsq(X, theta, rcond=None)
    resid = theta - X @ coef
    np.testing.assert_allclose(coef[1:].T, cond.gain, atol=0.02 * np.abs(cond.gain).max())
    F = cond.null_factor
    np.testing.assert_allclose(np.cov(resid.T), F @ F.T, atol=0.02 * np.abs(cov).max())
    np.testing.assert_allclose(B @ F, 0, atol=1e-10)  # completions leave beta unchanged
    np.testing.assert_allclose(cond.beta_chol @ cond.beta_chol.T, B @ cov @ B.T, rtol=1e-10)


def test_completion_is_consistent_and_keeps_base_parameters(cartpole_model):
    m = cartpole_model
    latent, comp = m.sample_prior(jax.random.key(3), 200)
    theta = comp["theta"]
    assert theta.shape == (200, 2, 10)
    assert _pinocchio_consistent(theta).all()
    beta = np.asarray(jax.vmap(m.condition.beta)(jnp.asarray(latent[BASE_SITE])))
    np.testing.assert_allclose(theta.reshape(200, -1) @ m.base.to_base.T, beta, atol=1e-12)
    # the DiffNEA virtual parameters of every draw map back to its theta
    back = np.asarray(bn.bodies_to_theta("diffnea", jnp.asarray(comp["virtual"])))
    np.testing.assert_allclose(back, theta, rtol=1e-8, atol=1e-12)
    # same key, same completion; another key, another one
    again = m.complete(jax.random.key(9), latent)
    np.testing.assert_array_equal(again["theta"], m.complete(jax.random.key(9), latent)["theta"])
    assert not np.allclose(again["theta"], m.complete(jax.random.key(10), latent)["theta"])


def test_dynamics_depend_on_base_parameters_only(cartpole_model):
    # the representative theta and a completed one give the same ABA accelerations
    m = cartpole_model
    robot = m.robot
    sample = m.init_sample()
    sample[BASE_SITE] = jnp.array([0.3, -0.2, 0.1, 0.5])
    comp = m.complete(jax.random.key(0), {k: v[None] for k, v in sample.items()})
    assert comp["completion_ok"][0]
    q, qd, tau = (jax.random.normal(jax.random.key(i), (robot.n,)) for i in range(3))
    mu_v = m.physical(sample)["viscous"]
    full = bn.RobotParams(jnp.asarray(comp["theta"][0]), robot.nominal.rpy, robot.nominal.xyz)
    ref = bn.aba(robot, q, qd, tau - mu_v * qd, params=full)
    np.testing.assert_allclose(m.qdd_fn(sample)(q, qd, tau), ref, rtol=1e-10)


@pytest.mark.parametrize("system, likelihood", [("cartpole", "forward"), ("furuta", "inverse")])
def test_prepared_features_give_the_rnea_aba_log_density(system, likelihood):
    from numpyro.infer.util import log_density

    robot = bn.get_system(system)
    m = identifiable_model(
        build_model("diffnea/stribeck/informative", robot, likelihood=likelihood)
    )
    q, qd, qdd = bn.sample_states(robot, 2, 25)
    tau = jax.random.normal(jax.random.key(4), q.shape)
    data = ModelData(q, qd, qdd, tau)
    prepared = m.prepare(data)
    sample = m.init_sample()
    sample[BASE_SITE] = 0.3 * jax.random.normal(jax.random.key(5), (m.base.n_base,))
    for k in sample:
        if k.startswith("actuator/"):
            sample[k] = sample[k] + 0.2
    ref, _ = log_density(m.model, (data,), {}, sample)  # ABA / RNEA per sample
    got, _ = log_density(m.model, (prepared,), {}, sample)  # M_k, h_k or Y_b features
    np.testing.assert_allclose(float(got), float(ref), rtol=1e-9)
    # a minibatch of the features is the features of the minibatch
    idx = jnp.array([3, 0, 17, 9])
    part, _ = log_density(m.model, (prepared.take(idx),), {}, sample)
    sub, _ = log_density(m.model, (ModelData(*(x[idx] for x in data)),), {}, sample)
    np.testing.assert_allclose(float(part), float(sub), rtol=1e-9)
    # the features keep the robot's structural nonzeros only, whatever the data: at rest
    # (qd = 0) the velocity columns vanish from the data but stay in the layout
    still = m.prepare(ModelData(q, jnp.zeros_like(qd), qdd, tau))
    assert jax.tree.structure(still) == jax.tree.structure(prepared)
    assert [v.shape[0] for v in jax.tree.leaves(still)] == [
        v.shape[0] for v in jax.tree.leaves(prepared)
    ]
    n, b = robot.n, m.base.n_base
    dense = (n * (n + 1) // 2 + n) * b if likelihood == "forward" else n * b
    kept = sum(
        c.size
        for f in (prepared.mass, prepared.bias, prepared.regressor)
        if f is not None
        for c in f.cols
    )
    assert kept < dense  # structural zeros left out (cart-pole forward 8 of 20, Furuta inverse
    # 15 of 16)


def _linear_problem():
    robot = bn.get_system("cartpole")
    source = build_model(
        "diffnea/ideal/informative", robot, likelihood="inverse", noise_scale=NOISE
    )
    model = identifiable_model(source)
    q, qd, qdd = bn.sample_states(robot, 5, 40)
    theta = jnp.asarray(robot.nominal.theta)
    tau = jax.vmap(lambda a, b, c: bn.rnea(robot, a, b, c))(q, qd, qdd)
    tau = tau + NOISE * jax.random.normal(jax.random.key(6), tau.shape)
    data = ModelData(q, qd, qdd, tau)
    # conjugate posterior of beta: prior N(B mu, L L^T), tau = Y_b beta + N(0, NOISE^2)
    Y = jax.vmap(lambda a, b, c: bn.joint_torque_regressor(robot, a, b, c))(q, qd, qdd)
    Yb = np.asarray(model.base.regressor(Y)).reshape(-1, model.base.n_base)
    prior_cov = model.condition.beta_chol @ model.condition.beta_chol.T
    prec = np.linalg.inv(prior_cov) + Yb.T @ Yb / NOISE**2
    cov = np.linalg.inv(prec)
    mean = cov @ (
        np.linalg.solve(prior_cov, model.condition.beta_mean)
        + Yb.T @ np.asarray(tau).reshape(-1) / NOISE**2
    )
    del theta
    return model, data, mean, cov


def test_newton_map_is_the_closed_form_posterior_mode():
    model, data, mean, cov = _linear_problem()
    point, report = polish_map(model, model.prepare(data), model.init_sample())
    assert report.converged, report.message
    assert report.min_eigenvalue > 0
    beta = np.asarray(model.condition.beta(point[BASE_SITE]))
    np.testing.assert_allclose(beta, mean, atol=1e-6 * np.sqrt(np.diag(cov)).max() + 1e-12)


def test_batched_newton_map_reaches_the_closed_form_mode_from_each_start():
    # two replicates of the same problem from different starts: each its own damping and stop
    model, data, mean, cov = _linear_problem()
    prepared = model.prepare(data)
    stacked = jax.tree.map(lambda x: jnp.stack([x, x]), prepared)
    start = model.init_sample()
    starts = {k: jnp.stack([v, v + 0.7]) for k, v in start.items()}
    points, reports = polish_map_batched(model, stacked, starts)
    assert all(r.converged for r in reports), [r.message for r in reports]
    for r in range(2):
        beta = np.asarray(model.condition.beta(points[BASE_SITE][r]))
        np.testing.assert_allclose(beta, mean, atol=1e-6 * np.sqrt(np.diag(cov)).max() + 1e-12)
    # a conditional MAP (sites=): only the base site moves; at the joint mode's other values the
    # conditional mode is the joint mode
    other = [k for k in points if k != BASE_SITE]
    moved = {k: v.at[1].add(0.7) if k == BASE_SITE else v for k, v in points.items()}
    again, reports = polish_map_batched(model, stacked, moved, sites=[BASE_SITE])
    assert all(r.converged for r in reports), [r.message for r in reports]
    for k in other:
        np.testing.assert_array_equal(np.asarray(again[k]), np.asarray(points[k]))
    beta = np.asarray(model.condition.beta(again[BASE_SITE][1]))
    np.testing.assert_allclose(beta, mean, atol=1e-6 * np.sqrt(np.diag(cov)).max() + 1e-12)
    with pytest.raises(ValueError, match="not in the points"):
        polish_map_batched(model, stacked, points, sites=["no_such_site"])


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["laplace", "laplace-adapt"])
def test_nuts_matches_closed_form_linear_gaussian_posterior(metric):
    # laplace-adapt: adapted in Laplace-whitened coordinates and mapped back (inference.nuts)
    model, data, mean, cov = _linear_problem()
    point, _ = polish_map(model, data, model.init_sample())
    fit = fit_nuts(
        model,
        data,
        key=2,
        num_warmup=300,
        num_samples=1000,
        num_chains=1,
        init=point,
        metric=metric,
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )
    assert fit.attrs["settings"]["metric"] == metric
    beta = np.asarray(fit.idata["posterior"]["base_parameters"].values).reshape(-1, mean.size)
    sd = np.sqrt(np.diag(cov))
    import arviz as az  # after numpyro (imported by inference): ArviZ's from_numpyro needs it

    diagnostics = fit.diagnostics()  # one chain: no R-hat, ESS from the chain itself
    ess = min(float(az.ess(beta[None, :, k])) for k in range(mean.size))
    assert ess >= 200, ess
    # Monte Carlo errors at the chain's own ESS, 5 standard errors: mean sd / sqrt(ESS), sd
    # about sd / sqrt(2 ESS), a correlation r about (1 - r^2) / sqrt(ESS)
    np.testing.assert_array_less(np.abs(beta.mean(0) - mean), 5 * sd / np.sqrt(ess))
    np.testing.assert_allclose(beta.std(0), sd, rtol=5 / np.sqrt(2 * ess))
    corr_ref = cov / np.outer(sd, sd)
    err = np.abs(np.corrcoef(beta.T) - corr_ref)
    np.testing.assert_array_less(err, 5 * (1 - corr_ref**2) / np.sqrt(ess) + 1e-9)
    assert diagnostics["divergences"] == 0
    post = fit.idata["posterior"]
    # rejection completes most draws here; failures are flagged, never returned inconsistent
    ok = post["completion_ok"].values
    assert ok.mean() > 0.9
    assert list(post["base_parameters"].coords["base_parameter"].values) == list(model.base_names)
    assert bool(np.all(np.asarray(bn.is_physically_consistent(post["theta"].values[ok]))))
    assert np.isnan(post["virtual"].values[~ok]).all()
    # the posterior's flat draws are those with a consistent body (the prior on beta is
    # truncated to them); the chains keep every draw
    flat = fit.physical_samples()
    assert _pinocchio_consistent(flat["theta"]).all()
    assert flat["theta"].shape[0] == ok.sum()
    assert diagnostics["consistent_fraction"] == ok.mean()
    chains = fit.posterior_samples(group_by_chain=True)[BASE_SITE]
    assert chains.shape[:2] == ok.shape
    # a pattern of misses on top of the chain's own (draws whose completion failed have NaN
    # theta): the flat latent and physical draws are the same draws, in order
    mask = ok & (np.arange(ok.size).reshape(ok.shape) % 3 != 0)
    fit.idata["posterior"]["completion_ok"] = xr.DataArray(mask, dims=("chain", "draw"))
    keep = mask.reshape(-1)
    np.testing.assert_array_equal(
        np.asarray(fit.posterior_samples()[BASE_SITE]),
        np.asarray(chains).reshape(ok.size, -1)[keep],
    )
    np.testing.assert_array_equal(
        fit.physical_samples()["base_parameters"],
        post["base_parameters"].values.reshape(ok.size, -1)[keep],
    )
    assert fit.posterior_samples(consistent_only=False)[BASE_SITE].shape[0] == ok.size
    # the physical summary is over those draws: theta NaN where no body exists does not leak
    theta = post["theta"].values.copy()
    theta[~mask] = np.nan
    fit.idata["posterior"]["theta"] = post["theta"].copy(data=theta)
    table = fit.summary()
    rows = table[table.index.str.startswith("theta")]
    assert len(rows) == theta[0, 0].size and np.isfinite(rows["mean"].to_numpy(float)).all()
    fit.idata["posterior"]["completion_ok"] = xr.DataArray(mask & False, dims=("chain", "draw"))
    with pytest.raises(ValueError, match="no draw of this"):
        fit.posterior_samples()
    with pytest.raises(ValueError, match="no draw with a physically consistent body"):
        fit.summary()


def test_rejects_network_actuators_and_bad_polish_options():
    robot = bn.get_system("cartpole")
    with pytest.raises(ValueError, match="actuators"):
        identifiable_model(build_model("diffnea/nn-friction/informative", robot))
    with pytest.raises(ValueError, match="max_iter"):
        polish_map(None, None, {}, max_iter=0)


def test_spd_solve_matches_numpy():
    from models.identifiable import spd_solve

    rng = np.random.default_rng(0)
    A = rng.normal(size=(50, 4, 4))
    M = A @ np.swapaxes(A, -1, -2) + 0.5 * np.eye(4)
    b = rng.normal(size=(50, 4))
    np.testing.assert_allclose(
        spd_solve(jnp.asarray(M), jnp.asarray(b)),
        np.linalg.solve(M, b[..., None])[..., 0],
        rtol=1e-10,
    )


@pytest.mark.parametrize("complete", [True, False])
def test_fit_svi_polish_reaches_the_closed_form_mode(complete):
    """The polished MAP is the closed-form mode. ``complete=False`` leaves theta and the virtual
    parameters out of the posterior; completing the draw afterwards (``model.complete``, as the
    benchmark grid's cells do for the draws they score) gives a consistent body with its base
    parameters, as the fit's own completion does."""
    from inference import fit_svi

    model, data, mean, cov = _linear_problem()
    fit = fit_svi(
        model,
        model.prepare(data),
        key=0,
        steps=50,
        polish=True,
        complete=complete,
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )
    c = fit.attrs["convergence"]
    assert fit.attrs["map"]["converged"] and c["converged"]
    # the gradient test is that of the polished point, far below the 50-step SVI point's
    assert c["grad_relative"] < 1e-6 < c["svi_grad_relative"]
    beta = fit.idata["posterior"]["base_parameters"].values.reshape(1, -1)
    np.testing.assert_allclose(beta[0], mean, atol=1e-6 * np.sqrt(np.diag(cov)).max())
    completed = {"theta", "virtual", "completion_ok"} & set(fit.physical_names)
    if complete:
        assert completed == {"theta", "virtual", "completion_ok"}
        done = fit.physical_samples()
    else:
        assert not completed
        done = model.complete(jax.random.key(3), fit.posterior_samples())
    assert np.asarray(done["completion_ok"]).all()
    theta = np.asarray(done["theta"])
    assert _pinocchio_consistent(theta).all()
    np.testing.assert_allclose(theta.reshape(1, -1) @ model.base.to_base.T, beta, atol=1e-12)


def test_identified_summary_reports_identified_quantities_with_truth():
    from inference.identified import identified_draws, identified_summary

    model, data, mean, cov = _linear_problem()
    prepared = model.prepare(data)
    point, _ = polish_map(model, prepared, model.init_sample())
    fit = fit_nuts(
        model,
        prepared,
        key=0,
        num_warmup=50,
        num_samples=60,
        num_chains=2,
        init=point,
        chain_method="sequential",
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )
    robot = model.robot
    q, qd, _ = bn.sample_states(robot, 11, 3)
    tau = jnp.ones_like(q)
    truth_beta = np.asarray(model.base.beta(robot.nominal.theta))
    table = identified_summary(
        fit, model, states=(q, qd, tau), truth={"base_parameters": truth_beta}
    )
    names = set(table.index)
    assert {f"base_parameters[{k}]" for k in range(4)} <= names
    assert any(n.startswith("qdd_pred[") for n in names)
    assert not any(n.startswith(("theta", "rpy", "xyz", "virtual", "completion")) for n in names)
    assert np.all(np.isfinite(table["r_hat"].values.astype(float)))
    rows = table.loc[[f"base_parameters[{k}]" for k in range(4)]]
    np.testing.assert_allclose(rows["truth"].values.astype(float), truth_beta)
    assert set(rows["covered_90"]) <= {True, False}
    # predicted accelerations of one draw: ABA with its completed (consistent) theta
    draws = identified_draws(fit, model, states=(q, qd, tau))
    post = fit.idata["posterior"]
    c, d = np.argwhere(post["completion_ok"].values)[0]
    theta = post["theta"].values[c, d]
    params = bn.RobotParams(jnp.asarray(theta), robot.nominal.rpy, robot.nominal.xyz)
    ref = jax.vmap(lambda a, b, t: bn.aba(robot, a, b, t, params=params))(q, qd, tau)
    np.testing.assert_allclose(draws["qdd_pred"][c, d], ref, rtol=1e-8)


def _truth_beta(model):
    return jnp.asarray(model.base.to_base @ np.asarray(model.robot.nominal.theta).reshape(-1))


def _z_of(model, beta):
    c = model.condition
    return np.linalg.solve(c.beta_chol, np.asarray(beta) - c.beta_mean)


@pytest.mark.slow
def test_completion_matches_an_independent_rejection_sample(cartpole_model):
    # theta | beta at the true base parameters, informative prior (where rejection from the
    # untruncated Gaussian conditional works): hit-and-run draws vs rejection draws
    m = dataclasses.replace(cartpole_model, completion_steps=DEFAULT_COMPLETION_STEPS)
    c = m.condition
    beta = np.asarray(_truth_beta(m))
    D = 800  # independent draws: the sd's sampling error ~2.5 %, rtol 0.1 below is 4 of them
    z = np.broadcast_to(_z_of(m, beta), (D, beta.size))
    comp = m.complete(jax.random.key(11), {BASE_SITE: jnp.asarray(z)})
    assert comp["completion_ok"].all()
    theta = comp["theta"].reshape(D, -1)
    # reference: untruncated conditional N(mu + gain (beta - B mu), F F^T), accept consistent
    rng = np.random.default_rng(0)
    mean = c.mu + c.gain @ (beta - c.beta_mean)
    prop = mean + rng.standard_normal((200_000, c.null_factor.shape[1])) @ c.null_factor.T
    J = _pseudo_inertia_np(prop.reshape(-1, m.robot.n, 10))
    ref = prop[np.all(np.linalg.eigvalsh(J)[..., 0] > 0, axis=-1)]
    assert len(ref) > 5000
    # the written-out pseudo-inertia is Pinocchio's
    np.testing.assert_allclose(
        J[0, 1], pin.PseudoInertia.FromDynamicParameters(prop[0, 10:]).toMatrix(), atol=1e-12
    )
    sd = ref.std(0)
    free = sd > 1e-9 * np.abs(ref).max()  # entries beta does not fix
    se = np.sqrt(sd**2 / D + sd**2 / len(ref))
    z_mean = np.abs(theta.mean(0) - ref.mean(0))[free] / se[free]
    assert z_mean.max() < 4.5, z_mean
    np.testing.assert_allclose(theta.std(0)[free], sd[free], rtol=0.1)


@pytest.mark.parametrize("system, prior", [("cartpole", "weak"), ("furuta", "informative")])
def test_completion_where_rejection_fails(system, prior):
    # weak prior: the untruncated conditional is almost never consistent; Furuta: part of the
    # base-parameter space has no consistent body. Base parameters of consistent bodies near
    # the true one (pseudo-inertias T J T^T, T = 1 + 2 % noise: consistent by construction)
    # are all completed, consistently (Pinocchio) and with exactly these base parameters; a
    # beta that no body has is flagged.
    robot = bn.get_system(system)
    m = dataclasses.replace(
        identifiable_model(build_model(f"diffnea/viscous/{prior}", robot), moment_draws=4000),
        completion_steps=50,
    )
    beta = np.asarray(_truth_beta(m))
    J = _pseudo_inertia_np(np.asarray(robot.nominal.theta, np.float64))  # (n, 4, 4)
    T = np.eye(4) + 0.02 * np.random.default_rng(1).standard_normal((64, robot.n, 4, 4))
    bodies = np.asarray(bn.theta_from_pseudo_inertia(T @ J @ np.swapaxes(T, -1, -2)))
    bodies = bodies.reshape(64, -1)
    betas = bodies @ m.base.to_base.T
    betas[0] = beta
    if system == "furuta":
        # I_xx of the pendulum (about its joint axis) is the trace of its identified 2 x 2
        # second-moment block: a negative one leaves no consistent body
        k = m.base_names.index("I_xx[pendulum_link]")
        betas[1, k] = -abs(beta[k])
    z = np.stack([_z_of(m, b) for b in betas])
    comp = m.complete(jax.random.key(0), {BASE_SITE: jnp.asarray(z)})
    ok = comp["completion_ok"]
    others = np.arange(64) != 1
    if system == "furuta":
        assert not ok[1]
    # every other beta is a consistent body's; phase 1 misses a few of the thinnest slices
    assert ok[0] and ok[others].mean() >= 0.9
    theta = comp["theta"][ok]
    assert _pinocchio_consistent(theta).all()
    got = theta.reshape(len(theta), -1) @ m.base.to_base.T
    np.testing.assert_allclose(got, betas[ok], rtol=1e-9, atol=1e-12 * np.abs(beta).max())
    assert np.isnan(comp["theta"][~ok]).all() and np.isnan(comp["virtual"][~ok]).all()
    # rejection from the untruncated conditional: mostly inconsistent here
    c = m.condition
    prop = c.mu + c.gain @ (beta - c.beta_mean)
    prop = prop + np.random.default_rng(2).standard_normal((4000, c.null_factor.shape[1])) @ (
        c.null_factor.T
    )
    rate = np.all(
        np.linalg.eigvalsh(_pseudo_inertia_np(prop.reshape(-1, robot.n, 10)))[..., 0] > 0, -1
    )
    assert rate.mean() < 0.5


@pytest.mark.slow  # compiles a Stribeck NUTS run (130 s on the loaded shared machine)
def test_fit_nuts_auto_metric_and_target_follow_the_model():
    # Stribeck: softplus coordinates for its scale coefficients, a dense metric adapted in
    # Laplace-whitened coordinates; the rest: Laplace metric
    robot = bn.get_system("cartpole")
    strib = identifiable_model(build_model("diffnea/stribeck/informative", robot), moment_draws=500)
    assert strib.nuts_metric == "softplus-adapt"
    weak = identifiable_model(build_model("diffnea/stribeck/weak", robot), moment_draws=500)
    assert weak.nuts_metric == "softplus-adapt"
    viscous = identifiable_model(build_model("diffnea/viscous/weak", robot), moment_draws=500)
    assert viscous.nuts_metric == "laplace"
    # and the step-size target: smaller steps for Stribeck's walls
    assert strib.nuts_target_accept == weak.nuts_target_accept == 0.95
    assert viscous.nuts_target_accept == 0.8
    q, qd, qdd = bn.sample_states(robot, 7, 20)
    data = strib.prepare(ModelData(q, qd, qdd, jnp.zeros_like(q)))
    fit = fit_nuts(
        dataclasses.replace(strib, completion_steps=2),
        data,
        key=0,
        num_warmup=3,
        num_samples=2,
        num_chains=1,
        init=strib.init_sample(),
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )
    settings = fit.attrs["settings"]
    assert settings["metric"] == "softplus-adapt" and settings["dense_mass"]
    # viscous, Coulomb and Stribeck amplitude of both joints in softplus coordinates
    assert settings["softplus_map"]["mapped"] == 6
    assert fit.attrs["settings"]["target_accept"] == 0.95
