"""Joint friction: the one Stribeck + Coulomb + viscous law of the simulator, the models and the
analysis (DiffNEA section 3, "Stribeck").

``tau_f = mu_v qd + sign(qd) (f_s + f_d exp(-(qd / v_s)^2))`` per joint, opposing the motion: the
joint receives ``tau - tau_f``. The paper's ``nu_s qd^2`` is written ``(qd / v_s)^2``
(``nu_s = 1 / v_s^2``); ``sign`` may be smoothed to ``tanh(qd / smoothing)`` (a simulated plant is
then a smooth ODE for RK4).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

FRICTION_FIELDS = ("viscous", "coulomb", "stribeck_amplitude", "stribeck_velocity")
"""The friction coefficients, in :class:`FrictionParams` order."""


class FrictionParams(NamedTuple):
    """Friction coefficients per joint (a pytree; every field may be traced).

    Fields:
        viscous: (n,) ``mu_v``, N s/m or N m s/rad.
        coulomb: (n,) ``f_s``, N or N m.
        stribeck_amplitude: (n,) ``f_d``, the extra static friction at rest that decays with speed
            (N or N m); the breakaway friction is ``coulomb + stribeck_amplitude``.
        stribeck_velocity: (n,) ``v_s`` (> 0), m/s or rad/s.
        smoothing: None for the exact ``sign``, or a scalar velocity ``eps`` (> 0) of
            ``tanh(qd / eps)`` (m/s or rad/s).
    """

    viscous: jax.Array
    coulomb: jax.Array
    stribeck_amplitude: jax.Array
    stribeck_velocity: jax.Array
    smoothing: jax.Array | None = None


def joint_friction(p: FrictionParams, qd: jax.Array) -> jax.Array:
    """The friction torque ``tau_f`` (n,) at joint velocities ``qd`` (n,), in ``qd``'s dtype.

    ``tau_f . qd >= 0`` for non-negative coefficients (friction only dissipates); subtract it
    from the joint torque.
    """
    dtype = qd.dtype
    c = {f: jnp.asarray(getattr(p, f), dtype) for f in FRICTION_FIELDS}
    level = c["coulomb"] + c["stribeck_amplitude"] * jnp.exp(-((qd / c["stribeck_velocity"]) ** 2))
    direction = (
        jnp.sign(qd) if p.smoothing is None else jnp.tanh(qd / jnp.asarray(p.smoothing, dtype))
    )
    return c["viscous"] * qd + direction * level
