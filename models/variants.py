"""The 26 model variants of the DiffNEA paper as a composition family x actuator x prior.

``2 white-box families (nokin-diffnea, diffnea) x 6 actuators x 2 priors + nea + ffnn = 26``
(Lutter et al. 2021, sections 3 and 4.3-4.4). Names are ``family/actuator/prior``, e.g.
``"diffnea/stribeck/informative"``, plus ``"nea"`` (NEA with an informative Gaussian prior) and
``"ffnn"`` (the black-box network, weak prior on its weights). :func:`variant_names` lists them,
:func:`build_model` builds one for any robot of ``bayes_nea`` (built-in or URDF).

A :class:`BayesianModel` is one NumPyro model plus pure functions of a draw: ``physical(sample)``
and ``qdd_fn(sample)`` are jittable and vmappable over draws; ``model(data)`` declares the
latent sites and calls the same functions, so there is one code path from virtual to physical.

**Geometry.** Only base-parameter combinations are identified by the data; the remaining
virtual parameters lie on a curved ridge carried by the prior. ``geometry="whitened"`` (the
default: standard-normal latent sites scaled by the prior) keeps every coordinate O(1) for SVI,
initialisation and the Laplace metric of ``inference.fit_nuts``; ``"centered"`` samples the
coordinates themselves. What was measured with each: ``docs/measurements.md``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
from numpyro import handlers

import bayes_nea as bn
from models._sites import GaussianSite, Scales, characteristic_scales
from models.actuators import NETWORK_ACTUATORS, Actuator, energy_class, make_actuator
from models.families import FAMILY_CLASSES, Family, make_family
from models.identifiable import identifiable_model
from models.likelihoods import (
    JointMajorNoise,
    LinearStats,
    ModelData,
    check_data,
    make_likelihood,
)
from models.likelihoods import Likelihood as LikelihoodComponent
from models.priors import Gaussian, Prior, get_prior
from models.spec import WHITE_BOX_FAMILIES, ModelSpec, variant_names

Array = jax.Array


def describe(name_or_spec: str | ModelSpec) -> str:
    """One line: family, actuator with its energy class, prior."""
    spec = ModelSpec.parse(name_or_spec) if isinstance(name_or_spec, str) else name_or_spec
    if spec.family == "ffnn":
        return "black-box network qdd = f(q, qd, tau_d); energy unbounded; N(0, 1/fan_in) weights"
    if spec.family == "nea":
        return "linear NEA tau = Y theta (known kinematics); energy conserving; Gaussian prior on theta (closed form)"
    family = {
        "nokin-diffnea": "no-Kin DiffNEA (placements + inertias learned)",
        "diffnea": "DiffNEA (known kinematics, inertias learned)",
    }[spec.family]
    return f"{family}; actuator {spec.actuator} ({energy_class(spec.actuator)}); {spec.prior} prior"


@dataclasses.dataclass(frozen=True, eq=False)
class BayesianModel:
    """A model built from a complete :class:`ModelSpec` (see the module docstring).

    Fields:
        spec: the complete spec (variant, likelihood, options, robot): ``build(spec)`` rebuilds
            this model exactly.
        family, actuator, prior, likelihood: the composed parts (``likelihood`` is a
            ``models.likelihoods.Likelihood`` component).
        scales: characteristic magnitudes of the robot (network and noise scaling).
        noise_sites: latent noise sites: log scales ``log_sigma_<signal>`` (none when
            ``spec.noise_scale`` is fixed), then learned Student-t ``log_df_<signal>``.
    """

    spec: ModelSpec
    family: Family
    actuator: Actuator
    prior: Prior
    likelihood: LikelihoodComponent
    scales: Scales
    noise_sites: tuple[GaussianSite, ...] = ()
    #: the prior's values are in the sites' Gaussians; the object itself is read when the model
    #: is built and where inference starts, never by traced computations (``models.arguments``)
    untraced_fields: ClassVar[tuple[str, ...]] = ("prior",)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def robot(self) -> bn.Robot:
        """The robot the data belong to (``spec.robot``)."""
        return self.spec.robot

    @property
    def noise_scale(self) -> np.ndarray | None:
        """Fixed per-joint noise sd (n,), or None (latent noise scales)."""
        return self.spec.noise_scale_per_joint

    @property
    def dt(self) -> float:
        return self.spec.dt

    @property
    def energy_class(self) -> str:
        """``"conserving"``, ``"dissipative"`` or ``"unbounded"`` (of the uncontrolled system)."""
        return "unbounded" if self.family.black_box else self.actuator.energy_class

    @property
    def dynamics_robot(self) -> bn.Robot:
        """The robot whose frames ``physical``'s theta, rpy, xyz refer to (z-axis form for no-Kin)."""
        return self.family.dynamics_robot

    @property
    def linear_exact(self) -> bool:
        """Whether :meth:`prepare` gives exact sufficient statistics (likelihoods module docstring)."""
        return self.likelihood.exact_statistics

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
        params = None if family.black_box else family.params(sample)

        def f(q, qd, tau_d):
            dtype = jnp.result_type(q)
            s = {k: jnp.asarray(v, dtype) for k, v in sample.items()}
            if family.black_box:
                return family.qdd(s, q, qd, tau_d)
            tau = actuator.torque(s, tau_d, q, qd)
            return bn.aba(robot, q, qd, tau, params=params.astype(dtype))

        return f

    def qdd_batch(self, sample: dict, q, qd, tau_d):
        """:meth:`qdd_fn` of one draw on N states at once: ``q, qd, tau_d`` (N, n) -> (N, n).

        The likelihoods' path: the actuator (or the black box's network) on the joints' rows
        (``Actuator.torque_joint_major``; networks feature-major: an ensemble's Adam step
        1.15-1.3x faster than with the per-state networks vmapped, docs/measurements.md,
        "Networks on the states' rows"), then ABA vmapped over the states. Equal to
        ``jax.vmap(qdd_fn(sample))`` up to rounding.
        """
        family, actuator, robot = self.family, self.actuator, self.dynamics_robot
        dtype = jnp.result_type(q)
        s = {k: jnp.asarray(v, dtype) for k, v in sample.items()}
        if family.black_box:
            return family.qdd_joint_major(s, q.T, qd.T, tau_d.T).T
        params = family.params(sample).astype(dtype)
        tau = actuator.torque_joint_major(s, tau_d.T, q.T, qd.T).T
        return jax.vmap(lambda a, b, t: bn.aba(robot, a, b, t, params=params))(q, qd, tau)

    def mass_matrix_fn(self, sample: dict):
        """``M(q) -> (n, n)`` joint-space mass matrix of one draw (CRBA; frames of
        :attr:`dynamics_robot`).

        Raises:
            ValueError: a black-box family (no rigid-body part).
        """
        if self.family.black_box:
            raise ValueError(f"the {self.family.name!r} family has no rigid-body part, no mass matrix")
        robot, params = self.dynamics_robot, self.family.params(sample)
        return lambda q: bn.crba(robot, q, params=params.astype(jnp.result_type(q)))

    def tau_fn(self, sample: dict):
        """``g(q, qd, qdd) -> tau_d`` (n,) of one draw: RNEA then the actuator's inverse.

        Raises:
            ValueError: a black-box family or a non-invertible actuator.
        """
        _check_invertible(self.spec, self.family, self.actuator)
        family, actuator, robot = self.family, self.actuator, self.dynamics_robot
        params = family.params(sample)

        def g(q, qd, qdd):
            dtype = jnp.result_type(q)
            s = {k: jnp.asarray(v, dtype) for k, v in sample.items()}
            tau = bn.rnea(robot, q, qd, qdd, params=params.astype(dtype))
            return actuator.command(s, tau, q, qd)

        return g

    def linear_weights(self, sample: dict) -> Array:
        """``[theta_flat; linear actuator coefficients]`` of one draw (linear models only)."""
        coef = [self.family.params(sample).theta.reshape(-1)]
        phys = self.actuator.physical(sample)
        coef += [phys[c] for c in self.actuator.linear_coefficients or ()]
        return jnp.concatenate(coef)

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

    def start_sample(self, key, *, dtype=None) -> dict:
        """A starting point for inference: network weights drawn from their prior with ``key``;
        the other sites drawn too under a weak prior (the paper's random initialisation), at the
        prior median (the nominal values) under a prior with ``starts_at_median`` (the paper's
        "with prior" initialisation); noise scales always at their (data-scaled) medians.

        The prior mean is no start: with every network weight at 0 each tanh unit's output and
        every hidden weight's gradient is exactly 0, and a weak-prior placement at
        ``rpy = xyz = 0`` puts a rail along gravity, where the gradients of ``rpy_z, xyz_z`` vanish
        by symmetry. A prior draw is the Bayesian form of the paper's random initialisation.
        """
        dtype = dtype or jnp.result_type(float)
        if self.prior.starts_at_median:
            return self.init_sample(key=key, dtype=dtype)
        tr = handlers.trace(handlers.seed(self.sample_latent, key)).get_trace(dtype)
        out = {k: site["value"] for k, site in tr.items() if site["type"] == "sample"}
        out.update({s.site: s.init(dtype) for s in self.noise_sites})
        return out

    def white_box_start(self) -> tuple[BayesianModel, tuple[str, ...]] | None:
        """Where inference starts this model's rigid body: ``(model, sites)``, the same spec with
        the ``viscous`` actuator in place of the network one, whose MAP gives the start values of
        ``sites`` (the family's latent sites: inertia, and placements where learned); None where
        the rigid body starts at the prior median (a prior with ``starts_at_median``) or the
        model has no rigid body or no network actuator (:func:`starts_from_white_box`).

        From a weak-prior draw the rigid body and the actuator's networks rarely find the data's
        mode together: in the quick grid (1,000 steps) the Furuta's weak-prior ``nn-friction`` and
        ``nn-residual`` hybrids ended at held-out NMSE 0.29-0.74 where the informative ones reach
        1e-7-0.03 (3,000 steps did not help: 0.26 / 0.38); started from the white-box MAP,
        Furuta trajectories ``diffnea/nn-friction/weak`` reached 0.00076 / 0.00021 (docs/
        measurements.md, "Weak-prior hybrids start from the white-box MAP"). The white-box MAP
        itself starts from prior draws (the best of ``inference.svi.WHITE_BOX_RESTARTS``):
        "without prior" stays a random initialisation.
        """
        if not starts_from_white_box(self.spec):
            return None
        sites = tuple(self.family.init_sample(jax.random.key(0), jnp.result_type(float)))
        return build(self.spec.replace(actuator="viscous")), sites

    @property
    def has_networks(self) -> bool:
        """Whether any latent site is a network weight (:func:`has_networks` of the spec)."""
        return has_networks(self.spec)

    @property
    def output_layer_prior_sd(self) -> dict[str, float]:
        """``{site: prior sd}`` of the output-layer weights and biases of every network whose
        prediction is linear in them (``ffnn``, the residual and FF-NN actuators; not the
        friction networks, which pass it through ``|.|``; empty without such networks): the
        sites ``inference.fit_svi`` gives a Laplace approximation per ensemble member
        (``output_layer``)."""
        linear = getattr(self.actuator, "output_linear", False)
        nets = ((self.family.net,) if self.family.black_box else ()) + (
            tuple(getattr(self.actuator, "nets", ())) if linear else ()
        )
        return {site: sd for net in nets for site, sd in net.output_sites.items()}

    @property
    def multimodal_start(self) -> bool:
        """Whether the start point matters enough for restarts: networks or learned placements."""
        return self.has_networks or self.family.learns_kinematics

    @property
    def latent_sites(self) -> tuple[str, ...]:
        """Names of the latent sites of one draw."""
        return tuple(self.init_sample())

    # --- data ------------------------------------------------------------------------------

    def observations(self, data) -> ModelData:
        """Validated arrays in the likelihood's layout from a ``data.Dataset`` or arrays.

        Raises:
            ValueError: the data cannot condition this model (joints, shape, NaN, layout).
        """
        if isinstance(data, LinearStats):
            raise ValueError("observations: LinearStats are already summed; pass the arrays")
        return self.likelihood.observations(
            data, robot=self.robot, what=f"data for {self.name!r} on {self.robot.name!r}"
        )

    def prepare(self, data) -> ModelData | LinearStats:
        """What :meth:`model` is conditioned on: the cheapest exact form of ``data`` (a dataset,
        arrays or already prepared data): :class:`LinearStats` where :attr:`linear_exact`.
        """
        if isinstance(data, LinearStats):
            self.check(data)
            return data
        return self.likelihood.prepare(self.observations(data), robot=self.robot)

    def check(self, data) -> None:
        """Raise ``ValueError`` if ``data`` cannot condition this model (shape, NaN, layout)."""
        if isinstance(data, LinearStats):
            if not self.linear_exact:
                raise ValueError(
                    f"{self.name!r} with likelihood {self.spec.likelihood!r} cannot use "
                    "LinearStats; pass ModelData"
                )
            return
        self.observations(data)

    # --- the NumPyro model -----------------------------------------------------------------

    def sample_latent(self, dtype) -> dict:
        """Declare all latent sites (inside a NumPyro model); returns one draw as a sample dict."""
        sample = dict(self.family.sample(dtype))
        sample.update(self.actuator.sample(dtype))
        sample.update({s.site: s.sample(dtype) for s in self.noise_sites})
        return sample

    def noise_sigma(self, sample, key: str, dtype) -> Array:
        """Noise sd (n,) of the observed signal ``key`` (``"qdd"``, ``"tau"``, ``"q"``, ``"qd"``)."""
        if self.noise_scale is not None:
            return jnp.asarray(self.noise_scale, dtype)
        return self._exp_noise_site("log_sigma_" + key, sample, dtype)

    def _exp_noise_site(self, name: str, sample, dtype) -> Array:
        """``exp`` of the latent noise site ``name`` (a log scale or log df) of one draw."""
        site = next(s for s in self.noise_sites if s.name == name)
        return jnp.exp(site.value(sample)).astype(dtype)

    def noise_df(self, sample, key: str, dtype) -> Array | None:
        """Student-t degrees of freedom of signal ``key``: the spec's (a scalar) or, with
        ``student_df=None``, the draw's latent ones (n,); None for Normal noise."""
        if self.spec.noise != "student-t":
            return None
        if self.spec.student_df is not None:
            return jnp.asarray(self.spec.student_df, dtype)
        return self._exp_noise_site("log_df_" + key, sample, dtype)

    def noise_dist(self, loc, sample, key: str, event_dims: int):
        """The observation noise around ``loc`` (..., n) for signal ``key`` (Normal or
        Student-t)."""
        scale = jnp.broadcast_to(self.noise_sigma(sample, key, loc.dtype), loc.shape)
        df = self.noise_df(sample, key, loc.dtype)
        if df is None:
            d = dist.Normal(loc, scale)
        else:
            d = dist.StudentT(jnp.broadcast_to(df, loc.shape), loc, scale)
        return d.to_event(event_dims)

    def noise_dist_rows(self, rows, sample, key: str) -> JointMajorNoise:
        """The same noise around joint-major predictions ``rows`` (n, N); values are (N, n)."""
        n = rows.shape[:1]
        scale = jnp.broadcast_to(self.noise_sigma(sample, key, rows.dtype), n)
        df = self.noise_df(sample, key, rows.dtype)
        return JointMajorNoise(rows, scale, None if df is None else jnp.broadcast_to(df, n))

    def model(self, data: ModelData | LinearStats, *, subsample_size: int | None = None) -> None:
        """The NumPyro model: latent sites, then the likelihood's observed sites ``obs_*``.

        Args:
            data: what :meth:`prepare` returns: ``ModelData`` (N, n) (rollout: (W, H + 1, n)),
                or :class:`LinearStats`.
            subsample_size: minibatch size over samples (windows); None for all.

        Raises:
            ValueError: data of the wrong shape, empty or NaN (concrete arrays).
        """
        if isinstance(data, LinearStats):
            self.check(data)
            dtype = jnp.result_type(data.A)
        else:
            what = f"data for {self.spec.structure_name!r}"
            data = check_data(data, n=self.robot.n, ndim=self.likelihood.ndim, what=what)
            dtype = jnp.result_type(data.q)
        sample = self.sample_latent(dtype)
        self.likelihood.observe(self, sample, data, subsample_size)


def _check_invertible(spec: ModelSpec, family: Family, actuator: Actuator) -> None:
    if family.black_box:
        raise ValueError(
            f"the {family.name!r} family predicts accelerations and has no inverse dynamics; "
            "use likelihood='forward' or 'rollout'"
        )
    if not actuator.invertible:
        raise ValueError(
            f"{spec.name!r}: the {actuator.name!r} actuator has no closed-form inverse, so the "
            "inverse-dynamics likelihood cannot apply; use likelihood='forward' or 'rollout'"
        )


DF_PRIOR = (10.0, 1.0)
"""Learned Student-t degrees of freedom (``student_df=None``): ``log df ~ N(log 10, 1^2)``, a
median of 10 and a central 95 % of 1.4-71: from tails heavy enough for spiking filtered
differences (measured df 1.5-2.2 on hardware-like data) to all but Normal errors (df 16 and more
on the residuals of a hybrid that fits its simulator; docs/measurements.md, "Recorded logs with
learned Student-t tails")."""


def _noise_sites(spec: ModelSpec, likelihood, prior: Prior, scales: Scales):
    n = spec.robot.n
    typical = {
        "qdd": 0.05 * scales.qdd,
        "tau": 0.05 * scales.tau,
        "q": np.full(n, 1e-3),
        "qd": 0.01 * scales.qd,
    }
    whitened = spec.geometry == "whitened"
    sites = []
    for key in likelihood.noise_keys if spec.noise_scale is None else ():
        g = prior.noise(n, typical=1.0)
        g = g._replace(loc=np.log(np.asarray(typical[key], dtype=np.float64)))
        sites.append(GaussianSite("log_sigma_" + key, g, whitened))
    if spec.noise == "student-t" and spec.student_df is None:
        loc, scale = DF_PRIOR
        g = Gaussian(np.full(n, np.log(loc)), np.full(n, scale))
        sites += [GaussianSite("log_df_" + key, g, whitened) for key in likelihood.noise_keys]
    return tuple(sites)


START_FORMAT = 4
"""Version of where inference starts a model: 2 since weak-prior hybrids start their rigid body
at the white-box MAP (:meth:`BayesianModel.white_box_start`), 3 since that MAP is fitted from
the best of several prior draws (``inference.svi.WHITE_BOX_RESTARTS``), 4 since the grid fits it
once per (system, dataset, dataset seed, counterpart) from a key of its own, shared by the
hybrids of a family (``analysis.cells.grid_white_box_start``). Grid cells record it; a
resumed grid computes again the cells whose start has changed since
(:func:`start_changed_since`)."""


def starts_from_white_box(spec: ModelSpec) -> bool:
    """Whether inference starts a ``spec`` model's rigid body at the MAP of its white-box
    counterpart (:meth:`BayesianModel.white_box_start`): a rigid-body family, an actuator with
    networks and a prior whose start is a draw (not the nominal values)."""
    return (
        spec.family in WHITE_BOX_FAMILIES
        and spec.actuator in NETWORK_ACTUATORS
        and not get_prior(spec.prior).starts_at_median
    )


def has_networks(spec: ModelSpec) -> bool:
    """Whether a ``spec`` model has network weights: the FF-NN family or a network actuator."""
    return FAMILY_CLASSES[spec.family].black_box or spec.actuator in NETWORK_ACTUATORS


def start_changed_since(variant: str, start_format: int) -> bool:
    """Whether a fit of ``variant`` (a name; other strings never) made at ``start_format``
    started where the current :data:`START_FORMAT` would not."""
    try:
        spec = ModelSpec.parse(variant)
    except ValueError:
        return False
    return start_format < START_FORMAT and starts_from_white_box(spec)


def build(spec: ModelSpec) -> BayesianModel:
    """The model of a complete spec (with a robot); a pure function of ``spec``.

    Raises:
        ValueError: no robot in the spec, or parts that do not fit together (an inverse
            likelihood with a non-invertible actuator or a black-box family, a family that needs
            the kinematics with ``kinematics="unknown"``, a family linear in theta only for
            inverse dynamics with another likelihood).
    """
    if not isinstance(spec, ModelSpec):
        raise ValueError(f"expected a models.ModelSpec, got {type(spec).__name__}")
    if spec.geometry == "identifiable":
        return identifiable_model(build(spec.replace(geometry="whitened")))
    robot = spec._robot()
    prior = get_prior(spec.prior)
    scales = (
        characteristic_scales(robot)
        if spec.scales is None
        else Scales(**{k: np.asarray(v, dtype=np.float64) for k, v in spec.scales.items()})
    )
    options = dict(
        whitened=spec.geometry == "whitened", nn_width=spec.nn_width, nn_depth=spec.nn_depth
    )
    family = make_family(spec.family, robot, prior, scales, **options)
    actuator = make_actuator(spec.actuator, family.dynamics_robot, prior, scales, **options)
    if spec.kinematics == "unknown" and not (family.learns_kinematics or family.black_box):
        raise ValueError(
            f"{spec.name!r} needs the robot's kinematics (joint placements); with unknown "
            "kinematics use a 'nokin-diffnea/...' variant or 'ffnn'"
        )
    if family.white_box and not family.consistent_theta and spec.likelihood != "inverse":
        raise ValueError(
            f"{spec.name!r}: theta need not be physical, so forward dynamics may not exist; "
            f"use likelihood='inverse', not {spec.likelihood!r}"
        )
    if spec.likelihood == "inverse":
        _check_invertible(spec, family, actuator)
    if spec.likelihood == "forward-effort" and family.black_box:
        raise ValueError(
            f"likelihood 'forward-effort' maps effort noise through the mass matrix; the "
            f"{family.name!r} family has none: use likelihood='forward'"
        )
    linear = actuator.linear_coefficients if family.linear_in_theta else None
    likelihood = make_likelihood(spec, linear_coefficients=linear)
    noise_sites = _noise_sites(spec, likelihood, prior, scales)
    return BayesianModel(
        spec=spec,
        family=family,
        actuator=actuator,
        prior=prior,
        likelihood=likelihood,
        scales=scales,
        noise_sites=noise_sites,
    )


def build_model(name_or_spec: str | ModelSpec, robot: bn.Robot | None = None, **options):
    """Build the variant ``name_or_spec`` for ``robot`` with ``options`` (fields of
    :class:`ModelSpec`: ``likelihood``, ``noise``, ``student_df``, ``noise_scale``, ``geometry``,
    ``kinematics``, ``nn_width``, ``nn_depth``, ``dt``, ``horizon``).

    Args:
        name_or_spec: a name from :func:`variant_names` or a :class:`ModelSpec` (whose robot is
            used when ``robot`` is None).
        robot: any ``bayes_nea.Robot`` (built-in system or URDF).

    Raises:
        ValueError: unknown name or option (the message lists the valid ones), or a variant that
            cannot apply (see :func:`build`).
    """
    if isinstance(name_or_spec, str):
        spec = ModelSpec.parse(name_or_spec)
    elif isinstance(name_or_spec, ModelSpec):
        spec = name_or_spec
    else:
        raise ValueError(f"expected a variant name or ModelSpec, got {type(name_or_spec).__name__}")
    if robot is not None and not isinstance(robot, bn.Robot):
        raise ValueError(f"robot must be a bayes_nea.Robot, got {type(robot).__name__}")
    valid = {f.name for f in dataclasses.fields(ModelSpec)} - {"family", "actuator", "prior", "robot"}
    unknown = sorted(set(options) - valid)
    if unknown:
        raise ValueError(f"unknown model options {unknown}; valid options are the fields of ModelSpec")
    if robot is not None:
        options["robot"] = robot
    if "noise_scale" in options and options["noise_scale"] is not None:
        options["noise_scale"] = tuple(np.atleast_1d(np.asarray(options["noise_scale"], np.float64)))
    return build(spec.replace(**options) if options else spec)


__all__ = ["BayesianModel", "ModelSpec", "build", "build_model", "describe", "variant_names"]
