"""Actuator models: commanded effort ``tau_d`` -> joint torque ``tau`` (DiffNEA section 3).

Applied per joint, unactuated joints included (a pendulum joint has friction but ``tau_d = 0``):

============  ======================================================  ============  ==========
name          model                                                   energy class  invertible
============  ======================================================  ============  ==========
ideal         ``tau = tau_d``                                         conserving    yes
viscous       ``tau = tau_d - mu_v qd``                               dissipative   yes (linear)
stribeck      ``tau = tau_d - sign(qd) (f_s + f_d e^{-(qd/v_s)^2})``  dissipative   yes
              ``- mu_v qd``
nn-friction   ``tau_i = tau_d,i - sign(qd_i) |f_i(qd_i)|_1``          dissipative   yes
nn-residual   ``tau_i = tau_d,i - g_i(qd_i) - c f_NN(q, qd)_i``       unbounded     yes
ffnn          ``tau = tau_d + f_NN(tau_d, q, qd)``                    unbounded     no
============  ======================================================  ============  ==========

Energy classes: with ``tau_d = 0`` the power of the actuator on the system is ``tau . qd``.
*Dissipative* actuators have ``tau_friction . qd <= 0`` for every parameter value (friction
coefficients are ``exp`` of unconstrained latent values, :func:`bayes_nea.get_positive_map`
``"exp"``; ``sign(qd) qd = |qd|``), so the uncontrolled system's energy never grows; the rigid-body
model with ``ideal`` conserves it; *unbounded* actuators can create energy (the paper's Residual
and FF-NN, section 3). The paper's exponent ``nu_s qd^2`` is written ``(qd / v_s)^2``.

Each actuator is a final class bound to a robot and a prior. It declares its sample sites under
the ``"actuator/"`` prefix (:meth:`Actuator.sample`, inside a NumPyro model), and its pure methods
read one draw from a sample dict: :meth:`Actuator.torque` (forward), :meth:`Actuator.command`
(inverse, for the inverse-dynamics likelihood) and :meth:`Actuator.physical`.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar, final

import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from models._sites import (
    BayesianNet,
    GaussianSite,
    Scales,
    build_component,
    feature_size,
    state_feature_rows,
    state_features,
)
from models.priors import Prior
from models.spec import ACTUATOR_NAMES

Array = jax.Array

ENERGY_CLASSES = ("conserving", "dissipative", "unbounded")
PREFIX = "actuator/"
_EXP = bn.get_positive_map("exp")


class Actuator(abc.ABC):
    """Abstract actuator: maps ``(tau_d, q, qd)`` (n,) each to the joint torque ``tau`` (n,).

    Class attributes:
        name: registry name (:data:`ACTUATOR_NAMES`).
        energy_class: ``"conserving"``, ``"dissipative"`` or ``"unbounded"`` (module docstring).
        invertible: whether :meth:`command` (``tau -> tau_d``) exists in closed form.
        linear_coefficients: names of the :meth:`physical` coefficients through which
            ``tau_d`` is linear (with known kinematics: ``tau_d = Y theta + sum_c phi_c c``), or
            None where the actuator is nonlinear in its parameters.
    """

    name: ClassVar[str]
    energy_class: ClassVar[str]
    invertible: ClassVar[bool]
    linear_coefficients: ClassVar[tuple[str, ...] | None] = None
    robot: bn.Robot

    @abc.abstractmethod
    def sample(self, dtype) -> dict:
        """Declare this actuator's NumPyro sites; returns ``{site: latent value}``."""

    @abc.abstractmethod
    def init_sample(self, key, dtype) -> dict:
        """Latent values to start inference from (prior medians; networks drawn with ``key``)."""

    @abc.abstractmethod
    def physical(self, sample: dict) -> dict:
        """Named physical coefficients of one draw, e.g. ``{"viscous": (n,)}``."""

    @abc.abstractmethod
    def torque(self, sample: dict, tau_d: Array, q: Array, qd: Array) -> Array:
        """Joint torque (n,) for commanded effort ``tau_d`` (n,) at state ``q, qd`` (n,)."""

    def torque_joint_major(self, sample: dict, tau_d: Array, q: Array, qd: Array) -> Array:
        """:meth:`torque` of N states at once, joint-major: ``tau_d, q, qd`` (n, N) -> (n, N).

        For the likelihoods (``models.variants.BayesianModel.qdd_batch``, the identifiable
        geometry's features), which keep every per-joint row contiguous. Default: :meth:`torque`
        vmapped over the states; joint-wise laws override it with the law on the rows (vmap
        computes batch-first: on (N, 2) arrays the Stribeck law's gradient cost 1.9 ms at N =
        50,000, on (2, N) rows 0.57 ms), and network actuators with their networks on the rows
        (``models._sites.BayesianNet.apply_rows``).
        """
        return jax.vmap(lambda t, a, b: self.torque(sample, t, a, b), in_axes=1, out_axes=1)(
            tau_d, q, qd
        )

    def command(self, sample: dict, tau: Array, q: Array, qd: Array) -> Array:
        """Commanded effort (n,) that produces joint torque ``tau`` (n,): the inverse of torque.

        Raises:
            ValueError: the actuator is not invertible in closed form.
        """
        raise ValueError(
            f"the {self.name!r} actuator has no closed-form inverse, so the inverse-dynamics "
            "likelihood cannot apply; use likelihood='forward' or 'rollout'"
        )

    @property
    def sites(self) -> tuple[str, ...]:
        """Names of the latent sites this actuator declares."""
        return tuple(self.init_sample(jax.random.key(0), jnp.float32))


class _Friction(Actuator):
    """A dissipative or residual actuator ``tau = tau_d + friction(q, qd)`` (abstract)."""

    invertible = True

    @abc.abstractmethod
    def friction(self, sample: dict, q: Array, qd: Array) -> Array:
        """The torque the actuator adds to ``tau_d`` (n,)."""

    def torque(self, sample, tau_d, q, qd):
        return tau_d + self.friction(sample, q, qd)

    def command(self, sample, tau, q, qd):
        return tau - self.friction(sample, q, qd)


@final
@dataclasses.dataclass(frozen=True, eq=False)
class Ideal(Actuator):
    """``tau = tau_d``: no sites."""

    robot: bn.Robot
    name: ClassVar[str] = "ideal"
    energy_class: ClassVar[str] = "conserving"
    invertible: ClassVar[bool] = True
    linear_coefficients: ClassVar[tuple[str, ...] | None] = ()

    @classmethod
    def build(cls, robot, prior, scales, **_):
        return cls(robot)

    def sample(self, dtype):
        return {}

    def init_sample(self, key, dtype):
        return {}

    def physical(self, sample):
        return {}

    def torque(self, sample, tau_d, q, qd):
        return tau_d

    def torque_joint_major(self, sample, tau_d, q, qd):
        return tau_d

    def command(self, sample, tau, q, qd):
        return tau


def _coefficient_sites(robot, prior, names, whitened):
    return tuple(
        GaussianSite(PREFIX + "log_" + what, prior.friction(robot, what), whitened)
        for what in names
    )


class _Coefficients(_Friction):
    """Friction with named positive coefficients ``exp(u)``, ``u ~ N(prior)`` (abstract)."""

    coefficients: ClassVar[tuple[str, ...]]
    #: the coefficients that each scale one term of the law (the torque is linear in each)
    scale_coefficients: ClassVar[tuple[str, ...]] = ()
    coefficient_sites: tuple[GaussianSite, ...]

    def sample(self, dtype):
        return {s.site: s.sample(dtype) for s in self.coefficient_sites}

    def log_scale_coefficients(self) -> dict:
        """``{latent site: (a, b, m, s)}`` of the :attr:`scale_coefficients` (numpy, the site's
        shape): the latent value is ``(log c - a) / b`` with prior ``N(m, s^2)``;
        ``inference.softplus_map`` samples them in softplus coordinates."""
        out = {}
        for what, site in zip(self.coefficients, self.coefficient_sites, strict=True):
            if what not in self.scale_coefficients:
                continue
            loc, scale = np.asarray(site.prior.loc), np.asarray(site.prior.scale)
            zero, one = np.zeros_like(loc), np.ones_like(scale)
            out[site.site] = (loc, scale, zero, one) if site.whitened else (zero, one, loc, scale)
        return out

    def init_sample(self, key, dtype):
        return {s.site: s.init(dtype) for s in self.coefficient_sites}

    def physical(self, sample):
        return {
            what: _EXP.forward(site.value(sample))
            for what, site in zip(self.coefficients, self.coefficient_sites, strict=True)
        }

    @staticmethod
    @abc.abstractmethod
    def law(c: dict, qd: Array) -> Array:
        """The friction torque at velocities ``qd`` for coefficients ``c`` (:meth:`physical`),
        elementwise over joints (``c``'s arrays broadcast against ``qd``)."""

    def friction(self, sample, q, qd):
        return self.law(self.physical(sample), qd)

    def torque_joint_major(self, sample, tau_d, q, qd):
        rows = {k: v[:, None] for k, v in self.physical(sample).items()}  # (n, 1) per joint
        return tau_d + self.law(rows, qd)


@final
@dataclasses.dataclass(frozen=True, eq=False)
class Viscous(_Coefficients):
    """``tau = tau_d - mu_v qd`` with ``mu_v = exp(u) > 0`` per joint; site ``actuator/log_viscous``."""

    robot: bn.Robot
    coefficient_sites: tuple[GaussianSite, ...]
    name: ClassVar[str] = "viscous"
    energy_class: ClassVar[str] = "dissipative"
    coefficients: ClassVar[tuple[str, ...]] = ("viscous",)
    scale_coefficients: ClassVar[tuple[str, ...]] = ("viscous",)
    linear_coefficients: ClassVar[tuple[str, ...] | None] = ("viscous",)

    @classmethod
    def build(cls, robot, prior: Prior, scales: Scales, *, whitened=True, **_):
        return cls(robot, _coefficient_sites(robot, prior, cls.coefficients, whitened))

    @staticmethod
    def law(c, qd):
        return -c["viscous"].astype(qd.dtype) * qd


@final
@dataclasses.dataclass(frozen=True, eq=False)
class Stribeck(_Coefficients):
    """``tau = tau_d - sign(qd) (f_s + f_d exp(-(qd / v_s)^2)) - mu_v qd`` (DiffNEA section 3).

    Coefficients (n,) each, all ``exp`` of latent sites: ``coulomb`` (f_s), ``stribeck_amplitude``
    (f_d), ``stribeck_velocity`` (v_s; the paper's ``nu_s = 1 / v_s^2``), ``viscous`` (mu_v); the
    law is :func:`bayes_nea.joint_friction` with the exact ``sign``, as the simulator's.
    """

    robot: bn.Robot
    coefficient_sites: tuple[GaussianSite, ...]
    name: ClassVar[str] = "stribeck"
    energy_class: ClassVar[str] = "dissipative"
    coefficients: ClassVar[tuple[str, ...]] = (
        "viscous",
        "coulomb",
        "stribeck_amplitude",
        "stribeck_velocity",
    )
    scale_coefficients: ClassVar[tuple[str, ...]] = ("viscous", "coulomb", "stribeck_amplitude")

    @classmethod
    def build(cls, robot, prior: Prior, scales: Scales, *, whitened=True, **_):
        return cls(robot, _coefficient_sites(robot, prior, cls.coefficients, whitened))

    @staticmethod
    def law(c, qd):
        return -bn.joint_friction(bn.FrictionParams(*(c[k] for k in bn.FRICTION_FIELDS)), qd)


class _Network(Actuator):
    """An actuator with Bayesian networks (abstract); ``nets`` lists them.

    Output scale: ``scales.tau`` (per joint; with ``models.data_scales`` the larger of the data's
    rms effort and rms nominal rigid-body torque), so a network output of O(1) is a torque of
    the data's size.
    """

    scales: Scales
    #: whether the torque is linear in the networks' output layers (given the hidden layers):
    #: where their Laplace approximation is the exact conditional (``inference.output_layer``)
    output_linear: ClassVar[bool] = True

    @property
    def nets(self) -> tuple[BayesianNet, ...]:
        return (self.net,)

    def sample(self, dtype):
        out = {}
        for net in self.nets:
            out.update(net.sample(dtype))
        return out

    def init_sample(self, key, dtype):
        out = {}
        for k, net in zip(jax.random.split(key, len(self.nets)), self.nets, strict=True):
            out.update(net.draw(k, dtype))
        return out

    def physical(self, sample):
        return {}

    def _tau_scale(self, dtype):
        return jnp.asarray(self.scales.tau, dtype)


@final
@dataclasses.dataclass(frozen=True, eq=False)
class NNFriction(_Network, _Friction):
    """``tau_i = tau_d,i - sign(qd_i) tau_scale_i |f_i(qd_i / qd_scale_i)|_1`` (DiffNEA section 3).

    Joint-independent, as the paper's actuator models: joint i's friction magnitude is the 1-norm
    of the ``per_joint`` outputs of its own MLP ``f_i`` of its own normalised velocity, so the
    power ``tau_friction . qd <= 0`` for every weight (dissipative by construction). Sites
    ``actuator/friction_net_<i>/...`` (i = joint index).
    """

    robot: bn.Robot
    joint_nets: tuple[BayesianNet, ...]
    scales: Scales
    per_joint: int = 2
    name: ClassVar[str] = "nn-friction"
    # |f| is not linear in the output layer: an output near 0 has a V-shaped likelihood, and
    # Gaussian draws around it raise every |f| (measured: held-out NMSE 0.001 -> 0.27)
    output_linear: ClassVar[bool] = False
    energy_class: ClassVar[str] = "dissipative"
    invertible: ClassVar[bool] = True

    @classmethod
    def build(cls, robot, prior, scales, *, nn_width=32, nn_depth=2, per_joint=2, **_):
        nets = tuple(
            BayesianNet(f"{PREFIX}friction_net_{i}", 1, per_joint, nn_width, nn_depth)
            for i in range(robot.n)
        )
        return cls(robot, nets, scales, per_joint)

    @property
    def nets(self):
        return self.joint_nets

    def friction(self, sample, q, qd):
        v = qd / jnp.asarray(self.scales.qd, qd.dtype)
        magnitude = jnp.stack(
            [
                jnp.sum(jnp.abs(net.module(sample, qd.dtype)(v[i : i + 1])))
                for i, net in enumerate(self.joint_nets)
            ]
        )
        return -jnp.sign(qd) * self._tau_scale(qd.dtype) * magnitude

    def torque_joint_major(self, sample, tau_d, q, qd):
        v = qd / jnp.asarray(self.scales.qd, qd.dtype)[:, None]
        magnitude = jnp.stack(
            [
                jnp.sum(jnp.abs(net.apply_rows(sample, v[i : i + 1])), axis=0)
                for i, net in enumerate(self.joint_nets)
            ]
        )
        return tau_d - jnp.sign(qd) * self._tau_scale(qd.dtype)[:, None] * magnitude


NETWORK_FORMAT = 2
"""Version of the network actuators' structure, stored with every fit and grid cell. 2: the
``nn-residual`` actuator has per-joint networks and the ``ffnn`` actuator adds its network to the
command; a fit or cell of an earlier version with one of :data:`RESHAPED_ACTUATORS` holds weights
the current model would misread (``inference.result``, ``analysis.benchmark`` refit it)."""
RESHAPED_ACTUATORS = ("nn-residual", "ffnn")


def reshaped_since(variant: str, network_format: int) -> bool:
    """Whether a fit of ``variant`` (``family/actuator/prior`` or a family alone) made at
    ``network_format`` has weights that the current :data:`NETWORK_FORMAT` reads differently."""
    parts = str(variant).split("/")
    return network_format < NETWORK_FORMAT and len(parts) == 3 and parts[1] in RESHAPED_ACTUATORS


RESIDUAL_COUPLED_SCALE = 0.1
"""Output scale of :class:`NNResidual`'s whole-state network relative to its per-joint ones (in
units of ``tau_scale``). Measured on the hardware-like cart-pole (seed 2, held-out NMSE cart /
pole against Stribeck's 0.035 / 0.028): 1.0 gives 0.057 / 0.036, 0.1 gives 0.036 / 0.024, no
coupled network 0.032 / 0.026."""


@final
@dataclasses.dataclass(frozen=True, eq=False)
class NNResidual(_Network, _Friction):
    """``tau = tau_d - tau_scale (c f_NN(x) + g(qd))`` (can create energy; DiffNEA section 3
    "Residual").

    Two additive parts:

    - per joint, ``g_i([qd_i / qd_scale_i, sign(qd_i)])`` (one output, any sign): the joint-local
      effects (friction), allowed a jump at ``qd_i = 0`` as friction has;
    - ``c f_NN(x)`` of the whole state ``x = models._sites.state_features(q, qd)`` (``[sin q,
      cos q]`` of revolute joints, prismatic ``q`` in m, ``qd / qd_scale``), which may couple
      joints (unmodelled cables, rigid-body model error), with ``c =``
      :data:`RESIDUAL_COUPLED_SCALE`: a prior that couplings are smaller than the joints' own
      friction.

    Sites ``actuator/residual_net/...`` (coupled) and ``actuator/residual_joint_net_<i>/...``.
    Why the split (docs/measurements.md, issue 11): one network of the whole state reached 4-10x
    the held-out error of per-joint friction networks on the hardware-like data.
    """

    robot: bn.Robot
    net: BayesianNet
    joint_nets: tuple[BayesianNet, ...]
    scales: Scales
    name: ClassVar[str] = "nn-residual"
    energy_class: ClassVar[str] = "unbounded"
    invertible: ClassVar[bool] = True

    @classmethod
    def build(cls, robot, prior, scales, *, nn_width=32, nn_depth=2, **_):
        net = BayesianNet(PREFIX + "residual_net", feature_size(robot), robot.n, nn_width, nn_depth)
        joint_nets = tuple(
            BayesianNet(f"{PREFIX}residual_joint_net_{i}", 2, 1, nn_width, nn_depth)
            for i in range(robot.n)
        )
        return cls(robot, net, joint_nets, scales)

    @property
    def nets(self):
        return (self.net, *self.joint_nets)

    def friction(self, sample, q, qd):
        coupled = self.net.module(sample, qd.dtype)(state_features(self.robot, self.scales, q, qd))
        v = qd / jnp.asarray(self.scales.qd, qd.dtype)
        local = jnp.concatenate(
            [
                net.module(sample, qd.dtype)(jnp.stack([v[i], jnp.sign(v[i])]))
                for i, net in enumerate(self.joint_nets)
            ]
        )
        return -self._tau_scale(qd.dtype) * (RESIDUAL_COUPLED_SCALE * coupled + local)

    def torque_joint_major(self, sample, tau_d, q, qd):
        coupled = self.net.apply_rows(sample, state_feature_rows(self.robot, self.scales, q, qd))
        v = qd / jnp.asarray(self.scales.qd, qd.dtype)[:, None]
        local = jnp.concatenate(
            [
                net.apply_rows(sample, jnp.stack([v[i], jnp.sign(v[i])]))
                for i, net in enumerate(self.joint_nets)
            ]
        )
        scale = self._tau_scale(qd.dtype)[:, None]
        return tau_d - scale * (RESIDUAL_COUPLED_SCALE * coupled + local)


@final
@dataclasses.dataclass(frozen=True, eq=False)
class FFNN(_Network):
    """``tau = tau_d + tau_scale f_NN([tau_d / tau_scale, features(q, qd)])``: a black-box
    actuator (DiffNEA section 3 "FF-NN"; not invertible); ``features`` the whole-state input of
    :class:`NNResidual`. Sites ``actuator/actuator_net/...``.

    The skip ``tau_d +`` centres the prior on the ideal actuator (network output 0) and leaves
    the class of functions unchanged (any ``tau(tau_d, q, qd)`` is ``tau_d`` plus a function of
    the same inputs): a tanh network need not learn the identity in ``tau_d``. Measured on the
    Furuta trajectories data (seed 2, effort likelihood): held-out NMSE 0.00067 / 0.000096 ->
    0.00045 / 0.000060, against ``viscous``'s 0.00038 / 0.000049 (docs/measurements.md).
    """

    robot: bn.Robot
    net: BayesianNet
    scales: Scales
    name: ClassVar[str] = "ffnn"
    energy_class: ClassVar[str] = "unbounded"
    invertible: ClassVar[bool] = False

    @classmethod
    def build(cls, robot, prior, scales, *, nn_width=32, nn_depth=2, **_):
        net = BayesianNet(
            PREFIX + "actuator_net", feature_size(robot) + robot.n, robot.n, nn_width, nn_depth
        )
        return cls(robot, net, scales)

    def torque(self, sample, tau_d, q, qd):
        s = self._tau_scale(tau_d.dtype)
        x = jnp.concatenate([tau_d / s, state_features(self.robot, self.scales, q, qd)])
        return tau_d + s * self.net.module(sample, tau_d.dtype)(x)

    def torque_joint_major(self, sample, tau_d, q, qd):
        s = self._tau_scale(tau_d.dtype)[:, None]
        x = jnp.concatenate([tau_d / s, state_feature_rows(self.robot, self.scales, q, qd)])
        return tau_d + s * self.net.apply_rows(sample, x)


ACTUATOR_CLASSES = {
    "ideal": Ideal,
    "viscous": Viscous,
    "stribeck": Stribeck,
    "nn-friction": NNFriction,
    "nn-residual": NNResidual,
    "ffnn": FFNN,
}


NETWORK_ACTUATORS = tuple(n for n, c in ACTUATOR_CLASSES.items() if issubclass(c, _Network))
"""Names of the actuators with Bayesian networks (``nn-friction``, ``nn-residual``, ``ffnn``)."""


def make_actuator(name: str, robot: bn.Robot, prior: Prior, scales: Scales, **options) -> Actuator:
    """The actuator called ``name`` for ``robot`` with its sites' priors from ``prior``
    (``options``: ``whitened``, ``nn_width``, ``nn_depth``).

    Raises:
        ValueError: unknown name (the message lists the valid ones).
    """
    return build_component(ACTUATOR_CLASSES, "actuator", name, robot, prior, scales, **options)


def energy_class(name: str) -> str:
    """Energy class of the actuator called ``name`` (see the module docstring)."""
    if name not in ACTUATOR_CLASSES:
        raise ValueError(f"unknown actuator {name!r}; valid actuators are {list(ACTUATOR_NAMES)}")
    return ACTUATOR_CLASSES[name].energy_class
