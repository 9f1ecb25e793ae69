"""Fits of complete model specs: NUTS on the rollout likelihood, exact sufficient statistics
used automatically, the identifiable geometry as a spec option, user URDF robots and old result
formats. (Split from test_models_spec.py so that each file stays a few minutes on one core.)"""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density

import bayes_nea as bn
from data import generate_dataset
from inference import fit_nuts, fit_svi, load_result, save_result
from inference.result import SCHEMA_VERSION
from models import Inverse, ModelData, build_model, model_data
from models.actuators import NETWORK_FORMAT

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)


@pytest.fixture(scope="module")
def cartpole():
    return bn.get_system("cartpole")


@pytest.fixture(scope="module")
def trajectories():
    return generate_dataset("cartpole", "trajectories", seed=3, duration=1.2)


def test_user_urdf_named_like_a_builtin_keeps_its_own_parameters(cartpole, tmp_path):
    """A URDF robot called "cartpole" with other masses and damping comes back as itself."""
    theta = np.array(cartpole.nominal.theta)
    theta[0] *= 0.64 / theta[0, 0]  # cart mass 0.64 kg instead of the built-in's
    theta[1, :] *= 1.3
    urdf = bn.to_urdf(cartpole.replace(damping=(5.0, 0.0)), cartpole.nominal._replace(theta=theta))
    user = bn.load_urdf(urdf)
    assert user.name == "cartpole"
    q, qd, _ = bn.sample_states(user, 0, 64)
    tau = jax.random.normal(jax.random.key(1), q.shape) * jnp.array([2.0, 0.0])
    qdd = jax.vmap(lambda a, b, c: bn.aba(user, a, b, c))(q, qd, tau)
    data = ModelData(q, qd, qdd, tau)
    model = build_model("diffnea/ideal/informative", user)
    fit = fit_svi(model, data, key=0, steps=5, num_predictive=0, progress=False)
    save_result(fit, tmp_path / "user.nc")
    loaded = load_result(tmp_path / "user.nc")
    robot = loaded.robot()
    np.testing.assert_array_equal(robot.nominal.theta, user.nominal.theta)
    assert robot.damping == (5.0, 0.0)
    assert not np.allclose(robot.nominal.theta, cartpole.nominal.theta)
    draw = jax.tree.map(lambda x: x[0], loaded.posterior_samples())
    pred = jax.vmap(loaded.model().qdd_fn(draw))(q, qd, tau)
    np.testing.assert_array_equal(pred, jax.vmap(model.qdd_fn(draw))(q, qd, tau))
    # the prior is centred on the URDF's parameters, not the built-in cart-pole's
    np.testing.assert_allclose(
        loaded.model().family.params(model.init_sample()).theta,
        user.nominal.theta,
        rtol=1e-9,
        atol=1e-15,
    )


def test_old_format_results_are_refused(cartpole, trajectories, tmp_path):
    model = build_model("diffnea/ideal/informative", cartpole)
    fit = fit_svi(model, trajectories, key=0, steps=2, num_predictive=0, progress=False)
    fit.idata.attrs["schema_version"] = 1
    save_result(fit, tmp_path / "old.nc")
    with pytest.raises(ValueError, match="format 1.*fit it again"):
        load_result(tmp_path / "old.nc")
    # a fit from before the network actuators' last change: read unless it is of one of them
    fit.idata.attrs["schema_version"] = SCHEMA_VERSION
    del fit.idata.attrs["network_format"]
    save_result(fit, tmp_path / "before.nc")
    assert load_result(tmp_path / "before.nc").variant == "diffnea/ideal/informative"
    fit.idata.attrs["variant"] = "diffnea/nn-residual/informative"
    save_result(fit, tmp_path / "before-residual.nc")
    with pytest.raises(ValueError, match="network format 1, whose 'nn-residual'.*fit it again"):
        load_result(tmp_path / "before-residual.nc")
    fit.idata.attrs["network_format"] = NETWORK_FORMAT
    save_result(fit, tmp_path / "now.nc")
    assert load_result(tmp_path / "now.nc").attrs["network_format"] == NETWORK_FORMAT


@pytest.mark.slow
def test_rollout_likelihood_is_fittable_by_nuts(cartpole, trajectories):
    rollout_model = build_model(
        "diffnea/viscous/informative",
        cartpole,
        likelihood="rollout",
        horizon=4,
        dt=1.0 / trajectories.rate_hz,
    )
    # an adapted metric: the Laplace metric's Hessian of RK4 windows is slow to compile
    nuts = fit_nuts(
        rollout_model,
        trajectories,
        key=1,
        metric="adapt",
        num_warmup=10,
        num_samples=10,
        num_chains=1,
        max_tree_depth=3,
        num_predictive=4,
        progress=False,
    )
    assert np.isfinite(nuts.posterior_samples()["actuator/log_viscous_z"]).all()
    assert nuts.model().spec == rollout_model.spec


def test_sufficient_statistics_are_used_and_exact(cartpole, trajectories):
    """fit_svi conditions a linear model on its sufficient statistics automatically; the MAP
    equals the per-sample likelihood's to rounding."""
    exact = build_model("diffnea/viscous/informative", cartpole, likelihood="inverse")
    assert exact.linear_exact
    per_sample = dataclasses.replace(exact, likelihood=Inverse())
    assert not per_sample.linear_exact
    data = model_data(trajectories)
    fits = [
        fit_svi(m, data, key=0, steps=300, num_predictive=0, progress=False)
        for m in (exact, per_sample)
    ]
    a, b = (f.posterior_samples() for f in fits)
    # the same log density and gradient at the fitted point (exact statistics, not a fit of
    # another objective); the two Adam paths themselves differ by amplified rounding
    point = {site: jnp.asarray(v[0]) for site, v in a.items()}
    lp = [
        jax.value_and_grad(lambda p, m=m: log_density(m.model, (m.prepare(data),), {}, p)[0])(point)
        for m in (exact, per_sample)
    ]
    np.testing.assert_allclose(float(lp[0][0]), float(lp[1][0]), rtol=1e-8)  # cancellation
    for site in point:
        scale = np.abs(np.asarray(lp[1][1][site])).max() + 1.0
        np.testing.assert_allclose(lp[0][1][site], lp[1][1][site], rtol=1e-6, atol=1e-8 * scale)
    for site in a:
        np.testing.assert_allclose(a[site], b[site], rtol=1e-3, atol=1e-6)
    # the pointwise log-likelihood of the exact fit is still per sample
    assert fits[0].idata["log_likelihood"]["obs_tau"].shape[2] == data.q.shape[0]
    assert json.loads(fits[0].idata.attrs["model_spec"])["likelihood"] == "inverse"


@pytest.mark.slow
def test_identifiable_geometry_is_a_spec_option_that_round_trips(cartpole, trajectories, tmp_path):
    """geometry="identifiable": build() gives the base-parameter model; its result stores the
    spec, reloads the same model and carries base parameters and completed bodies."""
    model = build_model("diffnea/viscous/informative", cartpole, geometry="identifiable")
    assert model.spec.geometry == "identifiable" and "base_z" in model.latent_sites
    fit = fit_svi(model, trajectories, key=0, steps=200, polish=True, progress=False)
    save_result(fit, tmp_path / "ident.nc")
    loaded = load_result(tmp_path / "ident.nc")
    rebuilt = loaded.model()
    assert rebuilt.spec == model.spec
    draw = jax.tree.map(lambda x: x[0], loaded.posterior_samples())
    data = model.prepare(model.observations(trajectories))
    lp0, _ = log_density(model.model, (data,), {}, draw)
    lp1, _ = log_density(
        rebuilt.model, (rebuilt.prepare(rebuilt.observations(trajectories)),), {}, draw
    )
    assert float(lp0) == float(lp1)
    assert {"base_parameters", "theta", "completion_ok"} <= set(loaded.physical_names)
    # a result whose stored base parameters are not the rebuilt model's is refused, not misread
    names = list(loaded.idata["posterior"].coords["base_parameter"].values)
    post = loaded.idata["posterior"].to_dataset()
    loaded.idata["posterior"] = post.assign_coords(base_parameter=names[::-1])
    with pytest.raises(ValueError, match="refit"):
        loaded.model()
