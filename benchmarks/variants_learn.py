"""Do the network and weak-prior variants learn? Held-out accelerations per variant (issue 11).

For each system and dataset kind: make ``--duration`` s of data in ``--episode-duration`` s
episodes, split by whole episodes (70/15/15 %; shuffled, or with ``--split envelope`` the episodes
that reach the largest speed of a joint or effort train), derive the network/noise normalisers from
the training split (``models.data_scales``, stored in the model spec) and fit each variant with
``fit_svi`` at its defaults (prior-draw starts with restarts where the model has networks or learned
placements; the ``"auto"`` guide: a MAP for white-box models, an ensemble of MAPs from 4 prior draws
for network models, each member stopping early on the validation episodes, whose noise scales are
then calibrated on them, ``fit_svi(validation=...)``, unless ``--no-early-stopping``). The held-out
(test) episodes are seen by no fit. White-box variants with a base-parameter geometry
(``models.identifiable``) are fitted in it with a polished MAP, the library's path to NUTS
(``--white-box-geometry whitened``: in the virtual parameters). One table row per variant:

- held-out acceleration NMSE per joint of the posterior-mean prediction, against the recorded
  accelerations and against the true system's noise-free accelerations at the recorded inputs
  (the recorded ones carry noise no model can predict: unrecorded action noise on the
  trajectories data puts the true model itself at NMSE ~0.065/0.099 on the cart-pole);
- the largest relative error of the base parameters (white-box variants with known kinematics)
  against the truth;
- learned kinematics: how many open-loop replays of the recorded efforts from each episode's
  start state (1 s; by each of the first 4 draws, an ensemble's weighted members) leave the
  state domain
  (``analysis.energy.divergence_flags``), beside the count for the recorded trajectories;
- whether the fit converged (loss plateau and gradient test; with ``polish``: a stationary point
  with a positive definite Hessian; with early stopping: a validation minimum), the restarts'
  loss spread, the steps each early-stopped stage kept (MAP + Gaussian), wall s;
- network variants: the 90 % posterior-predictive band (noise included) of the held-out
  accelerations: mean width and coverage per joint (``analysis.diagnostics.heldout_ppc``), and
  the coverage on each of ``--extra-test`` s of further episodes (an independent recording of
  the same plant): one 5 s test episode is a single draw of how hard an episode is.
- network variants: the fraction of held-out states outside the training data's support
  (``analysis.support``: farther from every training state than the 0.95 quantile of the
  training episodes' distances to each other), and the band's coverage inside and outside it.

Kinds: ``trajectories`` and ``hardware`` (this library's generator) and ``foreign``: a log a user
would bring: Pinocchio (a dynamics library we did not write) integrates the system with RK4 at
250 Hz under a multisine force with a centring PD on the actuated joint, from random pendulum
angles; each joint has viscous, tanh-smoothed Coulomb and quadratic drag friction (drag matches
no built-in actuator model); recorded accelerations and efforts get noise; the log is written as
CSV and imported with ``data.import_log`` against a URDF with every mass 40 % heavy and every
inertia 35 % light (the model's "informative" prior is centred on that wrong URDF).

    python benchmarks/variants_learn.py [--systems cartpole furuta] [--kinds trajectories
        hardware foreign] [--duration 30] [--episode-duration 5] [--steps 3000] [--variants ...]
        [--noise normal|student-t|student-t-learned|effort]

``--noise effort``: the network hybrids (a rigid-body part and networks) get
``likelihood="forward-effort"`` (noise on the effort, mapped through the draw's mass matrix, as
well as on the accelerations); ``ffnn`` and the white-box references keep Normal noise.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import bayes_nea as bn  # noqa: E402
from analysis.diagnostics import heldout_ppc, heldout_predictions  # noqa: E402
from analysis.energy import divergence_flags  # noqa: E402
from analysis.resources import release_compiled_programs  # noqa: E402
from analysis.rollouts import make_rollout_fn, thin_draws  # noqa: E402
from analysis.support import training_support  # noqa: E402
from data import generate_dataset, import_log  # noqa: E402
from inference import default_guide, fit_svi  # noqa: E402
from models import build_model, data_scales, model_data  # noqa: E402
from models.identifiable import identifiable_where_possible  # noqa: E402

VARIANTS = {
    "trajectories": (
        "ffnn",
        "diffnea/viscous/informative",
        "diffnea/ffnn/informative",
        "diffnea/viscous/weak",
        "nokin-diffnea/viscous/informative",
        "nokin-diffnea/ffnn/informative",
        "nokin-diffnea/viscous/weak",
    ),
    "hardware": (
        "diffnea/stribeck/informative",
        "diffnea/nn-friction/informative",
        "diffnea/nn-residual/informative",
        "diffnea/stribeck/weak",
        "nokin-diffnea/stribeck/informative",
        "nokin-diffnea/nn-friction/informative",
        "nokin-diffnea/nn-residual/informative",
        "nokin-diffnea/stribeck/weak",
    ),
    "foreign": (
        "ffnn",
        "diffnea/viscous/informative",
        "diffnea/nn-friction/informative",
        "diffnea/nn-residual/informative",
    ),
}

RATE_HZ = 250.0
FOREIGN_FRICTION = {  # per joint: viscous, Coulomb (tanh over 0.02 rad/s or m/s), quadratic drag
    "cartpole": {"viscous": (4.3, 0.0024), "coulomb": (0.8, 0.002), "drag": (2.0, 5e-4)},
    "furuta": {"viscous": (1.5e-5, 5e-6), "coulomb": (1e-3, 2e-5), "drag": (2e-5, 2e-6)},
}
FOREIGN_CENTRING = {"cartpole": (60.0, 10.0), "furuta": (0.05, 0.005)}  # PD gains, actuated joint
FOREIGN_NOISE = 0.02  # sd of the recorded qdd / tau noise, fraction of their rms
REPLAY_SECONDS = 1.0


def scale_inertials(urdf: str, mass: float, inertia: float) -> str:
    """URDF text with every ``<mass>`` times ``mass`` and every inertia entry times ``inertia``."""
    urdf = re.sub(r'<mass value="([^"]+)"', lambda m: f'<mass value="{float(m[1]) * mass!r}"', urdf)
    return re.sub(
        r'(i(?:xx|yy|zz|xy|xz|yz))="([^"]+)"', lambda m: f'{m[1]}="{float(m[2]) * inertia!r}"', urdf
    )


def foreign_log(system: str, path: str, *, seconds: float, episode: float, seed: int):
    """Simulate ``system`` with Pinocchio and write the importer's CSV to ``path``.

    Returns the noise-free accelerations (N, n) in the log's row order.
    """
    import pinocchio as pin

    robot = bn.get_system(system)
    # Pinocchio gives a continuous joint a (cos, sin) configuration; the log's angle is unwrapped
    urdf = bn.to_urdf(robot).replace('type="continuous"', 'type="revolute"')
    model = pin.buildModelFromXML(urdf)
    data = model.createData()
    assert [model.names[i] for i in range(1, model.njoints)] == list(robot.joint_names)
    fr = {k: np.asarray(v, dtype=float) for k, v in FOREIGN_FRICTION[system].items()}
    kp, kd = FOREIGN_CENTRING[system]
    umax = float(robot.effort_limit[0])
    rng = np.random.default_rng(seed)
    n, dt = robot.n, 1.0 / RATE_HZ

    def qdd_of(q, qd, u):
        friction = fr["viscous"] * qd + fr["coulomb"] * np.tanh(qd / 0.02) + fr["drag"] * qd * abs(qd)
        return pin.aba(model, data, q, qd, u - friction)

    rows = []
    for e in range(max(3, int(round(seconds / episode)))):
        q, qd = np.array([0.0, rng.uniform(-np.pi, np.pi)]), np.zeros(n)
        freq, phase = rng.uniform(0.3, 3.0, 4), rng.uniform(0.0, 2 * np.pi, 4)
        amp = rng.uniform(0.05, 0.15) * umax
        for k in range(int(round(episode * RATE_HZ))):
            t = k * dt
            force = -kp * q[0] - kd * qd[0] + amp * np.sin(2 * np.pi * freq * t + phase).sum()
            u = np.array([np.clip(force, -umax, umax), 0.0])
            k1 = qdd_of(q, qd, u)
            q2, qd2 = q + 0.5 * dt * qd, qd + 0.5 * dt * k1
            k2 = qdd_of(q2, qd2, u)
            q3, qd3 = q + 0.5 * dt * qd2, qd + 0.5 * dt * k2
            k3 = qdd_of(q3, qd3, u)
            q4, qd4 = q + dt * qd3, qd + dt * k3
            k4 = qdd_of(q4, qd4, u)
            rows.append([e, t, *q, *qd, *k1, *u])
            q = q + dt / 6 * (qd + 2 * qd2 + 2 * qd3 + qd4)
            qd = qd + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    rows = np.asarray(rows)
    clean = rows[:, 2 + 2 * n : 2 + 3 * n].copy()
    for cols in (slice(2 + 2 * n, 2 + 3 * n), slice(2 + 3 * n, 2 + 4 * n)):  # qdd, tau
        sd = FOREIGN_NOISE * np.sqrt(np.mean(rows[:, cols] ** 2, axis=0))
        rows[:, cols] += sd * rng.standard_normal(rows[:, cols].shape)
    names = robot.joint_names
    header = ["trajectory", "t"] + [f"{s}_{j}" for s in ("q", "qd", "qdd", "tau") for j in names]
    np.savetxt(path, rows, delimiter=",", header=",".join(header), comments="", fmt="%.17g")
    return clean


def dataset_for(system: str, kind: str, args, workdir: str):
    """``(train, valid, test, robot, clean_test_qdd, true_theta)`` for one system and dataset
    kind (splits by whole episode, 70/15/15 %)."""
    if kind == "foreign":
        path = os.path.join(workdir, f"{system}-foreign.csv")
        clean = foreign_log(
            system, path, seconds=args.duration, episode=args.episode_duration, seed=args.seed
        )
        true_robot = bn.get_system(system)
        user_urdf = scale_inertials(bn.to_urdf(true_robot), mass=1.4, inertia=0.65)
        robot = bn.load_urdf(user_urdf)
        ds = import_log(path, robot, system=system)
        train, valid, test = ds.split(seed=args.seed, envelope=args.split == "envelope")
        per_episode = clean.reshape(len(ds.episodes), -1, robot.n)
        clean_test = np.concatenate([per_episode[i] for i in test.settings["split"]["episodes"]])
        return train, valid, test, robot, clean_test, np.asarray(true_robot.nominal[0])
    ds = generate_dataset(
        system, kind, seed=args.seed, duration=args.duration,
        episode_duration=args.episode_duration,
    )
    train, valid, test = ds.split(seed=args.seed, envelope=args.split == "envelope")
    robot = ds.robot()
    q, qd, _, tau = (jnp.asarray(x) for x in test.arrays())
    clean = np.asarray(jax.jit(jax.vmap(test.true_dynamics(robot)))(q, qd, tau))
    return train, valid, test, robot, clean, np.asarray(ds.true_params["theta"])


def extra_test_for(system: str, kind: str, args, workdir: str, robot, true_theta):
    """``args.extra_test`` s of further held-out episodes: an independent recording (seed + 1)
    of the same plant, seen by no fit, for coverage over several episodes."""
    seed = args.seed + 1
    if kind == "foreign":
        path = os.path.join(workdir, f"{system}-foreign-extra.csv")
        foreign_log(system, path, seconds=args.extra_test, episode=args.episode_duration, seed=seed)
        return import_log(path, robot, system=system)
    ds = generate_dataset(
        system, kind, seed=seed, duration=args.extra_test, episode_duration=args.episode_duration
    )
    if not np.allclose(np.asarray(ds.true_params["theta"]), true_theta):
        raise RuntimeError(f"{system}/{kind}: seed {seed} simulates another plant")
    return ds


def episode_coverage(model, fit, extra) -> str:
    """90 % band coverage per joint on each episode of ``extra``: ``mean [min-max]`` per joint."""
    cov = np.array(
        [
            heldout_ppc(model, fit, extra.replace(episodes=(ep,)))["coverage_per_joint"]
            for ep in extra.episodes
        ]
    )
    return "/".join(
        f"{m:.3g} [{lo:.2f}-{hi:.2f}]"
        for m, lo, hi in zip(cov.mean(0), cov.min(0), cov.max(0), strict=True)
    )


def nmse(pred, truth) -> np.ndarray:
    pred, truth = np.asarray(pred), np.asarray(truth)
    return np.mean((pred - truth) ** 2, axis=0) / np.var(truth, axis=0)


def base_error(model, draws, robot, true_theta):
    """Largest relative error of the posterior-mean base parameters, or None; a base parameter
    whose true value is below 1 % of the largest (e.g. 0: a first moment of a symmetric body) is
    compared relative to 1 % of the largest (an error of 1e-7 kg m^2 on a true 0 is no 7 %)."""
    fam = model.family
    if not fam.white_box or fam.learns_kinematics or not fam.linear_in_theta:
        return None
    B = np.asarray(bn.base_parameters(robot, 0).to_base)
    if hasattr(model, "beta"):  # identifiable geometry: its base parameters, not E[theta | beta]
        fit = np.asarray(jax.vmap(model.beta)(draws)).mean(axis=0)
    else:
        theta = np.asarray(jax.vmap(model.physical)(draws)["theta"]).mean(axis=0)
        fit = B @ theta.reshape(-1)
    true = B @ np.asarray(true_theta).reshape(-1)
    return float(np.max(np.abs(fit - true) / np.maximum(np.abs(true), 1e-2 * np.abs(true).max())))


def weighted_members(fit) -> dict:
    """An ensemble's members with non-zero weight (never a mean of network weights, which would
    be no member's network), else the posterior draws: the draws to replay."""
    members = fit.ensemble_members()
    if members is None:
        return fit.posterior_samples()
    kept = np.flatnonzero(fit.ensemble_weights())
    return {k: v[kept] for k, v in members.items()}


def replays_out_of_domain(model, draws, episodes, robot) -> tuple[int, int, int]:
    """Open-loop replays of each episode's recorded efforts from its start state by each of the
    first (up to) 4 of ``draws`` (:func:`weighted_members`): ``(replays out of domain, recorded
    episodes out of domain, replays)``."""
    steps = int(round(REPLAY_SECONDS * RATE_HZ))
    first = jax.tree.map(lambda x: x[:4], draws)
    count = int(next(iter(first.values())).shape[0])
    rollout = make_rollout_fn(model.qdd_fn, steps=steps, dt=1.0 / RATE_HZ)
    out = recorded = 0
    for ep in episodes:
        traj = rollout(first, jnp.asarray(ep.q[0]), jnp.asarray(ep.qd[0]), jnp.asarray(ep.tau[:steps]))
        out += int(np.sum(divergence_flags(robot, traj.q, traj.qd)))
        recorded += int(divergence_flags(robot, ep.q[None, : steps + 1], ep.qd[None, : steps + 1])[0])
    return out, recorded, count * len(episodes)


def fmt(x) -> str:
    return "/".join(f"{v:.3g}" for v in np.atleast_1d(x))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="+", default=["cartpole", "furuta"])
    p.add_argument("--kinds", nargs="+", default=["trajectories", "hardware", "foreign"])
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--episode-duration", type=float, default=5.0)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--variants", nargs="+", default=None, help="default: per kind (VARIANTS)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--split",
        choices=("random", "envelope"),
        default="random",
        help="episodes into training/validation/test: shuffled (default), or the episodes with "
        "the largest speed of a joint or effort to training first (Dataset.split(envelope=True))",
    )
    p.add_argument(
        "--extra-test",
        type=float,
        default=30.0,
        help="seconds of further held-out episodes (an independent recording of the same plant, "
        "seed + 1) on which network bands' coverage is measured per episode (0: none)",
    )
    p.add_argument(
        "--white-box-geometry",
        choices=("identifiable", "whitened"),
        default="identifiable",
        help="white-box variants: base-parameter coordinates and a polished MAP (the library's "
        "NUTS path, as the main job) or the whitened virtual parameters",
    )
    p.add_argument(
        "--noise",
        choices=("normal", "student-t", "student-t-learned", "effort"),
        default="normal",
        help="observation noise of every model (student-t: 4 degrees of freedom, for recorded "
        "accelerations with heavy-tailed errors such as filtered differences; student-t-learned: "
        "the degrees of freedom a latent per joint, student_df=None; effort: Normal, and the "
        "network hybrids also get noise on the effort, likelihood='forward-effort')",
    )
    p.add_argument(
        "--tails",
        choices=("auto", "trained", "profiled"),
        default="auto",
        help="with --noise student-t-learned, the ensembles' degrees of freedom: learned with the "
        "network weights or profiled after them (fit_svi's tails; auto: profiled)",
    )
    p.add_argument(
        "--no-early-stopping",
        action="store_true",
        help="network variants: run every step (default: early stopping on the validation "
        "episodes, inference.early_stopping)",
    )
    args = p.parse_args(argv)
    noise = {"noise": args.noise}
    if args.noise == "student-t-learned":
        noise = {"noise": "student-t", "student_df": None}
    if args.noise == "effort":
        noise = {"noise": "normal"}
    print(
        f"# variants learn: {args.duration:g} s per dataset in {args.episode_duration:g} s "
        f"episodes, {args.steps} SVI steps, seed {args.seed}, {args.noise} noise\n"
    )
    head = (
        "| variant | NMSE recorded | NMSE noise-free | base err | replays out | converged | "
        "grad rms/sqrt(N) | restarts spread | kept steps | s | guide | 90 % band width | "
        "coverage | coverage, more episodes: mean [min-max] | held-out outside support "
        "(coverage inside / outside; NMSE inside / outside) |"
    )
    with tempfile.TemporaryDirectory() as workdir:
        for system in args.systems:
            for kind in args.kinds:
                train, valid, test, robot, clean, true_theta = dataset_for(
                    system, kind, args, workdir
                )
                extra = (
                    extra_test_for(system, kind, args, workdir, robot, true_theta)
                    if args.extra_test > 0
                    else None
                )
                md = model_data(train, robot=robot)
                scales = data_scales(md, robot)
                support = training_support(train)
                print(
                    f"## {system} / {kind}: {md.q.shape[0]} training, {test.arrays()[0].shape[0]} "
                    "held-out samples"
                )
                print(head)
                print("|" + " --- |" * (head.count("|") - 1))
                for variant in args.variants or VARIANTS[kind]:
                    # a process fitting dozens of variants reaches vm.max_map_count (README)
                    release_compiled_programs()
                    model = build_model(variant, robot, scales=scales, **noise)
                    if args.noise == "effort" and model.has_networks and model.family.white_box:
                        model = build_model(model.spec, likelihood="forward-effort")
                    identifiable = False
                    if args.white_box_geometry == "identifiable":
                        model, geometry = identifiable_where_possible(model)
                        identifiable = geometry == "identifiable"
                    t0 = time.perf_counter()
                    fit = fit_svi(
                        model, md, key=args.seed, steps=args.steps, num_samples=200,
                        progress=False, num_predictive=0, log_likelihood=False,
                        polish=identifiable,
                        # white-box references: the one MAP learns its tails with the rest
                        tails=args.tails if default_guide(model) == "ensemble" else "auto",
                        validation=model_data(valid, robot=robot)
                        if getattr(model, "has_networks", False) and not args.no_early_stopping
                        else None,
                    )
                    wall = time.perf_counter() - t0
                    draws = thin_draws(fit.posterior_samples(), 200)
                    mean = heldout_predictions(model, draws, test).mean(axis=0)
                    c, r = fit.attrs["convergence"], fit.attrs["restarts"]
                    err = base_error(model, draws, robot, true_theta)
                    replays = "-"
                    if model.family.learns_kinematics:
                        out, rec, k = replays_out_of_domain(
                            model, weighted_members(fit), train.episodes + test.episodes, robot
                        )
                        replays = f"{out}/{k} (recorded {rec})"
                    guide = fit.attrs["settings"]["guide"] + (" (base coords)" if identifiable else "")
                    stages = fit.attrs.get("early_stopping") or ()
                    kept = " + ".join(str(st["best_step"]) for st in stages) or "-"
                    if args.noise == "student-t-learned":  # the draws' median learned df
                        df = jax.vmap(model.physical)(draws)["df_qdd"]
                        guide += f", df {fmt(np.median(np.asarray(df), axis=0))}"
                    band = cover = more = outside = "-"
                    if not guide.startswith("delta"):
                        ppc = heldout_ppc(model, fit, test, support=support)
                        band, cover = fmt(ppc["width_per_joint"]), fmt(ppc["coverage_per_joint"])
                        parts = (
                            ppc[f"{what}_{side}_support_per_joint"]
                            for what in ("coverage", "nmse")
                            for side in ("inside", "outside")
                        )
                        sides = ("-" if part is None else fmt(part) for part in parts)
                        outside = f"{ppc['outside_support']:.3f} ({'; '.join(sides)})"
                        if extra is not None:
                            more = f"{len(extra.episodes)}: {episode_coverage(model, fit, extra)}"
                    print(
                        f"| {variant} | {fmt(nmse(mean, test.arrays()[2]))} | {fmt(nmse(mean, clean))}"
                        f" | {'-' if err is None else f'{err:.3g}'} | {replays} | {c['converged']} "
                        f"(loss {c['loss_converged']}) | {c['grad_relative']:.3g} | "
                        f"{'-' if r is None else f'{r['spread']:.3g} ({r['restarts']})'} | "
                        f"{kept} | {wall:.0f} | {guide} | {band} | {cover} | {more} | {outside} |",
                        flush=True,
                    )
                print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
