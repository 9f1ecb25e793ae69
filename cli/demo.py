"""``bayes-nea demo``: simulate an uncontrolled cart-pole swing and report the energy drift."""

from __future__ import annotations

from cli._args import real

HELP = "simulate an uncontrolled swing of a built-in system with RK4 and print its energy drift"


def add_arguments(parser) -> None:
    parser.add_argument("--system", default="cartpole", help="cartpole or furuta")
    parser.add_argument(
        "--duration", type=real(0.0, 1e5, open_low=True), default=10.0, help="seconds (default 10)"
    )
    parser.add_argument(
        "--angle", type=real(-1e3, 1e3), default=2.0, help="initial pendulum angle, rad"
    )
    parser.add_argument(
        "--rate", type=real(0.0, 1e5, open_low=True), default=250.0, help="integration rate, Hz"
    )


def run(args) -> int:
    import time

    import jax
    import jax.numpy as jnp
    import numpy as np

    import bayes_nea as bn

    robot = bn.get_system(args.system)
    if args.duration <= 0 or args.rate <= 0:
        raise ValueError("--duration and --rate must be positive")
    steps = int(round(args.duration * args.rate))
    if not 1 <= steps <= 10**7:
        raise ValueError(
            f"--duration {args.duration:g} s at --rate {args.rate:g} Hz is {steps} steps; "
            "give between 1 and 1e7"
        )
    dt = 1.0 / args.rate
    q0 = jnp.zeros(robot.n).at[-1].set(args.angle)
    qd0 = jnp.zeros(robot.n)

    @jax.jit
    def simulate(q0, qd0):
        traj = bn.integrate(bn.forward_dynamics(robot), q0, qd0, jnp.zeros((steps, robot.n)), dt=dt)
        energy = jax.vmap(lambda q, qd: bn.total_energy(robot, q, qd))(traj.q, traj.qd)
        return traj, energy

    start = time.perf_counter()
    traj, energy = jax.block_until_ready(simulate(q0, qd0))
    first = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(simulate(q0, qd0))
    again = time.perf_counter() - start
    energy = np.asarray(energy)
    drift = np.abs(energy - energy[0]).max()
    print(f"system: {robot.name}  joints: {', '.join(robot.joint_names)}")
    print(
        f"uncontrolled swing from pendulum angle {args.angle} rad, {args.duration} s at "
        f"{args.rate:g} Hz (RK4, {steps} steps)"
    )
    for k in np.linspace(0, steps, 6).astype(int):
        q = ", ".join(f"{x:+.4f}" for x in np.asarray(traj.q[k]))
        print(f"  t = {float(traj.t[k]):6.2f} s   q = [{q}]   E = {energy[k]:+.9f} J")
    print(f"max |E(t) - E(0)| = {drift:.3e} J (relative {drift / abs(energy[0]):.2e})")
    print(f"time: {first:.2f} s with compile, {again * 1e3:.1f} ms compiled")
    return 0
