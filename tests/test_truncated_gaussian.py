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
    AffineLMI,
    lmi_feasible_point,
    sample_truncated_normal,
    symmetric_eigenvalues,
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


def _hard_symmetric_blocks(rng, n):
    """n random symmetric 4 x 4 blocks, with diagonal, clustered, rank-one and huge ones."""
    X = rng.normal(size=(n, 4, 4))
    S = X + np.swapaxes(X, -1, -2)
    S[:50] = np.diag([1.0, 1.0, 2.0, 3.0])  # already diagonal, a repeated eigenvalue
    S[50:100] = np.diag([1.0, 2.0, 3.0, 4.0]) + 1e-9 * S[50:100]  # nearly diagonal
    v = rng.normal(size=(50, 4))
    S[100:150] = v[:, :, None] * v[:, None, :]  # rank one
    S[150:200] *= 1e8
    return S


@pytest.mark.parametrize("dtype, tol", [(jnp.float64, 1e-14), (jnp.float32, 2e-6)])
def test_jacobi_eigenvalues_match_lapack(dtype, tol):
    """Against numpy's (LAPACK) eigenvalues in float64, relative to the block's largest."""
    S = _hard_symmetric_blocks(np.random.default_rng(0), 4000).astype(dtype)
    lam = jax.jit(symmetric_eigenvalues)(jnp.asarray(S))
    assert lam.dtype == dtype and lam.shape == S.shape[:-1]
    lam = np.sort(np.asarray(lam, np.float64), -1)
    ref = np.linalg.eigvalsh(S.astype(np.float64))
    scale = np.abs(ref).max(-1, keepdims=True)
    assert np.all(np.isfinite(lam))
    np.testing.assert_array_less(np.abs(lam - ref) / scale, tol)


def test_affine_lmi_logdet_derivatives_match_finite_differences():
    """Value against numpy's slogdet, gradient and Hessian against central differences of it."""
    rng = np.random.default_rng(1)
    k, m, r = 3, 2, 4
    X = rng.normal(size=(m, r, r))
    constant = X @ np.swapaxes(X, -1, -2) + r * np.eye(r)
    slopes = rng.normal(size=(k, m, r, r))
    slopes = 0.3 * (slopes + np.swapaxes(slopes, -1, -2))
    lmi = AffineLMI.of(
        lambda nu: jnp.asarray(constant) + jnp.tensordot(nu, slopes, 1), jnp.zeros(k)
    )
    np.testing.assert_allclose(lmi.slopes, slopes, atol=1e-15)

    def logdet(nu):
        return np.linalg.slogdet(constant + np.tensordot(nu, slopes, 1))[1].sum()

    nu, h = rng.normal(size=k) * 0.3, 1e-4
    value, gradient, hessian = lmi.logdet_derivatives(jnp.asarray(nu))
    np.testing.assert_allclose(value, logdet(nu), rtol=1e-12)
    E = np.eye(k) * h
    fd_grad = np.array([(logdet(nu + e) - logdet(nu - e)) / (2 * h) for e in E])
    np.testing.assert_allclose(gradient, fd_grad, rtol=1e-7, atol=1e-9)
    fd_hess = np.array(
        [
            [
                (logdet(nu + a + b) - logdet(nu + a - b) - logdet(nu - a + b) + logdet(nu - a - b))
                / (4 * h * h)
                for b in E
            ]
            for a in E
        ]
    )
    np.testing.assert_allclose(hessian, fd_hess, rtol=1e-5, atol=1e-6)


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
