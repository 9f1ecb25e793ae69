"""Real benchmark cells at the "tiny" setting: every cell has a posterior with width, records how
it was obtained and whether it converged, and scores what the data identify."""

import numpy as np
import pytest

from analysis.benchmark import get_settings, make_grid
from analysis.cells import fit_cell
from data import generate_dataset
from models import build_model, model_data, nominal_torque_residual

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)

SETTINGS = get_settings("tiny").to_dict()


# the white-box cell also exercises the NUTS re-run rule: no fit reaches this ESS, and the
# warm-up is long enough for no divergence, so its second attempt extends the chains
EXTEND = dict(SETTINGS, nuts_attempts=2, min_ess=1e9, num_warmup=400, num_samples=40)


def run(variant: str, settings: dict) -> dict:
    cell = make_grid(systems=("cartpole",), datasets=("uniform",), variants=(variant,))[0]
    return fit_cell(cell, settings)


@pytest.fixture(scope="module")
def cells():
    return {
        "diffnea/viscous/informative": run("diffnea/viscous/informative", EXTEND),
        "ffnn": run("ffnn", SETTINGS),
    }


def test_every_cell_has_a_posterior_with_width(cells):
    methods = {v: m["posterior"]["method"] for v, m in cells.items()}
    assert methods == {"diffnea/viscous/informative": "nuts", "ffnn": "ensemble"}
    for v, m in cells.items():
        assert isinstance(m["posterior"]["converged"], bool), v
        assert m["posterior"]["converged"] or m["posterior"]["reason"], v  # a reason if not
        assert m["band_width"] > 0, v  # a posterior, not a point
        assert set(m["rollout_rmse"]) == set(m["rollout_coverage90"]) == {"0.1", "0.4"}
        assert m["rollout_starts"] == SETTINGS["rollout_starts"]
        assert m["divergent_fraction"] == pytest.approx(
            m["left_domain_fraction"] + m["nonfinite_fraction"]
        )
        assert 0.0 <= m["accel_coverage90"] <= 1.0 and np.isfinite(m["accel_nmse"])
    wb = cells["diffnea/viscous/informative"]
    assert wb["posterior"]["geometry"] == "identifiable" and wb["posterior"]["attempts"] >= 1
    # uniform data of the rigid plant: the base parameters are what the data identify
    assert wb["base_error"] < 0.05 and wb["plausible_fraction"] == 1.0
    assert wb["energy_own"]["gaining"] == 0.0  # dissipative by construction, on its own energy
    assert cells["ffnn"].get("base_error") is None and cells["ffnn"]["energy_own"] is None
    # the ensemble's members by the setting's optimiser and steps (not svi_steps)
    ensemble = cells["ffnn"]["posterior"]
    assert ensemble["optimizer"] == SETTINGS["ensemble_optimizer"] == "adam"
    assert max(max(np.atleast_1d(k)) for k in ensemble["kept_steps"]) <= SETTINGS["ensemble_steps"]


def test_cells_of_every_seed_take_the_normalisers_of_seed_0(cells):
    """One set of normalisers per (system, dataset kind): a seed-1 cell gets seed 0's training
    episodes' data_scales (its own data's differ), and fit_cell records the ones it used."""
    from analysis.cells import _data_key, cell_data, grid_scales
    from models import data_scales

    cell0, cell1 = make_grid(
        systems=("cartpole",), datasets=("trajectories",), variants=("ffnn",), seeds=(0, 1)
    )
    _, train0, _, _ = cell_data(*_data_key(cell0, SETTINGS))
    dataset1, train1, _, _ = cell_data(*_data_key(cell1, SETTINGS))
    robot = dataset1.robot()
    own0, own1 = data_scales(model_data(train0), robot), data_scales(model_data(train1), robot)
    assert grid_scales(cell1, SETTINGS) == grid_scales(cell0, SETTINGS) == own0
    assert not np.allclose(own1["qdd"], own0["qdd"])
    uniform = make_grid(systems=("cartpole",), datasets=("uniform",), variants=("ffnn",))[0]
    assert cells["ffnn"]["scales"] == {
        k: list(v) for k, v in grid_scales(uniform, SETTINGS).items()
    }


def test_a_datasets_controller_is_designed_once_and_equals_a_fresh_design():
    """The cells of a dataset share one swing-up controller (its LQR design linearises the
    nominal model): the cached one is the same object for every cell of the dataset and gives
    the torques of a controller designed afresh on the dataset's robot."""
    import jax

    from analysis.cells import _cached_controller, _data_key, cell_data
    from analysis.controllers import default_controller

    cell = make_grid(systems=("cartpole",), datasets=("uniform",), variants=("ffnn",))[0]
    key = _data_key(cell, SETTINGS)
    cached = _cached_controller(*key)
    assert _cached_controller(*key) is cached
    robot = cell_data(*key)[0].robot()
    fresh = default_controller(robot)
    q = jax.random.uniform(jax.random.key(0), (5, robot.n), minval=-3.0, maxval=3.0)
    qd = jax.random.normal(jax.random.key(1), (5, robot.n))
    for t, a, b in zip((0.0, 0.5, 1.0, 2.0, 4.0), q, qd, strict=True):
        np.testing.assert_allclose(cached(t, a, b), fresh(t, a, b), rtol=0, atol=1e-12)


def test_nea_noise_is_the_nominal_models_residual():
    """NEA's torque noise is fixed at the nominal model's residual, so its posterior has a mode
    on the under-actuated cart-pole; on the rigid plant's noise-free uniform data (the paper's
    set; the grid's adds measurement noise) the residual is at rounding level and the scale is
    its floor, 1e-3 of the efforts' RMS; an offset on one joint's effort appears as that joint's
    residual."""
    clean_set = generate_dataset("cartpole", "uniform", seed=0, duration=SETTINGS["duration"])
    md = model_data(clean_set)
    robot = clean_set.robot()
    clean = nominal_torque_residual(robot, md)
    floor = 1e-3 * np.sqrt(np.mean(np.asarray(md.tau) ** 2))
    np.testing.assert_allclose(clean, [floor, floor], rtol=1e-9)
    noisy = md._replace(tau=md.tau + np.array([0.3, 0.0]))
    shifted = nominal_torque_residual(robot, noisy)
    np.testing.assert_allclose(shifted[0], 0.3, rtol=1e-6)
    assert shifted[1] == pytest.approx(1e-3 * np.sqrt(np.mean(np.asarray(noisy.tau) ** 2)))
    model = build_model("nea", robot, noise_scale=shifted)
    np.testing.assert_allclose(model.noise_scale, shifted)


def test_nuts_short_of_ess_extends_its_chains_and_says_why(cells):
    """A NUTS cell that misses only R-hat / ESS (no divergence) continues its chains for as
    many draws again instead of restarting; still short, it reports the reason."""
    info = cells["diffnea/viscous/informative"]["posterior"]
    assert info["method"] == "nuts" and info["attempts"] == 2
    assert info["divergences"] == 0 and info["extended"] == 1
    assert not info["converged"] and "bulk ESS" in info["reason"]


def test_an_ensemble_left_with_one_member_is_fitted_again_with_twice_the_members(monkeypatch):
    """Fewer than two members that did not fail (here: a score gap of 0 keeps only the best)
    leave a band without weight uncertainty: the cell is fitted once more with twice the
    members from new prior draws, and, still short, says why."""
    import inference.svi
    from analysis import cells

    monkeypatch.setattr(inference.svi, "MEMBER_SCORE_GAP", 0.0)
    cell = make_grid(systems=("cartpole",), datasets=("uniform",), variants=("ffnn",))[0]
    dataset, train, valid, _ = cells.cell_data(*cells._data_key(cell, SETTINGS))
    md, robot = model_data(train), dataset.robot()
    bm = build_model("ffnn", robot, scales=cells.data_scales(md, robot))
    # the grid's other optimiser: L-BFGS iterations with a gain threshold, passed to fit_svi
    lbfgs = dict(
        SETTINGS, ensemble_optimizer="lbfgs", ensemble_steps=30, ensemble_min_delta=1e-3
    )
    with pytest.warns(UserWarning, match="1 of 8 ensemble members"):
        fit, info = cells.fit_posterior(bm, "whitened", train, valid, lbfgs, key=0)
    assert info["optimizer"] == fit.attrs["settings"]["optimizer"] == "lbfgs"
    assert fit.attrs["settings"]["steps"] == 30
    assert fit.attrs["settings"]["validation"]["min_delta"] == 1e-3
    assert info["attempts"] == cells.ENSEMBLE_ATTEMPTS == 2
    assert fit.attrs["settings"]["members"] == 8 and info["members_weighted"] == 1
    assert np.count_nonzero(fit.ensemble_weights()) == 1
    assert not info["converged"] and "1 of 8 members did not fail" in info["reason"]


class _DivergingFit:
    """A NUTS result stand-in whose every run has divergent transitions."""

    idata = {"sample_stats": {"n_steps": np.array([12.0])}}
    attrs = {"settings": {"metric": "laplace"}}

    @staticmethod
    def diagnostics():
        return {"divergences": 3, "rhat_max": 1.001, "ess_bulk_min": 900.0}


class _CurvedShortFit(_DivergingFit):
    """A stand-in run in the curved map's coordinates (not extendable), R-hat short only."""

    attrs = {"settings": {"metric": "laplace-curved"}}

    @staticmethod
    def diagnostics():
        return {"divergences": 0, "rhat_max": 1.05, "ess_bulk_min": 900.0}


def _grid_nuts_calls(monkeypatch, fit, **model_fields):
    """``(fit_nuts calls, info)`` of a grid cell's NUTS posterior (2 attempts, 100 warm-up steps)
    where every ``fit_nuts`` run returns the stand-in ``fit``; the model has ``model_fields``."""
    import types

    from analysis import cells

    calls = []
    monkeypatch.setattr(cells, "model_data", lambda split: split)
    monkeypatch.setattr(
        cells, "fit_svi", lambda *a, **k: types.SimpleNamespace(attrs={"convergence": {}})
    )
    monkeypatch.setattr(cells, "fit_nuts", lambda bm, md, **k: calls.append(k) or fit)
    bm = types.SimpleNamespace(
        family=types.SimpleNamespace(learns_kinematics=False), **model_fields
    )
    settings = dict(SETTINGS, nuts_attempts=2, num_warmup=100)
    _, info = cells.fit_posterior(bm, "identifiable", None, None, settings, key=0)
    return calls, info


@pytest.mark.parametrize(("model_target", "targets"), [(0.95, [0.95, 0.9875]), (None, [0.8, 0.95])])
def test_nuts_after_divergences_runs_again_with_smaller_steps(monkeypatch, model_target, targets):
    """The first NUTS run takes the model's step-size target (``nuts_target_accept``, 0.8 where
    it names none); after divergences the next run starts anew with twice the warm-up and a
    target a quarter closer to 1, and the cell records the target of its last run."""
    fields = {} if model_target is None else {"nuts_target_accept": model_target}
    calls, info = _grid_nuts_calls(monkeypatch, _DivergingFit(), **fields)
    assert [c["target_accept"] for c in calls] == targets
    assert [c["num_warmup"] for c in calls] == [100, 200]
    assert info["attempts"] == 2 and info["target_accept"] == targets[-1]
    assert not info["converged"] and "3 divergent transitions" in info["reason"]
    assert [c["metric"] for c in calls] == ["auto", "auto"]  # the model's own


class _SoftplusShortFit(_CurvedShortFit):
    """A stand-in ``softplus-adapt`` run (extendable: it stores its map), R-hat short only."""

    attrs = {"settings": {"metric": "softplus-adapt"}}


def test_grid_nuts_cells_extend_a_softplus_run_short_of_r_hat(monkeypatch):
    """A grid cell runs the model's own metric (``softplus-adapt`` for the Stribeck models), and
    a run short of R-hat only is extended rather than run again."""
    calls, _ = _grid_nuts_calls(monkeypatch, _SoftplusShortFit(), nuts_metric="softplus-adapt")
    assert calls[0]["metric"] == "auto" and "extend" not in calls[0]
    assert "extend" in calls[1]


def test_a_curved_nuts_run_short_of_r_hat_runs_again_instead_of_extending(monkeypatch):
    """A run that cannot be extended (``metric="laplace-curved"``) and fell short on R-hat only
    runs again from the MAP with twice the warm-up at the same step-size target."""
    calls, info = _grid_nuts_calls(monkeypatch, _CurvedShortFit(), nuts_target_accept=0.95)
    assert all("extend" not in c for c in calls) and info["extended"] == 0
    assert [c["target_accept"] for c in calls] == [0.95, 0.95]
    assert [c["num_warmup"] for c in calls] == [100, 200]
    assert not info["converged"] and "R-hat" in info["reason"]


def test_weak_hybrids_of_a_family_share_one_white_box_start(tmp_path, monkeypatch):
    """The grid fits a weak-prior hybrid's white-box start (the MAP of its ``viscous``
    counterpart) once per (system, dataset, seed, counterpart): the ``nn-friction`` cell fits and
    stores it, the ``ffnn`` cell of the same family loads it, and what it loads equals what
    fitting it afresh for the ``ffnn`` cell gives (the start depends on the counterpart and the
    data, not on the hybrid). Another family, or the same start under other settings, is fitted
    (not loaded); a start of another counterpart is refused by ``fit_svi``."""
    from analysis import cells
    from inference import WhiteBoxStart, fit_svi

    grid = make_grid(
        systems=("cartpole",),
        datasets=("uniform",),
        variants=("diffnea/nn-friction/weak", "diffnea/ffnn/weak", "nokin-diffnea/ffnn/weak"),
    )
    dataset, train, _, _ = cells.cell_data(*cells._data_key(grid[0], SETTINGS))
    robot = dataset.robot()
    scales = cells.grid_scales(grid[0], SETTINGS)
    models = [build_model(c["variant"], robot, scales=scales) for c in grid]
    shared = tmp_path / "starts"

    first = cells.grid_white_box_start(models[0], train, grid[0], SETTINGS, shared_dir=shared)
    assert first.record["variant"] == "diffnea/viscous/weak" and not first.record["loaded"]
    assert [p.name for p in shared.glob("*.json")] == [
        "cartpole__uniform__diffnea-viscous-weak__s0.json"
    ]
    loaded = cells.grid_white_box_start(models[1], train, grid[1], SETTINGS, shared_dir=shared)
    assert loaded.record["loaded"]
    afresh = cells.grid_white_box_start(models[1], train, grid[1], SETTINGS)
    assert not afresh.record["loaded"]
    assert set(loaded.values) == set(afresh.values) == {"inertia_z"}
    np.testing.assert_array_equal(loaded.values["inertia_z"], afresh.values["inertia_z"])
    np.testing.assert_array_equal(loaded.values["inertia_z"], first.values["inertia_z"])

    fitted = []  # which starts are fitted rather than loaded (a stand-in for the fit)
    monkeypatch.setattr(
        cells,
        "fit_white_box_start",
        lambda bm, md, **k: fitted.append((bm.name, k["steps"])) or first,
    )
    cells.grid_white_box_start(models[2], train, grid[2], SETTINGS, shared_dir=shared)
    longer = dict(SETTINGS, ensemble_steps=SETTINGS["ensemble_steps"] + 10)
    cells.grid_white_box_start(models[1], train, grid[1], longer, shared_dir=shared)
    cells.grid_white_box_start(models[1], train, grid[1], longer, shared_dir=shared)
    steps = SETTINGS["ensemble_steps"]
    assert fitted == [("nokin-diffnea/ffnn/weak", steps), ("diffnea/ffnn/weak", steps + 10)]
    alien = WhiteBoxStart(first.values, {"variant": "nokin-diffnea/viscous/weak"})
    with pytest.raises(ValueError, match="starts from a MAP of 'diffnea/viscous/weak'"):
        fit_svi(models[1], model_data(train), key=0, white_box_start=alien, steps=2)
