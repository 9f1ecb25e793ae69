"""``bayes_nea.loops.scan``: the values and gradients of ``lax.scan``, and loops that XLA's CPU
backend keeps as loops of kernels (forward and backward)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bayes_nea.loops import one_function, scan


def body(carry, x):
    q, qd, count = carry
    qdd = -jnp.sin(q) * x - 0.1 * qd**3
    qd = qd + 0.01 * qdd
    q = q + 0.01 * qd
    return (q, qd, count + 1), jnp.cos(q) * qd


def run(scan_fn, a, xs):
    (q, qd, count), ys = scan_fn(body, (a * jnp.ones(3, xs.dtype), jnp.zeros(3, xs.dtype), 0), xs)
    return q, qd, count, ys


def loss(scan_fn, a, xs):
    q, qd, _, ys = run(scan_fn, a, xs)
    return jnp.sum(q**2) + jnp.sum(qd) + jnp.sum(ys)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float64])
def test_values_and_gradient_are_those_of_lax_scan(dtype):
    xs = jnp.asarray(np.outer(np.linspace(0.5, 2.0, 40), np.ones(3)), dtype)
    a = jnp.asarray(0.7, dtype)
    ours, plain = run(scan, a, xs), run(jax.lax.scan, a, xs)
    for x, y in zip(ours, plain, strict=True):
        assert jnp.asarray(x).dtype == jnp.asarray(y).dtype
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert int(ours[2]) == 40  # integer carry passes through untouched
    g = jax.grad(loss, argnums=(1, 2))(scan, a, xs)
    g_ref = jax.grad(loss, argnums=(1, 2))(jax.lax.scan, a, xs)
    for x, y in zip(g, g_ref, strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-6, atol=0)


def small_calls(fn, *args) -> int:
    """How many loops XLA's CPU backend turned into one function in the compiled ``fn``."""
    return jax.jit(fn).lower(*args).compile().as_text().count('xla_cpu_small_call="true"')


def test_loops_stay_loops_of_kernels_forward_and_backward():
    xs = jnp.ones((20, 3)) * 0.3
    a = jnp.asarray(0.7)
    # The behaviour worked around: a plain scan becomes one function (forward and backward).
    assert small_calls(lambda a, xs: run(jax.lax.scan, a, xs)[3], a, xs) >= 1
    assert small_calls(jax.grad(lambda a, xs: loss(jax.lax.scan, a, xs)), a, xs) >= 1
    assert small_calls(lambda a, xs: run(scan, a, xs)[3], a, xs) == 0
    assert small_calls(jax.grad(lambda a, xs: loss(scan, a, xs)), a, xs) == 0
    assert small_calls(jax.vmap(lambda a: run(scan, a, xs)[3]), jnp.ones(4)) == 0


def entry_kernels(fn, *args) -> int:
    """Fusions (kernels) launched by the entry computation of the compiled ``fn``."""
    text = jax.jit(fn).lower(*args).compile().as_text()
    return text[text.index("ENTRY") :].count(" fusion(")


def test_one_function_compiles_one_function_with_the_same_values():
    def staged(x, y):  # ten stages: ten kernels or more when compiled as it stands
        for _ in range(10):
            x = jax.lax.optimization_barrier(jnp.sin(x) * y)
        return {"x": x, "sum": x.sum() + y}

    x, y = jnp.linspace(0.1, 1.0, 5), jnp.asarray(1.5)
    once = jax.jit(lambda x, y: one_function(staged, x, y))
    ref = staged(x, y)
    out = once(x, y)
    for k in ref:
        np.testing.assert_allclose(np.asarray(out[k]), np.asarray(ref[k]), rtol=1e-15, atol=0)
    assert entry_kernels(staged, x, y) >= 10
    assert small_calls(lambda x, y: one_function(staged, x, y), x, y) == 1
    assert entry_kernels(lambda x, y: one_function(staged, x, y), x, y) <= 3
    # the one trip runs whatever the values: a NaN input gives NaN where it reaches, not zeros
    out = once(x.at[0].set(jnp.nan), y)
    assert np.isnan(np.asarray(out["x"])[0]) and np.isfinite(np.asarray(out["x"])[1:]).all()
