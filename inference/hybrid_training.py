"""Training of the hybrid inverse-dynamics models (Reuss et al. 2022, Sections IV-D to IV-F).

- Data: movements cut into non-overlapping windows of ``length`` steps (the paper's 100-step
  sequences; the LSTM's hidden state is zero at each window start); evaluation on whole movements.
- Loss: mean squared error of the min-max normalised torques (Section IV-C):
  ``mean(((tau_hat - tau) / (tau_max - tau_min))^2)`` per joint, averaged; reported as NMSE.
- End to end (E2E): all parts jointly by Adam (lr 0.004, 0.001 for DeLaN); the learning rate drops
  by 10x when the validation loss has not improved for ``lr_patience`` epochs, training stops
  after ``patience`` epochs without improvement, and the best-validation model is returned.
- Two step (2S): :func:`sdp_parts` (least squares with LMIs on the training data), then the
  residual network alone with the rigid body and friction frozen (``freeze``).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

import bayes_nea as bn
from inference.sdp import sdp_least_squares
from models import hybrid as hy


class Batchable(NamedTuple):
    """Arrays of windows (or of one whole movement): ``x`` (..., L, 3n), ``Y`` (..., L, n, 10n),
    ``tau`` (..., L, n)."""

    x: np.ndarray
    Y: np.ndarray
    tau: np.ndarray


_regressor_cache: dict = {}


def regressor_batch(robot: bn.Robot, q, qd, qdd) -> np.ndarray:
    """Joint-torque regressors (T, n, 10n) of T samples (one jitted vmap per robot)."""
    fn = _regressor_cache.get(id(robot))
    if fn is None:
        fn = jax.jit(jax.vmap(lambda a, b, c: bn.joint_torque_regressor(robot, a, b, c)))
        _regressor_cache[id(robot)] = fn
    out = [
        np.asarray(fn(q[i : i + 4096], qd[i : i + 4096], qdd[i : i + 4096]))
        for i in range(0, len(q), 4096)
    ]
    return np.concatenate(out)


def movement_arrays(robot: bn.Robot, m) -> Batchable:
    """One whole movement as (T, ...) arrays (inputs: measured q, qd, filtered qdd)."""
    x = np.concatenate([m.q, m.qd, m.qdd], axis=1)
    return Batchable(x, regressor_batch(robot, m.q, m.qd, m.qdd), np.asarray(m.tau))


def windows(movements: Sequence, robot: bn.Robot, length: int = 100) -> Batchable:
    """Non-overlapping windows (W, length, ...) of all movements (remainders dropped)."""
    xs, Ys, ts = [], [], []
    for m in movements:
        a = movement_arrays(robot, m)
        W = a.x.shape[0] // length
        if W == 0:
            continue
        cut = lambda v, W=W: v[: W * length].reshape(W, length, *v.shape[1:])
        xs.append(cut(a.x))
        Ys.append(cut(a.Y))
        ts.append(cut(a.tau))
    if not xs:
        raise ValueError(f"no movement is as long as one window ({length} steps)")
    return Batchable(np.concatenate(xs), np.concatenate(Ys), np.concatenate(ts))


def torque_range(movements: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Per-joint ``(tau_min, tau_max)`` (n,) over the movements (the paper's normalisation)."""
    tau = np.concatenate([m.tau for m in movements])
    return tau.min(0), tau.max(0)


def nmse(pred, tau, scale) -> jax.Array:
    """Per-joint normalised MSE (n,): ``mean(((pred - tau) / scale)^2)`` over all leading axes."""
    scale = jnp.asarray(scale)
    err = (pred - tau) / scale.reshape((1,) * (pred.ndim - 1) + scale.shape)
    return jnp.mean(err.reshape(-1, err.shape[-1]) ** 2, axis=0)


def predict(model: hy.Hybrid, data: Batchable) -> jax.Array:
    """Torques of windows (W, L, n) or of one movement (T, n)."""
    if data.x.ndim == 3:
        return jax.vmap(model.sequence)(data.x, data.Y)
    return model.sequence(data.x, data.Y)


@eqx.filter_jit
def _predict_jit(model, x, Y):
    return predict(model, Batchable(x, Y, None))


def evaluate(model: hy.Hybrid, movements: Sequence[Batchable], scale) -> np.ndarray:
    """Per-joint NMSE (n,) over whole movements (LSTM memory over the full trajectory)."""
    sse, count = 0.0, 0
    for m in movements:
        pred = np.asarray(_predict_jit(model, jnp.asarray(m.x), jnp.asarray(m.Y)))
        sse = sse + np.sum(((pred - m.tau) / scale) ** 2, axis=0)
        count += m.x.shape[0]
    return sse / count


class TrainResult(NamedTuple):
    """The best-validation ``model``, the ``history`` of (epoch, train loss, valid loss), the
    ``epochs`` run, whether it ``stopped_early`` (patience reached) and ``seconds``."""

    model: hy.Hybrid
    history: list
    epochs: int
    stopped_early: bool
    seconds: float


def _adam_init(params):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return (jnp.zeros(()), zeros, zeros)


def _adam_update(grads, state, rate, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8):
    """Adam (Kingma & Ba 2015, Algorithm 1), written out so that every operation stays in the
    parameters' dtype (the step count included: float32 training never mixes in int32 or
    float64)."""
    count, m, v = state
    count = count + 1
    m = jax.tree_util.tree_map(lambda a, g: b1 * a + (1 - b1) * g, m, grads)
    v = jax.tree_util.tree_map(lambda a, g: b2 * a + (1 - b2) * g * g, v, grads)
    c1 = 1 - jnp.power(b1, count)
    c2 = 1 - jnp.power(b2, count)
    upd = jax.tree_util.tree_map(
        lambda a, b: (
            -rate * (a / c1.astype(a.dtype)) / (jnp.sqrt(b / c2.astype(b.dtype)) + eps)
        ).astype(a.dtype),
        m,
        v,
    )
    return upd, (count, m, v)


def trainable_spec(model: hy.Hybrid, freeze: Sequence[str] = ()):
    """Filter spec: inexact arrays of the parts not named in ``freeze``; normalisers frozen."""
    spec = jax.tree_util.tree_map(eqx.is_inexact_array, model)
    for name in freeze:
        i = model.names.index(name)
        spec = eqx.tree_at(
            lambda m, i=i: m.parts[i], spec, jax.tree_util.tree_map(lambda _: False, model.parts[i])
        )
    return spec


@eqx.filter_jit
def _train_step(params, static, opt_state, idx, rate, data, scale):
    """One Adam step on the windows ``idx`` of ``data = (x, Y, tau)``.

    Module level, with the data as arguments: one compiled program per model structure and data
    shape, shared by every :func:`train` call. A closure over the data baked it into each call's
    program as a constant, kept by JAX's caches: the 3-seed quick study grew to 24 GB and was
    killed; with the data as arguments it peaks at 3.8 GB.
    """
    x_all, Y_all, t_all = data

    def loss_fn(p):
        m = eqx.combine(p, static)
        pred = jax.vmap(m.sequence)(x_all[idx], Y_all[idx])
        return jnp.mean(nmse(pred, t_all[idx], scale))

    loss, grads = eqx.filter_value_and_grad(loss_fn)(params)
    updates, opt_state = _adam_update(grads, opt_state, rate)
    return eqx.apply_updates(params, updates), opt_state, loss


def train(
    model: hy.Hybrid,
    train_data: Batchable,
    valid: Sequence[Batchable],
    scale,
    *,
    key,
    lr: float = 4e-3,
    batch_samples: int = 1000,
    max_epochs: int = 100,
    patience: int = 10,
    lr_patience: int = 5,
    freeze: Sequence[str] = (),
    log=None,
) -> TrainResult:
    """Adam on the normalised MSE over windows; ``batch_samples`` samples per step (whole windows).

    Early stopping and the learning-rate drop (x0.1) watch the validation NMSE on whole movements.
    """
    t0 = time.perf_counter()
    scale = jnp.asarray(scale)
    W, L = train_data.x.shape[:2]
    per_batch = max(1, batch_samples // L)
    spec = trainable_spec(model, freeze)
    params, static = eqx.partition(model, spec)
    opt_state = _adam_init(params)
    rate = float(lr)
    data = tuple(jnp.asarray(v) for v in train_data)

    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel()[-1])
    best = (np.inf, params)
    history, since_best, since_drop, stopped = [], 0, 0, False
    epoch = 0
    for epoch in range(1, max_epochs + 1):
        order = rng.permutation(W)
        losses = []
        for b in range(0, W - per_batch + 1, per_batch):
            params, opt_state, loss = _train_step(
                params, static, opt_state, jnp.asarray(order[b : b + per_batch]),
                jnp.asarray(rate), data, scale,
            )  # fmt: skip
            losses.append(float(loss))
        v = float(np.mean(evaluate(eqx.combine(params, static), valid, np.asarray(scale))))
        history.append((epoch, float(np.mean(losses)), v))
        if log is not None:
            log(f"  epoch {epoch}: train {np.mean(losses):.5f} valid {v:.5f}")
        if v < best[0]:
            best, since_best, since_drop = (v, params), 0, 0
        else:
            since_best += 1
            since_drop += 1
        if since_drop >= lr_patience:
            rate *= 0.1
            since_drop = 0
        if since_best >= patience:
            stopped = True
            break
    return TrainResult(
        eqx.combine(best[1], static), history, epoch, stopped, time.perf_counter() - t0
    )


def sdp_parts(
    robot: bn.Robot, train_data: Batchable, scale, *, sign: bool, eps: float = 0.0
) -> tuple[hy.RigidBody, hy.SignFriction | None, float]:
    """Two-step stage 1: the SDP baseline on the training samples, rows weighted by ``1 / scale``
    (so it minimises the same normalised MSE). Returns the fixed rigid body, sign friction (or
    None) and the solver's normalised residual (mean over samples and joints)."""
    n = robot.n
    Y = train_data.Y.reshape(-1, n, 10 * n)
    tau = train_data.tau.reshape(-1, n)
    w = 1.0 / np.asarray(scale)
    blocks = [Y * w[None, :, None]]
    if sign:
        qd = train_data.x.reshape(-1, 3 * n)[:, n : 2 * n]
        blocks.append(np.asarray(hy.sign_features(jnp.asarray(qd))) * w[None, :, None])
    A = np.concatenate(blocks, axis=2).reshape(-1, 10 * n + (n if sign else 0))
    b = (tau * w[None, :]).reshape(-1)
    sol = sdp_least_squares(A, b, n, n_friction=n if sign else 0, eps=eps)
    rb = hy.fixed_rigid_body(robot, sol.theta)
    fr = hy.SignFriction(jnp.asarray(sol.friction)) if sign else None
    return rb, fr, sol.rss / b.size
