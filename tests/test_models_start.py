"""Start points: no variant starts where a gradient vanishes (issue: network weights at 0, weak
placements with a vertical rail), data-derived scales, per-joint friction networks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro.infer.util import log_likelihood

import bayes_nea as bn
from models import build_model, data_scales, variant_names
from models.likelihoods import ModelData

FAST = ("ffnn", "diffnea/nn-friction/informative", "nokin-diffnea/viscous/weak")
# Blocks that cannot act on the cart-pole's likelihood at any value: the joint offsets of a
# prismatic-then-revolute chain move the whole tree rigidly along the rail (checked below: the
# gradient is zero at a second draw too), so their gradient vanishes by structure, not by the start.
STRUCTURAL_ZEROS = {"xyz_z"}


@pytest.fixture(scope="module")
def cartpole():
    robot = bn.get_system("cartpole")
    q, qd, qdd = bn.sample_states(robot, 3, 24)
    tau = jax.random.normal(jax.random.key(4), q.shape, q.dtype) * jnp.array([5.0, 0.0])
    return robot, ModelData(q, qd, qdd, tau)


def _likelihood_gradient_fn(model):
    """Jitted ``(point, prepared data) -> gradient of the log-likelihood`` (compiled once per
    model: a second start point reuses the program)."""

    def loglik(z, prepared):
        ll = log_likelihood(model.model, z, prepared, batch_ndims=0)
        return sum(jnp.sum(v) for v in ll.values())

    return jax.jit(jax.grad(loglik))


def _likelihood_gradients(model, data, point):
    return _likelihood_gradient_fn(model)(point, model.prepare(data))


def _check_variant(name, robot, data):
    model = build_model(name, robot)
    start = model.start_sample(jax.random.key(0))
    assert set(start) == set(model.latent_sites)
    gradient, prepared = _likelihood_gradient_fn(model), model.prepare(data)
    grads = gradient(start, prepared)
    norms = {k: float(jnp.linalg.norm(jnp.ravel(g))) for k, g in grads.items()}
    assert all(np.isfinite(v) for v in norms.values()), f"{name}: non-finite gradient {norms}"
    zero = {k for k, v in norms.items() if v == 0}
    assert zero <= STRUCTURAL_ZEROS, f"{name}: zero likelihood gradient at the start for {zero}"
    if zero:
        other = gradient(model.start_sample(jax.random.key(7)), prepared)
        for k in zero:
            assert float(jnp.abs(other[k]).max()) == 0.0, f"{name}: {k} is not structural"
    return model, start


@pytest.mark.parametrize("name", FAST)
def test_start_gradients_nonzero_for_every_block(name, cartpole):
    _check_variant(name, *cartpole)


@pytest.mark.slow
@pytest.mark.parametrize("name", [v for v in variant_names() if v not in FAST])
def test_start_gradients_nonzero_all_variants(name, cartpole):
    _check_variant(name, *cartpole)


def test_prior_mean_is_a_zero_gradient_point_for_networks(cartpole):
    # The failure the prior draws avoid: every hidden weight's gradient is exactly 0 at the mean.
    robot, data = cartpole
    model = build_model("ffnn", robot)
    mean = {k: jnp.zeros_like(v) for k, v in model.start_sample(jax.random.key(0)).items()}
    grads = _likelihood_gradients(model, data, mean)
    assert float(jnp.abs(grads["ffnn_net/layers[0].weight"]).max()) == 0.0


def test_start_draws_differ_by_key_and_keep_noise_at_median(cartpole):
    robot, _ = cartpole
    model = build_model("nokin-diffnea/viscous/weak", robot)
    a = model.start_sample(jax.random.key(0))
    b = model.start_sample(jax.random.key(1))
    assert not np.allclose(a["rpy_z"], b["rpy_z"])
    np.testing.assert_array_equal(a["log_sigma_qdd_z"], 0.0)
    assert (
        model.multimodal_start and not build_model("diffnea/viscous/weak", robot).multimodal_start
    )


def test_data_scales_rms_and_rigid_body_floor():
    robot = bn.get_system("cartpole")
    q, qd, qdd = bn.sample_states(robot, 5, 40)
    tau = jnp.stack([jnp.full(40, 3.0), jnp.zeros(40)], axis=1)
    s = data_scales(ModelData(q, qd, qdd, tau), robot)
    np.testing.assert_allclose(s["qd"], np.sqrt(np.mean(np.asarray(qd) ** 2, 0)))
    np.testing.assert_allclose(s["qdd"], np.sqrt(np.mean(np.asarray(qdd) ** 2, 0)))
    rb = np.asarray(jax.vmap(lambda a, b, c: bn.rnea(robot, a, b, c))(q, qd, qdd))
    expect = np.maximum([3.0, 0.0], np.sqrt(np.mean(rb**2, 0)))
    np.testing.assert_allclose(s["tau"], expect, rtol=1e-9)
    # a model built with them stores and uses them
    m = build_model("diffnea/nn-friction/informative", robot, scales=s)
    np.testing.assert_allclose(m.scales.tau, expect, rtol=1e-9)
    with pytest.raises(ValueError, match="data_scales"):
        data_scales(ModelData(q[:, :1], qd[:, :1], qdd[:, :1], tau[:, :1]), robot)


def test_nn_friction_is_per_joint_and_dissipative():
    robot = bn.get_system("cartpole")
    model = build_model("diffnea/nn-friction/weak", robot)
    sample = model.start_sample(jax.random.key(2))
    act = model.actuator
    q = jnp.array([0.1, 0.3])
    f = act.friction(sample, q, jnp.array([0.5, -1.0]))
    # joint 0's friction does not depend on joint 1's velocity or on the positions
    g = act.friction(sample, jnp.array([-0.2, 2.0]), jnp.array([0.5, 3.0]))
    assert float(f[0]) == pytest.approx(float(g[0]), rel=1e-12)
    qds = jax.random.normal(jax.random.key(3), (200, 2)) * 3.0
    power = jax.vmap(lambda v: act.friction(sample, q, v) @ v)(qds)
    assert float(power.max()) <= 0.0


def test_friction_priors_scale_with_the_system():
    from models.priors import WeakPrior, effort_scale

    furuta = bn.get_system("furuta")
    cart = bn.get_system("cartpole")
    # the bug: a Coulomb median of 0.02 N m was 80 % of the Furuta arm's 0.025 N m limit
    coulomb = np.exp(WeakPrior().friction(furuta, "coulomb").loc)
    assert coulomb[0] == pytest.approx(0.02 * 0.025)
    assert np.exp(WeakPrior().friction(cart, "viscous").loc)[0] == pytest.approx(
        0.05 * cart.effort_limit[0]
    )
    # the unactuated pendulum: rms of the nominal inverse dynamics over random states
    q, qd, qdd = bn.sample_states(furuta, 0, 64)
    tau = np.asarray(jax.vmap(lambda a, b, c: bn.rnea(furuta, a, b, c))(q, qd, qdd))
    assert effort_scale(furuta)[1] == pytest.approx(np.sqrt(np.mean(tau[:, 1] ** 2)), rel=1e-9)


def test_nuts_chains_start_at_distinct_prior_draws(cartpole):
    from inference.nuts import _initial_params

    robot, data = cartpole
    model = build_model("diffnea/nn-friction/weak", robot)
    latent = model.latent_sites
    init = _initial_params(model, model.prepare(data), jax.random.key(5), latent, 3)
    w = np.asarray(init["actuator/friction_net_0/layers[0].weight"])
    assert w.shape == (3, 32, 1)
    assert np.all(np.std(w, axis=0) > 0)  # three different draws, none at the zero mean
    np.testing.assert_array_equal(init["log_sigma_qdd_z"], 0.0)  # noise at its median
