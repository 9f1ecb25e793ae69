"""The registry of 26 variants: each builds, traces, has a finite log density at prior draws and
fits a tiny dataset by SVI (AutoDelta, a few scanned steps); plus the registry's errors."""

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
from numpyro import handlers
from numpyro.infer import SVI, Trace_ELBO
from numpyro.infer.autoguide import AutoDelta
from numpyro.infer.initialization import init_to_value
from numpyro.infer.util import log_density

import bayes_nea as bn
from models import ModelData, ModelSpec, build_model, describe, model_data, variant_names

N_DATA = 24
SVI_STEPS = 150


@pytest.fixture(scope="module")
def cartpole():
    return bn.get_system("cartpole")


@pytest.fixture(scope="module")
def data(cartpole):
    """Noise-free uniform states of the cart-pole with viscous friction (true: nominal damping)."""
    q, qd, _ = bn.sample_states(cartpole, 3, N_DATA)
    tau = jax.random.normal(jax.random.key(4), q.shape, q.dtype) * jnp.asarray([[2.0, 0.0]])
    damping = jnp.asarray(cartpole.damping)
    qdd = jax.jit(jax.vmap(lambda a, b, t: bn.aba(cartpole, a, b, t - damping * b)))(q, qd, tau)
    return ModelData(q, qd, qdd, tau)


def test_registry_has_the_26_variants():
    names = variant_names()
    assert len(names) == 26 == len(set(names))
    assert names.count("nea") == 1 and names.count("ffnn") == 1
    for family in ("nokin-diffnea", "diffnea"):
        for actuator in ("ideal", "viscous", "stribeck", "nn-friction", "nn-residual", "ffnn"):
            for prior in ("informative", "weak"):
                name = f"{family}/{actuator}/{prior}"
                assert name in names
                assert ModelSpec.parse(name) == ModelSpec(family, actuator, prior)
                assert ModelSpec(family, actuator, prior).name == name
    assert all(describe(n) for n in names)


def _latent_and_observed(model, data):
    """Site names of one trace of the model, traced abstractly (nothing is compiled)."""
    sites = {}

    def record():
        tr = handlers.trace(handlers.seed(model.model, 0)).get_trace(data)
        sites.update({k: s["is_observed"] for k, s in tr.items() if s["type"] == "sample"})
        return 0.0

    jax.eval_shape(record)
    return {k for k, obs in sites.items() if not obs}, {k for k, obs in sites.items() if obs}


@pytest.mark.parametrize("name", variant_names())
def test_variant_builds_traces_and_has_finite_density(name, cartpole, data):
    model = build_model(name, cartpole)
    assert model.name == name
    latent, observed = _latent_and_observed(model, data)
    assert latent == set(model.latent_sites)
    assert observed and all(k.startswith("obs_") for k in observed)
    assert model.energy_class in ("conserving", "dissipative", "unbounded")

    # run eagerly: op-by-op executables are shared by all variants, while jitting would compile
    # one graph per variant (about 5 s each on 2 cores)
    draws = [handlers.seed(model.sample_latent, k)(data.q.dtype) for k in range(3)]
    assert all(set(d) == latent for d in draws)
    density = [log_density(model.model, (data,), {}, d)[0] for d in draws]
    phys = jax.tree.map(lambda *x: jnp.stack(x), *[model.physical(d) for d in draws])
    # finite log density at draws from the prior
    assert np.all(np.isfinite(np.asarray(density)))
    # physical is pure, vmappable over draws, and finite
    for value in phys.values():
        assert value.shape[0] == 3 and np.all(np.isfinite(np.asarray(value)))
    # the likelihoods' batch path (networks on the states' rows) is each state's qdd_fn
    batch = model.qdd_batch(draws[0], data.q, data.qd, data.tau)
    per_state = jax.vmap(model.qdd_fn(draws[0]))(data.q, data.qd, data.tau)
    assert batch.shape == data.q.shape
    np.testing.assert_allclose(np.asarray(batch), np.asarray(per_state), rtol=1e-10, atol=1e-10)
    if model.family.white_box:
        assert phys["theta"].shape == (3, cartpole.n, 10)
        if name != "nea":  # NEA's Gaussian theta need not be physical; the others always are
            assert np.all(np.asarray(bn.is_physically_consistent(phys["theta"])))
    else:
        assert "theta" not in phys


def _svi_losses(model, data):
    """A tiny SVI loop: AutoDelta from ``init_sample``, Adam, scanned updates (one compile)."""
    init = model.init_sample(key=jax.random.key(1))
    guide = AutoDelta(model.model, init_loc_fn=init_to_value(values=init))
    svi = SVI(model.model, guide, numpyro.optim.Adam(1e-2), Trace_ELBO())

    @jax.jit
    def fit(key):
        def step(state, _):
            return svi.update(state, data)

        return jax.lax.scan(step, svi.init(key, data), None, length=SVI_STEPS)[1]

    return np.asarray(fit(jax.random.key(3)))


def _check_fit(losses):
    assert np.all(np.isfinite(losses))
    assert losses[-10:].mean() < losses[0] - 1.0


# about 4 s of compilation per variant on 2 cores: one variant of each kind (white-box +
# dissipative, no-Kin + network, black box) runs in the fast suite, the rest are marked slow
FAST_FIT = ("diffnea/viscous/informative", "nokin-diffnea/nn-friction/weak", "ffnn")


@pytest.mark.parametrize(
    "name",
    [n if n in FAST_FIT else pytest.param(n, marks=pytest.mark.slow) for n in variant_names()],
)
def test_every_variant_fits_by_svi(name, cartpole, data):
    _check_fit(_svi_losses(build_model(name, cartpole), data))


def test_unknown_names_and_bad_options(cartpole):
    with pytest.raises(ValueError, match="valid variants are.*diffnea/viscous/weak"):
        build_model("diffnea/viscos/weak", cartpole)
    with pytest.raises(ValueError, match="valid actuators"):
        ModelSpec("diffnea", "coulomb", "weak")
    with pytest.raises(ValueError, match="valid values are"):
        build_model("diffnea/viscous/weak", cartpole, likelihood="backward")
    with pytest.raises(ValueError, match="likelihood='inverse'"):
        build_model("nea", cartpole, likelihood="forward")
    with pytest.raises(ValueError, match="no closed-form inverse"):
        build_model("diffnea/ffnn/weak", cartpole, likelihood="inverse")
    with pytest.raises(ValueError, match="nokin-diffnea"):
        build_model("nea", cartpole, kinematics="unknown")
    with pytest.raises(ValueError, match="no actuator"):
        ModelSpec("nea", "viscous")


def test_bad_data_is_rejected(cartpole, data):
    model = build_model("diffnea/ideal/weak", cartpole)
    seeded = handlers.seed(model.model, 0)
    three = ModelData(*(jnp.concatenate([x, x[:, :1]], axis=1) for x in data))
    with pytest.raises(ValueError, match="n = 2 joints"):
        seeded(three)
    with pytest.raises(ValueError, match="no samples"):
        seeded(ModelData(*(x[:0] for x in data)))
    with pytest.raises(ValueError, match="NaN"):
        seeded(data._replace(qdd=data.qdd.at[3, 1].set(jnp.nan)))
    with pytest.raises(ValueError, match=r"\(W, H \+ 1, n\)"):
        handlers.seed(build_model("diffnea/ideal/weak", cartpole, likelihood="rollout").model, 0)(
            data
        )

    class FakeDataset:
        system = "furuta"
        joint_names = ("arm", "pendulum")

        def arrays(self):
            return tuple(np.asarray(x) for x in data)

    with pytest.raises(ValueError, match="do not match robot"):
        model_data(FakeDataset(), robot=cartpole)
