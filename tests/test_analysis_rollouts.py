"""Posterior rollouts against references we did not write: Pinocchio's ABA integrated by SciPy,
and the single-trajectory integrator for each draw; credible bands against numpy quantiles."""

import jax
import jax.numpy as jnp
import numpy as np
import pinocchio as pin
import pytest
from scipy.integrate import solve_ivp

import bayes_nea as bn
from analysis import (
    band_coverage,
    credible_band,
    make_rollout_fn,
    posterior_rollouts,
    rollout_error,
    thin_draws,
    true_rollout,
)
from analysis.diagnostics import accel_nmse, heldout_predictions

STEPS = 250
DT = 1.0 / 250.0


def draw_qdd_fn(robot):
    """Draws {"theta": (n, 10), "b": (n,)}: rigid body with viscous damping tau - b qd."""

    def of_draw(draw):
        params = bn.RobotParams(
            draw["theta"], *(jnp.asarray(x, draw["theta"].dtype) for x in robot.nominal[1:])
        )
        return lambda q, qd, tau: bn.aba(robot, q, qd, tau - draw["b"] * qd, params=params)

    return of_draw


@pytest.fixture(scope="module")
def cartpole():
    return bn.get_system("cartpole")


@pytest.fixture(scope="module")
def draws(cartpole):
    rng = np.random.default_rng(0)
    d = 16
    scale = rng.uniform(0.8, 1.2, (d, cartpole.n, 1))  # scaling a body's theta keeps it physical
    theta = scale * np.asarray(cartpole.nominal.theta)[None]
    b = rng.uniform(0.0, 0.05, (d, cartpole.n))
    theta[0], b[0] = np.asarray(cartpole.nominal.theta), 0.0  # draw 0 is the true system
    return {"theta": jnp.asarray(theta), "b": jnp.asarray(b)}


@pytest.fixture(scope="module")
def rollout(cartpole):
    return make_rollout_fn(draw_qdd_fn(cartpole), steps=STEPS, dt=DT)


def pinocchio_solution(robot, q0, qd0, t_end, b=None):
    """Reference: Pinocchio's ABA integrated by SciPy's adaptive DOP853 at tight tolerance."""
    model = pin.buildModelFromXML(bn.to_urdf(robot))
    model.gravity.linear = np.array(robot.gravity)
    data = model.createData()
    b = np.zeros(robot.n) if b is None else np.asarray(b)

    def to_pin(q):  # the pole is continuous: (cos, sin) in Pinocchio
        out = []
        for i, v in enumerate(q):
            out += [np.cos(v), np.sin(v)] if model.joints[i + 1].nq == 2 else [v]
        return np.array(out)

    def rhs(_, x):
        q, qd = x[: robot.n], x[robot.n :]
        return np.concatenate([qd, pin.aba(model, data, to_pin(q), qd, -b * qd)])

    t_eval = np.arange(int(round(t_end / DT)) + 1) * DT
    sol = solve_ivp(
        rhs,
        (0, t_eval[-1]),
        np.concatenate([q0, qd0]),
        method="DOP853",
        rtol=1e-11,
        atol=1e-12,
        t_eval=t_eval,
    )
    return sol.y.T[:, : robot.n], sol.y.T[:, robot.n :]


def test_true_parameter_rollout_matches_pinocchio(cartpole, draws, rollout):
    q0, qd0 = np.array([0.05, 2.0]), np.array([0.0, 0.5])
    traj = rollout(draws, q0, qd0)
    q_ref, qd_ref = pinocchio_solution(cartpole, q0, qd0, STEPS * DT)
    assert traj.q.shape == (16, STEPS + 1, 2) and traj.t.shape == (STEPS + 1,)
    # RK4 at 250 Hz against an adaptive high-order solution: global error ~ dt^4.
    np.testing.assert_allclose(np.asarray(traj.q[0]), q_ref, atol=1e-6)
    np.testing.assert_allclose(np.asarray(traj.qd[0]), qd_ref, atol=1e-5)
    # another draw (perturbed inertia, damped) against Pinocchio with that draw's parameters
    k = 5
    robot_k = cartpole.replace(
        nominal=cartpole.nominal._replace(theta=np.asarray(draws["theta"][k]))
    )
    q_k, _ = pinocchio_solution(robot_k, q0, qd0, STEPS * DT, b=np.asarray(draws["b"][k]))
    np.testing.assert_allclose(np.asarray(traj.q[k]), q_k, atol=1e-6)
    assert np.abs(np.asarray(traj.q[k]) - q_ref).max() > 1e-3  # the draws do differ


def test_vmapped_equals_single_integrations_and_batches(cartpole, draws, rollout):
    q0s = jnp.asarray(np.random.default_rng(2).normal(0, 0.3, (16, 2)))  # one start per draw
    qd0s = jnp.zeros((16, 2))
    tau = jnp.asarray(np.random.default_rng(1).normal(0, 1.0, (STEPS, 2)))
    traj = posterior_rollouts(draw_qdd_fn(cartpole), draws, q0s, qd0s, tau=tau, dt=DT, batch_size=5)
    of_draw = draw_qdd_fn(cartpole)
    single = jax.jit(lambda draw, q0, qd0: bn.integrate(of_draw(draw), q0, qd0, tau, dt=DT))
    for k in (0, 7, 15):  # 15 lands in the last batch, padded with copies of it
        ref = single(jax.tree.map(lambda x, k=k: x[k], draws), q0s[k], qd0s[k])
        np.testing.assert_allclose(np.asarray(traj.q[k]), np.asarray(ref.q), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(np.asarray(traj.q[:, 0]), np.asarray(q0s))
    # the compiled open-loop function reused with a torque sequence: same answer
    again = rollout(draws, q0s[3], qd0s[3], tau)
    np.testing.assert_allclose(
        np.asarray(again.q[7]),
        np.asarray(single(jax.tree.map(lambda x: x[7], draws), q0s[3], qd0s[3]).q),
        atol=1e-12,
    )


def test_auto_batches_fit_the_cache_and_change_nothing(cartpole, draws):
    from analysis.rollouts import ROLLOUT_BATCH_BYTES, auto_batch_size

    assert auto_batch_size(draws) is None  # a rigid body's few parameters: all draws at once
    wide = ROLLOUT_BATCH_BYTES // 8 // 32  # float64 values per draw: 32 draws fill the budget
    big = {"w": np.zeros((100, wide))}
    assert auto_batch_size(big) == 25  # 4 equal batches of 25, not 3 x 32 + 4
    assert auto_batch_size(big, jnp.float32) == 50  # float32 draws: half the bytes
    # draws carrying a large leaf the dynamics ignore: batched by lax.map, the same rollouts
    padded = {**draws, "pad": jnp.zeros((16, ROLLOUT_BATCH_BYTES // 8 // 7))}  # 6 fit
    assert auto_batch_size(padded) == 6  # 16 draws in 3 batches: 6, 6 and 4
    q0s = jnp.asarray(np.random.default_rng(3).normal(0, 0.3, (16, 2)))
    qd0s = jnp.zeros((16, 2))
    auto = posterior_rollouts(draw_qdd_fn(cartpole), padded, q0s, qd0s, steps=STEPS, dt=DT)
    whole = posterior_rollouts(
        draw_qdd_fn(cartpole), padded, q0s, qd0s, steps=STEPS, dt=DT, batch_size=None
    )
    np.testing.assert_allclose(np.asarray(auto.q), np.asarray(whole.q), rtol=1e-12, atol=1e-12)
    for bad in ("big", 0, 2.5):
        with pytest.raises(ValueError, match="batch_size"):
            make_rollout_fn(draw_qdd_fn(cartpole), steps=STEPS, batch_size=bad)


def test_closed_loop_uses_controller(cartpole, draws):
    kp = jnp.array([5.0, 0.0])
    controller = lambda t, q, qd: -kp * q - jnp.array([2.0, 0.0]) * qd
    traj = posterior_rollouts(
        draw_qdd_fn(cartpole),
        draws,
        jnp.array([0.2, 0.0]),
        jnp.zeros(2),
        controller=controller,
        steps=100,
        dt=DT,
    )
    assert traj.tau.shape == (16, 100, 2)
    np.testing.assert_allclose(np.asarray(traj.tau[:, 0, 0]), -1.0)  # -5 * 0.2 at t = 0
    truth = true_rollout(
        bn.forward_dynamics(cartpole),
        jnp.array([0.2, 0.0]),
        jnp.zeros(2),
        controller=controller,
        steps=100,
        dt=DT,
    )
    np.testing.assert_allclose(np.asarray(traj.q[0]), np.asarray(truth.q), atol=1e-12)


def test_float32_rollouts(cartpole, draws, rollout):
    d32 = jax.tree.map(lambda x: x.astype(jnp.float32), draws)
    traj = rollout(d32, jnp.array([0.0, 2.0], jnp.float32), jnp.zeros(2, jnp.float32))
    assert traj.q.dtype == jnp.float32
    ref = rollout(draws, jnp.array([0.0, 2.0]), jnp.zeros(2))
    np.testing.assert_allclose(np.asarray(traj.q), np.asarray(ref.q), atol=1e-3)


def test_credible_band_and_coverage():
    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (4000, 7))
    band = credible_band(x, prob=0.9)
    np.testing.assert_allclose(band.lower, np.quantile(x, 0.05, axis=0))
    np.testing.assert_allclose(band.upper, np.quantile(x, 0.95, axis=0))
    # the band of N(0, 1) draws: +-1.645 (closed form) to sampling error
    np.testing.assert_allclose(band.upper, 1.6449, atol=0.12)
    truth = rng.normal(0, 1, (20000,))
    truth = truth[:4000]
    cov = band_coverage(credible_band(rng.normal(0, 1, (2000, 4000)), prob=0.9), truth)
    assert abs(cov - 0.9) < 0.03
    x[3, 2] = np.nan  # a diverged draw is left out and counted
    band = credible_band(x, prob=0.9)
    assert band.finite_fraction == pytest.approx(3999 / 4000) and np.all(np.isfinite(band.upper))
    with pytest.raises(ValueError, match="prob"):
        credible_band(x, prob=1.5)


def test_rollout_error_horizons():
    q_true = np.zeros((11, 2))
    q = np.zeros((3, 11, 2))
    q[1, 1:] = 1.0
    q[2, 5:] = np.inf
    err = rollout_error(q, q_true, horizons_steps=(2, 10))
    np.testing.assert_allclose(err[2], [0.0, 1.0, 0.0])
    assert err[10][2] == np.inf and err[10][1] == 1.0


def test_thin_draws_is_evenly_spaced():
    draws = {"a": np.arange(10.0), "b": np.arange(20.0).reshape(10, 2)}
    thin = thin_draws(draws, 4)
    np.testing.assert_array_equal(thin["a"], [0.0, 3.0, 6.0, 9.0])  # linspace(0, 9, 4), first/last
    np.testing.assert_array_equal(thin["b"], draws["b"][[0, 3, 6, 9]])
    assert thin_draws(draws, 50)["a"].shape == (10,)  # all of them when fewer than asked
    with pytest.raises(ValueError, match="max_draws"):
        thin_draws(draws, 0)
    with pytest.raises(ValueError, match="leading draw axis"):
        thin_draws({"a": np.zeros(3), "b": np.zeros(4)}, 2)


def test_heldout_predictions_and_nmse(cartpole, draws):
    """Each draw's prediction is its own ABA (Pinocchio-checked elsewhere); the NMSE of a
    prediction off by a constant ``c`` per joint is ``c^2 / var(qdd)`` (closed form)."""

    class Model:
        qdd_fn = staticmethod(draw_qdd_fn(cartpole))

    class Data:
        def arrays(self):
            rng = np.random.default_rng(1)
            q, qd, tau = rng.normal(size=(3, 40, 2))
            return q, qd, np.zeros_like(q), tau

    pred = heldout_predictions(Model(), draws, Data())
    q, qd, _, tau = Data().arrays()
    d = 5
    expected = draw_qdd_fn(cartpole)(jax.tree.map(lambda x: x[d], draws))(q[7], qd[7], tau[7])
    assert pred.shape == (16, 40, 2)
    np.testing.assert_allclose(pred[d, 7], np.asarray(expected), rtol=1e-12)
    qdd = np.random.default_rng(2).normal(size=(40, 2)) * [1.0, 3.0]
    shifted = np.broadcast_to(qdd + [0.5, -1.5], (4, 40, 2)).copy()
    np.testing.assert_allclose(accel_nmse(shifted, qdd), [0.25, 2.25] / np.var(qdd, axis=0))
    shifted[1, 3, 0] = np.inf  # a non-finite draw is left out of the mean
    np.testing.assert_allclose(accel_nmse(shifted, qdd), [0.25, 2.25] / np.var(qdd, axis=0))
    assert np.all(np.isnan(accel_nmse(np.full((2, 40, 2), np.nan), qdd)))


def test_bad_inputs(cartpole, draws, rollout):
    with pytest.raises(ValueError, match="q0"):
        rollout(draws, jnp.zeros(3), jnp.zeros(3)[:2])
    with pytest.raises(ValueError, match="tau"):
        rollout(draws, jnp.zeros(2), jnp.zeros(2), jnp.zeros((3, 2)))
    with pytest.raises(ValueError, match="leading draw axis"):
        rollout({"theta": draws["theta"], "b": draws["b"][:3]}, jnp.zeros(2), jnp.zeros(2))
    with pytest.raises(ValueError, match="either"):
        posterior_rollouts(
            draw_qdd_fn(cartpole),
            draws,
            jnp.zeros(2),
            jnp.zeros(2),
            tau=jnp.zeros((5, 2)),
            controller=lambda t, q, qd: q,
        )
