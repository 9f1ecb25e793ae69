"""Bad input, table-driven: every malformed file, value or argument gets one ValueError-family error
naming the file or argument and the problem (library), or exit status 2 with one line on stderr
(command line), before any expensive work. No fits run here: data are tiny, results are
hand-built DataTrees saved with ``inference.save_result``.

Also: a CSV with a byte-order mark imports like one without, a 3,000-link URDF chain loads, and
two concurrent benchmark runs on one folder compute every cell once.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import bayes_nea as bn
import data
import data.io as dio
from analysis.benchmark import (
    CELL_SCHEMA,
    cell_id,
    get_settings,
    make_grid,
    run_benchmark,
)
from analysis.workflows import check_controller_result, rollout_result
from cli.check_controller import finite_or_null
from cli.main import main
from inference import load_result, save_result
from inference.result import SCHEMA_VERSION, result_from_tree
from models import build_model

# --- fixtures: tiny good files to damage ---------------------------------------------------------


def tiny_dataset(system: str = "cartpole", rows: int = 60) -> data.Dataset:
    robot = bn.get_system(system)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(rows, robot.n))
    return data.Dataset.from_arrays(
        system=system,
        joint_names=robot.joint_names,
        t=np.arange(rows) / 100.0,
        q=x,
        qd=x,
        qdd=x,
        tau=x,
        episode_ids=np.repeat([0, 1, 2], rows // 3),
        kind="trajectories",
        synthetic=True,
    )


def fake_result(system: str = "cartpole", variant: str = "diffnea/viscous/informative"):
    """A FitResult holding a posterior and the fitted data, built by hand (no fit)."""
    robot = bn.get_system(system)
    rng = np.random.default_rng(1)
    post = xr.Dataset(
        {"theta": (("chain", "draw", "joint", "theta_param"), rng.normal(size=(1, 4, 2, 10)))},
        coords={"joint": list(robot.joint_names)},
    )
    const = xr.Dataset({"qd": (("obs", "joint"), rng.normal(size=(400, 2)))})
    tree = xr.DataTree.from_dict({"/posterior": post, "/constant_data": const})
    tree.attrs = {
        "schema_version": SCHEMA_VERSION,
        "model_spec": build_model(variant, robot).spec.to_json(),
        "variant": variant,
        "system": system,
        "method": "svi",
        "joint_names": json.dumps(list(robot.joint_names)),
    }
    return result_from_tree(tree)


def write_npz(path: Path, content: dict) -> None:
    with open(path, "wb") as f:
        np.savez(f, **content)


def rewrite_dataset(src: Path, dst: Path, *, checksum: bool = True, meta=None, **arrays) -> Path:
    """A copy of dataset ``src`` with arrays / metadata changed; ``checksum`` recomputes a valid
    checksum (a file written consistently, by a buggy tool), else the stored one is kept."""
    content = dict(np.load(src))
    m = json.loads(str(content.pop("meta")))
    m.update(meta or {})
    content.update(arrays)
    checksum_fn = getattr(dio, "_dataset_checksum", None)
    if checksum and checksum_fn is not None:
        m["sha256"] = checksum_fn(content, m)
    content["meta"] = np.array(json.dumps(m))
    write_npz(dst, content)
    return dst


def flip_bytes(src: Path, dst: Path, *, count: int, start: int = 0, seed: int = 0) -> Path:
    raw = bytearray(src.read_bytes())
    rng = random.Random(seed)
    for k in rng.sample(range(start, len(raw)), count):
        raw[k] ^= 0xFF
    dst.write_bytes(bytes(raw))
    return dst


CHAIN_LINK = (
    '<link name="l{i}"><inertial><mass value="{mass}"/>'
    '<inertia ixx="{I}" ixy="0" ixz="0" iyy="{I}" iyz="0" izz="{I}"/></inertial></link>'
)
CHAIN_JOINT = (
    '<joint name="j{i}" type="revolute"><parent link="l{p}"/><child link="l{i}"/>'
    '<origin xyz="{xyz}"/><axis xyz="0 0 1"/></joint>'
)


def chain_urdf(n: int, *, mass="1", inertia="0.1", xyz="0 0 0.1") -> str:
    parts = ['<robot name="chain"><link name="l0"/>']
    for i in range(1, n + 1):
        parts.append(CHAIN_LINK.format(i=i, mass=mass, I=inertia))
        parts.append(CHAIN_JOINT.format(i=i, p=i - 1, xyz=xyz))
    return "".join(parts) + "</robot>"


CSV_HEADER = "t,q_cart,q_pole,qd_cart,qd_pole,qdd_cart,qdd_pole,tau_cart,tau_pole"


def csv_text(
    rows: int = 30, *, header: str = CSV_HEADER, dt: float = 0.01, tau: float = 0.5
) -> str:
    lines = [header]
    for k in range(rows):
        lines.append(f"{k * dt!r},0.1,0.2,0.0,0.0,0.0,0.0,{tau!r},0.0")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    f = {"dir": d}
    f["ds"] = d / "good.npz"
    data.save_dataset(tiny_dataset(), f["ds"])
    f["furuta"] = d / "furuta.npz"
    data.save_dataset(tiny_dataset("furuta"), f["furuta"])
    f["fit"] = d / "cartpole-fit.nc"
    save_result(fake_result(), f["fit"])
    f["csv"] = d / "log.csv"
    f["csv"].write_text(csv_text())
    (d / "folder").mkdir()
    f["folder"] = d / "folder"
    return f


# --- the table -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """``run(files, tmp)`` must raise a ValueError whose message holds every string of ``match``."""

    name: str
    run: Callable
    match: tuple[str, ...]


def _ds(f, tmp, **kw):
    return data.load_dataset(rewrite_dataset(f["ds"], tmp / "changed.npz", **kw))


def _write(tmp: Path, name: str, content: bytes | str) -> Path:
    path = tmp / name
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def _half(src: Path, dst: Path) -> Path:
    raw = src.read_bytes()
    dst.write_bytes(raw[: len(raw) // 2])
    return dst


def _npy_as_npz(tmp: Path) -> Path:
    np.save(tmp / "array.npy", np.zeros((5, 2)))
    os.replace(tmp / "array.npy", tmp / "renamed.npz")
    return tmp / "renamed.npz"


def _log_npz(tmp: Path, name="log.npz", **changes) -> Path:
    t = np.arange(30) / 100.0
    x = np.zeros((30, 2))
    content = {"t": t, "q": x, "qd": x, "qdd": x, "tau": x}
    content.update(changes)
    write_npz(tmp / name, content)
    return tmp / name


def _data_offset(path: Path, values: np.ndarray) -> int:
    """Where the bytes of ``values`` start in a file (raises if absent)."""
    i = path.read_bytes().find(np.ascontiguousarray(values).tobytes()[:64])
    assert i > 0
    return i


def _flip_result_array(f, tmp):
    qd = load_result(f["fit"]).idata["constant_data"]["qd"].values
    start = _data_offset(f["fit"], qd)
    raw = bytearray(f["fit"].read_bytes())
    for k in range(start + 3, start + qd.nbytes, 64):  # one byte in every 8th value
        raw[k] ^= 0xFF
    path = tmp / "flipped-array.nc"
    path.write_bytes(bytes(raw))
    return load_result(path)


def _result_without_checksum(f, tmp):
    path = tmp / "old.nc"
    fake_result().idata.to_netcdf(path, engine="h5netcdf")
    return load_result(path)


def _result_lacking_system(f, tmp):
    tree = fake_result().idata.copy()
    del tree.attrs["system"]
    path = tmp / "no-system.nc"
    tree.to_netcdf(path, engine="h5netcdf")
    return load_result(path)


URDF_GOOD = chain_urdf(1)

LIBRARY_CASES = [
    # load_dataset: damaged or wrong files
    Case(
        "dataset missing", lambda f, t: data.load_dataset(t / "none.npz"), ("none.npz", "not exist")
    ),
    Case(
        "dataset is a folder", lambda f, t: data.load_dataset(f["folder"]), ("folder", "directory")
    ),
    Case(
        "dataset empty file",
        lambda f, t: data.load_dataset(_write(t, "e.npz", b"")),
        ("e.npz", "empty"),
    ),
    Case(
        "dataset truncated",
        lambda f, t: data.load_dataset(_half(f["ds"], t / "half.npz")),
        ("half.npz", "damaged"),
    ),
    Case(
        "dataset .npy renamed",
        lambda f, t: data.load_dataset(_npy_as_npz(t)),
        ("renamed.npz", ".npy"),
    ),
    Case(
        "dataset given a CSV", lambda f, t: data.load_dataset(f["csv"]), ("log.csv", "import_log")
    ),
    Case(
        "dataset given a result",
        lambda f, t: data.load_dataset(f["fit"]),
        ("cartpole-fit.nc", "netCDF"),
    ),
    Case(
        "dataset random bytes",
        lambda f, t: data.load_dataset(_write(t, "r.npz", bytes(range(256)) * 4)),
        ("r.npz", "not a"),
    ),
    Case(
        "dataset without meta",
        lambda f, t: data.load_dataset(_log_npz(t, "nometa.npz")),
        ("nometa.npz", "not a bayes-nea dataset"),
    ),
    Case(
        "dataset meta not JSON",
        lambda f, t: data.load_dataset(_write_npz_meta(f, t, np.array("{not json"))),
        ("badmeta.npz", "JSON"),
    ),
    Case(
        "dataset meta lacks system",
        lambda f, t: _ds(f, t, meta={"system": None}),
        ("changed.npz", "system"),
    ),
    Case(
        "dataset meta joint_names a string",
        lambda f, t: _ds(f, t, meta={"joint_names": "cart"}),
        ("changed.npz", "joint_names"),
    ),
    Case(
        "dataset future schema",
        lambda f, t: _ds(f, t, meta={"schema": 99}),
        ("changed.npz", "schema 99"),
    ),
    Case(
        "dataset offsets shorter than data",
        lambda f, t: _ds(f, t, offsets=np.array([0, 20, 40])),
        ("changed.npz", "offsets"),
    ),
    Case(
        "dataset offsets decreasing",
        lambda f, t: _ds(f, t, offsets=np.array([0, 40, 20, 60])),
        ("changed.npz", "offsets"),
    ),
    Case(
        "dataset offsets as floats",
        lambda f, t: _ds(f, t, offsets=np.array([0.0, 20.0, 40.0, 60.0])),
        ("changed.npz", "offsets"),
    ),
    Case(
        "dataset array changed, checksum kept",
        lambda f, t: _ds(f, t, checksum=False, qd=np.zeros((60, 2))),
        ("changed.npz", "checksum"),
    ),
    Case(
        "dataset 3000 bytes flipped",
        lambda f, t: data.load_dataset(flip_bytes(f["ds"], t / "flipped.npz", count=3000)),
        ("flipped.npz",),
    ),
    Case(
        "dataset one byte flipped in q",
        lambda f, t: data.load_dataset(
            flip_bytes(
                f["ds"],
                t / "flip1.npz",
                count=1,
                start=_data_offset(f["ds"], data.load_dataset(f["ds"]).arrays()[0]),
            )
        ),
        ("flip1.npz",),
    ),
    Case(
        "dataset without checksum (old file)",
        lambda f, t: data.load_dataset(_strip_checksum(f, t)),
        ("old.npz", "checksum"),
    ),
    Case(
        "dataset complex q",
        lambda f, t: _ds(f, t, q=np.zeros((60, 2), complex)),
        ("changed.npz", "complex"),
    ),
    Case(
        "dataset q with 3 columns",
        lambda f, t: _ds(f, t, q=np.zeros((60, 3))),
        ("changed.npz", "q has shape (60, 3)"),
    ),
    Case(
        "dataset torques 1e305",
        lambda f, t: _ds(f, t, tau=np.full((60, 2), 1e305)),
        ("changed.npz", "tau", "implausible"),
    ),
    Case(
        "dataset rate 2.5e302 Hz",
        lambda f, t: _ds(f, t, meta={"rate_hz": 2.5e302}),
        ("changed.npz", "rate_hz"),
    ),
    Case(
        "dataset pickled object array",
        lambda f, t: data.load_dataset(_pickled_npz(t)),
        ("pickled.npz", "pickled"),
    ),
    # import_log: CSV
    Case(
        "csv duplicate column",
        lambda f, t: data.import_log(_write(t, "dup.csv", _dup_csv()), "cartpole"),
        ("dup.csv", "duplicate", "q_cart"),
    ),
    Case(
        "csv latin-1 bytes",
        lambda f, t: data.import_log(
            _write(t, "latin.csv", csv_text().replace("0.1", "0.1\xe9", 1).encode("latin-1")),
            "cartpole",
        ),
        ("latin.csv", "UTF-8"),
    ),
    Case(
        "csv empty",
        lambda f, t: data.import_log(_write(t, "empty.csv", ""), "cartpole"),
        ("empty.csv", "empty"),
    ),
    Case(
        "csv header only",
        lambda f, t: data.import_log(_write(t, "head.csv", CSV_HEADER + "\n"), "cartpole"),
        ("head.csv", "2 samples"),
    ),
    Case(
        "csv non-numeric",
        lambda f, t: data.import_log(
            _write(t, "word.csv", csv_text().replace("0.1,", "abc,", 1)), "cartpole"
        ),
        ("word.csv", "q_cart", "non-numeric"),
    ),
    Case(
        "csv torques 1e305",
        lambda f, t: data.import_log(_write(t, "huge.csv", csv_text(tau=1e305)), "cartpole"),
        ("huge.csv", "tau", "implausible"),
    ),
    Case(
        "csv 2.5e302 Hz",
        lambda f, t: data.import_log(_write(t, "fast.csv", csv_text(dt=4e-303)), "cartpole"),
        ("fast.csv", "Hz"),
    ),
    Case(
        "csv time 1e12 s",
        lambda f, t: data.import_log(
            _write(t, "late.csv", csv_text().replace("\n0.0,", "\n1e12,", 1)), "cartpole"
        ),
        ("late.csv", "t"),
    ),
    Case(
        "csv binary garbage",
        lambda f, t: data.import_log(_write(t, "bin.csv", bytes(range(256))), "cartpole"),
        ("bin.csv",),
    ),
    Case(
        "csv is a folder",
        lambda f, t: data.import_log(_folder(t, "d.csv"), "cartpole"),
        ("d.csv", "directory"),
    ),
    Case(
        "csv ragged row",
        lambda f, t: data.import_log(_write(t, "rag.csv", csv_text() + "0.3,1\n"), "cartpole"),
        ("rag.csv", "fields"),
    ),
    # import_log: NPZ
    Case(
        "npz log truncated",
        lambda f, t: data.import_log(_half(_log_npz(t), t / "cut.npz"), "cartpole"),
        ("cut.npz", "damaged"),
    ),
    Case(
        "npz log empty",
        lambda f, t: data.import_log(_write(t, "z.npz", b""), "cartpole"),
        ("z.npz", "empty"),
    ),
    Case(
        "npz log .npy renamed",
        lambda f, t: data.import_log(_npy_as_npz(t), "cartpole"),
        ("renamed.npz", ".npy"),
    ),
    Case(
        "npz log complex",
        lambda f, t: data.import_log(
            _log_npz(t, "c.npz", tau=np.zeros((30, 2), complex)), "cartpole"
        ),
        ("c.npz", "tau", "complex"),
    ),
    Case(
        "npz log strings",
        lambda f, t: data.import_log(_log_npz(t, "s.npz", q=np.full((30, 2), "x")), "cartpole"),
        ("s.npz", "q", "dtype"),
    ),
    Case(
        "npz log pickled",
        lambda f, t: data.import_log(_pickled_npz(t), "cartpole"),
        ("pickled.npz", "pickled"),
    ),
    Case(
        "npz log t 2-D",
        lambda f, t: data.import_log(_log_npz(t, "t2.npz", t=np.zeros((30, 2))), "cartpole"),
        ("t2.npz", "t has shape"),
    ),
    Case(
        "npz log is a dataset file",
        lambda f, t: data.import_log(f["ds"], "cartpole"),
        ("good.npz", "load_dataset"),
    ),
    Case(
        "npz log torques 1e305",
        lambda f, t: data.import_log(
            _log_npz(t, "big.npz", tau=np.full((30, 2), 1e305)), "cartpole"
        ),
        ("big.npz", "implausible"),
    ),
    # Dataset / generate_dataset entry points
    Case(
        "Dataset complex q",
        lambda f, t: tiny_dataset().replace(
            episodes=(tiny_dataset().episodes[0]._replace(q=np.zeros((20, 2), complex)),)
        ),
        ("q", "complex"),
    ),
    Case(
        "Dataset rate 2.5e302 Hz",
        lambda f, t: tiny_dataset().replace(rate_hz=2.5e302),
        ("rate_hz",),
    ),
    Case("Dataset rate None", lambda f, t: tiny_dataset().replace(rate_hz=None), ("rate_hz",)),
    Case(
        "generate 1e9 s",
        lambda f, t: data.generate_dataset("cartpole", "uniform", seed=0, duration=1e9),
        ("duration", "samples"),
    ),
    Case(
        "generate rate 0 Hz",
        lambda f, t: data.generate_dataset(
            "cartpole", "uniform", seed=0, duration=1.0, rate_hz=0.0
        ),
        ("rate_hz",),
    ),
    Case(
        "generate duration nan",
        lambda f, t: data.generate_dataset("cartpole", "uniform", seed=0, duration=float("nan")),
        ("duration",),
    ),
    # load_urdf
    Case("urdf missing", lambda f, t: bn.load_urdf(t / "none.urdf"), ("none.urdf", "not exist")),
    Case("urdf is a folder", lambda f, t: bn.load_urdf(f["folder"]), ("folder", "directory")),
    Case(
        "urdf empty file",
        lambda f, t: bn.load_urdf(_write(t, "e.urdf", b"")),
        ("e.urdf", "malformed"),
    ),
    Case(
        "urdf latin-1 bytes",
        lambda f, t: bn.load_urdf(
            _write(t, "l.urdf", URDF_GOOD.encode().replace(b"chain", b"ch\xe9in"))
        ),
        ("l.urdf", "malformed"),
    ),
    Case(
        "urdf truncated",
        lambda f, t: bn.load_urdf(_write(t, "cut.urdf", URDF_GOOD[: len(URDF_GOOD) // 2])),
        ("cut.urdf", "malformed"),
    ),
    Case(
        "urdf external entity",
        lambda f, t: bn.load_urdf(
            '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
            '<robot name="&x;"><link name="a"/></robot>'
        ),
        ("URDF", "entities"),
    ),
    Case(
        "urdf entity expansion (billion laughs)",
        lambda f, t: bn.load_urdf(
            '<?xml version="1.0"?><!DOCTYPE r [<!ENTITY a "aaaaaaaaaa">'
            + "".join(
                f'<!ENTITY {c} "{("&" + p + ";") * 10}">'
                for p, c in zip("abcdefgh", "bcdefghi", strict=True)
            )
            + ']><robot name="&i;"><link name="a"/></robot>'
        ),
        ("URDF", "entities"),
    ),
    Case("urdf html", lambda f, t: bn.load_urdf("<html><body/></html>"), ("URDF", "<html>")),
    Case(
        "urdf mass 1e200 kg", lambda f, t: bn.load_urdf(chain_urdf(2, mass="1e200")), ("l1", "mass")
    ),
    Case(
        "urdf inertia 1e200",
        lambda f, t: bn.load_urdf(chain_urdf(2, inertia="1e200")),
        ("l1", "inertia"),
    ),
    Case(
        "urdf offset 1e200 m",
        lambda f, t: bn.load_urdf(chain_urdf(2, xyz="0 0 1e200")),
        ("j1", "origin"),
    ),
    Case(
        "urdf too large",
        lambda f, t: bn.load_urdf(_sparse(t, "big.urdf", bn.urdf.MAX_URDF_BYTES + 1)),
        ("big.urdf", "bytes"),
    ),
    Case("urdf gravity (1, 2)", lambda f, t: bn.load_urdf(URDF_GOOD, gravity=(1, 2)), ("gravity",)),
    Case(
        "urdf gravity nan",
        lambda f, t: bn.load_urdf(URDF_GOOD, gravity=(0, 0, float("nan"))),
        ("gravity",),
    ),
    Case("urdf gravity text", lambda f, t: bn.load_urdf(URDF_GOOD, gravity="down"), ("gravity",)),
    # load_result / save_result / the writer
    Case("result missing", lambda f, t: load_result(t / "none.nc"), ("none.nc",)),
    Case("result is a folder", lambda f, t: load_result(f["folder"]), ("folder", "directory")),
    Case("result empty file", lambda f, t: load_result(_write(t, "e.nc", b"")), ("e.nc", "netCDF")),
    Case("result given a dataset", lambda f, t: load_result(f["ds"]), ("good.npz", "dataset")),
    Case("result given a CSV", lambda f, t: load_result(f["csv"]), ("log.csv", "netCDF")),
    Case(
        "result truncated",
        lambda f, t: load_result(_half(f["fit"], t / "half.nc")),
        ("half.nc", "netCDF"),
    ),
    Case("result array bytes flipped", _flip_result_array, ("flipped-array.nc", "checksum")),
    Case(
        "result 3000 bytes flipped",
        lambda f, t: load_result(flip_bytes(f["fit"], t / "flipped.nc", count=3000, start=600)),
        ("flipped.nc",),
    ),
    Case(
        "result without checksum (old file)",
        _result_without_checksum,
        ("old.nc", "checksum", "verify=False"),
    ),
    Case("result lacking 'system'", _result_lacking_system, ("no-system.nc", "system")),
    Case(
        "result of another kind of netCDF",
        lambda f, t: load_result(_plain_netcdf(t)),
        ("plain.nc", "not a bayes-nea fit result"),
    ),
    Case(
        "rollout_result max_draws=0",
        lambda f, t: rollout_result(f["fit"], out=t / "r.png", max_draws=0),
        ("max_draws", "0"),
    ),
    Case(
        "check_controller_result max_draws=0",
        lambda f, t: check_controller_result(f["fit"], max_draws=0),
        ("max_draws", "0"),
    ),
    Case(
        "check_controller_result seconds=inf",
        lambda f, t: check_controller_result(f["fit"], seconds=float("inf")),
        ("seconds", "inf"),
    ),
    Case(
        "save_result to a folder",
        lambda f, t: save_result(fake_result(), f["folder"]),
        ("folder", "directory"),
    ),
    Case(
        "save_result to a missing folder",
        lambda f, t: save_result(fake_result(), t / "nope" / "x.nc"),
        ("x.nc", "does not exist"),
    ),
    Case(
        "save_dataset to a folder",
        lambda f, t: data.save_dataset(tiny_dataset(), f["folder"]),
        ("folder", "directory"),
    ),
    Case(
        "save_dataset under a file",
        lambda f, t: data.save_dataset(tiny_dataset(), f["csv"] / "x.npz"),
        ("x.npz",),
    ),
    Case(
        "save_dataset on a read-only file system",
        lambda f, t: data.save_dataset(tiny_dataset(), "/proc/bayes-nea-test.npz"),
        ("bayes-nea-test.npz",),
    ),
]


def _write_npz_meta(f, tmp, meta) -> Path:
    content = dict(np.load(f["ds"]))
    content["meta"] = meta
    write_npz(tmp / "badmeta.npz", content)
    return tmp / "badmeta.npz"


def _strip_checksum(f, tmp) -> Path:
    content = dict(np.load(f["ds"]))
    m = json.loads(str(content["meta"]))
    m.pop("sha256", None)
    content["meta"] = np.array(json.dumps(m))
    write_npz(tmp / "old.npz", content)
    return tmp / "old.npz"


def _pickled_npz(tmp) -> Path:
    t = np.arange(30) / 100.0
    obj = np.empty((30, 2), dtype=object)
    obj[:] = 0.0
    x = np.zeros((30, 2))
    write_npz(
        tmp / "pickled.npz", {"t": t, "q": obj, "qd": x, "qdd": x, "tau": x, "meta": np.array("{}")}
    )
    return tmp / "pickled.npz"


def _dup_csv() -> str:
    header = CSV_HEADER + ",q_cart"
    return (
        "\n".join([header] + [f"{k / 100!r},0.1,0.2,0,0,0,0,0.5,0,9.9" for k in range(30)]) + "\n"
    )


def _folder(tmp, name) -> Path:
    (tmp / name).mkdir()
    return tmp / name


def _sparse(tmp, name, size) -> Path:
    with open(tmp / name, "wb") as fh:
        fh.truncate(size)
    return tmp / name


def _plain_netcdf(tmp) -> Path:
    xr.DataTree(xr.Dataset({"x": ("a", np.arange(3.0))})).to_netcdf(
        tmp / "plain.nc", engine="h5netcdf"
    )
    return tmp / "plain.nc"


@pytest.mark.parametrize("case", LIBRARY_CASES, ids=lambda c: c.name)
def test_library_refuses_bad_input(case, files, tmp_path):
    with pytest.raises(ValueError) as info:
        case.run(files, tmp_path)
    message = str(info.value)
    for part in case.match:
        assert part in message, f"{part!r} not in {message!r}"


# --- the command line -----------------------------------------------------------------------------


def _cli_args(files, tmp) -> dict[str, list[str]]:
    f = files
    truncated = _half(f["ds"], tmp / "half.npz")
    corrupted = flip_bytes(f["fit"], tmp / "bad-fit.nc", count=3000, start=600)
    no_meta = _log_npz(tmp, "nometa.npz")
    fit = ["fit", "--variant", "diffnea/viscous/informative", "--quiet"]
    out_ok = str(tmp / "ok.npz")
    return {
        "simulate --duration 1e9": ["simulate", "--duration", "1e9", "--out", out_ok],
        "simulate --duration 1e5 (too many samples)": [
            "simulate",
            "--duration",
            "1e5",
            "--out",
            out_ok,
        ],
        "simulate --duration nan": ["simulate", "--duration", "nan", "--out", out_ok],
        "simulate --rate 0": ["simulate", "--rate", "0", "--out", out_ok],
        "simulate --seed -1": ["simulate", "--seed", "-1", "--out", out_ok],
        "simulate --seed 2**70": ["simulate", "--seed", str(2**70), "--out", out_ok],
        "simulate --dataset bogus": ["simulate", "--dataset", "bogus", "--out", out_ok],
        "simulate --system bogus": ["simulate", "--system", "bogus", "--out", out_ok],
        "simulate --out a folder": ["simulate", "--out", str(f["folder"])],
        "simulate --out a missing folder": ["simulate", "--out", str(tmp / "no" / "x.npz")],
        "simulate --out read-only": ["simulate", "--out", "/proc/bayes-nea-test.npz"],
        "fit --data truncated": [*fit, "--data", str(truncated), "--out", str(tmp / "o.nc")],
        "fit --data empty": [
            *fit,
            "--data",
            str(_write(tmp, "e.npz", b"")),
            "--out",
            str(tmp / "o.nc"),
        ],
        "fit --data a CSV": [*fit, "--data", str(f["csv"]), "--out", str(tmp / "o.nc")],
        "fit --data without meta": [*fit, "--data", str(no_meta), "--out", str(tmp / "o.nc")],
        "fit --data a folder": [*fit, "--data", str(f["folder"]), "--out", str(tmp / "o.nc")],
        "fit --out a folder": [*fit, "--data", str(f["ds"]), "--out", str(f["folder"])],
        "fit --out a missing folder": [
            *fit,
            "--data",
            str(f["ds"]),
            "--out",
            str(tmp / "no" / "o.nc"),
        ],
        "fit --init of another system": [
            *fit,
            "--data",
            str(f["furuta"]),
            "--method",
            "nuts",
            "--init",
            str(f["fit"]),
            "--out",
            str(tmp / "o.nc"),
        ],
        "fit --init with svi": [
            *fit,
            "--data",
            str(f["ds"]),
            "--init",
            str(f["fit"]),
            "--out",
            str(tmp / "o.nc"),
        ],
        "fit --init corrupted": [
            *fit,
            "--data",
            str(f["ds"]),
            "--method",
            "nuts",
            "--init",
            str(corrupted),
            "--out",
            str(tmp / "o.nc"),
        ],
        "fit --steps 0": [*fit, "--data", str(f["ds"]), "--steps", "0", "--out", str(tmp / "o.nc")],
        "fit --chains 0": [
            *fit,
            "--data",
            str(f["ds"]),
            "--chains",
            "0",
            "--out",
            str(tmp / "o.nc"),
        ],
        "fit --target-accept 1.5": [
            *fit,
            "--data",
            str(f["ds"]),
            "--target-accept",
            "1.5",
            "--out",
            str(tmp / "o.nc"),
        ],
        "fit --train-dtype with nuts": [
            *fit,
            "--data",
            str(f["ds"]),
            "--method",
            "nuts",
            "--train-dtype",
            "float32",
            "--out",
            str(tmp / "o.nc"),
        ],
        "fit --tails profiled with a fixed df": [
            *fit,
            "--data",
            str(f["ds"]),
            "--tails",
            "profiled",
            "--out",
            str(tmp / "o.nc"),
        ],
        "fit --learning-rate inf": [
            *fit,
            "--data",
            str(f["ds"]),
            "--learning-rate",
            "inf",
            "--out",
            str(tmp / "o.nc"),
        ],
        "fit --variant bogus": [
            "fit",
            "--variant",
            "bogus/x/y",
            "--data",
            str(f["ds"]),
            "--out",
            str(tmp / "o.nc"),
        ],
        "check-controller --draws 0": ["check-controller", str(f["fit"]), "--draws", "0"],
        "check-controller --seconds -1": ["check-controller", str(f["fit"]), "--seconds", "-1"],
        "check-controller missing fit": ["check-controller", str(tmp / "none.nc")],
        "check-controller corrupted fit": ["check-controller", str(corrupted)],
        "check-controller --data truncated": [
            "check-controller",
            str(f["fit"]),
            "--data",
            str(truncated),
        ],
        "check-controller --out a folder": [
            "check-controller",
            str(f["fit"]),
            "--out",
            str(f["folder"]),
        ],
        "rollout --seconds -1": ["rollout", str(f["fit"]), "--seconds", "-1"],
        "rollout --draws 0": ["rollout", str(f["fit"]), "--draws", "0"],
        "rollout --out a folder": ["rollout", str(f["fit"]), "--out", str(f["folder"])],
        "rollout of a dataset file": ["rollout", str(f["ds"]), "--out", str(tmp / "r.png")],
        "rollout --q0 nan": ["rollout", str(f["fit"]), "--q0", "nan", "0"],
        "benchmark --out a file": ["benchmark", "--out", str(f["csv"])],
        "benchmark --workers 0": ["benchmark", "--out", str(tmp / "b"), "--workers", "0"],
        "benchmark --variants bogus": [
            "benchmark",
            "--out",
            str(tmp / "b"),
            "--variants",
            "bogus/x/y",
        ],
        "benchmark --setting huge": ["benchmark", "--out", str(tmp / "b"), "--setting", "huge"],
        "benchmark --systems pendubot": [
            "benchmark",
            "--out",
            str(tmp / "b"),
            "--systems",
            "pendubot",
        ],
        "benchmark --svi-steps -3": ["benchmark", "--out", str(tmp / "b"), "--svi-steps", "-3"],
        "benchmark --ensemble-optimizer newton": [
            "benchmark",
            "--out",
            str(tmp / "b"),
            "--ensemble-optimizer",
            "newton",
        ],
        "benchmark --ensemble-dtype float16": [
            "benchmark",
            "--out",
            str(tmp / "b"),
            "--ensemble-dtype",
            "float16",
        ],
        "report of a missing folder": ["report", "--out", str(tmp / "no-bench")],
        "demo --duration 1e9": ["demo", "--duration", "1e9"],
        "demo --rate -1": ["demo", "--rate", "-1"],
        "run --seed -5": ["run", "--seed", "-5"],
        "run --variant bogus": ["run", "--variant", "bogus/x/y", "--out", str(tmp / "run")],
        "run --out a file": ["run", "--out", str(f["csv"])],
    }


# what each command-line case's one line must name (an argument or file, and the problem)
CLI_MATCH = {
    "simulate --duration 1e9": ("--duration",),
    "simulate --duration 1e5 (too many samples)": ("samples",),
    "simulate --duration nan": ("--duration",),
    "simulate --rate 0": ("--rate",),
    "simulate --seed -1": ("--seed",),
    "simulate --seed 2**70": ("--seed",),
    "simulate --dataset bogus": ("--dataset", "bogus"),
    "simulate --system bogus": ("bogus",),
    "simulate --out a folder": ("--out", "directory"),
    "simulate --out a missing folder": ("--out", "does not exist"),
    "simulate --out read-only": ("--out", "bayes-nea-test.npz"),
    "fit --data truncated": ("half.npz", "damaged"),
    "fit --data empty": ("e.npz", "empty"),
    "fit --data a CSV": ("log.csv", "import_log"),
    "fit --data without meta": ("nometa.npz", "not a bayes-nea dataset"),
    "fit --data a folder": ("folder", "directory"),
    "fit --out a folder": ("--out", "directory"),
    "fit --out a missing folder": ("--out", "does not exist"),
    "fit --init of another system": ("--init", "cartpole", "furuta"),
    "fit --init with svi": ("--init", "svi"),
    "fit --init corrupted": ("bad-fit.nc",),
    "fit --steps 0": ("--steps",),
    "fit --chains 0": ("--chains",),
    "fit --target-accept 1.5": ("--target-accept",),
    "fit --learning-rate inf": ("--learning-rate",),
    "fit --train-dtype with nuts": ("--train-dtype", "--method svi"),
    "fit --tails profiled with a fixed df": ("--tails profiled", "--student-df learned"),
    "fit --variant bogus": ("bogus/x/y",),
    "check-controller --draws 0": ("--draws",),
    "check-controller --seconds -1": ("--seconds",),
    "check-controller missing fit": ("none.nc",),
    "check-controller corrupted fit": ("bad-fit.nc",),
    "check-controller --data truncated": ("half.npz", "damaged"),
    "check-controller --out a folder": ("--out", "directory"),
    "rollout --seconds -1": ("--seconds",),
    "rollout --draws 0": ("--draws",),
    "rollout --out a folder": ("--out", "directory"),
    "rollout of a dataset file": ("good.npz", "dataset"),
    "rollout --q0 nan": ("--q0",),
    "benchmark --out a file": ("--out", "log.csv"),
    "benchmark --workers 0": ("--workers",),
    "benchmark --variants bogus": ("--variants", "bogus/x/y"),
    "benchmark --setting huge": ("huge",),
    "benchmark --systems pendubot": ("pendubot",),
    "benchmark --svi-steps -3": ("--svi-steps",),
    "benchmark --ensemble-optimizer newton": ("ensemble_optimizer", "newton", "lbfgs"),
    "benchmark --ensemble-dtype float16": ("--ensemble-dtype", "float16"),
    "report of a missing folder": ("no-bench",),
    "demo --duration 1e9": ("--duration",),
    "demo --rate -1": ("--rate",),
    "run --seed -5": ("--seed",),
    "run --variant bogus": ("--variant", "bogus/x/y"),
    "run --out a file": ("--out", "log.csv"),
}


@pytest.mark.parametrize("name", sorted(CLI_MATCH))
def test_command_line_refuses_bad_input(name, files, tmp_path, capsys):
    argv = _cli_args(files, tmp_path)[name]
    code = main(argv)  # argument errors too are returned, not raised as SystemExit
    err = capsys.readouterr().err
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "error" in lines[0] and "Traceback" not in err, err
    for part in CLI_MATCH[name]:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    assert not (tmp_path / "o.nc").exists() and not (tmp_path / "ok.npz").exists()


def test_command_line_process_exits_2_without_traceback(tmp_path):
    """As a user runs it: a separate process, the absurd duration that once aborted inside XLA."""
    argv = ["simulate", "--duration", "1e9", "--out", str(tmp_path / "x.npz")]
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run(
        [sys.executable, "-m", "cli.main", *argv], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--duration" in proc.stderr, proc.stderr
    assert not list(tmp_path.iterdir())


def test_cli_table_matches_its_arguments(files, tmp_path):
    assert set(_cli_args(files, tmp_path)) == set(CLI_MATCH)


# --- good input at the edges -------------------------------------------------------------------


def test_csv_with_byte_order_mark_imports_like_without(tmp_path):
    plain = _write(tmp_path, "plain.csv", csv_text())
    bom = _write(tmp_path, "bom.csv", "\ufeff" + csv_text())
    a, b = data.import_log(plain, "cartpole"), data.import_log(bom, "cartpole")
    assert a.n_samples == b.n_samples == 30
    for x, y in zip(a.arrays(), b.arrays(), strict=True):
        np.testing.assert_array_equal(x, y)


def test_deep_urdf_chain_loads_iteratively():
    """3,000 links in a chain: beyond Python's default recursion limit (1,000)."""
    robot = bn.load_urdf(chain_urdf(3000))
    assert robot.n == 3000
    assert robot.parents == tuple(range(-1, 2999))
    assert robot.joint_names[:3] == ("j1", "j2", "j3") and robot.joint_names[-1] == "j3000"
    np.testing.assert_allclose(robot.nominal.xyz[:, 2], 0.1)
    np.testing.assert_allclose(robot.nominal.theta[:, 0], 1.0)


def test_files_are_0644_and_no_temporaries_survive(files, tmp_path):
    for path in (files["ds"], files["fit"]):
        assert os.stat(path).st_mode & 0o777 == 0o644
    # a temporary of a dead writer (pid 2**22 + 1 is beyond Linux's default pid_max) is removed by
    # the next write into the folder; one of a live process (this one) is kept
    host = dio._HOST
    dead = tmp_path / f".x.npz.{host}-{2**22 + 1}-abcdefgh.tmp"
    live = tmp_path / f".y.npz.{host}-{os.getpid()}-abcdefgh.tmp"
    dead.write_bytes(b"partial")
    live.write_bytes(b"partial")
    data.save_dataset(tiny_dataset(), tmp_path / "z.npz")
    assert not dead.exists() and live.exists()
    assert sorted(os.listdir(tmp_path)) == sorted([live.name, "z.npz"])


def test_result_checksum_survives_the_round_trip_of_attribute_types(tmp_path):
    result = fake_result()
    result.idata.attrs.update(n=3, x=0.1, numbers=[1, 2], names=["a", "b"], arr=np.arange(3.0))
    result.idata["posterior"].attrs["note"] = "group attribute"
    save_result(result, tmp_path / "typed.nc")
    back = load_result(tmp_path / "typed.nc")
    assert back.idata.attrs["n"] == 3 and list(back.idata.attrs["names"]) == ["a", "b"]


def test_old_result_reads_unverified_on_request(tmp_path):
    path = tmp_path / "old.nc"
    fake_result().idata.to_netcdf(path, engine="h5netcdf")
    back = load_result(path, verify=False)
    assert back.system == "cartpole" and back.variant == "diffnea/viscous/informative"
    np.testing.assert_array_equal(
        back.idata["posterior"]["theta"].values, fake_result().idata["posterior"]["theta"].values
    )


def test_check_controller_summary_is_strict_json():
    text = json.dumps(
        finite_or_null({"success_rate": float("nan"), "q": [1.0, np.float64(np.inf)]}),
        allow_nan=False,
    )
    assert json.loads(text) == {"success_rate": None, "q": [1.0, None]}


# --- two benchmark runs on one folder ------------------------------------------------------------


def _logging_cell(cell, settings):
    """A cheap cell: logs its id (to count computations) and takes a moment."""
    with open(os.environ["BAD_INPUT_CELL_LOG"], "a") as f:
        f.write(cell["id"] + "\n")
    time.sleep(0.2)
    return {"id": cell["id"]}


def test_two_concurrent_benchmark_runs_share_the_cells(tmp_path, monkeypatch):
    monkeypatch.setenv("BAD_INPUT_CELL_LOG", str(tmp_path / "log.txt"))
    out = tmp_path / "bench"
    variants = tuple(f"v{i}/a/p" for i in range(4))
    runs, errors = [], []
    barrier = threading.Barrier(2)

    def sweep():
        try:
            barrier.wait()
            runs.append(
                run_benchmark(
                    out,
                    setting="tiny",
                    systems=("cartpole",),
                    datasets=("uniform", "hardware"),
                    variants=variants,
                    cell_fn=_logging_cell,
                    processes=False,
                    n_workers=2,
                    progress=False,
                )
            )
        except Exception as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=sweep) for _ in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=120)
    assert not errors, errors
    assert len(runs) == 2
    logged = (tmp_path / "log.txt").read_text().split()
    assert len(logged) == 8 and len(set(logged)) == 8  # every cell computed exactly once
    for run in runs:
        assert len(run.records) == 8 and not run.failed
    assert not set(runs[0].ran) & set(runs[1].ran)
    assert set(runs[0].ran) | set(runs[1].ran) == set(logged)
    cells = out / "cells"
    assert not [p for p in os.listdir(cells) if p.endswith(".tmp")]
    assert json.loads((out / "settings.json").read_text())["name"] == "tiny"


def test_a_run_waits_for_a_cell_another_run_holds(tmp_path, monkeypatch):
    """Deterministic: the test holds one cell's lock (as another run computing it) and writes that
    cell's record before releasing; the run must wait for it, keep it and not compute it."""
    monkeypatch.setenv("BAD_INPUT_CELL_LOG", str(tmp_path / "log.txt"))
    out = tmp_path / "bench"
    (out / "cells").mkdir(parents=True)
    held_cell = make_grid(systems=("cartpole",), datasets=("uniform",), variants=("v0/a/p",))[0]
    held = held_cell["id"]
    assert held == cell_id("cartpole", "uniform", "v0/a/p")
    path = str(out / "cells" / f"{held}.json")
    settings = get_settings("tiny").to_dict()
    result = {}
    with dio.file_lock(path, wait=False) as locked:
        assert locked
        sweep = threading.Thread(
            target=lambda: result.update(
                run=run_benchmark(
                    out,
                    setting="tiny",
                    systems=("cartpole",),
                    datasets=("uniform",),
                    variants=("v0/a/p", "v1/a/p"),
                    cell_fn=_logging_cell,
                    processes=False,
                    n_workers=1,
                    progress=False,
                )
            )
        )
        sweep.start()
        deadline = time.time() + 60
        while not (tmp_path / "log.txt").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the run computed the other cell and now waits for ours
        record = {
            "schema": CELL_SCHEMA,
            "cell": held_cell,  # the grid's own cell: a uniform cell carries dataset options
            "settings": settings,
            "status": "ok",
            "error": None,
            "seconds": 0.0,
            "metrics": {"by": "the other run"},
        }
        dio.write_json_atomic(path, record)
        assert sweep.is_alive()
    sweep.join(timeout=60)
    run = result["run"]
    assert run.kept == (held,) and run.ran == (cell_id("cartpole", "uniform", "v1/a/p"),)
    assert (tmp_path / "log.txt").read_text().split() == [run.ran[0]]
    assert run.records[0]["metrics"] == {"by": "the other run"}
