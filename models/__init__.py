"""Bayesian models of robot dynamics: the 26 DiffNEA variants as family x actuator x prior, with
the likelihood as a fourth axis.

A :class:`ModelSpec` holds every choice (variant, likelihood, noise, geometry, network sizes,
dt, the robot) and serialises to JSON; ``build(spec)`` / ``build_model(name, robot, **options)``
give a :class:`BayesianModel` whose ``model(data)`` is a NumPyro model and whose
``physical(sample)`` / ``qdd_fn(sample)`` are pure functions of one posterior draw.
See ``models/spec.py``, ``models/variants.py``, ``models/families.py``, ``models/actuators.py``
(energy classes), ``models/priors.py`` and ``models/likelihoods.py``.
"""

from models._sites import data_scales
from models.actuators import Actuator, energy_class
from models.families import Family
from models.likelihoods import (
    Forward,
    Inverse,
    Likelihood,
    LinearInverse,
    LinearStats,
    ModelData,
    Rollout,
    check_data,
    conjugate_gaussian_posterior,
    linear_statistics,
    model_data,
    nea_posterior,
    nominal_torque_residual,
    rollout_windows,
)
from models.priors import InformativePrior, Prior, WeakPrior, get_prior
from models.spec import (
    ACTUATOR_NAMES,
    FAMILY_NAMES,
    GEOMETRY_NAMES,
    LIKELIHOOD_NAMES,
    NOISE_NAMES,
    PRIOR_NAMES,
    ModelSpec,
    variant_names,
)
from models.variants import BayesianModel, build, build_model, describe

__all__ = [
    "ACTUATOR_NAMES",
    "Actuator",
    "BayesianModel",
    "FAMILY_NAMES",
    "Family",
    "Forward",
    "GEOMETRY_NAMES",
    "InformativePrior",
    "Inverse",
    "LIKELIHOOD_NAMES",
    "Likelihood",
    "LinearInverse",
    "LinearStats",
    "ModelData",
    "ModelSpec",
    "NOISE_NAMES",
    "PRIOR_NAMES",
    "Prior",
    "Rollout",
    "WeakPrior",
    "build",
    "build_model",
    "check_data",
    "conjugate_gaussian_posterior",
    "data_scales",
    "describe",
    "energy_class",
    "get_prior",
    "linear_statistics",
    "model_data",
    "nea_posterior",
    "nominal_torque_residual",
    "rollout_windows",
    "variant_names",
]
