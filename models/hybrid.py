"""Hybrid inverse dynamics models ``tau = f(q, qd, qdd [, history])`` (Reuss et al. 2022), in Equinox.

A model is a :class:`Hybrid`: a sum of parts (the paper's eq. 11), each part one of

- :class:`RigidBody`: ``Y(q, qd, qdd) theta(x)`` (eq. 4) with ``theta`` from per-body virtual
  parameters ``x`` (n, 10) through a :func:`bayes_nea.get_parameterization` map: ``"diffbary"``
  (the paper's DiffBary, eq. 12), ``"diffnea"`` (DiffNEA virtual parameters) or ``"theta"``
  (raw, e.g. an SDP solution held fixed);
- :class:`SignFriction`: the paper's modified Coulomb term (eq. 13),
  ``sigma_C clip(qd / qd_lim, -1, 1)`` with ``qd_lim = 0.02`` rad/s;
- :class:`MLPResidual`: input normalisation, two linear layers of 200 with PReLU, linear output
  (Table IV);
- :class:`LSTMResidual`: input normalisation, linear 100 + PReLU, layer norm, one LSTM layer of 50,
  layer norm, linear output (Section III-A, Table IV). Used alone it is the black-box LSTM;
- :class:`JointLSTMResidual`, :class:`JointMLPResidual`: the same blocks, one small network per
  joint on that joint's own velocity and acceleration, odd in the joint's motion (what the
  study's hybrids use; docs/hybrid-study.md says why);
- :class:`DeLaN`: deep Lagrangian network (Lutter, Listmann & Peters 2019): ``M(q) = L L^T + eps``
  with a Cholesky factor ``L`` and a potential ``V(q)`` from networks (two layers of 200, softplus);
  torques by the Euler-Lagrange equation (:func:`lagrangian_torques`).

Network outputs are in normalised torque units and multiplied by the per-joint torque range of the
training data (the paper's min-max normalisation), so every part returns N m.

Every part has ``init_state()``, ``step(state, q, qd, qdd) -> (state, tau)`` (one control step,
for the 1 kHz controller: hidden state carried) and ``sequence(x, Y) -> tau`` on one trajectory,
``x = [q, qd, qdd]`` (T, 3n), ``Y`` (T, n, 10n) the joint-torque regressor (precomputed once for
training; ``rnea = Y theta`` exactly). The LSTM starts each sequence from a zero hidden state.
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn

QD_LIMIT = 0.02
"""``qd_lim`` of the modified Coulomb model (rad/s; paper eq. 13)."""


class Normalizer(eqx.Module):
    """Fixed affine input normalisation ``(x - mean) / std`` (not trained)."""

    mean: jax.Array
    std: jax.Array

    def __call__(self, x):
        return (x - jax.lax.stop_gradient(self.mean)) / jax.lax.stop_gradient(self.std)


def normalizer_from(x: np.ndarray) -> Normalizer:
    """From samples ``x`` (N, d): their mean and standard deviation (floored at 1e-6)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1, np.shape(x)[-1])
    return Normalizer(jnp.asarray(x.mean(0)), jnp.asarray(np.maximum(x.std(0), 1e-6)))


class _Static:
    """Holds a :class:`bayes_nea.Robot` as an opaque static field (hashed by identity; the
    robot's own pytree leaves are constants here, not parameters)."""

    def __init__(self, value):
        self.value = value


class RigidBody(eqx.Module):
    """``tau = rnea(q, qd, qdd; theta(x)) = Y theta(x)``; ``x`` (n, 10) virtual parameters."""

    x: jax.Array
    holder: _Static = eqx.field(static=True)
    parameterization: str = eqx.field(static=True)

    @property
    def robot(self) -> bn.Robot:
        return self.holder.value

    def theta(self) -> jax.Array:
        """Inertial parameters (n, 10) (physically consistent unless ``"theta"``)."""
        return bn.bodies_to_theta(self.parameterization, self.x)

    def params(self) -> bn.RobotParams:
        nominal = self.robot.params()
        return bn.RobotParams(self.theta(), nominal.rpy, nominal.xyz)

    def init_state(self):
        return ()

    def step(self, state, q, qd, qdd):
        return state, bn.rnea(self.robot, q, qd, qdd, params=self.params())

    def sequence(self, x, Y):
        return Y @ self.theta().reshape(-1)


def rigid_body(robot: bn.Robot, parameterization: str, *, key, scale: float = 1e-3) -> RigidBody:
    """A rigid body learned from scratch: ``x ~ N(0, scale^2)`` (the paper's DiffBary init, 1e-3).

    ``"theta"`` starts at zero instead (for least squares it does not matter).
    """
    n = robot.n
    if parameterization == "theta":
        return RigidBody(jnp.zeros((n, 10)), _Static(robot), "theta")
    x = scale * jax.random.normal(key, (n, 10))
    return RigidBody(x, _Static(robot), bn.get_parameterization(parameterization).name)


def fixed_rigid_body(robot: bn.Robot, theta) -> RigidBody:
    """A rigid body with given inertial parameters (n, 10), e.g. the SDP solution."""
    return RigidBody(jnp.asarray(theta, dtype=jnp.float64), _Static(robot), "theta")


class SignFriction(eqx.Module):
    """Modified Coulomb friction (eq. 13): ``sigma_C clip(qd / qd_lim, -1, 1)``, sigma_C (n,)."""

    sigma: jax.Array

    def init_state(self):
        return ()

    def step(self, state, q, qd, qdd):
        return state, self.sigma * jnp.clip(qd / QD_LIMIT, -1.0, 1.0)

    def sequence(self, x, Y):
        n = self.sigma.shape[0]
        return self.sigma[None, :] * jnp.clip(x[:, n : 2 * n] / QD_LIMIT, -1.0, 1.0)


def sign_features(qd: jax.Array) -> jax.Array:
    """The regressor of :class:`SignFriction`: ``diag(clip(qd / qd_lim, -1, 1))`` (..., n, n)."""
    return jnp.vectorize(jnp.diag, signature="(n)->(n,n)")(jnp.clip(qd / QD_LIMIT, -1.0, 1.0))


class MLPResidual(eqx.Module):
    """Stateless residual: normalisation, linear 200 + PReLU, linear 200 + PReLU, linear output."""

    norm: Normalizer
    layers: tuple
    acts: tuple
    scale: jax.Array

    def _f(self, x):
        h = self.norm(x)
        for lin, act in zip(self.layers[:-1], self.acts, strict=True):
            h = act(lin(h))
        return jax.lax.stop_gradient(self.scale) * self.layers[-1](h)

    def init_state(self):
        return ()

    def step(self, state, q, qd, qdd):
        return state, self._f(jnp.concatenate([q, qd, qdd]))

    def sequence(self, x, Y):
        return jax.vmap(self._f)(x)


def mlp_residual(norm: Normalizer, scale, *, key, width: int = 200, depth: int = 2) -> MLPResidual:
    d = norm.mean.shape[0]
    n = d // 3
    keys = jax.random.split(key, depth + 1)
    sizes = [d] + [width] * depth
    layers = [
        eqx.nn.Linear(a, b, key=k) for a, b, k in zip(sizes[:-1], sizes[1:], keys, strict=False)
    ]
    out = eqx.nn.Linear(width, n, key=keys[-1])
    out = eqx.tree_at(lambda l: l.weight, out, out.weight * 0.1)
    return MLPResidual(
        norm, (*layers, out), tuple(eqx.nn.PReLU() for _ in range(depth)), jnp.asarray(scale)
    )


class LSTMResidual(eqx.Module):
    """Recurrent residual (Section III-A): normalisation, linear + PReLU, layer norm, LSTM,
    layer norm, linear output. Hidden state ``(h, c)`` (hidden,) each, zero at a sequence start."""

    norm: Normalizer
    inp: eqx.nn.Linear
    act: eqx.nn.PReLU
    ln1: eqx.nn.LayerNorm
    cell: eqx.nn.LSTMCell
    ln2: eqx.nn.LayerNorm
    out: eqx.nn.Linear
    scale: jax.Array
    offset: jax.Array

    def init_state(self, dtype=jnp.float64):
        z = jnp.zeros(self.cell.hidden_size, dtype)
        return (z, z)

    def _cell(self, state, xt):
        h = self.ln1(self.act(self.inp(self.norm(xt))))
        state = self.cell(h, state)
        return state, self.offset + jax.lax.stop_gradient(self.scale) * self.out(self.ln2(state[0]))

    def step(self, state, q, qd, qdd):
        return self._cell(state, jnp.concatenate([q, qd, qdd]))

    def sequence(self, x, Y):
        _, tau = jax.lax.scan(lambda s, xt: self._cell(s, xt), self.init_state(x.dtype), x)
        return tau


def lstm_residual(
    norm: Normalizer, scale, *, key, offset=None, width: int = 100, hidden: int = 50
) -> LSTMResidual:
    """Table IV's sizes: linear 100, LSTM 50 (input 3n, output n)."""
    d = norm.mean.shape[0]
    n = d // 3
    k1, k2, k3 = jax.random.split(key, 3)
    out = eqx.nn.Linear(hidden, n, key=k3)
    out = eqx.tree_at(lambda l: l.weight, out, out.weight * 0.1)
    offset = jnp.zeros(n) if offset is None else jnp.asarray(offset)
    return LSTMResidual(
        norm,
        eqx.nn.Linear(d, width, key=k1),
        eqx.nn.PReLU(),
        eqx.nn.LayerNorm(width),
        eqx.nn.LSTMCell(width, hidden, key=k2),
        eqx.nn.LayerNorm(hidden),
        out,
        jnp.asarray(scale),
        offset,
    )


def joint_features(qd: jax.Array, qdd: jax.Array) -> jax.Array:
    """Inputs of joint ``j``'s own residual network (..., n, 3): ``qd_j``, ``qdd_j`` and
    ``tanh(qd_j / qd_lim)`` (the velocity at the scale of the sign friction, eq. 13)."""
    return jnp.stack([qd, qdd, jnp.tanh(qd / QD_LIMIT)], axis=-1)


def joint_normalizer_from(x: np.ndarray) -> Normalizer:
    """Scales (n, 3) of :func:`joint_features` over samples ``x`` (..., 3n): the root mean square,
    with a zero shift (a shift would break the residuals' oddness)."""
    x = np.asarray(x, dtype=np.float64).reshape(-1, np.shape(x)[-1])
    n = x.shape[1] // 3
    u = np.asarray(joint_features(jnp.asarray(x[:, n : 2 * n]), jnp.asarray(x[:, 2 * n :])))
    rms = np.sqrt(np.mean(u**2, axis=0))
    return Normalizer(jnp.zeros(rms.shape), jnp.asarray(np.maximum(rms, 1e-6)))


def _stacked(make, key, n: int):
    """``make(key)`` for each of ``n`` joints, array leaves stacked on a leading joint axis."""
    return eqx.filter_vmap(make)(jax.random.split(key, n))


class JointMLPResidual(eqx.Module):
    """Per-joint stateless residual: joint ``j``'s torque from its own :func:`joint_features`
    through its own network ``f_j`` (linear + PReLU, linear + PReLU, linear 1), made odd:
    ``r_j(u) = (f_j(u) - f_j(-u)) / 2``; weights stacked (n, ...).

    Why per joint: the effects a rigid body misses on our plant (friction, motor inertia, joint
    elasticity, delay) act joint by joint, as the DiffNEA actuator models; a network of the whole
    state fits the few training paths by where the arm is. Why odd: those effects change sign
    when the motion is reversed, while what belongs to the rigid body and is not odd in the
    joint's motion (gravity, a constant offset, velocity-squared terms) then cannot move into
    the residual: end to end, the rigid body inside the hybrid lands on the SDP fit instead of
    6x off it (docs/hybrid-study.md)."""

    norm: Normalizer
    layers: tuple
    acts: tuple
    scale: jax.Array

    def _f(self, qd, qdd):
        u = self.norm(joint_features(qd, qdd))

        def one(layers, acts, uj):
            h = uj
            for lin, act in zip(layers[:-1], acts, strict=True):
                h = act(lin(h))
            return layers[-1](h)[0]

        f = eqx.filter_vmap(one)
        out = 0.5 * (f(self.layers, self.acts, u) - f(self.layers, self.acts, -u))
        return jax.lax.stop_gradient(self.scale) * out

    def init_state(self):
        return ()

    def step(self, state, q, qd, qdd):
        return state, self._f(qd, qdd)

    def sequence(self, x, Y):
        n = self.scale.shape[0]
        return jax.vmap(self._f)(x[:, n : 2 * n], x[:, 2 * n :])


def joint_mlp_residual(
    norm: Normalizer, scale, *, key, width: int = 32, depth: int = 2
) -> JointMLPResidual:
    """Per-joint MLP residual; ``norm`` from :func:`joint_normalizer_from`, ``scale`` (n,) N m."""
    n = norm.mean.shape[0]

    def make(k):
        keys = jax.random.split(k, depth + 1)
        sizes = [3] + [width] * depth
        layers = [eqx.nn.Linear(a, b, key=kk) for a, b, kk in zip(sizes[:-1], sizes[1:], keys, strict=False)]
        out = eqx.nn.Linear(width, 1, key=keys[-1])
        out = eqx.tree_at(lambda l: l.weight, out, out.weight * 0.1)
        return (*layers, out), tuple(eqx.nn.PReLU() for _ in range(depth))

    layers, acts = _stacked(make, key, n)
    return JointMLPResidual(norm, layers, acts, jnp.asarray(scale))


class JointLSTMResidual(eqx.Module):
    """Per-joint recurrent residual: joint ``j``'s torque from the history of its own
    :func:`joint_features` through its own linear + PReLU, layer norm, LSTM, layer norm, linear 1
    (the paper's block, Section III-A, one per joint), made odd as :class:`JointMLPResidual`:
    the network runs on the history and on its negation, ``r = (f(u) - f(-u)) / 2``. Weights
    stacked (n, ...). Hidden state ``(h, c)`` (2, n, hidden) each (the two runs), zero at a
    sequence start."""

    norm: Normalizer
    inp: eqx.nn.Linear
    act: eqx.nn.PReLU
    ln1: eqx.nn.LayerNorm
    cell: eqx.nn.LSTMCell
    ln2: eqx.nn.LayerNorm
    out: eqx.nn.Linear
    scale: jax.Array

    def init_state(self, dtype=jnp.float64):
        z = jnp.zeros((2, self.scale.shape[0], self.cell.hidden_size), dtype)
        return (z, z)

    def _joints(self, fn, *args):
        """``fn`` on each joint's layers and inputs, for both the motion and its negation:
        ``args`` (2, n, ...) -> (2, n, ...)."""
        layers = (self.inp, self.act, self.ln1, self.cell, self.ln2, self.out)
        return jax.vmap(lambda *a: eqx.filter_vmap(fn)(*layers, *a))(*args)

    @staticmethod
    def _input(inp, act, ln1, cell, ln2, out, u):
        return ln1(act(inp(u)))

    @staticmethod
    def _recur(inp, act, ln1, cell, ln2, out, a, h, c):
        return cell(a, (h, c))

    @staticmethod
    def _output(inp, act, ln1, cell, ln2, out, h):
        return out(ln2(h))[0]

    def _odd(self, y):
        return jax.lax.stop_gradient(self.scale) * 0.5 * (y[0] - y[1])

    def _signed_inputs(self, qd, qdd):
        u = self.norm(joint_features(qd, qdd))
        return jnp.stack([u, -u])

    def step(self, state, q, qd, qdd):
        a = self._joints(self._input, self._signed_inputs(qd, qdd))
        h, c = self._joints(self._recur, a, *state)
        return (h, c), self._odd(self._joints(self._output, h))

    def sequence(self, x, Y):
        """The input and output layers run on all T steps at once; only the LSTM cell runs in
        the loop over time."""
        n = self.scale.shape[0]
        u = jax.vmap(self._signed_inputs)(x[:, n : 2 * n], x[:, 2 * n :])
        a = jax.vmap(lambda ut: self._joints(self._input, ut))(u)

        def recur(state, at):
            state = self._joints(self._recur, at, *state)
            return state, state[0]

        _, h = jax.lax.scan(recur, self.init_state(x.dtype), a)
        return jax.vmap(lambda ht: self._odd(self._joints(self._output, ht)))(h)


def joint_lstm_residual(
    norm: Normalizer, scale, *, key, width: int = 32, hidden: int = 16
) -> JointLSTMResidual:
    """Per-joint LSTM residual; ``norm`` from :func:`joint_normalizer_from`, ``scale`` (n,) N m."""
    n = norm.mean.shape[0]

    def make(k):
        k1, k2, k3 = jax.random.split(k, 3)
        out = eqx.nn.Linear(hidden, 1, key=k3)
        out = eqx.tree_at(lambda l: l.weight, out, out.weight * 0.1)
        return (
            eqx.nn.Linear(3, width, key=k1), eqx.nn.PReLU(), eqx.nn.LayerNorm(width),
            eqx.nn.LSTMCell(width, hidden, key=k2), eqx.nn.LayerNorm(hidden), out,
        )  # fmt: skip

    return JointLSTMResidual(norm, *_stacked(make, key, n), jnp.asarray(scale))


def lagrangian_torques(mass_fn, potential_fn, q, qd, qdd):
    """Euler-Lagrange inverse dynamics for ``L = 1/2 qd^T M(q) qd - V(q)`` (n,):

    ``tau = M qdd + dM/dt qd - 1/2 d(qd^T M qd)/dq + dV/dq`` (DeLaN, Lutter et al. 2019, eq. 4),
    ``dM/dt = (dM/dq) qd`` by a forward-mode derivative, the gradients by reverse mode.
    """
    M, Mdot = jax.jvp(mass_fn, (q,), (qd,))
    dT = jax.grad(lambda p: 0.5 * qd @ mass_fn(p) @ qd)(q)
    dV = jax.grad(potential_fn)(q)
    return M @ qdd + Mdot @ qd - dT + dV


class DeLaN(eqx.Module):
    """Deep Lagrangian network: ``M = L L^T + eps 1`` (L lower triangular with a softplus
    diagonal) and ``V(q)`` from two softplus MLPs of the normalised ``q``; torques in N m."""

    norm: Normalizer
    chol_net: eqx.nn.MLP
    pot_net: eqx.nn.MLP
    n: int = eqx.field(static=True)
    mass_scale: float = eqx.field(static=True)
    torque_scale: float = eqx.field(static=True)
    eps: float = eqx.field(static=True, default=1e-4)

    def mass(self, q):
        n = self.n
        out = self.chol_net(self.norm(q))
        diag = jax.nn.softplus(out[:n]) + 1e-3
        L = jnp.zeros((n, n), q.dtype).at[jnp.tril_indices(n, -1)].set(out[n:])
        L = L + jnp.diag(diag)
        return self.mass_scale * (L @ L.T) + self.eps * jnp.eye(n, dtype=q.dtype)

    def potential(self, q):
        return self.torque_scale * self.pot_net(self.norm(q))[0]

    def init_state(self):
        return ()

    def step(self, state, q, qd, qdd):
        return state, lagrangian_torques(self.mass, self.potential, q, qd, qdd)

    def sequence(self, x, Y):
        n = self.n
        return jax.vmap(
            lambda s: lagrangian_torques(self.mass, self.potential, s[:n], s[n : 2 * n], s[2 * n :])
        )(x)


def delan(
    norm_q: Normalizer, *, key, torque_scale: float, mass_scale: float = 0.1, width: int = 200
) -> DeLaN:
    """DeLaN with Table IV's two softplus layers of 200 (``norm_q`` normalises ``q`` (n,))."""
    n = norm_q.mean.shape[0]
    k1, k2 = jax.random.split(key)
    chol = eqx.nn.MLP(n, n * (n + 1) // 2, width, 2, activation=jax.nn.softplus, key=k1)
    pot = eqx.nn.MLP(n, 1, width, 2, activation=jax.nn.softplus, key=k2)
    return DeLaN(norm_q, chol, pot, n, float(mass_scale), float(torque_scale))


class Hybrid(eqx.Module):
    """``tau = sum of parts`` (eq. 11); ``names`` label the parts (e.g. ``("rbd", "sign", "lstm")``)."""

    parts: tuple
    names: tuple[str, ...] = eqx.field(static=True)

    def init_state(self):
        return tuple(p.init_state() for p in self.parts)

    def step(self, state, q, qd, qdd):
        """One control step: ``(state, tau)`` (n,)."""
        new, total = [], 0.0
        for p, s in zip(self.parts, state, strict=True):
            s, tau = p.step(s, q, qd, qdd)
            new.append(s)
            total = total + tau
        return tuple(new), total

    def sequence(self, x, Y):
        """Torques (T, n) of one trajectory ``x`` (T, 3n) with regressor ``Y`` (T, n, 10n)."""
        return sum(p.sequence(x, Y) for p in self.parts)

    def part(self, name: str):
        if name not in self.names:
            raise ValueError(f"model has parts {self.names}, not {name!r}")
        return self.parts[self.names.index(name)]

    def only(self, names: Sequence[str]) -> Hybrid:
        """The sub-model of the named parts (e.g. the RBD inside an end-to-end hybrid)."""
        idx = [self.names.index(k) for k in names if k in self.names]
        return Hybrid(tuple(self.parts[i] for i in idx), tuple(self.names[i] for i in idx))

    def replace_part(self, name: str, part) -> Hybrid:
        i = self.names.index(name)
        return Hybrid(self.parts[:i] + (part,) + self.parts[i + 1 :], self.names)

    def is_recurrent(self) -> bool:
        return any(isinstance(p, (LSTMResidual, JointLSTMResidual)) for p in self.parts)


def count_weights(model) -> int:
    """Number of trainable scalars (arrays in the pytree, normalisers excluded)."""
    total = sum(
        np.size(x) for x in jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_inexact_array))
    )
    isnorm = lambda x: isinstance(x, Normalizer)
    norms = [x for x in jax.tree_util.tree_leaves(model, is_leaf=isnorm) if isnorm(x)]
    return int(total - sum(np.size(x.mean) + np.size(x.std) for x in norms))
