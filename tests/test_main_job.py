"""The main job (``bayes-nea run``) at its quick size: the identifiable geometry for DiffNEA,
convergence judged and reported on the identified quantities with the truth beside them."""

import json

import numpy as np
import pytest

import bayes_nea as bn
from analysis.main_job import identifiable_where_possible, run_main_job, true_identified
from data import generate_dataset
from models import build_model

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)


def test_quick_main_job_reports_identified_convergence_and_truth(tmp_path):
    paths = run_main_job(out_dir=tmp_path, quick=True, progress=False)
    report = paths["report"].read_text()
    assert "geometry: identifiable" in report
    assert "## Identified quantities, with the truth" in report
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    conv = metrics["convergence"]
    assert conv["identified_ess_bulk_min"] > 0
    if conv["num_chains"] == 1:  # one device in the test process: R-hat is undefined
        assert conv["identified_rhat_max"] is None and "R-hat max n/a" in report
    else:
        assert conv["identified_rhat_max"] > 0.9
    covered, total = (int(x) for x in conv["identified_truth_covered"].split("/"))
    assert total >= 4 and covered >= total - 2  # 30 quick draws: most true values inside 90 %
    for name in ("rollout", "energy", "trace", "forest", "posterior"):
        assert paths[name].stat().st_size > 0


def test_true_identified_matches_the_data_generating_dynamics():
    """True base parameters reproduce the true system's inverse dynamics through the base
    regressor: ``Y_b(q, qd, qdd) beta = rnea(theta_true)`` at random states."""
    dataset = generate_dataset("cartpole", "trajectories", seed=1, duration=0.5)
    robot = dataset.robot()
    model, geometry = identifiable_where_possible(build_model("diffnea/viscous/informative", robot))
    assert geometry == "identifiable"
    truth = true_identified(model, dataset)
    base = bn.base_parameters(robot, 0)
    rng = np.random.default_rng(0)
    q, qd, qdd = (rng.normal(size=(5, robot.n)) for _ in range(3))
    theta = np.asarray(dataset.true_params["theta"])
    params = robot.nominal._replace(theta=theta)
    for k in range(5):
        tau = np.asarray(bn.rnea(robot, q[k], qd[k], qdd[k], params=params))
        regressor = np.asarray(bn.joint_torque_regressor(robot, q[k], qd[k], qdd[k]))
        y_base = regressor @ np.asarray(base.to_theta)
        np.testing.assert_allclose(y_base @ truth["base_parameters"], tau, atol=1e-9)
    np.testing.assert_array_equal(truth["viscous"], dataset.true_params["viscous"])
    # learned placements have kinematics-conditional base coordinates; a network actuator has none
    nokin, geometry = identifiable_where_possible(build_model("nokin-diffnea/viscous/informative", robot))
    assert geometry == "identifiable" and nokin.placement_sites
    assert "base_parameters" not in true_identified(nokin, dataset)  # B(k) moves with k
    network = build_model("diffnea/nn-friction/informative", robot)
    assert identifiable_where_possible(network) == (network, "whitened")
