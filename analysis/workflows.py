"""Library functions behind the ``rollout`` and ``check-controller`` subcommands: a stored
posterior (netCDF from ``inference.save_result``) in, figures and numbers out."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from analysis.cells import FIGURE1_START
from analysis.controllers import (
    check_controller,
    default_controller,
    quantiles,
    swing_up_task,
    tracking_task,
)
from analysis.energy import analyse_energy
from analysis.plots import joint_unit, plot_rollout_band
from analysis.rollouts import (
    band_coverage,
    credible_band,
    make_rollout_fn,
    num_draws,
    thin_draws,
)
from analysis.support import fit_support
from bayes_nea.control import computed_torque_pd, joint_impedance, rigid_body_inverse
from inference import FitResult, load_result


def _check_draws_and_seconds(max_draws, seconds) -> None:
    """Refuse ``max_draws < 1`` (no draws: NaN rates) and non-positive or non-finite durations."""
    if isinstance(max_draws, bool) or not isinstance(max_draws, int | np.integer) or max_draws < 1:
        raise ValueError(f"max_draws must be an integer >= 1, got {max_draws!r}")
    if not (isinstance(seconds, int | float | np.number) and 0 < float(seconds) < np.inf):
        raise ValueError(f"seconds must be a positive finite number, got {seconds!r}")


def default_start(robot: bn.Robot) -> np.ndarray:
    """(n,) start positions of uncontrolled rollouts: :data:`analysis.cells.FIGURE1_START` for the
    built-in pendulums, else the middle of each joint's limits (0 where unbounded)."""
    if robot.name in FIGURE1_START and robot.n == len(FIGURE1_START[robot.name]):
        return np.asarray(FIGURE1_START[robot.name], float)
    lower, upper = np.asarray(robot.lower, float), np.asarray(robot.upper, float)
    bounded = np.isfinite(lower) & np.isfinite(upper) & (upper > lower)
    return np.where(bounded, 0.5 * (np.where(bounded, lower, 0) + np.where(bounded, upper, 0)), 0.0)


def rollout_result(
    result_path: str | os.PathLike,
    *,
    out: str | os.PathLike = "rollout.png",
    q0=None,
    qd0=None,
    seconds: float = 4.0,
    prob: float = 0.9,
    max_draws: int = 1000,
    dataset=None,
    episode: int = 0,
) -> dict:
    """Posterior rollouts of a stored fit and their ``prob`` band figure (PNG) and energy classes.

    Uncontrolled from ``q0, qd0`` (default :func:`default_start`, at rest); or, with ``dataset``
    (a logged or simulated ``data.Dataset`` of the fit's robot), a replay of episode ``episode``:
    from its first state, its logged efforts applied open loop at its sampling rate, the band
    drawn over the logged positions and their coverage reported.

    Returns:
        {"figure": path, "finite_fraction": float, "support_exit_s": {"q10", "q50", "q90"}:
        quantiles over the draws of the time (s) their rollout first leaves the fitted data's
        support (:meth:`analysis.support.TrainingSupport.exit_time`; ``inf``: not within the
        rollout; past it a network extrapolates)}, plus ``"energy"`` ({class: fraction}) and
        ``"label"`` for uncontrolled rollouts, or ``"coverage"`` (fraction of logged positions
        inside the band), ``"outside_support"`` (fraction of the replayed logged states ``(q, qd,
        tau)`` outside the fitted data's support, :func:`analysis.support.fit_support`: where a
        network extrapolates) and ``"replay"`` (episode, seconds) with ``dataset``.
    """
    _check_draws_and_seconds(max_draws, seconds)
    result = load_result(result_path)
    bm = result.model()
    robot = bm.robot
    n = robot.n
    draws = thin_draws(result.posterior_samples(), max_draws)
    if dataset is None:
        q0 = jnp.asarray(default_start(robot) if q0 is None else q0, float)
        qd0 = jnp.zeros(n) if qd0 is None else jnp.asarray(qd0, float)
        if q0.shape != (n,) or qd0.shape != (n,):
            raise ValueError(f"q0 and qd0 need {n} values (joints {list(robot.joint_names)})")
        dt, steps, tau, logged = bn.DEFAULT_DT, int(round(seconds / bn.DEFAULT_DT)), None, None
        title = f"{result.variant} on {result.system}: uncontrolled rollouts"
    else:
        if q0 is not None or qd0 is not None:
            raise ValueError("a replay starts at the episode's first state: drop q0/qd0")
        if tuple(dataset.joint_names) != tuple(robot.joint_names):
            raise ValueError(
                f"the dataset's joints {list(dataset.joint_names)} are not the fit's "
                f"{list(robot.joint_names)}"
            )
        if not 0 <= episode < len(dataset.episodes):
            raise ValueError(
                f"episode {episode} out of range: the dataset has {len(dataset.episodes)}"
            )
        ep = dataset.episodes[episode]
        dt = 1.0 / dataset.rate_hz
        steps = min(int(round(seconds / dt)), ep.t.shape[0] - 1)
        if steps < 1:
            raise ValueError(f"episode {episode} has a single sample: nothing to replay")
        q0, qd0 = jnp.asarray(ep.q[0]), jnp.asarray(ep.qd[0])
        tau, logged = jnp.asarray(ep.tau[:steps]), ep.q[: steps + 1]
        title = (
            f"{result.variant} on {result.system}: replay of the logged efforts (episode {episode})"
        )
    traj = make_rollout_fn(bm.qdd_fn, steps=steps, dt=dt)(draws, q0, qd0, tau)
    band = credible_band(traj.q, prob=prob)
    support = fit_support(result)
    exit_s = support.exit_time(traj.q, traj.qd, traj.tau, dt)
    fig = plot_rollout_band(
        out, traj.t, band, robot=robot, truth=logged, truth_label="logged", title=title
    )
    summary = {
        "figure": fig,
        "finite_fraction": band.finite_fraction,
        "support_exit_s": {  # draws' own times (no interpolation towards inf)
            k: float(np.quantile(exit_s, p, method="inverted_cdf"))
            for k, p in (("q10", 0.1), ("q50", 0.5), ("q90", 0.9))
        },
    }
    if dataset is None:  # energy classes mean something without applied efforts only
        energy = analyse_energy(robot, traj.q, traj.qd)
        summary |= {"energy": energy.fractions, "label": energy.label}
    else:
        summary["coverage"] = band_coverage(band, logged)
        near = support.inside(ep.q[:steps], ep.qd[:steps], ep.tau[:steps])
        summary["outside_support"] = float(1.0 - near.mean())
        summary["replay"] = {"episode": int(episode), "seconds": steps * dt}
    return summary


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


TRACKING_CONTROLLERS = ("computed-torque", "impedance")
FEEDFORWARDS = ("posterior-mean", "nominal")


def posterior_mean_sample(samples: dict) -> dict:
    """The mean over draws of every latent site (D, ...) -> (...): one model, the posterior mean
    in the sampler's coordinates (for log-Cholesky inertias a physically consistent body)."""
    return {k: jnp.mean(jnp.asarray(v), axis=0) for k, v in samples.items()}


def check_tracking_result(
    result: str | os.PathLike | FitResult,
    reference,
    seconds: float,
    *,
    controller: str = "computed-torque",
    kp=100.0,
    kd=20.0,
    feedforward: str = "posterior-mean",
    max_draws: int = 200,
    tolerance: float = 0.02,
    out: str | os.PathLike | None = None,
) -> dict:
    """Track ``reference`` on every posterior draw of a stored fit of a fully actuated robot.

    The controller is designed once, on one model (``feedforward``): the posterior mean
    (:func:`posterior_mean_sample`, rigid body and actuator inverted by
    ``BayesianModel.tau_fn``; for an ensemble the mean of its members' torques) or the nominal
    URDF model (``rnea``). Each posterior draw is then
    the plant (its forward dynamics ``qdd_fn``, actuator included), started on the reference.

    Args:
        result: a stored fit (netCDF path) or the ``FitResult`` loaded from it.
        reference: ``t -> (q_r, qd_r, qdd_r)`` (n,) each, jittable, e.g.
            :func:`data.excitation.robot_excitation` or :func:`data.importing.read_reference`.
        seconds: closed-loop duration (s).
        controller: ``"computed-torque"`` (:func:`bayes_nea.control.computed_torque_pd`, ``kp``
            in 1/s^2, ``kd`` in 1/s) or ``"impedance"`` (:func:`bayes_nea.control.joint_impedance`
            with stiffness ``kp * M_jj`` and damping ``kd * M_jj``, ``M`` the feed-forward
            model's mass matrix at the reference start: the same bandwidth on every joint).
        kp, kd: scalars or (n,).
        max_draws: at most this many posterior draws (evenly thinned).
        tolerance: the tracking task's tolerance on ``||q - q_r||`` (rad or m).
        out: optional PNG: joint positions' 90 % band over the draws with the reference.

    Returns:
        ``{"controller", "feedforward", "draws", "success_rate", "rmse_per_joint": {joint:
        {"q5", "q50", "q95"}}, "max_effort": {...}, "diverged_rate", ...}`` (RMSE in rad or m,
        quantiles across draws), plus ``"figure"`` when ``out`` is given.
    """
    _check_draws_and_seconds(max_draws, seconds)
    if controller not in TRACKING_CONTROLLERS:
        raise ValueError(f"unknown controller {controller!r}; valid: {list(TRACKING_CONTROLLERS)}")
    if feedforward not in FEEDFORWARDS:
        raise ValueError(f"unknown feed-forward {feedforward!r}; valid: {list(FEEDFORWARDS)}")
    if not isinstance(result, FitResult):
        result = load_result(result)
    bm = result.model()
    robot = bm.robot
    if not all(robot.actuated):
        raise ValueError(
            f"robot {robot.name!r} has unactuated joints: track a reference on a fully actuated "
            "robot, or use the swing-up check of the pendulums"
        )
    samples = result.posterior_samples()
    draws = thin_draws(samples, max_draws)
    if feedforward == "posterior-mean":
        if bm.family.black_box or not bm.actuator.invertible:
            raise ValueError(
                f"variant {result.variant!r} has no inverse model to feed forward (a network "
                "maps efforts to accelerations); use feedforward 'nominal'"
            )
        members = result.ensemble_members()
        if members is None:
            inverse = bm.tau_fn(posterior_mean_sample(samples))
        else:  # an ensemble's mean model: its members' torques averaged by mixture weight
            weights = result.ensemble_weights()
            kept = np.flatnonzero(weights)  # a failed member (weight 0) is not evaluated
            fns = [bm.tau_fn({k: v[i] for k, v in members.items()}) for i in kept]
            inverse = lambda q, qd, qdd: jnp.tensordot(
                jnp.asarray(weights[kept]), jnp.stack([f(q, qd, qdd) for f in fns]), axes=1
            )
    else:
        inverse = rigid_body_inverse(robot)
    q0, qd0, qdd0 = (jnp.asarray(x, float) for x in reference(jnp.asarray(0.0)))
    if q0.shape != (robot.n,):
        raise ValueError(
            f"the reference gives {q0.shape} positions, the robot has {robot.n} joints"
        )
    if controller == "computed-torque":
        ctrl = computed_torque_pd(robot, reference, kp=kp, kd=kd, inverse_dynamics=inverse)
    else:
        unit = jnp.eye(robot.n)
        mass = (
            jax.vmap(lambda e: inverse(q0, jnp.zeros_like(q0), e))(unit).T
            - inverse(q0, jnp.zeros_like(q0), jnp.zeros_like(q0))[:, None]
        )
        m_jj = np.abs(np.diag(np.asarray(mass)))
        ctrl = joint_impedance(
            robot,
            reference,
            stiffness=np.asarray(kp, float) * m_jj,
            damping=np.asarray(kd, float) * m_jj,
            inverse_dynamics=inverse,
        )
    task = tracking_task(reference, tolerance=tolerance, hold_time=min(0.5, seconds / 2))
    check = check_controller(
        bm.qdd_fn, draws, ctrl, q0, qd0, robot=robot, task=task, duration=seconds
    )
    traj = check.trajectory
    q_ref = np.asarray(jax.vmap(lambda t: reference(t)[0])(jnp.asarray(traj.t)))
    with np.errstate(invalid="ignore", over="ignore"):
        rmse = np.sqrt(np.mean((np.asarray(traj.q) - q_ref[None]) ** 2, axis=1))  # (D, n)
        effort = np.abs(np.asarray(traj.tau)).max(axis=1)  # (D, n)

    summary = {
        "controller": controller,
        "feedforward": feedforward,
        "gains": {"kp": np.asarray(kp, float).tolist(), "kd": np.asarray(kd, float).tolist()},
        "seconds": float(seconds),
        **check.summary(),
        "rmse_per_joint": {j: quantiles(rmse[:, i]) for i, j in enumerate(robot.joint_names)},
        "max_effort_per_joint": {
            j: quantiles(effort[:, i]) for i, j in enumerate(robot.joint_names)
        },
        "unit": {j: joint_unit(robot, i) for i, j in enumerate(robot.joint_names)},
    }
    if out is not None:
        band = credible_band(traj.q, prob=0.9)
        summary["figure"] = str(
            plot_rollout_band(
                Path(out),
                traj.t,
                band,
                robot=robot,
                truth=q_ref,
                truth_label="reference",
                title=f"{controller} tracking on {num_draws(draws)} posterior draws of "
                f"{result.variant} ({feedforward} feed-forward)",
            )
        )
    return summary
