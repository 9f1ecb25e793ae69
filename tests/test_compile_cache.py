"""Compiled programs depend on shapes, not on data or prior: a second process fitting other data
of the same shapes with the other prior compiles nothing (JAX's persistent compilation cache
finds every program).

Programs that closed over their data (or ordered their terms by a Python set, as NumPyro's
``Trace_ELBO`` does) were compiled again for every dataset and every process: in the benchmark
grid each cell of a new dataset seed recompiled its SVI, polish, Laplace and validation programs
(docs/measurements.md). Prior locations and scales are constants of the model's programs: they
are shared only because the command line (and this suite, tests/conftest.py) lowers array
constants as arguments (``cli.main.share_programs_across_constants``)."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import logging, sys, jax
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
compiled = []
class Written(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if message.startswith("Writing ") and "persistent compilation cache" in message:
            compiled.append(message.split()[1])
log = logging.getLogger("jax._src.compilation_cache")
log.addHandler(Written())
log.setLevel(logging.DEBUG)
from data import generate_dataset
from inference import fit_laplace, fit_svi
from models import build_model, model_data
seed, prior = int(sys.argv[2]), sys.argv[3]
ds = generate_dataset("cartpole", "trajectories", seed=seed, duration=0.6, episode_duration=0.2)
train, valid, _ = ds.split((1 / 3, 1 / 3, 1 / 3), seed=seed)
fast = dict(progress=False, num_predictive=0, log_likelihood=False)
white = build_model(f"diffnea/viscous/{prior}", ds.robot())
svi = fit_svi(white, model_data(train), key=seed, steps=30, polish=True, **fast)
fit_laplace(white, model_data(train), init=svi, key=seed, num_samples=100, num_chains=1,
            num_predictive=0, log_likelihood=False)
net = build_model("ffnn", ds.robot())
fit_svi(net, model_data(train), key=seed, steps=30, validation=model_data(valid), num_samples=8,
        **fast)
print("COMPILED", len(compiled), " ".join(sorted(set(compiled))))
"""


def _run(cache: str, seed: int, prior: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, cache, str(seed), prior],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return next(line for line in out.splitlines() if line.startswith("COMPILED"))


def test_a_second_process_on_other_data_and_prior_compiles_nothing(tmp_path):
    """MAP + Newton polish + Laplace with PSIS of a white-box model, an early-stopped,
    noise-calibrated ensemble of a network: on dataset seed 1 with the weak prior after seed 0
    with the informative one, in a new process (so another string-hash seed), every program
    comes from the cache but one: the draw of the weak prior's start points (an informative
    prior starts at its median)."""
    first = _run(str(tmp_path), 0, "informative")
    assert int(first.split()[1]) > 100  # the first process compiled (the cache was empty)
    assert _run(str(tmp_path), 1, "weak") == "COMPILED 1 jit__normal"


LOWER = """
from cli.main import share_programs_across_constants
share_programs_across_constants()
import jax, numpy as np
loc, scale = np.array([0.5, 1.5]), np.array([2.0, 3.0])
print(jax.jit(lambda z: loc + scale * z).lower(np.zeros(2)).as_text())
"""


def test_the_command_line_lowers_array_constants_as_arguments():
    """What the sharing above rests on: in a process set up as the command line sets it up, a
    closed-over prior location and scale are arguments of the lowered program, not constants in
    it (JAX's default embeds arrays of up to 32 bytes, such as these)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    text = subprocess.run(
        [sys.executable, "-c", LOWER],
        env=dict(env, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "stablehlo.constant" not in text
    assert text.count("jax.const = true") == 2
