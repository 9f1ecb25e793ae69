"""A posterior over the rigid body and sign friction of a hybrid inverse-dynamics model.

``tau = Y_b(q, qd, qdd) beta + S(qd) sigma_C + r(x) + eps``: base parameters ``beta`` (b,)
(:func:`bayes_nea.base_parameters`: the combinations of the inertial parameters that torques
identify), the modified Coulomb coefficients ``sigma_C`` (n,) (``models.hybrid.SignFriction``),
an optional residual network ``r`` held at its trained (MAP) weights, and Gaussian noise of sd
``s_j`` per joint. The model is linear in ``w = [beta; sigma_C]``, so with the Gaussian prior
below the posterior is Gaussian in closed form (``models.conjugate_gaussian_posterior``, Bishop
2006 eq. 3.50-3.51): no sampler, nothing to converge.

**Correlated residuals.** At 1 kHz the residual of any of these models (unmodelled LuGre
hysteresis, joint elasticity, a filtered acceleration) is strongly autocorrelated: treated as
white, ``N`` samples would count as ``N`` independent ones and the posterior would be far too
narrow. Each joint's rows are therefore down-weighted by ``ESS_j / N``, the effective sample size
of that joint's residual series (ArviZ's ``ess``, mean method) over its length; the noise sd
``s_j`` is the residual RMS at the posterior mean (empirical Bayes: a first pass with the given
point model's residual, a second with the first pass's). This is a coarsened likelihood; the predictive band keeps the full
noise ``s_j``.

**Prior** (weak, not centred on any robot file): ``beta_k ~ N(0, (10 |B| |theta_urdf|)_k^2)``
(ten times the magnitude the URDF gives each combination, floor 1e-3), ``sigma_C,j ~ N(0,
(effort_limit_j / 2)^2)`` (the largest limit for a joint without one; sd 1 if none has one).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import arviz as az
import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from inference.hybrid_training import Batchable, _predict_jit
from models import conjugate_gaussian_posterior
from models import hybrid as hy

Z90 = 1.6448536269514722
"""The standard normal's 95 % quantile: a central 90 % interval is mean +- Z90 sd."""


class RigidBodyPosterior(NamedTuple):
    """The Gaussian posterior of ``w = [beta; sigma_C]`` (module docstring).

    Fields:
        base: the robot's :class:`bayes_nea.BaseParameters` (``beta = B theta``).
        mean: (b + n,) posterior mean. cov: (b + n, b + n) posterior covariance.
        noise_sd: (n,) per-joint noise sd ``s_j``: the residual RMS at the mean of a first pass
            (which used the point model's residual); the posterior is computed with it.
        ess_fraction: (n,) ``ESS_j / N`` of each joint's residual (the rows' weight).
        theta_ref: (10 n,) the representative theta of a draw is ``theta_ref + E (beta -
            B theta_ref)`` (the given point model's theta: its dependent entries are kept).
        residual: the residual network held fixed (a ``models.hybrid.Hybrid``), or None.
    """

    base: bn.BaseParameters
    mean: np.ndarray
    cov: np.ndarray
    noise_sd: np.ndarray
    ess_fraction: np.ndarray
    theta_ref: np.ndarray
    residual: hy.Hybrid | None

    @property
    def n_base(self) -> int:
        return self.base.n_base

    def sd(self) -> np.ndarray:
        """(b + n,) marginal posterior sds."""
        return np.sqrt(np.diag(self.cov))

    def draws(self, key, count: int) -> tuple[np.ndarray, np.ndarray]:
        """``count`` posterior draws as ``(theta (count, n, 10), sigma_C (count, n))``.

        theta: the draw's base parameters put into ``theta_ref``'s independent entries (every
        such theta predicts the same torques: ``Y theta = Y_b beta``).
        """
        z = np.asarray(jax.random.normal(key, (count, self.mean.size)), np.float64)
        w = self.mean[None, :] + z @ np.linalg.cholesky(self.cov).T
        beta, sigma = w[:, : self.n_base], w[:, self.n_base :]
        shift = (beta - (self.base.to_base @ self.theta_ref)[None, :]) @ self.base.to_theta.T
        theta = self.theta_ref[None, :] + shift
        return theta.reshape(count, -1, 10), sigma


def features(base: bn.BaseParameters, data: Batchable) -> np.ndarray:
    """``F = [Y_b, S(qd)]`` (T, n, b + n) of one movement (T samples) or of windows (flattened)."""
    n = data.tau.shape[-1]
    Y = np.asarray(data.Y).reshape(-1, n, data.Y.shape[-1])
    qd = np.asarray(data.x).reshape(-1, 3 * n)[:, n : 2 * n]
    S = np.asarray(hy.sign_features(jnp.asarray(qd)))
    return np.concatenate([Y[..., np.asarray(base.independent)], S], axis=2)


def _target(data: Batchable, residual: hy.Hybrid | None) -> np.ndarray:
    tau = np.asarray(data.tau).reshape(-1, data.tau.shape[-1])
    if residual is None:
        return tau
    pred = np.asarray(_predict_jit(residual, jnp.asarray(data.x), jnp.asarray(data.Y)))
    return tau - pred.reshape(tau.shape)


def _prior(robot: bn.Robot, base: bn.BaseParameters) -> tuple[np.ndarray, np.ndarray]:
    theta = np.abs(np.asarray(robot.nominal.theta, np.float64).reshape(-1))
    scale_beta = np.maximum(10.0 * np.abs(base.to_base) @ theta, 1e-3)
    effort = np.abs(np.asarray(robot.effort_limit, np.float64))
    known = effort[np.isfinite(effort) & (effort > 0)]
    fallback = known.max() if known.size else 2.0  # sd 1 (N or N m) if no joint has a limit
    scale_fric = 0.5 * np.where(np.isfinite(effort) & (effort > 0), effort, fallback)
    sd = np.concatenate([scale_beta, scale_fric])
    return np.zeros_like(sd), sd


def residual_ess_fraction(residuals: Sequence[np.ndarray]) -> np.ndarray:
    """(n,) effective sample size over length of each joint's residual, pooled over movements
    (each a (T, n) series): ``sum ESS / sum T`` with ArviZ's mean-method ESS of each series."""
    n = residuals[0].shape[1]
    ess, total = np.zeros(n), 0
    for r in residuals:
        total += r.shape[0]
        for j in range(n):
            ess[j] += float(az.ess(np.asarray(r[:, j])[None, :], method="mean"))
    return np.minimum(ess / total, 1.0)


def rigid_body_posterior(
    robot: bn.Robot,
    movements: Sequence[Batchable],
    point: hy.Hybrid,
    *,
    residual: hy.Hybrid | None = None,
    base: bn.BaseParameters | None = None,
    prior: tuple[np.ndarray, np.ndarray] | None = None,
    correlated: bool = True,
) -> RigidBodyPosterior:
    """The posterior of the module docstring from training ``movements`` (whole movements).

    Args:
        robot: the rigid body's robot (its URDF sets the prior's scales).
        movements: training data, one :class:`Batchable` per movement (T, ...).
        point: a fitted model of the same structure (e.g. the SDP rigid body + sign friction,
            with or without the residual): its residual RMS starts the noise estimate and its
            rigid body's theta is ``theta_ref``.
        residual: the residual network (a ``Hybrid`` of the residual part only) held at its
            weights, or None.
        base: the robot's base parameters (computed if None).
        prior: ``(mean, sd)`` (b + n,) of the independent Gaussian prior on ``[beta; sigma_C]``;
            None: the weak prior of the module docstring.
        correlated: down-weight rows by the residuals' ``ESS / N`` (module docstring); False
            treats the residuals as white noise.
    """
    base = bn.base_parameters(robot) if base is None else base
    F = [features(base, m) for m in movements]
    y = [_target(m, residual) for m in movements]
    point_pred = [
        np.asarray(_predict_jit(point, jnp.asarray(m.x), jnp.asarray(m.Y))) for m in movements
    ]
    res = [np.asarray(m.tau) - p for m, p in zip(movements, point_pred, strict=True)]
    m0, s0 = _prior(robot, base) if prior is None else (np.asarray(p, np.float64) for p in prior)
    n = robot.n
    mean = cov = noise = frac = None
    for _ in range(2):
        noise = np.sqrt(np.mean(np.concatenate(res) ** 2, axis=0))
        frac = residual_ess_fraction(res) if correlated else np.ones(n)
        weight = frac / noise**2  # (n,) per-row precision of each joint
        P = sum(np.einsum("tjp,j,tjq->pq", f, weight, f) for f in F)
        rhs = sum(np.einsum("tjp,j,tj->p", f, weight, t) for f, t in zip(F, y, strict=True))
        mean, cov = conjugate_gaussian_posterior(m0, s0, P, rhs)
        res = [t - f @ mean for f, t in zip(F, y, strict=True)]
    rb = point.part("rbd")
    theta_ref = np.asarray(rb.theta(), np.float64).reshape(-1)
    return RigidBodyPosterior(base, mean, cov, noise, frac, theta_ref, residual)


class PredictiveCheck(NamedTuple):
    """Predictive torques of a posterior on held-out movements.

    Fields:
        coverage: (n,) fraction of samples inside the central 90 % predictive interval.
        width: (n,) mean interval width over the joint's torque range (``scale``).
        parameter_width: (n,) the same for the parameters' share alone (noise left out).
        nmse: (n,) NMSE of the predictive mean (the ``scale``-normalised MSE of the study).
    """

    coverage: np.ndarray
    width: np.ndarray
    parameter_width: np.ndarray
    nmse: np.ndarray


def predictive_check(
    posterior: RigidBodyPosterior, movements: Sequence[Batchable], scale
) -> PredictiveCheck:
    """Central 90 % predictive intervals ``mean +- Z90 sqrt(f^T Sigma f + s_j^2)`` (exact for
    the Gaussian posterior) on each sample of ``movements``; coverage, width and NMSE."""
    scale = np.asarray(scale, np.float64)
    inside = width = pwidth = sse = 0.0
    count = 0
    for m in movements:
        f = features(posterior.base, m)
        y = _target(m, posterior.residual)
        mu = f @ posterior.mean
        var_w = np.einsum("tjp,pq,tjq->tj", f, posterior.cov, f)
        half = Z90 * np.sqrt(var_w + posterior.noise_sd[None, :] ** 2)
        inside = inside + np.sum(np.abs(y - mu) <= half, axis=0)
        width = width + np.sum(2 * half / scale, axis=0)
        pwidth = pwidth + np.sum(2 * Z90 * np.sqrt(var_w) / scale, axis=0)
        sse = sse + np.sum(((y - mu) / scale) ** 2, axis=0)
        count += y.shape[0]
    return PredictiveCheck(inside / count, width / count, pwidth / count, sse / count)
