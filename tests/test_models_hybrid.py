"""Hybrid inverse-dynamics models (Reuss et al. 2022): DeLaN's Euler-Lagrange torques against RNEA
on a 2-link arm, the SDP baseline against unconstrained least squares, the parts' shapes, the
regressor path against RNEA, and a step-by-step LSTM against its sequence form."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import bayes_nea as bn
from inference.sdp import pseudo_inertia_expression, reduce_least_squares, sdp_least_squares
from models import hybrid as hy


def two_link(theta=None) -> bn.Robot:
    """A planar 2-link arm (joint axes z, links along x, 1 m and 0.8 m), gravity along -y."""
    if theta is None:
        theta = np.stack([
            bn.spatial.theta_from_com(2.0, np.array([0.5, 0.02, 0.0]), np.diag([0.01, 0.17, 0.17])),
            bn.spatial.theta_from_com(1.2, np.array([0.4, 0.0, 0.01]), np.diag([0.005, 0.07, 0.07])),
        ])  # fmt: skip
    return bn.make_robot(
        "two-link", ("j1", "j2"), (-1, 0), ("revolute", "revolute"), ((0, 0, 1), (0, 0, 1)),
        np.asarray(theta), np.zeros((2, 3)), np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]),
        gravity=(0.0, -9.81, 0.0),
    )  # fmt: skip


def test_two_link_rnea_matches_the_textbook_closed_form():
    """The planar 2R arm (Spong et al., eq. 7.87 with point-mass-free links): our RNEA on the
    arm above equals the closed-form M(q) qdd + C(q, qd) qd + g(q) (I_z about each CoM)."""
    robot = two_link()
    m1, m2, l1, lc1, lc2 = 2.0, 1.2, 1.0, 0.5, 0.4
    # CoM y-offset of link 1 (0.02) and z-offset of link 2 do not change planar dynamics except
    # through the in-plane CoM: use the exact in-plane CoM positions
    c1 = np.array([0.5, 0.02])
    I1 = 0.17 + m1 * 0.0  # about the CoM, z axis
    I2 = 0.07
    rng = np.random.default_rng(0)
    for _ in range(3):
        q, qd, qdd = rng.normal(size=(3, 2))
        # link 1 CoM at angle q1 + atan2(0.02, 0.5), distance |c1|
        r1, a1 = np.hypot(*c1), np.arctan2(c1[1], c1[0])
        d11 = m1 * r1**2 + I1 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * np.cos(q[1])) + I2
        d12 = m2 * (lc2**2 + l1 * lc2 * np.cos(q[1])) + I2
        d22 = m2 * lc2**2 + I2
        h = -m2 * l1 * lc2 * np.sin(q[1])
        g = 9.81
        g1 = m1 * g * r1 * np.cos(q[0] + a1) + m2 * g * (
            l1 * np.cos(q[0]) + lc2 * np.cos(q[0] + q[1])
        )
        g2 = m2 * g * lc2 * np.cos(q[0] + q[1])
        tau = np.array([
            d11 * qdd[0] + d12 * qdd[1] + h * qd[1] * qd[0] + h * (qd[0] + qd[1]) * qd[1] + g1,
            d12 * qdd[0] + d22 * qdd[1] - h * qd[0] ** 2 + g2,
        ])  # fmt: skip
        np.testing.assert_allclose(bn.rnea(robot, q, qd, qdd), tau, rtol=1e-10, atol=1e-10)
    _ = lc1


def test_delan_euler_lagrange_with_true_mass_and_potential_equals_rnea():
    robot = two_link()
    mass = lambda q: bn.crba(robot, q)
    pot = lambda q: bn.potential_energy(robot, q)
    rng = np.random.default_rng(1)
    for _ in range(5):
        q, qd, qdd = (jnp.asarray(x) for x in rng.normal(size=(3, 2)))
        np.testing.assert_allclose(
            hy.lagrangian_torques(mass, pot, q, qd, qdd),
            bn.rnea(robot, q, qd, qdd),
            rtol=1e-10,
            atol=1e-10,
        )


def test_delan_network_mass_matrix_is_positive_definite_and_torques_are_finite():
    n = 3
    model = hy.delan(
        hy.Normalizer(jnp.zeros(n), jnp.ones(n)), key=jax.random.key(0), torque_scale=10.0
    )
    q = jax.random.normal(jax.random.key(1), (n,))
    M = model.mass(q)
    assert np.all(np.linalg.eigvalsh(np.asarray(M)) > 0)
    np.testing.assert_allclose(M, M.T)
    x = jax.random.normal(jax.random.key(2), (5, 3 * n))
    assert model.sequence(x, None).shape == (5, n)


def test_sdp_lmi_is_the_pseudo_inertia():
    cp = pytest.importorskip("cvxpy")
    theta = bn.spatial.theta_from_com(1.5, np.array([0.1, -0.2, 0.05]), np.diag([0.02, 0.03, 0.04]))
    J = pseudo_inertia_expression(cp, cp.Constant(theta)).value
    np.testing.assert_allclose(J, bn.pseudo_inertia(theta), atol=1e-14)


@pytest.fixture(scope="module")
def two_link_data():
    robot = two_link()
    rng = np.random.default_rng(2)
    q, qd, qdd = (
        jnp.asarray(x)
        for x in rng.normal(size=(3, 400, 2)) * np.array([1.5, 2.0, 4.0])[:, None, None]
    )
    Y = np.asarray(jax.vmap(lambda a, b, c: bn.joint_torque_regressor(robot, a, b, c))(q, qd, qdd))
    return robot, Y.reshape(-1, 20), (q, qd, qdd)


def test_sdp_equals_least_squares_when_already_consistent(two_link_data):
    """Noisy torques of a consistent arm: the unconstrained optimum is (near) consistent, so the
    SDP reaches the least-squares residual and the same fitted torques."""
    robot, A, _ = two_link_data
    b = A @ robot.nominal.theta.reshape(-1) + 0.01 * np.random.default_rng(3).normal(
        size=A.shape[0]
    )
    x_ls, *_ = np.linalg.lstsq(A, b, rcond=None)
    rss_ls = float(np.sum((A @ x_ls - b) ** 2))
    sol = sdp_least_squares(A, b, 2)
    assert sol.status == "optimal"
    assert abs(sol.rss - rss_ls) <= 1e-6 * rss_ls
    np.testing.assert_allclose(
        A @ sol.theta.reshape(-1), A @ x_ls, atol=1e-4 * np.abs(A @ x_ls).max()
    )
    assert np.all(np.asarray(bn.pseudo_inertia_min_eigenvalue(sol.theta)) >= -1e-7)


def test_sdp_enforces_consistency_when_least_squares_violates_it(two_link_data):
    """Torques of an impossible body (negative mass on link 2): least squares fits them exactly
    and is inconsistent; the SDP solution is consistent and pays a larger residual."""
    robot, A, _ = two_link_data
    theta = np.array(robot.nominal.theta)
    theta[1] = -theta[1]
    b = A @ theta.reshape(-1)
    x_ls, *_ = np.linalg.lstsq(A, b, rcond=None)
    sol = sdp_least_squares(A, b, 2)
    assert np.all(np.asarray(bn.pseudo_inertia_min_eigenvalue(sol.theta)) >= -1e-7)
    assert sol.rss > 1e-3 * float(np.sum(b**2)) > float(np.sum((A @ x_ls - b) ** 2))


def test_reduce_least_squares_keeps_the_objective():
    rng = np.random.default_rng(4)
    A, b, x = rng.normal(size=(50, 6)), rng.normal(size=50), rng.normal(size=6)
    R, c, r0 = reduce_least_squares(A, b)
    np.testing.assert_allclose(np.sum((R @ x - c) ** 2) + r0, np.sum((A @ x - b) ** 2), rtol=1e-12)


@pytest.mark.parametrize("name", ["diffbary", "diffnea"])
def test_rigid_body_regressor_path_equals_rnea(two_link_data, name):
    robot, _, (q, qd, qdd) = two_link_data
    rb = hy.rigid_body(robot, name, key=jax.random.key(0), scale=0.3)
    x = jnp.concatenate([q, qd, qdd], axis=1)[:20]
    Y = jax.vmap(lambda a, b, c: bn.joint_torque_regressor(robot, a, b, c))(
        q[:20], qd[:20], qdd[:20]
    )
    via_rnea = jax.vmap(lambda a, b, c: rb.step((), a, b, c)[1])(q[:20], qd[:20], qdd[:20])
    np.testing.assert_allclose(rb.sequence(x, Y), via_rnea, rtol=1e-9, atol=1e-9)
    assert np.all(np.asarray(bn.pseudo_inertia_min_eigenvalue(rb.theta())) > 0)


def test_lstm_sequence_equals_stepping_and_table_iv_size():
    n = 7
    norm = hy.Normalizer(jnp.zeros(3 * n), jnp.ones(3 * n))
    lstm = hy.lstm_residual(norm, jnp.ones(n), key=jax.random.key(0))
    # Table IV: 33,358 weights in PyTorch (two LSTM bias vectors there, one in Equinox)
    assert abs(hy.count_weights(lstm) - 33358) < 600
    x = jax.random.normal(jax.random.key(1), (30, 3 * n))
    seq = lstm.sequence(x, None)
    state, outs = lstm.init_state(), []
    for t in range(30):
        state, tau = lstm.step(state, x[t, :n], x[t, n : 2 * n], x[t, 2 * n :])
        outs.append(tau)
    np.testing.assert_allclose(seq, jnp.stack(outs), rtol=1e-10, atol=1e-12)
    # memory: the output at t depends on earlier inputs
    x2 = x.at[0].add(1.0)
    assert not np.allclose(lstm.sequence(x2, None)[5], seq[5])


@pytest.mark.parametrize("make", [hy.joint_lstm_residual, hy.joint_mlp_residual])
def test_joint_residual_sees_only_its_own_joint_and_steps_as_its_sequence(make):
    n = 7
    x = jax.random.normal(jax.random.key(1), (30, 3 * n)) * jnp.array([1.0, 0.05, 2.0]).repeat(n)[None, :]
    norm = hy.joint_normalizer_from(np.asarray(x))
    u = np.stack([x[:, n : 2 * n], x[:, 2 * n :], np.tanh(x[:, n : 2 * n] / hy.QD_LIMIT)], -1)
    np.testing.assert_array_equal(norm.mean, 0.0)
    np.testing.assert_allclose(norm.std, np.sqrt((u.reshape(-1, n, 3) ** 2).mean(0)), rtol=1e-12)
    net = make(norm, jnp.arange(1.0, n + 1), key=jax.random.key(0))
    seq = net.sequence(x, None)
    assert seq.shape == (30, n)
    state, outs = net.init_state(), []
    for t in range(30):
        state, tau = net.step(state, x[t, :n], x[t, n : 2 * n], x[t, 2 * n :])
        outs.append(tau)
    np.testing.assert_allclose(seq, jnp.stack(outs), rtol=1e-10, atol=1e-12)
    # joint 2's velocity moves joint 2's output only; positions move nothing
    moved = np.abs(np.asarray(net.sequence(x.at[:, n + 2].add(0.3), None) - seq)).max(0)
    assert moved[2] > 1e-6 and np.all(np.delete(moved, 2) == 0.0)
    assert np.array_equal(net.sequence(x.at[:, :n].add(1.0), None), seq)
    # odd: the reversed motion (qd, qdd negated) gives the negated torques
    reverse = x.at[:, n:].multiply(-1.0)
    np.testing.assert_allclose(net.sequence(reverse, None), -seq, rtol=1e-12, atol=1e-14)
    # each joint has its own weights: equal inputs on every joint give different outputs
    same = jnp.repeat(x[:, [0, n, 2 * n]], n, axis=1)
    out = np.asarray(net.sequence(same, None)) / np.arange(1.0, n + 1)[None, :]
    assert np.ptp(out[-1]) > 1e-6


def test_joint_lstm_remembers_its_own_history_as_friction_does():
    """At rest the recurrent residual holds a torque whose sign is the direction the joint last
    moved (the memory LuGre friction has); the stateless one, odd, gives exactly zero."""
    n = 7
    norm = hy.Normalizer(jnp.zeros((n, 3)), jnp.ones((n, 3)))
    nets = [make(norm, jnp.ones(n), key=jax.random.key(3))
            for make in (hy.joint_lstm_residual, hy.joint_mlp_residual)]  # fmt: skip
    rest = jnp.zeros((5, 3 * n))
    outs = []
    for sign in (1.0, -1.0):
        move = jnp.zeros((20, 3 * n)).at[:, n : 2 * n].set(sign * 0.5)
        outs.append([np.asarray(m.sequence(jnp.concatenate([move, rest]), None))[-1] for m in nets])
    assert np.abs(outs[0][0]).min() > 1e-6
    np.testing.assert_allclose(outs[1][0], -outs[0][0], rtol=1e-12)
    np.testing.assert_array_equal(outs[0][1], 0.0)
    np.testing.assert_array_equal(outs[1][1], 0.0)


def test_hybrid_sums_its_parts_and_sign_friction_is_eq13():
    n = 2
    sign = hy.SignFriction(jnp.array([0.5, 1.0]))
    qd = jnp.array([0.01, -0.5])
    np.testing.assert_allclose(sign.step((), None, qd, None)[1], [0.25, -1.0])
    np.testing.assert_allclose(hy.sign_features(qd) @ sign.sigma, [0.25, -1.0])
    mlp = hy.mlp_residual(
        hy.Normalizer(jnp.zeros(3 * n), jnp.ones(3 * n)), jnp.ones(n), key=jax.random.key(0)
    )
    model = hy.Hybrid((sign, mlp), ("sign", "mlp"))
    x = jax.random.normal(jax.random.key(1), (4, 3 * n))
    np.testing.assert_allclose(
        model.sequence(x, None), sign.sequence(x, None) + mlp.sequence(x, None)
    )
    assert model.only(["sign"]).names == ("sign",)
    assert eqx.tree_equal(model.part("mlp"), mlp)
