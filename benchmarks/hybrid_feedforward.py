"""Time one feed-forward call of the hybrid inverse-dynamics models (the 1 kHz real-time budget).

The paper's controller runs the RBD + sign + residual LSTM hybrid once per 1 ms control period.
This prints the median wall time of one jitted ``model.step(state, q, qd, qdd)`` on the 7-DoF
Panda (hidden state carried, outputs blocked on), beside peers measured in the same run: our
jitted ``rnea`` alone and Pinocchio's ``rnea`` (C++).

    python benchmarks/hybrid_feedforward.py [--repeats 2000]
"""

from __future__ import annotations

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from data import panda_plant as pp
from models import hybrid as hy


def median_time(fn, repeats: int) -> float:
    fn()  # compile / warm
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    robot = pp.panda_robot()
    n = robot.n
    key = jax.random.key(0)
    norm = hy.Normalizer(jnp.zeros(3 * n), jnp.ones(3 * n))
    jnorm = hy.Normalizer(jnp.zeros((n, 3)), jnp.ones((n, 3)))

    def with_residual(residual, name):
        rbd = hy.rigid_body(robot, "diffbary", key=key, scale=0.3)
        parts = (rbd, hy.SignFriction(jnp.ones(n)))
        return hy.Hybrid((*parts, residual), ("rbd", "sign", name))

    ones = jnp.ones(n)
    models = {
        "RBD+Sign+LSTM per joint (study)": with_residual(hy.joint_lstm_residual(jnorm, ones, key=key), "lstm"),
        "RBD+Sign+MLP per joint (study)": with_residual(hy.joint_mlp_residual(jnorm, ones, key=key), "mlp"),
        "RBD+Sign+LSTM whole state": with_residual(hy.lstm_residual(norm, ones, key=key), "lstm"),
        "RBD+Sign+MLP whole state": with_residual(hy.mlp_residual(norm, ones, key=key), "mlp"),
        "DeLaN": hy.Hybrid((hy.delan(hy.Normalizer(jnp.zeros(n), jnp.ones(n)), key=key, torque_scale=10.0),), ("delan",)),
    }  # fmt: skip
    q = jnp.asarray(pp.PANDA_HOME)
    qd = jnp.full(n, 0.1)
    qdd = jnp.full(n, 0.5)
    rows = []
    for name, model in models.items():
        step = jax.jit(lambda s, a, b, c, m=model: m.step(s, a, b, c))
        state = model.init_state()
        call = lambda step=step, state=state: jax.block_until_ready(step(state, q, qd, qdd))
        rows.append((name, median_time(call, args.repeats)))
    rnea = jax.jit(lambda a, b, c: bn.rnea(robot, a, b, c))
    rows.append(
        (
            "peer: bayes_nea.rnea (jit)",
            median_time(lambda: jax.block_until_ready(rnea(q, qd, qdd)), args.repeats),
        )
    )
    try:
        import pinocchio as pin

        model = pin.buildReducedModel(
            pin.buildModelFromUrdf(pp.panda_urdf_path()),
            [pin.buildModelFromUrdf(pp.panda_urdf_path()).getJointId(j) for j in pp.PANDA_FINGERS],
            pin.neutral(pin.buildModelFromUrdf(pp.panda_urdf_path())),
        )
        data = model.createData()
        qn, qdn, qddn = (np.asarray(x) for x in (q, qd, qdd))
        rows.append(
            (
                "peer: pinocchio.rnea (C++)",
                median_time(lambda: pin.rnea(model, data, qn, qdn, qddn), args.repeats),
            )
        )
    except ImportError:
        rows.append(("peer: pinocchio.rnea (C++)", float("nan")))
    print(f"{'feed-forward call (Panda, 7 DoF)':<36} {'median':>12}   budget 1 ms")
    for name, t in rows:
        print(f"{name:<36} {t * 1e6:>9.1f} us   {'ok' if t < 1e-3 else 'over'}")


if __name__ == "__main__":
    main()
