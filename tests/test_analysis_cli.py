"""The analysis subcommands on a saved fit, in-process: ``bayes-nea simulate`` -> ``fit`` ->
``rollout`` / ``check-controller``; ``run --help`` stays cheap."""

import json
import re

import numpy as np
import pytest

from cli.fit import completion_warning
from cli.main import main

pytestmark = pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)


@pytest.fixture(scope="module")
def saved_fit(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    data_path, fit_path = folder / "data.npz", folder / "fit.nc"
    args = ["--system", "cartpole", "--dataset", "trajectories", "--duration", "2"]
    assert main(["simulate", *args, "--seed", "5", "--out", str(data_path)]) == 0
    assert (
        main(
            [
                "fit",
                "--variant",
                "diffnea/viscous/informative",
                "--data",
                str(data_path),
                "--method",
                "svi",
                "--guide",
                "delta",
                "--steps",
                "150",
                "--out",
                str(fit_path),
                "--quiet",
            ]
        )
        == 0
    )
    return folder, fit_path


def test_rollout_command(saved_fit, capsys):
    folder, fit_path = saved_fit
    fig = folder / "rollout.png"
    assert (
        main(["rollout", str(fit_path), "--out", str(fig), "--seconds", "0.5", "--draws", "8"]) == 0
    )
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "energy of the uncontrolled rollouts" in out
    assert "the rollouts leave the fitted data's support after" in out
    # fractions of the classes printed sum to one
    fractions = [float(w) for w in out.split(":")[-1].replace(",", " ").split() if _is_number(w)]
    assert fractions and abs(sum(fractions) - 1.0) < 0.02


def test_rollout_replay_reports_the_fitted_datas_support(saved_fit, capsys):
    # the fitted log replayed: every state a training state; uniform states over the whole
    # state domain with random efforts: more unlike the 2 s of swing-up (3 episodes) the fit
    # saw than the ~5 % of an episode recorded like them. The stored fit's support is that of
    # the fitted dataset's episodes (it records them)
    from analysis.support import training_support
    from data import load_dataset

    folder, fit_path = saved_fit
    uniform = folder / "uniform.npz"
    argv = ["simulate", "--system", "cartpole", "--dataset", "uniform", "--duration", "1"]
    assert main([*argv, "--seed", "6", "--out", str(uniform)]) == 0
    outside = {}
    for name, data in (("fitted", folder / "data.npz"), ("uniform", uniform)):
        capsys.readouterr()
        argv = ["rollout", str(fit_path), "--data", str(data), "--seconds", "0.5", "--draws", "4"]
        assert main([*argv, "--out", str(folder / f"replay-{name}.png")]) == 0
        out = capsys.readouterr().out
        m = re.search(r"(\d+)% of its logged states outside the fitted data", out)
        assert m, out
        outside[name] = int(m.group(1))
    ep, steps = load_dataset(uniform).episodes[0], 125  # the replayed 0.5 s of episode 0
    near = training_support(load_dataset(folder / "data.npz")).inside(
        ep.q[:steps], ep.qd[:steps], ep.tau[:steps]
    )
    share = 1.0 - near.mean()
    assert outside["uniform"] == int(f"{share:.0%}"[:-1]), (outside, share)
    assert outside["fitted"] == 0 and outside["uniform"] >= 10, outside


def test_check_controller_command(saved_fit, capsys):
    folder, fit_path = saved_fit
    fig = folder / "closed.png"
    argv = ["check-controller", str(fit_path), "--seconds", "6", "--draws", "8", "--out", str(fig)]
    argv += ["--data", str(folder / "data.npz")]
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["draws"] == 1  # a delta-guide (MAP) fit holds one draw
    assert 0.0 <= summary["success_rate"] <= 1.0
    assert fig.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the MAP of 2 s of near-noiseless data is nearly the true system: the swing-up designed on
    # the nominal model works on it
    assert summary["success_rate"] == 1.0
    # and on the simulated system itself (true parameters, friction, back-EMF)
    assert summary["true_system"]["success_rate"] == 1.0 and summary["true_system"]["draws"] == 1
    assert all(np.isfinite(v) for v in summary["settling_time_s"].values())


def test_nuts_from_saved_svi_fit_uses_the_laplace_metric(saved_fit, capsys):
    folder, fit_path = saved_fit
    out = folder / "nuts.nc"
    argv = ["fit", "--variant", "diffnea/viscous/informative", "--data", str(folder / "data.npz")]
    argv += ["--method", "nuts", "--init", str(fit_path), "--warmup", "30", "--samples", "30"]
    assert main([*argv, "--chains", "1", "--out", str(out), "--quiet"]) == 0
    assert "divergences" in capsys.readouterr().out
    from inference import load_result

    result = load_result(out)
    assert result.method == "nuts"
    assert result.attrs["settings"]["metric"] == "laplace"
    # from the MAP with the Laplace metric the trajectories stay short (adapted: hundreds)
    assert float(result.idata["sample_stats"]["n_steps"].mean()) < 64


def test_fit_with_the_rollout_likelihood(saved_fit, capsys):
    """``fit --likelihood rollout``: RK4 windows of the data, steps at the data's rate; the saved
    result rebuilds the rollout model."""
    folder, _ = saved_fit
    out = folder / "rollout-fit.nc"
    argv = ["fit", "--variant", "diffnea/viscous/informative", "--data", str(folder / "data.npz")]
    argv += ["--likelihood", "rollout", "--horizon", "4", "--steps", "60", "--out", str(out)]
    assert main([*argv, "--quiet"]) == 0
    assert "saved svi fit" in capsys.readouterr().out
    from inference import load_result

    model = load_result(out).model()
    assert model.spec.likelihood == "rollout" and model.spec.horizon == 4
    assert model.spec.dt == pytest.approx(1 / 250)


def test_bad_inputs_are_reported(saved_fit, tmp_path, capsys):
    folder, fit_path = saved_fit
    assert (
        main(["rollout", str(fit_path), "--q0", "1", "2", "3", "--out", str(tmp_path / "x.png")])
        == 2
    )
    assert "q0 and qd0 need 2 values" in capsys.readouterr().err
    assert main(["rollout", str(fit_path), "--seconds", "-1"]) == 2


def test_run_command_parses(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    text = capsys.readouterr().out
    assert "--variant" in text and "--quick" in text and "--out" in text


def _is_number(word):
    try:
        float(word)
    except ValueError:
        return False
    return True


def test_fit_warns_when_draws_have_no_consistent_body():
    # identifiable geometry: draws whose base parameters no consistent body has are flagged
    ok = np.array([[True, False, False, True]])
    message = completion_warning(ok)
    assert message is not None and "50%" in message and "consistent body" in message
    assert completion_warning(ok | True) is None
    assert completion_warning(None) is None  # draws not completed (other geometries)


def test_fit_of_a_network_variant_stops_early_on_held_out_episodes(tmp_path, capsys):
    """``fit`` of a network variant holds out episodes (--validation): the ensemble's members stop
    early on them, each at its own best step, recorded in the saved result."""
    from data import generate_dataset
    from data.io import save_dataset
    from inference import load_result

    path, out = tmp_path / "data.npz", tmp_path / "fit.nc"
    ds = generate_dataset("cartpole", "trajectories", seed=1, duration=2.0, episode_duration=0.5)
    save_dataset(ds, path)
    argv = ["fit", "--variant", "diffnea/nn-friction/informative", "--data", str(path)]
    argv += ["--steps", "60", "--out", str(out), "--quiet"]
    assert main([*argv, "--validation", "1.5"]) == 2
    assert "--validation must be auto or a fraction in [0, 1)" in capsys.readouterr().err
    assert main([*argv, "--student-df", "-1"]) == 2
    assert "(or 'learned')" in capsys.readouterr().err
    # Student-t noise whose degrees of freedom are learned (one per joint, saved with the fit)
    argv += ["--noise", "student-t", "--student-df", "learned"]
    assert main([*argv, "--validation", "0.25"]) == 0
    printed = capsys.readouterr().out
    assert "early stopping on 1 of 4 episodes held out" in printed
    assert re.search(r"\d+% of the held-out states lie outside the training states' support", printed)
    result = load_result(out)
    split = result.attrs["dataset"]["settings"]["split"]  # the episodes the fit trained on
    assert split["envelope"] and len(split["episodes"]) == 3
    assert set(ds.envelope_episodes()) <= set(split["episodes"])  # the fastest episodes train
    (stage,) = result.attrs["early_stopping"]
    assert stage["stage"] == "ensemble" and len(stage["best_step"]) == 4  # one per member
    assert all(step in stage["steps"] for step in stage["best_step"])
    held_out = ds.split((0.75, 0.25), seed=0)[1].arrays()[0].shape[0]
    assert result.attrs["settings"]["validation"]["samples"] == held_out
    sigma = result.idata["posterior"]["sigma_qdd"].values[0]  # (draws, joints)
    member = np.asarray(result.attrs["ensemble"]["draw_member"])  # draw i's member
    first = np.array([np.argmax(member == m) for m in member])
    np.testing.assert_array_equal(sigma, sigma[first])  # a member's draws are the member
    assert len(result.ensemble_weights()) == 4  # the members are saved with the result
    # the noise calibrated on the held-out episodes is recorded with the saved result
    calibration = result.attrs["ensemble"]["noise_calibration"]
    assert len(calibration["factor"]["log_sigma_qdd"]) == 2
    # (equal to rounding where every factor sits at the floor of 1 and no member was dropped)
    before = calibration["validation_nlpd_before"]
    assert calibration["validation_nlpd_after"] <= before + 1e-12 * abs(before)
    assert result.model().spec.student_df is None
    assert result.attrs["settings"]["tails"] == "profiled"  # after the weights (--tails auto)
    df = result.idata["posterior"]["df_qdd"].values[0]  # (draws, joints), a member's own
    assert df.shape[1] == 2 and np.all(df > 0)
    np.testing.assert_array_equal(df, df[first])
