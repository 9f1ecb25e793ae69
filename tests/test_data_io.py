"""Dataset type, files and the ``simulate`` command: validation, exact round trips, atomic writes."""

import os

import numpy as np
import pytest

import data
from cli.main import main
from data.io import write_atomic


def _random_dataset(seed=0, episodes=3, n=2):
    rng = np.random.default_rng(seed)
    eps = []
    for e in range(episodes):
        T = 20 + e
        t = np.arange(T) / 100.0 + e
        eps.append(data.Episode(t, *(rng.normal(size=(T, n)) for _ in range(4))))
    return data.Dataset(
        system="myrobot",
        kind="imported",
        joint_names=tuple(f"j{i}" for i in range(n)),
        rate_hz=100.0,
        episodes=tuple(eps),
        measured=("q", "tau"),
        estimated=("qd", "qdd"),
        synthetic=False,
        settings={"seed": 3, "noise": {"q": 1e-3, "list": (1, 2)}, "filter": None, "inf": np.inf},
        true_params={
            "theta": rng.normal(size=(n, 10)),
            "motor": {"gain": [1.0, 0.0]},
            "delay_s": 0.004,
        },
    )


def test_round_trip_is_exact(tmp_path):
    ds = _random_dataset()
    path = tmp_path / "sub" / "ds.npz"
    data.save_dataset(ds, path)
    back = data.load_dataset(path)
    assert back == ds
    for a, b in zip(ds.episodes, back.episodes, strict=True):
        for x, y in zip(a, b, strict=True):
            assert x.tobytes() == y.tobytes() and x.dtype == np.float64
    assert back.settings["noise"]["list"] == [1, 2] and back.settings["inf"] == np.inf
    assert back.true_params["motor"]["gain"].tolist() == [1.0, 0.0]
    assert back != _random_dataset(seed=1)


def test_generated_round_trip(tmp_path):
    ds = data.generate_dataset("furuta", "uniform", seed=2, duration=2.0, chunk=100)
    data.save_dataset(ds, tmp_path / "u.npz")
    back = data.load_dataset(tmp_path / "u.npz")
    assert back == ds and back.robot().name == "furuta"
    q, qd, qdd, tau = back.arrays()
    assert q.shape == (500, 2) and back.n_samples == 500 and len(back.episodes) == 5


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    path = tmp_path / "ds.npz"
    data.save_dataset(_random_dataset(), path)
    before = path.read_bytes()

    def broken(f):
        f.write(b"partial")
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_atomic(path, broken)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ds.npz"]  # no temporary left behind


def test_load_errors(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        data.load_dataset(tmp_path / "none.npz")
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(ValueError, match="not a bayes-nea dataset"):
        data.load_dataset(tmp_path / "other.npz")
    data.save_dataset(_random_dataset(), tmp_path / "ds.npz")
    content = dict(np.load(tmp_path / "ds.npz"))
    content["meta"] = np.array(str(content["meta"]).replace('"schema": 1', '"schema": 99'))
    np.savez(tmp_path / "future.npz", **content)
    with pytest.raises(ValueError, match="schema 99"):
        data.load_dataset(tmp_path / "future.npz")


def test_constructor_validation():
    ds = _random_dataset()
    ep = ds.episodes[0]
    bad_nan = ep._replace(q=np.where(np.arange(20)[:, None] == 4, np.nan, ep.q))
    with pytest.raises(ValueError, match="q has 2 NaN/inf values"):
        ds.replace(episodes=(bad_nan,))
    with pytest.raises(ValueError, match=r"qd has shape \(20, 3\), expected \(T, n\) = \(20, 2\)"):
        ds.replace(episodes=(ep._replace(qd=np.zeros((20, 3))),))
    with pytest.raises(ValueError, match="strictly increasing"):
        ds.replace(episodes=(ep._replace(t=ep.t[::-1].copy()),))
    with pytest.raises(ValueError, match="unknown dataset kind"):
        ds.replace(kind="weird")
    with pytest.raises(ValueError, match="both measured and estimated"):
        ds.replace(measured=("q", "qd"))
    with pytest.raises(ValueError, match="carries no robot and .myrobot. is not a built-in system"):
        ds.robot()
    assert ep.q.flags.writeable is False


def test_from_arrays_groups_episodes():
    t = np.array([0.0, 0.01, 0.02, 0.0, 0.01])
    x = np.arange(10.0).reshape(5, 2)
    ds = data.Dataset.from_arrays(
        system="cartpole",
        joint_names=("cart", "pole"),
        t=t,
        q=x,
        qd=x,
        qdd=x,
        tau=x,
        episode_ids=["a", "a", "a", "b", "b"],
    )
    assert [len(e.t) for e in ds.episodes] == [3, 2]
    np.testing.assert_allclose(ds.rate_hz, 100.0)
    np.testing.assert_array_equal(ds.arrays()[0], x)


def test_simulate_command_writes_a_loadable_dataset(tmp_path, capsys):
    out = tmp_path / "cp.npz"
    code = main(
        [
            "simulate",
            "--system",
            "cartpole",
            "--dataset",
            "uniform",
            "--seed",
            "7",
            "--duration",
            "2",
            "--out",
            str(out),
        ]
    )
    assert code == 0
    assert "3 episodes, 500 samples" in capsys.readouterr().out
    ds = data.load_dataset(out)
    assert ds == data.generate_dataset("cartpole", "uniform", seed=7, duration=2.0)
    assert main(["simulate", "--dataset", "real", "--out", str(out)]) == 2
    assert "valid: ['uniform', 'trajectories', 'hardware']" in capsys.readouterr().err
