"""The complete model spec: JSON round trips, results that rebuild exactly the model that was
fitted (robot included, never looked up by name), the likelihood as a component (rollout
fittable, exact sufficient statistics used automatically)."""

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density

import bayes_nea as bn
from analysis.rollouts import posterior_rollouts
from data import generate_dataset
from inference import fit_nuts, fit_svi, load_result, save_result
from models import Inverse, ModelData, ModelSpec, build, build_model, model_data, variant_names

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)

# Non-default options cycled over the variants (small networks keep the compiles short).
OPTIONS = (
    {"geometry": "centered"},
    {"noise": "student-t", "student_df": 5.0},
    {"likelihood": "rollout", "horizon": 3},
    {"noise_scale": 0.05},
)
# Saved-and-loaded fits (tiny SVI runs): each family, a network, each non-rollout option (the
# rollout likelihood's fit is saved and loaded in its own test); every variant's rebuild from
# its spec is tested without a fit.
FITTED_ROUND_TRIP = (
    "diffnea/stribeck/informative",  # centered geometry
    "nokin-diffnea/viscous/weak",  # learned kinematics, fixed noise scale
    "nea",
    "ffnn",  # black-box network, Student-t noise
)


def _options(i: int, name: str) -> dict:
    opts = dict(OPTIONS[i % len(OPTIONS)], nn_width=6, nn_depth=1)
    if name == "nea":  # its only likelihood is the inverse one
        opts = {"noise_scale": 0.05}
    return opts


@pytest.fixture(scope="module")
def cartpole():
    return bn.get_system("cartpole")


@pytest.fixture(scope="module")
def trajectories():
    return generate_dataset("cartpole", "trajectories", seed=3, duration=1.2)


@pytest.fixture(scope="module")
def short_trajectories():
    """A few rollout windows are enough to compare two models' densities."""
    return generate_dataset("cartpole", "trajectories", seed=3, duration=0.1)


def test_spec_json_round_trip_is_exact(cartpole):
    for i, name in enumerate(variant_names()):
        spec = build_model(name, cartpole, **_options(i, name)).spec
        text = spec.to_json()
        back = ModelSpec.from_json(text)
        assert back == spec and back.to_json() == text
        assert back.robot is not spec.robot
        for a, b in zip(back.robot.nominal, spec.robot.nominal, strict=True):
            np.testing.assert_array_equal(a, b)
        assert back.robot.effort_limit == spec.robot.effort_limit


def test_spec_rejects_other_formats_and_fields(cartpole):
    d = build_model("diffnea/viscous/weak", cartpole).spec.to_dict()
    with pytest.raises(ValueError, match="not a bayes-nea model spec"):
        ModelSpec.from_dict(dict(d, format="bayes-nea-model-spec/0"))
    with pytest.raises(ValueError, match="unknown fields"):
        ModelSpec.from_dict(dict(d, colour="red"))
    with pytest.raises(ValueError, match="not valid JSON"):
        ModelSpec.from_json("{")
    with pytest.raises(ValueError, match="unknown model options"):
        build_model("diffnea/viscous/weak", cartpole, guide="delta")
    with pytest.raises(ValueError, match="has no robot"):
        build(ModelSpec.parse("diffnea/viscous/weak"))


def test_capabilities_decide_what_applies(cartpole):
    """Inverse dynamics need an invertible actuator and a non-black-box family; the attributes
    answer, so a new component needs no edits elsewhere."""
    model = build_model("diffnea/stribeck/weak", cartpole)
    assert model.actuator.invertible and not model.family.black_box
    assert model.actuator.linear_coefficients is None and model.family.linear_in_theta
    assert build_model("diffnea/viscous/weak", cartpole, likelihood="inverse").linear_exact
    assert not build_model(
        "nokin-diffnea/viscous/weak", cartpole, likelihood="inverse"
    ).linear_exact
    assert not build_model(
        "diffnea/viscous/weak", cartpole, likelihood="inverse", noise="student-t"
    ).linear_exact
    with pytest.raises(ValueError, match="no closed-form inverse"):
        build_model("diffnea/ffnn/weak", cartpole, likelihood="inverse")
    with pytest.raises(ValueError, match="no inverse dynamics"):
        build_model("ffnn", cartpole, likelihood="inverse")


def _same_model(model, rebuilt, draw, dataset):
    """``rebuilt`` is ``model``: the same spec, bit-identical log joint density and forward
    dynamics at ``draw`` (one draw, unbatched)."""
    assert rebuilt is not model and rebuilt.spec == model.spec
    lp0, _ = log_density(model.model, (model.prepare(dataset),), {}, draw)
    lp1, _ = log_density(rebuilt.model, (rebuilt.prepare(dataset),), {}, draw)
    assert np.isfinite(float(lp0)) and float(lp0) == float(lp1)
    q, qd, _ = bn.sample_states(model.robot, 0, 16)
    tau = jnp.linspace(-2.0, 2.0, q.size, dtype=q.dtype).reshape(q.shape)
    a = jax.vmap(model.qdd_fn(draw))(q, qd, tau)
    b = jax.vmap(rebuilt.qdd_fn(draw))(q, qd, tau)
    assert np.isfinite(np.asarray(a)).all()
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name", variant_names())
def test_every_variant_rebuilds_bit_identically_from_its_spec(name, cartpole, short_trajectories):
    """What a saved result stores of the model is its spec as JSON: every variant (with one of
    the non-default options each) rebuilds from that text into a model with the same log
    density and dynamics, bit for bit, at a prior draw (network weights not at zero)."""
    i = variant_names().index(name)
    model = build_model(name, cartpole, dt=1.0 / short_trajectories.rate_hz, **_options(i, name))
    rebuilt = build(ModelSpec.from_json(model.spec.to_json()))
    _same_model(model, rebuilt, model.start_sample(jax.random.key(i)), short_trajectories)


def _result_round_trip(model, fit, dataset, path):
    """Save ``fit`` of ``model``, load it: the model it rebuilds has the same log density at the
    stored draw and the same posterior rollouts, bit for bit."""
    save_result(fit, path)
    loaded = load_result(path)
    for site, value in fit.posterior_samples().items():
        np.testing.assert_array_equal(loaded.posterior_samples()[site], value)
    rebuilt = loaded.model()
    draws = loaded.posterior_samples()
    _same_model(model, rebuilt, jax.tree.map(lambda x: x[0], draws), dataset)
    q0 = jnp.array([0.0, 2.0])
    a = posterior_rollouts(model.qdd_fn, draws, q0, jnp.zeros(2), steps=20)
    b = posterior_rollouts(rebuilt.qdd_fn, draws, q0, jnp.zeros(2), steps=20)
    np.testing.assert_array_equal(np.asarray(a.q), np.asarray(b.q))


@pytest.mark.parametrize("name", FITTED_ROUND_TRIP)
def test_fitted_results_round_trip_bit_identically(name, cartpole, trajectories, tmp_path):
    """A saved SVI result of a representative variant per family (networks included) and
    option; the rollout likelihood's is in test_rollout_likelihood_is_fittable_by_svi."""
    i = variant_names().index(name)
    model = build_model(name, cartpole, dt=1.0 / trajectories.rate_hz, **_options(i, name))
    fit = fit_svi(
        model,
        trajectories,
        key=i,
        steps=3,
        chunk_size=3,
        restarts=1,  # restarts are tested in test_inference_svi.py
        num_predictive=0,
        log_likelihood=False,
        progress=False,
    )
    _result_round_trip(model, fit, trajectories, tmp_path / f"{i}.nc")


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


@pytest.fixture(scope="module")
def rollout_model(cartpole, trajectories):
    return build_model(
        "diffnea/viscous/informative",
        cartpole,
        likelihood="rollout",
        horizon=4,
        dt=1.0 / trajectories.rate_hz,
    )


def test_rollout_likelihood_is_fittable_by_svi(rollout_model, trajectories, cartpole, tmp_path):
    windows = rollout_model.prepare(trajectories)
    assert windows.q.ndim == 3 and windows.q.shape[1] == 5
    svi = fit_svi(rollout_model, trajectories, key=0, steps=200, num_predictive=0, progress=False)
    _result_round_trip(rollout_model, svi, trajectories, tmp_path / "rollout.nc")
    assert set(svi.idata["log_likelihood"].data_vars) == {"obs_q", "obs_qd"}
    assert svi.idata["log_likelihood"]["obs_q"].shape[2] == windows.q.shape[0]
    with pytest.raises(ValueError, match="sampled at"):
        build_model("diffnea/viscous/informative", cartpole, likelihood="rollout", dt=0.01).prepare(
            trajectories
        )
    uniform = generate_dataset("cartpole", "uniform", seed=0, duration=0.2)
    with pytest.raises(ValueError, match="not trajectories"):
        rollout_model.prepare(uniform)


@pytest.mark.slow
def test_rollout_likelihood_is_fittable_by_nuts(rollout_model, trajectories):
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
    for site in a:
        np.testing.assert_allclose(a[site], b[site], rtol=1e-6, atol=1e-8)
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
