"""Saving and loading fit results: round trip, atomic writes, bad files, stored states."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import xarray as xr

import bayes_nea as bn
from inference import fit_svi, load_result, save_result
from inference._state import state_from_dataset, state_to_dataset
from inference.reference import linear_gaussian_model, simulate

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)


@pytest.fixture(scope="module")
def svi_result():
    model = linear_gaussian_model(bn.get_system("cartpole"))
    data, _ = simulate(model, key=11, n_samples=20)
    return fit_svi(
        model,
        data,
        key=0,
        guide="delta",
        steps=300,
        learning_rate=0.02,
        progress=False,
        num_predictive=10,
    )


def test_round_trip_equal(svi_result, tmp_path):
    path = tmp_path / "fit.nc"
    save_result(svi_result, path)
    loaded = load_result(path)
    assert (loaded.variant, loaded.system, loaded.method) == (
        "reference/linear-gaussian",
        "cartpole",
        "svi",
    )
    assert set(loaded.idata.children) == set(svi_result.idata.children)
    for group in svi_result.idata.children:
        xr.testing.assert_identical(
            loaded.idata[group].to_dataset(), svi_result.idata[group].to_dataset()
        )
    assert loaded.attrs == svi_result.attrs
    for site, value in svi_result.posterior_samples().items():
        np.testing.assert_array_equal(loaded.posterior_samples()[site], value)
    assert set(loaded.posterior_samples()) == {"beta", "actuator/viscous"}
    assert loaded.attrs["joint_names"] == ["cart", "pole"]
    with pytest.raises(ValueError, match="holds no model spec"):
        loaded.model()  # the reference model is not built from a ModelSpec


def test_save_is_atomic(svi_result, tmp_path, monkeypatch):
    path = tmp_path / "fit.nc"
    path.write_bytes(b"previous contents")

    def broken(self, filename, **kwargs):
        with open(filename, "wb") as f:
            f.write(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(xr.DataTree, "to_netcdf", broken)
    with pytest.raises(OSError, match="disk full"):
        save_result(svi_result, path)
    assert path.read_bytes() == b"previous contents"
    assert os.listdir(tmp_path) == ["fit.nc"]


def test_save_leaves_no_temporary_files(svi_result, tmp_path):
    save_result(svi_result, tmp_path / "a.nc")
    save_result(svi_result, tmp_path / "a.nc")  # overwrite
    assert os.listdir(tmp_path) == ["a.nc"]


def test_bad_paths_and_files(svi_result, tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        save_result(svi_result, tmp_path / "missing" / "fit.nc")
    with pytest.raises(ValueError, match="no result file"):
        load_result(tmp_path / "nothing.nc")
    junk = tmp_path / "junk.nc"
    junk.write_text("not netcdf")
    with pytest.raises(ValueError, match="not a readable netCDF"):
        load_result(junk)
    other = tmp_path / "other.nc"
    xr.DataTree(xr.Dataset({"x": ("a", np.arange(3.0))})).to_netcdf(other, engine="h5netcdf")
    with pytest.raises(ValueError, match="not a bayes-nea fit result"):
        load_result(other)


def test_state_round_trip_with_typed_keys(tmp_path):
    state = {
        "key": jax.random.key(3),
        "x": jnp.arange(4.0),
        "flag": jnp.array([True, False]),
        "count": jnp.asarray(7, jnp.int32),
    }
    path = tmp_path / "state.nc"
    state_to_dataset(state, kind="test").to_netcdf(path, engine="h5netcdf")
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        back = state_from_dataset(ds.load(), state, kind="test")
    np.testing.assert_array_equal(
        jax.random.key_data(back["key"]), jax.random.key_data(state["key"])
    )
    for k in ("x", "flag", "count"):
        np.testing.assert_array_equal(back[k], state[k])
        assert back[k].dtype == state[k].dtype
    with pytest.raises(ValueError, match="expected 'svi"):
        state_from_dataset(ds, state, kind="svi/delta")
    with pytest.raises(ValueError, match="leaves"):
        state_from_dataset(state_to_dataset({"x": state["x"]}, kind="test"), state, kind="test")
