"""A physical plant: rigid bodies driven through a DC motor (optional) against joint friction,
with an optional actuation delay.

``qdd = aba(q, qd, motor(tau_d, qd) - joint_friction(qd); params)``: the forward dynamics of a
simulated (true) system as a function of the torque command ``tau_d`` that reaches it. The dataset
generators integrate it and the analysis rolls the same function out
(``data.Dataset.true_dynamics``); the delay acts in closed loop
(:func:`bayes_nea.run_closed_loop` with ``delay_steps=``:func:`delay_steps`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from bayes_nea.dynamics import aba
from bayes_nea.friction import FrictionParams, joint_friction
from bayes_nea.integrate import QddFn
from bayes_nea.robot import Robot, RobotParams
from bayes_nea.systems import DCMotor


class Plant(NamedTuple):
    """The true physical parameters of a joint-space plant (a pytree; every leaf may be traced).

    Fields:
        params: the rigid bodies' :class:`bayes_nea.RobotParams`.
        friction: :class:`bayes_nea.FrictionParams` of every joint (unactuated ones included).
        motor: :class:`bayes_nea.DCMotor` between the command and the joint, or None (the
            command is the joint torque).
        delay_s: actuation delay (s): a command reaches the plant this much later.
    """

    params: RobotParams
    friction: FrictionParams
    motor: DCMotor | None = None
    delay_s: float = 0.0


def delay_steps(plant: Plant, dt: float) -> int:
    """The plant's actuation delay in whole steps of ``dt`` (s) (a concrete, static int).

    Raises:
        ValueError: a negative delay.
    """
    steps = int(round(float(plant.delay_s) / dt))
    if steps < 0:
        raise ValueError(f"the actuation delay must be >= 0, got {plant.delay_s} s")
    return steps


def motor_torque(m: DCMotor, tau_d: jax.Array, qd: jax.Array) -> jax.Array:
    """DC motor output (n,): ``gain sat(tau_d / gain) - back_emf qd``, ``|V| <= voltage_limit``.

    ``V = tau_d / gain`` is the voltage a controller commanding ``tau_d`` sends; joints with
    ``gain == 0`` (unactuated) get no drive torque.
    """
    dtype = qd.dtype
    gain = jnp.asarray(m.gain, dtype)
    driven = gain != 0
    volts = jnp.where(driven, tau_d / jnp.where(driven, gain, 1.0), 0.0)
    limit = jnp.asarray(m.voltage_limit, dtype)
    volts = jnp.clip(volts, -limit, limit)
    return gain * volts - jnp.asarray(m.back_emf, dtype) * qd


def plant_dynamics(robot: Robot, plant: Plant, *, gravity: jax.Array | None = None) -> QddFn:
    """The plant's forward dynamics ``(q, qd, tau_d) -> qdd`` (n,) each, in the state's dtype.

    ``tau = motor_torque(tau_d, qd) - joint_friction(qd)`` (no motor: ``tau_d - joint_friction``),
    then ``qdd = aba(robot, q, qd, tau; plant.params)``.
    """

    def qdd_fn(q, qd, tau_d):
        dtype = jnp.result_type(float, q, qd, tau_d)
        q, qd, tau_d = (jnp.asarray(x, dtype) for x in (q, qd, tau_d))
        tau = tau_d if plant.motor is None else motor_torque(plant.motor, tau_d, qd)
        tau = tau - joint_friction(plant.friction, qd)
        return aba(robot, q, qd, tau, params=plant.params.astype(dtype), gravity=gravity)

    return qdd_fn
