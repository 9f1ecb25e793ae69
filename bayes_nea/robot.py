"""The robot model: static tree structure kept apart from the differentiable parameters.

``Robot`` is a frozen dataclass registered as a JAX pytree: its only leaves are the nominal
:class:`RobotParams`; everything else (names, parents, joint kinds, axes, URDF joint data) is
hashable static structure, so ``jax.jit(rnea)(robot, q, qd, qdd)`` works and the tree is unrolled
at trace time. Robots compare and hash by value (fields and nominal parameters), so an equal
robot built again shares what JAX traced for the first.

Bodies and movable joints share one index ``i`` (body ``i`` is the child of joint ``i``); joint
order is Pinocchio's (depth-first over the URDF tree). ``parents[i]`` is the parent body's index,
``-1`` for the fixed base.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

REVOLUTE = "revolute"
PRISMATIC = "prismatic"
JOINT_TYPES = (REVOLUTE, PRISMATIC)
DEFAULT_GRAVITY = (0.0, 0.0, -9.81)


class RobotParams(NamedTuple):
    """Differentiable parameters of a robot with ``n`` movable joints.

    Fields:
        theta: (n, 10) inertial parameters per body, in the body (= child joint) frame, ordered
            ``[m, h_x, h_y, h_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]`` (``h = m c``, ``I`` about the
            body origin); Pinocchio's ``toDynamicParameters`` order.
        rpy: (n, 3) roll, pitch, yaw of the fixed placement ``T_O`` of joint i in its parent
            body's frame (DiffNEA appendix eq. 4: ``R = Rz Ry Rx``).
        xyz: (n, 3) translation of that placement, in the parent body's frame (m).
    """

    theta: jax.Array
    rpy: jax.Array
    xyz: jax.Array

    def astype(self, dtype) -> RobotParams:
        """The same parameters cast to ``dtype`` (e.g. ``jnp.float32``)."""
        return RobotParams(*(jnp.asarray(x, dtype=dtype) for x in self))


@dataclasses.dataclass(frozen=True, eq=False)
class Robot:
    """A fixed-base kinematic tree with ``n`` movable (revolute or prismatic) joints.

    Fields:
        name: model name.
        joint_names: (n,) names of the movable joints, in joint order.
        body_names: (n,) names of the child bodies (after merging fixed joints).
        parents: (n,) parent body index of each body, ``-1`` for the base; ``parents[i] < i``.
        joint_types: (n,) ``"revolute"`` or ``"prismatic"`` (continuous joints are revolute).
        axes: (n,) unit joint axes (3-tuples) in the joint's own frame.
        nominal: the nominal :class:`RobotParams` as float64 numpy arrays (the only pytree leaves).
        continuous: (n,) True for URDF ``continuous`` joints (no position limits).
        damping, friction: (n,) URDF ``<dynamics>`` values, kept as data; no algorithm here applies
            them (as Pinocchio's ``rnea``/``aba``), actuator models may.
        lower, upper, velocity_limit, effort_limit: (n,) URDF ``<limit>`` values (``inf`` if absent);
            ``effort_limit`` 0 marks an unactuated joint (e.g. a pendulum).
        gravity: default gravity (3,) in the base frame, m/s^2.
    """

    name: str
    joint_names: tuple[str, ...]
    body_names: tuple[str, ...]
    parents: tuple[int, ...]
    joint_types: tuple[str, ...]
    axes: tuple[tuple[float, float, float], ...]
    nominal: RobotParams
    continuous: tuple[bool, ...]
    damping: tuple[float, ...]
    friction: tuple[float, ...]
    lower: tuple[float, ...]
    upper: tuple[float, ...]
    velocity_limit: tuple[float, ...]
    effort_limit: tuple[float, ...]
    gravity: tuple[float, float, float] = DEFAULT_GRAVITY

    @property
    def n(self) -> int:
        """Number of movable joints (= bodies = degrees of freedom)."""
        return len(self.joint_names)

    @property
    def actuated(self) -> tuple[bool, ...]:
        """(n,) whether each joint is driven: an effort limit of 0 marks an unactuated joint."""
        return tuple(e != 0 for e in self.effort_limit)

    def children(self, i: int) -> tuple[int, ...]:
        """Indices of the bodies whose parent is body ``i`` (``-1``: the base)."""
        return tuple(k for k, p in enumerate(self.parents) if p == i)

    def ancestors(self, i: int) -> tuple[int, ...]:
        """Body ``i`` and its ancestors up to the base, from ``i`` upwards."""
        out = []
        while i >= 0:
            out.append(i)
            i = self.parents[i]
        return tuple(out)

    def motion_subspace(self, i: int) -> np.ndarray:
        """Joint i's motion subspace ``s`` (6,) in its own frame: ``[0; a]`` or ``[a; 0]``."""
        a = np.asarray(self.axes[i], dtype=float)
        z = np.zeros(3)
        return np.concatenate([z, a] if self.joint_types[i] == REVOLUTE else [a, z])

    def joint_index(self, name: str) -> int:
        """Index of the joint called ``name``; ``ValueError`` naming the valid joints otherwise."""
        try:
            return self.joint_names.index(name)
        except ValueError:
            raise ValueError(
                f"unknown joint {name!r} for robot {self.name!r}; joints are {list(self.joint_names)}"
            ) from None

    def params(self, dtype=None) -> RobotParams:
        """The nominal parameters as JAX arrays (of ``dtype`` if given)."""
        return self.nominal if dtype is None else self.nominal.astype(dtype)

    def replace(self, **changes) -> Robot:
        """A copy with fields replaced (``dataclasses.replace``), validated again."""
        return dataclasses.replace(self, **changes)

    def _value_key(self) -> tuple | None:
        """Every field by value (the nominal parameters by dtype, shape and bytes; the rest by
        ``repr``, exact for their strings, ints, bools and floats); None while the nominal
        parameters are tracers (a robot passed through ``jit`` as an argument). Computed once."""
        key = self.__dict__.get("_key")
        if key is None:
            leaves = tuple(self.nominal)
            if any(isinstance(x, jax.core.Tracer) for x in leaves):
                return None
            arrays = tuple((a.dtype.str, a.shape, a.tobytes()) for a in map(np.asarray, leaves))
            meta = repr(tuple(getattr(self, f) for f in _META_FIELDS))
            key = self.__dict__["_key"] = (meta, arrays)
        return key

    def __eq__(self, other) -> bool:
        """Equal robots have equal fields and equal nominal parameters (not only the same object).

        JAX's caches key on static arguments by hash and equality: the robot is static to every
        traced algorithm (:func:`bayes_nea.tree.traced_once`). By value, a robot loaded again (a
        dataset's, a model's z-axis form) reuses the jaxprs, and the transformations of them
        (``vmap``, ``grad``), that an equal robot traced; by identity each one traced them anew
        (about 6 s of a learned-kinematics Hessian's trace: docs/measurements.md)."""
        if self is other:
            return True
        if not isinstance(other, Robot):
            return NotImplemented
        mine, theirs = self._value_key(), other._value_key()
        return mine is not None and mine == theirs

    def __hash__(self) -> int:
        key = self._value_key()
        return id(self) if key is None else hash(key)

    def __post_init__(self):
        n = len(self.joint_names)
        for field in (
            "body_names",
            "parents",
            "joint_types",
            "axes",
            "continuous",
            "damping",
            "friction",
            "lower",
            "upper",
            "velocity_limit",
            "effort_limit",
        ):
            if len(getattr(self, field)) != n:
                raise ValueError(
                    f"robot {self.name!r}: {field} has {len(getattr(self, field))} entries, "
                    f"expected one per joint ({n})"
                )
        for i, p in enumerate(self.parents):
            if not -1 <= p < i:
                raise ValueError(
                    f"robot {self.name!r}: joint {self.joint_names[i]!r} has parent index {p}; "
                    "parents must precede their children (depth-first order) or be -1 (base)"
                )
        for i, t in enumerate(self.joint_types):
            if t not in JOINT_TYPES:
                raise ValueError(
                    f"robot {self.name!r}: joint {self.joint_names[i]!r} has kind {t!r}; "
                    f"movable joints are {JOINT_TYPES}"
                )
        for i, a in enumerate(self.axes):
            if len(a) != 3 or not np.isclose(np.linalg.norm(a), 1.0):
                raise ValueError(
                    f"robot {self.name!r}: joint {self.joint_names[i]!r} axis {a} is not a unit 3-vector"
                )
        if len(set(self.joint_names)) != n:
            raise ValueError(f"robot {self.name!r}: joint names are not unique: {self.joint_names}")
        shapes = {"theta": (n, 10), "rpy": (n, 3), "xyz": (n, 3)}
        for field, shape in shapes.items():
            value = getattr(self.nominal, field)
            if hasattr(value, "shape") and tuple(value.shape) != shape:
                raise ValueError(
                    f"robot {self.name!r}: nominal {field} has shape {tuple(value.shape)}, expected {shape}"
                )


_META_FIELDS = tuple(f.name for f in dataclasses.fields(Robot) if f.name != "nominal")

jax.tree_util.register_dataclass(Robot, data_fields=["nominal"], meta_fields=list(_META_FIELDS))


def make_robot(
    name: str,
    joint_names,
    parents,
    joint_types,
    axes,
    theta,
    rpy,
    xyz,
    *,
    body_names=None,
    continuous=None,
    damping=None,
    friction=None,
    lower=None,
    upper=None,
    velocity_limit=None,
    effort_limit=None,
    gravity=DEFAULT_GRAVITY,
) -> Robot:
    """Build a :class:`Robot` from plain sequences; missing URDF data defaults to 0 / +-inf.

    Args:
        theta: (n, 10) nominal inertial parameters; rpy, xyz: (n, 3) nominal joint placements.
        axes: (n, 3) joint axes, normalised here.
    Raises:
        ValueError: inconsistent lengths, bad parents, unknown joint kinds or zero axes.
    """
    n = len(joint_names)

    def per_joint(value, default):
        if value is None:
            return (default,) * n
        return tuple(float(v) for v in value)

    axes = np.asarray(axes, dtype=float).reshape(-1, 3)
    norms = np.linalg.norm(axes, axis=1)
    if np.any(norms < 1e-12):
        bad = [joint_names[i] for i in np.flatnonzero(norms < 1e-12)]
        raise ValueError(f"robot {name!r}: joints {bad} have a zero axis")
    axes = axes / norms[:, None]
    theta = np.asarray(theta, dtype=float)
    rpy = np.asarray(rpy, dtype=float)
    xyz = np.asarray(xyz, dtype=float)
    for label, arr in (("theta", theta), ("rpy", rpy), ("xyz", xyz)):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"robot {name!r}: nominal {label} contains NaN or inf")
    try:
        g = np.asarray(gravity, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"robot {name!r}: gravity {gravity!r} is not 3 numbers") from None
    if g.shape != (3,) or not np.all(np.isfinite(g)) or np.linalg.norm(g) > 1e3:
        raise ValueError(
            f"robot {name!r}: gravity must be 3 finite numbers (m/s^2, |g| <= 1e3), got {gravity!r}"
        )
    return Robot(
        name=name,
        joint_names=tuple(joint_names),
        body_names=tuple(body_names) if body_names is not None else tuple(joint_names),
        parents=tuple(int(p) for p in parents),
        joint_types=tuple(joint_types),
        axes=tuple(tuple(float(c) for c in a) for a in axes),
        nominal=RobotParams(theta, rpy, xyz),
        continuous=tuple(bool(c) for c in continuous) if continuous is not None else (False,) * n,
        damping=per_joint(damping, 0.0),
        friction=per_joint(friction, 0.0),
        lower=per_joint(lower, -np.inf),
        upper=per_joint(upper, np.inf),
        velocity_limit=per_joint(velocity_limit, np.inf),
        effort_limit=per_joint(effort_limit, np.inf),
        gravity=tuple(float(g) for g in gravity),
    )


def robot_to_dict(robot: Robot) -> dict:
    """Every field of ``robot`` as JSON-able Python values (floats round-trip exactly).

    :func:`robot_from_dict` inverts it bit for bit; unlike ``to_urdf`` (which stores inertias
    about the CoM), nothing is recomputed. Infinite limits are written as ``inf`` floats (Python's
    ``json`` writes them as ``Infinity``).
    """
    out = {}
    for f in dataclasses.fields(Robot):
        value = getattr(robot, f.name)
        if f.name == "nominal":
            value = {k: np.asarray(v, dtype=np.float64).tolist() for k, v in value._asdict().items()}
        elif isinstance(value, tuple):
            value = [list(v) if isinstance(v, tuple) else v for v in value]
        out[f.name] = value
    return out


def robot_from_dict(d: dict) -> Robot:
    """The :class:`Robot` of :func:`robot_to_dict` (validated as any robot).

    Raises:
        ValueError: a field is missing or malformed.
    """
    names = [f.name for f in dataclasses.fields(Robot)]
    missing = [k for k in names if k not in d and k != "gravity"]
    if missing:
        raise ValueError(f"robot description lacks the fields {missing}")
    try:
        fields = {
            k: tuple(tuple(v) if isinstance(v, list) else v for v in d[k])
            for k in names
            if k in d and k not in ("name", "nominal")
        }
        nominal = RobotParams(*(np.asarray(d["nominal"][k], dtype=np.float64) for k in RobotParams._fields))
    except (TypeError, KeyError) as err:
        raise ValueError(f"malformed robot description: {err}") from None
    return Robot(name=str(d["name"]), nominal=nominal, **fields)
