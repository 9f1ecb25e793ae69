"""Excitation trajectories for fully actuated arms: finite Fourier series (Swevers et al. 1997).

``q_i(t) = q0_i + sum_{l=1..L} a_il / (w_f l) sin(w_f l t) - b_il / (w_f l) cos(w_f l t)``
(Reuss et al. eq. 11), periodic with period ``2 pi / w_f``. Random coefficients are drawn from a
seed and then scaled so that position, velocity and acceleration stay within the limits (scaling
all amplitudes by ``s`` scales the deviation from ``q0`` and both derivatives by ``s``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np


class FourierTrajectory(NamedTuple):
    """Coefficients of a finite Fourier series per joint.

    Fields:
        q0: (n,) offsets (rad or m). a, b: (n, L) sine and cosine coefficients (per s).
        w_f: fundamental pulsation (rad/s).
    """

    q0: np.ndarray
    a: np.ndarray
    b: np.ndarray
    w_f: float

    def __call__(self, t):
        """``(q, qd, qdd)`` (n,) each at time ``t`` (jittable)."""
        dtype = jnp.result_type(float, t)
        l = jnp.arange(1, self.a.shape[1] + 1, dtype=dtype)
        w = jnp.asarray(self.w_f, dtype) * l  # (L,)
        s, c = jnp.sin(w * t)[None, :], jnp.cos(w * t)[None, :]  # (1, L)
        a, b = jnp.asarray(self.a, dtype), jnp.asarray(self.b, dtype)
        q = jnp.asarray(self.q0, dtype) + (a * s - b * c) @ (1.0 / w)
        qd = (a * c + b * s).sum(axis=1)
        qdd = (-a * s + b * c) @ w
        return q, qd, qdd

    def sample(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(q, qd, qdd)`` (T, n) at times ``t`` (T,), numpy."""
        t = np.asarray(t, dtype=np.float64)[:, None, None]
        l = np.arange(1, self.a.shape[1] + 1)
        w = self.w_f * l
        s, c = np.sin(w * t), np.cos(w * t)  # (T, 1, L)
        q = self.q0 + ((self.a * s - self.b * c) / w).sum(-1)
        qd = (self.a * c + self.b * s).sum(-1)
        qdd = ((-self.a * s + self.b * c) * w).sum(-1)
        return q, qd, qdd


def fourier_excitation(
    lower,
    upper,
    *,
    seed: int,
    velocity_limit,
    acceleration_limit,
    harmonics: int = 5,
    base_frequency_hz: float = 0.1,
    margin: float = 0.1,
) -> FourierTrajectory:
    """A random finite Fourier series within position, velocity and acceleration limits.

    Args:
        lower, upper: (n,) position limits; ``inf`` limits are treated as ``-pi, pi``.
        velocity_limit, acceleration_limit: (n,) or scalar absolute bounds.
        harmonics: ``L``. base_frequency_hz: ``w_f / 2 pi``.
        margin: fraction of the half range kept free at each position limit.

    Returns:
        A :class:`FourierTrajectory` whose ``|q - q0| <= (1 - margin) half-range``,
        ``|qd| <= velocity_limit`` and ``|qdd| <= acceleration_limit`` (checked on a dense grid
        over one period, with a 0.1% safety factor), one bound nearly active per joint.
    """
    lower = np.asarray(lower, dtype=float)
    upper = np.asarray(upper, dtype=float)
    n = lower.shape[0]
    lower = np.where(np.isfinite(lower), lower, -np.pi)
    upper = np.where(np.isfinite(upper), upper, np.pi)
    if upper.shape != (n,) or np.any(upper <= lower):
        raise ValueError(
            f"position limits must satisfy lower < upper per joint, got {lower}, {upper}"
        )
    vmax = np.broadcast_to(np.asarray(velocity_limit, dtype=float), (n,))
    amax = np.broadcast_to(np.asarray(acceleration_limit, dtype=float), (n,))
    if np.any(~(vmax > 0)) or np.any(~(amax > 0)) or harmonics < 1 or base_frequency_hz <= 0:
        raise ValueError(
            "velocity and acceleration limits, harmonics and base frequency must be > 0"
        )
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    rng = np.random.default_rng(seed)
    w_f = 2 * np.pi * base_frequency_hz
    a = rng.normal(size=(n, harmonics))
    b = rng.normal(size=(n, harmonics))
    # b makes q(0) - q0 = -sum b / (w l); centre the trajectory: q0 = mid-range
    q0 = 0.5 * (lower + upper)
    half = 0.5 * (upper - lower) * (1 - margin)
    unit = FourierTrajectory(q0, a, b, w_f)
    t = np.linspace(0.0, 2 * np.pi / w_f, 64 * harmonics * 8, endpoint=False)
    q, qd, qdd = unit.sample(t)
    scale = np.min(
        np.stack(
            [
                half / np.abs(q - q0).max(0),
                vmax / np.abs(qd).max(0),
                amax / np.abs(qdd).max(0),
            ]
        ),
        axis=0,
    )  # per joint
    scale = scale * (1.0 - 1e-3)  # the grid maximum may miss the true one by ~1e-5 (relative)
    return FourierTrajectory(q0, a * scale[:, None], b * scale[:, None], w_f)


def robot_excitation(
    robot,
    *,
    seed: int,
    velocity_fraction: float = 0.4,
    acceleration_limit: float = 5.0,
    harmonics: int = 5,
    base_frequency_hz: float = 0.1,
    margin: float = 0.1,
) -> FourierTrajectory:
    """:func:`fourier_excitation` within ``robot``'s joint limits, at ``velocity_fraction`` of its
    velocity limits (a joint without one is taken as 1 rad/s or m/s)."""
    vlim = np.asarray(robot.velocity_limit, dtype=float)
    vlim = np.where(np.isfinite(vlim) & (vlim > 0), vlim, 1.0) * float(velocity_fraction)
    return fourier_excitation(
        robot.lower,
        robot.upper,
        seed=seed,
        velocity_limit=vlim,
        acceleration_limit=acceleration_limit,
        harmonics=int(harmonics),
        base_frequency_hz=float(base_frequency_hz),
        margin=float(margin),
    )
