"""Datasets: generation (the DiffNEA paper's three datasets, excitation for arms), one dataset type,
files, and import of a user's logs. Never imports numpyro, models or inference.

    from data import Dataset, Episode, load_dataset, save_dataset, generate_dataset, import_log,
    export_log
"""

from data.dataset import KINDS, SIGNALS, Dataset, Episode, make_episode
from data.estimate import estimate_derivatives, lowpass
from data.excitation import FourierTrajectory, fourier_excitation
from data.importing import export_log, import_log
from data.io import SCHEMA_VERSION, load_dataset, save_dataset
from data.simulate import (
    DEFAULT_DURATION,
    GENERATED_KINDS,
    generate_dataset,
    simulate_dataset,
)

__all__ = [
    "DEFAULT_DURATION",
    "GENERATED_KINDS",
    "KINDS",
    "SCHEMA_VERSION",
    "SIGNALS",
    "Dataset",
    "Episode",
    "FourierTrajectory",
    "estimate_derivatives",
    "export_log",
    "fourier_excitation",
    "generate_dataset",
    "import_log",
    "load_dataset",
    "lowpass",
    "make_episode",
    "save_dataset",
    "simulate_dataset",
]
