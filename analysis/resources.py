"""Long-running processes and XLA's compiled programs: release them before the kernel refuses.

Every compiled XLA CPU program stays mapped in the process while JAX's caches hold it, and JAX's
``jit`` caches hold their static arguments (a model, a robot) and hence programs of models long
gone. A kernel-by-kernel program maps each kernel separately (Furuta ABA, vmapped, XLA
optimisations off: ~185 memory maps), so a process that builds model after model (a grid worker
running cell after cell, a notebook fitting every variant, the test suite in one process)
reaches Linux's per-process limit ``vm.max_map_count`` (65,530 by default), where the next
``mmap`` fails inside XLA and the process dies with a segmentation fault or an abort. Measured:
the identifiable-model tests in one process died at 65,531 maps after ~7 minutes.
:func:`release_compiled_programs` clears JAX's caches (``jax.clear_caches``) once the process
holds more than a fraction of the limit; later calls compile again (or read the persistent
compilation cache).
"""

from __future__ import annotations

import gc

import jax

MAX_MAP_COUNT = "/proc/sys/vm/max_map_count"


def memory_map_count() -> int | None:
    """Number of memory mappings of this process (``/proc/self/maps``), None where unknown."""
    try:
        with open("/proc/self/maps", "rb") as f:
            return sum(1 for _ in f)
    except OSError:
        return None


def max_map_count() -> int | None:
    """The kernel's per-process mapping limit, None where unknown."""
    try:
        with open(MAX_MAP_COUNT) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def release_compiled_programs(fraction: float = 0.5) -> bool:
    """Clear JAX's caches if this process holds more than ``fraction`` of ``vm.max_map_count``
    memory mappings (module docstring). Returns whether it cleared them; a no-op (False) where
    the counts are unknown (not Linux)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    count, limit = memory_map_count(), max_map_count()
    if count is None or limit is None or count <= fraction * limit:
        return False
    jax.clear_caches()
    gc.collect()
    return True
