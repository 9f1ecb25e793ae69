"""Training of the hybrid models on a 2-link arm with known parameters: the SDP stage and
end-to-end DiffBary training recover the true torques; frozen parts stay fixed in two-step
training. A slow test runs the Panda pipeline end to end at a tiny size."""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_models_hybrid import two_link

import bayes_nea as bn
from inference import hybrid_training as ht
from models import hybrid as hy


class Move(NamedTuple):
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau: np.ndarray


@pytest.fixture(scope="module")
def arm_data():
    """Smooth random trajectories of the 2-link arm, torques = RNEA + sign friction (known)."""
    robot = two_link()
    sigma = np.array([0.3, 0.2])
    t = np.arange(600) / 100.0
    moves = []
    rng = np.random.default_rng(0)
    for _ in range(4):
        w, ph, a = rng.uniform(0.5, 2, 2), rng.uniform(0, 6, 2), rng.uniform(0.5, 1.5, 2)
        q = a * np.sin(w * t[:, None] + ph)
        qd = a * w * np.cos(w * t[:, None] + ph)
        qdd = -a * w**2 * np.sin(w * t[:, None] + ph)
        tau = np.asarray(jax.vmap(lambda x, y, z: bn.rnea(robot, x, y, z))(q, qd, qdd))
        tau = tau + sigma * np.clip(qd / hy.QD_LIMIT, -1, 1)
        moves.append(Move(q, qd, qdd, tau))
    lo, hi = ht.torque_range(moves)
    return robot, sigma, moves, hi - lo


def test_sdp_stage_recovers_true_torques_and_friction(arm_data):
    pytest.importorskip("cvxpy")
    robot, sigma, moves, scale = arm_data
    w = ht.windows(moves, robot, length=50)
    rb, fr, rss = ht.sdp_parts(robot, w, scale, sign=True)
    assert rss < 1e-10
    np.testing.assert_allclose(fr.sigma, sigma, rtol=1e-4)
    full = [ht.movement_arrays(robot, m) for m in moves]
    assert np.all(ht.evaluate(hy.Hybrid((rb, fr), ("rbd", "sign")), full, scale) < 1e-10)


def test_end_to_end_diffbary_fits_known_arm_and_two_step_freezes(arm_data):
    robot, sigma, moves, scale = arm_data
    w = ht.windows(moves, robot, length=50)
    full = [ht.movement_arrays(robot, m) for m in moves]
    key = jax.random.key(0)
    model = hy.Hybrid(
        (hy.rigid_body(robot, "diffbary", key=key, scale=0.3), hy.SignFriction(jnp.zeros(2))),
        ("rbd", "sign"),
    )
    start = float(np.mean(ht.evaluate(model, full, scale)))
    res = ht.train(
        model, w, full, scale, key=key, batch_samples=100, max_epochs=40, patience=40, lr=2e-2
    )
    end = float(np.mean(ht.evaluate(res.model, full, scale)))
    assert end < 1e-3 * start and end < 1e-4, (start, end)
    np.testing.assert_allclose(res.model.part("sign").sigma, sigma, atol=0.05)
    assert [h[0] for h in res.history] == list(range(1, res.epochs + 1))
    # two step: the rigid body and friction are frozen, only the residual moves
    norm = hy.normalizer_from(w.x)
    hybrid = hy.Hybrid(
        (*res.model.parts, hy.mlp_residual(norm, scale, key=key)), ("rbd", "sign", "mlp")
    )
    res2 = ht.train(hybrid, w, full, scale, key=key, max_epochs=2, freeze=("rbd", "sign"))
    np.testing.assert_array_equal(res2.model.part("rbd").x, hybrid.part("rbd").x)
    np.testing.assert_array_equal(res2.model.part("sign").sigma, hybrid.part("sign").sigma)
    assert not np.allclose(
        res2.model.part("mlp").layers[0].weight, hybrid.part("mlp").layers[0].weight
    )


@pytest.mark.slow
def test_panda_pipeline_end_to_end_tiny():
    """Plant data -> E2E RBD+Sign+LSTM hybrid (per-joint residual, as the study; 2 epochs) ->
    whole-trajectory NMSE -> the hybrid as
    the feed-forward of the impedance controller on the plant -> the posterior of its rigid body
    and friction (Table IV) with posterior draws as feed-forward."""
    from analysis.hybrid import control_study, posterior_study
    from data import panda_plant as pp

    split = pp.excitation_data(trajectories=4, period=0.5, seed=1)
    robot = pp.panda_robot()
    lo, hi = ht.torque_range(split.train)
    scale = hi - lo
    tr = ht.windows(split.train, robot)
    test = [ht.movement_arrays(robot, m) for m in split.test]
    key = jax.random.key(0)
    model = hy.Hybrid(
        (hy.rigid_body(robot, "diffbary", key=key), hy.SignFriction(jnp.zeros(7)),
         hy.joint_lstm_residual(hy.joint_normalizer_from(tr.x), scale, key=key)),
        ("rbd", "sign", "lstm"),
    )  # fmt: skip
    before = ht.evaluate(model, test, scale)
    res = ht.train(model, tr, test, scale, key=key, max_epochs=2)
    after = ht.evaluate(res.model, test, scale)
    assert np.all(np.isfinite(after)) and np.mean(after) < np.mean(before)
    settings = {"control_movements": 1, "control_seconds": 0.1}
    out = control_study({"hybrid": res.model}, split.test, settings, seed=0, log=lambda s: None)
    for level in ("soft", "medium", "stiff"):
        assert out["hybrid"][level]["rmse_deg"] is not None
    # stiffer feedback tracks better
    assert np.mean(out["hybrid"]["stiff"]["rmse_deg"]) < np.mean(out["hybrid"]["soft"]["rmse_deg"])
    train = [ht.movement_arrays(robot, m) for m in split.train]
    point = {"RBD+Sign 2S": res.model.only(("rbd", "sign"))}
    settings["posterior_draws"] = 2
    t4 = posterior_study(
        robot, point, {"train": train, "test": test}, split.test, scale, settings, seed=0,
        log=lambda s: None,
    )["RBD+Sign 2S"]  # fmt: skip
    cover = np.asarray(t4["coverage90"])
    assert cover.shape == (7,) and np.all((cover >= 0) & (cover <= 1))
    assert np.all(np.asarray(t4["ess_fraction"]) > 0) and np.all(np.asarray(t4["noise_sd"]) > 0)
    for level in ("soft", "medium", "stiff"):
        assert t4["control"][level]["finite"] == 2
