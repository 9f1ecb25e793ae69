"""Normal truncated to an LMI set (models.truncated_gaussian).

References we did not write: scipy's truncated normal (``scipy.stats.truncnorm``) and numerical
integration of the truncated density on a grid (numpy), with the set's membership from numpy's
eigenvalues.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from models.truncated_gaussian import (
    lmi_feasible_point,
    sample_truncated_normal,
    truncated_standard_normal,
)

INTERVALS = [
    (8.0, 9.0),
    (-20.0, -19.5),
    (-1e-3, 1e-3),
    (-np.inf, np.inf),
    (30.0, np.inf),
    (-2.0, 1.0),
]


def test_truncated_standard_normal_matches_scipy_including_far_tails():
    lo = jnp.asarray([a for a, _ in INTERVALS])
    hi = jnp.asarray([b for _, b in INTERVALS])
    n = 20_000
    keys = jax.random.split(jax.random.key(0), n * len(INTERVALS)).reshape(n, len(INTERVALS))
    draw = jax.jit(jax.vmap(jax.vmap(truncated_standard_normal)))
    x = np.asarray(draw(keys, jnp.broadcast_to(lo, keys.shape), jnp.broadcast_to(hi, keys.shape)))
    for j, (a, b) in enumerate(INTERVALS):
        ref = stats.truncnorm(a, b)
        assert np.all((x[:, j] >= a) & (x[:, j] <= b))
        se = ref.std() / np.sqrt(n)
        assert abs(x[:, j].mean() - ref.mean()) < 5 * se, (a, b)
        assert abs(x[:, j].std() / ref.std() - 1) < 0.03, (a, b)
        assert stats.kstest(x[:, j], ref.cdf).pvalue > 1e-3, (a, b)


# nu ~ N(0, I_2) truncated to {A(nu) > 0}: block 1 is [[a + x, c + y], [c + y, b - x]] (positive
# definite inside the disk of centre ((b - a) / 2, -c), radius (a + b) / 2: centre (2.5, 0),
# radius 1, so nu = 0 is outside and ~1 % of the normal's mass is inside); block 2 cuts the disk
# by the half-plane y > -0.3.
A0 = np.array([[[-1.5, 0.0], [0.0, 3.5]], [[0.3, 0.0], [0.0, 1.0]]])
A1 = np.array([[[1.0, 0.0], [0.0, -1.0]], [[0.0, 0.0], [0.0, 0.0]]])
A2 = np.array([[[0.0, 1.0], [1.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]]])


def _lmi(nu):
    a0, a1, a2 = (jnp.asarray(a, nu.dtype) for a in (A0, A1, A2))
    return a0 + nu[0] * a1 + nu[1] * a2


def _grid_moments():
    """Mean (2,) and covariance (2, 2) of the truncated normal by integration on a grid."""
    g = np.linspace(1.0, 4.0, 1201)
    h = np.linspace(-1.2, 1.2, 961)
    X, Y = np.meshgrid(g, h, indexing="ij")
    A = A0[None, None] + X[..., None, None, None] * A1 + Y[..., None, None, None] * A2
    inside = np.all(np.linalg.eigvalsh(A)[..., 0] > 0, axis=-1)
    w = inside * np.exp(-0.5 * (X**2 + Y**2))
    w /= w.sum()
    mean = np.array([(w * X).sum(), (w * Y).sum()])
    dx, dy = X - mean[0], Y - mean[1]
    cov = np.array(
        [[(w * dx * dx).sum(), (w * dx * dy).sum()], [(w * dx * dy).sum(), (w * dy * dy).sum()]]
    )
    return mean, cov, X, w


@pytest.fixture(scope="module")
def toy_draws():
    n = 4000
    draw = jax.jit(jax.vmap(lambda k: sample_truncated_normal(k, _lmi, 2, steps=100)))
    nu, ok, margin = draw(jax.random.split(jax.random.key(1), n))
    return np.asarray(nu), np.asarray(ok), np.asarray(margin)


def test_phase1_finds_an_interior_point_from_outside():
    assert np.linalg.eigvalsh(A0)[:, 0].min() < 0  # the start nu = 0 is outside the set
    nu, margin = jax.jit(lambda: lmi_feasible_point(_lmi, 2))()
    assert float(margin) > 0
    assert np.all(np.linalg.eigvalsh(np.asarray(_lmi(nu)))[:, 0] > 0)
    # an empty set: block 1's disk lies in y < -1, block 2 asks y > 0.5
    shift = np.array([[[0, 2.0], [2.0, 0]], [[-0.8, 0], [0, 0]]])
    empty = lambda nu: _lmi(nu) + jnp.asarray(shift, nu.dtype)  # noqa: E731
    _, margin = jax.jit(lambda: lmi_feasible_point(empty, 2))()
    assert float(margin) <= 0


def test_hit_and_run_matches_numerical_integration(toy_draws):
    nu, ok, _ = toy_draws
    assert ok.all()
    # every draw is in the set (numpy's eigenvalues)
    A = A0[None] + nu[:, 0, None, None, None] * A1 + nu[:, 1, None, None, None] * A2
    assert np.all(np.linalg.eigvalsh(A)[..., 0] > 0)
    mean, cov, X, w = _grid_moments()
    se = np.sqrt(np.diag(cov) / nu.shape[0])
    np.testing.assert_array_less(np.abs(nu.mean(0) - mean), 5 * se)
    np.testing.assert_allclose(np.cov(nu.T), cov, atol=0.08 * np.abs(cov).max())
    # the first coordinate's marginal: Kolmogorov-Smirnov against the integrated CDF
    xs = X[:, 0]
    cdf = np.cumsum(w.sum(axis=1))
    assert stats.kstest(nu[:, 0], lambda t: np.interp(t, xs, cdf)).pvalue > 1e-3


def test_draws_depend_on_the_key_only():
    f = jax.jit(lambda k: sample_truncated_normal(k, _lmi, 2, steps=20)[0])
    a, b = f(jax.random.key(5)), f(jax.random.key(5))
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, f(jax.random.key(6)))


def test_float32_draws_stay_inside():
    draw = jax.jit(
        jax.vmap(lambda k: sample_truncated_normal(k, _lmi, 2, steps=30, dtype=jnp.float32))
    )
    nu, ok, _ = draw(jax.random.split(jax.random.key(2), 200))
    assert nu.dtype == jnp.float32 and bool(ok.all())
    nu = np.asarray(nu, np.float64)
    A = A0[None] + nu[:, 0, None, None, None] * A1 + nu[:, 1, None, None, None] * A2
    assert np.all(np.linalg.eigvalsh(A)[..., 0] > 0)
