"""Inertia parameterisations, physical consistency, positive maps.

Bodies under test are built independently of the maps: Pinocchio's boxes, ellipsoids and
cylinders placed at random poses (``SE3.act``), and point-mass clouds summed by hand. Reference
values come from Pinocchio (``Inertia``, ``PseudoInertia``, ``LogCholeskyParameters``), closed
forms (the notes' Jacobian determinant, Reuss et al.'s element formulas) and ``jax.scipy``'s
Pade ``expm``. Tolerances: 1e-10 (relative) for float64 round trips, 1e-4 for float32.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import bayes_nea as bn
from bayes_nea import inertia as bi
from bayes_nea import positive

NAMES = ("theta", "diffnea", "log-cholesky", "diffbary", "matrix-exp")
PHYSICAL = NAMES[1:]
RTOL = 1e-10


def _pose(rng):
    return pin.SE3(pin.exp3(rng.normal(size=3)), rng.normal(0, 0.3, 3))


def _point_cloud(rng, count=7):
    """theta of point masses: m = sum m_k, h = sum m_k x_k, I = sum m_k (|x|^2 1 - x x^T)."""
    masses = rng.uniform(0.05, 1.0, count)
    xs = rng.normal(0, 0.2, (count, 3)) + rng.normal(0, 0.3, 3)
    I = sum(mk * (x @ x * np.eye(3) - np.outer(x, x)) for mk, x in zip(masses, xs, strict=True))
    h = masses @ xs
    return np.array([masses.sum(), *h, I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]])


def random_bodies(seed: int, count: int) -> np.ndarray:
    """(count, 10) physically consistent bodies with distinct principal moments."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(count):
        kind = k % 3
        if kind == 0:
            I = pin.Inertia.FromBox(rng.uniform(0.1, 5), *rng.uniform(0.02, 1.0, 3))
        elif kind == 1:
            I = pin.Inertia.FromEllipsoid(rng.uniform(0.1, 5), *rng.uniform(0.02, 0.5, 3))
        if kind < 2:
            out.append(_pose(rng).act(I).toDynamicParameters())
        else:
            out.append(_point_cloud(rng))
    return np.stack(out)


@pytest.fixture(scope="module")
def bodies() -> np.ndarray:
    return random_bodies(0, 30)


def canonical_x(name: str, rng: np.random.Generator, count: int) -> np.ndarray:
    """Random parameter vectors in each map's canonical domain, drawn without the map."""
    x = rng.normal(0, 1, (count, 10))
    if name == "diffnea":
        x[:, 0] = rng.uniform(0.3, 2.0, count)  # sqrt m
        x[:, 1:4] = -np.sort(-rng.uniform(0.05, 0.8, (count, 3)), axis=1)  # sqrt L descending
        axis = rng.normal(size=(count, 3))
        axis /= np.linalg.norm(axis, axis=1, keepdims=True)
        x[:, 4:7] = axis * rng.uniform(0, 1.5, (count, 1))  # rotation angle < pi / 2
        x[:, 7:10] = rng.normal(0, 0.3, (count, 3))
    elif name == "diffbary":
        x[:, :4] = np.abs(x[:, :4]) + 0.05  # Cholesky factor with positive diagonal
    return x


def assert_theta_close(actual, desired, rtol=RTOL):
    """Per-body relative closeness: |a - d| <= rtol * max|d| of that body."""
    actual, desired = np.asarray(actual), np.asarray(desired)
    scale = np.max(np.abs(desired), axis=-1, keepdims=True)
    diff = np.abs(actual - desired)
    np.testing.assert_array_less(diff, np.broadcast_to(rtol * scale, diff.shape))


# --- registry ---------------------------------------------------------------------------------


def test_registry_lists_the_five_names_and_their_dims():
    assert bi.PARAMETERIZATION_NAMES == NAMES
    for name in NAMES:
        p = bn.get_parameterization(name)
        assert p.name == name and p.dim == 10 and len(p.names) == p.dim
        assert p.always_physical == (name != "theta")
        assert bn.get_parameterization(p) is p
    with pytest.raises(ValueError, match="valid names are.*log-cholesky"):
        bn.get_parameterization("cholesky")


# --- pseudo-inertia and consistency ------------------------------------------------------------


def test_pseudo_inertia_agrees_with_pinocchio(bodies):
    J = np.asarray(bn.pseudo_inertia(bodies))
    for theta, Jk in zip(bodies, J, strict=True):
        ref = pin.Inertia.FromDynamicParameters(theta).toPseudoInertia().toMatrix()
        np.testing.assert_allclose(Jk, ref, rtol=0, atol=1e-14)
        back = pin.PseudoInertia.FromMatrix(Jk).toDynamicParameters()
        np.testing.assert_allclose(np.asarray(bn.theta_from_pseudo_inertia(Jk)), back, atol=1e-14)
    np.testing.assert_allclose(np.asarray(bn.theta_from_pseudo_inertia(J)), bodies, atol=1e-14)


def _triangle_consistent(theta: np.ndarray) -> bool:
    """Independent criterion: m > 0, principal moments about the CoM > 0 and triangle inequalities."""
    if theta[0] <= 0:
        return False
    I = pin.Inertia.FromDynamicParameters(theta).inertia  # about the CoM (Pinocchio)
    D = np.linalg.eigvalsh(I)
    return bool(D[0] > 0 and D[2] < D[0] + D[1])


def test_is_physically_consistent_matches_triangle_inequalities(bodies):
    rng = np.random.default_rng(1)
    perturbed = bodies + rng.normal(0, 1, bodies.shape) * np.abs(bodies).max(axis=1, keepdims=True) * 0.3
    perturbed[::4, 0] *= -1  # some negative masses
    cases = np.concatenate([bodies, perturbed])
    expected = np.array([_triangle_consistent(t) for t in cases])
    assert expected[: len(bodies)].all() and not expected[len(bodies) :].all()
    got = np.asarray(bn.is_physically_consistent(cases))
    np.testing.assert_array_equal(got, expected)
    # any batch shape; NaN is inconsistent; a margin rejects nearly-flat bodies
    assert bn.is_physically_consistent(cases.reshape(2, -1, 10)).shape == (2, len(bodies))
    assert not bool(bn.is_physically_consistent(np.full(10, np.nan)))
    flat = pin.Inertia.FromBox(1.0, 1.0, 1.0, 1e-4).toDynamicParameters()
    assert bool(bn.is_physically_consistent(flat)) and not bool(bn.is_physically_consistent(flat, tol=1e-6))


# --- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_theta_round_trip_on_random_bodies(name, bodies):
    x = bn.bodies_from_theta(name, bodies)
    assert x.shape == (len(bodies), 10) and bool(jnp.all(jnp.isfinite(x)))
    assert_theta_close(bn.bodies_to_theta(name, x), bodies)
    # the single-body methods agree with the vmapped ones
    p = bn.get_parameterization(name)
    assert_theta_close(p.to_theta(p.from_theta(bodies[3])), bodies[3])


@pytest.mark.parametrize("name", NAMES)
def test_parameter_round_trip_on_canonical_inputs(name):
    x = canonical_x(name, np.random.default_rng(2), 40)
    back = np.asarray(bn.bodies_from_theta(name, bn.bodies_to_theta(name, x)))
    np.testing.assert_allclose(back, x, rtol=RTOL, atol=RTOL)


@pytest.mark.parametrize("name", PHYSICAL)
def test_random_unconstrained_inputs_give_positive_definite_pseudo_inertia(name):
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.normal(0, 1, (200, 10)), rng.normal(0, 3, (50, 10))])
    theta = np.asarray(bn.bodies_to_theta(name, x))
    lam = np.linalg.eigvalsh(np.asarray(bn.pseudo_inertia(theta)))
    assert np.all(lam[:, 0] > 0), lam[:, 0].min()
    assert bool(jnp.all(bn.is_physically_consistent(theta)))
    # non-canonical inputs still map back to the same body
    assert_theta_close(bn.bodies_to_theta(name, bn.bodies_from_theta(name, theta[:50])), theta[:50], 1e-8)


def test_raw_theta_is_unconstrained_and_has_a_check():
    x = np.random.default_rng(4).normal(0, 1, (50, 10))
    theta = bn.bodies_to_theta("theta", x)
    np.testing.assert_array_equal(np.asarray(theta), x)
    ok = np.asarray(bn.is_physically_consistent(theta))
    assert not ok.all()
    with pytest.raises(ValueError, match=r"not physically consistent .* index \(\d+,\)"):
        bn.check_physically_consistent(theta)
    bn.check_physically_consistent(random_bodies(5, 6))  # passes


# --- agreement with Pinocchio and closed forms -------------------------------------------------


def test_log_cholesky_agrees_with_pinocchio():
    rng = np.random.default_rng(6)
    jac = jax.jit(jax.jacfwd(bi.log_cholesky_to_theta))
    for phi in rng.normal(0, 1, (20, 10)):
        ref = pin.LogCholeskyParameters(phi)
        np.testing.assert_allclose(
            np.asarray(bi.log_cholesky_to_theta(jnp.asarray(phi))), ref.toDynamicParameters(), rtol=1e-12
        )
        np.testing.assert_allclose(np.asarray(jac(jnp.asarray(phi))), ref.calculateJacobian(), rtol=1e-11, atol=1e-12)
        J = np.asarray(bn.pseudo_inertia(ref.toDynamicParameters()))
        np.testing.assert_allclose(J, ref.toPseudoInertia().toMatrix(), rtol=1e-12, atol=1e-13)


def test_log_cholesky_jacobian_determinant_closed_form():
    """Notes: det(d theta / d phi) = 32 e^(20 alpha) e^(2 d1) e^(3 d2) e^(4 d3)."""
    jac = jax.jit(jax.jacfwd(bi.log_cholesky_to_theta))
    for phi in np.random.default_rng(7).normal(0, 0.7, (20, 10)):
        alpha, d1, d2, d3 = phi[:4]
        expected = 32 * np.exp(20 * alpha + 2 * d1 + 3 * d2 + 4 * d3)
        det = np.linalg.det(np.asarray(jac(jnp.asarray(phi))))
        assert det == pytest.approx(expected, rel=1e-9)


def test_diffnea_agrees_with_pinocchio_inertia_construction():
    """theta of DiffNEA parameters vs Pinocchio's Inertia(m, c, R J_p R^T)."""
    rng = np.random.default_rng(8)
    for x in rng.normal(0, 1, (20, 10)):
        m, L = x[0] ** 2, x[1:4] ** 2
        R = pin.exp3(x[4:7])
        Jp = np.diag([L[1] + L[2], L[0] + L[2], L[0] + L[1]])
        ref = pin.Inertia(m, x[7:10], R @ Jp @ R.T).toDynamicParameters()
        np.testing.assert_allclose(np.asarray(bi.diffnea_to_theta(jnp.asarray(x))), ref, rtol=1e-12, atol=1e-14)


def test_diffbary_agrees_with_reuss_element_formulas():
    """Reuss et al. eqs. 20-21 (l_y corrected to e h + b i, the (1, 3) entry of A A^T)."""
    r = bi.DIFFBARY_BIAS
    for x in np.random.default_rng(9).normal(0, 1, (10, 10)):
        a, b, c, d, e, f, g, h, i, j = x
        expected = [
            h * h + i * i + j * j + d * d + r,  # m
            a * h,  # l_x
            e * h + b * i,  # l_y
            f * h + g * i + c * j,  # l_z
            e * e + b * b + f * f + g * g + c * c + 2 * r,  # L_xx
            -a * e,  # L_xy
            a * a + f * f + g * g + c * c + 2 * r,  # L_yy
            -a * f,  # L_xz
            -e * f - g * b,  # L_yz
            a * a + e * e + b * b + 2 * r,  # L_zz
        ]
        np.testing.assert_allclose(np.asarray(bi.diffbary_to_theta(jnp.asarray(x))), expected, rtol=1e-13)


def test_matrix_exp_agrees_with_pade_expm_and_its_gradient():
    def reference(gamma):
        T = jnp.zeros((4, 4), gamma.dtype).at[np.triu_indices(4)].set(gamma)
        T = T + jnp.triu(T, 1).T
        return bn.theta_from_pseudo_inertia(jax.scipy.linalg.expm(T))

    rng = np.random.default_rng(10)
    ours, theirs = jax.jit(jax.jacfwd(bi.matrix_exp_to_theta)), jax.jit(jax.jacfwd(reference))
    # includes gamma = 0 and a diagonal T: repeated eigenvalues, where eigh-based JVPs break
    cases = [np.zeros(10), np.array([0.3, 0, 0, 0, 0.3, 0, 0, -1.0, 0, -1.0])]
    for gamma in [*cases, *rng.normal(0, 1, (10, 10))]:
        g = jnp.asarray(gamma)
        np.testing.assert_allclose(np.asarray(bi.matrix_exp_to_theta(g)), np.asarray(reference(g)), rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(np.asarray(ours(g)), np.asarray(theirs(g)), rtol=1e-9, atol=1e-10)


def test_eigen_decomposition_is_singular_at_equal_moments_log_cholesky_is_not():
    """A cylinder has two equal principal moments: the DiffNEA (eigen) Jacobian loses rank."""
    rng = np.random.default_rng(11)
    cylinder = _pose(rng).act(pin.Inertia.FromCylinder(2.0, 0.1, 0.6)).toDynamicParameters()
    box = _pose(rng).act(pin.Inertia.FromBox(2.0, 0.1, 0.3, 0.6)).toDynamicParameters()
    jac_eig = jax.jit(jax.jacfwd(bi.diffnea_to_theta))
    jac_lc = jax.jit(jax.jacfwd(bi.log_cholesky_to_theta))

    def ratio(J):
        s = np.linalg.svd(np.asarray(J), compute_uv=False)
        return s[-1] / s[0]

    x_cyl = bi.diffnea_from_theta(jnp.asarray(cylinder))
    x_box = bi.diffnea_from_theta(jnp.asarray(box))
    assert_theta_close(bi.diffnea_to_theta(x_cyl), cylinder)
    assert ratio(jac_eig(x_cyl)) < 1e-12  # singular: rotation about the symmetry axis
    assert ratio(jac_eig(x_box)) > 1e-4  # regular for distinct moments
    phi = bi.log_cholesky_from_theta(jnp.asarray(cylinder))
    alpha, d1, d2, d3 = np.asarray(phi[:4])
    det = np.linalg.det(np.asarray(jac_lc(phi)))
    assert det == pytest.approx(32 * np.exp(20 * alpha + 2 * d1 + 3 * d2 + 4 * d3), rel=1e-9)
    assert ratio(jac_lc(phi)) > 1e-6


# --- jit, grad, vmap, float32 -------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_jit_grad_and_float32(name, bodies):
    p = bn.get_parameterization(name)
    x64 = canonical_x(name, np.random.default_rng(12), 8)
    x32 = jnp.asarray(x64, dtype=jnp.float32)
    theta32 = jax.jit(jax.vmap(p.to_theta))(x32)
    assert theta32.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(theta32), np.asarray(bn.bodies_to_theta(name, x64)), rtol=1e-4, atol=1e-5)
    back32 = bn.bodies_from_theta(name, jnp.asarray(bodies[:8], jnp.float32))
    assert back32.dtype == jnp.float32
    assert_theta_close(bn.bodies_to_theta(name, back32), bodies[:8], 1e-4)
    # gradients of both directions are finite (float64 and float32)
    for dtype in (jnp.float64, jnp.float32):
        g = jax.jit(jax.grad(lambda x: jnp.sum(p.to_theta(x) ** 2)))(jnp.asarray(x64[0], dtype))
        gi = jax.jit(jax.grad(lambda t: jnp.sum(p.from_theta(t))))(jnp.asarray(bodies[0], dtype))
        assert g.dtype == dtype and bool(jnp.all(jnp.isfinite(g))) and bool(jnp.all(jnp.isfinite(gi)))


@pytest.mark.parametrize("name", PHYSICAL)
def test_gradient_matches_finite_differences(name):
    p = bn.get_parameterization(name)
    x = jnp.asarray(canonical_x(name, np.random.default_rng(13), 1)[0])
    J = np.asarray(jax.jacfwd(p.to_theta)(x))
    eps = 1e-6
    steps = eps * np.eye(10)
    f = jax.jit(jax.vmap(p.to_theta))
    fd = np.asarray(f(x[None, :] + steps) - f(x[None, :] - steps)).T / (2 * eps)
    np.testing.assert_allclose(J, fd, rtol=1e-6, atol=1e-7)


# --- errors -------------------------------------------------------------------------------------


def test_clear_errors_for_shapes_and_non_physical_inputs(bodies):
    p = bn.get_parameterization("log-cholesky")
    with pytest.raises(ValueError, match=r"shape \(9,\), expected \(10,\)"):
        p.to_theta(np.zeros(9))
    with pytest.raises(ValueError, match=r"theta has shape \(2, 10\), expected \(10,\)"):
        p.from_theta(bodies[:2])
    with pytest.raises(ValueError, match=r"expected \(\.\.\., 10\)"):
        bn.bodies_from_theta("diffnea", np.zeros((3, 9)))
    with pytest.raises(ValueError, match=r"expected \(\.\.\., 4, 4\)"):
        bn.theta_from_pseudo_inertia(np.eye(3))
    with pytest.raises(ValueError, match="valid names"):
        bn.bodies_to_theta("eigen", np.zeros((2, 10)))
    bad = bodies[:4].copy()
    bad[2, 0] = -1.0  # negative mass
    for name in PHYSICAL:
        with pytest.raises(ValueError, match=r"body 2.*outside the image.*smallest eigenvalue"):
            bn.bodies_from_theta(name, bad)
        with pytest.raises(ValueError, match="outside the image"):
            bn.get_parameterization(name).from_theta(bad[2])
    bn.bodies_from_theta("theta", bad)  # raw theta takes anything
    # DiffBary needs lambda_min(J) > r: a body just consistent but under the bias
    tiny = np.asarray(bn.theta_from_pseudo_inertia(np.diag([1e-9, 1e-3, 1e-3, 1.0])))
    assert bool(bn.is_physically_consistent(tiny))
    with pytest.raises(ValueError, match="bias"):
        bn.get_parameterization("diffbary").from_theta(tiny)
    assert bool(jnp.all(jnp.isfinite(bn.get_parameterization("log-cholesky").from_theta(tiny))))
    # traced inputs are not checked: NaN instead of an error
    out = jax.jit(bn.get_parameterization("log-cholesky").from_theta)(jnp.asarray(bad[2]))
    assert bool(jnp.any(jnp.isnan(out)))
    with pytest.raises(ValueError, match="tol"):
        bn.is_physically_consistent(bodies, tol=-1.0)


def test_diffbary_with_other_bias():
    p = bi.diffbary_parameterization(1e-3)
    x = canonical_x("diffbary", np.random.default_rng(14), 1)[0]
    theta = p.to_theta(x)
    assert float(bn.pseudo_inertia_min_eigenvalue(theta)) >= 1e-3 * (1 - 1e-9)
    np.testing.assert_allclose(np.asarray(p.from_theta(theta)), x, rtol=RTOL, atol=RTOL)
    with pytest.raises(ValueError, match="bias"):
        bi.diffbary_parameterization(-1.0)


# --- positive maps ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", positive.POSITIVE_MAP_NAMES)
def test_positive_maps_round_trip_and_stay_positive(name):
    f = bn.get_positive_map(name)
    u = jnp.asarray(np.random.default_rng(15).normal(0, 5, (4, 25)))
    y = f.forward(u)
    assert y.shape == u.shape and bool(jnp.all(y > 0))
    np.testing.assert_allclose(np.asarray(f.inverse(y)), np.asarray(u), rtol=1e-10, atol=1e-10)
    y_small = jnp.asarray([1e-8, 1e-3, 0.5, 3.0, 40.0])
    np.testing.assert_allclose(np.asarray(f.forward(f.inverse(y_small))), np.asarray(y_small), rtol=1e-12)
    u32 = u.astype(jnp.float32)
    assert jax.jit(f.forward)(u32).dtype == jnp.float32
    g = jax.grad(lambda v: jnp.sum(f.forward(v)))(jnp.asarray([-30.0, 0.0, 30.0], jnp.float32))
    assert bool(jnp.all(jnp.isfinite(g))) and bool(jnp.all(g > 0))
    with pytest.raises(ValueError, match="positive finite"):
        f.inverse(jnp.asarray([1.0, 0.0]))


def test_softplus_closed_form_and_unknown_name():
    u = np.array([-3.0, 0.0, 2.0])
    np.testing.assert_allclose(np.asarray(positive.softplus(u)), np.log1p(np.exp(u)), rtol=1e-14)
    np.testing.assert_allclose(np.asarray(positive.exp_positive(u)), np.exp(u), rtol=1e-14)
    with pytest.raises(ValueError, match=r"valid names are \['softplus', 'exp'\]"):
        bn.get_positive_map("relu")
