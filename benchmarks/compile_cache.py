"""What a grid cell compiles, and what JAX's persistent compilation cache saves, per process.

One benchmark cell (``analysis.cells.fit_cell``, quick settings) is fitted in three new processes
sharing one empty cache folder: dataset seed 0 (everything compiled), seed 0 again (the same
data) and seed 1 (other data of the same shapes, as the grid's next seed). Each process has its
own string-hash seed, as separate runs do. Peer, in the same run: the same three with NumPyro's
``Trace_ELBO`` in place of ``inference.svi.SortedTrace_ELBO`` (its SVI program depends on the
hash seed). Prints wall seconds per cell, XLA backend-compile seconds and programs compiled.

A second table compares how array constants are lowered (prior locations and scales,
normalisers): embedded in the program (JAX's default) or hoisted as arguments (what the command
line sets, ``cli.main.share_programs_across_constants``): the cell, then the same variant with
the other prior, then the first again on ``--other-kind`` data, each in a new process on one
cache per peer.

    python benchmarks/compile_cache.py [--system cartpole] [--kind trajectories]
        [--variant diffnea/nn-friction/informative] [--other-kind uniform] [--tables elbo constants]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)
from cli.main import CONSTANTS_AS_ARGUMENTS  # noqa: E402  (imports nothing heavy)

CHILD = """
import json, logging, sys, time
import jax
cache, system, kind, variant, seed, elbo = sys.argv[1:7]
jax.config.update("jax_compilation_cache_dir", cache)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
compiled, seconds = [], {"backend": 0.0}
def on_duration(event, duration, **_):
    if event == "/jax/core/compile/backend_compile_duration":
        seconds["backend"] += duration
jax.monitoring.register_event_duration_secs_listener(on_duration)
class Written(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("Writing "):
            compiled.append(record.getMessage().split()[1])
log = logging.getLogger("jax._src.compilation_cache")
log.addHandler(Written())
log.setLevel(logging.DEBUG)
import inference.svi
if elbo == "numpyro":
    from numpyro.infer import Trace_ELBO
    inference.svi.SortedTrace_ELBO = Trace_ELBO
import analysis.cells as cells
from analysis.benchmark import get_settings, make_grid
settings = get_settings("quick").to_dict()
cell = make_grid(systems=(system,), datasets=(kind,), variants=(variant,), seeds=(int(seed),))[0]
t0 = time.perf_counter()
cells.fit_cell(cell, settings)
print(json.dumps({"seconds": time.perf_counter() - t0, "backend_compile_s": seconds["backend"],
                  "compiled": len(compiled), "programs": sorted(set(compiled))}))
"""


CONSTANTS = {
    "embedded": {"JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS": "false"},
    "hoisted": CONSTANTS_AS_ARGUMENTS,  # what the command line sets
}


def run_cell(
    cache: str,
    system: str,
    kind: str,
    variant: str,
    seed: int,
    elbo: str,
    constants: str = "embedded",
) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, cache, system, kind, variant, str(seed), elbo],
        env=dict(os.environ, PYTHONPATH=_ROOT, **CONSTANTS[constants]),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def _row(first: str, label: str, r: dict) -> None:
    names = ", ".join(r["programs"][:3]) if r["compiled"] < 100 else "(all)"
    print(
        f"| {first} | {label} | {r['seconds']:.1f} | {r['backend_compile_s']:.1f} | "
        f"{r['compiled']} | {names} |",
        flush=True,
    )


def other_prior(variant: str) -> str:
    """The same family and actuator with the other prior (``.../informative`` <-> ``.../weak``)."""
    head, _, prior = variant.rpartition("/")
    if prior not in ("informative", "weak"):
        raise ValueError(f"{variant!r} has no prior choice (e.g. 'ffnn'); name a hybrid variant")
    return f"{head}/{'weak' if prior == 'informative' else 'informative'}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", default="cartpole")
    p.add_argument("--kind", default="trajectories")
    p.add_argument("--other-kind", default="uniform")
    p.add_argument("--variant", default="diffnea/nn-friction/informative")
    p.add_argument(
        "--tables", nargs="+", choices=("elbo", "constants"), default=["elbo", "constants"]
    )
    a = p.parse_args()
    print(f"{a.system} / {a.kind} / {a.variant}, quick settings; one new process per row\n")
    header = (
        "| {} | process | wall s | backend compile s | programs compiled | e.g. |\n"
        + "| --- " * 6
        + "|"
    )
    if "elbo" in a.tables:
        print(header.format("ELBO"))
        for elbo in ("sorted", "numpyro"):
            with tempfile.TemporaryDirectory(prefix="bayes-nea-cache-") as cache:
                for label, seed in (("seed 0, empty cache", 0), ("seed 0 again", 0), ("seed 1", 1)):
                    _row(elbo, label, run_cell(cache, a.system, a.kind, a.variant, seed, elbo))
        print()
    if "constants" in a.tables:
        print(header.format("array constants"))
        rows = (
            (f"{a.variant}, empty cache", a.kind, a.variant),
            (f"then {other_prior(a.variant)}", a.kind, other_prior(a.variant)),
            (f"then {a.other_kind} data", a.other_kind, a.variant),
        )
        for constants in CONSTANTS:
            with tempfile.TemporaryDirectory(prefix="bayes-nea-cache-") as cache:
                for label, kind, variant in rows:
                    r = run_cell(cache, a.system, kind, variant, 0, "sorted", constants)
                    _row(constants, label, r)


if __name__ == "__main__":
    main()
