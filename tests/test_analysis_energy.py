"""Energy of uncontrolled rollouts: a conserving draw keeps E(0), a dissipative draw never gains
energy (to RK4 tolerance), a negatively damped draw gains energy, a blown-up draw is divergent.
References: the closed-form energy of a pendulum state, conservation laws, the sign of b qd^2."""

import jax.numpy as jnp
import numpy as np
import pytest

import bayes_nea as bn
from analysis import (
    analyse_energy,
    classify_energy,
    divergence_flags,
    make_rollout_fn,
    params_from_physical,
)

STEPS = 500
DT = 1.0 / 250.0


def of_draw(robot):
    def qdd_fn_of(draw):
        params = bn.RobotParams(
            draw["theta"], *(jnp.asarray(x, draw["theta"].dtype) for x in robot.nominal[1:])
        )
        return lambda q, qd, tau: bn.aba(robot, q, qd, tau - draw["b"] * qd, params=params)

    return qdd_fn_of


@pytest.fixture(scope="module")
def setup():
    robot = bn.get_system("cartpole")
    rng = np.random.default_rng(0)
    d = 24
    theta = rng.uniform(0.7, 1.3, (d, robot.n, 1)) * np.asarray(robot.nominal.theta)[None]
    b = np.zeros((d, robot.n))
    b[4:16] = rng.uniform(0.001, 0.5, (12, robot.n))  # dissipative draws
    b[16:20, 0] = -rng.uniform(0.002, 0.01, 4)  # energy-gaining draws (cart pushed along)
    b[20:] = -40.0  # violently unstable draws: divergent
    draws = {"theta": jnp.asarray(theta), "b": jnp.asarray(b)}
    traj = make_rollout_fn(of_draw(robot), steps=STEPS, dt=DT)(
        draws, jnp.array([0.0, 2.5]), jnp.array([0.05, 0.0])
    )
    params = params_from_physical(robot, {"theta": draws["theta"]})
    res = analyse_energy(robot, traj.q, traj.qd, params=params)
    return robot, draws, traj, params, res


def test_energy_matches_closed_form(setup):
    robot, _, traj, params, res = setup
    e = res.energy[0, 0]
    th = np.asarray(params.theta[0])
    m_total = th[0, 0] + th[1, 0]
    # cart-pole at rest in x, pole at 2.5 rad, cart speed 0.05: T = (m_c + m_p) v^2 / 2,
    # V = -m_p g l cos(phi) with h_z = -m_p l (pole CoM below the pivot when phi = 0).
    v_expected = 9.81 * th[1, 3] * np.cos(2.5)
    assert e == pytest.approx(0.5 * m_total * 0.05**2 + v_expected, rel=1e-10)


def test_energy_classes(setup):
    robot, _, traj, params, res = setup
    assert res.classes[:4] == ("conserving",) * 4
    assert res.classes[4:16] == ("dissipating",) * 12
    assert res.classes[16:20] == ("gaining",) * 4
    assert res.classes[20:] == ("divergent",) * 4
    assert res.fractions["dissipating"] == pytest.approx(0.5) and res.label == "dissipating"
    # RK4 at 250 Hz conserves energy to well below a micro-joule over 2 s for b = 0
    assert np.max(np.abs(res.energy[:4] - res.energy[:4, :1])) < 1e-6


def test_dissipative_draws_never_gain_energy(setup):
    robot, draws, traj, params, res = setup
    e = res.energy[4:16]
    # the energy module's numbers against the closed form at the last state of one draw
    th = np.asarray(params.theta[9])
    q, qd = np.asarray(traj.q[9, -1]), np.asarray(traj.qd[9, -1])
    assert e[5, -1] == pytest.approx(
        float(bn.total_energy(robot, q, qd, params=bn.RobotParams(th, *robot.nominal[1:]))),
        rel=1e-12,
    )
    # dE/dt = -qd^T B qd <= 0: every step's change is <= RK4's local error (1e-9 J here)
    assert np.max(np.diff(e, axis=1)) < 1e-9
    assert np.all(e[:, -1] < e[:, 0] - 1e-3)  # and energy was really lost


def test_divergence_flags_domain():
    robot = bn.get_system("cartpole")  # rail +-0.407 m, margin 50% of 0.814 m
    q = np.zeros((4, 3, 2))
    qd = np.zeros((4, 3, 2))
    q[1, 2, 0] = 0.9  # beyond 0.407 + 0.407
    q[2, 2, 1] = 1e6  # the pole is continuous: any angle is in the domain
    qd[3, 1, 1] = np.nan
    np.testing.assert_array_equal(divergence_flags(robot, q, qd), [False, True, False, True])
    qd[0, 1, 1] = 150.0
    assert (
        divergence_flags(robot, q, qd)[0]
        and not divergence_flags(robot, q, qd, velocity_bound=200.0)[0]
    )


def test_classify_energy_and_errors():
    t = np.linspace(0, 1, 11)
    e = np.stack([np.ones(11), 1 - 0.1 * t, 1 + 0.1 * t, np.full(11, np.nan)])
    res = classify_energy(e)
    assert res.classes == ("conserving", "dissipating", "gaining", "divergent")
    np.testing.assert_allclose(res.max_gain[:3], [0.0, 0.0, 0.1])
    with pytest.raises(ValueError, match="theta"):
        params_from_physical(bn.get_system("cartpole"), {"w": np.zeros(3)})
    with pytest.raises(ValueError, match="energy"):
        classify_energy(np.ones(5))
