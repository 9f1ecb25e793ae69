"""The complete model spec: JSON round trips, results that rebuild exactly the model that was
fitted (robot included, never looked up by name), the likelihood as a component (rollout
fittable). Fits of specs (NUTS on the rollout likelihood, sufficient statistics, identifiable
geometry, user URDFs, old formats) are in test_models_spec_fits.py."""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_density

import bayes_nea as bn
from analysis.rollouts import posterior_rollouts
from data import generate_dataset
from inference import fit_svi, load_result, save_result
from models import ModelSpec, build, build_model, variant_names

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)

# Non-default options cycled over the variants (small networks keep the compiles short).
OPTIONS = (
    {"geometry": "centered"},
    {"noise": "student-t", "student_df": None},  # learned degrees of freedom
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
    "ffnn",  # black-box network, Student-t noise with learned degrees of freedom
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
    density and dynamics, bit for bit, at a generic point (network weights not at zero)."""
    i = variant_names().index(name)
    model = build_model(name, cartpole, dt=1.0 / short_trajectories.rate_hz, **_options(i, name))
    rebuilt = build(ModelSpec.from_json(model.spec.to_json()))
    # a generic point of the latent space (NumPy draws: eager jax.random compiles per shape)
    rng = np.random.default_rng(i)
    shapes = jax.eval_shape(model.start_sample, jax.random.key(0))
    draw = {k: jnp.asarray(0.5 * rng.standard_normal(v.shape), v.dtype) for k, v in shapes.items()}
    _same_model(model, rebuilt, draw, short_trajectories)


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


def test_effort_noise_ensemble_fit_round_trips(cartpole, trajectories, tmp_path):
    """A network hybrid with noise on the effort (``likelihood="forward-effort"``) through the
    ensemble path: each member's two noise scales profiled, both calibrated on the validation
    episodes, and the saved result rebuilds the same model."""
    model = build_model(
        "diffnea/nn-friction/informative",
        cartpole,
        likelihood="forward-effort",
        nn_width=4,
        nn_depth=1,
    )
    train, valid = trajectories.split((0.7, 0.3), seed=0)
    fit = fit_svi(
        model, train, key=0, steps=6, chunk_size=3, restarts=2, validation=valid,
        num_predictive=0, log_likelihood=False, progress=False,
    )
    ens = fit.attrs["ensemble"]
    assert len(ens["noise_profile"]) == 2 and all(r["converged"] for r in ens["noise_profile"])
    assert set(ens["noise_calibration"]["factor"]) == {"log_sigma_qdd", "log_sigma_tau"}
    assert set(model.physical(jax.tree.map(lambda x: x[0], fit.posterior_samples()))) >= {
        "sigma_qdd", "sigma_tau"
    }
    _result_round_trip(model, fit, trajectories, tmp_path / "effort.nc")
