"""Actuator models: energy classes, closed forms (DiffNEA section 3), inverses, and the energy of
the uncontrolled system under a dissipative actuator."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numpyro import handlers

import bayes_nea as bn
from models import build_model, energy_class
from models._sites import characteristic_scales
from models.actuators import ACTUATOR_NAMES, make_actuator
from models.priors import get_prior

N_DRAWS = 64
N_STATES = 64


@pytest.fixture(scope="module")
def furuta():
    return bn.get_system("furuta")


def _draws(actuator, n_draws, seed=0):
    """Prior draws of the actuator's latent sites, stacked along a leading axis."""
    draws = [handlers.seed(actuator.sample, k)(jnp.float64) for k in range(seed, seed + n_draws)]
    return jax.tree.map(lambda *x: jnp.stack(x), *draws)


def _states(robot, key):
    q, qd, _ = bn.sample_states(robot, key, N_STATES)
    # include exact zeros and tiny velocities, where sign(qd) switches
    qd = qd.at[:4].set(0.0).at[4:8].multiply(1e-9)
    return q, qd


def _power(actuator, draws, q, qd):
    """tau . qd (draws, states) with tau_d = 0."""

    def one(sample):
        tau = jax.vmap(lambda a, b: actuator.torque(sample, jnp.zeros_like(a), a, b))(q, qd)
        return jnp.sum(tau * qd, axis=1)

    return np.asarray(jax.vmap(one)(draws))


@pytest.mark.parametrize("prior", ["informative", "weak"])
@pytest.mark.parametrize("name", ["viscous", "stribeck", "nn-friction"])
def test_dissipative_actuators_never_create_energy(name, prior, furuta):
    scales = characteristic_scales(furuta)
    actuator = make_actuator(name, furuta, get_prior(prior), scales)
    assert actuator.energy_class == energy_class(name) == "dissipative"
    power = _power(actuator, _draws(actuator, N_DRAWS), *_states(furuta, 5))
    assert power.shape == (N_DRAWS, N_STATES)
    assert np.all(power <= 0.0)
    assert np.any(power < -1e-6)  # and they do dissipate


@pytest.mark.parametrize("name", ["nn-residual", "ffnn"])
def test_unbounded_actuators_can_create_energy(name, furuta):
    actuator = make_actuator(name, furuta, get_prior("weak"), characteristic_scales(furuta))
    assert actuator.energy_class == "unbounded"
    power = _power(actuator, _draws(actuator, 16), *_states(furuta, 6))
    assert np.any(power > 1e-9)


def test_energy_classes_cover_all_actuators():
    classes = {name: energy_class(name) for name in ACTUATOR_NAMES}
    assert classes == {
        "ideal": "conserving",
        "viscous": "dissipative",
        "stribeck": "dissipative",
        "nn-friction": "dissipative",
        "nn-residual": "unbounded",
        "ffnn": "unbounded",
    }
    with pytest.raises(ValueError, match="valid actuators"):
        energy_class("coulomb")


def test_viscous_and_stribeck_match_their_formulas(furuta):
    scales = characteristic_scales(furuta)
    q, qd = _states(furuta, 7)
    tau_d = jax.random.normal(jax.random.key(8), q.shape, q.dtype)
    for name in ("viscous", "stribeck"):
        actuator = make_actuator(name, furuta, get_prior("weak"), scales)
        sample = handlers.seed(actuator.sample, 3)(jnp.float64)
        c = {k: np.asarray(v) for k, v in actuator.physical(sample).items()}
        assert all(np.all(v > 0) for v in c.values())
        torque = jax.vmap(lambda t, a, b, act=actuator, s=sample: act.torque(s, t, a, b))
        tau = np.asarray(torque(tau_d, q, qd))
        Q, T = np.asarray(qd), np.asarray(tau_d)
        expected = T - c["viscous"][None] * Q
        if name == "stribeck":  # DiffNEA section 3, with nu_s = 1 / v_s^2
            static = c["coulomb"][None] + c["stribeck_amplitude"][None] * np.exp(
                -((Q / c["stribeck_velocity"][None]) ** 2)
            )
            expected = expected - np.sign(Q) * static
        np.testing.assert_allclose(tau, expected, rtol=1e-12, atol=1e-14)
        # the joint-major rows (the identifiable likelihood's path): the same formula
        rows = actuator.torque_joint_major(sample, tau_d.T, q.T, qd.T)
        np.testing.assert_allclose(np.asarray(rows).T, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("system", ["furuta", "cartpole"])
@pytest.mark.parametrize("name", ["ideal", "nn-friction", "nn-residual", "ffnn"])
def test_joint_major_torque_is_the_torque_of_each_state(name, system):
    """The joint-major paths of the network actuators (networks on the rows) and the ideal
    actuator's: column s of the (n, N) result is the torque of state s (revolute and prismatic
    joints' features)."""
    robot = bn.get_system(system)
    actuator = make_actuator(name, robot, get_prior("weak"), characteristic_scales(robot))
    sample = handlers.seed(actuator.sample, 2)(jnp.float64)
    q, qd = _states(robot, 11)
    tau_d = jax.random.normal(jax.random.key(12), q.shape, q.dtype)
    per_state = jax.vmap(lambda t, a, b: actuator.torque(sample, t, a, b))(tau_d, q, qd)
    rows = actuator.torque_joint_major(sample, tau_d.T, q.T, qd.T)
    assert rows.shape == (robot.n, q.shape[0])
    np.testing.assert_allclose(np.asarray(rows).T, np.asarray(per_state), rtol=1e-12, atol=1e-14)


def test_network_rows_are_the_equinox_network_and_its_gradient():
    """``BayesianNet.apply_rows`` (feature-major) equals equinox's MLP applied to each input, and
    so do the gradients of a loss through it with respect to every weight and the inputs."""
    from models._sites import BayesianNet

    net = BayesianNet("net", 3, 2, width=8, depth=2)
    sample = net.draw(jax.random.key(0), jnp.float64)
    x = jax.random.normal(jax.random.key(1), (3, 40), jnp.float64)

    def reference(sample, x):
        module = net.module(sample, x.dtype)
        return jnp.sum(jnp.sin(jax.vmap(module, in_axes=1, out_axes=1)(x)))

    def rows(sample, x):
        return jnp.sum(jnp.sin(net.apply_rows(sample, x)))

    module = net.module(sample, jnp.float64)
    assert len(sample) == 6  # three layers' weights and biases
    np.testing.assert_allclose(
        np.asarray(net.apply_rows(sample, x)),
        np.asarray(jax.vmap(module, in_axes=1, out_axes=1)(x)),
        rtol=1e-13,
        atol=1e-14,
    )
    got, want = jax.grad(rows, (0, 1))(sample, x), jax.grad(reference, (0, 1))(sample, x)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("name", ["ideal", "viscous", "stribeck", "nn-friction", "nn-residual"])
def test_command_inverts_torque(name, furuta):
    actuator = make_actuator(name, furuta, get_prior("weak"), characteristic_scales(furuta))
    assert actuator.invertible
    sample = handlers.seed(actuator.sample, 1)(jnp.float64)
    q, qd = _states(furuta, 9)
    tau_d = jax.random.normal(jax.random.key(10), q.shape, q.dtype)
    tau = jax.vmap(lambda t, a, b: actuator.torque(sample, t, a, b))(tau_d, q, qd)
    back = jax.vmap(lambda t, a, b: actuator.command(sample, t, a, b))(tau, q, qd)
    np.testing.assert_allclose(np.asarray(back), np.asarray(tau_d), rtol=1e-12, atol=1e-12)


def test_residual_has_joint_local_parts_that_can_jump_at_rest(furuta):
    """nn-residual = per-joint networks of (qd_i, sign qd_i) + a scaled whole-state network.
    (1) With the whole-state network's output layer at 0, joint i's torque depends on qd_i
    alone (finite differences in q and in the other joints' velocities vanish). (2) The joint
    parts express Coulomb friction exactly, jump at qd = 0 included: weights chosen by hand give
    ``tau = tau_d - f_c sign(qd)`` (closed form). (3) The whole-state network enters with the
    documented scale (its output layer's bias b gives ``-tau_scale c b``)."""
    from models.actuators import RESIDUAL_COUPLED_SCALE

    scales = characteristic_scales(furuta)
    actuator = make_actuator("nn-residual", furuta, get_prior("weak"), scales)
    sample = dict(handlers.seed(actuator.sample, 3)(jnp.float64))
    coupled = actuator.net.name + "/layers[2]."
    for k in (coupled + "weight", coupled + "bias"):
        sample[k] = jnp.zeros_like(sample[k])
    q, qd = _states(furuta, 13)
    tau_d = jax.random.normal(jax.random.key(14), q.shape, q.dtype)

    def torque(s, a, b):
        return np.asarray(jax.vmap(lambda t, x, v: actuator.torque(s, t, x, v))(tau_d, a, b))

    base, h = torque(sample, q, qd), 1e-6
    moving = np.abs(qd) > 1e-3  # away from the jump
    for j in range(furuta.n):
        dq = torque(sample, q.at[:, j].add(h), qd)
        np.testing.assert_allclose(dq, base, rtol=0, atol=1e-12)
        dqd = torque(sample, q, qd.at[:, j].add(h))
        other = [i for i in range(furuta.n) if i != j]
        np.testing.assert_allclose(dqd[:, other], base[:, other], rtol=0, atol=1e-12)
        assert np.any(np.abs(dqd[moving[:, j], j] - base[moving[:, j], j]) > 1e-12)

    # Coulomb by hand: hidden layer 0 unit 0 = tanh(w sign), unit 1.. = 0; layer 1 passes unit
    # 0 through tanh again; the output divides the two tanh gains away
    f_c = np.array([0.004, 0.0007])
    w = 2.0
    tau_scale = np.asarray(scales.tau)
    for i, net in enumerate(actuator.joint_nets):
        p = net.name + "/layers["
        for k in list(sample):
            if k.startswith(net.name + "/"):
                sample[k] = jnp.zeros_like(sample[k])
        sample[p + "0].weight"] = sample[p + "0].weight"].at[0, 1].set(w)
        sample[p + "1].weight"] = sample[p + "1].weight"].at[0, 0].set(w)
        gain = np.tanh(w * np.tanh(w))
        sample[p + "2].weight"] = sample[p + "2].weight"].at[0, 0].set(f_c[i] / tau_scale[i] / gain)
    np.testing.assert_allclose(
        torque(sample, q, qd), np.asarray(tau_d) - f_c[None] * np.sign(qd), rtol=1e-12, atol=1e-15
    )
    sample[coupled + "bias"] = jnp.array([0.3, -0.2])
    np.testing.assert_allclose(
        torque(sample, q, qd),
        np.asarray(tau_d) - f_c[None] * np.sign(qd)
        - (tau_scale * RESIDUAL_COUPLED_SCALE * np.array([0.3, -0.2]))[None],
        rtol=1e-12, atol=1e-15,
    )


def test_ffnn_actuator_is_the_command_plus_a_network(furuta):
    """``tau = tau_d + tau_scale f_NN``: with the output layer at 0 the FF-NN actuator is the ideal
    one; the output bias b adds ``tau_scale b`` at every state."""
    scales = characteristic_scales(furuta)
    actuator = make_actuator("ffnn", furuta, get_prior("weak"), scales)
    sample = dict(handlers.seed(actuator.sample, 4)(jnp.float64))
    out = actuator.net.name + "/layers[2]."
    sample[out + "weight"] = jnp.zeros_like(sample[out + "weight"])
    sample[out + "bias"] = jnp.zeros_like(sample[out + "bias"])
    q, qd = _states(furuta, 15)
    tau_d = jax.random.normal(jax.random.key(16), q.shape, q.dtype)

    def torque(s):
        return np.asarray(jax.vmap(lambda t, a, b: actuator.torque(s, t, a, b))(tau_d, q, qd))

    np.testing.assert_array_equal(torque(sample), np.asarray(tau_d))
    sample[out + "bias"] = jnp.array([0.5, -1.0])
    np.testing.assert_allclose(
        torque(sample),
        np.asarray(tau_d) + (np.asarray(scales.tau) * np.array([0.5, -1.0]))[None],
        rtol=1e-12, atol=1e-15,
    )


def test_ffnn_actuator_has_no_inverse(furuta):
    actuator = make_actuator("ffnn", furuta, get_prior("weak"), characteristic_scales(furuta))
    assert not actuator.invertible
    with pytest.raises(ValueError, match="no closed-form inverse"):
        actuator.command({}, None, None, None)


def test_uncontrolled_energy_decays_with_a_dissipative_model(furuta):
    """RK4 rollout of a prior draw of no-Kin DiffNEA + viscous: total energy never grows."""
    model = build_model("nokin-diffnea/viscous/informative", furuta)
    sample = model.init_sample()
    sample = {
        k: v + 0.3 * jax.random.normal(jax.random.key(2), v.shape, v.dtype)
        for k, v in sample.items()
    }
    robot = model.dynamics_robot
    params = model.family.params(sample)
    steps = 500

    @jax.jit
    def rollout():
        traj = bn.integrate(
            model.qdd_fn(sample),
            jnp.array([0.0, 2.5]),
            jnp.array([1.0, 0.0]),
            jnp.zeros((steps, 2)),
        )
        return jax.vmap(lambda q, qd: bn.total_energy(robot, q, qd, params=params))(traj.q, traj.qd)

    energy = np.asarray(rollout())
    assert np.all(np.diff(energy) <= 1e-9 * np.abs(energy).max())
    assert energy[-1] < energy[0] - 1e-6


def test_a_network_first_built_inside_jit_keeps_concrete_structure():
    """The MLP structure shared by every network of one shape (``models._sites._mlp``, built
    once) holds concrete arrays also when it is first asked for while a model is traced: a
    tracer kept there would fail every later use outside that trace."""
    from models._sites import BayesianNet, _mlp

    _mlp.cache_clear()
    net = BayesianNet("test/net", in_size=3, out_size=2, width=5, depth=2)
    x = jnp.array([0.1, -0.2, 0.3])

    @jax.jit
    def traced(sample):
        return net.module(sample, jnp.float64)(x)

    weights = net.draw(jax.random.key(1), jnp.float64)  # outside jit: this fills the cache
    _mlp.cache_clear()  # emptied again, so that the traced call below is the first to ask
    inside = traced(weights)
    leaves = jax.tree.leaves(net.template)
    assert not any(isinstance(v, jax.core.Tracer) for v in leaves)
    assert sum(isinstance(v, jax.Array) for v in leaves) == 6  # 3 weights, 3 biases
    # the same network evaluated outside any trace (reference: the layers written out)
    outside = net.module(weights, jnp.float64)(x)
    h = x
    for i in range(3):
        W, b = weights[f"test/net/layers[{i}].weight"], weights[f"test/net/layers[{i}].bias"]
        h = W @ h + b
        h = jnp.tanh(h) if i < 2 else h
    np.testing.assert_allclose(inside, h, rtol=1e-12)
    np.testing.assert_allclose(outside, h, rtol=1e-12)
