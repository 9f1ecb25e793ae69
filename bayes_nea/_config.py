"""The one place where bayes-nea switches JAX to float64.

Identification needs float64 (ill-conditioned regressors, tight posteriors), so importing
``bayes_nea`` enables ``jax_enable_x64``. Opt out by setting the environment variable
``BAYES_NEA_X64=0`` before the import; float32 inputs still give float32 results either way.
"""

import os

import jax


def configure_precision() -> bool:
    """Enable float64 in JAX unless ``BAYES_NEA_X64=0``. Returns whether float64 is enabled."""
    if os.environ.get("BAYES_NEA_X64", "1") != "0":
        jax.config.update("jax_enable_x64", True)
    return bool(jax.config.jax_enable_x64)
