"""Inference: SVI and NUTS over ``models.BayesianModel`` objects, results as ArviZ DataTrees.

Public API::

    fit_svi(bayes_model, data, *, key, guide="auto", steps=3000, ...) -> FitResult
    default_guide(bayes_model) -> "ensemble" (network weights) | "delta"
    fit_white_box_start(bayes_model, data, *, key, steps, ...) -> WhiteBoxStart | None
                                        # a weak-prior hybrid's rigid-body start, shareable
    fit_nuts(bayes_model, data, *, key, num_warmup=1000, num_samples=1000, num_chains=2,
             init=None, metric="auto" | "adapt" | "laplace" | "softplus-adapt" | array, ...)
    laplace_inverse_mass(bayes_model, data, point) -> (d, d)   # the Laplace NUTS metric
    fit_laplace(bayes_model, data, *, init, key, importance="auto", ...) -> FitResult
                                        # N(MAP, H^-1) draws, PSIS-resampled where reliable
    FitResult(idata, variant, system, method): posterior_samples(), model(), diagnostics(), ...
    save_result(result, path); load_result(path) -> FitResult   # netCDF (h5netcdf), atomic

NumPyro is imported before ArviZ anywhere in this package (the other order breaks
``az.from_numpyro``; docs/stack.md). Parallel NUTS chains on a CPU need
``numpyro.set_host_device_count(k)`` before JAX initialises: the caller's job (``cli/fit.py``).
"""

import numpyro  # noqa: F401  (before arviz)

import bayes_nea  # noqa: F401  (float64 switch)
from inference.laplace import fit_laplace, laplace_inverse_mass
from inference.nuts import fit_nuts
from inference.result import FitResult, load_result, save_result
from inference.svi import (
    GUIDES,
    LBFGS,
    OPTIMIZERS,
    SCHEDULES,
    TRAIN_DTYPES,
    ConvergenceReport,
    WhiteBoxStart,
    convergence_report,
    default_guide,
    fit_svi,
    fit_white_box_start,
    make_optimizer,
)

__all__ = [
    "GUIDES",
    "LBFGS",
    "OPTIMIZERS",
    "SCHEDULES",
    "TRAIN_DTYPES",
    "ConvergenceReport",
    "FitResult",
    "WhiteBoxStart",
    "convergence_report",
    "default_guide",
    "fit_laplace",
    "fit_nuts",
    "fit_svi",
    "fit_white_box_start",
    "laplace_inverse_mass",
    "load_result",
    "make_optimizer",
    "save_result",
]
