"""Dynamics speed on the Panda arm (fingers locked), float64, beside Pinocchio in the same run.

Prints microseconds per sample for ``rnea``, ``aba``, ``crba`` and the joint-torque regressor:
jit + vmap over N states; a single call on one state (numpy arguments), three ways: the library
function called directly (its one-function program, ``bayes_nea.loops.one_function``), the same
in a process with synchronous CPU dispatch (``jax_cpu_enable_async_dispatch=False``, measured in
a child process: the setting is process-wide) and the algorithm inside a caller's ``jax.jit``
(kernel by kernel); Pinocchio's single call (a Python loop over the same states, so it includes
the binding's call overhead); jit compile times; the batched gradient of a summed squared output
with respect to all robot parameters (the shape of an SVI step, 2,500 states) and the size of
the batched compiled graph (fusions, i.e. kernels). Single calls are the best of ``--repeats``
loops of 2,000 calls. The first row is a trivial jitted function called the same way: the floor
of any single call from numpy arguments.

    python benchmarks/dynamics.py [--samples 10000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import site
import subprocess
import sys
import time

import jax
import numpy as np

import bayes_nea as bn


def panda_path() -> str:
    pattern = "cmeel.prefix/share/example-robot-data/robots/panda_description/urdf/panda.urdf"
    for root in site.getsitepackages():
        found = glob.glob(f"{root}/{pattern}")
        if found:
            return found[0]
    raise SystemExit("example-robot-data is not installed: pip install -e '.[test]'")


def best_time(fn, repeats: int) -> float:
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - start)
    return best


def single_call_us(fn, inputs, calls: int = 2000) -> float:
    """Microseconds per call of a compiled ``fn`` called from Python on one state at a time."""
    start = time.perf_counter()
    for k in range(calls):
        out = fn(*(x[k] for x in inputs))
    jax.block_until_ready(out)
    return (time.perf_counter() - start) / calls * 1e6


def best_single_us(fn, inputs, repeats: int) -> float:
    """Best of ``repeats`` :func:`single_call_us` measurements."""
    return min(single_call_us(fn, inputs) for _ in range(repeats))


def library_single_call(algorithm, robot, inputs, repeats: int) -> tuple[float, float]:
    """(first call s, best us per call) of the library function called on one state at a time,
    as a user calls it (no keyword arguments): the one-function program."""
    call = functools.partial(algorithm, robot)
    start = time.perf_counter()
    jax.block_until_ready(call(*(x[0] for x in inputs)))
    return time.perf_counter() - start, best_single_us(call, inputs, repeats)


def sync_dispatch_single_us(args) -> dict:
    """Single-call microseconds ({name: us}) measured by a child process with synchronous
    CPU dispatch (a process-wide JAX setting, so it cannot be switched on in this process)."""
    command = [sys.executable, __file__, "--sync-child", "--samples", str(args.samples)]
    command += ["--repeats", str(args.repeats)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def gradient_cost(robot, fn, inputs, repeats: int, states: int = 2500) -> tuple[float, float]:
    """(us per state, compile s) of the gradient of ``sum(vmap(fn)(states)^2)`` with respect to
    all of ``RobotParams`` (inertial and kinematic), on ``states`` states."""
    params = robot.params(np.float64)
    head = tuple(x[:states] for x in inputs)

    def loss(p):
        out = jax.vmap(lambda *x: fn(*x, params=p))(*head)
        return (out**2).sum()

    grad = jax.jit(jax.grad(loss))
    start = time.perf_counter()
    jax.block_until_ready(grad(params))
    compile_s = time.perf_counter() - start
    best = best_time(lambda: grad(params), repeats)
    return best / len(head[0]) * 1e6, compile_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sync-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sync_child:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    import pinocchio as pin

    fingers = ("panda_finger_joint1", "panda_finger_joint2")
    path = panda_path()
    robot = bn.load_urdf(path, lock_joints=dict.fromkeys(fingers, 0.0))
    full = pin.buildModelFromUrdf(path)
    model = pin.buildReducedModel(full, [full.getJointId(f) for f in fingers], pin.neutral(full))
    model.gravity.linear = np.array(robot.gravity)
    data = model.createData()

    rng = np.random.default_rng(0)
    N, n = args.samples, robot.n
    q, qd, qdd = (rng.uniform(-1, 1, (N, n)) for _ in range(3))
    tau = np.stack([pin.rnea(model, data, q[k], qd[k], qdd[k]) for k in range(N)])

    algorithms = {  # name: (library function, state arguments, Pinocchio's single call)
        "rnea": (bn.rnea, (q, qd, qdd), lambda k: pin.rnea(model, data, q[k], qd[k], qdd[k])),
        "aba": (bn.aba, (q, qd, tau), lambda k: pin.aba(model, data, q[k], qd[k], tau[k])),
        "crba": (bn.crba, (q,), lambda k: pin.crba(model, data, q[k])),
        "regressor": (
            bn.joint_torque_regressor,
            (q, qd, qdd),
            lambda k: pin.computeJointTorqueRegressor(model, data, q[k], qd[k], qdd[k]),
        ),
    }
    trivial = jax.jit(lambda a, b, c: a + b + c)
    jax.block_until_ready(trivial(q[0], qd[0], qdd[0]))
    t_trivial = best_single_us(trivial, (q, qd, qdd), args.repeats)
    if args.sync_child:
        times = {"(trivial)": t_trivial}
        for name, (algorithm, inputs, _) in algorithms.items():
            times[name] = library_single_call(algorithm, robot, inputs, args.repeats)[1]
        print(json.dumps(times))
        return
    sync = sync_dispatch_single_us(args)
    print(
        f"Panda ({n} joints), float64, {N} states, jax {jax.__version__} on {jax.devices()[0].platform}, "
        f"pinocchio {pin.__version__}"
    )
    header = (
        f"{'algorithm':<10} {'batched us/sample':>18} {'single us':>10} {'sync':>6} "
        f"{'in jit':>7} {'pinocchio us':>13} {'batched/pin':>12} "
        f"{'compile s (batch, single, in jit)':>34} {'grad us/sample':>15} "
        f"{'grad compile s':>15} {'fusions':>8}"
    )
    print(header)
    print("-" * len(header))
    print(f"{'(trivial)':<10} {'':>18} {t_trivial:>10.1f} {sync['(trivial)']:>6.1f}")
    for name, (algorithm, inputs, pin_call) in algorithms.items():
        call = functools.partial(algorithm, robot)
        batched = jax.jit(jax.vmap(call))
        start = time.perf_counter()
        jax.block_until_ready(batched(*inputs))
        compile_batched = time.perf_counter() - start
        t_batch = (
            best_time(lambda batched=batched, inputs=inputs: batched(*inputs), args.repeats)
            / N
            * 1e6
        )

        compile_single, t_single = library_single_call(algorithm, robot, inputs, args.repeats)
        in_jit = jax.jit(call)
        start = time.perf_counter()
        jax.block_until_ready(in_jit(*(x[0] for x in inputs)))
        compile_in_jit = time.perf_counter() - start
        t_in_jit = best_single_us(in_jit, inputs, args.repeats)

        t_pin = np.inf
        for _ in range(args.repeats):
            start = time.perf_counter()
            for k in range(N):
                pin_call(k)
            t_pin = min(t_pin, (time.perf_counter() - start) / N * 1e6)
        fusions = batched.lower(*inputs).compile().as_text().count(" fusion(")
        t_grad, compile_grad = gradient_cost(
            robot, lambda *x, params, f=algorithm: f(robot, *x, params=params), inputs, args.repeats
        )
        compiles = f"{compile_batched:.2f}, {compile_single:.2f}, {compile_in_jit:.2f}"
        print(
            f"{name:<10} {t_batch:>18.2f} {t_single:>10.1f} {sync[name]:>6.1f} {t_in_jit:>7.1f} "
            f"{t_pin:>13.2f} {t_batch / t_pin:>12.2f} {compiles:>34} {t_grad:>15.2f} "
            f"{compile_grad:>15.2f} {fusions:>8d}"
        )


if __name__ == "__main__":
    main()
