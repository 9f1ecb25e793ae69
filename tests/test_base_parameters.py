"""Base parameters (Gautier): rank against Pinocchio's regressor, Y_base beta == rnea, pivoted QR.

The count of base parameters must equal the numerical rank (numpy SVD, default tolerance) of
Pinocchio's ``computeJointTorqueRegressor`` stacked on the same states. Torques are compared
with Pinocchio's ``rnea`` on fresh states at 1e-9 (relative to the torque scale).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from conftest import panda_reference, system_reference

import bayes_nea as bn
from bayes_nea.base_parameters import base_parameters_from_matrix, numerical_rank, pivoted_qr

N_SAMPLES = 40
FACTORIES = {
    "panda": panda_reference,
    "cartpole": lambda: system_reference("cartpole"),
    "furuta": lambda: system_reference("furuta"),
}


@pytest.fixture(scope="module", params=sorted(FACTORIES))
def case(request):
    ref = FACTORIES[request.param]()
    return ref, bn.base_parameters(ref.robot, 0, n_samples=N_SAMPLES)


def pinocchio_stack(ref, q, qd, qdd) -> np.ndarray:
    rows = [
        pin.computeJointTorqueRegressor(ref.model, ref.data, ref.q_pin(q[k]), qd[k], qdd[k]).copy()
        for k in range(len(q))
    ]
    return np.concatenate(rows)


def test_count_equals_rank_of_pinocchio_regressor_on_same_states(case):
    ref, base = case
    q, qd, qdd = (np.asarray(a) for a in bn.sample_states(ref.robot, 0, N_SAMPLES))
    W = pinocchio_stack(ref, q, qd, qdd)
    assert base.n_base == np.linalg.matrix_rank(W)
    assert base.n_base < 10 * ref.robot.n
    # the rank decision had a wide gap (accepted pivots >> rejected ones)
    assert base.smallest_ratio > 1e-4 and base.singular_ratio < 1e-12
    if ref.robot.name == "cartpole":
        # by hand: cart force (m_c + m_p) and pole terms h_x, h_z (gravity, coupling), I_yy (axis y)
        assert base.n_base == 4
        assert base.names[0] == "m[cart_link] + m[pole_link]"


def test_base_regressor_times_beta_equals_rnea_on_fresh_states(case):
    ref, base = case
    robot = ref.robot
    q, qd, qdd = ref.random_states(np.random.default_rng(123), 8)
    Y = jax.jit(jax.vmap(lambda a, b, c: bn.joint_torque_regressor(robot, a, b, c)))(q, qd, qdd)
    beta = base.beta(robot.nominal.theta)
    tau = np.asarray(base.regressor(Y) @ beta)
    scale = 1 + np.abs(tau).max()
    for k in range(len(q)):
        ref_tau = pin.rnea(ref.model, ref.data, ref.q_pin(q[k]), qd[k], qdd[k])
        np.testing.assert_allclose(tau[k], ref_tau, atol=1e-9 * scale, rtol=0)
    # a representative theta (dependent entries zero) gives the same torques as the true one
    theta_rep = base.theta(beta).reshape(robot.n, 10)
    assert np.sum(np.asarray(theta_rep) != 0) <= base.n_base
    params = robot.nominal._replace(theta=theta_rep)
    tau_rep = jax.vmap(lambda a, b, c: bn.rnea(robot, a, b, c, params=params))(q, qd, qdd)
    np.testing.assert_allclose(np.asarray(tau_rep), tau, atol=1e-9 * scale, rtol=0)


def test_maps_are_consistent(case):
    _, base = case
    b, p = base.n_base, base.to_base.shape[1]
    np.testing.assert_array_equal(base.to_base @ base.to_theta, np.eye(b))
    assert sorted(base.independent + base.dependent) == list(range(p))
    assert len(base.names) == b and all(base.names)
    # beta accepts (n, 10) and (10 n,) and keeps float32
    theta = np.random.default_rng(5).normal(size=(p // 10, 10))
    np.testing.assert_allclose(np.asarray(base.beta(theta)), np.asarray(base.beta(theta.reshape(-1))))
    assert base.beta(jnp.asarray(theta, jnp.float32)).dtype == jnp.float32
    assert base.theta(jnp.zeros(b, jnp.float32)).dtype == jnp.float32


def test_deterministic_given_seed_and_stable_across_seeds():
    robot = bn.furuta()
    a, b = bn.base_parameters(robot, 7, n_samples=20), bn.base_parameters(robot, 7, n_samples=20)
    np.testing.assert_array_equal(a.to_base, b.to_base)
    assert a.independent == b.independent and a.names == b.names
    # other states may pick other independent columns, but the identifiable subspace (the row
    # space of B, i.e. of the stacked regressor) is the same
    c = bn.base_parameters(robot, jax.random.key(8), n_samples=20)
    assert c.n_base == a.n_base
    assert np.linalg.matrix_rank(np.concatenate([a.to_base, c.to_base])) == a.n_base


def test_zero_gravity_identifies_fewer_parameters():
    """Furuta: gravity is what separates the pendulum's first moments h_y, h_z from I_xy, I_xz."""
    robot = bn.furuta()
    with_g = bn.base_parameters(robot, 0, n_samples=20)
    without = bn.base_parameters(robot, 0, n_samples=20, gravity=jnp.zeros(3))
    assert without.n_base == with_g.n_base - 2
    assert "h_y[pendulum_link]" in with_g.names
    assert not any(name == "h_y[pendulum_link]" for name in without.names)


def test_pivoted_qr_on_matrices_of_known_rank():
    rng = np.random.default_rng(9)
    for rank in (1, 4, 9):
        A = rng.normal(size=(50, rank)) @ rng.normal(size=(rank, 12))
        A[:, 3] = 0.0  # an all-zero column
        R, perm = pivoted_qr(A)
        Ap = A[:, perm]
        np.testing.assert_allclose(R.T @ R, Ap.T @ Ap, atol=1e-9 * np.abs(Ap.T @ Ap).max())  # A P = Q R
        d = np.abs(np.diagonal(R))
        assert np.all(d[:-1] >= d[1:] - 1e-12 * d[0])
        assert numerical_rank(R) == np.linalg.matrix_rank(A) == min(rank, 11)
        base = base_parameters_from_matrix(A)
        np.testing.assert_allclose(A[:, list(base.independent)] @ base.to_base, A, atol=1e-9 * np.abs(A).max())
        assert 3 in base.dependent
    # equal columns whose norms differ by rounding: the first in theta order is the pivot, as
    # on any CPU (without the tie rule the larger norm, column 7, would be taken)
    A = rng.normal(size=(50, 12))
    A[:, 7] = A[:, 2] * (1 + 1e-13)
    base = base_parameters_from_matrix(A)
    assert 2 in base.independent and 7 in base.dependent
    assert base.to_base[base.independent.index(2), 7] == pytest.approx(1.0, rel=1e-9)


def test_errors():
    robot = bn.cartpole()
    with pytest.raises(ValueError, match="n_samples must be >= 10"):
        bn.base_parameters(robot, 0, n_samples=3)
    with pytest.raises(ValueError, match="rtol"):
        bn.base_parameters(robot, 0, rtol=2.0)
    base = bn.base_parameters(robot, 0, n_samples=12)
    with pytest.raises(ValueError, match=r"beta has shape \(3,\)"):
        base.theta(jnp.zeros(3))
    with pytest.raises(ValueError, match="theta has shape"):
        base.beta(jnp.zeros(7))
    with pytest.raises(ValueError, match="regressor has shape"):
        base.regressor(jnp.zeros((2, 5)))
