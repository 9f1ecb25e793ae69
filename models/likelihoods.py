"""Likelihoods, the data they read, and the exact linear forms.

Three likelihoods (``build_model(..., likelihood=...)``):

``"forward"`` (the DiffNEA paper's loss): ``qdd_obs ~ N(f(q, qd, tau_d), sigma_qdd)`` per sample
    and joint, ``f`` = actuator + ABA of the draw. Observed site ``obs_qdd``. One ABA per sample per
    gradient. Measured or estimated accelerations alike.
``"inverse"``: ``tau_obs ~ N(actuator^-1(rnea(q, qd, qdd)), sigma_tau)``; observed site ``obs_tau``.
    Needs an invertible actuator (not ``ffnn``) and a white-box family.
``"rollout"``: RK4 over short windows from each window's first state under its measured
    ``tau_d``, ``q_obs ~ N(q_pred, sigma_q)``, ``qd_obs ~ N(qd_pred, sigma_qd)``; observed
    sites ``obs_q``, ``obs_qd``. Data are windows (W, H + 1, n) from :func:`rollout_windows`.

Noise scales are per joint, latent with broad log-normal priors around a typical size (5% of the
robot's characteristic acceleration or torque, 1e-3 rad or m for positions), or fixed by
``noise_scale=``; ``noise="student-t"`` uses Student-t errors (``student_df`` degrees of freedom).
``subsample_size`` subsamples samples (windows for ``"rollout"``) through
``numpyro.plate("data", N, subsample_size=...)`` with the usual ``N / subsample_size`` scaling.

**The cheap exact form.** With known kinematics the inverse-dynamics residual is linear in theta
and in viscous coefficients: ``tau_d = Y(q, qd, qdd) theta + diag(qd) mu_v``. For a Gaussian
likelihood its per-joint sufficient statistics ``A_j = sum_k phi_kj phi_kj^T``,
``b_j = sum_k phi_kj tau_kj``, ``c_j = sum_k tau_kj^2`` (``phi_kj`` = row j of ``[Y_k, diag(qd_k)]``)
are computed once (:func:`linear_statistics`, :meth:`BayesianModel.prepare`), and every evaluation
costs ``O(n p^2)`` whatever the number of samples. Exact for the variants
``diffnea/{ideal,viscous}/*`` and ``nea`` with ``likelihood="inverse"``, ``noise="normal"`` and
no subsampling; ``nokin-diffnea`` (latent kinematics), Stribeck (nonlinear in ``v_s``), the network
actuators and the forward and rollout likelihoods pay one ABA/RNEA per sample. The statistics
enter as ``numpyro.factor("obs_tau", ...)`` (no per-sample log-likelihood). Measured on the
cart-pole ``diffnea/viscous``, 200 samples, float64, gradients inside a jitted scan on 2 shared
cores: forward 255 us, inverse per sample 106 us, inverse on the statistics 1.6 us per gradient.
NEA's Gaussian prior makes its posterior Gaussian given the noise: :func:`nea_posterior`.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn

Array = jax.Array

LIKELIHOOD_NAMES = ("forward", "inverse", "rollout")
NOISE_NAMES = ("normal", "student-t")
SIGNALS = ("q", "qd", "qdd", "tau")


class ModelData(NamedTuple):
    """The arrays a model is conditioned on, joint order = ``robot.joint_names``.

    Fields:
        q, qd, qdd, tau: (N, n) each: positions, velocities, accelerations (measured or
            estimated), commanded efforts ``tau_d``. For ``likelihood="rollout"`` (W, H + 1, n):
            W windows of H + 1 consecutive samples (:func:`rollout_windows`).
    """

    q: Array
    qd: Array
    qdd: Array
    tau: Array


class LinearStats(NamedTuple):
    """Sufficient statistics of the linear inverse-dynamics likelihood (module docstring).

    Fields:
        A: (n, p, p) per-joint ``sum_k phi_kj phi_kj^T``, p = 10 n (+ n with viscous friction).
        b: (n, p) per-joint ``sum_k phi_kj tau_kj``.
        c: (n,) per-joint ``sum_k tau_kj^2``.
        count: () number of samples N.
    """

    A: Array
    b: Array
    c: Array
    count: Array


def model_data(dataset, *, robot: bn.Robot | None = None, dtype=None) -> ModelData:
    """``ModelData`` (N, n) from a ``data.Dataset`` (episodes concatenated).

    Args:
        dataset: a ``data.Dataset``.
        robot: if given, the dataset's joint names must match ``robot.joint_names``.
        dtype: array dtype (default float64 if enabled, else float32).

    Raises:
        ValueError: joint names differ from the robot's, or the data are empty or not finite.
    """
    if robot is not None and tuple(dataset.joint_names) != tuple(robot.joint_names):
        raise ValueError(
            f"dataset joints {list(dataset.joint_names)} do not match robot {robot.name!r} "
            f"joints {list(robot.joint_names)} (same names, same order required)"
        )
    dtype = dtype or jnp.result_type(float)
    data = ModelData(*(jnp.asarray(x, dtype) for x in dataset.arrays()))
    check_data(data, n=len(dataset.joint_names), what=f"dataset {dataset.system!r}")
    return data


def rollout_windows(dataset, horizon: int, *, stride: int | None = None, dtype=None) -> ModelData:
    """Windows (W, horizon + 1, n) of consecutive samples for the rollout likelihood.

    Windows never cross episodes; they start every ``stride`` samples (default ``horizon``:
    non-overlapping, sharing end points).

    Args:
        dataset: a ``data.Dataset`` (uniformly sampled episodes) or a ``ModelData`` of one
            contiguous (N, n) trajectory.
        horizon: RK4 steps per window H >= 1.

    Raises:
        ValueError: ``horizon < 1`` or no episode is long enough.
    """
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    stride = horizon if stride is None else stride
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    if isinstance(dataset, ModelData):
        episodes = [tuple(np.asarray(x) for x in dataset)]
    else:
        episodes = [(e.q, e.qd, e.qdd, e.tau) for e in dataset.episodes]
    windows = []
    for ep in episodes:
        T = ep[0].shape[0]
        for s in range(0, T - horizon, stride):
            windows.append([x[s : s + horizon + 1] for x in ep])
    if not windows:
        raise ValueError(
            f"no episode has more than horizon = {horizon} samples; use a shorter horizon"
        )
    dtype = dtype or jnp.result_type(float)
    return ModelData(*(jnp.asarray(np.stack([w[k] for w in windows]), dtype) for k in range(4)))


def check_data(data, *, n: int, what: str = "data", ndim: int = 2) -> None:
    """Raise ``ValueError`` for data that cannot condition a model of ``n`` joints.

    Shapes are always checked; NaN / inf only for concrete (untraced) arrays.
    """
    if not isinstance(data, ModelData):
        raise ValueError(f"{what}: expected ModelData(q, qd, qdd, tau), got {type(data).__name__}")
    shape = None
    for name, x in zip(SIGNALS, data, strict=True):
        s = tuple(np.shape(x))
        if len(s) != ndim or s[-1] != n:
            layout = "(N, n)" if ndim == 2 else "(W, H + 1, n)"
            raise ValueError(f"{what}: {name} has shape {s}, expected {layout} with n = {n} joints")
        if shape is not None and s != shape:
            raise ValueError(f"{what}: {name} has shape {s} but q has {shape}")
        shape = s
        if s[0] == 0:
            raise ValueError(f"{what}: no samples (q has shape {s})")
        if not isinstance(x, jax.core.Tracer) and not np.all(np.isfinite(np.asarray(x))):
            bad = int(np.sum(~np.isfinite(np.asarray(x))))
            raise ValueError(f"{what}: {name} has {bad} NaN or inf entries; drop or fill them")
    if ndim == 3 and shape[1] < 2:
        raise ValueError(f"{what}: windows need at least 2 samples, got {shape[1]}")


# --- the linear inverse-dynamics form ---------------------------------------------------------


def linear_features(robot: bn.Robot, q, qd, qdd, *, viscous: bool, params=None) -> Array:
    """``Phi`` (n, p) with ``tau_d = Phi [theta_flat; mu_v]`` (``mu_v`` only if ``viscous``)."""
    Y = bn.joint_torque_regressor(robot, q, qd, qdd, params=params)
    return jnp.concatenate([Y, jnp.diag(qd)], axis=1) if viscous else Y


def linear_statistics(robot: bn.Robot, data: ModelData, *, viscous: bool) -> LinearStats:
    """:class:`LinearStats` of (N, n) data with the robot's nominal kinematics (one pass, jitted)."""
    check_data(data, n=robot.n)

    @jax.jit
    def stats(q, qd, qdd, tau):
        Phi = jax.vmap(lambda a, b, c: linear_features(robot, a, b, c, viscous=viscous))(q, qd, qdd)
        A = jnp.einsum("knp,knr->npr", Phi, Phi)
        b = jnp.einsum("knp,kn->np", Phi, tau)
        c = jnp.sum(tau * tau, axis=0)
        return LinearStats(A, b, c, jnp.asarray(q.shape[0], q.dtype))

    return stats(*data)


def linear_log_likelihood(stats: LinearStats, w: Array, sigma: Array) -> Array:
    """Gaussian log-likelihood of all samples from :class:`LinearStats`: O(n p^2), exact.

    ``sum_j [-N log(sqrt(2 pi) sigma_j) - (c_j - 2 w.b_j + w^T A_j w) / (2 sigma_j^2)]``.
    """
    quad = jnp.einsum("p,npr,r->n", w, stats.A, w)
    sse = stats.c - 2 * (stats.b @ w) + quad
    N = stats.count
    return jnp.sum(-N * jnp.log(sigma) - 0.5 * N * jnp.log(2 * jnp.pi) - 0.5 * sse / sigma**2)


def nea_posterior(bayes_model, data: ModelData | LinearStats, *, noise_scale=None):
    """Exact Gaussian posterior of NEA's theta given the noise scale (conjugate linear model).

    ``P = S0^-1 + sum_j A_j / sigma_j^2``, ``mean = P^-1 (S0^-1 mu0 + sum_j b_j / sigma_j^2)``
    with the prior ``theta ~ N(mu0, S0)`` (diagonal) of ``bayes_model``.

    Args:
        bayes_model: a model of the ``"nea"`` family.
        data: (N, n) ``ModelData`` or its :class:`LinearStats`.
        noise_scale: () or (n,) torque noise sd; default the model's fixed ``noise_scale``.

    Returns:
        ``(mean (n, 10), cov (10 n, 10 n))`` in float64 numpy.

    Raises:
        ValueError: not an NEA model, or no noise scale known.
    """
    if bayes_model.spec.family != "nea":
        raise ValueError(f"nea_posterior needs an 'nea' model, got {bayes_model.spec.name!r}")
    sigma = bayes_model.noise_scale if noise_scale is None else noise_scale
    if sigma is None:
        raise ValueError(
            "nea_posterior needs the torque noise scale: pass noise_scale= or build the model "
            "with a fixed noise_scale"
        )
    robot = bayes_model.robot
    n = robot.n
    sigma = np.broadcast_to(np.asarray(sigma, dtype=np.float64), (n,))
    stats = data if isinstance(data, LinearStats) else linear_statistics(robot, data, viscous=False)
    A = np.asarray(stats.A, dtype=np.float64)
    b = np.asarray(stats.b, dtype=np.float64)
    prior = bayes_model.family.theta.prior
    mu0 = prior.loc.reshape(-1)
    s0 = prior.scale.reshape(-1)
    w = 1.0 / sigma**2
    P = np.diag(1.0 / s0**2) + np.einsum("n,npr->pr", w, A)
    rhs = mu0 / s0**2 + np.einsum("n,np->p", w, b)
    L = np.linalg.cholesky(P)
    mean = np.linalg.solve(L.T, np.linalg.solve(L, rhs))
    Linv = np.linalg.solve(L, np.eye(P.shape[0]))
    cov = Linv.T @ Linv
    return mean.reshape(n, 10), cov
