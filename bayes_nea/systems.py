"""Built-in systems of the DiffNEA paper with their published parameters.

Numbers come from ``docs/reference-systems.md`` (Quanser's ``config_ip02`` / ``config_sp`` setup files
and the QUBE-Servo 2 workbook, as reproduced in public code); each is cited where it is used.
Quantities that no source publishes (link radii, cart box size) are marked *assumed*; they only
set small inertias about axes the joints never rotate, which no data can identify.

Angle conventions: pendulum angle 0 is hanging down (stable), +-pi is upright.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from bayes_nea.robot import PRISMATIC, REVOLUTE, Robot, make_robot


class DCMotor(NamedTuple):
    """A voltage-driven DC motor per joint: ``tau = gain V - back_emf qd``, ``|V| <= voltage_limit``.

    Fields:
        gain: (n,) torque (or force) per volt; 0 for unactuated joints.
        back_emf: (n,) back-EMF damping (N s/m or N m s/rad).
        voltage_limit: saturation (V).
    """

    gain: tuple[float, ...]
    back_emf: tuple[float, ...]
    voltage_limit: float


def _rod_theta(mass: float, com: np.ndarray, inertia_com_diag) -> np.ndarray:
    """theta (10,) of a body with a diagonal inertia about its CoM, CoM given in the body frame."""
    c = np.asarray(com, float)
    Ic = np.diag(inertia_com_diag)
    S = np.array([[0, -c[2], c[1]], [c[2], 0, -c[0]], [-c[1], c[0], 0]])
    I = Ic + mass * S.T @ S
    return np.array([mass, *(mass * c), I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]])


# --- Quanser IP02 linear cart + medium (12 in) single pendulum --------------------------------
CARTPOLE_CART_MASS = 0.57  # M_c, cart with no load (config_ip02)
CARTPOLE_POLE_MASS = 0.127  # M_p, medium pendulum (config_sp)
CARTPOLE_POLE_COM = 0.1778  # l_p, pivot to centre of gravity, 7 in (config_sp)
CARTPOLE_POLE_LENGTH = 0.3365  # L_p, full length, 13.25 in (config_sp)
CARTPOLE_POLE_INERTIA = 1.1987e-3  # J_p about the CoM, M_p L_p^2 / 12 (config_sp)
CARTPOLE_CART_DAMPING = 4.3  # B_eq, no load, N s/m (config_ip02)
CARTPOLE_POLE_DAMPING = 0.0024  # B_p, N m s/rad (config_sp)
CARTPOLE_RAIL_HALF_LENGTH = 0.814 / 2  # rail 0.814 m (quanser_robots, SimuRLacra)
CARTPOLE_VOLTAGE_LIMIT = 24.0  # quanser_robots action limit, V
# Motor: eta_g K_g eta_m K_t / (R_m r_mp) with K_g 3.71, K_t 7.67e-3, R_m 2.6, r_mp 6.35e-3, eta = 1
CARTPOLE_FORCE_GAIN = 3.71 * 7.67e-3 / (2.6 * 6.35e-3)  # ~1.72 N/V
CARTPOLE_BACK_EMF = 3.71**2 * 7.67e-3 * 7.67e-3 / (2.6 * 6.35e-3**2)  # ~7.72 N s/m
_POLE_RADIUS = 6.35e-3  # assumed rod radius (not published)
_CART_BOX = (0.1, 0.1, 0.05)  # assumed cart dimensions (not published)


def cartpole() -> Robot:
    """Quanser IP02 cart with the medium single pendulum.

    Joint ``cart`` is prismatic along the base x axis (m); joint ``pole`` is revolute about the
    cart's y axis (rad), 0 hanging down. Gravity is -z. Nominal damping is ``B_eq``, ``B_p``.
    """
    a, b, c = _CART_BOX
    m_c = CARTPOLE_CART_MASS
    cart = _rod_theta(
        m_c, np.zeros(3), m_c / 12 * np.array([b * b + c * c, a * a + c * c, a * a + b * b])
    )
    m_p, r = CARTPOLE_POLE_MASS, _POLE_RADIUS
    pole = _rod_theta(
        m_p,
        np.array([0.0, 0.0, -CARTPOLE_POLE_COM]),
        [CARTPOLE_POLE_INERTIA, CARTPOLE_POLE_INERTIA, m_p * r * r / 2],
    )
    return make_robot(
        "cartpole",
        joint_names=("cart", "pole"),
        body_names=("cart_link", "pole_link"),
        parents=(-1, 0),
        joint_types=(PRISMATIC, REVOLUTE),
        axes=[(1, 0, 0), (0, 1, 0)],
        theta=np.stack([cart, pole]),
        rpy=np.zeros((2, 3)),
        xyz=np.zeros((2, 3)),
        continuous=(False, True),
        damping=(CARTPOLE_CART_DAMPING, CARTPOLE_POLE_DAMPING),
        lower=(-CARTPOLE_RAIL_HALF_LENGTH, -np.inf),
        upper=(CARTPOLE_RAIL_HALF_LENGTH, np.inf),
        effort_limit=(CARTPOLE_FORCE_GAIN * CARTPOLE_VOLTAGE_LIMIT, 0.0),
    )


def cartpole_motor() -> DCMotor:
    """The IP02 cart motor as a force source (docs/reference-systems.md, derived, eta = 1)."""
    return DCMotor((CARTPOLE_FORCE_GAIN, 0.0), (CARTPOLE_BACK_EMF, 0.0), CARTPOLE_VOLTAGE_LIMIT)


# --- Quanser QUBE-Servo 2 rotary (Furuta) pendulum --------------------------------------------
FURUTA_ARM_MASS = 0.095  # M_r (QUBE-Servo 2 workbook; quanser_robots)
FURUTA_ARM_LENGTH = 0.085  # L_r
FURUTA_ARM_INERTIA = FURUTA_ARM_MASS * FURUTA_ARM_LENGTH**2 / 12  # J_r about CoM, 5.72e-5
FURUTA_POLE_MASS = 0.024  # M_p
FURUTA_POLE_LENGTH = 0.129  # L_p, CoM at L_p / 2
FURUTA_POLE_INERTIA = FURUTA_POLE_MASS * FURUTA_POLE_LENGTH**2 / 12  # J_p about CoM, 3.33e-5
FURUTA_ARM_DAMPING = 0.0015  # D_r, Quanser "original" (sources disagree by 100x)
FURUTA_POLE_DAMPING = 0.0005  # D_p, Quanser "original" (sources disagree by 100x)
FURUTA_VOLTAGE_LIMIT = 5.0  # quanser_robots
# Motor: tau = k_m (V - k_m qd) / R_m with k_m 0.042, R_m 8.4
FURUTA_TORQUE_GAIN = 0.042 / 8.4  # 0.005 N m/V
FURUTA_BACK_EMF = 0.042**2 / 8.4  # 2.1e-4 N m s/rad
_ARM_RADIUS = 3e-3  # assumed (not published)
_FURUTA_POLE_RADIUS = 3e-3  # assumed (not published)


def furuta() -> Robot:
    """Quanser QUBE-Servo 2 rotary pendulum.

    Joint ``arm`` is revolute about the base z axis; the arm extends along its x axis. Joint
    ``pendulum`` sits at the arm's tip and is revolute about the arm's x axis, 0 hanging down.
    """
    m_r, L_r, J_r = FURUTA_ARM_MASS, FURUTA_ARM_LENGTH, FURUTA_ARM_INERTIA
    arm = _rod_theta(m_r, np.array([L_r / 2, 0.0, 0.0]), [m_r * _ARM_RADIUS**2 / 2, J_r, J_r])
    m_p, L_p, J_p = FURUTA_POLE_MASS, FURUTA_POLE_LENGTH, FURUTA_POLE_INERTIA
    pole = _rod_theta(
        m_p, np.array([0.0, 0.0, -L_p / 2]), [J_p, J_p, m_p * _FURUTA_POLE_RADIUS**2 / 2]
    )
    return make_robot(
        "furuta",
        joint_names=("arm", "pendulum"),
        body_names=("arm_link", "pendulum_link"),
        parents=(-1, 0),
        joint_types=(REVOLUTE, REVOLUTE),
        axes=[(0, 0, 1), (1, 0, 0)],
        theta=np.stack([arm, pole]),
        rpy=np.zeros((2, 3)),
        xyz=np.array([[0.0, 0.0, 0.0], [L_r, 0.0, 0.0]]),
        continuous=(True, True),
        damping=(FURUTA_ARM_DAMPING, FURUTA_POLE_DAMPING),
        effort_limit=(FURUTA_TORQUE_GAIN * FURUTA_VOLTAGE_LIMIT, 0.0),
    )


def furuta_motor() -> DCMotor:
    """The QUBE-Servo 2 motor on the arm joint (docs/reference-systems.md)."""
    return DCMotor((FURUTA_TORQUE_GAIN, 0.0), (FURUTA_BACK_EMF, 0.0), FURUTA_VOLTAGE_LIMIT)


SYSTEMS = {"cartpole": (cartpole, cartpole_motor), "furuta": (furuta, furuta_motor)}


def get_system(name: str) -> Robot:
    """The built-in robot called ``name``; ``ValueError`` listing the valid names otherwise."""
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; built-in systems are {sorted(SYSTEMS)}")
    return SYSTEMS[name][0]()


def get_motor(name: str) -> DCMotor:
    """The published DC motor of the built-in system ``name``."""
    if name not in SYSTEMS:
        raise ValueError(f"unknown system {name!r}; built-in systems are {sorted(SYSTEMS)}")
    return SYSTEMS[name][1]()
