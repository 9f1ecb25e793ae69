"""Likelihoods, the data they read, and the exact linear forms.

Four likelihoods (``build_model(..., likelihood=...)``, :data:`LIKELIHOOD_NAMES`):

``"forward"`` (the DiffNEA paper's loss): ``qdd_obs ~ N(f(q, qd, tau_d), sigma_qdd)`` per sample
    and joint, ``f`` = actuator + ABA of the draw. Observed site ``obs_qdd``. One ABA per sample per
    gradient. Measured or estimated accelerations alike.
``"forward-effort"``: the same mean, with the noise on the effort as well:
    ``qdd_obs ~ N(f, M(q)^-1 diag(sigma_tau^2) M(q)^-T + diag(sigma_qdd^2))`` per sample, ``M`` the
    draw's mass matrix (CRBA). The model of a plant whose applied effort differs from the
    recorded command by unrecorded noise (action noise, torque ripple) and whose accelerations
    are measured with noise: ``qdd = M^-1 (tau + w - h) + r``. Its acceleration noise then
    depends on the state, as ``M(q)^-1`` does, which one ``sigma_qdd`` per joint cannot follow
    (``docs/measurements.md``, "Noise on the effort"). Normal noise, latent scales, a family
    with a rigid-body part (not ``ffnn``); one ABA and one CRBA per sample. Observed site
    ``obs_qdd`` (one multivariate Normal per sample).
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
enter as ``numpyro.factor("obs_tau", ...)``; the per-sample form gives the pointwise
log-likelihood of the same fit. Measured gradient costs: ``docs/measurements.md``.
NEA's Gaussian prior makes its posterior Gaussian given the noise: :func:`nea_posterior`.

**Rollout windows compiled once.** The rollout likelihood's predictions (an RK4 ``lax.scan``
over every window) run through one ``jax.jit`` of the model, the draw and the windows
(:func:`predictions`). NumPyro runs a model outside ``jit`` while it sets inference up (tracing
the sites, a valid start and its gradient), and there a ``lax.scan`` is compiled anew on every
run. Under an outer trace (SVI steps, NUTS) the nested ``jit`` is inlined, so values and
gradients are those of the plain code. The per-sample likelihoods stay eager there: their
operations compile once per shape and are shared by every model of a robot, where a ``jit``
would compile once per model.

**Likelihoods are components.** Each owns its data form and its checks:
:meth:`Likelihood.observations` turns a ``data.Dataset`` or arrays into validated
:class:`ModelData` in its layout, :meth:`Likelihood.prepare` into what the model is conditioned
on, and :meth:`Likelihood.observe` declares the observed sites. :func:`make_likelihood` picks
:class:`LinearInverse` (exact sufficient statistics) where the model is linear in its parameters.
"""

from __future__ import annotations

import abc
import dataclasses
import functools
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

import bayes_nea as bn
from models.spec import LIKELIHOOD_NAMES, NOISE_NAMES  # noqa: F401  (re-exported)

Array = jax.Array

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


def check_data(data, *, n: int, what: str = "data", ndim: int = 2) -> ModelData:
    """The one data check: ``data`` as :class:`ModelData` of JAX arrays, or ``ValueError``.

    Accepts any object with fields ``q, qd, qdd, tau``. Checks float dtypes, layout ``(N, n)``
    (``ndim=2``) or ``(W, H + 1, n)`` (``ndim=3``), equal shapes, at least one sample and, for
    concrete (untraced) arrays, finite values (the message names the first bad sample).
    """
    missing = [f for f in SIGNALS if not hasattr(data, f)]
    if missing:
        raise ValueError(
            f"{what}: lacks fields {missing}; expected models.ModelData(q, qd, qdd, tau) or a "
            "data.Dataset"
        )
    layout = "(N, n)" if ndim == 2 else "(W, H + 1, n)"
    shape = None
    arrays = []
    for name in SIGNALS:
        x = getattr(data, name)
        traced = isinstance(x, jax.core.Tracer)
        s = tuple(np.shape(x))
        dtype = x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype
        if not jnp.issubdtype(dtype, jnp.floating):
            raise ValueError(f"{what}: {name} has dtype {dtype}; expected float32 or float64")
        if len(s) != ndim:
            raise ValueError(f"{what}: {name} has shape {s}, expected {layout} with n = {n} joints")
        if s[-1] != n:
            raise ValueError(
                f"{what}: {name} has {s[-1]} joints (shape {s}) but the robot has n = {n} joints; "
                f"expected {layout}"
            )
        if shape is not None and s != shape:
            raise ValueError(f"{what}: {name} has shape {s} but q has {shape} (different lengths)")
        shape = s
        if s[0] == 0:
            raise ValueError(f"{what}: is empty, no samples ({name} has shape {s})")
        if not traced:
            bad = ~np.isfinite(np.asarray(x))
            if bad.any():
                first = int(np.argwhere(bad)[0][0])
                raise ValueError(
                    f"{what}: {name} has {int(bad.sum())} non-finite (NaN or inf) entries, first in sample "
                    f"{first}; drop or repair those samples"
                )
        arrays.append(x if traced else jnp.asarray(x))
    if ndim == 3 and shape[1] < 2:
        raise ValueError(f"{what}: windows need at least 2 samples, got {shape[1]}")
    if isinstance(data, ModelData) and all(a is b for a, b in zip(arrays, data, strict=True)):
        return data
    return ModelData(*arrays)


def is_dataset(data) -> bool:
    """Whether ``data`` is a ``data.Dataset`` (episodes with joint names), not arrays."""
    return hasattr(data, "episodes") and hasattr(data, "joint_names")


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


class JointMajorNoise(dist.Distribution):
    """Normal or Student-t noise around predictions held joint-major, as one observation site.

    ``rows`` (n, N) are the predictions of N samples stored per joint (contiguous over samples);
    ``scale`` (n,) the per-joint sd; ``df`` the Student-t degrees of freedom, a scalar or one
    per joint (n,) (None: Normal).
    Batch shape (N,), event shape (n,): values are (N, n) like every other observed site, so
    ``log_prob`` agrees with ``Normal(rows.T, scale).to_event(1)`` (or Student-t) to rounding,
    but its arithmetic runs on the (n, N) rows. Why: on a batch-major (N, n) layout every
    per-joint sum is strided; the identifiable forward likelihood's potential gradient at 50,000
    Furuta samples took 2.4-2.5 ms with ``Normal`` on (N, n), 1.3 ms with this
    (``docs/inference-geometry.md``).
    """

    arg_constraints = {}
    support = constraints.real_vector
    reparametrized_params = ["rows", "scale"]

    def __init__(self, rows, scale, df=None, *, validate_args=None):
        self.rows, self.scale, self.df = rows, scale, df
        n, N = jnp.shape(rows)
        super().__init__(batch_shape=(N,), event_shape=(n,), validate_args=validate_args)

    def _standard(self, ndim: int):
        """The unit noise, its parameters broadcastable against (..., n, N) of ``ndim`` axes."""
        if self.df is None:
            return dist.Normal(jnp.zeros((), self.rows.dtype), 1.0)
        df = jnp.asarray(self.df, self.rows.dtype)
        return dist.StudentT(df if df.ndim == 0 else self._lead(df[:, None], ndim))

    def _lead(self, x, ndim: int):
        """``x`` (n, N) or (n, 1) with ``ndim - 2`` leading unit axes (explicit broadcasting)."""
        return jnp.reshape(x, (1,) * (ndim - 2) + jnp.shape(x))

    def sample(self, key, sample_shape=()):
        shape = tuple(sample_shape) + jnp.shape(self.rows)
        standard = self._standard(len(shape))
        if standard.batch_shape:  # per-joint df (..., n, 1): one df per element, one draw each
            standard = dist.StudentT(jnp.broadcast_to(standard.df, shape))
            shape = ()
        eps = standard.sample(key, shape)
        rows, scale = self._lead(self.rows, eps.ndim), self._lead(self.scale[:, None], eps.ndim)
        return jnp.swapaxes(rows + scale * eps, -1, -2)

    def log_prob(self, value):
        value = jnp.swapaxes(value, -1, -2)
        rows, scale = self._lead(self.rows, value.ndim), self._lead(self.scale[:, None], value.ndim)
        z = (value - rows) / scale
        return jnp.sum(self._standard(value.ndim).log_prob(z) - jnp.log(scale), axis=-2)

    @property
    def mean(self):
        return self.rows.T


def conjugate_gaussian_posterior(prior_mean, prior_sd, precision_data, rhs_data):
    """Posterior of ``w ~ N(m0, diag(s0^2))`` under a linear-Gaussian likelihood (Bishop 2006,
    eq. 3.50-3.51): ``P = diag(s0^-2) + F^T S^-1 F``, ``mean = P^-1 (m0 / s0^2 + F^T S^-1 y)``.

    Args:
        prior_mean, prior_sd: (p,) independent Gaussian prior.
        precision_data: (p, p) ``F^T S^-1 F`` (noise-weighted normal matrix).
        rhs_data: (p,) ``F^T S^-1 y``.

    Returns:
        ``(mean (p,), cov (p, p))`` in float64 numpy.
    """
    m0 = np.asarray(prior_mean, dtype=np.float64)
    s0 = np.asarray(prior_sd, dtype=np.float64)
    P = np.diag(1.0 / s0**2) + np.asarray(precision_data, dtype=np.float64)
    rhs = m0 / s0**2 + np.asarray(rhs_data, dtype=np.float64)
    L = np.linalg.cholesky(P)
    mean = np.linalg.solve(L.T, np.linalg.solve(L, rhs))
    Linv = np.linalg.solve(L, np.eye(P.shape[0]))
    return mean, Linv.T @ Linv


def nea_posterior(bayes_model, data: ModelData | LinearStats, *, noise_scale=None):
    """Exact Gaussian posterior of NEA's theta given the noise scale (conjugate linear model):
    :func:`conjugate_gaussian_posterior` with ``F^T S^-1 F = sum_j A_j / sigma_j^2``.

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
    w = 1.0 / sigma**2
    prior = bayes_model.family.theta.prior
    mean, cov = conjugate_gaussian_posterior(
        prior.loc.reshape(-1),
        prior.scale.reshape(-1),
        np.einsum("n,npr->pr", w, np.asarray(stats.A, np.float64)),
        np.einsum("n,np->p", w, np.asarray(stats.b, np.float64)),
    )
    return mean.reshape(n, 10), cov


def nominal_torque_residual(robot: bn.Robot, data: ModelData) -> np.ndarray:
    """(n,) RMS per joint of ``tau - rnea(q, qd, qdd)`` of the robot's nominal (URDF) model on
    ``data`` (N, n): a noise scale for NEA that does not come from NEA's own fit.

    NEA's torque noise cannot be learned with its weights on an under-actuated robot: the free
    joint's recorded torque is exactly 0, which the inverse model matches exactly with zero
    inertia below that joint, where the likelihood grows without bound as its noise scale
    shrinks (no posterior mode). With the noise fixed at this scale the posterior is
    :func:`nea_posterior`'s Gaussian. Floored at 1e-3 of the RMS of all recorded efforts (no
    recording is better than that; the rigid plant's noise-free data would otherwise give a
    scale at rounding level, and a posterior too narrow for any metric to resolve its
    prior-only directions).
    """
    q, qd, qdd, tau = (jnp.asarray(x, jnp.float64) for x in (data.q, data.qd, data.qdd, data.tau))
    pred = jax.jit(jax.vmap(lambda a, b, c: bn.rnea(robot, a, b, c)))(q, qd, qdd)
    rms = np.sqrt(np.mean(np.asarray(tau - pred, np.float64) ** 2, axis=0))
    floor = 1e-3 * float(np.sqrt(np.mean(np.asarray(tau, np.float64) ** 2)))
    return np.maximum(rms, max(floor, 1e-12))


# --- likelihood components ----------------------------------------------------------------------


class Likelihood(abc.ABC):
    """One likelihood: its data form, its checks and its observed sites (module docstring).

    Class attributes:
        name: :data:`LIKELIHOOD_NAMES` entry.
        ndim: rank of the arrays it is conditioned on (2: (N, n); 3: windows (W, H + 1, n)).
        noise_keys: the signals it observes (``sigma_<key>`` noise scales).
        exact_statistics: whether :meth:`prepare` sums the data into :class:`LinearStats`.
    """

    name: ClassVar[str]
    ndim: ClassVar[int] = 2
    noise_keys: ClassVar[tuple[str, ...]]
    exact_statistics: ClassVar[bool] = False

    def observations(self, data, *, robot: bn.Robot, what: str = "data") -> ModelData:
        """Validated arrays in this likelihood's layout from a ``data.Dataset`` or arrays.

        Raises:
            ValueError: joint names that differ from the robot's, bad shapes, NaN, no samples.
        """
        if is_dataset(data):
            return model_data(data, robot=robot)
        return check_data(data, n=robot.n, ndim=self.ndim, what=what)

    def prepare(self, observations: ModelData, *, robot: bn.Robot) -> ModelData | LinearStats:
        """What the model is conditioned on (the observations themselves by default)."""
        return observations

    @abc.abstractmethod
    def observe(self, model, sample: dict, data: ModelData, subsample_size: int | None) -> None:
        """Declare the observed sites ``obs_<key>`` of one draw (inside a NumPyro model)."""



@functools.partial(jax.jit, static_argnums=(0, 1))
def predictions(likelihood: Likelihood, model, sample: dict, batch):
    """``likelihood.predict(model, sample, batch)`` under one ``jax.jit`` (module docstring,
    "Rollout windows compiled once").

    Compiled once per likelihood, model (by identity) and array shapes; ``sample`` and
    ``batch`` are traced. Inside an outer ``jit`` or ``grad`` it is inlined.
    """
    return likelihood.predict(model, sample, batch)


class _PerSample(Likelihood):
    """A likelihood with one observation per sample: ``obs_<key> ~ noise(predict(batch))``."""

    @abc.abstractmethod
    def predict(self, model, sample: dict, batch: ModelData) -> Array:
        """Predictions (N, n) of the observed signal for a batch."""

    def observe(self, model, sample, data, subsample_size):
        with numpyro.plate("data", data.q.shape[0], subsample_size=subsample_size) as idx:
            batch = data if subsample_size is None else ModelData(*(x[idx] for x in data))
            key = self.noise_keys[0]
            noise = model.noise_dist(self.predict(model, sample, batch), sample, key, 1)
            numpyro.sample(f"obs_{key}", noise, obs=getattr(batch, key))


@dataclasses.dataclass(frozen=True)
class Forward(_PerSample):
    """``qdd_obs ~ noise(actuator + ABA)`` per sample (the DiffNEA paper's loss)."""

    name: ClassVar[str] = "forward"
    noise_keys: ClassVar[tuple[str, ...]] = ("qdd",)

    def predict(self, model, sample, batch):
        return model.qdd_batch(sample, batch.q, batch.qd, batch.tau)


@dataclasses.dataclass(frozen=True)
class ForwardEffort(Likelihood):
    """``qdd_obs ~ N(f, M^-1 diag(sigma_tau^2) M^-T + diag(sigma_qdd^2))`` per sample (module
    docstring): noise on the effort, mapped through the draw's mass matrix, and on the
    recorded accelerations."""

    name: ClassVar[str] = "forward-effort"
    noise_keys: ClassVar[tuple[str, ...]] = ("qdd", "tau")

    def noise_tril(self, model, sample, q):
        """Cholesky factor (N, n, n) of the acceleration noise's covariance ``M(q)^-1
        diag(sigma_tau^2) M(q)^-T + diag(sigma_qdd^2)`` at positions ``q`` (N, n)."""
        mass = model.mass_matrix_fn(sample)
        dtype = jnp.result_type(q)
        s_tau = model.noise_sigma(sample, "tau", dtype)
        s_qdd = model.noise_sigma(sample, "qdd", dtype)

        def one(q):
            A = jnp.linalg.solve(mass(q), jnp.diag(s_tau))  # M^-1 diag(sigma_tau)
            return jnp.linalg.cholesky(A @ A.T + jnp.diag(s_qdd**2))

        return jax.vmap(one)(q)

    def predict(self, model, sample, batch):
        """Mean (N, n) and Cholesky factor (N, n, n) of each sample's acceleration noise."""
        mean = model.qdd_batch(sample, batch.q, batch.qd, batch.tau)
        return mean, self.noise_tril(model, sample, batch.q)

    def observe(self, model, sample, data, subsample_size):
        with numpyro.plate("data", data.q.shape[0], subsample_size=subsample_size) as idx:
            batch = data if subsample_size is None else ModelData(*(x[idx] for x in data))
            mean, tril = self.predict(model, sample, batch)
            numpyro.sample("obs_qdd", dist.MultivariateNormal(mean, scale_tril=tril), obs=batch.qdd)

    def sample_noisy(self, model, sample, q, pred, key):
        """``pred`` (N, n) plus one draw of the noise at positions ``q`` (N, n) (a
        posterior-predictive draw of the recorded accelerations)."""
        z = jax.random.normal(key, pred.shape, pred.dtype)
        return pred + jnp.einsum("kij,kj->ki", self.noise_tril(model, sample, q), z)


@dataclasses.dataclass(frozen=True)
class Inverse(_PerSample):
    """``tau_obs ~ noise(actuator^-1(RNEA))`` per sample."""

    name: ClassVar[str] = "inverse"
    noise_keys: ClassVar[tuple[str, ...]] = ("tau",)

    def predict(self, model, sample, batch):
        return jax.vmap(model.tau_fn(sample))(batch.q, batch.qd, batch.qdd)


@dataclasses.dataclass(frozen=True)
class LinearInverse(Inverse):
    """:class:`Inverse` on exact sufficient statistics (module docstring, "the cheap exact form").

    Fields:
        viscous: whether viscous coefficients are among the linear weights.
    """

    viscous: bool = False
    exact_statistics: ClassVar[bool] = True

    def prepare(self, observations, *, robot):
        if isinstance(observations, LinearStats):
            return observations
        return linear_statistics(robot, observations, viscous=self.viscous)

    def observe(self, model, sample, data, subsample_size):
        if not isinstance(data, LinearStats):  # per-sample form: pointwise log-likelihood
            return super().observe(model, sample, data, subsample_size)
        if subsample_size is not None:
            raise ValueError("subsample_size does not apply to LinearStats (already summed)")
        dtype = jnp.result_type(data.A)
        w = model.linear_weights(sample).astype(dtype)
        sigma = model.noise_sigma(sample, "tau", dtype)
        numpyro.factor("obs_tau", linear_log_likelihood(data, w, sigma))


@dataclasses.dataclass(frozen=True)
class Rollout(Likelihood):
    """RK4 windows from each window's first state under its measured ``tau_d``.

    Fields:
        horizon: RK4 steps per window (windows built from datasets or (N, n) trajectories).
        dt: RK4 step (s); a dataset's sampling period must equal it.
    """

    horizon: int
    dt: float
    name: ClassVar[str] = "rollout"
    ndim: ClassVar[int] = 3
    noise_keys: ClassVar[tuple[str, ...]] = ("q", "qd")

    def observations(self, data, *, robot, what="data"):
        if is_dataset(data):
            if getattr(data, "kind", None) == "uniform":
                raise ValueError(
                    f"{what}: a 'uniform' dataset holds independent random states, not "
                    "trajectories; the rollout likelihood needs trajectory data"
                )
            if tuple(data.joint_names) != tuple(robot.joint_names):
                model_data(data, robot=robot)  # raises naming the joints
            if not np.isclose(1.0 / float(data.rate_hz), self.dt, rtol=1e-6):
                raise ValueError(
                    f"{what}: the rollout likelihood steps dt = {self.dt} s but the dataset is "
                    f"sampled at {data.rate_hz} Hz; build the model with dt = 1 / rate"
                )
            return check_data(rollout_windows(data, self.horizon), n=robot.n, ndim=3, what=what)
        if np.ndim(getattr(data, "q", None)) == 2:  # one contiguous trajectory
            traj = check_data(data, n=robot.n, ndim=2, what=what)
            return rollout_windows(traj, self.horizon)
        return check_data(data, n=robot.n, ndim=3, what=what)

    def predict(self, model, sample, batch):
        """Predicted positions and velocities (W, H, n) each after each window's first state."""
        f = model.qdd_fn(sample)

        def window(q, qd, tau):
            traj = bn.integrate(f, q[0], qd[0], tau[:-1], dt=self.dt)
            return traj.q[1:], traj.qd[1:]

        return jax.vmap(window)(batch.q, batch.qd, batch.tau)

    def observe(self, model, sample, data, subsample_size):
        with numpyro.plate("data", data.q.shape[0], subsample_size=subsample_size) as idx:
            batch = data if subsample_size is None else ModelData(*(x[idx] for x in data))
            q_pred, qd_pred = predictions(self, model, sample, batch)
            numpyro.sample("obs_q", model.noise_dist(q_pred, sample, "q", 2), obs=batch.q[:, 1:])
            numpyro.sample(
                "obs_qd", model.noise_dist(qd_pred, sample, "qd", 2), obs=batch.qd[:, 1:]
            )


def make_likelihood(spec, *, linear_coefficients: tuple[str, ...] | None) -> Likelihood:
    """The likelihood component of ``spec`` (a ``models.ModelSpec``).

    ``linear_coefficients``: the actuator coefficients that enter linearly beside theta when the
    family is linear in theta (None otherwise); with the inverse likelihood and Gaussian noise
    such a model gets :class:`LinearInverse`.
    """
    if spec.likelihood == "forward":
        return Forward()
    if spec.likelihood == "forward-effort":
        return ForwardEffort()
    if spec.likelihood == "rollout":
        return Rollout(horizon=int(spec.horizon), dt=float(spec.dt))
    if linear_coefficients is not None and spec.noise == "normal":
        unknown = set(linear_coefficients) - {"viscous"}
        if not unknown:
            return LinearInverse(viscous="viscous" in linear_coefficients)
    return Inverse()
