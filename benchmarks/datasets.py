"""Dataset generation speed (and the hardware-like pipeline's estimation error), on this machine.

Prints one row per (system, kind, duration): seconds for the first call (including JIT compile)
and for a second call with the same shapes (compiled scan reused), samples, and for hardware-like
data the rms error of the estimated ``qd``/``qdd`` against the simulator's true values.
The target of issue 4: one hour of 250 Hz hardware-like cart-pole data in under 10 s.

    python benchmarks/datasets.py [--hours 1.0] [--quick]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import data


def timed(system: str, kind: str, duration: float, **settings):
    start = time.perf_counter()
    ds, truth = data.simulate_dataset(system, kind, seed=0, duration=duration, **settings)
    first = time.perf_counter() - start
    start = time.perf_counter()
    data.simulate_dataset(system, kind, seed=1, duration=duration, **settings)
    again = time.perf_counter() - start
    return ds, truth, first, again


def estimation_error(ds, truth) -> str:
    if not truth or not ds.estimated:
        return ""
    n = ds.n
    parts = []
    for name in ("qd", "qdd"):
        est = np.concatenate([getattr(ep, name) for ep in ds.episodes])
        true = truth[name].reshape(-1, n)
        rms_err = np.sqrt(((est - true) ** 2).mean(0))
        rms = np.sqrt((true**2).mean(0))
        parts.append(
            f"{name} rms err {np.array2string(rms_err, precision=3)} "
            f"(signal rms {np.array2string(rms, precision=2)})"
        )
    return "; ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=1.0, help="hardware-like cart-pole hours")
    parser.add_argument("--quick", action="store_true", help="only the 1 h hardware-like row")
    args = parser.parse_args()
    rows = [("cartpole", "hardware", 3600.0 * args.hours)]
    if not args.quick:
        rows += [
            ("furuta", "hardware", 3600.0 * args.hours),
            ("cartpole", "trajectories", 600.0),
            ("furuta", "trajectories", 600.0),
            ("cartpole", "uniform", 400.0),
            ("furuta", "uniform", 400.0),
        ]
    print(
        f"{'system':9s} {'kind':13s} {'duration':>9s} {'samples':>9s} {'first (s)':>10s} "
        f"{'again (s)':>10s}  estimation error"
    )
    for system, kind, duration in rows:
        ds, truth, first, again = timed(system, kind, duration)
        print(
            f"{system:9s} {kind:13s} {duration:8.0f}s {ds.n_samples:9d} {first:10.2f} "
            f"{again:10.2f}  {estimation_error(ds, truth)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
