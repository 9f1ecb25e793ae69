"""Building blocks shared by families and actuators: Gaussian sample sites and Bayesian networks.

A :class:`GaussianSite` is one NumPyro sample site over an unconstrained coordinate with a
:class:`~models.priors.Gaussian` prior. With ``whitened=True`` (the default geometry, see
``models/variants.py``) the latent site is ``z ~ N(0, 1)`` named ``<name>_z`` and the coordinate is
``x = loc + scale z``; otherwise the site ``<name>`` is ``x ~ N(loc, scale)`` itself. Either way
:meth:`GaussianSite.value` maps the latent draw to ``x``, so the pure functions
(``physical``, ``qdd_fn``) read any sample dict the same way.

A :class:`BayesianNet` is an equinox MLP whose weights are NumPyro sample sites, registered with
``numpyro.contrib.module.random_eqx_module`` (priors ``N(0, 1/fan_in)`` on weights, ``N(0, 1)``
on biases); :meth:`BayesianNet.module` rebuilds the network from a sample dict without NumPyro, so
it runs inside ``jax.vmap`` over draws, and :meth:`BayesianNet.apply_rows` runs it on many inputs
at once, feature-major (the likelihoods' batches).
"""

from __future__ import annotations

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.module import eqx_from_dict, eqx_to_dict, random_eqx_module

import bayes_nea as bn
from models.priors import Gaussian

Array = jax.Array


@dataclasses.dataclass(frozen=True, eq=False)
class GaussianSite:
    """One latent site with an independent Gaussian prior (see the module docstring).

    Fields:
        name: coordinate name (the latent site is ``name`` or ``name + "_z"``).
        prior: its :class:`Gaussian` (numpy arrays; the site's shape is ``prior.loc.shape``).
        whitened: sample the standardised ``z`` instead of ``x``.
    """

    name: str
    prior: Gaussian
    whitened: bool = True

    @property
    def site(self) -> str:
        """The latent site's name."""
        return f"{self.name}_z" if self.whitened else self.name

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.prior.loc.shape)

    def sample(self, dtype) -> Array:
        """Declare the NumPyro site (inside a model); returns the latent draw."""
        loc, scale = self._loc_scale(dtype)
        if self.whitened:
            d = dist.Normal(jnp.zeros_like(loc), jnp.ones_like(scale))
        else:
            d = dist.Normal(loc, scale)
        return numpyro.sample(self.site, d.to_event(len(self.shape)))

    def value(self, sample: dict) -> Array:
        """The coordinate ``x`` of one draw (reads ``sample[self.site]``)."""
        latent = sample[self.site]
        if not self.whitened:
            return latent
        loc, scale = self._loc_scale(latent.dtype)
        return loc + scale * latent

    def latent_of(self, x, dtype) -> Array:
        """The latent value whose coordinate is ``x`` (the inverse of :meth:`value`)."""
        x = jnp.broadcast_to(jnp.asarray(x, dtype), self.shape)
        if not self.whitened:
            return x
        loc, scale = self._loc_scale(dtype)
        return (x - loc) / scale

    def init(self, dtype) -> Array:
        """The prior median as a latent value (``0`` when whitened, ``loc`` otherwise)."""
        loc, _ = self._loc_scale(dtype)
        return jnp.zeros_like(loc) if self.whitened else loc

    def draw(self, key, dtype) -> Array:
        """A latent value drawn from the prior."""
        z = jax.random.normal(key, self.shape, dtype)
        if self.whitened:
            return z
        loc, scale = self._loc_scale(dtype)
        return loc + scale * z

    def _loc_scale(self, dtype):
        return jnp.asarray(self.prior.loc, dtype), jnp.asarray(self.prior.scale, dtype)


@functools.cache
def _mlp(in_size: int, out_size: int, width: int, depth: int) -> eqx.nn.MLP:
    # The initial weights only fix the structure: values come from the prior / the sample dict.
    # Built once per shape (an immutable module), with concrete arrays also when first asked for
    # while a model is traced: every sample site, draw and module of a network reads it, and
    # drawing its random initial weights anew each time was 21 s of the SVI test module's 333 s
    # under a profiler (519 calls; 156 in one quick-grid network cell)
    with jax.ensure_compile_time_eval():
        return eqx.nn.MLP(
            in_size, out_size, width, depth, activation=jnp.tanh, key=jax.random.key(0)
        )


@jax.custom_jvp
def _linear_rows(w: Array, b: Array, h: Array) -> Array:
    """One layer on the rows: ``w (out, in) @ h (in, N) + b[:, None]``."""
    return w @ h + b[:, None]


@_linear_rows.defjvp
def _linear_rows_jvp(primals, tangents):
    # the product with ``dh`` reads a stored copy of ``w.T`` (the barrier keeps XLA from folding
    # the transpose back into the product): its transpose, the gradient with respect to ``h``,
    # is then a product whose left operand contracts its last axis, which XLA's CPU backend
    # runs as a library kernel instead of a 2x slower generic one (docs/measurements.md)
    w, b, h = primals
    dw, db, dh = tangents
    w_t = jax.lax.optimization_barrier(w.T)
    return _linear_rows(w, b, h), dw @ h + db[:, None] + w_t.T @ dh


@dataclasses.dataclass(frozen=True, eq=False)
class BayesianNet:
    """An equinox MLP with NumPyro sample sites for its weights (see the module docstring).

    Fields:
        name: site prefix; a weight's site is ``name + "/" + its equinox key path``
            (e.g. ``"actuator/net/layers[0].weight"``).
        in_size, out_size, width, depth: the MLP's shape (``depth`` hidden layers of ``width``).
    """

    name: str
    in_size: int
    out_size: int
    width: int = 32
    depth: int = 2

    @property
    def template(self) -> eqx.nn.MLP:
        return _mlp(self.in_size, self.out_size, self.width, self.depth)

    def _prior(self, path: str, shape) -> dist.Distribution:
        if path.endswith("weight"):
            return dist.Normal(0.0, float(1.0 / np.sqrt(shape[-1])))
        return dist.Normal(0.0, 1.0)

    @property
    def sites(self) -> tuple[str, ...]:
        """Names of the weight sites, in leaf order."""
        params, _ = eqx.partition(self.template, eqx.is_inexact_array)
        return tuple(f"{self.name}/{k}" for k in eqx_to_dict(params))

    @property
    def output_sites(self) -> dict[str, float]:
        """The output layer's weight and bias sites and their prior standard deviations
        (``{site: sd}``; the layer the network's prediction is linear in)."""
        params, _ = eqx.partition(self.template, eqx.is_inexact_array)
        leaves = eqx_to_dict(params)
        last = f"layers[{self.depth}]."
        return {
            f"{self.name}/{k}": float(self._prior(k, v.shape).scale)
            for k, v in leaves.items()
            if k.startswith(last)
        }

    def sample(self, dtype) -> dict:
        """Declare the weight sites (inside a model) through ``random_eqx_module``; returns them."""
        template = jtu.tree_map(
            lambda x: x.astype(dtype) if eqx.is_inexact_array(x) else x, self.template
        )
        net = random_eqx_module(self.name, template, prior=self._prior)
        params, _ = eqx.partition(net, eqx.is_inexact_array)
        return {f"{self.name}/{k}": v for k, v in eqx_to_dict(params).items()}

    def module(self, sample: dict, dtype) -> eqx.nn.MLP:
        """The network of one draw (pure; no NumPyro), weights cast to ``dtype``."""
        params, static = eqx.partition(self.template, eqx.is_inexact_array)
        values = {k: jnp.asarray(sample[f"{self.name}/{k}"], dtype) for k in eqx_to_dict(params)}
        return eqx.combine(eqx_from_dict(values, params), static)

    def apply_rows(self, sample: dict, x: Array) -> Array:
        """The network of one draw on N inputs at once, feature-major: ``x`` (in, N) -> (out, N)
        (weights cast to ``x.dtype``); equal to ``jax.vmap(self.module(sample, dtype), in_axes=1,
        out_axes=1)(x)``.

        Each layer is one product ``W (out, in) @ h (in, N)`` with the states along the rows'
        contiguous axis. Vmapping :meth:`module` over states computes the same sums with the
        states in the middle axis of every activation, where XLA's CPU backend transposes and
        runs the layers' weight gradients 2-3x slower (measured on the quick grid's ensembles:
        docs/measurements.md, "Networks on the states' rows").
        """
        mlp = self.module(sample, x.dtype)
        h = x
        for i, layer in enumerate(mlp.layers):
            h = _linear_rows(layer.weight, layer.bias, h)
            if i < self.depth:
                h = jnp.tanh(h)  # the template's activation (:func:`_mlp`); no final one
        return h

    def draw(self, key, dtype) -> dict:
        """Weights drawn from the prior, as a sample dict."""
        params, _ = eqx.partition(self.template, eqx.is_inexact_array)
        leaves = eqx_to_dict(params)
        keys = jax.random.split(key, len(leaves))
        out = {}
        for k, (path, leaf) in zip(keys, leaves.items(), strict=True):
            sd = float(self._prior(path, leaf.shape).scale)
            out[f"{self.name}/{path}"] = sd * jax.random.normal(k, leaf.shape, dtype)
        return out


# --- features and characteristic scales -------------------------------------------------------


@dataclasses.dataclass(frozen=True, eq=False)
class Scales:
    """Characteristic magnitudes of a robot, to normalise network inputs and outputs.

    Fields:
        tau: (n,) rms joint torque of rnea over random states (N or N m).
        qdd: (n,) rms acceleration of aba under torques of that size (m/s^2 or rad/s^2).
        qd: (n,) velocity scale of the random states (2, see ``bayes_nea.sample_states``).
    """

    tau: np.ndarray
    qdd: np.ndarray
    qd: np.ndarray


@functools.lru_cache(maxsize=64)
def characteristic_scales(robot: bn.Robot, *, n_samples: int = 64, seed: int = 0) -> Scales:
    """:class:`Scales` of ``robot`` from its nominal parameters (no data needed; cached per robot)."""
    q, qd, qdd = bn.sample_states(robot, seed, n_samples)
    params = robot.nominal.astype(q.dtype)
    tau = jax.jit(jax.vmap(lambda a, b, c: bn.rnea(robot, a, b, c, params=params)))(q, qd, qdd)
    tau_rms = np.sqrt(np.mean(np.asarray(tau, dtype=np.float64) ** 2, axis=0)) + 1e-6
    u = jax.random.normal(jax.random.key(seed + 1), tau.shape, tau.dtype) * jnp.asarray(
        tau_rms[None, :], tau.dtype
    )
    acc = jax.jit(jax.vmap(lambda a, b, t: bn.aba(robot, a, b, t, params=params)))(q, qd, u)
    qdd_rms = np.sqrt(np.mean(np.asarray(acc, dtype=np.float64) ** 2, axis=0)) + 1e-6
    return Scales(tau=tau_rms, qdd=qdd_rms, qd=np.full(robot.n, 2.0))


def data_scales(data, robot: bn.Robot) -> dict:
    """Network and noise normalisers derived from training data, for ``ModelSpec.scales``.

    Args:
        data: a ``models.ModelData`` (N, n) (or (W, H + 1, n) windows) or anything with
            ``q, qd, qdd, tau`` arrays of that layout (a ``data.Dataset``: use
            ``models.model_data(dataset)`` first).
        robot: the robot the data belong to (its nominal parameters give the rigid-body torque).

    Returns:
        ``{"tau": (n,), "qdd": (n,), "qd": (n,)}`` floats: ``tau`` is per joint the larger of the
        rms commanded effort and the rms nominal RNEA torque ``tau_RB(q, qd, qdd)`` on the data
        (so an unactuated joint gets the size of the torque its model must explain); ``qdd`` and
        ``qd`` are the rms of the data. Each is floored at 1e-3 times its largest entry (and
        1e-6) so that no normaliser is zero.

    Raises:
        ValueError: data whose joint count differs from ``robot.n`` or that are not finite.
    """
    arrays = [np.asarray(getattr(data, k), dtype=np.float64) for k in ("q", "qd", "qdd", "tau")]
    if any(a.shape[-1] != robot.n or a.size == 0 for a in arrays):
        raise ValueError(
            f"data_scales: expected non-empty arrays (..., {robot.n}) for robot {robot.name!r}, "
            f"got shapes {[a.shape for a in arrays]}"
        )
    if not all(np.all(np.isfinite(a)) for a in arrays):
        raise ValueError("data_scales: the data contain NaN or inf")
    q, qd, qdd, tau = (a.reshape(-1, robot.n) for a in arrays)
    dtype = jnp.result_type(float)
    params = robot.nominal.astype(dtype)
    rb = jax.jit(jax.vmap(lambda a, b, c: bn.rnea(robot, a, b, c, params=params)))(
        jnp.asarray(q, dtype), jnp.asarray(qd, dtype), jnp.asarray(qdd, dtype)
    )
    rb = np.asarray(rb, dtype=np.float64)

    def rms(x):
        return np.sqrt(np.mean(x**2, axis=0))

    def floored(x):
        return np.maximum(x, max(1e-3 * float(x.max()), 1e-6))

    return {
        "tau": tuple(float(v) for v in floored(np.maximum(rms(tau), rms(rb)))),
        "qdd": tuple(float(v) for v in floored(rms(qdd))),
        "qd": tuple(float(v) for v in floored(rms(qd))),
    }


def feature_size(robot: bn.Robot) -> int:
    """Length of :func:`state_features`: sin/cos for revolute joints, q for prismatic, plus qd."""
    return sum(2 if t == "revolute" else 1 for t in robot.joint_types) + robot.n


def state_features(robot: bn.Robot, scales: Scales, q: Array, qd: Array) -> Array:
    """Network input (feature_size,) of one state: ``[sin q_r, cos q_r, q_p, qd / qd_scale]``.

    Revolute joints enter as ``sin q, cos q`` (bounded, periodic), prismatic joints as ``q`` in
    metres (link travel of the supported systems is below ~1 m, inside tanh's linear range),
    velocities divided by ``scales.qd`` (per joint; the data's rms with :func:`data_scales`).
    """
    revolute = np.array([t == "revolute" for t in robot.joint_types])
    parts = []
    if revolute.any():
        parts += [jnp.sin(q[revolute]), jnp.cos(q[revolute])]
    if (~revolute).any():
        parts.append(q[~revolute])
    parts.append(qd / jnp.asarray(scales.qd, qd.dtype))
    return jnp.concatenate(parts)


def state_feature_rows(robot: bn.Robot, scales: Scales, q: Array, qd: Array) -> Array:
    """:func:`state_features` of N states, feature-major: ``q, qd`` (n, N) -> (feature_size, N)."""
    return jax.vmap(
        lambda a, b: state_features(robot, scales, a, b), in_axes=1, out_axes=1
    )(q, qd)


def build_component(classes: dict, what: str, name: str, robot, prior, scales, **options):
    """``classes[name].build(robot, prior, scales, **options)``; ``ValueError`` listing the valid
    names of ``what`` (family, actuator) for an unknown ``name``."""
    if name not in classes:
        raise ValueError(f"unknown {what} {name!r}; valid values are {list(classes)}")
    return classes[name].build(robot, prior, scales, **options)
