"""The benchmark engine on dask.distributed: the full 156-cell grid with a cheap injected cell
function, skipping finished cells, atomic cell files, and resuming after a killed run."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import dask
import numpy as np
import pytest

from analysis.benchmark import (
    CELL_SCHEMA,
    DATASET_KINDS,
    ENSEMBLE_SETTINGS,
    SYSTEMS,
    GroupQueue,
    _finished,
    cell_id,
    get_settings,
    load_records,
    make_grid,
    read_cell,
    run_benchmark,
    work_groups,
)
from data.io import write_json_atomic
from data.simulate import MEASUREMENT_NOISE
from models.actuators import NETWORK_FORMAT
from models.variants import START_FORMAT

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)

VARIANTS = tuple(f"family{i}/actuator/prior" for i in range(26))  # the grid's shape: 26 variants

CELL_MODULE = textwrap.dedent(
    """
    import os, time

    def cell(cell, settings):
        # a cheap but real computation: the cell's position in its id, and an optional wait
        with open(os.environ["CELL_LOG"], "a") as f:
            f.write(cell["id"] + "\\n")
        time.sleep(settings["rollout_seconds"])
        if "fail" in cell["variant"]:
            raise RuntimeError("this cell fails")
        return {"length": len(cell["id"]), "system": cell["system"]}
    """
)


@pytest.fixture()
def cell_module(tmp_path, monkeypatch):
    (tmp_path / "toy_cells.py").write_text(CELL_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CELL_LOG", str(tmp_path / "log.txt"))
    import importlib

    import toy_cells

    importlib.reload(toy_cells)
    return toy_cells


def logged(tmp_path):
    path = tmp_path / "log.txt"
    return path.read_text().split() if path.exists() else []


def test_grid_and_settings():
    grid = make_grid(variants=VARIANTS)
    assert len(grid) == 2 * 3 * 26 == 156
    assert len({c["id"] for c in grid}) == 156
    assert (
        cell_id("cartpole", "uniform", "diffnea/stribeck/informative")
        == "cartpole__uniform__diffnea-stribeck-informative"
    )
    with pytest.raises(ValueError, match="valid settings"):
        get_settings("huge")
    with pytest.raises(ValueError, match="valid fields"):
        get_settings("quick", svi_stepz=3)
    with pytest.raises(ValueError, match="benchmark's systems"):
        make_grid(systems=("pendubot",), variants=VARIANTS)
    assert get_settings("quick", svi_steps=5).svi_steps == 5
    with pytest.raises(ValueError, match="kinematics_posterior"):
        get_settings("quick", kinematics_posterior="mcmc")
    with pytest.raises(ValueError, match="ensemble_optimizer must be one of .*'lbfgs'"):
        get_settings("quick", ensemble_optimizer="newton")
    with pytest.raises(ValueError, match="ensemble_min_delta must be a finite number >= 0"):
        get_settings("quick", ensemble_min_delta=-1e-3)
    with pytest.raises(ValueError, match="ensemble_dtype must be one of .*'float32'"):
        get_settings("quick", ensemble_dtype="bfloat16")
    assert get_settings("quick", ensemble_optimizer="lbfgs").ensemble_optimizer == "lbfgs"
    # the seed axis: every (system, dataset, variant) once per dataset seed, seed outermost
    seeded = make_grid(variants=VARIANTS, seeds=(0, 1, 2))
    assert len(seeded) == 468 == len({c["id"] for c in seeded})
    assert [c["seed"] for c in seeded[::156]] == [0, 1, 2]
    assert seeded[156]["id"] == cell_id("cartpole", "uniform", VARIANTS[0], 1)
    assert seeded[156]["id"].endswith("__s1")
    quick = get_settings("quick")
    assert quick.seeds == (0, 1, 2) and quick.duration >= 30
    assert quick.duration * quick.split[0] / quick.episode_duration >= 5  # training episodes


def test_a_cell_recorded_before_the_ensemble_settings_counts_as_adam_for_svi_steps():
    """Records from before the ``ensemble_*`` fields were fitted by Adam for ``svi_steps``
    steps without ``min_delta``, in float64: kept by a setting that asks for that. A grid that
    asks for L-BFGS, or for float32 members (the quick setting's), computes its network cells
    again and keeps the others."""
    quick = get_settings("quick", ensemble_dtype="float64").to_dict()
    legacy = {k: v for k, v in quick.items() if k not in ENSEMBLE_SETTINGS}
    lbfgs = dict(quick, ensemble_optimizer="lbfgs", ensemble_steps=300, ensemble_min_delta=1e-3)
    single = get_settings("quick").to_dict()
    assert single["ensemble_dtype"] == "float32"
    for variant, networks in (
        ("diffnea/viscous/informative", False),
        ("nea", False),
        ("diffnea/nn-friction/informative", True),
        ("ffnn", True),
    ):
        cell = make_grid(systems=("cartpole",), datasets=("uniform",), variants=(variant,))[0]
        record = {
            "status": "ok",
            "cell": cell,
            "settings": legacy,
            "network_format": NETWORK_FORMAT,
            "start_format": START_FORMAT,
        }
        assert _finished(record, cell, quick), variant
        assert _finished(record, cell, lbfgs) is not networks, variant
        assert _finished(record, cell, single) is not networks, variant
        assert not _finished(record, cell, dict(quick, svi_steps=7)), variant
        current = dict(record, settings=lbfgs)
        assert _finished(current, cell, lbfgs), variant
        assert _finished(current, cell, quick) is not networks, variant


def test_work_groups_run_a_variants_priors_and_kinds_in_one_process():
    """Each group is one (seed, system, family, actuator): both priors on every kind, informative
    first; seeds stay outermost, within a seed the hybrids come first (alternating families),
    NEA last, and no cell is lost or repeated."""
    grid = make_grid(seeds=(0, 1))  # the 26 DiffNEA variants
    groups = work_groups(grid)
    cells = [c for g in groups for c in g]
    assert sorted(c["id"] for c in cells) == sorted(c["id"] for c in grid)
    assert len(cells) == len(set(c["id"] for c in cells)) == 312
    assert [g[0]["seed"] for g in groups] == sorted(g[0]["seed"] for g in groups)
    # per seed and system: 12 (family, actuator) groups of 6 cells, the black box and NEA of 3
    assert sorted(len(g) for g in groups) == [3] * 8 + [6] * 48
    for g in groups:
        assert len({(c["seed"], c["system"]) for c in g}) == 1
        assert len({c["variant"].rsplit("/", 1)[0] for c in g}) == 1
        assert [c["dataset"] for c in g] == list(DATASET_KINDS) * (len(g) // 3)
        if len(g) == 6:
            assert [c["variant"].endswith("/weak") for c in g] == [False] * 3 + [True] * 3
    for seed in (0, 1):
        names = [g[0]["variant"] for g in groups if g[0]["seed"] == seed]
        assert len(names) == 28
        hybrids = [v.split("/") for v in names[:12]]
        assert {v[1] for v in hybrids} == {"nn-residual", "nn-friction", "ffnn"}
        assert [v[0] for v in hybrids] == ["nokin-diffnea", "diffnea"] * 6
        assert [v[1] for v in hybrids[::4]] == ["nn-residual", "nn-friction", "ffnn"]
        assert names[-2:] == ["nea", "nea"]
    # a name the library does not know (tests' toy cells) still gets its group
    toy = make_grid(systems=("cartpole",), variants=("toy/a/prior", "toy/a/other", "plain"))
    assert [[c["variant"] for c in g] for g in work_groups(toy)] == [
        ["toy/a/prior", "toy/a/other"] * 3,
        ["plain"] * 3,
    ]


def test_group_queue_keeps_workers_on_their_groups_and_shares_the_last_one():
    """Each worker runs its group's cells in order and then the next unstarted group; with none
    left, an idle worker takes the back half of the largest group left elsewhere; every cell is
    handed out exactly once."""
    groups = [[f"{g}{k}" for k in range(n)] for g, n in zip("abcd", (6, 6, 3, 2), strict=True)]
    queue = GroupQueue(groups)
    assert [queue.next_for("w1"), queue.next_for("w2")] == ["a0", "b0"]
    assert [queue.next_for("w1") for _ in range(5)] == ["a1", "a2", "a3", "a4", "a5"]
    assert queue.next_for("w1") == "c0"  # w1's group done: the next unstarted one
    assert queue.next_for("w2") == "b1"
    assert [queue.next_for("w1") for _ in range(2)] == ["c1", "c2"]
    assert [queue.next_for("w1") for _ in range(2)] == ["d0", "d1"]
    # nothing unstarted: w1 takes the back half of what is left of w2's group (b2..b5)
    assert [queue.next_for("w1"), queue.next_for("w1")] == ["b4", "b5"]
    assert [queue.next_for("w2"), queue.next_for("w2")] == ["b2", "b3"]
    # a single cell left elsewhere goes to the idle worker; then nothing is left
    queue = GroupQueue([["x0", "x1"]])
    assert queue.next_for("w1") == "x0" and queue.next_for("w2") == "x1"
    assert queue.next_for("w1") is None and queue.next_for("w2") is None and queue.next_for("w3") is None


def test_full_grid_runs_and_resumes(tmp_path, cell_module):
    out = tmp_path / "bench"
    variants = VARIANTS[:-1] + ("will/fail/now",)

    def in_process(**options):  # the tiny setting's toy cells, in this process, into ``out``
        options = {"n_workers": 1, "progress": False, **options}
        return run_benchmark(
            out,
            setting="tiny",
            cell_fn=cell_module.cell,
            processes=False,
            rollout_seconds=0.0,
            **options,
        )

    run = in_process(variants=variants, n_workers=2, progress=True)
    assert len(run.records) == 156 and len(run.ran) == 156 and not run.kept
    # the sweep's dask client is not left as the process's default scheduler (saving a result
    # with xarray afterwards failed: "Requested dask.distributed scheduler but no Client active")
    assert dask.config.get("scheduler", None) != "dask.distributed"
    assert set(run.failed) == {
        cell_id(s, d, "will/fail/now") for s in SYSTEMS for d in DATASET_KINDS
    }
    rec = read_cell(out / "cells" / f"{cell_id('furuta', 'hardware', VARIANTS[3])}.json")
    assert rec["status"] == "ok" and rec["metrics"] == {
        "length": len(cell_id("furuta", "hardware", VARIANTS[3])),
        "system": "furuta",
    }
    assert (
        "RuntimeError"
        in read_cell(out / "cells" / f"{cell_id('cartpole', 'uniform', 'will/fail/now')}.json")[
            "error"
        ]
    )
    assert len(logged(tmp_path)) == 156
    # second run: the 150 finished cells are kept, only the 6 failed ones run again
    again = in_process(variants=variants, n_workers=2)
    assert len(again.kept) == 150 and sorted(again.ran) == sorted(run.failed)
    assert len(logged(tmp_path)) == 156 + 6
    # a finished record of the same cell computed on other data (a uniform set before it got
    # measurement noise: its cell carries no dataset options) is computed again
    stale_id = cell_id("cartpole", "uniform", VARIANTS[2])
    stale = out / "cells" / f"{stale_id}.json"
    record = read_cell(stale)
    assert record["cell"]["data"] == MEASUREMENT_NOISE
    del record["cell"]["data"]
    write_json_atomic(stale, record)
    fourth = in_process(
        systems=("cartpole",),
        datasets=("uniform", "trajectories"),
        variants=variants[2:3],
    )
    assert fourth.ran == (stale_id,)
    assert fourth.kept == (cell_id("cartpole", "trajectories", VARIANTS[2]),)
    assert read_cell(stale)["cell"]["data"] == MEASUREMENT_NOISE
    # a record from before the network actuators' last change (no network_format) or from
    # before weak-prior hybrids started at the white-box MAP (no start_format): computed again
    # for the variants that change concerns, kept for every other
    one_cell = {"systems": ("cartpole",), "datasets": ("uniform",)}
    for changed, field, current in (
        ("toy/nn-residual/prior", "network_format", NETWORK_FORMAT),
        ("diffnea/ffnn/weak", "start_format", START_FORMAT),
    ):
        assert in_process(**one_cell, variants=(changed,)).ran == (
            cell_id("cartpole", "uniform", changed),
        )
        for variant in (VARIANTS[2], changed):
            path = out / "cells" / f"{cell_id('cartpole', 'uniform', variant)}.json"
            record = read_cell(path)
            assert record[field] == current
            del record[field]
            write_json_atomic(path, record)
        rerun = in_process(**one_cell, variants=(VARIANTS[2], changed))
        assert rerun.kept == (stale_id,)
        assert rerun.ran == (cell_id("cartpole", "uniform", changed),)
        assert in_process(**one_cell, variants=(changed,)).kept == rerun.ran
    # more dataset seeds: the cells of the seeds already run are kept, only the new seed runs
    seeded = in_process(
        systems=("cartpole",),
        datasets=("trajectories",),
        variants=variants[2:3],
        seeds=(0, 7),
    )
    assert seeded.kept == (cell_id("cartpole", "trajectories", VARIANTS[2]),)
    assert seeded.ran == (cell_id("cartpole", "trajectories", VARIANTS[2], 7),)
    # other settings invalidate the kept cells
    third = in_process(
        systems=("cartpole",),
        datasets=("uniform",),
        variants=variants[:2],
        svi_steps=7,
    )
    assert len(third.ran) == 2 and not third.kept
    assert len(load_records(out)) == 159


def test_resume_after_killed_run(tmp_path, cell_module):
    """Kill a sweep (worker processes) mid-run: every file left is whole, the rerun keeps them."""
    out = tmp_path / "bench"
    script = textwrap.dedent(
        f"""
        from analysis.benchmark import run_benchmark
        import toy_cells
        run_benchmark({str(out)!r}, setting="tiny", systems=("cartpole",), variants={VARIANTS[:10]!r},
                      cell_fn=toy_cells.cell, n_workers=2, progress=False, rollout_seconds=0.3)
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(Path.cwd())]))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, start_new_session=True)
    cells = out / "cells"
    deadline = time.time() + 120
    while time.time() < deadline and len(list(cells.glob("*.json"))) < 4:
        time.sleep(0.1)
    os.killpg(proc.pid, 9)  # the whole session: client, scheduler and worker processes
    proc.wait()
    done_before = sorted(p.stem for p in cells.glob("*.json"))
    assert 4 <= len(done_before) < 30, done_before
    for p in cells.glob("*.json"):
        assert json.loads(p.read_text())["status"] == "ok"  # no broken file
    rerun = run_benchmark(
        out,
        setting="tiny",
        systems=("cartpole",),
        variants=VARIANTS[:10],
        cell_fn=cell_module.cell,
        processes=False,
        n_workers=2,
        progress=False,
        rollout_seconds=0.3,
    )
    assert sorted(rerun.kept) == done_before
    assert not set(rerun.ran) & set(done_before)
    assert len(rerun.records) == 30 and not rerun.failed
    assert not list(cells.glob(".*.tmp"))


def fake_record(system, dataset, variant, *, nmse, rmse, div, declared):
    t = [0.0, 0.5, 1.0]
    q = [[0.0, 2.0], [0.0, 1.0], [0.0, -1.0]]
    return {
        "schema": CELL_SCHEMA,
        "cell": {
            "system": system,
            "dataset": dataset,
            "variant": variant,
            "seed": 0,
            "id": cell_id(system, dataset, variant),
        },
        "settings": {"name": "tiny"},
        "status": "ok",
        "seconds": 1.0,
        "metrics": {
            "accel_nmse": nmse,
            "rollout_rmse": {"1": rmse},
            "coverage90": 0.9,
            "divergent_fraction": div,
            "energy_class_declared": declared,
            "energy_true": {"label": "dissipating", "gaining": 0.0},
            "left_domain_fraction": div,
            "nonfinite_fraction": 0.0,
            "plausible_fraction": 1.0,
            "base_error": 0.01,
            "posterior": {"method": "nuts", "converged": True},
            "fit_seconds": 2.0,
            "band": {
                "t": t,
                "lower": q,
                "median": q,
                "upper": q,
                "truth": q,
                "finite_fraction": 1.0,
            },
        },
    }


def test_report_conclusions_from_records(tmp_path):
    from analysis.benchmark import write_json_atomic
    from analysis.report import conclusions, not_converged, write_report

    recs = []
    for ds in ("uniform", "trajectories", "hardware"):
        for v, rmse, div, declared in (
            ("diffnea/viscous/informative", 0.2, 0.0, "dissipative"),
            ("diffnea/viscous/weak", 0.3, 0.0, "dissipative"),
            ("nokin-diffnea/viscous/informative", 0.8, 0.0, "dissipative"),
            ("ffnn", 3.0, 0.5, "unbounded"),
        ):
            recs.append(
                fake_record("cartpole", ds, v, nmse=0.1, rmse=rmse, div=div, declared=declared)
            )
    c = conclusions(recs)
    informative = c["energy_bounded"]["informative"]
    assert informative["holds"] is True and informative["bounded"]["cells"] == 6
    assert c["energy_bounded"]["weak"]["unbounded"]["cells_with_divergence"] == 3  # ffnn: weak
    assert c["energy_bounded"]["weak"]["unbounded"]["interval"] == [0.5, 0.5]
    nokin = c["nokin_vs_diffnea"]["informative"]
    assert nokin["pairs"] == 3 and nokin["median_ratio"] == pytest.approx(4.0)
    assert nokin["holds"] is False  # every resample's median is 4: outside [1/2, 2]
    assert c["nokin_vs_diffnea"]["weak"]["pairs"] == 0
    assert c["nokin_vs_diffnea"]["weak"]["holds"] is None
    priors = c["priors"]["diffnea"]
    assert priors["median_ratio"] == pytest.approx(2 / 3) and priors["holds"] is True
    for r, n in zip(recs[:2], (2, 5), strict=True):
        r["metrics"]["posterior"] = {
            "method": "nuts",
            "converged": False,
            "attempts": 2,
            "reason": f"{n} divergent transitions; R-hat 1.0{n} > 1.01",
        }
    nc = not_converged(recs)
    assert [c[3] for c in nc["cells"]] == ["diffnea/viscous/informative", "diffnea/viscous/weak"]
    assert nc["reasons"]["nuts"] == {"# divergent transitions": 2, "R-hat # > #": 2}
    # the ensembles' optimisers and dtypes, read from each record (those from before the
    # fields: Adam in float64)
    ffnn = [r for r in recs if r["cell"]["variant"] == "ffnn"]
    lbfgs = {"ensemble_optimizer": "lbfgs", "ensemble_steps": 300}
    single = dict(lbfgs, ensemble_dtype="float32")
    for r, extra in zip(ffnn, ({}, lbfgs, single), strict=True):
        r["metrics"]["posterior"] = {"method": "ensemble", "converged": True}
        r["settings"] = {"name": "tiny", "svi_steps": 1000, **extra}
    for r in recs:
        write_json_atomic(tmp_path / "cells" / f"{r['cell']['id']}.json", r)
    path = write_report(tmp_path)
    text = path.read_text()
    assert "does not hold" in text and "figure1.png" in text and "### cartpole, hardware" in text
    assert (
        "ensemble members by adam x 1000 in float64 (1 cells), lbfgs x 300 in float32 (1 cells), "
        "lbfgs x 300 in float64 (1 cells)" in text
    )
    assert "| nuts | 9 | 2 | # divergent transitions | 2 |" in text
    assert (
        "| cartpole | uniform | 0 | diffnea/viscous/weak | nuts | 2 | "
        "5 divergent transitions; R-hat 1.05 > 1.01 |" in text
    )
    assert (tmp_path / "figure1.png").stat().st_size > 1000 and (
        tmp_path / "grid_nmse.png"
    ).exists()


def test_bootstrap_interval_and_verdicts():
    """The percentile bootstrap brackets the median of a spread sample and collapses on a
    constant one; a verdict needs the whole interval on one side of the bound."""
    from analysis.report import _interval_verdict, bootstrap_interval

    rng = np.random.default_rng(1)
    x = rng.lognormal(0.0, 1.0, size=400)
    est, lo, hi = bootstrap_interval(x)
    assert lo < est < hi and lo < 1.0 < hi  # true median exp(0) = 1
    assert 0.1 < hi - lo < 0.6  # ~ 2 x 1.96 x 1.25 sd / sqrt(n) around the median
    assert bootstrap_interval(np.full(5, 3.0)) == (3.0, 3.0, 3.0)
    assert np.isnan(bootstrap_interval([])[0])
    assert _interval_verdict(0.6, 1.5, 0.5, 2.0) is True
    assert _interval_verdict(2.5, 4.0, 0.5, 2.0) is False
    assert _interval_verdict(1.5, 2.5, 0.5, 2.0) is None


def test_bootstrap_interval_over_dataset_seeds():
    """With several seeds the interval resamples the seeds too: three seeds whose cells sit
    tightly around 1, 2 and 3 give a narrow interval over cells alone but one that spans the
    seeds' disagreement when the seeds are resampled (two-stage); one seed is the plain case."""
    from analysis.report import bootstrap_interval

    rng = np.random.default_rng(2)
    x = np.concatenate([m + 0.01 * rng.standard_normal(50) for m in (1.0, 2.0, 3.0)])
    seeds = np.repeat([0, 1, 2], 50)
    _, lo, hi = bootstrap_interval(x, np.median)
    assert hi - lo < 0.1  # 150 cells, no seed structure: the median is pinned near 2
    _, lo2, hi2 = bootstrap_interval(x, np.median, groups=seeds)
    assert lo2 < 1.1 and hi2 > 2.9  # e.g. all three resampled seeds = seed 0, or seed 2
    assert bootstrap_interval(x, np.median, groups=np.zeros(150)) == bootstrap_interval(
        x, np.median
    )
    # NaNs are dropped with their labels
    y = np.append(x, np.nan)
    assert bootstrap_interval(y, np.median, groups=np.append(seeds, 5)) == (
        bootstrap_interval(x, np.median, groups=seeds)
    )


def test_paired_ratios_ignore_rounding_level_errors():
    """Two exact fits (errors 1e-19 and 1e-12, both rounding) compare as equal, not 1e-7."""
    from analysis.report import ERROR_FLOOR, conclusions

    assert ERROR_FLOOR == 1e-6
    recs = [
        fake_record("cartpole", "uniform", v, nmse=1e-30, rmse=r, div=0.0, declared="conserving")
        for v, r in (("diffnea/ideal/informative", 1e-19), ("diffnea/ideal/weak", 1e-12))
    ]
    assert conclusions(recs)["priors"]["diffnea"]["median_ratio"] == pytest.approx(1.0)


def test_release_compiled_programs_unmaps_them():
    """Compiled programs hold memory mappings until JAX's caches let go of them: above the
    threshold the helper clears the caches and the mappings go (Linux; elsewhere a no-op)."""
    import jax
    import jax.numpy as jnp

    from analysis.resources import max_map_count, memory_map_count, release_compiled_programs

    with pytest.raises(ValueError, match="fraction"):
        release_compiled_programs(1.5)
    if memory_map_count() is None or max_map_count() is None:
        assert release_compiled_programs(0.0) is False
        return
    assert release_compiled_programs(1.0) is False  # the whole limit: never reached here
    fns = [jax.jit(lambda x, i=i: jnp.sin(x) * i + jnp.cos(x) ** i) for i in range(40)]
    for f in fns:
        f(jnp.ones(3)).block_until_ready()
    held = memory_map_count()
    assert release_compiled_programs(0.0) is True
    assert memory_map_count() < held  # the 40 programs are unmapped although fns holds them


def _thread_affinities():
    import os

    return sorted(
        {frozenset(os.sched_getaffinity(int(t))) for t in os.listdir("/proc/self/task")}, key=sorted
    )


def test_worker_cpus_share_the_cores():
    from analysis.resources import worker_cpus

    assert [worker_cpus(i, 2, [0, 1]) for i in range(2)] == [[0], [1]]
    assert [worker_cpus(i, 2, [0, 1, 2, 3, 4]) for i in range(2)] == [[0, 2, 4], [1, 3]]
    assert [worker_cpus(i, 3, [5, 7]) for i in range(3)] == [[5], [7], [5]]
    with pytest.raises(ValueError):
        worker_cpus(0, 0, [0])


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_setaffinity"), reason="Linux only")
def test_local_workers_are_pinned_to_their_own_cores():
    """A sweep's local cluster (``sweep_client``, as the grid and the calibration open it): every
    thread of each worker process runs on that worker's share of the CPUs, the shares of two
    workers do not overlap (where the machine has two CPUs or more), and the client is closed
    on exit."""
    import os

    from analysis.resources import sweep_client

    cpus = sorted(os.sched_getaffinity(0))
    n = min(2, len(cpus))
    with sweep_client(n_workers=n) as client:
        per_worker = list(client.run(_thread_affinities).values())
    assert client.status == "closed"
    shares = [w[0] for w in per_worker]
    assert all(len(w) == 1 for w in per_worker)  # every thread of a worker: one CPU set
    assert sorted(c for s in shares for c in s) == cpus[: sum(len(s) for s in shares)]
    assert len(set().union(*shares)) == sum(len(s) for s in shares)  # disjoint
