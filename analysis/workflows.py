"""Library functions behind the ``rollout`` and ``check-controller`` subcommands: a stored
posterior (netCDF from ``inference.save_result``) in, figures and numbers out."""

from __future__ import annotations

import os
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from analysis.cells import FIGURE1_START
from analysis.controllers import check_controller, default_controller, swing_up_task
from analysis.energy import analyse_energy
from analysis.plots import plot_rollout_band
from analysis.rollouts import credible_band, make_rollout_fn, num_draws, thin_draws
from inference import load_result


def _check_draws_and_seconds(max_draws, seconds) -> None:
    """Refuse ``max_draws < 1`` (no draws: NaN rates) and non-positive or non-finite durations."""
    if isinstance(max_draws, bool) or not isinstance(max_draws, int | np.integer) or max_draws < 1:
        raise ValueError(f"max_draws must be an integer >= 1, got {max_draws!r}")
    if not (isinstance(seconds, int | float | np.number) and 0 < float(seconds) < np.inf):
        raise ValueError(f"seconds must be a positive finite number, got {seconds!r}")


def rollout_result(
    result_path: str | os.PathLike,
    *,
    out: str | os.PathLike = "rollout.png",
    q0=None,
    qd0=None,
    seconds: float = 4.0,
    prob: float = 0.9,
    max_draws: int = 1000,
) -> dict:
    """Uncontrolled posterior rollouts of a stored fit from ``q0, qd0`` (default: pendulum at 2
    rad), their ``prob`` band figure (PNG) and energy classes.

    Returns:
        {"figure": path, "energy": {class: fraction}, "label": str, "finite_fraction": float}.
    """
    _check_draws_and_seconds(max_draws, seconds)
    result = load_result(result_path)
    bm = result.model()
    robot = bm.robot
    n = robot.n
    q0 = jnp.asarray(FIGURE1_START.get(robot.name, (0.0,) * n) if q0 is None else q0, float)
    qd0 = jnp.zeros(n) if qd0 is None else jnp.asarray(qd0, float)
    if q0.shape != (n,) or qd0.shape != (n,):
        raise ValueError(f"q0 and qd0 need {n} values (joints {list(robot.joint_names)})")
    if seconds <= 0:
        raise ValueError(f"seconds must be positive, got {seconds}")
    draws = thin_draws(result.posterior_samples(), max_draws)
    steps = int(round(seconds / bn.DEFAULT_DT))
    traj = make_rollout_fn(bm.qdd_fn, steps=steps)(draws, q0, qd0)
    band = credible_band(traj.q, prob=prob)
    fig = plot_rollout_band(
        out,
        traj.t,
        band,
        robot=robot,
        title=f"{result.variant} on {result.system}: uncontrolled rollouts",
    )
    energy = analyse_energy(robot, traj.q, traj.qd)
    return {
        "figure": fig,
        "energy": energy.fractions,
        "label": energy.label,
        "finite_fraction": band.finite_fraction,
    }


def check_controller_result(
    result_path: str | os.PathLike,
    *,
    seconds: float = 8.0,
    q0=None,
    max_draws: int = 500,
    out: str | os.PathLike | None = None,
    respect_limits: bool = False,
    dataset=None,
) -> dict:
    """Run the provided controller (:func:`analysis.controllers.default_controller`, designed on
    the nominal model) in closed loop on every posterior draw of a stored pendulum fit.

    Args:
        result_path: netCDF fit (``inference.save_result``).
        seconds: closed-loop duration (s). q0: start positions (default: pendulum 0.1 rad).
        max_draws: at most this many posterior draws (evenly thinned).
        out: optional PNG of the closed-loop bands.
        respect_limits: count a draw whose cart leaves its rail as a failure. Off by default: the
            provided cart-pole swing-up uses more than the 0.814 m rail even on the true system.
        dataset: optional synthetic ``data.Dataset`` of the same system: the controller is also run
            on its true system (the plant that generated it: true parameters, friction, motor and
            actuation delay), reported as ``"true_system"``.

    Returns:
        The check's summary (success rate, settling-time and tracking-error quantiles), plus
        ``"figure"`` when ``out`` is given (closed-loop bands) and ``"true_system"`` when
        ``dataset`` is given.
    """
    _check_draws_and_seconds(max_draws, seconds)
    result = load_result(result_path)
    bm = result.model()
    robot = bm.robot
    if all(robot.actuated):
        raise ValueError(
            f"robot {robot.name!r} is fully actuated: use analysis.controllers.check_controller with "
            "a computed-torque controller and a reference (examples/posterior_rollouts_controller_check.py)"
        )
    draws = thin_draws(result.posterior_samples(), max_draws)
    n = robot.n
    q0 = jnp.asarray(np.r_[np.zeros(n - 1), 0.1] if q0 is None else q0, float)
    if q0.shape != (n,):
        raise ValueError(f"q0 needs {n} values (joints {list(robot.joint_names)})")
    task = swing_up_task(robot)._replace(respect_limits=bool(respect_limits))
    controller = default_controller(robot)

    def run(qdd_fn_of_draw, draws, delay_steps=0):
        return check_controller(
            qdd_fn_of_draw,
            draws,
            controller,
            q0,
            jnp.zeros(n),
            robot=robot,
            task=task,
            duration=seconds,
            delay_steps=delay_steps,
        )

    check = run(bm.qdd_fn, draws)
    summary = check.summary()
    if dataset is not None:
        if dataset.system != result.system:
            raise ValueError(
                f"dataset is of {dataset.system!r} but the fit is of {result.system!r}"
            )
        plant = dataset.true_plant()
        true_dynamics = bn.plant_dynamics(robot, plant)
        truth = run(
            lambda _draw: true_dynamics,
            {"truth": jnp.zeros((1,))},
            delay_steps=bn.delay_steps(plant, bn.DEFAULT_DT),
        )
        summary["true_system"] = truth.summary()
    if out is not None:
        band = credible_band(check.trajectory.q, prob=0.9)
        summary["figure"] = str(
            plot_rollout_band(
                Path(out),
                check.trajectory.t,
                band,
                robot=robot,
                title=f"swing-up + LQR on {num_draws(draws)} posterior draws: success {check.success_rate:.0%}",
            )
        )
    return summary
