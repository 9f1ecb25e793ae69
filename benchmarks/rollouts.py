"""Posterior-rollout speed: D draws x T RK4 steps, vmapped, cart-pole and Panda, float64 and float32.

Each draw perturbs the nominal inertial parameters (a body's whole ``theta`` scaled, which keeps it
physically consistent) and adds a viscous damping; the uncontrolled system is rolled out from one
start state with :func:`analysis.make_rollout_fn` (one jitted ``vmap`` of a ``lax.scan``). Prints
the compile time and the best of ``--repeats`` compiled runs. Target: cart-pole under 1 s.

    python benchmarks/rollouts.py [--draws 1000] [--steps 1000] [--repeats 3] [--systems cartpole panda]
"""

from __future__ import annotations

import argparse
import glob
import site
import time

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from analysis import make_rollout_fn

PANDA_FINGERS = ("panda_finger_joint1", "panda_finger_joint2")


def panda_path() -> str:
    pattern = "cmeel.prefix/share/example-robot-data/robots/panda_description/urdf/panda.urdf"
    for root in site.getsitepackages():
        found = glob.glob(f"{root}/{pattern}")
        if found:
            return found[0]
    raise SystemExit("example-robot-data is not installed: pip install -e '.[test]'")


def load(name: str) -> bn.Robot:
    if name == "panda":
        return bn.load_urdf(panda_path(), lock_joints=dict.fromkeys(PANDA_FINGERS, 0.0))
    return bn.get_system(name)


def qdd_fn_of_draw(robot):
    def of_draw(draw):
        dtype = draw["theta"].dtype
        params = bn.RobotParams(draw["theta"], *(jnp.asarray(x, dtype) for x in robot.nominal[1:]))
        return lambda q, qd, tau: bn.aba(robot, q, qd, tau - draw["b"] * qd, params=params)

    return of_draw


def measure(robot, draws: int, steps: int, dtype, repeats: int) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    theta = rng.uniform(0.9, 1.1, (draws, robot.n, 1)) * np.asarray(robot.nominal.theta)[None]
    b = rng.uniform(0.0, 0.05, (draws, robot.n))
    sample = {"theta": jnp.asarray(theta, dtype), "b": jnp.asarray(b, dtype)}
    q0 = jnp.asarray(np.linspace(0.3, 1.0, robot.n), dtype)
    qd0 = jnp.zeros(robot.n, dtype)
    rollout = make_rollout_fn(qdd_fn_of_draw(robot), steps=steps)
    start = time.perf_counter()
    jax.block_until_ready(rollout(sample, q0, qd0))
    first = time.perf_counter() - start
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        traj = jax.block_until_ready(rollout(sample, q0, qd0))
        best = min(best, time.perf_counter() - start)
    if not np.all(np.isfinite(np.asarray(traj.q))):
        raise SystemExit(f"{robot.name}: non-finite rollout in {jnp.dtype(dtype).name}")
    return first - best, best


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--systems", nargs="+", default=["cartpole", "panda"])
    args = parser.parse_args(argv)
    print(
        f"{args.draws} draws x {args.steps} RK4 steps (dt = 1/250 s), jit(vmap(lax.scan)), {jax.devices()[0].platform}"
    )
    print(
        f"{'system':10s} {'n':>2s} {'dtype':8s} {'compile s':>10s} {'run s':>8s} {'us/draw/step':>13s}"
    )
    for name in args.systems:
        robot = load(name)
        for dtype in (jnp.float64, jnp.float32):
            compile_s, run_s = measure(robot, args.draws, args.steps, dtype, args.repeats)
            per = run_s / (args.draws * args.steps) * 1e6
            print(
                f"{name:10s} {robot.n:2d} {jnp.dtype(dtype).name:8s} {compile_s:10.2f} {run_s:8.3f} {per:13.4f}"
            )


if __name__ == "__main__":
    main()
