"""analysis: posterior rollouts, energy, controller checks, diagnostics, plots, benchmark, reports.

The top layer: it reads fitted results (``inference``), builds their dynamics (``models``) and
datasets (``data``) and writes figures and reports. Heavy optional pieces (plots, the dask
benchmark engine, ArviZ diagnostics) are imported from their modules, not here.
"""

from analysis.energy import (
    ENERGY_CLASSES,
    EnergyAnalysis,
    analyse_energy,
    classify_energy,
    divergence_flags,
    params_from_physical,
    rollout_energy,
)
from analysis.rollouts import (
    Band,
    band_coverage,
    credible_band,
    finite_draws,
    make_rollout_fn,
    num_draws,
    posterior_rollouts,
    rollout_error,
    thin_draws,
    true_rollout,
)

__all__ = [
    "ENERGY_CLASSES",
    "Band",
    "EnergyAnalysis",
    "analyse_energy",
    "band_coverage",
    "classify_energy",
    "credible_band",
    "divergence_flags",
    "finite_draws",
    "make_rollout_fn",
    "num_draws",
    "params_from_physical",
    "posterior_rollouts",
    "rollout_energy",
    "rollout_error",
    "thin_draws",
    "true_rollout",
]
