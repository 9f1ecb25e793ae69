"""URDF loading: the only file boundary of ``bayes_nea``.

``load_urdf`` builds a fixed-base :class:`~bayes_nea.robot.Robot` whose joint order, joint names and
inertial parameters match Pinocchio's ``buildModelFromUrdf`` for the same file:

- movable joints are visited depth-first from the root link, the child joints of a link in the
  order of their names (urdfdom keeps joints in a name-sorted map, and Pinocchio follows it);
- fixed joints (and joints named in ``lock_joints``) are merged into their parent body: the child's
  inertia is moved into the parent frame and its child joints' placements are composed;
- ``continuous`` joints are revolute joints with one angle coordinate (Pinocchio uses a
  ``(cos, sin)`` pair for them in ``q``; velocities and torques agree);
- ``<dynamics damping friction>`` and ``<limit>`` are kept as data; non-standard ``<dynamics>``
  attributes (the Panda's ``mu_coulomb``, ``mu_viscous``, ``D``, ``K``) are ignored.

Floating and planar joints, closed loops, several roots, mimic joints that are not locked, and
movable joints that carry no inertia (a singular mass matrix) are refused with a ``ValueError``.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import numpy as np

from bayes_nea.robot import PRISMATIC, REVOLUTE, Robot, make_robot

_MOVABLE = {"revolute": REVOLUTE, "continuous": REVOLUTE, "prismatic": PRISMATIC}
_REFUSED = {
    "floating": "floating joints are not supported: bayes-nea models fixed-base robots",
    "planar": "planar joints are not supported (only revolute, continuous, prismatic and fixed)",
}


def _rpy_matrix(rpy) -> np.ndarray:
    r, p, y = rpy
    cr, sr, cp, s_p, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    Ry = np.array([[cp, 0, s_p], [0, 1, 0], [-s_p, 0, cp]])
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    return Rz @ Ry @ Rx


def _matrix_rpy(R: np.ndarray) -> np.ndarray:
    pitch = np.arctan2(-R[2, 0], np.hypot(R[0, 0], R[1, 0]))
    if abs(np.cos(pitch)) < 1e-12:
        return np.array([0.0, pitch, np.arctan2(-R[0, 1], R[1, 1])])
    return np.array([np.arctan2(R[2, 1], R[2, 2]), pitch, np.arctan2(R[1, 0], R[0, 0])])


def _floats(text: str | None, count: int, default, what: str) -> np.ndarray:
    if text is None:
        return np.array(default, dtype=float)
    try:
        values = np.array([float(t) for t in text.split()], dtype=float)
    except ValueError:
        raise ValueError(f"malformed URDF: {what} = {text!r} is not a list of numbers") from None
    if values.shape != (count,) or not np.all(np.isfinite(values)):
        raise ValueError(f"malformed URDF: {what} = {text!r}, expected {count} finite numbers")
    return values


def _origin(elem, what: str) -> tuple[np.ndarray, np.ndarray]:
    """(R, p) of an ``<origin>`` child (identity if absent)."""
    o = elem.find("origin") if elem is not None else None
    if o is None:
        return np.eye(3), np.zeros(3)
    rpy = _floats(o.get("rpy"), 3, [0, 0, 0], f"{what} origin rpy")
    xyz = _floats(o.get("xyz"), 3, [0, 0, 0], f"{what} origin xyz")
    if np.abs(xyz).max() > MAX_LENGTH or np.abs(rpy).max() > 1e3:
        raise ValueError(
            f"malformed URDF: {what} origin xyz={o.get('xyz')!r} rpy={o.get('rpy')!r} is "
            f"implausible (offsets beyond {MAX_LENGTH:g} m or angles beyond 1e3 rad)"
        )
    return _rpy_matrix(rpy), xyz


_UNBOUNDED = 1e300  # limits at or beyond this magnitude mean "no limit" (see to_urdf)
MAX_URDF_BYTES = 64 * 2**20
"""Largest URDF accepted (bytes); the biggest real robot descriptions are a few MB."""
MAX_MASS = 1e6
"""Largest link mass (kg) and inertia entry (kg m^2) accepted: beyond any robot link."""
MAX_LENGTH = 1e4
"""Largest joint or centre-of-mass offset (m) accepted."""


def _attr(elem, name: str, default: float, what: str) -> float:
    if elem is None or elem.get(name) is None:
        return default
    try:
        value = float(elem.get(name))
    except ValueError:
        raise ValueError(
            f"malformed URDF: {what} {name}={elem.get(name)!r} is not a number"
        ) from None
    if np.isnan(value):
        raise ValueError(f"malformed URDF: {what} {name} is NaN")
    return np.copysign(np.inf, value) if abs(value) >= _UNBOUNDED else value


def _link_inertia(link) -> tuple[float, np.ndarray, np.ndarray]:
    """(mass, com (3,), inertia about the com (3, 3)) of a link, in the link frame."""
    name = link.get("name")
    inertial = link.find("inertial")
    if inertial is None:
        return 0.0, np.zeros(3), np.zeros((3, 3))
    mass = _attr(inertial.find("mass"), "value", 0.0, f"link {name!r} mass")
    if mass < 0:
        raise ValueError(f"link {name!r} has negative mass {mass}")
    if mass > MAX_MASS:
        raise ValueError(f"link {name!r} has an implausible mass {mass:g} kg (> {MAX_MASS:g})")
    R, c = _origin(inertial, f"link {name!r} inertial")
    i = inertial.find("inertia")
    keys = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
    ixx, ixy, ixz, iyy, iyz, izz = (_attr(i, k, 0.0, f"link {name!r} inertia") for k in keys)
    if max(abs(v) for v in (ixx, ixy, ixz, iyy, iyz, izz)) > MAX_MASS:
        raise ValueError(
            f"link {name!r} has an implausible inertia (an entry beyond {MAX_MASS:g} kg m^2)"
        )
    I = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    return mass, c, R @ I @ R.T


def _skew(v):
    return np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])


@dataclass
class _Body:
    """A rigid body being assembled: mass properties in the frame of its movable joint."""

    mass: float = 0.0
    first_moment: np.ndarray = field(default_factory=lambda: np.zeros(3))
    inertia_origin: np.ndarray = field(default_factory=lambda: np.zeros((3, 3)))

    def add(self, mass, com, inertia_com, R, p):
        """Add a link with the given mass properties, whose frame is (R, p) in the body frame."""
        c = R @ com + p
        S = _skew(c)
        self.mass += mass
        self.first_moment = self.first_moment + mass * c
        self.inertia_origin = self.inertia_origin + R @ inertia_com @ R.T + mass * S.T @ S

    def theta(self) -> np.ndarray:
        I, h = self.inertia_origin, self.first_moment
        return np.array([self.mass, *h, I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]])


def _read_urdf_file(path) -> bytes:
    """The bytes of a URDF file (the XML parser decodes them by their declared encoding)."""
    if os.path.isdir(path):
        raise ValueError(f"URDF path {path!r} is a directory, not a file")
    if not os.path.isfile(path):
        raise ValueError(f"URDF file {path!r} does not exist")
    size = os.path.getsize(path)
    if size > MAX_URDF_BYTES:
        raise ValueError(f"URDF file {path!r} is {size} bytes, more than {MAX_URDF_BYTES}")
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError as err:
        raise ValueError(f"cannot read URDF file {path!r}: {err.strerror or err}") from None


def load_urdf(
    source: str | os.PathLike,
    *,
    lock_joints: dict[str, float] | None = None,
    gravity=(0.0, 0.0, -9.81),
) -> Robot:
    """Load a fixed-base robot from a URDF file path or an XML string.

    Args:
        source: a path to a ``.urdf`` file, or the URDF text itself.
        lock_joints: joint name -> position; these joints are treated as fixed at that position
            (as Pinocchio's ``buildReducedModel``), e.g. a gripper's fingers.
        gravity: default gravity (3,) in the base frame.

    Returns:
        A :class:`Robot` whose ``joint_names`` and parameter order match Pinocchio's.

    Raises:
        ValueError: unreadable or malformed URDF; floating, planar or unknown joint kinds; closed
            loops or several roots; unlocked mimic joints; unknown names in ``lock_joints``;
            movable joints that carry no inertia.
    """
    if isinstance(source, bytes | bytearray):
        xml_text, label = bytes(source), "<bytes>"
    elif isinstance(source, str | os.PathLike):
        text = os.fspath(source)
        if isinstance(text, str) and text.lstrip().startswith("<"):
            xml_text, label = text, "<string>"
        else:
            xml_text, label = _read_urdf_file(text), os.fsdecode(text)
    else:
        raise ValueError(f"load_urdf expects a file path or URDF text, got {type(source).__name__}")
    if len(xml_text) > MAX_URDF_BYTES:
        raise ValueError(f"URDF {label} is larger than {MAX_URDF_BYTES} bytes")
    markup = xml_text if isinstance(xml_text, str) else xml_text.decode("latin-1")
    if "<!DOCTYPE" in markup or "<!ENTITY" in markup:
        raise ValueError(
            f"URDF {label} declares a DOCTYPE or XML entities; these are refused (entity "
            "expansion and external entities are an attack vector, and URDF needs neither)"
        )
    try:
        root = ET.fromstring(xml_text)
    except ET.ParseError as err:
        raise ValueError(f"malformed URDF {label}: {err}") from None
    if root.tag != "robot":
        raise ValueError(f"malformed URDF {label}: root element is <{root.tag}>, expected <robot>")

    links = {}
    for link in root.findall("link"):
        name = link.get("name")
        if not name:
            raise ValueError(f"malformed URDF {label}: a <link> has no name")
        if name in links:
            raise ValueError(f"malformed URDF {label}: link {name!r} is defined twice")
        links[name] = link
    if not links:
        raise ValueError(f"malformed URDF {label}: no <link> elements")

    joints = {}
    parent_joint_of = {}
    for joint in root.findall("joint"):
        name, kind = joint.get("name"), joint.get("type")
        if not name:
            raise ValueError(f"malformed URDF {label}: a <joint> has no name")
        if name in joints:
            raise ValueError(f"malformed URDF {label}: joint {name!r} is defined twice")
        if kind in _REFUSED:
            raise ValueError(f"joint {name!r}: {_REFUSED[kind]}")
        if kind not in _MOVABLE and kind != "fixed":
            raise ValueError(
                f"joint {name!r} has unknown type {kind!r}; supported: revolute, continuous, "
                "prismatic, fixed"
            )
        parent, child = joint.find("parent"), joint.find("child")
        if parent is None or child is None:
            raise ValueError(f"malformed URDF {label}: joint {name!r} lacks <parent> or <child>")
        parent, child = parent.get("link"), child.get("link")
        for role, link_name in (("parent", parent), ("child", child)):
            if link_name not in links:
                raise ValueError(f"joint {name!r} names unknown {role} link {link_name!r}")
        if child in parent_joint_of:
            raise ValueError(
                f"closed kinematic loop: link {child!r} is the child of both "
                f"{parent_joint_of[child]!r} and {name!r}; only trees are supported"
            )
        parent_joint_of[child] = name
        joints[name] = joint

    lock_joints = dict(lock_joints or {})
    unknown = sorted(set(lock_joints) - set(joints))
    if unknown:
        raise ValueError(f"lock_joints names unknown joints {unknown}; joints are {sorted(joints)}")

    roots = [name for name in links if name not in parent_joint_of]
    if len(roots) != 1:
        raise ValueError(
            f"URDF {label} must have exactly one root link, found {roots or 'none (a loop)'}"
        )
    children_of: dict[str, list[str]] = {name: [] for name in links}
    for name, joint in joints.items():
        children_of[joint.find("parent").get("link")].append(name)
    for lst in children_of.values():
        lst.sort()  # urdfdom's name-sorted joint map decides Pinocchio's order

    names, body_names, parents, kinds, axes = [], [], [], [], []
    rpys, xyzs, bodies, continuous = [], [], [], []
    damping, friction, lower, upper, vel, effort = [], [], [], [], [], []
    reached = set()

    def attach(link_name: str, body: int, R_bl: np.ndarray, p_bl: np.ndarray) -> None:
        """Add ``link_name`` (frame (R_bl, p_bl) in body ``body``); queue its child joints."""
        reached.add(link_name)
        if body >= 0:
            mass, com, inertia_com = _link_inertia(links[link_name])
            bodies[body].add(mass, com, inertia_com, R_bl, p_bl)
        # depth first, children in name order: pushed reversed onto the stack (no recursion, so a
        # chain of thousands of links stays within Python's recursion limit)
        for jname in reversed(children_of[link_name]):
            stack.append((jname, body, R_bl, p_bl))

    def joint_step(jname: str, body: int, R_bl: np.ndarray, p_bl: np.ndarray) -> None:
        """Process joint ``jname`` whose parent link has frame (R_bl, p_bl) in body ``body``."""
        joint = joints[jname]
        kind = joint.get("type")
        child = joint.find("child").get("link")
        R_o, p_o = _origin(joint, f"joint {jname!r}")
        R_j, p_j = R_bl @ R_o, R_bl @ p_o + p_bl  # joint frame in the body frame
        axis = _floats(
            joint.find("axis").get("xyz") if joint.find("axis") is not None else None,
            3,
            [1, 0, 0],
            f"joint {jname!r} axis",
        )
        if kind in _MOVABLE and jname not in lock_joints:
            if joint.find("mimic") is not None:
                raise ValueError(
                    f"joint {jname!r} mimics another joint; mimic joints are not supported, "
                    "lock them with lock_joints"
                )
            if np.linalg.norm(axis) < 1e-12:
                raise ValueError(f"joint {jname!r} has a zero axis")
            axis = axis / np.linalg.norm(axis)
            limit, dyn = joint.find("limit"), joint.find("dynamics")
            names.append(jname)
            body_names.append(child)
            parents.append(body)
            kinds.append(_MOVABLE[kind])
            axes.append(axis)
            rpys.append(_matrix_rpy(R_j))
            xyzs.append(p_j)
            continuous.append(kind == "continuous")
            damping.append(_attr(dyn, "damping", 0.0, f"joint {jname!r} dynamics"))
            friction.append(_attr(dyn, "friction", 0.0, f"joint {jname!r} dynamics"))
            unlimited = kind == "continuous"
            lower.append(-np.inf if unlimited else _attr(limit, "lower", -np.inf, jname))
            upper.append(np.inf if unlimited else _attr(limit, "upper", np.inf, jname))
            vel.append(_attr(limit, "velocity", np.inf, f"joint {jname!r} limit"))
            effort.append(_attr(limit, "effort", np.inf, f"joint {jname!r} limit"))
            bodies.append(_Body())
            attach(child, len(bodies) - 1, np.eye(3), np.zeros(3))
        else:
            R_c, p_c = R_j, p_j
            if kind in _MOVABLE:  # a locked joint: apply its motion at the given position
                value = float(lock_joints[jname])
                axis = axis / np.linalg.norm(axis)
                if kind == "prismatic":
                    p_c = p_j + R_j @ (axis * value)
                else:
                    K = _skew(axis)
                    R_c = R_j @ (np.eye(3) + np.sin(value) * K + (1 - np.cos(value)) * K @ K)
            attach(child, body, R_c, p_c)

    stack: list = []
    attach(roots[0], -1, np.eye(3), np.zeros(3))
    while stack:
        joint_step(*stack.pop())
    if not names:
        raise ValueError(f"URDF {label} has no movable joints")
    theta = np.stack([b.theta() for b in bodies])
    _check_inertia_carried(names, parents, kinds, axes, theta)
    return make_robot(
        root.get("name", "robot"),
        names,
        parents,
        kinds,
        np.stack(axes),
        theta,
        np.stack(rpys),
        np.stack(xyzs),
        body_names=body_names,
        continuous=continuous,
        damping=damping,
        friction=friction,
        lower=lower,
        upper=upper,
        velocity_limit=vel,
        effort_limit=effort,
        gravity=gravity,
    )


def _check_inertia_carried(names, parents, kinds, axes, theta) -> None:
    """Refuse movable joints whose subtree has no mass (or, revolute, no inertia about the axis)."""
    n = len(names)
    subtree_mass = theta[:, 0].copy()
    for i in reversed(range(n)):
        if parents[i] >= 0:
            subtree_mass[parents[i]] += subtree_mass[i]
    for i in range(n):
        if subtree_mass[i] <= 0:
            raise ValueError(
                f"movable joint {names[i]!r} carries no mass (its subtree is massless), so the "
                "mass matrix is singular; give its links <inertial> tags or make it fixed"
            )
        if kinds[i] == REVOLUTE and all(parents[k] != i for k in range(n)):
            a = axes[i]
            th = theta[i]
            I = np.array([[th[4], th[5], th[7]], [th[5], th[6], th[8]], [th[7], th[8], th[9]]])
            if a @ I @ a <= 0:
                raise ValueError(
                    f"revolute joint {names[i]!r} carries no inertia about its axis, so the "
                    "mass matrix is singular"
                )


def to_urdf(robot: Robot, params=None) -> str:
    """URDF text of ``robot`` (with ``params`` or the nominal parameters).

    Each body becomes a link whose frame is its joint frame; inertias are written about the CoM.
    ``load_urdf(to_urdf(robot))`` reproduces the robot, and Pinocchio reads the same model.
    """
    params = robot.nominal if params is None else params
    theta, rpy, xyz = (np.asarray(x, dtype=float) for x in params)
    kind = {REVOLUTE: "revolute", PRISMATIC: "prismatic"}
    lines = [f'<robot name="{robot.name}">', '  <link name="base_link"/>']
    fmt = lambda v: " ".join(repr(float(x)) for x in v)
    for i in range(robot.n):
        m, h = theta[i, 0], theta[i, 1:4]
        c = h / m if m > 0 else np.zeros(3)
        I = np.array(
            [
                [theta[i, 4], theta[i, 5], theta[i, 7]],
                [theta[i, 5], theta[i, 6], theta[i, 8]],
                [theta[i, 7], theta[i, 8], theta[i, 9]],
            ]
        )
        Ic = I - m * _skew(c).T @ _skew(c)
        parent = "base_link" if robot.parents[i] < 0 else robot.body_names[robot.parents[i]]
        jtype = "continuous" if robot.continuous[i] else kind[robot.joint_types[i]]
        # urdfdom needs effort and velocity; unbounded values are written as +-1e300
        attrs = {"effort": robot.effort_limit[i], "velocity": robot.velocity_limit[i]}
        if jtype != "continuous":
            attrs.update(lower=robot.lower[i], upper=robot.upper[i])
        limit = (
            "<limit "
            + " ".join(
                f'{k}="{float(np.clip(v, -_UNBOUNDED, _UNBOUNDED))!r}"' for k, v in attrs.items()
            )
            + "/>"
        )
        lines += [
            f'  <link name="{robot.body_names[i]}">',
            f'    <inertial><origin xyz="{fmt(c)}" rpy="0 0 0"/><mass value="{float(m)!r}"/>'
            f'<inertia ixx="{float(Ic[0, 0])!r}" ixy="{float(Ic[0, 1])!r}" ixz="{float(Ic[0, 2])!r}" '
            f'iyy="{float(Ic[1, 1])!r}" iyz="{float(Ic[1, 2])!r}" izz="{float(Ic[2, 2])!r}"/></inertial>',
            "  </link>",
            f'  <joint name="{robot.joint_names[i]}" type="{jtype}">',
            f'    <parent link="{parent}"/><child link="{robot.body_names[i]}"/>',
            f'    <origin xyz="{fmt(xyz[i])}" rpy="{fmt(rpy[i])}"/><axis xyz="{fmt(robot.axes[i])}"/>',
            f'    {limit}<dynamics damping="{robot.damping[i]!r}" friction="{robot.friction[i]!r}"/>',
            "  </joint>",
        ]
    lines.append("</robot>")
    return "\n".join(lines) + "\n"
