"""Identifiable (base-parameter) geometry of the white-box ``diffnea`` models.

With known kinematics the inverse dynamics are linear in theta (n, 10):
``tau = Y(q, qd, qdd) theta = Y_b beta`` with the base parameters ``beta = B theta`` (b,)
(Gautier 1991; :func:`bayes_nea.base_parameters`), and ``M(q)``, ``h(q, qd)`` and hence ABA's
forward dynamics depend on theta only through ``beta``. The likelihood therefore depends only on
``(beta, actuator coefficients, noise scales)``; the other ``10 n - b`` directions of theta are
informed by the prior alone. Sampling DiffNEA's virtual parameters puts NUTS on a curved ridge
along those unseen directions (its width shrinks as ``1 / sqrt(N)``, its curvature does not), which
a fixed metric fits less and less as the data grow. This module samples what the data identify and
completes every draw from the prior:

**Prior** (a proper joint prior on theta, defined generatively):

1. ``G = N(mu, Sigma)``: a Gaussian on theta (10 n,) whose mean and covariance match the
   push-forward of the variant's virtual-parameter prior (Monte Carlo with a fixed seed,
   :func:`theta_moments`).
2. ``beta ~ N(B mu, B Sigma B^T)``: the base parameters' marginal under ``G``.
3. ``theta | beta ~ G(theta | B theta = beta)`` truncated to the physically consistent set
   ``C = {theta: every body's pseudo-inertia is positive definite}`` (Wensing et al. 2017). ``C``
   is convex and the Gaussian conditional log-concave, so the conditional is a log-concave
   density on a convex set (a linear matrix inequality in the unseen directions). It is drawn
   by a phase-1 barrier method for an interior point followed by hit-and-run moves with exact
   truncated-normal line draws (:func:`truncated_conditional`, :mod:`models.truncated_gaussian`;
   :meth:`IdentifiableModel.complete`), which needs no acceptance and works however little mass
   ``G``'s conditional puts on ``C``.

So every completed draw is a physically consistent body with the sampled base parameters exactly,
and the DiffNEA virtual parameters (:func:`bayes_nea.bodies_from_theta` ``"diffnea"``) exist for
every draw. A ``beta`` that no consistent body has (empty slice; the Gaussian prior on ``beta``
does not exclude them) is reported (``completion_ok`` False) rather than completed with an
inconsistent body.

**The NumPyro model** (:meth:`IdentifiableModel.model`) has latent sites ``base_z`` (b,)
(``beta = B mu + L z``, ``L L^T = B Sigma B^T``), the actuator's coefficient sites and the noise
sites of the variant (the same sites and priors as :func:`models.build_model`'s model). Dynamics
use the representative ``theta(beta) = E[theta | beta]`` under ``G`` (affine in beta, with
``B theta(beta) = beta``); any representative gives the same ``M``, ``h`` and torques.
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
import models.truncated_gaussian as tg
from models.arguments import held_model, model_argument
from models.likelihoods import LinearStats, ModelData, check_data

Array = jax.Array

GEOMETRY = "identifiable"
BASE_SITE = "base_z"
DEFAULT_MOMENT_DRAWS = 20_000
DEFAULT_COMPLETION_STEPS = 300
COMPLETION_CHUNK = 64  # draws per compiled completion call (IdentifiableModel.complete)
BASIS_STATES, BASIS_STATES_KEY = 32, 7  # states whose stacked regressor defines B(k) (no-Kin)


class SparseFeatures(NamedTuple):
    """Per-sample features linear in beta, stored batch-last with their structural zeros left out.

    Entry ``e`` (a mass-matrix entry, a joint's bias or regressor row) is
    ``sum_r beta[cols[e][r]] * values[e][r, s]`` for sample ``s``: ``values[e]`` (k_e, N) holds
    the feature columns that are not zero at every sample, ``cols[e]`` (k_e,) their indices in
    beta. Batch-last rows make every per-entry operation a contiguous vector operation; on the
    Furuta pendulum 19 of the 48 dense numbers per sample are left (gradient of the forward
    likelihood at 50,000 samples: see ``docs/inference-geometry.md``).
    """

    values: tuple
    cols: tuple

    @classmethod
    def from_dense(cls, dense, structure) -> SparseFeatures:
        """From dense features (N, E, b): entry ``e`` keeps the columns ``structure[e]`` (the
        robot's structural nonzeros) and any column not exactly zero in ``dense`` (so nothing
        the dense contraction would add is dropped, and data of one robot share one layout)."""
        dense = np.asarray(dense)
        values, cols = [], []
        for e in range(dense.shape[1]):
            keep = np.any(dense[:, e, :] != 0, axis=0)
            keep[list(structure[e])] = True
            keep = np.flatnonzero(keep)
            values.append(jnp.asarray(np.ascontiguousarray(dense[:, e, keep].T)))
            cols.append(jnp.asarray(keep, dtype=jnp.int32))
        return cls(tuple(values), tuple(cols))

    def contract(self, beta: Array) -> list:
        """The entries at ``beta`` (b,): a list of (N,) arrays."""
        return [beta[c] @ v for v, c in zip(self.values, self.cols, strict=True)]

    def take(self, idx) -> SparseFeatures:
        """The features of the samples ``idx`` (a minibatch)."""
        return SparseFeatures(tuple(v[:, idx] for v in self.values), self.cols)


class BaseFeatures(NamedTuple):
    """Data plus their base-parameter features (:meth:`IdentifiableModel.prepare`).

    Fields:
        q, qd, qdd, tau: (N, n) as in ``models.ModelData``.
        mass: :class:`SparseFeatures` of the upper triangle of ``M(q) = sum_k beta_k M_k(q)``,
            entries ``(i, j), i <= j`` row by row (forward likelihood), or None.
        bias: :class:`SparseFeatures` of ``h(q, qd)`` per joint (Coriolis, centrifugal,
            gravity), or None.
        regressor: :class:`SparseFeatures` of ``Y_b(q, qd, qdd)`` per joint (inverse
            likelihood), or None.
    """

    q: Array
    qd: Array
    qdd: Array
    tau: Array
    mass: SparseFeatures | None = None
    bias: SparseFeatures | None = None
    regressor: SparseFeatures | None = None

    def take(self, idx) -> BaseFeatures:
        """The samples ``idx`` (a minibatch), features included."""
        return BaseFeatures(
            *(x[idx] for x in (self.q, self.qd, self.qdd, self.tau)),
            *(None if f is None else f.take(idx) for f in (self.mass, self.bias, self.regressor)),
        )


def theta_moments(model, *, draws: int = DEFAULT_MOMENT_DRAWS, seed: int = 0):
    """Mean (10 n,) and covariance (10 n, 10 n) of theta under ``model``'s inertia prior.

    Monte Carlo push-forward of the DiffNEA virtual-parameter prior (``draws`` draws, fixed
    ``seed``, float64 numpy).
    """
    site = model.family.inertia
    loc = np.asarray(site.prior.loc, np.float64)
    scale = np.asarray(site.prior.scale, np.float64)
    rng = np.random.default_rng(seed)
    x = loc[None] + scale[None] * rng.standard_normal((draws, *loc.shape))
    with jax.ensure_compile_time_eval():
        theta = np.asarray(bn.bodies_to_theta("diffnea", jnp.asarray(x)), np.float64)
    theta = theta.reshape(draws, -1)
    return theta.mean(axis=0), np.cov(theta, rowvar=False)


@dataclasses.dataclass(frozen=True)
class GaussianCondition:
    """``G = N(mu, Sigma)`` on theta split into base parameters and the unseen directions.

    Fields (numpy float64; p = 10 n, b base parameters):
        B: (b, p) ``beta = B theta``.
        mu: (p,), cov: (p, p) the Gaussian ``G``.
        beta_mean: (b,) ``B mu``; beta_chol: (b, b) lower Cholesky factor of ``B Sigma B^T``.
        gain: (p, b) ``Sigma B^T (B Sigma B^T)^-1``: ``E[theta | beta] = mu + gain (beta - B mu)``.
        null_factor: (p, p - b) with ``null_factor null_factor^T = Cov[theta | beta]``.
    """

    B: np.ndarray
    mu: np.ndarray
    cov: np.ndarray
    beta_mean: np.ndarray
    beta_chol: np.ndarray
    gain: np.ndarray
    null_factor: np.ndarray

    @classmethod
    def build(cls, B, mu, cov) -> GaussianCondition:
        """Split ``N(mu, cov)`` by ``beta = B theta`` (closed-form Gaussian conditioning).

        numpy float64 fields; raises ``ValueError`` when ``cov`` is singular on the directions
        beta leaves free.
        """
        B, mu, cov = (np.asarray(a, np.float64) for a in (B, mu, cov))
        b, p = B.shape
        if mu.shape != (p,) or cov.shape != (p, p):
            raise ValueError(f"mu {mu.shape} and cov {cov.shape} do not match B {B.shape}")
        cov = 0.5 * (cov + cov.T)
        with jax.ensure_compile_time_eval():
            parts = _split(jnp.asarray(B), jnp.asarray(mu), jnp.asarray(cov))
        beta_chol, gain, null_factor, w = (np.asarray(x, np.float64) for x in parts)
        if np.any(w <= 0):
            raise ValueError("the theta covariance is singular on the directions beta leaves free")
        return cls(B, mu, cov, B @ mu, beta_chol, gain, null_factor)

    @classmethod
    def traced(cls, B: Array, mu: np.ndarray, cov: np.ndarray) -> GaussianCondition:
        """The same split for a ``B`` (b, p) computed inside a jitted function (no checks;
        ``mu``, ``cov`` stay numpy constants)."""
        dtype = B.dtype
        beta_chol, gain, null_factor, _ = _split(B, jnp.asarray(mu, dtype), jnp.asarray(cov, dtype))
        return cls(B, mu, cov, B @ jnp.asarray(mu, dtype), beta_chol, gain, null_factor)

    def representative(self, beta: Array) -> Array:
        """``E[theta | beta]`` (p,) under ``G``: affine in beta, ``B theta = beta``."""
        dtype = beta.dtype
        return jnp.asarray(self.mu, dtype) + jnp.asarray(self.gain, dtype) @ (
            beta - jnp.asarray(self.beta_mean, dtype)
        )

    def beta(self, z: Array) -> Array:
        """Base parameters (b,) of the whitened coordinate ``z`` (b,)."""
        dtype = z.dtype
        return jnp.asarray(self.beta_mean, dtype) + jnp.asarray(self.beta_chol, dtype) @ z


def _split(B: Array, mu: Array, cov: Array):
    """``(chol(B cov B^T), gain, null_factor, eigenvalues kept)`` of :class:`GaussianCondition`:
    ``gain = cov B^T (B cov B^T)^-1`` and the ``p - b`` leading eigenpairs of the conditional
    covariance ``cov - gain B cov`` (largest first)."""
    b, p = B.shape
    S = B @ cov @ B.T
    S = 0.5 * (S + S.T)
    gain = jnp.linalg.solve(S, B @ cov).T
    cond = cov - gain @ S @ gain.T
    w, V = jnp.linalg.eigh(0.5 * (cond + cond.T))  # ascending
    w, V = w[b:][::-1], V[:, b:][:, ::-1]
    return jnp.linalg.cholesky(S), gain, V * jnp.sqrt(jnp.clip(w, 0.0))[None, :], w


def consistency_lmi(beta: Array, condition: GaussianCondition, reference=None):
    """``nu (p - b,) -> (n, 4, 4)``: the bodies' scaled pseudo-inertias of ``theta(beta) + F nu``.

    ``theta = E[theta | beta] + null_factor nu`` (so ``nu | beta ~ N(0, I)`` under ``G``) and
    body ``i``'s block is ``L_i^-1 J_i(theta) L_i^-T`` with ``L_i L_i^T = J_i(reference)`` (the
    identity at ``reference`` (p,), a consistent theta, default the prior mean ``mu``; congruence
    keeps positive definiteness, Wensing et al. 2017). Affine in nu.
    """
    dtype = beta.dtype
    mean = condition.representative(beta)
    F = jnp.asarray(condition.null_factor, dtype)
    reference = condition.mu if reference is None else reference
    scale = jnp.asarray(_pseudo_inertia_chol_inv(reference), dtype)  # (n, 4, 4)

    def lmi(nu):
        J = bn.pseudo_inertia((mean + F @ nu).reshape(-1, 10))
        return scale @ J @ jnp.swapaxes(scale, -1, -2)

    return lmi


def _pseudo_inertia_chol_inv(mu: np.ndarray) -> np.ndarray:
    """(n, 4, 4) ``L_i^-1``, ``L_i L_i^T = J_i(mu)`` (numpy; mu (10 n,) must be consistent)."""
    J = pseudo_inertia_np(np.asarray(mu, np.float64).reshape(-1, 10))
    if np.any(np.linalg.eigvalsh(J)[..., 0] <= 0):
        raise ValueError("the theta prior mean is not a physically consistent body")
    return np.linalg.inv(np.linalg.cholesky(J))


def pseudo_inertia_np(theta: np.ndarray) -> np.ndarray:
    """:func:`bayes_nea.pseudo_inertia` of a concrete (..., 10) array, as float64 numpy."""
    with jax.ensure_compile_time_eval():
        return np.asarray(bn.pseudo_inertia(jnp.asarray(theta, jnp.float64)), np.float64)


def truncated_conditional(
    key,
    beta: Array,
    condition: GaussianCondition,
    *,
    steps: int = DEFAULT_COMPLETION_STEPS,
    reference=None,
):
    """One draw of theta | beta from ``G(theta | beta)`` truncated to the consistent bodies.

    ``nu | beta`` is a standard normal truncated to the convex set where every pseudo-inertia is
    positive definite (:func:`consistency_lmi`): an interior point by the phase-1 barrier method,
    then ``steps`` hit-and-run moves that leave the truncated normal invariant
    (:mod:`models.truncated_gaussian`). Jittable and vmappable over keys and betas.

    Args:
        key: ``jax.random`` key.
        beta: (b,) base parameters.
        condition: the :class:`GaussianCondition`.
        steps: hit-and-run moves from the interior point.
        reference: (p,) a consistent theta whose pseudo-inertias scale the consistency blocks
            (:func:`consistency_lmi`; the phase-1 tolerance is relative to them). Default: the
            prior mean.

    Returns:
        ``(theta (p,), ok (), margin ())``: ``B theta = beta``; ``ok`` False when no consistent
        body with these base parameters was found (the slice is empty up to phase 1's
        tolerance); theta must then not be used. ``margin`` is phase 1's smallest scaled
        pseudo-inertia eigenvalue at the starting point (> 0 iff ``ok``).
    """
    lmi = consistency_lmi(beta, condition, reference)
    k = condition.null_factor.shape[1]
    nu, ok, margin = tg.sample_truncated_normal(key, lmi, k, steps=steps, dtype=beta.dtype)
    theta = condition.representative(beta) + jnp.asarray(condition.null_factor, beta.dtype) @ nu
    return theta, ok, margin


@dataclasses.dataclass(frozen=True, eq=False)
class IdentifiableModel:
    """A ``diffnea`` variant in base-parameter coordinates (module docstring).

    Same protocol as :class:`models.BayesianModel` (``model(data)``, ``physical(sample)``,
    ``qdd_fn(sample)``, ``tau_fn``, ``latent_sites``, ``init_sample``, ``spec``, ``robot``,
    ``likelihood``), plus :meth:`complete` (theta and virtual parameters of each draw) and
    :meth:`sample_prior` (joint draws from the prior, for simulation-based calibration).

    Fields:
        source: the ``diffnea`` :class:`models.BayesianModel` this was built from (actuator and
            noise sites, likelihood settings, robot).
        base: the robot's :class:`bayes_nea.BaseParameters`.
        condition: the :class:`GaussianCondition` of the theta prior.
    """

    source: object  # the models.BayesianModel it was built from
    base: bn.BaseParameters
    condition: GaussianCondition
    completion_steps: int = DEFAULT_COMPLETION_STEPS

    @property
    def completer(self):
        """Jitted ``(keys (C,), sites {site: (C, ...)}) -> (theta (C, n, 10), virtual (C, n, 10),
        ok (C,), margin (C,))`` over the sites of :attr:`completion_sites`, for chunks of
        :data:`COMPLETION_CHUNK` draws (:meth:`complete`); theta and virtual are NaN where not
        ok. One program for every model of this structure (:func:`_complete_chunk`)."""
        return functools.partial(_complete_chunk, model_argument(self))

    @property
    def completion_sites(self) -> tuple[str, ...]:
        """The latent sites that fix theta's Gaussian conditional: the base coordinates."""
        return (BASE_SITE,)

    def condition_at(self, sample: dict) -> GaussianCondition:
        """The split of the theta prior at the draw's kinematics (known here: always the same)."""
        return self.condition

    @functools.cached_property
    def reference_theta(self) -> np.ndarray:
        """(p,) the robot's nominal theta if physically consistent, else the prior mean: the
        scale of the consistency blocks (the identified parts of a thin link are small at any
        scale fit to that link)."""
        nominal = np.asarray(self.dynamics_robot.nominal.theta, np.float64).reshape(-1)
        J = pseudo_inertia_np(nominal.reshape(-1, 10))
        return nominal if np.all(np.linalg.eigvalsh(J)[..., 0] > 0) else self.condition.mu

    # --- protocol attributes ------------------------------------------------------------------

    @property
    def spec(self):
        """The source's ``models.ModelSpec`` with ``geometry="identifiable"``: the result of a
        fit stores it, and ``models.build`` rebuilds this model from it."""
        return self.source.spec.replace(geometry=GEOMETRY)

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def robot(self) -> bn.Robot:
        return self.source.robot

    @property
    def dynamics_robot(self) -> bn.Robot:
        """The robot whose frames theta refers to (no-Kin DiffNEA: its z-axis form)."""
        return self.source.family.dynamics_robot

    @property
    def likelihood(self):
        """The source's likelihood component (its ``observations`` data form is used)."""
        return self.source.likelihood

    @property
    def family(self):
        return self.source.family

    @property
    def linear_exact(self) -> bool:
        return False

    def observations(self, data):
        """Validated (N, n) arrays from a ``data.Dataset`` or arrays (the source's data form)."""
        return self.source.observations(data)

    @property
    def geometry(self) -> str:
        return GEOMETRY

    @property
    def nuts_metric(self) -> str:
        """The metric ``inference.fit_nuts(metric="auto", init=MAP)`` uses: ``"laplace"``, or
        ``"softplus-adapt"`` for Stribeck friction: its viscous, Coulomb and Stribeck-amplitude
        coefficients sampled in softplus coordinates (``inference.softplus_map``; in log
        coordinates their posteriors are skewed, a prior tail beside a wall where the data see
        them) with a dense metric adapted in Laplace-whitened coordinates
        (docs/inference-geometry.md has the measurements)."""
        return "softplus-adapt" if self.source.spec.actuator == "stribeck" else "laplace"

    @property
    def nuts_target_accept(self) -> float:
        """The step-size target ``inference.fit_nuts(target_accept="auto")`` uses: 0.95 for
        Stribeck friction, 0.8 otherwise. The Stribeck posterior has a wall where the data start
        to see a coefficient (in log coordinates its curvature grows like the coefficient
        squared) and a bump narrower than the data's velocities resolve; at 0.8 NUTS diverged in
        2-5 of 12 runs of 5,000 states, at 0.95 in none, for about 1.4x the leapfrog steps
        (0.8-2.6x per run; docs/inference-geometry.md)."""
        return 0.95 if self.source.spec.actuator == "stribeck" else 0.8

    @property
    def energy_class(self) -> str:
        return self.source.energy_class

    @property
    def actuator(self):
        return self.source.actuator

    @property
    def noise_sites(self):
        return self.source.noise_sites

    def noise_dist(self, loc, sample, key: str, event_dims: int):
        """The source model's observation noise around ``loc`` (its noise sites are shared)."""
        return self.source.noise_dist(loc, sample, key, event_dims)

    @property
    def placement_sites(self) -> tuple:
        """Latent joint-placement sites (none: the kinematics are known)."""
        return ()

    @property
    def base_names(self) -> tuple[str, ...]:
        """Readable expression of each base parameter in theta's entries."""
        return self.base.names

    # --- pure functions of one draw -------------------------------------------------------------

    def beta(self, sample: dict) -> Array:
        """Base parameters (b,) of one draw."""
        return self.condition_at(sample).beta(sample[BASE_SITE])

    def kinematics(self, sample: dict, dtype) -> tuple[Array, Array]:
        """Joint placements ``(rpy (n, 3), xyz (n, 3))`` of one draw: the robot's, known here."""
        return self.source.family.nominal_kinematics(dtype)

    def params(self, sample: dict) -> bn.RobotParams:
        """Rigid-body parameters with the representative theta ``E[theta | beta]`` (n, 10) for
        :attr:`dynamics_robot`."""
        condition = self.condition_at(sample)
        beta = condition.beta(sample[BASE_SITE])
        theta = condition.representative(beta).reshape(self.robot.n, 10)
        return bn.RobotParams(theta, *self.kinematics(sample, theta.dtype))

    def physical(self, sample: dict) -> dict:
        """``base_parameters`` (b,), actuator coefficients (n,) each and noise scales (n,)."""
        out = {"base_parameters": self.beta(sample)}
        out.update(self.actuator.physical(sample))
        for site in self.noise_sites:
            out[site.name.removeprefix("log_")] = jnp.exp(site.value(sample))
        return out

    def qdd_fn(self, sample: dict):
        """``f(q, qd, tau_d) -> qdd`` (n,) of one draw (actuator then ABA); pure, vmappable."""
        actuator, robot = self.actuator, self.dynamics_robot
        params = self.params(sample)

        def f(q, qd, tau_d):
            dtype = jnp.result_type(q)
            s = {k: jnp.asarray(v, dtype) for k, v in sample.items()}
            tau = actuator.torque(s, tau_d, q, qd)
            return bn.aba(robot, q, qd, tau, params=params.astype(dtype))

        return f

    def tau_fn(self, sample: dict):
        """``g(q, qd, qdd) -> tau_d`` (n,) of one draw (RNEA then the actuator's inverse)."""
        if not self.actuator.invertible:
            self.actuator.command(sample, None, None, None)  # raises with the reason
        actuator, robot = self.actuator, self.dynamics_robot
        params = self.params(sample)

        def g(q, qd, qdd):
            dtype = jnp.result_type(q)
            s = {k: jnp.asarray(v, dtype) for k, v in sample.items()}
            tau = bn.rnea(robot, q, qd, qdd, params=params.astype(dtype))
            return actuator.command(s, tau, q, qd)

        return g

    def init_sample(self, *, key=None, dtype=None) -> dict:
        """Latent values at the prior medians (``base_z = 0``: ``beta = B mu``)."""
        dtype = dtype or jnp.result_type(float)
        key = jax.random.key(0) if key is None else key
        out = {s.site: s.init(dtype) for s in self.placement_sites}
        out[BASE_SITE] = jnp.zeros(self.base.n_base, dtype)
        out.update(self.actuator.init_sample(key, dtype))
        out.update({s.site: s.init(dtype) for s in self.noise_sites})
        return out

    @property
    def latent_sites(self) -> tuple[str, ...]:
        return tuple(self.init_sample())

    # --- completion and prior draws -------------------------------------------------------------

    def complete(self, key, samples: dict) -> dict:
        """theta and DiffNEA virtual parameters of every draw, from ``theta | beta`` (the prior).

        Args:
            key: ``jax.random`` key (one subkey per draw).
            samples: latent sites with a leading draw axis ``{site: (D, ...)}``.

        Returns:
            ``{"theta": (D, n, 10), "virtual": (D, n, 10), "completion_ok": (D,),
            "completion_margin": (D,)}`` (numpy); ``completion_ok`` is False where no consistent
            body has the draw's base parameters (:func:`truncated_conditional`); ``theta`` and
            ``virtual`` are NaN there.
        """
        sites = {k: jnp.asarray(samples[k]) for k in self.completion_sites}
        D = sites[BASE_SITE].shape[0]
        keys = jax.random.split(key, D)
        # fixed-size chunks (the last padded with its last draw): one compiled program for any
        # number of draws (a MAP's single draw and a chain's thousand), and a vmapped Newton /
        # hit-and-run loop waits only for the slowest draw of its chunk
        C = COMPLETION_CHUNK
        pad = (-D) % C

        def padded(x):
            return jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]) if pad else x

        keys, sites = padded(keys), {k: padded(v) for k, v in sites.items()}
        completer = self.completer
        parts = [
            completer(keys[i : i + C], {k: v[i : i + C] for k, v in sites.items()})
            for i in (range(0, D + pad, C) if D else [0])  # no draws: one empty call
        ]
        theta, virtual, ok, margin = (np.concatenate(p)[:D] for p in zip(*parts, strict=True))
        return {
            "theta": theta,
            "virtual": virtual,
            "completion_ok": ok,
            "completion_margin": margin,
        }

    def sample_prior(self, key, num: int, *, dtype=None) -> tuple[dict, dict]:
        """``num`` joint draws from the prior: latent sites and their completion.

        Draws whose base parameters no consistent body has (empty ``theta | beta`` slice) are
        replaced by redraws (the prior is truncated to base parameters of a consistent body).

        Returns:
            ``(latent {site: (num, ...)}, completion as from :meth:`complete`)``.
        """
        dtype = dtype or jnp.result_type(float)
        latent_out, comp_out = [], []
        have = 0
        while have < num:
            key, k_lat, k_comp = jax.random.split(key, 3)
            latent = _prior_latent(self, k_lat, num, dtype)
            comp = self.complete(k_comp, latent)
            ok = comp["completion_ok"]
            latent_out.append({k: np.asarray(v)[ok] for k, v in latent.items()})
            comp_out.append({k: v[ok] for k, v in comp.items()})
            have += int(ok.sum())
        latent = {k: np.concatenate([d[k] for d in latent_out])[:num] for k in latent_out[0]}
        comp = {k: np.concatenate([d[k] for d in comp_out])[:num] for k in comp_out[0]}
        return latent, comp

    # --- data and the NumPyro model -----------------------------------------------------------

    def prepare(self, data: ModelData) -> BaseFeatures:
        """The data with their base-parameter features (:class:`BaseFeatures`), computed once.

        Forward likelihood: ``M_k(q)`` and ``h_k(q, qd)`` per sample; inverse: ``Y_b(q, qd,
        qdd)``. With them a likelihood evaluation is an ``n x n`` solve per sample instead of an
        ABA (same values: tested against the ABA path).
        """
        self.check(data)
        if isinstance(data, BaseFeatures):
            return data
        # 16 generic (random) states appended: their nonzero columns are the robot's structural
        # sparsity, so data of one robot share one feature layout; one program for both
        N = data.q.shape[0]
        generic = bn.sample_states(self.robot, jax.random.key(0), 16)
        dense = self._dense_features(
            *(
                jnp.concatenate([x, g.astype(x.dtype)])
                for x, g in zip(data[:3], generic, strict=True)
            )
        )
        features = {}
        for name, value in dense.items():
            value = np.asarray(value)
            structure = [
                np.flatnonzero(np.any(value[N:, e] != 0, axis=0)) for e in range(value.shape[1])
            ]
            features[name] = SparseFeatures.from_dense(value[:N], structure)
        return BaseFeatures(*data, **features)

    def _dense_features(self, q, qd, qdd) -> dict:
        """Dense features of the likelihood, (N, E, b) each: ``{"mass": upper triangle of M_k,
        "bias": h_k}`` (forward) or ``{"regressor": Y_b}`` (inverse)."""
        if self.source.spec.likelihood == "inverse":
            return {"regressor": self._feature_programs["regressor"](q, qd, qdd)}
        mass, bias = self._feature_programs["mass_bias"](q, qd)
        return {"mass": mass, "bias": bias}

    @functools.cached_property
    def _feature_programs(self) -> dict:
        """Jitted, vmapped feature functions of :meth:`_dense_features`, built once per model so
        that a MAP and the NUTS run after it (each preparing the same data) compile them once."""
        robot, base = self.robot, self.base
        n = robot.n

        def regressor(q, qd, qdd):
            params = robot.nominal.astype(q.dtype)
            return base.regressor(bn.joint_torque_regressor(robot, q, qd, qdd, params=params))

        def mass_bias(q, qd):
            zero = jnp.zeros_like(q)
            bias = regressor(q, qd, zero)
            gravity = regressor(q, zero, zero)
            eye = jnp.eye(n, dtype=q.dtype)
            cols = jax.vmap(lambda e: regressor(q, zero, e) - gravity)(eye)  # (j, i, k)
            upper = jnp.stack([cols[j, i] for i in range(n) for j in range(i, n)])  # M_ij, i <= j
            return upper, bias

        return {
            "regressor": jax.jit(jax.vmap(regressor)),
            "mass_bias": jax.jit(jax.vmap(mass_bias)),
        }

    def check(self, data) -> None:
        """Raise ``ValueError`` if ``data`` cannot condition this model."""
        if isinstance(data, LinearStats):
            raise ValueError("the identifiable geometry takes ModelData, not LinearStats")
        check_data(
            ModelData(data.q, data.qd, data.qdd, data.tau),
            n=self.robot.n,
            ndim=2,
            what=f"data for {self.source.spec.structure_name!r}",
        )
        if isinstance(data, BaseFeatures):
            need = "regressor" if self.source.spec.likelihood == "inverse" else "mass"
            if getattr(data, need) is None:
                raise ValueError(
                    f"BaseFeatures lack {need!r} for the {self.source.spec.likelihood!r} likelihood; "
                    "build them with this model's prepare(data)"
                )

    def sample_latent(self, dtype) -> dict:
        """Declare the latent sites (inside a NumPyro model); returns one draw."""
        b = self.base.n_base
        sample = {s.site: s.sample(dtype) for s in self.placement_sites}
        sample[BASE_SITE] = numpyro.sample(
            BASE_SITE, dist.Normal(jnp.zeros(b, dtype), jnp.ones(b, dtype)).to_event(1)
        )
        sample.update(self.actuator.sample(dtype))
        sample.update({s.site: s.sample(dtype) for s in self.noise_sites})
        return sample

    def _qdd_features(self, sample, batch: BaseFeatures) -> Array:
        """Accelerations joint-major (n, N), ``M(q)^-1 (tau - h)`` from the features,
        ``M = sum_k beta_k M_k``."""
        beta = self.beta(sample)
        n, dtype = self.robot.n, batch.q.dtype
        s = {k: jnp.asarray(v, dtype) for k, v in sample.items()}
        tau = self.actuator.torque_joint_major(s, batch.tau.T, batch.q.T, batch.qd.T)  # (n, N)
        upper = iter(batch.mass.contract(beta))
        M = [[None] * n for _ in range(n)]
        for i in range(n):
            for j in range(i, n):
                M[i][j] = M[j][i] = next(upper)
        h = batch.bias.contract(beta)
        return jnp.stack(_spd_solve_rows(M, [tau[i] - h[i] for i in range(n)]))

    def _tau_features(self, sample, batch: BaseFeatures) -> Array:
        """Commanded efforts (N, n): the actuator's inverse of ``Y_b beta``."""
        beta = self.beta(sample)
        dtype = batch.q.dtype
        s = {k: jnp.asarray(v, dtype) for k, v in sample.items()}
        tau = jnp.stack(batch.regressor.contract(beta), axis=-1)
        return jax.vmap(lambda t, q, qd: self.actuator.command(s, t, q, qd))(tau, batch.q, batch.qd)

    def model(self, data: ModelData | BaseFeatures, *, subsample_size: int | None = None) -> None:
        """The NumPyro model: ``base_z``, actuator and noise sites, then ``obs_qdd``/``obs_tau``."""
        self.check(data)
        dtype = jnp.result_type(data.q)
        sample = self.sample_latent(dtype)
        N = data.q.shape[0]
        features = isinstance(data, BaseFeatures)
        with numpyro.plate("data", N, subsample_size=subsample_size) as idx:
            if subsample_size is None:
                batch = data
            elif features:
                batch = data.take(idx)
            else:
                batch = type(data)(*(x[idx] for x in data))
            if self.source.spec.likelihood == "forward":
                if features:  # predictions joint-major (n, N), the noise on those rows
                    rows = self._qdd_features(sample, batch)
                    noise = self.source.noise_dist_rows(rows, sample, "qdd")
                else:
                    pred = jax.vmap(self.qdd_fn(sample))(batch.q, batch.qd, batch.tau)
                    noise = self.source.noise_dist(pred, sample, "qdd", 1)
                numpyro.sample("obs_qdd", noise, obs=batch.qdd)
            else:
                if features:
                    pred = self._tau_features(sample, batch)
                else:
                    pred = jax.vmap(self.tau_fn(sample))(batch.q, batch.qd, batch.qdd)
                noise = self.source.noise_dist(pred, sample, "tau", 1)
                numpyro.sample("obs_tau", noise, obs=batch.tau)


@dataclasses.dataclass(frozen=True, eq=False)
class KinematicIdentifiableModel(IdentifiableModel):
    """``nokin-diffnea`` (learned placements) in kinematics-conditional base coordinates.

    With the placements ``k`` latent the base parameters move with them:
    ``beta(k) = B(k) theta`` with ``B(k) = [I  K(k)]`` on the pivot columns of the nominal
    placements (``theta_dep`` expressed through ``theta_ind``; ``K(k)`` is the least-squares
    solution of ``W_ind(k) K = W_dep(k)`` for the regressor ``W(k)`` stacked at fixed random
    states, smooth in ``k`` while its rank is that of the nominal placements). The prior is
    generative as in the module docstring, now at each ``k``: placements from the family's
    prior, ``beta | k ~ N(B(k) mu, B(k) Sigma B(k)^T)`` through the whitened ``base_z``, theta
    given ``(k, beta)`` from ``G``'s conditional truncated to the consistent bodies; so the joint
    prior of ``(k, theta)`` is the family prior on placements times ``G``. The likelihood depends
    on ``(k, beta)`` only; NUTS moves in ``(k, base_z)``, actuator and noise coordinates.

    Fields (beyond :class:`IdentifiableModel`): ``basis_states`` ``(q, qd, qdd)`` (S, n) the
    states whose stacked regressor defines ``B(k)``. ``base`` and ``condition`` are those of the
    nominal placements (``base_names`` name the pivot structure).
    """

    basis_states: tuple = ()

    @property
    def placement_sites(self) -> tuple:
        family = self.source.family
        return (family.rpy, family.xyz)

    @property
    def completion_sites(self) -> tuple[str, ...]:
        return (BASE_SITE, *(s.site for s in self.placement_sites))

    @property
    def nuts_metric(self) -> str:
        """``"laplace-curved"`` (:mod:`inference.curved`): along the placements' fourth-order
        axes the posterior bends (other coordinates follow the square of the axis), which no
        fixed metric follows. Stribeck friction: ``"laplace-curved-or-adapt"``, the curved map
        only where its fourth-order axis rises steeply (``inference.nuts.strongly_bent``: the
        Furuta's), ``"laplace-adapt"`` otherwise: on the cart-pole, whose bend is mild, the
        Stribeck funnel dominates and in the curved coordinates NUTS diverged (5-35 of 2,000
        draws against 0; docs/inference-geometry.md)."""
        if self.source.spec.actuator == "stribeck":
            return "laplace-curved-or-adapt"
        return "laplace-curved"

    @property
    def nuts_target_accept(self) -> float:
        """0.99: in the curved map's coordinates the Furuta's posterior still has heavier tails
        along the bent axes than the map's third-order fit captures; at 0.95 NUTS diverged in 0-6
        draws of 2,000 (viscous) and 3 (Stribeck), at 0.99 in none of three runs each, for
        about twice the leapfrog steps (30 instead of 15 per draw, viscous;
        docs/inference-geometry.md)."""
        return 0.99

    @property
    def multimodal_start(self) -> bool:
        """Whether ``inference.fit_svi`` restarts from several start points: where the placements
        start at prior draws (a weak prior); an informative one starts every restart at its
        median, so they would all be the same."""
        return not self.source.prior.starts_at_median

    def start_sample(self, key, *, dtype=None) -> dict:
        """A starting point for inference: :meth:`init_sample` with the placements of the source
        model's start (``models.BayesianModel.start_sample``: drawn from a weak prior, whose mean
        puts the joint axes along gravity, where ``B(k)`` is singular)."""
        dtype = dtype or jnp.result_type(float)
        out = self.init_sample(key=key, dtype=dtype)
        start = self.source.start_sample(key, dtype=dtype)
        out.update({s.site: start[s.site] for s in self.placement_sites})
        return out

    def kinematics(self, sample: dict, dtype) -> tuple[Array, Array]:
        family = self.source.family
        return family.rpy.value(sample).astype(dtype), family.xyz.value(sample).astype(dtype)

    def basis(self, rpy: Array, xyz: Array) -> Array:
        """``B(k)`` (b, 10 n) at placements ``rpy``, ``xyz`` (n, 3): identity on the pivot
        columns, ``K(k)`` on the others (QR least squares of the stacked regressor)."""
        robot, base = self.dynamics_robot, self.base
        dtype = rpy.dtype
        n, b = robot.n, base.n_base
        theta = jnp.zeros((n, 10), dtype)  # the regressor does not depend on theta
        params = bn.RobotParams(theta, rpy, xyz)
        q, qd, qdd = (jnp.asarray(x, dtype) for x in self.basis_states)
        W = jax.vmap(lambda a, v, c: bn.joint_torque_regressor(robot, a, v, c, params=params))(
            q, qd, qdd
        ).reshape(-1, 10 * n)
        ind, dep = np.asarray(base.independent), np.asarray(base.dependent)
        B = jnp.zeros((b, 10 * n), dtype).at[:, ind].set(jnp.eye(b, dtype=dtype))
        if dep.size == 0:
            return B
        Q, R = jnp.linalg.qr(W[:, ind])
        K = jax.scipy.linalg.solve_triangular(R, Q.T @ W[:, dep], lower=False)
        return B.at[:, dep].set(K)

    def condition_at(self, sample: dict) -> GaussianCondition:
        dtype = sample[BASE_SITE].dtype
        B = self.basis(*self.kinematics(sample, dtype))
        return GaussianCondition.traced(B, self.condition.mu, self.condition.cov)

    def physical(self, sample: dict) -> dict:
        """As :meth:`IdentifiableModel.physical` (base parameters at the draw's placements),
        plus the placements ``rpy``, ``xyz`` (n, 3)."""
        out = super().physical(sample)
        out["rpy"], out["xyz"] = self.kinematics(sample, sample[BASE_SITE].dtype)
        return out

    def prepare(self, data: ModelData) -> ModelData:
        """The checked data: the placements are latent, so there are no fixed features."""
        self.check(data)
        if isinstance(data, BaseFeatures):
            return ModelData(data.q, data.qd, data.qdd, data.tau)
        return data


def spd_solve(M: Array, rhs: Array) -> Array:
    """``M^-1 rhs`` for a batch of small symmetric positive definite ``M`` (..., n, n), (..., n).

    Cholesky ``M = L L^T`` and two triangular solves unrolled over the (static, small) ``n`` as
    elementwise operations across the batch (:func:`_spd_solve_rows`): a batched LAPACK call per
    tiny matrix cost ~100x more on a CPU.
    """
    n = M.shape[-1]
    rows = [[M[..., i, j] for j in range(n)] for i in range(n)]
    return jnp.stack(_spd_solve_rows(rows, [rhs[..., i] for i in range(n)]), axis=-1)


def _spd_solve_rows(M: list, rhs: list) -> list:
    """:func:`spd_solve` on entries: ``M[i][j]`` and ``rhs[i]`` are arrays of one batch shape;
    returns the solution's entries. No pivoting is needed for positive definite ``M`` (Golub &
    Van Loan 2013, 4.2)."""
    n = len(rhs)
    L = [[None] * n for _ in range(n)]
    for j in range(n):
        d = M[j][j] - sum(L[j][k] ** 2 for k in range(j))
        L[j][j] = jnp.sqrt(d)
        for i in range(j + 1, n):
            L[i][j] = (M[i][j] - sum(L[i][k] * L[j][k] for k in range(j))) / L[j][j]
    y = []
    for i in range(n):
        y.append((rhs[i] - sum(L[i][k] * y[k] for k in range(i))) / L[i][i])
    x = [None] * n
    for i in reversed(range(n)):
        x[i] = (y[i] - sum(L[k][i] * x[k] for k in range(i + 1, n))) / L[i][i]
    return x


@jax.jit
def _virtual(theta):
    return bn.bodies_from_theta("diffnea", theta)


def _prior_latent(model: IdentifiableModel, key, num: int, dtype) -> dict:
    """Latent sites drawn from their priors (num, ...)."""
    k_base, k_act, k_noise, k_place = jax.random.split(key, 4)
    out = {BASE_SITE: jax.random.normal(k_base, (num, model.base.n_base), dtype)}
    for k, s in zip(jax.random.split(k_place, 2), model.placement_sites, strict=False):
        out[s.site] = jax.vmap(lambda kk, s=s: s.draw(kk, dtype))(jax.random.split(k, num))
    sites = (
        [*model.actuator.coefficient_sites] if hasattr(model.actuator, "coefficient_sites") else []
    )
    for k, s in zip(jax.random.split(k_act, max(1, len(sites))), sites, strict=False):
        out[s.site] = jax.vmap(lambda kk, s=s: s.draw(kk, dtype))(jax.random.split(k, num))
    for k, s in zip(
        jax.random.split(k_noise, max(1, len(model.noise_sites))), model.noise_sites, strict=False
    ):
        out[s.site] = jax.vmap(lambda kk, s=s: s.draw(kk, dtype))(jax.random.split(k, num))
    return out


def identifiable_model(
    model, *, moment_draws: int = DEFAULT_MOMENT_DRAWS, seed: int = 0
) -> IdentifiableModel:
    """The identifiable-geometry version of a ``diffnea`` model (module docstring).

    Args:
        model: a ``diffnea/{ideal,viscous,stribeck}/*`` :class:`models.BayesianModel` with the
            forward or inverse likelihood.
        moment_draws, seed: Monte Carlo size and seed of :func:`theta_moments`.

    Raises:
        ValueError: another family (no-Kin DiffNEA learns the kinematics, so its base parameters
            move), a network actuator (its weights are not identified either) or the rollout
            likelihood.
    """
    spec = getattr(model, "spec", None)
    if not hasattr(model, "family") or not hasattr(spec, "to_json"):
        raise ValueError(f"expected a models.BayesianModel, got {type(model).__name__}")
    if not (
        model.family.consistent_theta
        and (model.family.linear_in_theta or model.family.learns_kinematics)
        and model.family.white_box
    ):
        raise ValueError(
            f"the identifiable geometry takes the families 'diffnea' and 'nokin-diffnea', got "
            f"{spec.family!r}"
        )
    if spec.actuator not in ("ideal", "viscous", "stribeck"):
        raise ValueError(
            f"the identifiable geometry takes the actuators ['ideal', 'viscous', 'stribeck'], got "
            f"{spec.actuator!r}"
        )
    if spec.likelihood not in ("forward", "inverse"):
        raise ValueError(
            f"the identifiable geometry takes the likelihoods ['forward', 'inverse'], got "
            f"{spec.likelihood!r}"
        )
    mu, cov = theta_moments(model, draws=moment_draws, seed=seed)
    if not model.family.learns_kinematics:
        base = bn.base_parameters(model.robot, 0)
        return IdentifiableModel(model, base, GaussianCondition.build(base.to_base, mu, cov))
    robot = model.family.dynamics_robot  # placements learned on the z-axis form
    base = bn.base_parameters(robot, 0)  # pivot structure at the nominal placements
    states = tuple(np.asarray(x) for x in bn.sample_states(robot, BASIS_STATES_KEY, BASIS_STATES))
    return KinematicIdentifiableModel(
        model, base, GaussianCondition.build(base.to_base, mu, cov), basis_states=states
    )


def identifiable_where_possible(model):
    """``(model, geometry)``: the identifiable-geometry version of a ``diffnea`` or
    ``nokin-diffnea`` model with a non-network actuator (``models.identifiable``), else the model
    unchanged."""
    try:
        return identifiable_model(model), "identifiable"
    except ValueError:  # another family or a network actuator: no base-parameter coordinates
        return model, model.spec.geometry


@jax.jit
def _complete_chunk(argument, keys, sites):
    """:attr:`IdentifiableModel.completer`'s program, the model an argument
    (``models.arguments``): a variant's priors and a system's dataset kinds share its trace."""
    model = held_model(argument)
    steps, reference = model.completion_steps, model.reference_theta
    n, mu = model.robot.n, model.condition.mu.reshape(model.robot.n, 10)

    def one(key, sample):
        condition = model.condition_at(sample)
        beta = condition.beta(sample[BASE_SITE])
        return truncated_conditional(key, beta, condition, steps=steps, reference=reference)

    theta, ok, margin = jax.vmap(one)(keys, sites)
    theta = jnp.where(ok[:, None], theta, jnp.nan).reshape(-1, n, 10)
    safe = jnp.where(ok[:, None, None], theta, mu)
    virtual = jnp.where(ok[:, None, None], _virtual(safe), jnp.nan)
    return theta, virtual, ok, margin
