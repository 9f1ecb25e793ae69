"""The complete, serialisable description of a model: :class:`ModelSpec`.

A spec holds every choice that :func:`models.build_model` takes: the variant (family x actuator x
prior, the 26 names of the DiffNEA paper), the likelihood (the fourth axis), the noise model,
the latent geometry, the network sizes, the RK4 step and window length of the rollout likelihood
and the robot itself (never looked up by name). ``build(spec)`` is a pure function of it, and a
saved fit stores ``spec.to_json()``, so ``load_result(path).model()`` rebuilds exactly the model
that was fitted. The JSON carries a format tag; other formats are refused with a clear error.

Names are ``family/actuator/prior`` (e.g. ``"diffnea/stribeck/informative"``) plus ``"nea"`` and
``"ffnn"``; :func:`variant_names` lists them.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import ClassVar

import numpy as np

import bayes_nea as bn

FAMILY_NAMES = ("nokin-diffnea", "diffnea", "nea", "ffnn")
WHITE_BOX_FAMILIES = ("nokin-diffnea", "diffnea")
ACTUATOR_NAMES = ("ideal", "viscous", "stribeck", "nn-friction", "nn-residual", "ffnn")
PRIOR_NAMES = ("informative", "weak")
LIKELIHOOD_NAMES = ("forward", "forward-effort", "inverse", "rollout")
NOISE_NAMES = ("normal", "student-t")
GEOMETRY_NAMES = ("whitened", "centered", "identifiable")
KINEMATICS_NAMES = ("known", "unknown")
SPEC_FORMAT = "bayes-nea-model-spec/1"
DEFAULT_HORIZON = 10
SCALE_KEYS = ("tau", "qdd", "qd")


_PLURAL = {"family": "families", "actuator": "actuators", "prior": "priors"}


def _choice(what: str, value, valid) -> None:
    if value not in valid:
        plural = _PLURAL.get(what, "values")
        raise ValueError(f"unknown {what} {value!r}; valid {plural} are {list(valid)}")


@dataclasses.dataclass(frozen=True, eq=False)
class ModelSpec:
    """Every choice that defines a model (see the module docstring). Frozen; compared by value.

    The spec checks each choice against its valid names; whether the parts fit together (an
    inverse likelihood needs an invertible actuator, ...) is checked by ``models.build`` from the
    components' capability attributes.

    Fields:
        family, actuator, prior: the variant (``"diffnea"``, ``"viscous"``, ``"informative"``).
        likelihood: ``"forward"``, ``"forward-effort"`` (noise on the effort as well as on the
            accelerations: ``models.likelihoods.ForwardEffort``; Normal noise, latent scales),
            ``"inverse"`` or ``"rollout"``; None picks ``"inverse"`` for ``nea`` (its only one)
            and ``"forward"`` otherwise.
        noise: ``"normal"`` or ``"student-t"`` (``student_df`` degrees of freedom).
        student_df: Student-t degrees of freedom, or None: learned, one latent per observed
            signal and joint (``models.variants.DF_PRIOR``), so the data choose between heavy
            tails and (large df) Normal errors.
        noise_scale: fixed per-joint noise sd (one value or n values) or None (latent scales).
        geometry: ``"whitened"`` or ``"centered"`` latent coordinates (``models/_sites.py``),
            or ``"identifiable"``: base parameters, coefficients and noise only, each draw
            completed from the prior (``models/identifiable.py``; ``diffnea`` with a
            non-network actuator).
        kinematics: ``"known"`` or ``"unknown"`` (then only ``nokin-diffnea`` and ``ffnn`` apply).
        nn_width, nn_depth: hidden width and number of hidden layers of the networks.
        dt: RK4 step (s) of the rollout likelihood (the data's sampling period).
        horizon: RK4 steps per window of the rollout likelihood.
        scales: network and noise normalisers ``{"tau": (n,), "qdd": (n,), "qd": (n,)}`` (e.g.
            derived from the training data), or None for the robot's characteristic scales
            (``models._sites.characteristic_scales``).
        robot: the ``bayes_nea.Robot`` the model is built for (None in the name registry).
    """

    family: str
    actuator: str = "ideal"
    prior: str = "informative"
    likelihood: str | None = None
    noise: str = "normal"
    student_df: float | None = 4.0
    noise_scale: tuple[float, ...] | None = None
    geometry: str = "whitened"
    kinematics: str = "known"
    nn_width: int = 32
    nn_depth: int = 2
    dt: float = bn.DEFAULT_DT
    horizon: int = DEFAULT_HORIZON
    scales: dict | None = None
    robot: bn.Robot | None = None
    #: read when the model is built, never by its traced computations (``models.arguments``)
    untraced_fields: ClassVar[tuple[str, ...]] = ("prior",)

    def __post_init__(self):
        _choice("family", self.family, FAMILY_NAMES)
        _choice("actuator", self.actuator, ACTUATOR_NAMES)
        _choice("prior", self.prior, PRIOR_NAMES)
        if self.likelihood is None:
            object.__setattr__(self, "likelihood", "inverse" if self.family == "nea" else "forward")
        _choice("likelihood", self.likelihood, LIKELIHOOD_NAMES)
        _choice("noise", self.noise, NOISE_NAMES)
        _choice("geometry", self.geometry, GEOMETRY_NAMES)
        _choice("kinematics", self.kinematics, KINEMATICS_NAMES)
        if self.family in ("nea", "ffnn") and self.actuator != "ideal":
            raise ValueError(
                f"the {self.family!r} family takes no actuator model (actuator='ideal'), got "
                f"{self.actuator!r}: NEA is linear regression (DiffNEA 4.3) and FF-NN sees tau_d"
            )
        if self.likelihood == "forward-effort" and (
            self.noise != "normal" or self.noise_scale is not None
        ):
            raise ValueError(
                "likelihood 'forward-effort' takes Normal noise with latent scales (one on the "
                f"effort, one on the accelerations), got noise={self.noise!r}, "
                f"noise_scale={self.noise_scale!r}"
            )
        for what, value in (("dt", self.dt), ("student_df", self.student_df)):
            if what == "student_df" and value is None:
                continue
            if not (isinstance(value, int | float) and np.isfinite(value) and value > 0):
                raise ValueError(f"{what} must be a finite number > 0, got {value!r}")
        object.__setattr__(self, "dt", float(self.dt))
        if self.student_df is not None:
            object.__setattr__(self, "student_df", float(self.student_df))
        for what, value, low in (
            ("nn_width", self.nn_width, 1),
            ("nn_depth", self.nn_depth, 0),
            ("horizon", self.horizon, 1),
        ):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
                raise ValueError(f"{what} must be an integer >= {low}, got {value!r}")
        if self.noise_scale is not None:
            scale = np.atleast_1d(np.asarray(self.noise_scale, dtype=np.float64))
            if scale.ndim != 1 or not np.all(np.isfinite(scale)) or not np.all(scale > 0):
                raise ValueError(f"noise_scale must be finite and > 0, got {self.noise_scale!r}")
            if self.robot is not None and scale.size not in (1, self.robot.n):
                raise ValueError(
                    f"noise_scale has {scale.size} values; expected 1 or one per joint "
                    f"({self.robot.n})"
                )
            object.__setattr__(self, "noise_scale", tuple(float(s) for s in scale))
        if self.scales is not None:
            if not isinstance(self.scales, dict) or set(self.scales) != set(SCALE_KEYS):
                raise ValueError(
                    f"scales must be a dict with keys {list(SCALE_KEYS)}, got {self.scales!r}"
                )
            clean = {}
            for k in SCALE_KEYS:
                v = np.atleast_1d(np.asarray(self.scales[k], dtype=np.float64))
                if v.ndim != 1 or not np.all(np.isfinite(v)) or not np.all(v > 0):
                    raise ValueError(
                        f"scales[{k!r}] must be finite and > 0, got {self.scales[k]!r}"
                    )
                if self.robot is not None and v.size != self.robot.n:
                    raise ValueError(f"scales[{k!r}] has {v.size} values; expected {self.robot.n}")
                clean[k] = tuple(float(x) for x in v)
            object.__setattr__(self, "scales", clean)
        if self.robot is not None and not isinstance(self.robot, bn.Robot):
            raise ValueError(f"robot must be a bayes_nea.Robot, got {type(self.robot).__name__}")

    # --- names --------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The variant's registry name: ``"family/actuator/prior"``, or ``"nea"`` / ``"ffnn"``."""
        if self.family in _SPECIAL and (self.actuator, self.prior) == _SPECIAL[self.family]:
            return self.family
        return f"{self.family}/{self.actuator}/{self.prior}"

    @property
    def structure_name(self) -> str:
        """``"family/actuator"``: the name without the prior, which a model's traced functions
        use in messages (a variant's two priors share their programs: ``models.arguments``)."""
        return f"{self.family}/{self.actuator}"

    @classmethod
    def parse(cls, name: str) -> ModelSpec:
        """The spec (default options, no robot) of a registry name; ``ValueError`` otherwise."""
        if isinstance(name, str) and name in _REGISTRY:
            return _REGISTRY[name]
        raise ValueError(f"unknown model variant {name!r}; valid variants are {list(_REGISTRY)}")

    def replace(self, **changes) -> ModelSpec:
        """A copy with fields replaced, validated again."""
        return dataclasses.replace(self, **changes)

    @property
    def noise_scale_per_joint(self) -> np.ndarray | None:
        """``noise_scale`` broadcast to (n,) (needs the robot), or None."""
        if self.noise_scale is None:
            return None
        return np.broadcast_to(np.asarray(self.noise_scale), (self._robot().n,)).copy()

    def _robot(self) -> bn.Robot:
        if self.robot is None:
            raise ValueError(f"the spec of {self.name!r} has no robot; give one (spec.replace)")
        return self.robot

    # --- serialisation ------------------------------------------------------------------------

    def to_dict(self) -> dict:
        """JSON-able form, with the robot in full (:func:`bayes_nea.robot_to_dict`)."""
        out = {"format": SPEC_FORMAT}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "robot":
                value = None if value is None else bn.robot_to_dict(value)
            elif f.name == "noise_scale" and value is not None:
                value = list(value)
            elif f.name == "scales" and value is not None:
                value = {k: list(v) for k, v in value.items()}
            out[f.name] = value
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict) -> ModelSpec:
        """Inverse of :meth:`to_dict`; ``ValueError`` for another format or unknown fields."""
        if not isinstance(d, dict) or d.get("format") != SPEC_FORMAT:
            found = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise ValueError(
                f"not a bayes-nea model spec (format {found!r}, expected {SPEC_FORMAT!r})"
            )
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names - {"format"})
        if unknown:
            raise ValueError(f"model spec has unknown fields {unknown}")
        fields = {k: v for k, v in d.items() if k in names}
        if fields.get("robot") is not None:
            fields["robot"] = bn.robot_from_dict(fields["robot"])
        if fields.get("noise_scale") is not None:
            fields["noise_scale"] = tuple(fields["noise_scale"])
        return cls(**fields)

    @classmethod
    def from_json(cls, text: str) -> ModelSpec:
        try:
            d = json.loads(text)
        except (TypeError, json.JSONDecodeError) as err:
            raise ValueError(f"model spec is not valid JSON: {err}") from None
        return cls.from_dict(d)

    def __eq__(self, other):
        if not isinstance(other, ModelSpec):
            return NotImplemented
        return self.to_json() == other.to_json()

    def __hash__(self):
        return hash(self.to_json())


_SPECIAL = {"nea": ("ideal", "informative"), "ffnn": ("ideal", "weak")}
_REGISTRY: dict[str, ModelSpec] = {
    f"{f}/{a}/{p}": ModelSpec(f, a, p)
    for f, a, p in itertools.product(WHITE_BOX_FAMILIES, ACTUATOR_NAMES, PRIOR_NAMES)
}
_REGISTRY.update({name: ModelSpec(name, *ap) for name, ap in _SPECIAL.items()})


def variant_names() -> tuple[str, ...]:
    """The 26 registry names, white-box product first, then ``"nea"`` and ``"ffnn"``."""
    return tuple(_REGISTRY)
