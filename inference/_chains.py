"""NUTS chains as programs shared by every model of the same structure.

NumPyro's ``MCMC`` compiles its sampling loop per ``MCMC`` object (the loop closes over the
kernel, which closes over the model), and ``HMC.init`` runs the kernel's initialisation (the
first potential and gradient) outside any compiled program. A grid of fits of one
variant on several datasets therefore traced, lowered and loaded the same loop again for every
fit (about 2.5 s a NUTS cell, docs/measurements.md). Here one chain, initialisation, warm-up and
draws, is one ``jax.jit`` program of NumPyro's own kernel (``numpyro.infer.hmc.hmc`` with
``potential_fn_gen``), the model going in as an argument (:mod:`models.arguments`), so it is
traced once per model structure and settings.

It runs what ``MCMC(NUTS(...)).run`` / ``.warmup`` run, key for key: a run's key is split into
one key per chain (where there are several), each chain's key into the kernel's key and the
(unused) key of NumPyro's model initialisation; the kernel is initialised at the chain's start,
takes ``num_warmup`` adapting steps and then ``num_samples`` collected ones. A continued
program (``continued=True``, ``MCMC.run`` after setting ``post_warmup_state``) takes the
collected steps from a stored state instead. Draws agree with ``MCMC`` up to the rounding of
another compiled program (tests/test_shared_programs.py).
"""

from __future__ import annotations

import functools
from operator import attrgetter
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.flatten_util import ravel_pytree
from numpyro.infer.hmc import hmc
from numpyro.infer.util import constrain_fn, potential_energy

from models.arguments import held_model, model_argument

NUTS_DEFAULTS = {
    "step_size": 1.0,
    "num_steps": None,
    "adapt_step_size": True,
    "adapt_mass_matrix": True,
    "dense_mass": False,
    "target_accept_prob": 0.8,
    "trajectory_length": None,
    "max_tree_depth": 10,
    "find_heuristic_step_size": False,
    "forward_mode_differentiation": False,
    "regularize_mass_matrix": True,
}
"""``numpyro.infer.NUTS``'s options as its ``init`` passes them to the kernel; a program's
``kernel`` overrides some."""
COLLECTED = ("z", "diverging")
"""Fields every run collects (``MCMC``'s defaults); a run's ``fields`` come after them."""


class ChainProgram(NamedTuple):
    """What a chain's program depends on besides its arrays (static, hashable).

    Fields:
        coordinates: ``"sites"``: the sampler's position is the dict of unconstrained latent
            sites (NumPyro's model-based NUTS); ``"flat"``: a flat vector (d,) of them in
            ``ravel_pytree`` order, or of a map's coordinates (``aux["transform"]``).
        layout: ``((site, shape, dtype name), ...)`` of the latent sites, sorted by name.
        whitened: ``"flat"`` only: the position is ``u`` with ``x = aux["x0"] + aux["L"] @ u``.
        num_warmup, num_samples: adapting steps, then collected ones (0: a warm-up only).
        kernel: sorted ``((option, value), ...)`` of ``init_kernel``'s static options.
        fields: state fields collected after :data:`COLLECTED` (e.g. ``"adapt_state.step_size"``).
        continued: the chain's start is a stored state (:func:`state_template`), which takes
            ``num_samples`` steps with no initialisation or warm-up (``num_warmup`` must be 0).
    """

    coordinates: str
    layout: tuple
    whitened: bool
    num_warmup: int
    num_samples: int
    kernel: tuple
    fields: tuple = ()
    continued: bool = False


def layout_of(sites: dict) -> tuple:
    """:attr:`ChainProgram.layout` of ``{site: array}`` (one chain's unconstrained values)."""
    return tuple(
        (k, tuple(np.shape(v)), jnp.result_type(v).name) for k, v in sorted(sites.items())
    )


def _unravel(program: ChainProgram):
    """Flat coordinates (d,) -> ``{site: value}`` in :attr:`ChainProgram.layout`."""
    template = {k: jnp.zeros(shape, dtype) for k, shape, dtype in program.layout}
    return ravel_pytree(template)[1]


def _potential_gen(program: ChainProgram):
    """``potential_fn_gen(argument, data, aux) -> potential`` for ``hmc``."""

    def gen(argument, data, aux):
        model = held_model(argument).model
        if program.coordinates == "sites":
            return lambda z: potential_energy(model, (data,), {}, z)
        unravel = _unravel(program)
        transform = aux.get("transform")

        def flat(x):
            if transform is None:
                return potential_energy(model, (data,), {}, unravel(x))
            z, log_jac = transform.forward(x)
            return potential_energy(model, (data,), {}, unravel(z)) - log_jac

        if not program.whitened:
            return flat
        return lambda u: flat(aux["x0"] + aux["L"] @ u)

    return gen


@functools.partial(jax.jit, static_argnums=0)
def _chain(program: ChainProgram, argument, data, aux, start, key):
    """One chain (module docstring): ``(collected fields, (num_samples, ...) each; last state)``."""
    init_kernel, sample_kernel = hmc(potential_fn_gen=_potential_gen(program), algo="NUTS")
    model_args = (argument, data, aux)
    if not program.continued:
        key, _ = jax.random.split(key)  # HMC.init's split: the second half seeds model init
    options = {**NUTS_DEFAULTS, **dict(program.kernel)}
    if program.coordinates == "sites":  # HMC.init's structured form for a model's sites
        sites = tuple(k for k, *_ in program.layout)
        options["dense_mass"] = [sites] if options["dense_mass"] else []
    if program.continued:
        # as MCMC's template `kernel.init(key, 0, ...)`: sets the kernel's closures (no warm-up
        # steps left, so the stored adaptation stays); its state is unused and compiled away
        init_kernel(start.z, 0, **options, model_args=model_args, rng_key=start.rng_key)
        state = start
    else:
        state = init_kernel(
            start,
            program.num_warmup,
            inverse_mass_matrix=aux.get("inverse_mass"),
            **options,
            model_args=model_args,
            rng_key=key,
        )

        def step(s, _):
            return sample_kernel(s, model_args=model_args), None

        state, _ = jax.lax.scan(step, state, None, length=program.num_warmup)
    if program.num_samples == 0:
        return {}, state
    get = attrgetter(*(COLLECTED + program.fields))

    def draw(s, _):
        s = sample_kernel(s, model_args=model_args)
        return s, dict(zip(COLLECTED + program.fields, get(s), strict=True))

    state, collected = jax.lax.scan(draw, state, None, length=program.num_samples)
    return collected, state


def run_chains(program: ChainProgram, bayes_model, data, aux: dict, starts, key):
    """``num_chains`` chains of ``program`` one after the other, as ``MCMC`` with
    ``chain_method="sequential"`` runs them.

    Args:
        bayes_model: the model (or a :class:`models.arguments.ModelArgument` of it).
        data: the model's data argument. aux: arrays of the program (``"inverse_mass"``: a fixed
            metric (d,) or (d, d), ``"transform"``, ``"x0"``, ``"L"``), each optional.
        starts: the chains' starts, each leaf with a leading chain axis (C, ...): positions,
            or a continued program's stored states (each carries its own key).
        key: the run's key (split into one per chain where C > 1); None when ``continued``.

    Returns:
        ``(collected {field: (C, num_samples, ...)}, last states (C, ...))``; a warm-up only
        (``num_samples == 0``) collects nothing.
    """
    argument = model_argument(bayes_model)
    num_chains = int(jax.tree.leaves(starts)[0].shape[0])
    if program.continued:
        keys = [None] * num_chains
    else:
        keys = jax.random.split(key, num_chains) if num_chains > 1 else key[None]
    runs = [
        _chain(
            program,
            argument,
            data,
            aux,
            jax.tree.map(lambda x, c=c: jnp.asarray(x[c]), starts),
            keys[c],
        )
        for c in range(num_chains)
    ]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *runs)


def state_template(program: ChainProgram, bayes_model, data, aux: dict, start, key):
    """One chain's state under ``program``'s kernel options, as shapes and dtypes (traced, not
    run): the structure into which :func:`inference._state.state_from_dataset` reads a stored
    state. ``start``: one chain's position; ``key``: a key of the run's kind."""
    fresh = program._replace(num_warmup=0, num_samples=0, continued=False)
    return jax.eval_shape(
        lambda a, d, x, s, k: _chain(fresh, a, d, x, s, k)[1],
        model_argument(bayes_model), data, aux, start, key,
    )


@functools.partial(jax.jit, static_argnums=0)
def _constrained(program: ChainProgram, argument, data, aux, positions):
    model = held_model(argument).model

    def one(x):
        if program.coordinates == "flat":
            transform = aux.get("transform")
            z = x if transform is None else transform.forward(x)[0]
            x = _unravel(program)(z)
        return constrain_fn(model, (data,), {}, x)

    return jax.vmap(jax.vmap(one))(positions)


def constrained_draws(program: ChainProgram, bayes_model, data, aux: dict, positions) -> dict:
    """``{site: (C, D, ...)}``: the latent sites' constrained values at the chains' positions
    (C, D, ...) (``collected["z"]`` of :func:`run_chains`), a map's coordinates mapped back."""
    if program.whitened:
        raise ValueError("constrained_draws: positions of an unwhitened program only")
    return _constrained(program, model_argument(bayes_model), data, aux, positions)
