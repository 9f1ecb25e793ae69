"""No-Kin DiffNEA in kinematics-conditional base coordinates (models.identifiable).

References we did not write: numpy least squares on a regressor stacked at other states (the
base-parameter map at perturbed placements), Pinocchio's ABA on the URDF export of a robot with
the drawn placements and completed inertias, Pinocchio's pseudo-inertia (physical consistency),
and the true parameters of simulated data.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from conftest import Reference

import bayes_nea as bn
from inference import fit_nuts
from inference.polish import polish_map
from inference.result import trace_sites
from models import ModelData, build_model
from models.identifiable import KinematicIdentifiableModel, identifiable_model

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)


@pytest.fixture(scope="module")
def model():
    robot = bn.get_system("cartpole")
    m = identifiable_model(build_model("nokin-diffnea/viscous/informative", robot))
    return dataclasses.replace(m, completion_steps=40)


def _perturbed(model, seed):
    """A prior draw of every latent site (placements off the nominal ones)."""
    rng = np.random.default_rng(seed)
    sample = {k: np.asarray(v) for k, v in model.init_sample().items()}
    return {k: jnp.asarray(v + 0.8 * rng.standard_normal(v.shape)) for k, v in sample.items()}


def test_base_map_at_other_placements_matches_least_squares_on_other_states(model):
    assert isinstance(model, KinematicIdentifiableModel)
    robot = model.dynamics_robot
    for seed in range(3):
        sample = _perturbed(model, seed)
        rpy, xyz = model.kinematics(sample, jnp.float64)
        B = np.asarray(model.basis(rpy, xyz))
        # reference: numpy least squares on 64 other states at the same placements
        params = bn.RobotParams(jnp.zeros((robot.n, 10)), rpy, xyz)
        q, qd, qdd = bn.sample_states(robot, jax.random.key(100 + seed), 64)
        W = jax.vmap(lambda a, b, c, p=params: bn.joint_torque_regressor(robot, a, b, c, params=p))(
            q, qd, qdd
        )
        W = np.asarray(W).reshape(-1, 10 * robot.n)
        ind, dep = list(model.base.independent), list(model.base.dependent)
        K = np.linalg.lstsq(W[:, ind], W[:, dep], rcond=None)[0]
        np.testing.assert_allclose(B[:, dep], K, atol=1e-9)
        np.testing.assert_array_equal(B[:, ind], np.eye(len(ind)))
        # beta(k) is all the torques see: Y(k) theta = Y_ind(k) B(k) theta for any theta
        theta = np.random.default_rng(seed).normal(size=10 * robot.n)
        np.testing.assert_allclose(W @ theta, W[:, ind] @ (B @ theta), atol=1e-9)


def test_completed_draws_are_consistent_and_match_pinocchio_dynamics(model):
    robot = model.dynamics_robot
    draws = [_perturbed(model, seed) for seed in range(4)]
    flat = {k: jnp.stack([d[k] for d in draws]) for k in draws[0]}
    comp = model.complete(jax.random.key(0), flat)
    assert comp["completion_ok"].all()
    rng = np.random.default_rng(5)
    for i, sample in enumerate(draws):
        theta = comp["theta"][i]
        lam = [
            np.linalg.eigvalsh(pin.PseudoInertia.FromDynamicParameters(t).toMatrix())[0]
            for t in theta
        ]
        assert min(lam) > 0
        rpy, xyz = model.kinematics(sample, jnp.float64)
        B = model.basis(rpy, xyz)
        np.testing.assert_allclose(B @ theta.reshape(-1), model.beta(sample), rtol=1e-9)
        # Pinocchio's ABA on the URDF export of the completed body at the drawn placements
        drawn = dataclasses.replace(robot, nominal=bn.RobotParams(jnp.asarray(theta), rpy, xyz))
        ref = Reference(drawn, pin.buildModelFromXML(bn.to_urdf(drawn)))
        f = jax.jit(model.qdd_fn(sample))
        for _ in range(3):
            q, qd = rng.uniform(-1, 1, robot.n), rng.normal(size=robot.n)
            tau_d = rng.normal(size=robot.n)
            tau = np.asarray(model.actuator.torque(sample, jnp.asarray(tau_d), q, qd))
            expected = pin.aba(ref.model, ref.data, ref.q_pin(q), qd, tau)
            np.testing.assert_allclose(f(q, qd, tau_d), expected, rtol=1e-7, atol=1e-9)


def test_rejects_families_without_consistent_rigid_bodies():
    robot = bn.get_system("cartpole")
    for variant in ("nea", "ffnn"):
        with pytest.raises(ValueError, match="'diffnea' and 'nokin-diffnea'"):
            identifiable_model(build_model(variant, robot))


def test_nuts_defaults_with_learned_placements(model):
    """The curved map at target 0.99; Stribeck friction chooses between it and the adapted
    Laplace metric by the map's fourth-order rise (``inference.nuts.strongly_bent``)."""
    assert (model.nuts_metric, model.nuts_target_accept) == ("laplace-curved", 0.99)
    strib = identifiable_model(
        build_model("nokin-diffnea/stribeck/informative", bn.get_system("furuta"))
    )
    assert (strib.nuts_metric, strib.nuts_target_accept) == ("laplace-curved-or-adapt", 0.99)


@pytest.mark.slow
def test_nuts_recovers_base_parameters_and_placements_of_simulated_data(model):
    """Known truth: the nominal cart-pole simulated with the prior-median friction."""
    robot = bn.get_system("cartpole")
    truth_model = build_model("diffnea/viscous/informative", robot)
    truth = truth_model.init_sample(dtype=jnp.float64)
    q, qd, _ = bn.sample_states(robot, jax.random.key(1), 150)
    tau = jax.random.normal(jax.random.key(2), q.shape)
    qdd = jax.vmap(truth_model.qdd_fn(truth))(q, qd, tau)
    qdd = qdd + 0.05 * qdd.std(0) * jax.random.normal(jax.random.key(3), qdd.shape)
    data = model.prepare(ModelData(q, qd, qdd, tau))
    point, report = polish_map(model, data, model.init_sample(dtype=jnp.float64))
    assert report.converged, report.message
    fit = fit_nuts(
        model,
        data,
        key=0,
        num_warmup=120,
        num_samples=200,
        num_chains=2,
        init=point,
        progress=False,
        num_predictive=0,
        log_likelihood=False,
    )
    settings = fit.attrs["settings"]  # the model's defaults: NUTS in the curved Laplace map
    assert settings["metric"] == "laplace-curved" and settings["target_accept"] == 0.99
    d = fit.diagnostics()
    assert d["divergences"] == 0
    assert d["rhat_max"] < 1.05
    post = fit.idata["posterior"]
    # the true base parameters at the true placements (the z-axis form's nominal ones)
    zr = model.dynamics_robot
    beta_true = np.asarray(
        model.basis(jnp.asarray(zr.nominal.rpy), jnp.asarray(zr.nominal.xyz))
        @ jnp.asarray(zr.nominal.theta).reshape(-1)
    )
    beta = post["base_parameters"].values.reshape(-1, beta_true.size)
    z = np.abs(beta.mean(0) - beta_true) / beta.std(0)
    assert z.max() < 4, z
    assert post["completion_ok"].values.mean() > 0.9
    assert "rpy" in post and "xyz" in post


def test_sites_trace_at_the_weak_placement_priors_degenerate_mean():
    """The weak placement prior's mean (every rpy = xyz = 0: the joint axes along gravity) leaves
    the regressor rank-deficient, so ``B(k)`` and the predictions there are not finite; the site
    tracing that ``fit_svi`` and ``fit_nuts`` do first at the prior mean must still work (it
    raised "invalid loc parameter"), and the fits start from prior draws instead."""
    robot = bn.get_system("cartpole")
    m = build_model("nokin-diffnea/viscous/weak", robot, geometry="identifiable")
    q, qd, qdd = bn.sample_states(robot, 0, 16)
    data = ModelData(q, qd, qdd, jnp.zeros_like(q))
    latent, observed = trace_sites(m, data)
    assert {"base_z", "rpy_z", "xyz_z"} <= set(latent) and set(observed) == {"obs_qdd"}
    rpy, xyz = m.kinematics(latent, jnp.float64)
    assert not np.any(rpy) and not np.any(xyz)
    assert not bool(jnp.isfinite(m.basis(rpy, xyz)).all())  # why the trace must not validate
    assert m.multimodal_start
    for k in range(3):  # prior draws of the placements: a regular basis, finite predictions
        start = m.start_sample(jax.random.key(k))
        assert set(start) == set(latent)
        rpy, xyz = m.kinematics(start, jnp.float64)
        assert np.all(np.abs(rpy) > 0) and bool(jnp.isfinite(m.basis(rpy, xyz)).all())
        assert bool(jnp.isfinite(jax.vmap(m.qdd_fn(start))(q, qd, data.tau)).all())
