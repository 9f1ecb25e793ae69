"""Spatial algebra against Pinocchio's SE3, Motion, Force and Inertia, and group identities."""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

from bayes_nea import spatial as sp


@pytest.fixture(scope="module")
def rng():
    return np.random.default_rng(0)


def random_transform(rng):
    R = pin.rpy.rpyToMatrix(*rng.uniform(-np.pi, np.pi, 3))
    return R, rng.normal(size=3)


def test_skew_is_cross_product(rng):
    a, b = rng.normal(size=(2, 3))
    np.testing.assert_allclose(sp.skew(a) @ b, np.cross(a, b), atol=1e-15)
    np.testing.assert_allclose(sp.skew(a), pin.skew(a), atol=0)


def test_rpy_matches_pinocchio_and_round_trips(rng):
    for _ in range(20):
        rpy = rng.uniform([-np.pi, -np.pi / 2, -np.pi], [np.pi, np.pi / 2, np.pi])
        R = sp.rpy_to_matrix(rpy)
        np.testing.assert_allclose(R, pin.rpy.rpyToMatrix(*rpy), atol=1e-15)
        np.testing.assert_allclose(sp.matrix_to_rpy(R), rpy, atol=1e-12)
    np.testing.assert_allclose(
        sp.rpy_to_matrix(sp.matrix_to_rpy(sp.rpy_to_matrix(jnp.array([0.3, np.pi / 2, 0.1])))),
        sp.rpy_to_matrix(jnp.array([0.3, np.pi / 2, 0.1])),
        atol=1e-7,
    )


def test_axis_angle_is_exponential_map(rng):
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    np.testing.assert_allclose(sp.axis_angle_to_matrix(axis, 0.7), pin.exp3(0.7 * axis), atol=1e-15)


def test_adjoints_match_pinocchio(rng):
    R, p = random_transform(rng)
    M = pin.SE3(R, p)
    np.testing.assert_allclose(sp.adjoint(R, p), M.action, atol=1e-14)
    np.testing.assert_allclose(sp.coadjoint(R, p), M.dualAction, atol=1e-14)
    np.testing.assert_allclose(sp.coadjoint(R, p), np.linalg.inv(sp.adjoint(R, p)).T, atol=1e-12)
    H = sp.homogeneous(R, p)
    np.testing.assert_allclose(H, M.homogeneous, atol=0)
    Ri, pi_ = sp.transform_inverse(R, p)
    np.testing.assert_allclose(sp.homogeneous(Ri, pi_), M.inverse().homogeneous, atol=1e-14)


def test_blockwise_actions_equal_matrices(rng):
    R, p = random_transform(rng)
    v = rng.normal(size=6)
    M = pin.SE3(R, p)
    np.testing.assert_allclose(sp.act_motion(R, p, v), M.act(pin.Motion(v)).vector, atol=1e-14)
    np.testing.assert_allclose(
        sp.inv_act_motion(R, p, v), M.actInv(pin.Motion(v)).vector, atol=1e-14
    )
    np.testing.assert_allclose(sp.act_force(R, p, v), M.act(pin.Force(v)).vector, atol=1e-14)
    np.testing.assert_allclose(sp.inv_act_force(R, p, v), M.actInv(pin.Force(v)).vector, atol=1e-14)
    stack = rng.normal(size=(6, 4))  # (6, k) column stacks act column by column
    np.testing.assert_allclose(sp.act_force(R, p, stack), sp.coadjoint(R, p) @ stack, atol=1e-14)


def test_cross_products_match_pinocchio(rng):
    v, m = rng.normal(size=(2, 6))
    np.testing.assert_allclose(
        sp.cross_motion(v, m), pin.Motion(v).cross(pin.Motion(m)).vector, atol=1e-14
    )
    np.testing.assert_allclose(
        sp.cross_force(v, m), pin.Motion(v).cross(pin.Force(m)).vector, atol=1e-14
    )
    np.testing.assert_allclose(sp.motion_cross_matrix(v) @ m, sp.cross_motion(v, m), atol=1e-14)
    np.testing.assert_allclose(sp.force_cross_matrix(v) @ m, sp.cross_force(v, m), atol=1e-14)


def test_spatial_inertia_matches_pinocchio(rng):
    inertia = pin.Inertia.Random()
    theta = inertia.toDynamicParameters()
    np.testing.assert_allclose(sp.spatial_inertia(theta), inertia.matrix(), atol=1e-14)
    v = rng.normal(size=6)
    np.testing.assert_allclose(sp.inertia_apply(theta, v), inertia.matrix() @ v, atol=1e-14)
    built = sp.theta_from_com(inertia.mass, inertia.lever, inertia.inertia)
    np.testing.assert_allclose(built, theta, atol=1e-14)


def test_float32_and_jit(rng):
    R, p = (jnp.asarray(x, jnp.float32) for x in random_transform(rng))
    v = jnp.asarray(rng.normal(size=6), jnp.float32)
    out = jax.jit(sp.act_motion)(R, p, v)
    assert out.dtype == jnp.float32
    assert sp.rpy_to_matrix(jnp.zeros(3, jnp.float32)).dtype == jnp.float32
