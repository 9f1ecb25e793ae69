"""A model as a jit argument (models.arguments): one trace for models that differ only in their
array constants (normalisers, and a variant's two priors), and the same numbers as NumPyro's
potential energy of each model."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import potential_energy, unconstrain_fn

import bayes_nea as bn
from data import generate_dataset
from inference.laplace import _shared_hessian, potential_hessian
from models import build_model, data_scales, model_data
from models.arguments import held_model, model_argument
from models.identifiable import identifiable_where_possible

pytestmark = pytest.mark.standard_promotion  # runs NumPyro


@pytest.fixture(scope="module")
def cartpole():
    return bn.get_system("cartpole")


@pytest.fixture(scope="module")
def two_datasets(cartpole):
    """Two small datasets of other kinds, whose normalisers differ."""
    out = []
    for kind in ("trajectories", "uniform"):
        md = model_data(generate_dataset("cartpole", kind, seed=3, duration=0.4))
        out.append((md, data_scales(md, cartpole)))
    return out


def _models(cartpole, two_datasets, variant, *, identifiable=False, priors=None):
    """``[(model, data)]`` on each dataset; with ``priors``, the i-th model's prior is
    ``priors[i]`` (``variant`` is then ``family/actuator``)."""
    models = []
    for i, (md, scales) in enumerate(two_datasets):
        name = variant if priors is None else f"{variant}/{priors[i]}"
        bm = build_model(name, cartpole, scales=scales)
        models.append((identifiable_where_possible(bm)[0] if identifiable else bm, md))
    return models


BOTH_PRIORS = ("informative", "weak")


@pytest.mark.parametrize(
    "variant, identifiable, priors",
    [
        ("diffnea/nn-friction", False, BOTH_PRIORS),
        ("nokin-diffnea/stribeck", True, BOTH_PRIORS),
        ("ffnn", False, None),
    ],
)
def test_models_that_differ_in_constants_share_one_trace(
    cartpole, two_datasets, variant, identifiable, priors
):
    traces = []

    @jax.jit
    def energy_and_grad(argument, data, z):
        traces.append(1)
        model = held_model(argument).model
        return jax.value_and_grad(lambda u: potential_energy(model, (data,), {}, u))(z)

    models = _models(cartpole, two_datasets, variant, identifiable=identifiable, priors=priors)
    (a, _), (b, _) = models
    leaves_a, tree_a = jax.tree.flatten(model_argument(a))
    leaves_b, tree_b = jax.tree.flatten(model_argument(b))
    assert tree_a == tree_b and hash(tree_a) == hash(tree_b)
    assert any(not np.array_equal(x, y) for x, y in zip(leaves_a, leaves_b, strict=True))
    for bm, md in models:
        # a weak prior's median is no start (its placements put the rail along gravity)
        z = unconstrain_fn(bm.model, (md,), {}, bm.start_sample(jax.random.key(1)))
        value, grad = energy_and_grad(model_argument(bm), md, z)
        # NumPyro's own potential energy of this model object, its constants embedded
        ref_value, ref_grad = jax.value_and_grad(
            lambda u, bm=bm, md=md: potential_energy(bm.model, (md,), {}, u)
        )(z)
        assert float(value) == pytest.approx(float(ref_value), rel=1e-12)
        for k in ref_grad:
            np.testing.assert_allclose(grad[k], ref_grad[k], rtol=1e-10, atol=1e-12)
    assert len(traces) == 1


def test_a_program_that_reads_the_prior_fails_loudly(cartpole, two_datasets):
    """The prior is left out of the structure (its values are the sites' leaves): a traced
    function that reads it gets a stand-in that refuses, never the first model's prior."""
    (bm, _), (weak, _) = _models(cartpole, two_datasets, "diffnea/viscous", priors=BOTH_PRIORS)
    assert jax.tree.structure(model_argument(bm)) == jax.tree.structure(model_argument(weak))

    @jax.jit
    def starts_at_median(argument):
        return jnp.asarray(held_model(argument).prior.starts_at_median)

    with pytest.raises(TypeError, match="'prior' is not an argument of this compiled program"):
        starts_at_median(model_argument(weak))

    @jax.jit
    def variant_name(argument):
        return jnp.asarray(len(held_model(argument).spec.name))

    with pytest.raises(TypeError, match="'prior' is not an argument"):
        variant_name(model_argument(weak))


def test_another_structure_is_another_program(cartpole, two_datasets):
    md, scales = two_datasets[0]
    friction = build_model("diffnea/nn-friction/informative", cartpole, scales=scales)
    residual = build_model("diffnea/nn-residual/informative", cartpole, scales=scales)
    wide = build_model("diffnea/nn-friction/informative", cartpole, scales=scales, nn_width=8)
    trees = [jax.tree.structure(model_argument(m)) for m in (friction, residual, wide)]
    assert trees[0] != trees[1] and trees[0] != trees[2]
    # rebuilt around its own leaves, a model is the same function
    rebuilt = held_model(jax.tree.unflatten(trees[0], jax.tree.leaves(model_argument(friction))))
    assert type(rebuilt) is type(friction) and rebuilt is not friction
    z = unconstrain_fn(friction.model, (md,), {}, friction.init_sample())
    assert float(potential_energy(rebuilt.model, (md,), {}, z)) == float(
        potential_energy(friction.model, (md,), {}, z)
    )


def test_one_hessian_program_for_a_variant_on_two_datasets(cartpole, two_datasets):
    """The Laplace / polish Hessian of two identifiable models with other normalisers: one
    compiled program, each Hessian equal to ``jax.hessian`` of that model's potential."""
    models = _models(cartpole, two_datasets, "diffnea/stribeck/informative", identifiable=True)
    before = _shared_hessian._cache_size()
    for bm, md in models:
        z = unconstrain_fn(bm.model, (md,), {}, bm.init_sample())
        H = np.asarray(potential_hessian(bm, md, z))
        flat, unravel = ravel_pytree(z)

        def energy(x, bm=bm, md=md, unravel=unravel):
            return potential_energy(bm.model, (md,), {}, unravel(x))

        ref = jax.hessian(energy)(flat)
        np.testing.assert_allclose(H, np.asarray(ref), rtol=1e-8, atol=1e-8 * np.abs(ref).max())
    assert _shared_hessian._cache_size() == before + 1
    first_leaves = [jax.tree.leaves(model_argument(m))[0] for m, _ in models]
    assert not jnp.allclose(*first_leaves)
