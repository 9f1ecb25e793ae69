"""bayes_nea: the differentiable rigid-body dynamics core (JAX).

Importing this package enables float64 in JAX (see ``bayes_nea._config``; opt out with
``BAYES_NEA_X64=0``).
"""

from bayes_nea._config import configure_precision

X64 = configure_precision()

from bayes_nea.base_parameters import BaseParameters, base_parameters, sample_states  # noqa: E402
from bayes_nea.control import (  # noqa: E402
    computed_torque_pd,
    energy_swing_up,
    joint_impedance,
    lqr_stabilizer,
    swing_up_and_stabilize,
    swing_up_protocol,
)
from bayes_nea.dynamics import (  # noqa: E402
    aba,
    coriolis_matrix,
    crba,
    forward_kinematics,
    gravity_torques,
    kinetic_energy,
    nonlinear_effects,
    potential_energy,
    rnea,
    total_energy,
)
from bayes_nea.friction import FRICTION_FIELDS, FrictionParams, joint_friction  # noqa: E402
from bayes_nea.inertia import (  # noqa: E402
    PARAMETERIZATION_NAMES,
    Parameterization,
    bodies_from_theta,
    bodies_to_theta,
    check_physically_consistent,
    get_parameterization,
    is_physically_consistent,
    pseudo_inertia,
    pseudo_inertia_min_eigenvalue,
    theta_from_pseudo_inertia,
)
from bayes_nea.integrate import (  # noqa: E402
    DEFAULT_DT,
    ClosedLoopRun,
    Trajectory,
    forward_dynamics,
    integrate,
    integrate_closed_loop,
    rk4_step,
    run_closed_loop,
)
from bayes_nea.kinematics import joint_placement, z_axis_form, z_axis_params, z_joint_transform  # noqa: E402
from bayes_nea.plant import Plant, delay_steps, motor_torque, plant_dynamics  # noqa: E402
from bayes_nea.positive import PositiveMap, get_positive_map  # noqa: E402
from bayes_nea.regressor import body_regressor, joint_torque_regressor  # noqa: E402
from bayes_nea.robot import (  # noqa: E402
    Robot,
    RobotParams,
    make_robot,
    robot_from_dict,
    robot_to_dict,
)
from bayes_nea.systems import DCMotor, cartpole, furuta, get_motor, get_system  # noqa: E402
from bayes_nea.urdf import load_urdf, to_urdf  # noqa: E402

__all__ = [
    "computed_torque_pd",
    "energy_swing_up",
    "joint_impedance",
    "lqr_stabilizer",
    "swing_up_and_stabilize",
    "swing_up_protocol",
    "DCMotor",
    "DEFAULT_DT",
    "ClosedLoopRun",
    "FRICTION_FIELDS",
    "FrictionParams",
    "Plant",
    "Trajectory",
    "cartpole",
    "forward_dynamics",
    "furuta",
    "get_motor",
    "get_system",
    "integrate",
    "delay_steps",
    "integrate_closed_loop",
    "joint_friction",
    "motor_torque",
    "plant_dynamics",
    "rk4_step",
    "run_closed_loop",
    "to_urdf",
    "Robot",
    "RobotParams",
    "X64",
    "aba",
    "body_regressor",
    "coriolis_matrix",
    "crba",
    "forward_kinematics",
    "gravity_torques",
    "joint_torque_regressor",
    "kinetic_energy",
    "load_urdf",
    "make_robot",
    "robot_from_dict",
    "robot_to_dict",
    "nonlinear_effects",
    "potential_energy",
    "rnea",
    "total_energy",
    "BaseParameters",
    "base_parameters",
    "sample_states",
    "PARAMETERIZATION_NAMES",
    "Parameterization",
    "bodies_from_theta",
    "bodies_to_theta",
    "check_physically_consistent",
    "get_parameterization",
    "is_physically_consistent",
    "pseudo_inertia",
    "pseudo_inertia_min_eigenvalue",
    "theta_from_pseudo_inertia",
    "joint_placement",
    "z_axis_form",
    "z_axis_params",
    "z_joint_transform",
    "PositiveMap",
    "get_positive_map",
]
