"""Import of user logs: exact reading of CSV/NPZ, one clear message per kind of bad input, and
derivative estimation against closed-form derivatives."""

import numpy as np
import pytest

import data

JOINTS = ("cart", "pole")
RATE = 250.0


def _signals(T=500, phase=0.0):
    t = np.arange(T) / RATE
    w = 2 * np.pi * np.array([0.5, 1.0])
    q = np.sin(w * t[:, None] + phase)
    qd = w * np.cos(w * t[:, None] + phase)
    qdd = -(w**2) * np.sin(w * t[:, None] + phase)
    tau = np.stack([np.cos(t), np.zeros_like(t)], axis=1)
    return t, q, qd, qdd, tau


def _write_csv(path, t, q, qd, qdd, tau, labels=None, drop=(), signals=("q", "qd", "qdd", "tau")):
    cols = {"t": t}
    arrays = dict(zip(("q", "qd", "qdd", "tau"), (q, qd, qdd, tau), strict=True))
    for s in signals:
        for i, j in enumerate(JOINTS):
            cols[f"{s}_{j}"] = arrays[s][:, i]
    for d in drop:
        cols.pop(d)
    header = list(cols) + (["trajectory"] if labels is not None else [])
    lines = [",".join(header)]
    for k in range(len(t)):
        row = [repr(float(cols[c][k])) for c in cols] + (
            [str(labels[k])] if labels is not None else []
        )
        lines.append(",".join(row))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_csv_with_trajectory_column(tmp_path):
    a, b = _signals(300), _signals(200, phase=1.0)
    stacked = [np.concatenate([x, y]) for x, y in zip(a, b, strict=True)]
    labels = ["run1"] * 300 + ["run2"] * 200
    path = _write_csv(tmp_path / "log.csv", *stacked, labels=labels)
    ds = data.import_log(path, "cartpole")
    assert ds.kind == "imported" and not ds.synthetic and ds.true_params is None
    assert [len(e.t) for e in ds.episodes] == [300, 200]
    np.testing.assert_allclose(ds.rate_hz, RATE)
    for ep, ref in zip(ds.episodes, (a, b), strict=True):
        for x, y in zip(ep, ref, strict=True):
            np.testing.assert_array_equal(x, y)  # repr round-trips floats exactly
    assert ds.measured == ("q", "qd", "qdd", "tau") and ds.estimated == ()


def test_npz_files_one_episode_each(tmp_path):
    paths = []
    for k in range(2):
        t, q, qd, qdd, tau = _signals(100 + k)
        np.savez(tmp_path / f"e{k}.npz", t=t, q=q, qd=qd, qdd=qdd, tau=tau)
        paths.append(tmp_path / f"e{k}.npz")
    ds = data.import_log(paths, "cartpole", system="my-cartpole")
    assert ds.system == "my-cartpole" and [len(e.t) for e in ds.episodes] == [100, 101]


def test_estimated_derivatives_match_closed_form(tmp_path):
    t, q, qd, qdd, tau = _signals(1000)
    path = _write_csv(tmp_path / "q_only.csv", t, q, qd, qdd, tau, signals=("q", "tau"))
    ds = data.import_log(path, "cartpole", estimate_derivatives=True)
    assert ds.estimated == ("qd", "qdd") and ds.measured == ("q", "tau")
    ep = ds.episodes[0]
    mid = slice(100, -100)  # filtfilt edge transients aside
    np.testing.assert_allclose(ep.qd[mid], qd[mid], atol=2e-3 * np.abs(qd).max())
    np.testing.assert_allclose(ep.qdd[mid], qdd[mid], atol=1e-2 * np.abs(qdd).max())


def test_missing_columns(tmp_path):
    path = _write_csv(tmp_path / "log.csv", *_signals(50), drop=("tau_pole", "qd_cart"))
    with pytest.raises(ValueError, match=r"missing columns \['qd_cart', 'tau_pole'\]"):
        data.import_log(path, "cartpole")
    t, q, qd, qdd, tau = _signals(50)
    np.savez(tmp_path / "log.npz", t=t, q=q, qd=qd, tau=tau)
    with pytest.raises(ValueError, match=r"missing arrays \['qdd'\]"):
        data.import_log(tmp_path / "log.npz", "cartpole")


def test_shape_mismatch_with_robot_joints(tmp_path):
    t, q, qd, qdd, tau = _signals(50)
    np.savez(tmp_path / "log.npz", t=t, q=np.zeros((50, 3)), qd=qd, qdd=qdd, tau=tau)
    with pytest.raises(
        ValueError, match=r"q has shape \(50, 3\), expected \(T, 2\).*shape mismatch"
    ):
        data.import_log(tmp_path / "log.npz", "cartpole")
    np.savez(tmp_path / "rows.npz", t=t, q=q, qd=qd, qdd=qdd, tau=tau[:40])
    with pytest.raises(ValueError, match="tau has 40 rows but t has 50"):
        data.import_log(tmp_path / "rows.npz", "cartpole")
    path = _write_csv(tmp_path / "ragged.csv", *_signals(10))
    path.write_text(path.read_text() + "0.2,1.0\n")
    with pytest.raises(ValueError, match="row 12 has 2 fields.*shape mismatch"):
        data.import_log(path, "cartpole")


def test_nan_and_inf(tmp_path):
    t, q, qd, qdd, tau = _signals(50)
    qdd[7, 1] = np.nan
    tau[9, 0] = np.inf
    path = _write_csv(tmp_path / "log.csv", t, q, qd, qdd, tau)
    with pytest.raises(ValueError, match="qdd has 1 NaN/inf value\\(s\\), first at row 7"):
        data.import_log(path, "cartpole")


def test_non_increasing_time(tmp_path):
    t, *rest = _signals(50)
    t[20] = t[19]
    path = _write_csv(tmp_path / "log.csv", t, *rest)
    with pytest.raises(ValueError, match="time is not increasing at row 20"):
        data.import_log(path, "cartpole")


def test_irregular_sampling(tmp_path):
    t, *rest = _signals(50)
    t[30:] += 0.5 / RATE
    path = _write_csv(tmp_path / "log.csv", t, *rest)
    with pytest.raises(ValueError, match="irregular sampling: step 0.006 s at row 30"):
        data.import_log(path, "cartpole")


def test_file_problems(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        data.import_log(tmp_path / "none.csv", "cartpole")
    (tmp_path / "log.txt").write_text("t\n0\n")
    with pytest.raises(ValueError, match="unsupported file type '.txt'"):
        data.import_log(tmp_path / "log.txt", "cartpole")
    with pytest.raises(ValueError, match="built-in systems are"):
        data.import_log(tmp_path / "log.txt", "acrobot")
