"""Model families: what each learns, and the only place where virtual becomes physical.

================  =================================================================  ==============
family            latent sites (one draw)                                            dynamics robot
================  =================================================================  ==============
nokin-diffnea     ``inertia`` (n, 10) DiffNEA virtual, ``rpy``, ``xyz`` (n, 3)       z-axis form
diffnea           ``inertia`` (n, 10) DiffNEA virtual; kinematics known              the robot
nea               ``theta`` (n, 10) raw inertial parameters (linear, Gaussian)       the robot
ffnn              ``ffnn_net/...`` network weights; ``qdd = f_NN(q, qd, tau)``        none
================  =================================================================  ==============

(with ``_z`` appended to Gaussian sites in the default whitened geometry, see ``models/_sites.py``).

* **no-Kin DiffNEA** (DiffNEA section 4.3): only the tree's topology and joint kinds are known.
  Every joint moves about its frame's z axis (appendix "Kinematics"); the robot is put in that form
  with :func:`bayes_nea.z_axis_form`, and placements (RPY, xyz; appendix eq. 4) and inertias are
  learned. ``physical`` returns theta, rpy, xyz *of that z-axis robot* (:attr:`dynamics_robot`);
  its dynamics equal the original robot's for the same joint coordinates.
* **DiffNEA**: known kinematics; inertias through the DiffNEA virtual parameters
  (:func:`bayes_nea.get_parameterization` ``"diffnea"``: ``m = sqrt_m^2``, central second moments
  ``L_i = sqrt_L_i^2``, principal axes ``exp(S(r))``, CoM ``c``; appendix eq. 5), which are
  physically consistent for every value.
* **NEA** (Atkeson et al. 1986): ``tau = Y(q, qd, qdd) theta`` with a Gaussian prior on theta; the
  posterior is Gaussian in closed form (:func:`models.likelihoods.nea_posterior`). theta is not
  constrained to be physical, so NEA only takes the inverse-dynamics likelihood.
* **FF-NN**: a black-box network predicting ``qdd`` from ``(q, qd, tau_d)``; no physics.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import ClassVar, final

import jax
import jax.numpy as jnp

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

Array = jax.Array

_DIFFNEA = bn.get_parameterization("diffnea")


class Family(abc.ABC):
    """Abstract model family bound to a robot and a prior (see the module docstring).

    Class attributes:
        name: registry name (:data:`FAMILY_NAMES`).
        white_box: whether draws have rigid-body parameters (theta, rpy, xyz).
        learns_kinematics: whether joint placements are latent (the kinematics need not be known).
        linear_in_theta: whether inverse dynamics are linear in the latent inertial parameters
            with fixed kinematics (``tau = Y(q, qd, qdd) theta``).
        black_box: whether accelerations come from a network instead of rigid-body dynamics.
        consistent_theta: whether every draw's theta is a physically consistent body, so that
            forward dynamics exist (not for NEA's unconstrained Gaussian theta).
    """

    name: ClassVar[str]
    white_box: ClassVar[bool]
    learns_kinematics: ClassVar[bool] = False
    linear_in_theta: ClassVar[bool] = False
    black_box: ClassVar[bool] = False
    consistent_theta: ClassVar[bool] = True
    robot: bn.Robot

    @property
    def dynamics_robot(self) -> bn.Robot:
        """The robot whose frames ``physical``'s theta, rpy, xyz refer to."""
        return self.robot

    @abc.abstractmethod
    def sample(self, dtype) -> dict:
        """Declare the family's NumPyro sites; returns ``{site: latent value}``."""

    @abc.abstractmethod
    def init_sample(self, key, dtype) -> dict:
        """Latent values to start inference from (prior medians; networks drawn with ``key``)."""

    def params(self, sample: dict) -> bn.RobotParams:
        """Rigid-body parameters of one draw for :attr:`dynamics_robot` (white-box families)."""
        raise ValueError(f"the {self.name!r} family has no rigid-body parameters")

    def physical(self, sample: dict) -> dict:
        """``{"theta": (n, 10), "rpy": (n, 3), "xyz": (n, 3)}`` of one draw (``{}`` for FF-NN)."""
        p = self.params(sample)
        return {"theta": p.theta, "rpy": p.rpy, "xyz": p.xyz}

    def nominal_kinematics(self, dtype) -> tuple[Array, Array]:
        nominal = self.dynamics_robot.nominal
        return jnp.asarray(nominal.rpy, dtype), jnp.asarray(nominal.xyz, dtype)


@final
@dataclasses.dataclass(frozen=True, eq=False)
class NoKinDiffNEA(Family):
    """Placements and inertias learned on the z-axis form of the robot (DiffNEA 4.3, appendix)."""

    robot: bn.Robot
    z_robot: bn.Robot
    inertia: GaussianSite
    rpy: GaussianSite
    xyz: GaussianSite
    name: ClassVar[str] = "nokin-diffnea"
    white_box: ClassVar[bool] = True
    learns_kinematics: ClassVar[bool] = True

    @classmethod
    def build(cls, robot, prior: Prior, scales: Scales, *, whitened=True, **_):
        z_robot = bn.z_axis_form(robot)
        rpy, xyz = prior.placement(z_robot)
        return cls(
            robot,
            z_robot,
            GaussianSite("inertia", prior.inertia(z_robot), whitened),
            GaussianSite("rpy", rpy, whitened),
            GaussianSite("xyz", xyz, whitened),
        )

    @property
    def dynamics_robot(self):
        return self.z_robot

    def _sites(self):
        return (self.inertia, self.rpy, self.xyz)

    def sample(self, dtype):
        return {s.site: s.sample(dtype) for s in self._sites()}

    def init_sample(self, key, dtype):
        return {s.site: s.init(dtype) for s in self._sites()}

    def params(self, sample):
        theta = jax.vmap(_DIFFNEA.forward)(self.inertia.value(sample))
        return bn.RobotParams(theta, self.rpy.value(sample), self.xyz.value(sample))


@final
@dataclasses.dataclass(frozen=True, eq=False)
class DiffNEA(Family):
    """Known kinematics; inertias through DiffNEA virtual parameters (appendix eq. 5)."""

    robot: bn.Robot
    inertia: GaussianSite
    name: ClassVar[str] = "diffnea"
    white_box: ClassVar[bool] = True
    linear_in_theta: ClassVar[bool] = True

    @classmethod
    def build(cls, robot, prior: Prior, scales: Scales, *, whitened=True, **_):
        return cls(robot, GaussianSite("inertia", prior.inertia(robot), whitened))

    def sample(self, dtype):
        return {self.inertia.site: self.inertia.sample(dtype)}

    def init_sample(self, key, dtype):
        return {self.inertia.site: self.inertia.init(dtype)}

    def params(self, sample):
        x = self.inertia.value(sample)
        rpy, xyz = self.nominal_kinematics(x.dtype)
        return bn.RobotParams(jax.vmap(_DIFFNEA.forward)(x), rpy, xyz)


@final
@dataclasses.dataclass(frozen=True, eq=False)
class NEA(Family):
    """Linear model ``tau = Y theta`` on the joint-torque regressor, Gaussian prior on theta."""

    robot: bn.Robot
    theta: GaussianSite
    name: ClassVar[str] = "nea"
    white_box: ClassVar[bool] = True
    linear_in_theta: ClassVar[bool] = True
    consistent_theta: ClassVar[bool] = False

    @classmethod
    def build(cls, robot, prior: Prior, scales: Scales, *, whitened=True, **_):
        return cls(robot, GaussianSite("theta", prior.theta(robot), whitened))

    def sample(self, dtype):
        return {self.theta.site: self.theta.sample(dtype)}

    def init_sample(self, key, dtype):
        return {self.theta.site: self.theta.init(dtype)}

    def params(self, sample):
        theta = self.theta.value(sample)
        rpy, xyz = self.nominal_kinematics(theta.dtype)
        return bn.RobotParams(theta, rpy, xyz)


@final
@dataclasses.dataclass(frozen=True, eq=False)
class FFNNFamily(Family):
    """Black box: ``qdd = qdd_scale f_NN([features(q, qd), tau_d / tau_scale])`` (section 4.3)."""

    robot: bn.Robot
    net: BayesianNet
    scales: Scales
    name: ClassVar[str] = "ffnn"
    white_box: ClassVar[bool] = False
    black_box: ClassVar[bool] = True

    @classmethod
    def build(cls, robot, prior: Prior, scales: Scales, *, nn_width=32, nn_depth=2, **_):
        net = BayesianNet("ffnn_net", feature_size(robot) + robot.n, robot.n, nn_width, nn_depth)
        return cls(robot, net, scales)

    def sample(self, dtype):
        return self.net.sample(dtype)

    def init_sample(self, key, dtype):
        return self.net.draw(key, dtype)

    def physical(self, sample):
        return {}

    def qdd(self, sample: dict, q: Array, qd: Array, tau_d: Array) -> Array:
        """Predicted acceleration (n,) of one draw."""
        dtype = q.dtype
        x = jnp.concatenate(
            [
                state_features(self.robot, self.scales, q, qd),
                tau_d / jnp.asarray(self.scales.tau, dtype),
            ]
        )
        return jnp.asarray(self.scales.qdd, dtype) * self.net.module(sample, dtype)(x)

    def qdd_joint_major(self, sample: dict, q: Array, qd: Array, tau_d: Array) -> Array:
        """:meth:`qdd` of N states at once, joint-major: ``q, qd, tau_d`` (n, N) -> (n, N) (the
        network on the rows: ``models._sites.BayesianNet.apply_rows``)."""
        dtype = q.dtype
        x = jnp.concatenate(
            [
                state_feature_rows(self.robot, self.scales, q, qd),
                tau_d / jnp.asarray(self.scales.tau, dtype)[:, None],
            ]
        )
        return jnp.asarray(self.scales.qdd, dtype)[:, None] * self.net.apply_rows(sample, x)


FAMILY_CLASSES = {"nokin-diffnea": NoKinDiffNEA, "diffnea": DiffNEA, "nea": NEA, "ffnn": FFNNFamily}


def make_family(name: str, robot: bn.Robot, prior: Prior, scales: Scales, **options) -> Family:
    """The family called ``name`` for ``robot`` (``options``: ``whitened``, ``nn_width``,
    ``nn_depth``).

    Raises:
        ValueError: unknown name (the message lists the valid ones).
    """
    return build_component(FAMILY_CLASSES, "family", name, robot, prior, scales, **options)
