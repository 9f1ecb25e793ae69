"""Loops and XLA's CPU backend: a ``lax.scan`` compiled kernel by kernel, a call compiled as one
function.

XLA's CPU compiler turns every ``while`` loop that holds no sort, scatter, custom call or
collective into a single function ("small while loop hoisting", applied whatever the loop's size
in practice), and LLVM then optimises that function as a whole. For a loop body with a few
2-joint forward dynamics this is fast; for the four 7-joint ABAs of an RK4 step of the Panda, or
the gradient of a rollout likelihood, LLVM's cost grows faster than the body: a Panda rollout
compiled in ~115 s, a 1-ABA loop over 1,000 draws in 40 s (2.9 s kernel by kernel, same run
time). See docs/dynamics-speed.md.

:func:`scan` keeps the loop a loop of kernels: it carries a zero through a two-element sort (which
the hoisting pass refuses) and adds it to the carry's floating leaves, in the forward loop and,
through a custom VJP, in the backward loop of a gradient. The added zero changes no value. The
same effect for a whole process: ``XLA_FLAGS=--xla_backend_extra_options=
xla_cpu_small_while_loop_byte_threshold=0`` (which also covers loops outside bayes-nea, e.g.
NumPyro's NUTS).

:func:`one_function` uses the same pass the other way: one state's dynamics, a few thousand
scalar operations, run faster as one function than as hundreds of kernel launches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp


def _sorted_min(g: jax.Array) -> jax.Array:
    """``g`` itself, computed by a sort XLA cannot see through."""
    return jax.lax.sort(jnp.stack([g, g]))[0]


def _add_to_floats(tree, g: jax.Array):
    def add(x):
        x = jnp.asarray(x)
        return x + g.astype(x.dtype) if jnp.issubdtype(x.dtype, jnp.floating) else x

    return jax.tree.map(add, tree)


@jax.custom_vjp
def _keep_loop(carry, g):
    g = _sorted_min(g)
    return _add_to_floats(carry, g), g


def _keep_loop_fwd(carry, g):
    return _keep_loop(carry, g), None


def _keep_loop_bwd(_, cotangents):
    ct_carry, ct_g = cotangents
    ct_g = _sorted_min(ct_g)
    return _add_to_floats(ct_carry, ct_g), ct_g


_keep_loop.defvjp(_keep_loop_fwd, _keep_loop_bwd)


def scan(
    f: Callable[[Any, Any], tuple[Any, Any]],
    init,
    xs=None,
    length: int | None = None,
):
    """``jax.lax.scan(f, init, xs, length)``, compiled kernel by kernel on the CPU (see above).

    Plain ``lax.scan`` remains the choice where one function is wanted (the faster run for small
    bodies, the slower compile for large ones).
    """

    def body(carry_guard, x):
        carry, guard = carry_guard
        carry, y = f(carry, x)
        return _keep_loop(carry, guard), y

    leaves = [jnp.asarray(x) for x in jax.tree.leaves(init)]
    floats = [x.dtype for x in leaves if jnp.issubdtype(x.dtype, jnp.floating)]
    guard = jnp.zeros((), jnp.result_type(*floats) if floats else float)
    (carry, _), ys = jax.lax.scan(body, (init, guard), xs, length=length)
    return carry, ys


def one_function(fn: Callable, *args):
    """``fn(*args)`` compiled by XLA's CPU backend as one function instead of kernel by kernel.

    The call sits in a ``while`` loop of one trip that the hoisting pass above turns into a
    single function: one state's dynamics then pay one call instead of a few hundred kernel
    launches (Panda ABA, one state: ~840 kernels; docs/dynamics-speed.md). The trip count passes
    through an ``optimization_barrier`` so that XLA neither removes the loop nor hoists its body
    (every input is carried, moved by ``0 * output``, so no part of ``fn`` is loop invariant). For
    forward evaluation of small programs only: reverse-mode differentiation does not pass a
    ``while`` loop, and a batched body is better compiled kernel by kernel (:func:`scan`).
    """
    out = jax.eval_shape(fn, *args)
    zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), out)
    trips = jax.lax.optimization_barrier(jnp.int32(1))

    def body(carry):
        i, inputs, _ = carry
        result = fn(*inputs)
        first = [jnp.ravel(x)[0] for x in jax.tree.leaves(result) if jnp.size(x)]
        nudge = 0.0 * first[0] if first else jnp.zeros(())
        return i + 1, _add_to_floats(inputs, nudge), result

    _, _, result = jax.lax.while_loop(
        lambda carry: carry[0] < trips, body, (jnp.int32(0), args, zeros)
    )
    return result
