"""The 26 model variants of the DiffNEA paper as a composition family x actuator x prior.

``2 white-box families (nokin-diffnea, diffnea) x 6 actuators x 2 priors + nea + ffnn = 26``
(Lutter et al. 2021, sections 3 and 4.3-4.4). Names are ``family/actuator/prior``, e.g.
``"diffnea/stribeck/informative"``, plus ``"nea"`` (NEA with an informative Gaussian prior) and
``"ffnn"`` (the black-box network, weak prior on its weights). :func:`variant_names` lists them,
:func:`build_model` builds one for any robot of ``bayes_nea`` (built-in or URDF).

A :class:`BayesianModel` is one NumPyro model plus pure functions of a draw: ``physical(sample)``
and ``qdd_fn(sample)`` are jittable and vmappable over draws; ``model(data)`` declares the
latent sites and calls the same functions, so there is one code path from virtual to physical.

**Geometry: what makes NUTS fast and correct** (measured on the cart-pole
``diffnea/viscous/{informative,weak}``, 200 uniform samples with viscous friction and 0.01 torque
noise, inverse likelihood on the exact sufficient statistics (a gradient then costs ~5 us), fixed
noise 0.01, one chain, 300 draws, float64, 2 shared CPU cores; mean leapfrog steps per draw,
min ESS of the base parameters / viscous coefficients; all runs put the true base parameters
within 0.6 posterior sd):

=================================================  ===========  ===========  ============
setup                                              informative  weak         divergences
=================================================  ===========  ===========  ============
prior-median init, diagonal mass, 300 warm-up      350-540      9 (stuck,    0 / 2
                                                                ESS 3)
SVI (MAP) init, diagonal mass, 300-1000 warm-up    250-570      1023 (tree   0
                                                                depth cap)
SVI init, dense mass, 1000 warm-up                 127-250      340-1000     0 / 2-5
SVI init + Laplace inverse Hessian as dense mass,  **15**       490          2 / 43
not adapted, 200 warm-up (step size only)          (ESS 384)
=================================================  ===========  ===========  ============

Only base-parameter combinations are identified: the rest of the virtual parameters lie on a
curved ridge carried by the prior (condition number ~1e7-1e8), which saturates NUTS's tree
depth with a diagonal mass matrix. With an informative prior the posterior is close to Gaussian
around the MAP and the Laplace preconditioner (``inference.laplace_inverse_mass``, used by
``inference.fit_nuts(..., metric="laplace")``) removes
the ridge: 15 instead of 250-1000 leapfrog steps per draw, a 20-60x speed-up at equal ESS (60 on
data whose pole joint has zero effort, ``tests/test_models_identification.py``). With the
weak prior the ridge is curved (square-root and rotation parameters far from the prior's centre),
no fixed metric fits it, and SVI init + adapted dense mass with a long warm-up is the safe choice.
``whitened`` vs ``centered`` coordinates made no consistent difference once the mass matrix is
adapted; ``whitened`` (standard-normal latent sites scaled by the prior) is the default because it
keeps every coordinate O(1) for SVI, initialisation and the Laplace floor.
"""

from __future__ import annotations

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist

import bayes_nea as bn
from models._sites import GaussianSite, Scales, characteristic_scales
from models.actuators import ACTUATOR_NAMES, Actuator, make_actuator
from models.families import FAMILY_NAMES, Family, FFNNFamily, make_family
from models.likelihoods import (
    LIKELIHOOD_NAMES,
    NOISE_NAMES,
    LinearStats,
    ModelData,
    check_data,
    linear_log_likelihood,
    linear_statistics,
)
from models.priors import PRIOR_NAMES, Prior, get_prior

Array = jax.Array

GEOMETRY_NAMES = ("whitened", "centered")
WHITE_BOX_FAMILIES = ("nokin-diffnea", "diffnea")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One variant: ``family`` x ``actuator`` x ``prior`` (hashable, static).

    Fields:
        family: ``"nokin-diffnea"``, ``"diffnea"``, ``"nea"`` or ``"ffnn"``.
        actuator: ``"ideal"``, ``"viscous"``, ``"stribeck"``, ``"nn-friction"``,
            ``"nn-residual"`` or ``"ffnn"`` (``"ideal"`` for nea and ffnn).
        prior: ``"informative"`` or ``"weak"``.
    """

    family: str
    actuator: str = "ideal"
    prior: str = "informative"

    def __post_init__(self):
        if self.family not in FAMILY_NAMES:
            raise ValueError(
                f"unknown family {self.family!r}; valid families are {list(FAMILY_NAMES)}"
            )
        if self.actuator not in ACTUATOR_NAMES:
            raise ValueError(
                f"unknown actuator {self.actuator!r}; valid actuators are {list(ACTUATOR_NAMES)}"
            )
        if self.prior not in PRIOR_NAMES:
            raise ValueError(f"unknown prior {self.prior!r}; valid priors are {list(PRIOR_NAMES)}")
        if self.family in ("nea", "ffnn") and self.actuator != "ideal":
            raise ValueError(
                f"the {self.family!r} family takes no actuator model (actuator='ideal'), got "
                f"{self.actuator!r}: NEA is linear regression (DiffNEA 4.3) and FF-NN sees tau_d"
            )

    @property
    def name(self) -> str:
        """Registry name: ``"family/actuator/prior"``, or ``"nea"`` / ``"ffnn"``."""
        for short, spec in _SPECIAL.items():
            if spec == self:
                return short
        return f"{self.family}/{self.actuator}/{self.prior}"

    @classmethod
    def parse(cls, name: str) -> ModelSpec:
        """The spec of a registry name; ``ValueError`` listing the valid names otherwise."""
        if name in _REGISTRY:
            return _REGISTRY[name]
        raise ValueError(f"unknown model variant {name!r}; valid variants are {list(_REGISTRY)}")


_SPECIAL = {
    "nea": ModelSpec("nea", "ideal", "informative"),
    "ffnn": ModelSpec("ffnn", "ideal", "weak"),
}
_REGISTRY: dict[str, ModelSpec] = {
    f"{f}/{a}/{p}": ModelSpec(f, a, p)
    for f, a, p in itertools.product(WHITE_BOX_FAMILIES, ACTUATOR_NAMES, PRIOR_NAMES)
}
_REGISTRY.update(_SPECIAL)


def variant_names() -> tuple[str, ...]:
    """The 26 registry names, white-box product first, then ``"nea"`` and ``"ffnn"``."""
    return tuple(_REGISTRY)


def describe(name_or_spec: str | ModelSpec) -> str:
    """One line: family, actuator with its energy class, prior."""
    spec = ModelSpec.parse(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
    if spec.family == "ffnn":
        return "black-box network qdd = f(q, qd, tau_d); energy unbounded; N(0, 1/fan_in) weights"
    if spec.family == "nea":
        return "linear NEA tau = Y theta (known kinematics); energy conserving; Gaussian prior on theta (closed form)"
    from models.actuators import energy_class

    family = {
        "nokin-diffnea": "no-Kin DiffNEA (placements + inertias learned)",
        "diffnea": "DiffNEA (known kinematics, inertias learned)",
    }[spec.family]
    return f"{family}; actuator {spec.actuator} ({energy_class(spec.actuator)}); {spec.prior} prior"


@dataclasses.dataclass(frozen=True, eq=False)
class BayesianModel:
    """A variant built for a robot (see the module docstring); frozen, hashable by identity.

    Fields:
        spec: the :class:`ModelSpec`.
        robot: the robot the data belong to.
        likelihood: ``"forward"``, ``"inverse"`` or ``"rollout"``.
        family, actuator, prior: the composed parts.
        scales: characteristic magnitudes of the robot (network and noise scaling).
        noise: ``"normal"`` or ``"student-t"``; ``student_df`` its degrees of freedom.
        noise_scale: fixed per-joint noise sd (n,) or None (latent noise sites).
        noise_sites: latent log-noise sites (empty when ``noise_scale`` is fixed).
        dt: RK4 step of the rollout likelihood (s).
        geometry: ``"whitened"`` or ``"centered"`` latent coordinates.
    """

    spec: ModelSpec
    robot: bn.Robot
    likelihood: str
    family: Family
    actuator: Actuator
    prior: Prior
    scales: Scales
    noise: str = "normal"
    student_df: float = 4.0
    noise_scale: np.ndarray | None = None
    noise_sites: tuple[GaussianSite, ...] = ()
    dt: float = bn.DEFAULT_DT
    geometry: str = "whitened"

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def energy_class(self) -> str:
        """``"conserving"``, ``"dissipative"`` or ``"unbounded"`` (of the uncontrolled system)."""
        return "unbounded" if self.spec.family == "ffnn" else self.actuator.energy_class

    @property
    def dynamics_robot(self) -> bn.Robot:
        """The robot whose frames ``physical``'s theta, rpy, xyz refer to (z-axis form for no-Kin)."""
        return self.family.dynamics_robot

    @property
    def linear_exact(self) -> bool:
        """Whether :meth:`prepare` gives exact sufficient statistics (likelihoods module docstring)."""
        return (
            self.likelihood == "inverse"
            and self.noise == "normal"
            and self.spec.family in ("diffnea", "nea")
            and self.spec.actuator in ("ideal", "viscous")
        )

    # --- pure functions of one draw ------------------------------------------------------------

    def physical(self, sample: dict) -> dict:
        """Physical quantities of one draw: ``theta`` (n, 10), ``rpy``, ``xyz`` (n, 3) (frames of
        :attr:`dynamics_robot`), actuator coefficients (``viscous``, ``coulomb``, ... (n,)) and
        noise scales (``sigma_qdd`` ...); ``{}`` plus noise scales for ``ffnn``. Jittable,
        vmappable over draws.
        """
        out = dict(self.family.physical(sample)) if self.family.white_box else {}
        out.update(self.actuator.physical(sample))
        for site in self.noise_sites:
            out[site.name.removeprefix("log_")] = jnp.exp(site.value(sample))
        return out

    def qdd_fn(self, sample: dict):
        """``f(q, qd, tau_d) -> qdd`` (n,) of one draw: actuator then ABA (or the network).

        Pure; usable inside ``jax.vmap`` over draws and ``lax.scan`` over time (e.g. with
        :func:`bayes_nea.integrate`).
        """
        family, actuator, robot = self.family, self.actuator, self.dynamics_robot
        params = family.params(sample) if family.white_box else None

        def f(q, qd, tau_d):
            dtype = jnp.result_type(q)
            s = {k: jnp.asarray(v, dtype) for k, v in sample.items()}
            if isinstance(family, FFNNFamily):
                return family.qdd(s, q, qd, tau_d)
            tau = actuator.torque(s, tau_d, q, qd)
            return bn.aba(robot, q, qd, tau, params=params.astype(dtype))

        return f

    def tau_fn(self, sample: dict):
        """``g(q, qd, qdd) -> tau_d`` (n,) of one draw: RNEA then the actuator's inverse.

        Raises:
            ValueError: FF-NN family or a non-invertible actuator.
        """
        if not self.family.white_box:
            raise ValueError("the 'ffnn' family has no inverse dynamics; use likelihood='forward'")
        if not self.actuator.invertible:
            self.actuator.command(sample, None, None, None)  # raises with the reason
        family, actuator, robot = self.family, self.actuator, self.dynamics_robot
        params = family.params(sample)

        def g(q, qd, qdd):
            dtype = jnp.result_type(q)
            s = {k: jnp.asarray(v, dtype) for k, v in sample.items()}
            tau = bn.rnea(robot, q, qd, qdd, params=params.astype(dtype))
            return actuator.command(s, tau, q, qd)

        return g

    def init_sample(self, *, key=None, dtype=None) -> dict:
        """Latent values at the prior medians (nominal values for informative priors); network
        weights drawn from their prior with ``key`` (default ``jax.random.key(0)``).
        """
        dtype = dtype or jnp.result_type(float)
        key = jax.random.key(0) if key is None else key
        k1, k2 = jax.random.split(key)
        out = dict(self.family.init_sample(k1, dtype))
        out.update(self.actuator.init_sample(k2, dtype))
        out.update({s.site: s.init(dtype) for s in self.noise_sites})
        return out

    @property
    def latent_sites(self) -> tuple[str, ...]:
        """Names of the latent sites of one draw."""
        return tuple(self.init_sample())

    # --- data ------------------------------------------------------------------------------

    def prepare(self, data: ModelData) -> ModelData | LinearStats:
        """The cheapest exact form of ``data`` for :meth:`model`: :class:`LinearStats` where
        :attr:`linear_exact`, else ``data`` unchanged (validated).
        """
        self.check(data)
        if not self.linear_exact:
            return data
        return linear_statistics(self.robot, data, viscous=self.spec.actuator == "viscous")

    def check(self, data) -> None:
        """Raise ``ValueError`` if ``data`` cannot condition this model (shape, NaN, layout)."""
        if isinstance(data, LinearStats):
            if not self.linear_exact:
                raise ValueError(
                    f"{self.name!r} with likelihood {self.likelihood!r} cannot use LinearStats; "
                    "pass ModelData"
                )
            return
        ndim = 3 if self.likelihood == "rollout" else 2
        check_data(
            data, n=self.robot.n, ndim=ndim, what=f"data for {self.name!r} on {self.robot.name!r}"
        )

    # --- the NumPyro model -----------------------------------------------------------------

    def sample_latent(self, dtype) -> dict:
        """Declare all latent sites (inside a NumPyro model); returns one draw as a sample dict."""
        sample = dict(self.family.sample(dtype))
        sample.update(self.actuator.sample(dtype))
        sample.update({s.site: s.sample(dtype) for s in self.noise_sites})
        return sample

    def _sigma(self, sample, key: str, dtype) -> Array:
        if self.noise_scale is not None:
            return jnp.asarray(self.noise_scale, dtype)
        site = next(s for s in self.noise_sites if s.name == "log_sigma_" + key)
        return jnp.exp(site.value(sample)).astype(dtype)

    def _noise_dist(self, loc, sigma, event_dims: int):
        scale = jnp.broadcast_to(sigma, loc.shape)
        if self.noise == "student-t":
            d = dist.StudentT(jnp.asarray(self.student_df, loc.dtype), loc, scale)
        else:
            d = dist.Normal(loc, scale)
        return d.to_event(event_dims)

    def model(self, data: ModelData | LinearStats, *, subsample_size: int | None = None) -> None:
        """The NumPyro model: latent sites, then the likelihood's observed sites ``obs_*``.

        Args:
            data: ``ModelData`` (N, n) (rollout: (W, H + 1, n)), or :class:`LinearStats` from
                :meth:`prepare`.
            subsample_size: minibatch size over samples (windows); None for all.

        Raises:
            ValueError: data of the wrong shape, empty or NaN (concrete arrays).
        """
        self.check(data)
        if isinstance(data, LinearStats):
            if subsample_size is not None:
                raise ValueError("subsample_size does not apply to LinearStats (already summed)")
            dtype = jnp.result_type(data.A)
            sample = self.sample_latent(dtype)
            theta = self.family.params(sample).theta.reshape(-1)
            coef = [theta]
            if self.spec.actuator == "viscous":
                coef.append(self.actuator.physical(sample)["viscous"])
            w = jnp.concatenate(coef).astype(dtype)
            numpyro.factor(
                "obs_tau", linear_log_likelihood(data, w, self._sigma(sample, "tau", dtype))
            )
            return
        dtype = jnp.result_type(data.q)
        sample = self.sample_latent(dtype)
        N = data.q.shape[0]
        with numpyro.plate("data", N, subsample_size=subsample_size) as idx:
            batch = data if subsample_size is None else ModelData(*(x[idx] for x in data))
            if self.likelihood == "forward":
                pred = jax.vmap(self.qdd_fn(sample))(batch.q, batch.qd, batch.tau)
                sigma = self._sigma(sample, "qdd", dtype)
                numpyro.sample("obs_qdd", self._noise_dist(pred, sigma, 1), obs=batch.qdd)
            elif self.likelihood == "inverse":
                pred = jax.vmap(self.tau_fn(sample))(batch.q, batch.qd, batch.qdd)
                sigma = self._sigma(sample, "tau", dtype)
                numpyro.sample("obs_tau", self._noise_dist(pred, sigma, 1), obs=batch.tau)
            else:
                f = self.qdd_fn(sample)

                def window(q, qd, tau):
                    traj = bn.integrate(f, q[0], qd[0], tau[:-1], dt=self.dt)
                    return traj.q[1:], traj.qd[1:]

                q_pred, qd_pred = jax.vmap(window)(batch.q, batch.qd, batch.tau)
                sq = self._sigma(sample, "q", dtype)
                sqd = self._sigma(sample, "qd", dtype)
                numpyro.sample("obs_q", self._noise_dist(q_pred, sq, 2), obs=batch.q[:, 1:])
                numpyro.sample("obs_qd", self._noise_dist(qd_pred, sqd, 2), obs=batch.qd[:, 1:])


def _noise_sites(likelihood, prior: Prior, scales: Scales, n, whitened) -> tuple[GaussianSite, ...]:
    typical = {
        "forward": {"qdd": 0.05 * scales.qdd},
        "inverse": {"tau": 0.05 * scales.tau},
        "rollout": {"q": np.full(n, 1e-3), "qd": 0.01 * scales.qd},
    }[likelihood]
    sites = []
    for key, value in typical.items():
        g = prior.noise(n, typical=1.0)
        g = g._replace(loc=np.log(np.asarray(value, dtype=np.float64)))
        sites.append(GaussianSite("log_sigma_" + key, g, whitened))
    return tuple(sites)


def build_model(
    name_or_spec: str | ModelSpec,
    robot: bn.Robot,
    *,
    likelihood: str | None = None,
    noise: str = "normal",
    student_df: float = 4.0,
    noise_scale=None,
    dt: float = bn.DEFAULT_DT,
    geometry: str = "whitened",
    kinematics: str = "known",
    nn_width: int = 32,
    nn_depth: int = 2,
) -> BayesianModel:
    """Build the variant ``name_or_spec`` for ``robot``.

    Args:
        name_or_spec: a name from :func:`variant_names` or a :class:`ModelSpec`.
        robot: any ``bayes_nea.Robot`` (built-in system or URDF).
        likelihood: ``"forward"``, ``"inverse"`` or ``"rollout"``; default ``"inverse"`` for
            ``nea`` (its only one), ``"forward"`` otherwise.
        noise: ``"normal"`` or ``"student-t"`` (with ``student_df`` degrees of freedom).
        noise_scale: fixed noise sd, () or (n,); None samples per-joint noise scales.
        dt: RK4 step (s) of the rollout likelihood (the data's sampling period).
        geometry: ``"whitened"`` (default) or ``"centered"`` latent coordinates.
        kinematics: ``"known"`` or ``"unknown"`` (then only ``nokin-diffnea`` and ``ffnn`` apply).
        nn_width, nn_depth: hidden width and number of hidden layers of the networks.

    Raises:
        ValueError: unknown name or option (the message lists the valid ones), or a variant that
            cannot apply (NEA with a nonlinear likelihood, an inverse likelihood with a
            non-invertible actuator or the FF-NN family, NEA/DiffNEA with unknown kinematics).
    """
    spec = ModelSpec.parse(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
    if not isinstance(spec, ModelSpec):
        raise ValueError(f"expected a variant name or ModelSpec, got {type(name_or_spec).__name__}")
    if not isinstance(robot, bn.Robot):
        raise ValueError(f"robot must be a bayes_nea.Robot, got {type(robot).__name__}")
    if likelihood is None:
        likelihood = "inverse" if spec.family == "nea" else "forward"
    for value, valid, what in (
        (likelihood, LIKELIHOOD_NAMES, "likelihood"),
        (noise, NOISE_NAMES, "noise"),
        (geometry, GEOMETRY_NAMES, "geometry"),
        (kinematics, ("known", "unknown"), "kinematics"),
    ):
        if value not in valid:
            raise ValueError(f"unknown {what} {value!r}; valid values are {list(valid)}")
    if kinematics == "unknown" and spec.family in ("diffnea", "nea"):
        raise ValueError(
            f"{spec.name!r} needs the robot's kinematics (joint placements); with unknown "
            "kinematics use a 'nokin-diffnea/...' variant or 'ffnn'"
        )
    if spec.family == "nea" and likelihood != "inverse":
        raise ValueError(
            "'nea' is linear in theta only for inverse dynamics (its theta need not be physical, "
            f"so forward dynamics may not exist); use likelihood='inverse', not {likelihood!r}"
        )
    if likelihood == "inverse" and spec.family == "ffnn":
        raise ValueError(
            "the 'ffnn' family predicts accelerations; use likelihood='forward' or 'rollout'"
        )
    if likelihood == "inverse" and spec.actuator == "ffnn":
        raise ValueError(
            f"{spec.name!r}: the 'ffnn' actuator has no closed-form inverse, so the "
            "inverse-dynamics likelihood cannot apply; use likelihood='forward' or 'rollout'"
        )
    if not (dt > 0):
        raise ValueError(f"dt must be > 0, got {dt}")
    if student_df <= 0:
        raise ValueError(f"student_df must be > 0, got {student_df}")
    if nn_width < 1 or nn_depth < 0:
        raise ValueError(f"nn_width must be >= 1 and nn_depth >= 0, got {nn_width}, {nn_depth}")
    if noise_scale is not None:
        noise_scale = np.broadcast_to(np.asarray(noise_scale, dtype=np.float64), (robot.n,)).copy()
        if not np.all(noise_scale > 0):
            raise ValueError(f"noise_scale must be > 0, got {noise_scale}")
    prior = get_prior(spec.prior)
    scales = characteristic_scales(robot)
    whitened = geometry == "whitened"
    options = dict(whitened=whitened, nn_width=nn_width, nn_depth=nn_depth)
    family = make_family(spec.family, robot, prior, scales, **options)
    actuator = make_actuator(spec.actuator, family.dynamics_robot, prior, scales, **options)
    noise_sites = (
        ()
        if noise_scale is not None
        else _noise_sites(likelihood, prior, scales, robot.n, whitened)
    )
    return BayesianModel(
        spec=spec,
        robot=robot,
        likelihood=likelihood,
        family=family,
        actuator=actuator,
        prior=prior,
        scales=scales,
        noise=noise,
        student_df=float(student_df),
        noise_scale=noise_scale,
        noise_sites=noise_sites,
        dt=float(dt),
        geometry=geometry,
    )
