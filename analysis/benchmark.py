"""The benchmark grid: every variant x system x dataset kind, fitted and scored, on dask.distributed.

DiffNEA (Lutter et al. 2020), section 4 and Figure 1, done the Bayesian way. Each cell
``(system, dataset kind, variant)`` is an independent task on a ``dask.distributed`` cluster (a
``LocalCluster`` of processes by default, or an existing scheduler's address); its metrics are
written atomically to ``<out>/cells/<system>__<dataset>__<variant with / -> ->.json``. Finished
cells (status "ok") are skipped on the next run, so an interrupted sweep resumes where it stopped;
failed cells are retried. A progress line shows cells done and the time left.

The cell function is injected (``cell_fn(cell, settings) -> dict``): :func:`analysis.cells.fit_cell`
fits and scores a real model; tests pass cheap functions to exercise the engine.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from analysis.cells import fit_cell, grid_dataset_options
from analysis.resources import release_compiled_programs, sweep_client
from data.io import file_lock, remove_stale_temporaries, write_json_atomic
from inference import LBFGS, OPTIMIZERS, TRAIN_DTYPES
from models import ModelSpec, variant_names
from models.actuators import NETWORK_FORMAT, reshaped_since
from models.families import FAMILY_CLASSES
from models.spec import WHITE_BOX_FAMILIES
from models.variants import (
    START_FORMAT,
    has_networks,
    start_changed_since,
)

SYSTEMS = ("cartpole", "furuta")
DATASET_KINDS = ("uniform", "trajectories", "hardware")
CELL_SCHEMA = 2
SHARED_STARTS = "white-box-starts"
"""Folder (in a grid's output folder) of the white-box starts its weak-prior hybrid cells share
(:func:`analysis.cells.grid_white_box_start`)."""


@dataclasses.dataclass(frozen=True)
class BenchmarkSettings:
    """How hard each cell works. JSON-able; stored in every cell file.

    Each cell's posterior comes from its variant's own path (:func:`analysis.cells.fit_posterior`):
    NUTS from a polished MAP for white-box variants without networks and NEA, an early-stopped
    ensemble of MAPs for variants with networks.

    Fields:
        name: "quick" | "full" | "tiny" | a user's label.
        duration: seconds of data generated per dataset, in episodes of ``episode_duration`` s
            split by whole episode in the fractions ``split`` (training, validation, held-out).
        seeds: dataset seeds: every (system, dataset kind) is generated once per seed and every
            variant fitted to each (the grid's seed axis).
        svi_steps, learning_rate: SVI steps of the MAP before NUTS, and the learning rate of
            every Adam fit (that MAP, ensemble members under ``"adam"``).
        ensemble_optimizer, ensemble_steps, ensemble_min_delta: how each member of a network
            cell's ensemble is fitted (``inference.fit_svi``'s ``optimizer``, ``steps`` and
            ``min_delta``): ``"adam"`` steps at ``learning_rate`` (every setting), or
            ``"lbfgs"`` iterations. On the quick grid's 156 ensemble cells of seeds 0 and 1,
            L-BFGS (300 iterations, ``min_delta`` 1e-3) against Adam (1,000 steps): held-out
            NMSE median ratio 1.00, 32 converged against 3, rollout bands 1.85x wider and
            covering more, but the median rollout error at 1 s 1.39x larger and little faster
            on a warm seed (docs/measurements.md, "The grid's ensembles by L-BFGS"). Records
            from before these fields existed were Adam, ``svi_steps`` steps, ``min_delta`` 0.
        ensemble_dtype: ``"float64"`` or ``"float32"``: the dtype the members' optimisation steps
            run in (``fit_svi``'s ``train_dtype``; everything after them runs in float64):
            float32 in the quick setting, float64 in the others. Records from before this
            field were float64.
        num_warmup, num_samples, num_chains, max_tree_depth: NUTS per attempt; an attempt that
            did not converge is extended by ``num_samples`` draws per chain when only R-hat
            (above 1.01) or bulk ESS (below ``min_ess``) fell short, and re-run with a new key,
            twice the warm-up and a higher step-size target after divergences
            (``analysis.cells.next_target_accept``), up to ``nuts_attempts`` runs. At 300 draws
            per chain the largest R-hat of 12-40 perfectly mixed sites exceeds 1.01 in 16-45 %
            of runs (2 chains of independent draws, simulated); at 500 in 1.5-4 %.
        kinematics_posterior: ``"laplace"`` or ``"nuts"``: the posterior of ``nokin-diffnea``
            variants without networks (the Laplace approximation at their polished MAP, or NUTS
            as for the other white-box variants).
        draws: posterior draws used for predictions, rollouts and bands.
        rollout_seconds: length of the uncontrolled rollouts (s); ``rollout_starts`` of them per
            cell (the Figure-1 start and held-out states).
        horizons: rollout-error and band-coverage horizons (s).
        controller_seconds: closed-loop swing-up per draw (s); 0 skips it.
        seed: base seed; each cell derives its own from it and its name.
    """

    name: str = "quick"
    duration: float = 40.0
    episode_duration: float = 5.0
    split: tuple[float, ...] = (0.625, 0.125, 0.25)
    seeds: tuple[int, ...] = (0,)
    svi_steps: int = 1000
    learning_rate: float = 1e-2
    ensemble_optimizer: str = "adam"
    ensemble_steps: int = 1000
    ensemble_min_delta: float = 0.0
    ensemble_dtype: str = "float64"
    num_warmup: int = 300
    num_samples: int = 500
    num_chains: int = 2
    max_tree_depth: int = 8
    nuts_attempts: int = 2
    min_ess: float = 100.0
    kinematics_posterior: str = "laplace"
    draws: int = 100
    rollout_seconds: float = 4.0
    rollout_starts: int = 4
    horizons: tuple[float, ...] = (0.1, 0.5, 1.0, 4.0)
    controller_seconds: float = 8.0
    seed: int = 0

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        for k in ("horizons", "split", "seeds"):
            d[k] = list(d[k])
        return d


SETTINGS = {
    "tiny": BenchmarkSettings(
        name="tiny",
        duration=6.0,
        episode_duration=1.0,
        split=(0.5, 0.25, 0.25),
        svi_steps=100,
        ensemble_steps=100,
        num_warmup=20,
        num_samples=20,
        nuts_attempts=1,
        draws=16,
        rollout_seconds=1.0,
        rollout_starts=2,
        horizons=(0.1, 0.4),
        controller_seconds=0.0,
    ),
    # float32 members: a warm dataset seed (156 cells) on 2 cores took 21.6-25.8 min on the
    # machine of 2026-12-02 evening and 47.9-53.6 min on the slower ones before (where the
    # cart-pole half alone took 35 min with float64 members); on the noisy sets held-out NMSE
    # and rollout errors agree to a median ratio of 1.000 (docs/measurements.md)
    "quick": BenchmarkSettings(name="quick", seeds=(0, 1, 2), ensemble_dtype="float32"),
    "full": BenchmarkSettings(
        name="full",
        duration=120.0,
        episode_duration=10.0,
        split=(0.7, 0.1, 0.2),
        seeds=tuple(range(10)),
        svi_steps=3000,
        ensemble_steps=3000,
        num_warmup=1000,
        num_samples=1000,
        nuts_attempts=3,
        min_ess=400.0,
        kinematics_posterior="nuts",
        max_tree_depth=10,
        draws=1000,
        rollout_seconds=10.0,
        rollout_starts=10,
        horizons=(0.1, 0.5, 1.0, 4.0, 10.0),
        controller_seconds=8.0,
    ),
}
"""Named settings. "quick": 40 s per dataset (5 training episodes of 5 s), 3 dataset seeds, NUTS
2 x (300 + 500); "full": 120 s, 10 seeds, NUTS 2 x (1,000 + 1,000), 1,000 draws (a cluster's
work: ``--scheduler``)."""


def get_settings(setting: str | BenchmarkSettings, **overrides) -> BenchmarkSettings:
    """A named setting (``ValueError`` listing the valid names) with fields overridden."""
    if isinstance(setting, BenchmarkSettings):
        base = setting
    elif setting in SETTINGS:
        base = SETTINGS[setting]
    else:
        raise ValueError(
            f"unknown benchmark setting {setting!r}; valid settings are {sorted(SETTINGS)}"
        )
    fields = {f.name for f in dataclasses.fields(BenchmarkSettings)}
    bad = sorted(set(overrides) - fields)
    if bad:
        raise ValueError(f"unknown setting fields {bad}; valid fields are {sorted(fields)}")
    for k, cast in (("horizons", float), ("split", float), ("seeds", int)):
        if k in overrides:
            overrides[k] = tuple(cast(x) for x in overrides[k])
    if overrides.get("kinematics_posterior", "laplace") not in ("laplace", "nuts"):
        raise ValueError(
            "kinematics_posterior must be 'laplace' or 'nuts', got "
            f"{overrides['kinematics_posterior']!r}"
        )
    optimizers = (LBFGS, *OPTIMIZERS)
    if overrides.get("ensemble_optimizer", "adam") not in optimizers:
        raise ValueError(
            f"ensemble_optimizer must be one of {list(optimizers)}, got "
            f"{overrides['ensemble_optimizer']!r}"
        )
    if overrides.get("ensemble_dtype", "float64") not in TRAIN_DTYPES:
        raise ValueError(
            f"ensemble_dtype must be one of {list(TRAIN_DTYPES)}, got "
            f"{overrides['ensemble_dtype']!r}"
        )
    delta = float(overrides.get("ensemble_min_delta", 0.0))
    if not (math.isfinite(delta) and delta >= 0.0):
        raise ValueError(f"ensemble_min_delta must be a finite number >= 0, got {delta!r}")
    return dataclasses.replace(base, **overrides)


# the order in which :func:`work_groups` hands out a seed's groups: the costliest first, so that
# the cheap ones fill the end of the seed (summed cell seconds of a group, cart-pole half of seed 2
# with float64 members, 2026-12-01: network actuators 230-850 s, learned kinematics without
# networks ~210 s, DiffNEA white-box 90-170 s, the black box ~90 s, NEA ~26 s)
_ACTUATOR_RANK = {"nn-residual": 0, "nn-friction": 1, "ffnn": 2}


def _group_rank(variant: str) -> tuple:
    spec = _spec(variant)
    if spec is None:  # a name the library does not know (tests' toy cells): after the others
        return (9,)
    if spec.family in WHITE_BOX_FAMILIES:
        if spec.actuator in _ACTUATOR_RANK:
            return (0, _ACTUATOR_RANK[spec.actuator])
        return (1,) if FAMILY_CLASSES[spec.family].learns_kinematics else (2,)
    return (3,) if has_networks(spec) else (4,)


def _group_key(cell: dict) -> tuple:
    """(seed, system, variant without its prior): the cells one worker runs in a row."""
    parts = cell["variant"].split("/")
    return (cell["seed"], cell["system"], "/".join(parts[:2]) if len(parts) == 3 else parts[0])


def work_groups(cells: list[dict]) -> list[list[dict]]:
    """``cells`` cut into the groups a worker runs in a row (:class:`GroupQueue`), in the order
    they are handed out.

    A group is one (seed, system, family, actuator): both priors of a variant on every dataset
    kind, informative before weak, each in the grid's order. Its cells share what one process
    traced and compiled for the first: a variant's priors and a system's kinds differ only in
    array constants, which the command line lowers as program arguments
    (``cli.main.share_programs_across_constants``), and equal robots share their traced
    dynamics. Cells handed out one by one went to whichever worker was free, so each worker
    traced most variants (measured on 24 cells: 0.82x the summed cell time in groups,
    docs/measurements.md).

    Order: dataset seed outermost (a run stopped early has whole seeds), then within a seed the
    costliest groups first (network hybrids, then learned kinematics, the DiffNEA white box, the
    black box, NEA), so that the cheapest fill its end; the hybrids' groups alternate between
    the two families, whose weak-prior cells each fit or load their family's white-box start
    (:func:`analysis.cells.grid_white_box_start`), so two workers seldom wait on the same one.
    The grid's order is kept otherwise, and no cell is lost or repeated.
    """
    groups: dict[tuple, list[dict]] = {}
    for c in cells:
        groups.setdefault(_group_key(c), []).append(c)
    first = {key: k for k, key in enumerate(groups)}
    ordered = sorted(
        groups, key=lambda key: (key[0], _group_rank(groups[key][0]["variant"]), first[key])
    )
    for key in ordered:
        groups[key].sort(key=lambda c: c["variant"].endswith("/weak"))  # stable: grid order kept
    return [groups[key] for key in ordered]


class GroupQueue:
    """Hands out a grid's cells to workers, each worker staying on its group.

    ``groups``: :func:`work_groups`'s list, in submission order. :meth:`next_for` gives a
    worker the next cell of the group it is on; when that is done, the next group nobody has
    started; when none is left, the back half of the group with the most cells left on another
    worker (so no worker idles at the end of a run while a group has cells to spare, and the
    thief, too, runs a stretch of one group). Each cell is handed out once.
    """

    def __init__(self, groups: list[list[dict]]):
        self._waiting = [list(g) for g in groups if g]
        self._current: dict[str, list[dict]] = {}  # worker -> what is left of its group

    def next_for(self, worker: str) -> dict | None:
        """The next cell for ``worker``, None when every cell has been handed out."""
        mine = self._current.get(worker)
        if not mine:
            if self._waiting:
                mine = self._waiting.pop(0)
            else:
                donor = max(self._current.values(), key=len, default=[])
                half = len(donor) // 2
                mine = donor[len(donor) - half :]
                del donor[len(donor) - half :]
                if not mine and donor:  # one cell left: the idle worker takes it
                    mine = [donor.pop()]
            self._current[worker] = mine
        return mine.pop(0) if mine else None


def _spec(variant: str) -> ModelSpec | None:
    """The spec of a variant name; None for names the library does not know (tests' toy cells)."""
    try:
        return ModelSpec.parse(variant)
    except ValueError:
        return None


def cell_id(system: str, dataset: str, variant: str, seed: int = 0) -> str:
    """File stem of a cell: ``<system>__<dataset>__<variant with '/' replaced by '-'>``, with
    ``__s<seed>`` appended for dataset seeds other than 0."""
    stem = f"{system}__{dataset}__{variant.replace('/', '-')}"
    return stem if seed == 0 else f"{stem}__s{seed}"


def make_grid(
    *,
    systems: Iterable[str] = SYSTEMS,
    datasets: Iterable[str] = DATASET_KINDS,
    variants: Iterable[str] | None = None,
    seeds: Iterable[int] = (0,),
) -> list[dict]:
    """The cells ``{"system", "dataset", "variant", "seed", "id"}`` of the product, in a stable
    order (seed outermost: a run stopped early has whole seeds).

    ``variants=None`` takes ``models.variant_names()`` (the 26 DiffNEA variants); ``seeds``: the
    dataset seeds (:class:`BenchmarkSettings`).
    """
    systems, datasets = tuple(systems), tuple(datasets)
    for s in systems:
        if s not in SYSTEMS:
            raise ValueError(f"unknown system {s!r}; the benchmark's systems are {SYSTEMS}")
    for d in datasets:
        if d not in DATASET_KINDS:
            raise ValueError(
                f"unknown dataset kind {d!r}; the benchmark's kinds are {DATASET_KINDS}"
            )
    if variants is None:
        variants = variant_names()
    variants = tuple(variants)
    seeds = tuple(int(k) for k in seeds)
    if not systems or not datasets or not variants or not seeds:
        raise ValueError(
            "the grid is empty: give at least one system, dataset kind, variant and seed"
        )
    options = {d: grid_dataset_options(d) for d in datasets}
    return [
        {"system": s, "dataset": d, "variant": v, "seed": k, "id": cell_id(s, d, v, k)}
        | ({"data": options[d]} if options[d] else {})
        for k in seeds
        for s in systems
        for d in datasets
        for v in variants
    ]


def read_cell(path: str | os.PathLike, *, schema: str = CELL_SCHEMA) -> dict | None:
    """A record file's record (a grid cell by default), or None if it is missing, unreadable or
    from another ``schema``."""
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("schema") != schema:
        return None
    return record


GRID_AXES = ("seeds",)
"""Settings fields that say which cells a run holds, not how a cell is computed (the cell
carries its own dataset seed): a run with more seeds keeps the cells of the seeds it shares."""


ENSEMBLE_SETTINGS = ("ensemble_optimizer", "ensemble_steps", "ensemble_min_delta", "ensemble_dtype")
"""Settings fields that only network cells (ensembles) use: the other cells keep their records
when these change."""


def recorded_settings(settings: dict) -> dict:
    """A record's ``settings`` with the fields it lacks because it predates them filled with
    what its cell was computed with (ensembles: Adam for ``svi_steps`` steps, no
    ``min_delta``, float64)."""
    legacy = {
        "ensemble_optimizer": "adam",
        "ensemble_steps": settings.get("svi_steps"),
        "ensemble_min_delta": 0.0,
        "ensemble_dtype": "float64",
    }
    return {**legacy, **settings}


def _cell_settings(settings: dict, variant: str) -> dict:
    """The fields of ``settings`` that say how a cell of ``variant`` is computed: the grid's
    axes left out, fields added since filled with the values used before
    (:func:`recorded_settings`) and the ensemble's fields left out for variants without
    networks."""
    settings = recorded_settings(settings)
    drop = set(GRID_AXES) | (set() if _has_networks(variant) else set(ENSEMBLE_SETTINGS))
    return {k: v for k, v in settings.items() if k not in drop}


def _has_networks(variant: str) -> bool:
    try:
        return has_networks(ModelSpec.parse(variant))
    except ValueError:  # a name the library does not know (tests' toy cells): every field counts
        return True


def _finished(record: dict | None, cell: dict, settings: dict) -> bool:
    """Whether ``record`` is a finished computation of ``cell`` (its dataset options included)
    under ``settings`` (the grid's axes, :data:`GRID_AXES`, aside): kept on resume instead of
    computed again. A record of a network actuator whose structure changed since it was computed
    (``models.actuators.reshaped_since``) or whose start point did
    (``models.variants.start_changed_since``) is not finished."""
    return bool(
        record
        and record["status"] == "ok"
        and _cell_settings(record.get("settings") or {}, cell["variant"])
        == _cell_settings(settings, cell["variant"])
        and record.get("cell") == cell
        and not reshaped_since(cell["variant"], record.get("network_format", 1))
        and not start_changed_since(cell["variant"], record.get("start_format", 1))
    )


def run_and_record(task: Callable[[], dict], path, *, schema, **fields) -> dict:
    """Run ``task() -> metrics`` and write its record to ``path`` atomically; return the record.

    The record holds ``schema``, ``fields`` (what the task is: a cell, a calibration batch, its
    settings), ``status`` ("ok" or "error"), ``error`` (the exception's type and message),
    ``seconds`` and ``metrics``. An exception of the task (not an interrupt) becomes a record
    with status "error", which a resumed run retries: one failed task never stops a sweep.
    """
    start = time.perf_counter()
    try:
        metrics, status, error = task(), "ok", None
    except Exception as err:
        metrics, status, error = {}, "error", f"{type(err).__name__}: {err}"
    record = {
        "schema": schema,
        **fields,
        "status": status,
        "error": error,
        "seconds": time.perf_counter() - start,
        "metrics": metrics,
    }
    write_json_atomic(path, record)
    return record


def _run_cell(
    cell_fn: Callable, cell: dict, settings: dict, path: str, wait: bool = False
) -> tuple[str, dict | None]:
    """Worker side: run one cell under its lock, write its record atomically, return it.

    Returns ``("ran", record)``; ``("done", record)`` when the cell file already holds a finished
    record for these settings (another run computed it); ``("busy", None)`` when another run holds
    the cell's lock and ``wait`` is False. Exceptions (not interrupts) of ``cell_fn`` become a
    record with status "error", which the next run retries."""
    with file_lock(path, wait=wait) as locked:
        if not locked:
            return "busy", None
        record = read_cell(path)
        if _finished(record, cell, settings):
            return "done", record
        record = run_and_record(
            lambda: cell_fn(cell, settings), path, schema=CELL_SCHEMA, cell=cell,
            settings=settings, network_format=NETWORK_FORMAT, start_format=START_FORMAT,
        )
        # a worker runs cell after cell, each with its own models: their compiled programs would
        # pile up until the kernel's mapping limit kills the process (analysis.resources)
        release_compiled_programs()
        return "ran", record


def _submit_cell(client, cell_fn, settings: dict, cells_dir: Path, wait: bool, cell, worker):
    """Submit :func:`_run_cell` of ``cell`` to ``worker`` (any other, should it have died)."""
    return client.submit(
        _run_cell,
        cell_fn,
        cell,
        settings,
        str(cells_dir / f"{cell['id']}.json"),
        wait,
        key=f"cell-{cell['id']}{'-wait' if wait else ''}",
        pure=False,
        workers=[worker],
        allow_other_workers=True,
    )


def _dispatch(client, queue: GroupQueue, submit: Callable):
    """Run ``queue``'s cells on ``client``'s workers, one at a time per worker; yield each
    cell's result as it completes. ``submit(cell, worker) -> future``. A worker that finished
    gets its next cell (:meth:`GroupQueue.next_for`), and so do workers that joined the
    scheduler since. Unfinished cells are cancelled when the caller stops (an interrupt)."""
    # dask is imported here on purpose: it costs ~1 s and only the sweep itself needs it
    from dask.distributed import as_completed

    futures = {}  # future -> the worker it was given to

    client.wait_for_workers(1)
    pending = as_completed([], loop=client.loop)
    try:
        for worker in sorted(client.scheduler_info()["workers"]):
            if (cell := queue.next_for(worker)) is not None:
                future = submit(cell, worker)
                futures[future] = worker
                pending.add(future)
        for future in pending:
            result = future.result()  # an interrupt in a cell propagates
            done_by = futures.pop(future)
            idle = set(client.scheduler_info()["workers"]) - set(futures.values())
            for worker in sorted(idle | {done_by}):
                if (cell := queue.next_for(worker)) is not None:
                    nxt = submit(cell, worker)
                    futures[nxt] = worker
                    pending.add(nxt)
            yield result
    finally:
        for future in futures:
            future.cancel()


def _progress_line(done: int, total: int, skipped: int, started: float, failed: int) -> str:
    elapsed = time.perf_counter() - started
    ran = done - skipped
    remaining = total - done
    eta = elapsed / ran * remaining if ran else float("nan")
    eta_s = "--" if eta != eta else time.strftime("%H:%M:%S", time.gmtime(eta))
    bar = "#" * int(30 * done / total) + "." * (30 - int(30 * done / total))
    return (
        f"\r[{bar}] {done}/{total} cells ({skipped} kept, {failed} failed)  "
        f"elapsed {time.strftime('%H:%M:%S', time.gmtime(elapsed))}  left ~{eta_s}"
    )


@dataclasses.dataclass(frozen=True)
class BenchmarkRun:
    """The outcome of :func:`run_benchmark`.

    Fields:
        out_dir: the output folder; cells are in ``out_dir/cells``.
        records: every cell's record (in grid order), including kept ones.
        ran: ids of cells computed in this run. kept: ids of finished cells that were skipped
            (found finished at the start, or computed meanwhile by another run on the folder).
        seconds: wall time of this run.
    """

    out_dir: Path
    records: tuple[dict, ...]
    ran: tuple[str, ...]
    kept: tuple[str, ...]
    seconds: float

    @property
    def failed(self) -> tuple[str, ...]:
        return tuple(r["cell"]["id"] for r in self.records if r["status"] != "ok")


def run_benchmark(
    out_dir: str | os.PathLike,
    *,
    setting: str | BenchmarkSettings = "quick",
    systems: Iterable[str] = SYSTEMS,
    datasets: Iterable[str] = DATASET_KINDS,
    variants: Iterable[str] | None = None,
    cell_fn: Callable[[dict, dict], dict] | None = None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    processes: bool = True,
    progress: bool = True,
    **overrides,
) -> BenchmarkRun:
    """Run (or resume) the benchmark grid on dask: one task per unfinished cell, each worker
    given the cells of one :func:`work_groups` group after the other (:class:`GroupQueue`).

    Args:
        out_dir: output folder (created); cell records go to ``out_dir/cells/<id>.json``.
        setting: "tiny", "quick", "full" or a :class:`BenchmarkSettings`; ``overrides`` replace
            its fields (e.g. ``svi_steps=500``).
        systems, datasets, variants: the grid (defaults: 2 x 3 x 26 = 156 cells per dataset
            seed of the setting).
        cell_fn: ``(cell, settings_dict) -> metrics dict``; default :func:`analysis.cells.fit_cell`
            with ``shared_dir=out_dir/white-box-starts`` (the weak-prior hybrids' white-box
            starts, fitted once per family and dataset: :func:`analysis.cells.grid_white_box_start`).
            Must be importable by the workers (a module-level function) when ``processes``.
        scheduler: address of a running dask scheduler (``"tcp://host:8786"``); None starts a
            ``LocalCluster(n_workers, threads_per_worker=1, processes=processes)``.
        n_workers: local workers (default: the number of CPU cores).
        progress: print a progress line (cells done / total, time left) to stderr.
    Returns:
        :class:`BenchmarkRun`. Cells whose file holds status "ok" for the same settings are kept.

    Several runs may share one folder (at once): each cell is computed under a lock
    (``cells/.<id>.json.lock``), so it is computed once, and each run waits for the cells another
    run is computing and reports them as kept. Only temporaries of dead writers are removed.
    """
    settings = get_settings(setting, **overrides)
    settings_dict = settings.to_dict()
    grid = make_grid(systems=systems, datasets=datasets, variants=variants, seeds=settings.seeds)
    out_dir = Path(out_dir)
    if cell_fn is None:
        cell_fn = functools.partial(fit_cell, shared_dir=str(out_dir / SHARED_STARTS))
    cells_dir = out_dir / "cells"
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"benchmark output folder {str(out_dir)!r} is a file, not a folder")
    try:
        cells_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(
            f"cannot create the benchmark folder {str(cells_dir)!r}: {err.strerror or err}"
        ) from None
    # temporaries of killed runs only: another live run may be writing into the same folder
    remove_stale_temporaries(cells_dir)
    remove_stale_temporaries(out_dir / SHARED_STARTS)
    write_json_atomic(out_dir / "settings.json", settings_dict)

    records: dict[str, dict] = {}
    todo = []
    for cell in grid:
        record = read_cell(cells_dir / f"{cell['id']}.json")
        if _finished(record, cell, settings_dict):
            records[cell["id"]] = record
        else:
            todo.append(cell)
    kept = list(records)
    started = time.perf_counter()
    ran: list[str] = []
    failed = 0
    total = len(grid)
    if progress:
        print(
            _progress_line(len(kept), total, len(kept), started, 0),
            end="",
            file=sys.stderr,
            flush=True,
        )
    if todo:
        with sweep_client(scheduler, n_workers, processes=processes) as client:
            # first pass: cells locked by another run are left to it ("busy"); second pass: wait
            # for their locks and take the other run's record (or compute a cell it failed)
            for wait in (False, True):
                submit = functools.partial(
                    _submit_cell, client, cell_fn, settings_dict, cells_dir, wait
                )
                for outcome, record in _dispatch(client, GroupQueue(work_groups(todo)), submit):
                    if outcome == "busy":
                        continue
                    cid = record["cell"]["id"]
                    records[cid] = record
                    (ran if outcome == "ran" else kept).append(cid)
                    failed += record["status"] != "ok"
                    if progress:
                        line = _progress_line(len(records), total, len(kept), started, failed)
                        print(line, end="", file=sys.stderr, flush=True)
                todo = [c for c in todo if c["id"] not in records]
                if not todo:
                    break
    if progress:
        print(file=sys.stderr)
    return BenchmarkRun(
        out_dir=out_dir,
        records=tuple(records[c["id"]] for c in grid if c["id"] in records),
        ran=tuple(ran),
        kept=tuple(kept),
        seconds=time.perf_counter() - started,
    )


def load_records(out_dir: str | os.PathLike) -> list[dict]:
    """Every readable cell record under ``out_dir/cells`` (any status), sorted by id."""
    cells_dir = Path(out_dir) / "cells"
    if not cells_dir.is_dir():
        raise ValueError(f"{cells_dir} does not exist: run the benchmark into {out_dir} first")
    records = [read_cell(p) for p in sorted(cells_dir.glob("*.json"))]
    return [r for r in records if r is not None]
