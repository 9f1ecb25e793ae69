"""Prior objects that the families and actuators consult: the paper's "with" / "without prior".

The DiffNEA paper compares white-box models initialised "with prior" (the manufacturer's values)
and "without prior" (random initialisation) (Lutter et al. 2021, section 4.4). In a Bayesian model
that choice is a prior distribution, not a second model, so each family asks one prior object for
the location and scale of every quantity it samples:

``InformativePrior`` (``"informative"``)
    centred on the robot's nominal parameters: for the built-in systems ``robot.nominal`` and
    ``robot.damping`` hold the published values (docs/reference-systems.md), for a URDF its values.
    Masses and lengths are tight (a few %); damping values are disputed between sources by
    2-3 orders of magnitude, so friction priors are broad log-normals even here.
``WeakPrior`` (``"weak"``)
    broad, robot-agnostic priors that do not use the nominal values (sub-kg masses, 10-cm-scale
    centres of mass, friction spanning decades).

Every quantity is a :class:`Gaussian` over an unconstrained coordinate (virtual inertia
parameters, placement angles and offsets, log friction coefficients, log noise scales), so the
same prior serves NUTS, SVI and the closed-form NEA posterior. Locations and scales are numpy
float64 arrays (static data); models cast them to the data's dtype.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from typing import ClassVar, NamedTuple, final

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from models.spec import PRIOR_NAMES

FRICTION_NAMES = ("viscous", "coulomb", "stribeck_amplitude", "stribeck_velocity")


class Gaussian(NamedTuple):
    """Independent normal prior ``x ~ N(loc, scale^2)`` elementwise (numpy float64 arrays).

    Fields:
        loc: location, any shape.
        scale: standard deviation, same shape, > 0.
    """

    loc: np.ndarray
    scale: np.ndarray


def _gaussian(loc, scale) -> Gaussian:
    loc = np.asarray(loc, dtype=np.float64)
    scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), loc.shape).copy()
    if not (np.all(np.isfinite(loc)) and np.all(scale > 0) and np.all(np.isfinite(scale))):
        raise ValueError(f"prior needs finite locations and positive scales, got {loc}, {scale}")
    return Gaussian(loc, scale)


class Prior(abc.ABC):
    """Abstract prior: what a family or actuator may ask about a robot (``n`` joints).

    Every method returns a :class:`Gaussian` over the unconstrained coordinate named in its
    docstring.
    """

    name: str
    #: whether inference starts the rigid-body and friction sites at the prior median (a prior
    #: centred on known values: the paper's "with prior" initialisation) rather than at a draw
    starts_at_median: ClassVar[bool] = False

    @abc.abstractmethod
    def inertia(self, robot: bn.Robot) -> Gaussian:
        """DiffNEA virtual inertia parameters (n, 10) ``[sqrt_m, sqrt_L1..3, r, c]`` of ``robot``."""

    @abc.abstractmethod
    def placement(self, robot: bn.Robot) -> tuple[Gaussian, Gaussian]:
        """Joint placements of ``robot``: ``(rpy (n, 3) in rad, xyz (n, 3) in m)``."""

    @abc.abstractmethod
    def theta(self, robot: bn.Robot) -> Gaussian:
        """Raw inertial parameters theta (n, 10) (the linear NEA model)."""

    @abc.abstractmethod
    def friction(self, robot: bn.Robot, what: str) -> Gaussian:
        """Log of a friction coefficient (n,): ``what`` in :data:`FRICTION_NAMES`."""

    def noise(self, n: int, *, typical: float) -> Gaussian:
        """Log of the per-joint noise scales (n,), around ``typical`` (broad: +-3 decades at 2 sd)."""
        return _gaussian(np.full(n, np.log(typical)), 3.5)

    def nn_weight_scale(self, fan_in: int) -> float:
        """Prior standard deviation of network weights with ``fan_in`` inputs (1 / sqrt(fan_in))."""
        return 1.0 / np.sqrt(fan_in)


_WEAK_FRICTION = {
    # log-space location and scale; the location is a fraction of the joint's effort scale
    # (effort_scale: N or N m; viscous per unit velocity, s/m or s/rad), except the Stribeck
    # velocity, which is absolute (m/s or rad/s)
    "viscous": (0.05, 2.5),
    "coulomb": (0.02, 2.5),
    "stribeck_amplitude": (0.01, 2.5),
    "stribeck_velocity": (0.1, 1.0),
}
_SCALED = ("viscous", "coulomb", "stribeck_amplitude")


@functools.lru_cache(maxsize=64)
def effort_scale(robot: bn.Robot) -> tuple[float, ...]:
    """Per-joint effort scale (n,) (N or N m) that friction priors are fractions of.

    A driven joint with a finite effort limit (URDF ``<limit effort>``) uses it; any other joint
    (an unactuated pendulum, a URDF without limits) uses the rms torque of the nominal RNEA over
    random states (``bayes_nea.sample_states``; gravity and inertia of the links it carries).
    The built-in systems' values are listed in the README ("Priors scaled to the system").
    """
    limit = np.abs(np.asarray(robot.effort_limit, dtype=np.float64))
    with jax.ensure_compile_time_eval():
        q, qd, qdd = bn.sample_states(robot, 0, 64)
        params = robot.nominal.astype(q.dtype)
        tau = jax.vmap(lambda a, b, c: bn.rnea(robot, a, b, c, params=params))(q, qd, qdd)
    rms = np.sqrt(np.mean(np.asarray(tau, dtype=np.float64) ** 2, axis=0))
    rms = np.maximum(rms, max(1e-3 * float(rms.max()), 1e-9))
    use_limit = np.isfinite(limit) & (limit > 0)
    return tuple(float(x) for x in np.where(use_limit, limit, rms))


@final
@dataclasses.dataclass(frozen=True)
class WeakPrior(Prior):
    """Broad priors that do not know the robot (the paper's "without prior").

    Fields:
        sqrt_mass: (loc, scale) of ``sqrt(m)`` in sqrt(kg): 0.5 +- 0.5, masses up to a few kg.
        sqrt_moment: (loc, scale) of ``sqrt(L_i)``: 0.05 +- 0.1 (second moments up to ~0.06 kg m^2).
        rotation: scale of the principal-axes rotation vector (rad).
        com: scale of the centre of mass (m).
        rpy, xyz: scales of the placement angles (rad) and offsets (m), centred on 0.
        theta: scale of raw theta entries (NEA), centred on 0.
    """

    name: str = "weak"
    sqrt_mass: tuple[float, float] = (0.5, 0.5)
    sqrt_moment: tuple[float, float] = (0.05, 0.1)
    rotation: float = 0.5
    com: float = 0.2
    rpy: float = 1.5
    xyz: float = 0.3
    theta_scale: float = 1.0

    def inertia(self, robot):
        n = robot.n
        loc = np.zeros((n, 10))
        scale = np.zeros((n, 10))
        loc[:, 0], scale[:, 0] = self.sqrt_mass
        loc[:, 1:4], scale[:, 1:4] = self.sqrt_moment
        scale[:, 4:7] = self.rotation
        scale[:, 7:10] = self.com
        return _gaussian(loc, scale)

    def placement(self, robot):
        n = robot.n
        return _gaussian(np.zeros((n, 3)), self.rpy), _gaussian(np.zeros((n, 3)), self.xyz)

    def theta(self, robot):
        return _gaussian(np.zeros((robot.n, 10)), self.theta_scale)

    def friction(self, robot, what):
        """Log-normal around a fraction of :func:`effort_scale` (module table ``_WEAK_FRICTION``):
        median Coulomb 2 %, Stribeck amplitude 1 %, viscous 5 % of the effort scale per unit
        velocity; log sd 2.5 (a factor 150 at 2 sd); Stribeck velocity 0.1 (log sd 1)."""
        _check_friction(what)
        value, log_scale = _WEAK_FRICTION[what]
        loc = value * np.asarray(effort_scale(robot)) if what in _SCALED else np.full(robot.n, value)
        return _gaussian(np.log(loc), log_scale)


@final
@dataclasses.dataclass(frozen=True)
class InformativePrior(Prior):
    """Priors centred on the robot's nominal (published or URDF) values ("with prior").

    Fields:
        mass_rel: relative sd of ``sqrt(m)`` (0.05: about +-10% in mass at 1 sd).
        moment_rel: relative sd of ``sqrt(L_i)``, plus ``moment_floor`` times the body's largest.
        rotation: sd of the principal-axes rotation vector (rad).
        com_rel, com_floor: sd of the CoM: ``com_rel |c| + com_floor`` (m).
        rpy, xyz_rel, xyz_floor: placement sds: angles (rad), offsets ``xyz_rel |p| + xyz_floor`` (m).
        theta_rel, theta_floor: NEA theta sd ``theta_rel |theta| + theta_floor max|theta_body|``.
        friction_log_scale: log-space sd of friction coefficients around the nominal damping
            (broad: sources disagree by orders of magnitude).
    """

    name: str = "informative"
    starts_at_median: ClassVar[bool] = True
    mass_rel: float = 0.05
    moment_rel: float = 0.25
    moment_floor: float = 0.1
    rotation: float = 0.2
    com_rel: float = 0.1
    com_floor: float = 0.01
    rpy: float = 0.05
    xyz_rel: float = 0.05
    xyz_floor: float = 0.01
    theta_rel: float = 0.2
    theta_floor: float = 0.02
    friction_log_scale: float = 1.5

    def inertia(self, robot):
        theta = np.asarray(robot.nominal.theta, dtype=np.float64)
        with jax.ensure_compile_time_eval():
            x = np.asarray(bn.bodies_from_theta("diffnea", jnp.asarray(theta)), dtype=np.float64)
        scale = np.zeros_like(x)
        scale[:, 0] = self.mass_rel * np.abs(x[:, 0])
        sqrt_l = np.abs(x[:, 1:4])
        scale[:, 1:4] = self.moment_rel * sqrt_l + self.moment_floor * sqrt_l.max(
            axis=1, keepdims=True
        )
        scale[:, 4:7] = self.rotation
        scale[:, 7:10] = self.com_rel * np.abs(x[:, 7:10]) + self.com_floor
        return _gaussian(x, scale)

    def placement(self, robot):
        rpy = np.asarray(robot.nominal.rpy, dtype=np.float64)
        xyz = np.asarray(robot.nominal.xyz, dtype=np.float64)
        return (
            _gaussian(rpy, self.rpy),
            _gaussian(xyz, self.xyz_rel * np.abs(xyz) + self.xyz_floor),
        )

    def theta(self, robot):
        theta = np.asarray(robot.nominal.theta, dtype=np.float64)
        floor = self.theta_floor * np.abs(theta).max(axis=1, keepdims=True)
        return _gaussian(theta, self.theta_rel * np.abs(theta) + floor)

    def friction(self, robot, what):
        _check_friction(what)
        weak = WeakPrior().friction(robot, what)
        nominal = {"viscous": robot.damping, "coulomb": robot.friction}.get(what)
        if nominal is None:
            return weak
        nominal = np.asarray(nominal, dtype=np.float64)
        known = nominal > 0
        loc = np.where(known, np.log(np.where(known, nominal, 1.0)), weak.loc)
        scale = np.where(known, self.friction_log_scale, weak.scale)
        return _gaussian(loc, scale)


_PRIORS = {"informative": InformativePrior, "weak": WeakPrior}


def get_prior(name: str | Prior) -> Prior:
    """The prior called ``name`` (``"informative"`` or ``"weak"``); a :class:`Prior` is returned as is.

    Raises:
        ValueError: unknown name (the message lists the valid ones).
    """
    if isinstance(name, Prior):
        return name
    if name not in _PRIORS:
        raise ValueError(f"unknown prior {name!r}; valid priors are {list(PRIOR_NAMES)}")
    return _PRIORS[name]()


def _check_friction(what: str) -> None:
    if what not in FRICTION_NAMES:
        raise ValueError(f"unknown friction coefficient {what!r}; valid ones are {FRICTION_NAMES}")
