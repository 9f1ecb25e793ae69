"""What a grid cell compiles, and what JAX's persistent compilation cache saves, per process.

One benchmark cell (``analysis.cells.fit_cell``, quick settings) is fitted in three new processes
sharing one empty cache folder: dataset seed 0 (everything compiled), seed 0 again (the same
data) and seed 1 (other data of the same shapes, as the grid's next seed). Each process has its
own string-hash seed, as separate runs do. Peer, in the same run: the same three with NumPyro's
``Trace_ELBO`` in place of ``inference.svi.SortedTrace_ELBO`` (its SVI program depends on the
hash seed). Prints wall seconds per cell, XLA backend-compile seconds and programs compiled.

    python benchmarks/compile_cache.py [--system cartpole] [--kind trajectories]
        [--variant diffnea/nn-friction/informative]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

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


def run_cell(cache: str, system: str, kind: str, variant: str, seed: int, elbo: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, cache, system, kind, variant, str(seed), elbo],
        env=dict(os.environ, PYTHONPATH=_ROOT),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", default="cartpole")
    p.add_argument("--kind", default="trajectories")
    p.add_argument("--variant", default="diffnea/nn-friction/informative")
    a = p.parse_args()
    print(f"{a.system} / {a.kind} / {a.variant}, quick settings; one new process per row\n")
    print("| ELBO | process | wall s | backend compile s | programs compiled | e.g. |")
    print("| --- | --- | --- | --- | --- | --- |")
    for elbo in ("sorted", "numpyro"):
        with tempfile.TemporaryDirectory(prefix="bayes-nea-cache-") as cache:
            for label, seed in (("seed 0, empty cache", 0), ("seed 0 again", 0), ("seed 1", 1)):
                r = run_cell(cache, a.system, a.kind, a.variant, seed, elbo)
                names = ", ".join(r["programs"][:3]) if r["compiled"] < 20 else "(all)"
                print(
                    f"| {elbo} | {label} | {r['seconds']:.1f} | {r['backend_compile_s']:.1f} | "
                    f"{r['compiled']} | {names} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
