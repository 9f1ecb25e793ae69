"""Every example script runs at tiny sizes and writes what it says (numpyro's test_examples.py
habit). The fit is made once (module fixture) and read back by the other two examples.

Marked slow: about 2 minutes on 2 free cores (SVI + Laplace + NUTS compile for the fit, closed-loop
compiles for the controller check); CI runs them. ``test_analysis_cli.py`` covers the same
workflows through the command line in the fast set."""

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SEED = 3

pytestmark = [pytest.mark.slow, pytest.mark.standard_promotion]


def load_example(name):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    out = tmp_path_factory.mktemp("examples") / "fit.nc"
    res = load_example("fit_from_script").main(["--tiny", "--seed", str(SEED), "--out", str(out)])
    return res


def test_fit_from_script(fitted):
    from inference import load_result

    path = Path(fitted["path"])
    assert path.is_file() and path.stat().st_size > 0
    back = load_result(path)
    assert back.method == "nuts" and back.system == "cartpole"
    assert back.variant == "diffnea/viscous/informative"
    # the stored posterior is the fitted one, and its physical masses are near the truth
    mass = np.asarray(back.idata["posterior"]["mass"].values)
    assert np.all(np.isfinite(mass))
    true_mass = np.asarray(fitted["test"].true_params["theta"])[:, 0]
    rel = np.abs(np.median(mass.reshape(-1, mass.shape[-1]), axis=0) - true_mass) / true_mass
    assert np.all(rel < 0.5), rel
    table = fitted["result"].summary()
    assert {"mean", "sd", "r_hat", "ess_bulk"} <= set(table.columns)


def test_inspect_diagnostics(fitted, tmp_path):
    res = load_example("inspect_diagnostics").main(
        [str(fitted["path"]), "--tiny", "--out", str(tmp_path / "diag")]
    )
    ppc = res["ppc"]
    assert 0.0 <= ppc["coverage"] <= 1.0 and ppc["coverage"] > 0.3
    assert all(math.isfinite(x) and x >= 0 for x in np.ravel(ppc["nmse"]))
    for name, path in res["plots"].items():
        path = Path(path)
        assert path.is_file() and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def test_posterior_rollouts_controller_check(fitted, tmp_path):
    res = load_example("posterior_rollouts_controller_check").main(
        [str(fitted["path"]), "--tiny", "--truth-seed", str(SEED), "--out", str(tmp_path / "r")]
    )
    roll, check = res["rollout"], res["check"]
    assert Path(roll["figure"]).is_file() and Path(check["figure"]).is_file()
    assert roll["finite_fraction"] == 1.0
    assert abs(sum(roll["energy"].values()) - 1.0) < 1e-9
    # the provided swing-up + LQR works on the true system (friction and back-EMF included)
    assert check["true_system"]["success_rate"] == 1.0
    assert 0.0 <= check["success_rate"] <= 1.0
    assert check["draws"] == 20
