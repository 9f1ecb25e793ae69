"""Energy of uncontrolled rollouts per posterior draw, energy classes and divergence flags.

DiffNEA (Lutter et al. 2020), sections 3 and 5.1-5.3: without actuation (``tau_d = 0``) a rigid
body model conserves ``E = T + V``, a dissipative actuator (viscous, Stribeck, NN friction) gives
``dE/dt = tau^T qd <= 0``, and unbounded models (residual networks, FF-NN) may gain energy and
diverge, leaving the state domain. This module measures which of these each draw does.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from bayes_nea import Robot, RobotParams, total_energy

ENERGY_CLASSES = ("conserving", "dissipating", "gaining", "divergent")
"""Per-draw classes: within tolerance of E(0); losing energy; gaining energy; non-finite or out of domain."""


class EnergyAnalysis(NamedTuple):
    """Energy behaviour of D uncontrolled rollouts.

    Fields:
        energy: (D, T + 1) total energy along each rollout (J), NaN where the state is not finite.
        classes: (D,) one of :data:`ENERGY_CLASSES` per draw.
        divergent: (D,) True for draws whose rollout is non-finite or leaves the state domain.
        max_gain: (D,) ``max_t E(t) - E(0)`` (J), inf for divergent draws.
        max_step_gain: (D,) ``max_k E(t_k+1) - E(t_k)`` (J), inf for divergent draws.
        final_change: (D,) ``E(T) - E(0)`` (J), NaN for non-finite draws.
        tolerance: (D,) the tolerance each draw was judged with (J).
        fractions: {class: fraction of draws}.
        label: the most frequent class (the variant's behaviour).
    """

    energy: np.ndarray
    classes: tuple[str, ...]
    divergent: np.ndarray
    max_gain: np.ndarray
    max_step_gain: np.ndarray
    final_change: np.ndarray
    tolerance: np.ndarray
    fractions: dict
    label: str


def params_from_physical(robot: Robot, physical: dict, *, dtype=None) -> RobotParams:
    """Stack a posterior's physical draws into :class:`RobotParams` with a leading draw axis.

    Args:
        physical: {"theta": (D, n, 10), optional "rpy"/"xyz": (D, n, 3)}; missing placements are
            the robot's nominal (known kinematics).
    Returns:
        RobotParams with ``theta`` (D, n, 10), ``rpy``/``xyz`` (D, n, 3).
    Raises:
        ValueError: no ``theta`` or shapes that do not match the robot.
    """
    if "theta" not in physical:
        raise ValueError(
            f"physical draws have no 'theta' (keys: {sorted(physical)}); a model without inertial "
            "parameters (e.g. 'ffnn') has no energy of its own: pass params=None to use the robot's"
        )
    theta = jnp.asarray(physical["theta"], dtype)
    if theta.ndim != 3 or theta.shape[1:] != (robot.n, 10):
        raise ValueError(f"theta has shape {theta.shape}, expected (D, {robot.n}, 10)")
    d = theta.shape[0]
    out = {}
    for name in ("rpy", "xyz"):
        if name in physical:
            x = jnp.asarray(physical[name], theta.dtype)
            if x.shape != (d, robot.n, 3):
                raise ValueError(f"{name} has shape {x.shape}, expected ({d}, {robot.n}, 3)")
        else:
            x = jnp.broadcast_to(
                jnp.asarray(getattr(robot.nominal, name), theta.dtype), (d, robot.n, 3)
            )
        out[name] = x
    return RobotParams(theta, out["rpy"], out["xyz"])


@jax.jit
def _energy_batch(robot, q, qd, params):
    def along(q_t, qd_t, p):
        return jax.vmap(lambda a, b: total_energy(robot, a, b, params=p))(q_t, qd_t)

    return jax.vmap(along)(q, qd, params)


def rollout_energy(robot: Robot, q, qd, *, params: RobotParams | None = None) -> np.ndarray:
    """Total energy ``T + V`` (J) along D rollouts.

    Args:
        q, qd: (D, T + 1, n) rollout states.
        params: RobotParams with a leading draw axis (see :func:`params_from_physical`); None: the
            robot's nominal parameters for every draw (energy of the reference system along the
            predicted states, usable for any model, including black-box ones).
    Returns:
        (D, T + 1) energy, NaN where the state is not finite.
    """
    q, qd = jnp.asarray(q), jnp.asarray(qd)
    if q.ndim != 3 or q.shape != qd.shape or q.shape[2] != robot.n:
        raise ValueError(f"q {q.shape} and qd {qd.shape} must both be (D, T + 1, {robot.n})")
    d = q.shape[0]
    if params is None:
        params = RobotParams(
            *(jnp.broadcast_to(jnp.asarray(x, q.dtype), (d, *np.shape(x))) for x in robot.nominal)
        )
    else:
        params = RobotParams(*(jnp.asarray(x, q.dtype) for x in params))
        if params.theta.shape != (d, robot.n, 10):
            raise ValueError(
                f"params.theta has shape {params.theta.shape}, expected ({d}, {robot.n}, 10)"
            )
    finite = jnp.all(jnp.isfinite(q) & jnp.isfinite(qd), axis=2)
    safe_q = jnp.where(finite[..., None], q, jnp.zeros((), q.dtype))
    safe_qd = jnp.where(finite[..., None], qd, jnp.zeros((), q.dtype))
    energy = np.asarray(_energy_batch(robot, safe_q, safe_qd, params), dtype=float)
    return np.where(np.asarray(finite), energy, np.nan)


def divergence_flags(
    robot: Robot,
    q,
    qd,
    *,
    velocity_bound: float | np.ndarray = 100.0,
    position_margin: float = 0.5,
) -> np.ndarray:
    """(D,) True for rollouts that are non-finite or leave the state domain.

    The domain: every joint with finite limits stays within ``[lower - m, upper + m]`` with
    ``m = position_margin * (upper - lower)``, and every ``|qd|`` stays below ``velocity_bound``
    (rad/s or m/s; scalar or (n,)).

    Args:
        q, qd: (D, T + 1, n).
    """
    q, qd = np.asarray(q, dtype=float), np.asarray(qd, dtype=float)
    if q.ndim != 3 or q.shape != qd.shape or q.shape[2] != robot.n:
        raise ValueError(f"q {q.shape} and qd {qd.shape} must both be (D, T + 1, {robot.n})")
    if position_margin < 0:
        raise ValueError(f"position_margin must be >= 0, got {position_margin}")
    bound = np.broadcast_to(np.asarray(velocity_bound, dtype=float), (robot.n,))
    if np.any(bound <= 0):
        raise ValueError(f"velocity_bound must be positive, got {velocity_bound}")
    lower, upper = np.asarray(robot.lower), np.asarray(robot.upper)
    bounded = np.isfinite(lower) & np.isfinite(upper) & ~np.asarray(robot.continuous)
    margin = np.where(bounded, position_margin * (upper - lower), 0.0)
    with np.errstate(invalid="ignore"):
        bad = ~(np.isfinite(q) & np.isfinite(qd))
        bad |= bounded & ((q < lower - margin) | (q > upper + margin))
        bad |= np.abs(qd) > bound
    return bad.any(axis=(1, 2))


def classify_energy(
    energy,
    *,
    divergent=None,
    rtol: float = 1e-3,
    atol: float = 1e-9,
) -> EnergyAnalysis:
    """Classify each draw's uncontrolled energy trace.

    With ``tol = atol + rtol * max(|E(0)|, max_t E - min_t E)`` per draw:
    *divergent* if flagged or non-finite; *gaining* if ``max_t E(t) - E(0) > tol``; *conserving*
    if ``max_t |E(t) - E(0)| <= tol``; *dissipating* otherwise (energy lost, never gained beyond tol).

    Args:
        energy: (D, T + 1) energy (J). divergent: optional (D,) flags from :func:`divergence_flags`.
    """
    energy = np.asarray(energy, dtype=float)
    if energy.ndim != 2 or energy.shape[1] < 2:
        raise ValueError(f"energy has shape {energy.shape}, expected (D, T + 1) with T >= 1")
    d = energy.shape[0]
    finite = np.all(np.isfinite(energy), axis=1)
    div = ~finite if divergent is None else (np.asarray(divergent, dtype=bool) | ~finite)
    if div.shape != (d,):
        raise ValueError(f"divergent has shape {div.shape}, expected ({d},)")
    e0 = energy[:, :1]
    with np.errstate(invalid="ignore"):
        span = np.nanmax(np.where(finite[:, None], energy, np.nan), axis=1, initial=-np.inf)
        span = span - np.nanmin(np.where(finite[:, None], energy, np.nan), axis=1, initial=np.inf)
        scale = np.maximum(np.abs(e0[:, 0]), np.where(finite, span, 0.0))
        tol = atol + rtol * np.where(np.isfinite(scale), scale, 0.0)
        dev = energy - e0
        max_gain = np.where(finite, np.max(np.where(finite[:, None], dev, 0.0), axis=1), np.inf)
        max_abs = np.where(
            finite, np.max(np.abs(np.where(finite[:, None], dev, 0.0)), axis=1), np.inf
        )
        steps = np.diff(energy, axis=1)
        max_step = np.where(finite, np.max(np.where(finite[:, None], steps, 0.0), axis=1), np.inf)
    max_gain = np.where(div, np.inf, max_gain)
    max_step = np.where(div, np.inf, max_step)
    classes = np.where(
        div,
        "divergent",
        np.where(max_gain > tol, "gaining", np.where(max_abs <= tol, "conserving", "dissipating")),
    )
    fractions = {c: float(np.mean(classes == c)) for c in ENERGY_CLASSES}
    label = max(ENERGY_CLASSES, key=lambda c: (fractions[c], -ENERGY_CLASSES.index(c)))
    return EnergyAnalysis(
        energy=energy,
        classes=tuple(str(c) for c in classes),
        divergent=div,
        max_gain=max_gain,
        max_step_gain=max_step,
        final_change=energy[:, -1] - energy[:, 0],
        tolerance=tol,
        fractions=fractions,
        label=label,
    )


def analyse_energy(
    robot: Robot,
    q,
    qd,
    *,
    params: RobotParams | None = None,
    velocity_bound: float | np.ndarray = 100.0,
    position_margin: float = 0.5,
    rtol: float = 1e-3,
    atol: float = 1e-9,
) -> EnergyAnalysis:
    """Energy per draw of uncontrolled rollouts ``q, qd`` (D, T + 1, n), classified, with divergence.

    Combines :func:`rollout_energy`, :func:`divergence_flags` and :func:`classify_energy`.
    """
    energy = rollout_energy(robot, q, qd, params=params)
    div = divergence_flags(
        robot, q, qd, velocity_bound=velocity_bound, position_margin=position_margin
    )
    return classify_energy(energy, divergent=div, rtol=rtol, atol=atol)
