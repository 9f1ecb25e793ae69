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

:func:`sweep_client` opens the dask client of a sweep (the benchmark grid, the calibration): a
running scheduler's, or a local cluster of one-thread workers, each pinned to its own cores by
:func:`pin_local_workers`, for XLA's CPU runtime splits large operations over a thread pool as
wide as the cores a process may use, so two unpinned workers on two cores run four busy threads
(measured, 8 quick-grid cells, 2 cores: 246 s of summed cell time with 2 unpinned workers
against 200 s one after the other on one pinned core). A one-thread pool rounds some operations
differently, so a pinned run's network fits can differ from an unpinned one's in the last bits
and, after many optimiser steps, beyond (docs/measurements.md).
"""

from __future__ import annotations

import contextlib
import gc
import os

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


def pin_to_cpus(cpus) -> bool:
    """Restrict every thread of this process to the CPU ids ``cpus`` (threads started later
    inherit it from the thread that starts them). Returns False where the platform has no
    per-thread affinity (not Linux)."""
    cpus = set(cpus)
    if not cpus or not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"):
        return False
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (OSError, ValueError):  # a thread that ended meanwhile
            pass
    return True


def worker_cpus(index: int, n_workers: int, cpus) -> list[int]:
    """The share of ``cpus`` (the CPU ids the cluster may use) of local worker ``index`` of
    ``n_workers``: every ``n_workers``-th CPU from ``index`` (each worker its own cores), or one
    CPU shared round-robin where there are more workers than CPUs."""
    cpus = sorted(cpus)
    if index < 0 or n_workers < 1 or not cpus:
        raise ValueError(
            f"need index >= 0, n_workers >= 1 and some CPUs, got {index}, {n_workers}, {cpus}"
        )
    return cpus[index % n_workers :: n_workers] if n_workers <= len(cpus) else [
        cpus[index % len(cpus)]
    ]


def pin_local_workers(client, n_workers: int) -> None:
    """Pin each of the ``n_workers`` worker processes of a local dask cluster (``client``) to
    its share of this machine's CPUs (:func:`worker_cpus`; module docstring). Call before
    submitting work, while the workers have not started JAX's thread pool."""
    if not hasattr(os, "sched_getaffinity"):
        return
    client.wait_for_workers(n_workers)
    cpus = sorted(os.sched_getaffinity(0))
    workers = sorted(client.scheduler_info()["workers"])
    for index, address in enumerate(workers):
        client.run(pin_to_cpus, worker_cpus(index, len(workers), cpus), workers=[address])


@contextlib.contextmanager
def sweep_client(scheduler: str | None = None, n_workers: int | None = None, *, processes=True):
    """The dask ``Client`` of a sweep, closed on exit (with its cluster where it made one).

    ``scheduler``: a running scheduler's address (``"tcp://host:8786"``); None starts a
    ``LocalCluster(n_workers, threads_per_worker=1, processes=processes)`` (``n_workers``
    default: the number of CPU cores) whose worker processes are pinned
    (:func:`pin_local_workers`). The client is never made the process's default, so a sweep
    leaves no client behind for later dask work in the same process.
    """
    # dask is imported here on purpose: it costs ~1 s and only the sweeps need it
    from dask.distributed import Client, LocalCluster

    cluster = client = None
    try:
        if scheduler is None:
            cluster = LocalCluster(
                n_workers=n_workers or os.cpu_count() or 1,
                threads_per_worker=1,
                processes=processes,
                dashboard_address=None,
            )
            client = Client(cluster, set_as_default=False)
            if processes:
                pin_local_workers(client, len(cluster.workers))
        else:
            client = Client(scheduler, set_as_default=False)
        yield client
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
