"""Programs traced once for every model of a structure (models.arguments): the SVI chunk, the
identifiable completion, the posterior rollouts, the Laplace energies and the gradient norms.
Two cart-pole models that differ only in their array constants (the normalisers of two datasets)
share each program, and so does the variant's other prior (its values are array constants too)
for the programs after the fit. Each model's numbers equal those of a program that closes over
that model (NumPyro's SVI, NumPyro's potential energy, JAX's gradient)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from numpyro.infer.util import potential_energy, unconstrain_fn

import analysis.rollouts as rollouts
import bayes_nea as bn
import inference.svi as svi
from data import generate_dataset
from inference import fit_svi
from inference.laplace import _potential_energies, _shared_energies
from models import build_model, data_scales, model_data
from models.identifiable import (
    BASE_SITE,
    _complete_chunk,
    identifiable_where_possible,
    pseudo_inertia_np,
)

pytestmark = pytest.mark.standard_promotion  # runs NumPyro

VARIANT = "diffnea/viscous/informative"


@pytest.fixture(scope="module")
def models():
    """``[(model, data)]`` on two dataset kinds: equal structures, other normalisers."""
    robot = bn.get_system("cartpole")
    out = []
    for kind in ("trajectories", "uniform"):
        md = model_data(generate_dataset("cartpole", kind, seed=3, duration=0.4))
        bm = build_model(VARIANT, robot, scales=data_scales(md, robot))
        out.append((identifiable_where_possible(bm)[0], md))
    return out


@pytest.fixture(scope="module")
def both_priors(models):
    """:func:`models` and the first dataset's model with the weak prior."""
    bm, md = models[0]
    weak_variant = VARIANT.replace("informative", "weak")
    weak = build_model(weak_variant, bm.robot, scales=data_scales(md, bm.robot))
    return [*models, (identifiable_where_possible(weak)[0], md)]


@pytest.fixture(scope="module")
def validation():
    """Held-out data of each dataset kind of :func:`models`, for early stopping."""
    return [
        model_data(generate_dataset("cartpole", kind, seed=4, duration=0.4))
        for kind in ("trajectories", "uniform")
    ]


def _points(bm, md, count=3):
    z = unconstrain_fn(bm.model, (md,), {}, bm.init_sample())
    flat, unravel = ravel_pytree(z)
    shifts = 0.01 * jnp.arange(count, dtype=flat.dtype)[:, None]
    return flat[None] + shifts, unravel


def test_svi_fits_share_one_chunk_program_and_match_numpyro_svi(models, validation, monkeypatch):
    """The SVI chunk and the early-stopping score (held-out NLL at the guide's median)."""

    def fit(bm, md, val):
        result = fit_svi(
            bm, md, key=1, steps=30, guide="delta", validation=val, chunk_size=10, progress=False
        )
        post = result.idata.posterior
        out = {k: np.asarray(post[k].values) for k in post.data_vars}
        out["validation scores"] = np.asarray(result.attrs["early_stopping"][0]["scores"])
        return out

    traces = []

    def counted(function, static):
        def traced(*args):
            traces.append(function.__name__)
            return function(*args)

        return jax.jit(traced, static_argnums=static)

    monkeypatch.setattr(svi, "_SHARED_CHUNK", counted(svi._shared_chunk, (0, 4)))
    monkeypatch.setattr(svi, "_SHARED_SCORE", counted(svi._shared_score, 0))
    shared = []
    for (bm, md), val in zip(models, validation, strict=True):
        before = len(traces)
        shared.append(fit(bm, md, val))
        shared[-1]["traces"] = len(traces) - before
    assert shared[0]["traces"] >= 2  # a chunk and the score
    assert shared[1]["traces"] == 0  # the second model ran the first's programs
    assert shared[0]["validation scores"].size >= 3
    # the reference: NumPyro's SVI over each model object (a program of its own)
    monkeypatch.setattr(svi, "_shared_svi", lambda *args, **kwargs: None)
    for (bm, md), val, got in zip(models, validation, shared, strict=True):
        ref = fit(bm, md, val)
        assert len(ref) == len(got) - 1 > 0
        for k in ref:
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-12, atol=1e-14, err_msg=k)


def test_rollouts_of_a_model_method_share_one_program(both_priors):
    q0, qd0 = jnp.array([0.1, 2.0]), jnp.zeros(2)
    sizes = []
    for bm, _ in both_priors:
        draws = jax.tree.map(lambda x: jnp.stack([x, 1.01 * x]), bm.init_sample())
        got = rollouts.make_rollout_fn(bm.qdd_fn, steps=25)(draws, q0, qd0)
        # the reference: a function that is not a model's method closes over the model
        ref = rollouts.make_rollout_fn(lambda d, bm=bm: bm.qdd_fn(d), steps=25)(draws, q0, qd0)
        assert np.all(np.isfinite(got.q))
        np.testing.assert_array_equal(got.q, ref.q)
        np.testing.assert_array_equal(got.qd, ref.qd)
        sizes.append(rollouts._SHARED_ROLLOUT._cache_size())
    assert sizes[0] >= 1 and sizes[2] == sizes[1] == sizes[0]


def test_completion_shares_one_program(both_priors):
    sizes = []
    for bm, _ in both_priors:
        draws, completion = bm.sample_prior(jax.random.PRNGKey(0), 4)
        theta = np.asarray(completion["theta"])
        assert np.all(np.asarray(completion["completion_ok"]))
        # each completed body has the draw's base parameters
        beta = np.asarray(jax.vmap(bm.condition.beta)(draws[BASE_SITE]))
        got = theta.reshape(4, -1) @ np.asarray(bm.base.to_base).T
        np.testing.assert_allclose(got, beta, rtol=1e-8, atol=1e-10)
        # and is physically consistent: positive definite pseudo-inertia of every link
        assert np.all(np.linalg.eigvalsh(pseudo_inertia_np(theta.reshape(-1, 10)))[:, 0] > 0)
        sizes.append(_complete_chunk._cache_size())
    assert sizes[0] >= 1 and sizes[2] == sizes[1] == sizes[0]  # the others ran the first's program


def test_energies_and_gradient_norms_match_numpyro_and_share_programs(both_priors):
    sizes = []
    for bm, md in both_priors:
        flat, unravel = _points(bm, md)
        got = np.asarray(_potential_energies(bm, md, flat, unravel))
        ref = [float(potential_energy(bm.model, (md,), {}, unravel(x))) for x in flat]
        np.testing.assert_allclose(got, ref, rtol=1e-12)
        points = jax.vmap(unravel)(flat)
        norms = svi.gradient_norms(bm, md, points)
        energy = jax.jit(
            lambda v, bm=bm, md=md, u=unravel: potential_energy(bm.model, (md,), {}, u(v))
        )
        for x, norm in zip(flat, norms, strict=True):
            ref = float(jnp.linalg.norm(jax.grad(energy)(x)))
            assert norm == pytest.approx(ref, rel=1e-10)
        sizes.append((_shared_energies._cache_size(), svi._shared_gradient_norms._cache_size()))
    assert min(sizes[0]) >= 1 and sizes[2] == sizes[1] == sizes[0]


@pytest.mark.parametrize("metric", ["laplace", "laplace-adapt", "softplus-adapt"])
def test_nuts_chains_share_one_program_and_match_numpyro_mcmc(both_priors, metric):
    """Sequential chains run as inference._chains programs: draws, tree sizes and the stored
    state equal NumPyro's MCMC (the path fit_nuts takes for parallel chains; on one device it
    runs them one after the other) up to the rounding of another program, and the other
    models of the structure trace no new chain program."""
    import warnings

    from inference import _chains, fit_nuts

    def fit(bm, md, chain_method):
        # from the polished MAP: from a point far from the mode the step-size search is chaotic
        # (any rounding changes the trees), as NUTS's warm-up in the grid never is
        start = fit_svi(bm, md, key=0, steps=300, polish=True, progress=False)
        with warnings.catch_warnings():  # "parallel" on one device: NumPyro's fallback warning
            warnings.simplefilter("ignore", UserWarning)
            return fit_nuts(
                bm, md, key=1, init=start, metric=metric, num_warmup=30,
                num_samples=10, num_chains=2, chain_method=chain_method, progress=False,
                num_predictive=0, log_likelihood=False, complete=False,
            )

    bm, md = both_priors[0]
    ours, numpyro_mcmc = fit(bm, md, "sequential"), fit(bm, md, "parallel")
    assert ours.attrs["settings"]["metric"] == metric
    a = ours.posterior_samples(group_by_chain=True)
    b = numpyro_mcmc.posterior_samples(group_by_chain=True)
    assert sorted(a) == sorted(b)
    for k in a:
        # the same draws (others would differ by about a posterior sd, 0.05-0.5 here)
        np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=1e-5, atol=1e-5)
    sa, sb = (f.idata["sample_stats"] for f in (ours, numpyro_mcmc))
    np.testing.assert_array_equal(sa["n_steps"].values, sb["n_steps"].values)
    np.testing.assert_allclose(sa["step_size"].values, sb["step_size"].values, rtol=1e-6)
    na, nb = (f.idata["nuts_state"] for f in (ours, numpyro_mcmc))
    assert sorted(na.data_vars) == sorted(nb.data_vars)  # the same state: `extend` continues it

    def extend(previous, chain_method):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return fit_nuts(
                bm, md, key=2, extend=previous, num_samples=10, num_chains=2,
                chain_method=chain_method, progress=False, num_predictive=0,
                log_likelihood=False, complete=False,
            )

    # the same stored chains continued by a continued program and by MCMC's post_warmup_state
    longer, longer_mcmc = extend(ours, "sequential"), extend(ours, "parallel")
    a = longer.posterior_samples(group_by_chain=True)
    b = longer_mcmc.posterior_samples(group_by_chain=True)
    for k in a:
        assert a[k].shape[1] == 20
        np.testing.assert_array_equal(a[k][:, :10], np.asarray(ours.posterior_samples(
            group_by_chain=True)[k]))
        np.testing.assert_allclose(np.asarray(a[k]), np.asarray(b[k]), rtol=1e-5, atol=1e-5)
    sa, sb = (f.idata["sample_stats"] for f in (longer, longer_mcmc))
    np.testing.assert_array_equal(sa["n_steps"].values, sb["n_steps"].values)
    na, nb = (f.idata["nuts_state"] for f in (longer, longer_mcmc))
    for leaf in na.data_vars:  # the last states too: counters, positions, adaptation, keys
        np.testing.assert_allclose(na[leaf].values, nb[leaf].values, rtol=1e-5, atol=1e-5)
    traced = _chains._chain._cache_size()
    for other, other_md in both_priors[1:]:
        fit(other, other_md, "sequential")
    assert _chains._chain._cache_size() == traced
