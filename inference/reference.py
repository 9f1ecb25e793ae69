"""A conjugate linear-Gaussian model with a closed-form posterior, to check the samplers against.

``tau = Y_base(q, qd, qdd) beta + diag(qd) d + eps``, ``eps ~ N(0, s^2 1)``, with Gaussian priors
on the base parameters ``beta`` (b,) (Gautier 1991; :func:`bayes_nea.base_parameters`) and the
viscous coefficients ``d`` (n,). The posterior of ``w = [beta; d]`` is Gaussian (Bishop 2006,
eq. 3.50-3.51): ``Sigma = (S0^-1 + F^T F / s^2)^-1``, ``mu = Sigma (S0^-1 m0 + F^T tau / s^2)``
with ``F`` the stacked features. It follows the ``models.BayesianModel`` protocol, so SVI and NUTS
results (means, sds) can be tested against :meth:`LinearGaussianModel.posterior`, and it keeps its
viscous site under a NumPyro name scope (``"actuator/viscous"``) like the real actuators do.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

import bayes_nea as bn
from models import ModelData, check_data, conjugate_gaussian_posterior


class ReferenceSpec(NamedTuple):
    """Names the reference model like a ``models.ModelSpec`` (``name``, ``likelihood``); it has
    no ``to_json``, so its results cannot rebuild their model."""

    name: str = "reference/linear-gaussian"
    likelihood: str = "inverse"


@dataclasses.dataclass(frozen=True, eq=False)
class LinearGaussianModel:
    """The conjugate model of this module's docstring for ``robot``.

    Fields:
        robot: the robot (its nominal kinematics fix the base parameters).
        prior_mean: (b + n,) prior mean of ``[beta; d]``.
        prior_sd: (b + n,) prior sd (independent).
        noise_sd: noise sd ``s`` of each torque (N or N m).
        to_base: (b, 10 n) ``B`` with ``beta = B theta``.
        to_theta: (10 n, b) ``E``, a representative ``theta = E beta``.
    """

    robot: bn.Robot
    prior_mean: np.ndarray
    prior_sd: np.ndarray
    noise_sd: float
    to_base: np.ndarray
    to_theta: np.ndarray
    spec: ReferenceSpec = ReferenceSpec()
    likelihood: str = "inverse"
    energy_class: str = "dissipative"
    linear_exact: bool = False

    @property
    def n_base(self) -> int:
        return self.to_base.shape[0]

    def observations(self, data) -> ModelData:
        """Validated (N, n) arrays (the one data check, ``models.check_data``)."""
        return check_data(data, n=self.robot.n, what="data for the reference model")

    def prepare(self, data) -> ModelData:
        return self.observations(data)

    def features(self, q, qd, qdd):
        """``F`` (N, n, b + n): base regressor and viscous columns, ``tau = F w``."""
        return _features(self, q, qd, qdd)

    def model(self, data, *, subsample_size=None) -> None:
        """NumPyro model: sites ``beta`` (b,), ``actuator/viscous`` (n,), observed ``obs_tau``."""
        dtype = data.q.dtype
        b = self.n_base
        m0 = jnp.asarray(self.prior_mean, dtype)
        s0 = jnp.asarray(self.prior_sd, dtype)
        beta = numpyro.sample("beta", dist.Normal(m0[:b], s0[:b]).to_event(1))
        with numpyro.handlers.scope(prefix="actuator"):
            d = numpyro.sample("viscous", dist.Normal(m0[b:], s0[b:]).to_event(1))
        w = jnp.concatenate([beta, d])
        N = data.q.shape[0]
        with numpyro.plate("data", N, subsample_size=subsample_size) as idx:
            F = self.features(data.q[idx], data.qd[idx], data.qdd[idx])
            mean = F @ w
            noise = jnp.full(mean.shape, self.noise_sd, dtype)
            numpyro.sample("obs_tau", dist.Normal(mean, noise).to_event(1), obs=data.tau[idx])

    def physical(self, sample: dict) -> dict:
        """``theta`` (n, 10) (representative: ``E beta``) and ``viscous`` (n,)."""
        beta = sample["beta"]
        theta = jnp.asarray(self.to_theta, beta.dtype) @ beta
        return {"theta": theta.reshape(self.robot.n, 10), "viscous": sample["actuator/viscous"]}

    def qdd_fn(self, sample: dict):
        """``f(q, qd, tau_d) -> qdd``: ``M qdd = tau_d - d qd - h`` with M, h by RNEA of ``E beta``."""
        theta = self.physical(sample)["theta"]
        d = sample["actuator/viscous"]
        n = self.robot.n

        def f(q, qd, tau_d):
            params = self.robot.params(q.dtype)._replace(theta=theta.astype(q.dtype))
            zero = jnp.zeros_like(q)
            h = bn.rnea(self.robot, q, qd, zero, params=params)
            g = bn.rnea(self.robot, q, zero, zero, params=params)
            eye = jnp.eye(n, dtype=q.dtype)
            M = jax.vmap(lambda e: bn.rnea(self.robot, q, zero, e, params=params) - g)(eye).T
            return jnp.linalg.solve(M, tau_d - d.astype(q.dtype) * qd - h)

        return f

    def posterior(self, data) -> tuple[np.ndarray, np.ndarray]:
        """Closed-form posterior mean (b + n,) and covariance of ``[beta; d]`` (numpy float64)."""
        F = np.asarray(self.features(data.q, data.qd, data.qdd), dtype=np.float64)
        F = F.reshape(-1, F.shape[-1])
        tau = np.asarray(data.tau, dtype=np.float64).reshape(-1)
        s2 = self.noise_sd**2
        return conjugate_gaussian_posterior(self.prior_mean, self.prior_sd, F.T @ F / s2, F.T @ tau / s2)


@functools.partial(jax.jit, static_argnums=0)
def _features(model: LinearGaussianModel, q, qd, qdd):
    # One compiled computation, also when NumPyro runs the model eagerly (initialisation).
    E = jnp.asarray(model.to_theta, q.dtype)
    robot = model.robot

    def one(q, qd, qdd):
        Y = bn.joint_torque_regressor(robot, q, qd, qdd, params=robot.params(q.dtype))
        return jnp.concatenate([Y @ E, jnp.diag(qd)], axis=1)

    return jax.vmap(one)(q, qd, qdd)


def linear_gaussian_model(
    robot: bn.Robot,
    *,
    prior_sd_fraction: float = 0.5,
    prior_sd_floor: float = 0.05,
    viscous_mean: float = 0.0,
    viscous_sd: float = 1.0,
    noise_sd: float = 0.1,
) -> LinearGaussianModel:
    """The reference model for ``robot``: prior mean at the nominal base parameters.

    Args:
        robot: the robot.
        prior_sd_fraction, prior_sd_floor: prior sd of each ``beta_k`` is
            ``max(fraction * |beta_k nominal|, floor)``.
        viscous_mean, viscous_sd: prior of each viscous coefficient.
        noise_sd: torque noise sd.
    """
    bp = bn.base_parameters(robot, 0)
    beta0 = np.asarray(bp.to_base) @ np.asarray(robot.nominal.theta, np.float64).reshape(-1)
    n = robot.n
    mean = np.concatenate([beta0, np.full(n, viscous_mean)])
    sd = np.concatenate(
        [np.maximum(prior_sd_fraction * np.abs(beta0), prior_sd_floor), np.full(n, viscous_sd)]
    )
    return LinearGaussianModel(
        robot=robot,
        prior_mean=mean,
        prior_sd=sd,
        noise_sd=float(noise_sd),
        to_base=np.asarray(bp.to_base, np.float64),
        to_theta=np.asarray(bp.to_theta, np.float64),
    )


def simulate(model: LinearGaussianModel, *, key, n_samples: int, w=None):
    """Data ``(q, qd, qdd, tau)`` (N, n) from the model with coefficients ``w`` (default: a prior
    draw) and the noise; returns ``(data, w)`` with ``data`` a namedtuple of float64 arrays.
    """
    k_state, k_w, k_noise = jax.random.split(
        jax.random.PRNGKey(key) if isinstance(key, int) else key, 3
    )
    q, qd, qdd = bn.sample_states(model.robot, k_state, n_samples)
    if w is None:
        w = model.prior_mean + model.prior_sd * np.asarray(
            jax.random.normal(k_w, model.prior_mean.shape, jnp.float64)
        )
    F = model.features(q, qd, qdd)
    tau = F @ jnp.asarray(w, F.dtype)
    tau = tau + model.noise_sd * jax.random.normal(k_noise, tau.shape, tau.dtype)
    return ModelData(q, qd, qdd, tau), np.asarray(w)
