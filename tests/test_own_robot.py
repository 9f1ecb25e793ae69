"""A user's own robot from the command line: ``import`` of a URDF and logs (mapped by name, one
clear line per mismatch), datasets that carry their robot, reference trajectories, and tracking
controllers checked against the closed-form error dynamics of computed-torque control."""

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import PANDA_FINGERS, panda_urdf_path, with_xla_optimisation

import bayes_nea as bn
import data
from cli.main import main

TWO_DOF_URDF = """<robot name="arm2">
  <link name="base"/>
  <link name="upper"><inertial><origin xyz="0 0 -0.2"/><mass value="1.2"/>
    <inertia ixx="0.02" iyy="0.02" izz="0.004" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="fore"><inertial><origin xyz="0 0 -0.15"/><mass value="0.7"/>
    <inertia ixx="0.008" iyy="0.008" izz="0.002" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <joint name="shoulder" type="revolute"><parent link="base"/><child link="upper"/>
    <axis xyz="0 1 0"/><limit lower="-1.5" upper="1.5" effort="40" velocity="3"/>
    <dynamics damping="0.05"/></joint>
  <joint name="elbow" type="revolute"><parent link="upper"/><child link="fore"/>
    <origin xyz="0 0 -0.4"/><axis xyz="0 1 0"/><limit lower="-2" upper="2" effort="20" velocity="3"/>
    <dynamics damping="0.03"/></joint>
</robot>
"""


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    """A vertical 2-DoF arm (gravity acts), its URDF file, a simulated dataset and its CSV log."""
    folder = tmp_path_factory.mktemp("own")
    urdf = folder / "arm2.urdf"
    urdf.write_text(TWO_DOF_URDF)
    robot = bn.load_urdf(str(urdf))
    dataset = data.generate_dataset(robot.name, "excitation", seed=3, duration=3.0, robot=robot)
    log = folder / "log.csv"
    data.export_log(dataset, log)
    return folder, urdf, robot, dataset, log


def _rewrite_csv(src, dst, transform):
    lines = src.read_text().splitlines()
    header, rows = lines[0].split(","), [r.split(",") for r in lines[1:]]
    header, rows = transform(header, rows)
    dst.write_text("\n".join([",".join(header), *(",".join(r) for r in rows)]) + "\n")


def _cli_error(argv, capsys) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one line
    return err


def test_import_round_trips_the_exported_log_and_stores_the_robot(arm, capsys):
    folder, urdf, robot, dataset, log = arm
    out = folder / "imported.npz"
    assert main(["import", "--urdf", str(urdf), "--log", str(log), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "robot 'arm2', 2 joints" in printed and "shoulder: tau in [" in printed
    loaded = data.load_dataset(out)
    assert loaded.kind == "imported" and loaded.true_params is None
    assert bn.robot_to_dict(loaded.robot()) == bn.robot_to_dict(robot)
    assert len(loaded.episodes) == len(dataset.episodes)
    for a, b in zip(loaded.episodes, dataset.episodes, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)  # 17 significant digits: the same doubles


def test_log_columns_in_another_order_are_mapped_by_name(arm, tmp_path):
    folder, urdf, robot, dataset, log = arm
    swapped = tmp_path / "swapped.csv"

    def swap(header, rows):  # elbow columns before shoulder columns, everywhere
        order = sorted(range(len(header)), key=lambda i: ("shoulder" in header[i], i))
        return [header[i] for i in order], [[r[i] for i in order] for r in rows]

    _rewrite_csv(log, swapped, swap)
    assert swapped.read_text().split(",")[1].endswith("elbow")
    imported = data.import_log(swapped, robot)
    np.testing.assert_array_equal(imported.arrays()[0], dataset.arrays()[0])
    # NPZ columns named by a joint_names array, in the reverse order
    q, qd, qdd, tau = dataset.arrays()
    t = np.concatenate([ep.t for ep in dataset.episodes])
    npz = tmp_path / "reversed.npz"
    np.savez(
        npz,
        t=t[: dataset.episodes[0].t.size],
        joint_names=np.array(robot.joint_names[::-1]),
        **{
            k: v[: dataset.episodes[0].t.size, ::-1]
            for k, v in zip(data.SIGNALS, (q, qd, qdd, tau), strict=True)
        },
    )
    from_npz = data.import_log(npz, robot)
    np.testing.assert_array_equal(from_npz.episodes[0].tau, dataset.episodes[0].tau)


def test_missing_column_and_missing_joint_each_get_one_line(arm, tmp_path, capsys):
    folder, urdf, robot, dataset, log = arm
    no_column = tmp_path / "no_column.csv"
    _rewrite_csv(
        log,
        no_column,
        lambda h, rows: (
            [c for c in h if c != "qdd_elbow"],
            [[v for c, v in zip(h, r, strict=True) if c != "qdd_elbow"] for r in rows],
        ),
    )
    out = str(tmp_path / "x.npz")
    err = _cli_error(["import", "--urdf", str(urdf), "--log", str(no_column), "--out", out], capsys)
    assert str(no_column) in err and "missing columns ['qdd_elbow']" in err
    # a URDF with a joint the log does not have: a third joint "wrist"
    three = tmp_path / "arm3.urdf"
    three.write_text(
        TWO_DOF_URDF.replace(
            "</robot>",
            '<link name="hand"><inertial><mass value="0.3"/><inertia ixx="1e-3" iyy="1e-3" '
            'izz="1e-3" ixy="0" ixz="0" iyz="0"/></inertial></link><joint name="wrist" '
            'type="revolute"><parent link="fore"/><child link="hand"/><origin xyz="0 0 -0.3"/>'
            '<axis xyz="0 1 0"/><limit lower="-2" upper="2" effort="5" velocity="3"/></joint>'
            "</robot>",
        )
    )
    err = _cli_error(["import", "--urdf", str(three), "--log", str(log), "--out", out], capsys)
    assert str(log) in err and "joint(s) ['wrist'] are not in the log" in err
    assert "['shoulder', 'elbow']" in err  # the log's own joints
    # ... which locking the joint resolves
    assert (
        main(
            [
                "import",
                "--urdf",
                str(three),
                "--lock-joint",
                "wrist=0.1",
                "--log",
                str(log),
                "--out",
                out,
            ]
        )
        == 0
    )
    assert data.load_dataset(out).robot().joint_names == ("shoulder", "elbow")
    capsys.readouterr()
    err = _cli_error(
        ["import", "--urdf", str(urdf), "--lock-joint", "nope", "--log", str(log), "--out", out],
        capsys,
    )
    assert "nope" in err
    err = _cli_error(
        ["import", "--urdf", str(urdf), "--log", str(log), "--out", str(tmp_path / "x.nc")], capsys
    )
    assert ".npz" in err


def test_dataset_keeps_a_user_robot_named_like_a_builtin(tmp_path):
    builtin = bn.cartpole()
    theta = np.array(builtin.nominal.theta, copy=True)
    theta[1, 0] *= 1.5  # a heavier pole, same name
    mine = dataclasses.replace(builtin, nominal=builtin.nominal._replace(theta=theta))
    dataset = data.generate_dataset("cartpole", "uniform", seed=0, duration=0.1)
    dataset = dataset.replace(robot_description=bn.robot_to_dict(mine))
    loaded = data.load_dataset(data.save_dataset(dataset, tmp_path / "d.npz"))
    np.testing.assert_array_equal(loaded.robot().nominal.theta, theta)
    assert loaded.robot().nominal.theta[1, 0] != bn.get_system("cartpole").nominal.theta[1, 0]
    with pytest.raises(ValueError, match="differ from its robot"):
        dataset.replace(robot_description=bn.robot_to_dict(bn.furuta()))


def test_reference_csv_derivatives_match_the_closed_form(tmp_path, arm):
    robot = arm[2]
    t = np.arange(0.0, 2.0, 0.002)
    path = tmp_path / "ref.csv"
    rows = [f"{x},{0.3 * np.cos(2 * x)},{0.5 * np.sin(3 * x)}" for x in t]
    path.write_text("t,q_elbow,q_shoulder\n" + "\n".join(rows) + "\n")  # not the URDF's order
    ref = data.importing.read_reference(path, robot)
    q, qd, qdd = (np.asarray(v) for v in ref(jnp.asarray(1.0005)))  # between two samples
    x = 1.0005
    np.testing.assert_allclose(q, [0.5 * np.sin(3 * x), 0.3 * np.cos(2 * x)], atol=2e-6)
    np.testing.assert_allclose(qd, [1.5 * np.cos(3 * x), -0.6 * np.sin(2 * x)], atol=1e-4)
    np.testing.assert_allclose(qdd, [-4.5 * np.sin(3 * x), -1.2 * np.cos(2 * x)], atol=1e-3)
    assert ref.duration == pytest.approx(t[-1])


def test_tracking_laws_give_the_closed_form_error_dynamics():
    """Computed torque with the exact model: ``e'' + kd e' + kp e = 0`` pointwise (Spong et al.
    2020, ch. 8), e = q_r - q. Joint impedance with exact feed-forward at q = q_r, qd = qd_r + d:
    ``M(q_r) (qdd - qdd_r) = h(q_r, qd_r) - h(q_r, qd) - D d`` (h = Coriolis + gravity), with M
    from ``crba``: states of the Panda drawn at random around an excitation reference."""
    robot = bn.load_urdf(panda_urdf_path(), lock_joints=dict.fromkeys(PANDA_FINGERS, 0.0))
    ref = data.excitation.robot_excitation(robot, seed=2)
    plant = jax.jit(lambda q, qd, tau: bn.aba(robot, q, qd, tau))
    ct = jax.jit(bn.computed_torque_pd(robot, ref, kp=100.0, kd=20.0, saturate=False))
    imp = jax.jit(bn.joint_impedance(robot, ref, stiffness=400.0, damping=40.0, saturate=False))
    rng = np.random.default_rng(0)
    for t in rng.uniform(0.0, 10.0, 4):
        q_r, qd_r, qdd_r = (np.asarray(v) for v in ref(jnp.asarray(t)))
        e, ed = rng.normal(0, 0.05, robot.n), rng.normal(0, 0.2, robot.n)
        q, qd = q_r - e, qd_r - ed
        qdd = np.asarray(plant(q, qd, ct(t, q, qd)))
        np.testing.assert_allclose(qdd_r - qdd, -20.0 * ed - 100.0 * e, atol=1e-8)
        d = rng.normal(0, 0.2, robot.n)
        qdd = np.asarray(plant(q_r, qd_r + d, imp(t, q_r, qd_r + d)))
        mass = np.asarray(bn.crba(robot, q_r))
        h0, h1 = (np.asarray(bn.rnea(robot, q_r, v, np.zeros(robot.n))) for v in (qd_r, qd_r + d))
        np.testing.assert_allclose(mass @ (qdd - qdd_r), h0 - h1 - 40.0 * d, atol=1e-8)


# --- the README's "Your own robot" commands, as written, at tiny sizes ----------------------------

ROOT = Path(__file__).resolve().parents[1]
TINY = (
    (r"--duration \d+", "--duration 1"),
    (r"--steps \d+", "--steps 20"),
    (r"--warmup \d+ --samples \d+", "--warmup 5 --samples 5 --chains 1"),
    (r"--seconds \d+", "--seconds 0.2"),
    (r"--draws \d+", "--draws 4"),
    (r"--excitation \d+", "--excitation 0.6"),
)


def readme_block() -> str:
    section = (ROOT / "README.md").read_text().split("## Your own robot", 1)[1]
    return section.split("```bash\n", 1)[1].split("```", 1)[0]


def test_example_script_runs_the_readme_commands():
    assert (ROOT / "examples" / "own_robot.sh").read_text().endswith(readme_block())


@pytest.mark.standard_promotion  # runs NumPyro / optax (conftest.py)
def test_readme_commands_run_on_the_panda_at_tiny_size(tmp_path, xla_cache_dir):
    """Every README command in a fresh folder, sizes shrunk (only the numbers of the size flags
    change). (A second run on example-robot-data's 2-DoF arm was dropped for suite time.)"""
    block = readme_block()
    for pattern, tiny in TINY:
        block = re.sub(pattern, tiny, block)
    lines = []
    for line in block.splitlines():
        if line.startswith(".venv/bin/pip"):
            continue  # installed with the test extras
        line = line.replace(".venv/bin/python", shlex.quote(sys.executable))
        if line.startswith("BN="):
            line = f'BN="{sys.executable} -m cli.main"'
        lines.append(line)
    script = "set -euo pipefail\n" + "\n".join(lines) + "\n"
    env = dict(os.environ, PYTHONPATH=str(ROOT), BAYES_NEA_CACHE=xla_cache_dir)  # the run's cache
    env = with_xla_optimisation(env)  # NUTS on the Panda: run-bound
    done = subprocess.run(
        ["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    folder = tmp_path / "own-robot"
    for name in ("log.csv", "panda.npz", "map.nc", "posterior.nc", "replay.png", "tracking.png"):
        assert (folder / name).stat().st_size > 0, name
    robot = data.load_dataset(folder / "panda.npz").robot()
    assert robot.n == 7
    assert "replay of episode 0" in done.stdout and "of the logged positions inside" in done.stdout
    # the replayed episode was fitted: every one of its states is a training state
    assert "0% of its logged states outside the fitted data" in done.stdout
    report = json.loads(done.stdout[done.stdout.rindex("\n{") :])  # check-controller's JSON
    assert report["controller"] == "computed-torque" and report["draws"] == 4
    assert list(report["rmse_per_joint"]) == list(robot.joint_names)
    for q in report["rmse_per_joint"].values():
        assert 0 <= q["q5"] <= q["q50"] <= q["q95"]


def test_check_controller_arguments_are_checked_first(tmp_path, capsys):
    fit = str(tmp_path / "fit.nc")  # never read: the arguments are refused before
    err = _cli_error(["check-controller", fit, "--controller", "impedance"], capsys)
    assert "tracks a reference" in err and "--excitation" in err
    err = _cli_error(
        ["check-controller", fit, "--controller", "swing-up", "--excitation", "2"], capsys
    )
    assert "swing-up tracks no reference" in err
    err = _cli_error(["check-controller", fit, "--excitation", "2", "--gains", "1"], capsys)
    assert "KP,KD" in err
    err = _cli_error(
        ["check-controller", fit, "--excitation", "2", "--trajectory", "r.csv"], capsys
    )
    assert "not allowed with argument" in err
