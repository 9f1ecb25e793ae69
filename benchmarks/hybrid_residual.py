"""What is left for a residual network on the simulated Panda, and how much of it needs memory.

Fits the two-step rigid body + sign friction (SDP, Reuss et al. eq. 13) on the quick study's
training paths, then explains its torque residual joint by joint with least squares on features
of that joint alone (fitted on the training paths, scored on the unseen test paths):

- ``memoryless``: ``clip(qd / qd_lim)``, ``qd``, ``qdd``, 1 (what a stateless network can use);
- ``velocity history``: the above plus ``qd(t - L) - qd(t)`` for L = 5 ... 200 ms;
- ``LuGre state``: the above plus the plant's LuGre friction run on the *measured* link velocity
  with the plant's own parameters (an oracle: the history effect a recurrent network could learn).

Prints test NMSE per joint (min-max normalised, as the study). ``--trajectories``, ``--seed`` as
``bayes-nea hybrid``.

With ``--train-seeds K`` it then trains the study's two-step per-joint residual LSTM and MLP
(quick setting: epochs, patience, learning rates and keys as ``bayes-nea hybrid``, so training
seeds 0-2 are the committed report's) for K training seeds and prints the paired test NMSE.

    python benchmarks/hybrid_residual.py [--train-seeds 9]
"""

from __future__ import annotations

import argparse
import os
import sys

# benchmarks/inference.py is named like the package: import the package, not that script.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from data import panda_plant as pp  # noqa: E402
from inference import hybrid_training as ht  # noqa: E402
from models import hybrid as hy  # noqa: E402

LAGS_MS = (5, 10, 20, 50, 100, 200)


def lugre_on(params: pp.PlantParams, v: np.ndarray, dt: float) -> np.ndarray:
    """LuGre friction (T, n) driven by the velocity ``v`` (T, n), from ``z = 0``."""

    def step(z, vt):
        return pp.lugre_update(params, z, vt, dt)

    return np.asarray(jax.lax.scan(step, jnp.zeros(v.shape[1]), jnp.asarray(v))[1])


def features(m, j: int, kind: str, lugre: np.ndarray) -> np.ndarray:
    qd, qdd = m.qd[:, j], m.qdd[:, j]
    cols = [np.clip(qd / hy.QD_LIMIT, -1, 1), qd, qdd, np.ones_like(qd)]
    if kind != "memoryless":
        # past velocity (causal: sample t sees t - L; the first L samples see the start)
        cols += [np.concatenate([np.full(L, qd[0]), qd[:-L]]) - qd for L in LAGS_MS]
    if kind == "LuGre state":
        cols.append(lugre[:, j])
    return np.stack(cols, axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train-seeds", type=int, default=0)
    args = parser.parse_args()
    jax.config.update("jax_enable_x64", True)
    plant = pp.make_plant()
    robot = plant.robot
    split = pp.excitation_data(plant, trajectories=args.trajectories, period=5.0, seed=args.seed)
    lo, hi = ht.torque_range(split.train)
    scale = hi - lo
    tr = ht.windows(split.train, robot)
    rb, fr, _ = ht.sdp_parts(robot, tr, scale, sign=True)
    base = hy.Hybrid((rb, fr), ("rbd", "sign"))
    arrays = {role: [ht.movement_arrays(robot, m) for m in getattr(split, role)]
              for role in ("train", "valid", "test")}  # fmt: skip
    parts = {}
    for role in ("train", "test"):
        rows = []
        for m, a in zip(getattr(split, role), arrays[role], strict=True):
            r = a.tau - np.asarray(ht._predict_jit(base, jnp.asarray(a.x), jnp.asarray(a.Y)))
            rows.append((m, r, lugre_on(plant.params, m.qd, plant.dt)))
        parts[role] = rows
    n = robot.n
    table = {"RBD+Sign 2S residual": [
        np.mean(np.concatenate([r[:, j] for _, r, _ in parts["test"]]) ** 2) / scale[j] ** 2
        for j in range(n)
    ]}  # fmt: skip
    for kind in ("memoryless", "velocity history", "LuGre state"):
        row = []
        for j in range(n):
            A = np.concatenate([features(m, j, kind, f) for m, _, f in parts["train"]])
            b = np.concatenate([r[:, j] for _, r, _ in parts["train"]])
            w = np.linalg.lstsq(A, b, rcond=None)[0]
            e = np.concatenate([r[:, j] - features(m, j, kind, f) @ w for m, r, f in parts["test"]])
            row.append(np.mean(e**2) / scale[j] ** 2)
        table[f"- explained by {kind}"] = row
    print(f"test NMSE after least squares on joint-local features ({args.trajectories} paths, "
          f"seed {args.seed}; fitted on training paths)")  # fmt: skip
    print(f"{'':<36}" + "".join(f"{f'joint {j + 1}':>10}" for j in range(n)) + f"{'mean':>10}")
    for name, row in table.items():
        print(f"{name:<36}" + "".join(f"{v:>10.5f}" for v in row) + f"{np.mean(row):>10.5f}")
    if args.train_seeds:
        paired_seeds(tr, arrays, rb, fr, scale, args)


def paired_seeds(tr, arrays, rb, fr, scale, args) -> None:
    """The study's two-step per-joint residual LSTM and MLP over training seeds (paired)."""
    from analysis.hybrid import SETTINGS, training_keys, two_step

    s = SETTINGS["quick"]
    valid, test = arrays["valid"], arrays["test"]
    jnorm = hy.joint_normalizer_from(tr.x)
    print(f"\ntwo-step residuals per joint, test NMSE (mean over joints), {args.train_seeds} "
          "training seeds")  # fmt: skip
    print(f"{'seed':>5} {'LSTM':>10} {'MLP':>10} {'LSTM - MLP':>12}")
    diffs = []
    for r in range(args.train_seeds):
        key, _, k2, k3, _ = training_keys(args.seed, r)
        out = []
        for net, name in (
            (hy.joint_lstm_residual(jnorm, scale, key=k2), "lstm"),
            (hy.joint_mlp_residual(jnorm, scale, key=k3), "mlp"),
        ):
            model, freeze, lr = two_step(rb, fr, net, name, s)
            res = ht.train(
                model, tr, valid, scale, key=key, lr=lr, max_epochs=s["net_epochs"], freeze=freeze,
                patience=s["patience"], lr_patience=s["lr_patience"],
            )  # fmt: skip
            out.append(float(np.mean(ht.evaluate(res.model, test, scale))))
        diffs.append(out[0] - out[1])
        print(f"{r:>5} {out[0]:>10.6f} {out[1]:>10.6f} {diffs[-1]:>+12.6f}", flush=True)
    d = np.asarray(diffs)
    print(f"LSTM lower in {int(np.sum(d < 0))} of {d.size} seeds; mean difference {d.mean():+.6f} "
          f"(sd {d.std(ddof=1) if d.size > 1 else 0.0:.6f}, se {d.std(ddof=1) / np.sqrt(d.size) if d.size > 1 else 0.0:.6f})")  # fmt: skip


if __name__ == "__main__":
    main()
