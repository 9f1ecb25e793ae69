"""Spatial algebra against Pinocchio's SE3, Motion, Force and Inertia, and group identities."""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest

import bayes_nea as bn
from bayes_nea import spatial as sp
from bayes_nea import spatial_pairs as sv


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


def pair(v):
    """(6,) -> (linear, angular) lanes of spatial_pairs."""
    return sv.vec(jnp.asarray(v[:3])), sv.vec(jnp.asarray(v[3:]))


def flat32(u):
    return jnp.concatenate([sv.array(u[0]), sv.array(u[1])])


def flat(u):
    return np.concatenate([np.asarray(sv.array(u[0], jnp.float64)), sv.array(u[1], jnp.float64)])


def lanes(M):
    return sv.mat(jnp.asarray(M))


def test_pair_actions_match_pinocchio(rng):
    R, p = random_transform(rng)
    v = rng.normal(size=6)
    M = pin.SE3(R, p)
    Rl, pl = lanes(R), sv.vec(jnp.asarray(p))
    np.testing.assert_allclose(
        flat(sv.inv_act_motion(Rl, pl, pair(v))), M.actInv(pin.Motion(v)).vector, atol=1e-14
    )
    np.testing.assert_allclose(
        flat(sv.act_force(Rl, pl, pair(v))), M.act(pin.Force(v)).vector, atol=1e-14
    )


def test_pair_cross_products_match_pinocchio(rng):
    v, m = rng.normal(size=(2, 6))
    np.testing.assert_allclose(
        flat(sv.cross_motion(pair(v), pair(m))),
        pin.Motion(v).cross(pin.Motion(m)).vector,
        atol=1e-14,
    )
    np.testing.assert_allclose(
        flat(sv.cross_force(pair(v), pair(m))), pin.Motion(v).cross(pin.Force(m)).vector, atol=1e-14
    )
    np.testing.assert_allclose(
        sp.motion_cross_matrix(v) @ m, flat(sv.cross_motion(pair(v), pair(m)))
    )
    np.testing.assert_allclose(sp.force_cross_matrix(v) @ m, flat(sv.cross_force(pair(v), pair(m))))


def test_pair_inertias_match_pinocchio_and_the_6x6_transform(rng):
    inertia = pin.Inertia.Random()
    theta = inertia.toDynamicParameters()
    body = sv.rigid_body(jnp.asarray(theta))
    v = rng.normal(size=6)
    np.testing.assert_allclose(
        flat(sv.inertia_apply(body, pair(v))), inertia.matrix() @ v, atol=1e-13
    )
    # X^T I X with X the parent -> child motion transform, against Pinocchio's SE3 action
    R, p = random_transform(rng)
    Rl, pl = lanes(R), sv.vec(jnp.asarray(p))
    X = pin.SE3(R, p).inverse().action
    m, h, I = sv.inertia_to_parent(Rl, pl, body)
    parent = pin.SE3(R, p).act(inertia)
    np.testing.assert_allclose(float(m), parent.mass, rtol=1e-14)
    np.testing.assert_allclose(np.asarray(sv.array(h)), parent.mass * parent.lever, atol=1e-12)
    expected = X.T @ inertia.matrix() @ X
    np.testing.assert_allclose(np.asarray(sv.array(I)), expected[3:, 3:], atol=1e-12)
    # an articulated inertia (any symmetric 6x6) carried to the parent blockwise
    G = rng.normal(size=(6, 6))
    Ia = G @ G.T
    blocks = (lanes(Ia[:3, :3]), lanes(Ia[:3, 3:]), lanes(Ia[3:, 3:]))
    A, B, C = (np.asarray(sv.array(b)) for b in sv.articulated_to_parent(Rl, pl, blocks))
    np.testing.assert_allclose(np.block([[A, B], [B.T, C]]), X.T @ Ia @ X, atol=1e-12)


def test_body_regressor_matches_pinocchio(rng):
    v, a = rng.normal(size=(2, 6))
    expected = pin.bodyRegressor(pin.Motion(v), pin.Motion(a))
    np.testing.assert_allclose(
        bn.body_regressor(jnp.asarray(v), jnp.asarray(a)), expected, atol=1e-13
    )


def test_static_zeros_are_folded_while_tracing():
    s = sv.subspace(np.array([0.0, 0.0, 0.0, 0.0, 0.0, 1.0]))
    assert s == ((0.0, 0.0, 0.0), (0.0, 0.0, 1.0))
    x = jnp.float64(2.0)
    scaled = sv.pscale(s, x)
    assert scaled[0] == (0.0, 0.0, 0.0) and scaled[1][:2] == (0.0, 0.0)
    assert scaled[1][2] is x  # times a static one: the same value, no operation


def test_float32_and_jit(rng):
    R, p = (jnp.asarray(x, jnp.float32) for x in random_transform(rng))
    v = jnp.asarray(rng.normal(size=6), jnp.float32)
    out = jax.jit(lambda R, p, v: flat32(sv.inv_act_motion(sv.mat(R), sv.vec(p), pair(v))))(R, p, v)
    assert out.dtype == jnp.float32
    assert sp.rpy_to_matrix(jnp.zeros(3, jnp.float32)).dtype == jnp.float32
