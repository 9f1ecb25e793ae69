"""Bayesian models of robot dynamics: the 26 DiffNEA variants as family x actuator x prior.

``build_model(name, robot)`` gives a :class:`BayesianModel` whose ``model(data)`` is a NumPyro
model and whose ``physical(sample)`` / ``qdd_fn(sample)`` are pure functions of one posterior draw.
See ``models/variants.py`` (registry, geometry notes), ``models/families.py``,
``models/actuators.py`` (energy classes), ``models/priors.py`` and ``models/likelihoods.py``
(which variants have the cheap exact sufficient-statistics form).
"""

from models.actuators import ACTUATOR_NAMES, Actuator, energy_class
from models.families import FAMILY_NAMES, Family
from models.likelihoods import (
    LIKELIHOOD_NAMES,
    NOISE_NAMES,
    LinearStats,
    ModelData,
    check_data,
    linear_statistics,
    model_data,
    nea_posterior,
    rollout_windows,
)
from models.priors import PRIOR_NAMES, InformativePrior, Prior, WeakPrior, get_prior
from models.variants import BayesianModel, ModelSpec, build_model, describe, variant_names

__all__ = [
    "ACTUATOR_NAMES",
    "Actuator",
    "BayesianModel",
    "FAMILY_NAMES",
    "Family",
    "InformativePrior",
    "LIKELIHOOD_NAMES",
    "LinearStats",
    "ModelData",
    "ModelSpec",
    "NOISE_NAMES",
    "PRIOR_NAMES",
    "Prior",
    "WeakPrior",
    "build_model",
    "check_data",
    "describe",
    "energy_class",
    "get_prior",
    "linear_statistics",
    "model_data",
    "nea_posterior",
    "rollout_windows",
    "variant_names",
]
