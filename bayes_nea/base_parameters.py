"""Base (identifiable) inertial parameters by Gautier's numerical method.

The joint-torque regressor ``Y(q, qd, qdd)`` (n, 10 n) has linearly dependent columns: some
parameters never affect the torques (e.g. the mass of a body on a vertical first axis) and
others only in fixed combinations. Stacking ``Y`` over many random states into ``W`` (N n, 10 n)
and taking a QR decomposition with column pivoting, ``W P = Q R``, reveals the rank ``b`` and
splits theta into ``b`` independent columns (``W_1``) and the rest (``W_2 = W_1 K``)
(Gautier 1991, "Numerical calculation of the base inertial parameters of robots"). Then

    ``tau = Y theta = Y_1 (theta_1 + K theta_2) = Y_base beta``, ``beta = theta_1 + K theta_2``,

so ``beta = B theta`` with ``B = [1, K]`` (columns reordered to theta's order) and a
representative theta of a given beta is ``E beta`` (zeros in the dependent entries); ``Y_base =
Y E`` is ``Y`` restricted to the independent columns.

numpy's QR has no pivoting and scipy is not a dependency, so :func:`pivoted_qr` implements
Householder QR with column pivoting (Businger & Golub 1965) in numpy: at each step the remaining
column of largest norm is moved to the front, so ``|R_kk|`` is non-increasing and the rank is the
number of ``|R_kk| > rtol |R_00|``. ``K`` is then the least-squares solution of ``W_1 K = W_2``.
Everything is deterministic given the key: columns whose norms tie to ``TIE_RTOL`` go to the
lowest theta index, whatever the rounding of the CPU.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from bayes_nea.regressor import joint_torque_regressor
from bayes_nea.robot import PRISMATIC, Robot, RobotParams
from bayes_nea.spatial import THETA_NAMES

Array = jax.Array

DEFAULT_RTOL = 1e-9
# column norms equal to this relative tolerance are a tie (exactly equal norms in exact
# arithmetic differ in their last bits between CPUs and XLA builds)
TIE_RTOL = 1e-8


def pivoted_qr(A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Householder QR with column pivoting: ``A[:, perm] = Q R`` (numpy, float64).

    Args:
        A: (m, p) matrix.

    Returns:
        ``(R, perm)``: R (min(m, p), p) upper triangular with ``|R_00| >= |R_11| >= ...``, and
        the column permutation (p,) as indices into A's columns. Q is not formed.
    """
    A = np.array(A, dtype=np.float64, copy=True)
    m, p = A.shape
    perm = np.arange(p)
    k_max = min(m, p)
    for k in range(k_max):
        norms = np.linalg.norm(A[k:, k:], axis=0)
        # columns whose remaining norms tie (to TIE_RTOL) are equivalent pivots: take the one
        # first in theta order, so that rounding (which differs between CPUs) cannot choose
        tied = np.flatnonzero(norms >= (1.0 - TIE_RTOL) * norms.max())
        j = k + int(tied[np.argmin(perm[k:][tied])])
        if j != k:
            A[:, [k, j]] = A[:, [j, k]]
            perm[[k, j]] = perm[[j, k]]
        x = A[k:, k]
        alpha = np.linalg.norm(x)
        if alpha == 0.0:
            A[k:, k:] = 0.0
            break
        v = x.copy()
        v[0] += np.copysign(alpha, x[0])
        v /= np.linalg.norm(v)
        A[k:, k:] -= 2.0 * np.outer(v, v @ A[k:, k:])
    return np.triu(A[:k_max]), perm


def numerical_rank(R: np.ndarray, rtol: float = DEFAULT_RTOL) -> int:
    """Rank from the diagonal of a pivoted R: the number of ``|R_kk| > rtol |R_00|``."""
    d = np.abs(np.diagonal(R))
    if d.size == 0 or d[0] == 0.0:
        return 0
    return int(np.sum(d > rtol * d[0]))


def sample_states(robot: Robot, key, n_samples: int) -> tuple[Array, Array, Array]:
    """Random states for identifiability: q, qd, qdd each (n_samples, n), float64 if enabled.

    Revolute ``q ~ U(-pi, pi)``, prismatic ``q ~ U(lower, upper)`` (``U(-1, 1)`` m if unbounded),
    ``qd ~ N(0, 2^2)``, ``qdd ~ N(0, 3^2)``.

    Args:
        robot: the robot.
        key: a ``jax.random`` key or an integer seed.
        n_samples: number of states.
    """
    key = jax.random.key(key) if isinstance(key, int | np.integer) else key
    dtype = jnp.result_type(float)
    k_q, k_qd, k_qdd = jax.random.split(key, 3)
    n = robot.n
    lo = np.array([-np.pi] * n)
    hi = np.array([np.pi] * n)
    for i, kind in enumerate(robot.joint_types):
        if kind == PRISMATIC:
            finite = np.isfinite(robot.lower[i]) and np.isfinite(robot.upper[i])
            lo[i], hi[i] = (robot.lower[i], robot.upper[i]) if finite else (-1.0, 1.0)
    u = jax.random.uniform(k_q, (n_samples, n), dtype)
    q = jnp.asarray(lo, dtype)[None, :] + u * jnp.asarray(hi - lo, dtype)[None, :]
    qd = 2.0 * jax.random.normal(k_qd, (n_samples, n), dtype)
    qdd = 3.0 * jax.random.normal(k_qdd, (n_samples, n), dtype)
    return q, qd, qdd


@dataclasses.dataclass(frozen=True, eq=False)
class BaseParameters:
    """The base parameters of a robot (with given kinematics); see the module docstring.

    Fields:
        n_base: number of base parameters ``b`` (the rank of the stacked regressor).
        independent: (b,) indices into theta (10 n,) of the independent columns, ascending.
        dependent: (10 n - b,) the remaining indices, ascending.
        to_base: (b, 10 n) ``B`` with ``beta = B theta``.
        to_theta: (10 n, b) ``E`` with ``Y E B = Y`` (a representative theta is ``E beta``).
        names: (b,) readable expressions of each beta in theta's entries, e.g.
            ``"I_zz[link1] + 0.0961 m[link2]"``.
        singular_ratio: ``|R_bb| / |R_00|`` of the first rejected pivot (0 if full rank); with
            ``|R_(b-1)(b-1)| / |R_00|`` (``smallest_ratio``) it shows the gap the rank relied on.
        smallest_ratio: ``|R_(b-1)(b-1)| / |R_00|`` of the last accepted pivot.
    """

    n_base: int
    independent: tuple[int, ...]
    dependent: tuple[int, ...]
    to_base: np.ndarray
    to_theta: np.ndarray
    names: tuple[str, ...]
    singular_ratio: float
    smallest_ratio: float

    def beta(self, theta: Array) -> Array:
        """Base parameters (b,) of theta, given as (n, 10) or (10 n,)."""
        theta = jnp.asarray(theta)
        flat = theta.reshape(-1)
        if flat.shape != (self.to_base.shape[1],):
            raise ValueError(
                f"theta has shape {theta.shape}, expected ({self.to_base.shape[1] // 10}, 10) "
                f"or ({self.to_base.shape[1]},)"
            )
        return jnp.asarray(self.to_base, flat.dtype) @ flat

    def theta(self, beta: Array) -> Array:
        """A representative theta (10 n,) with these base parameters (dependent entries 0)."""
        beta = jnp.asarray(beta)
        if beta.shape != (self.n_base,):
            raise ValueError(f"beta has shape {beta.shape}, expected ({self.n_base},)")
        return jnp.asarray(self.to_theta, beta.dtype) @ beta

    def regressor(self, Y: Array) -> Array:
        """``Y_base`` (..., n, b) from a full regressor Y (..., n, 10 n): its independent columns."""
        Y = jnp.asarray(Y)
        if Y.ndim < 2 or Y.shape[-1] != self.to_base.shape[1]:
            raise ValueError(
                f"regressor has shape {Y.shape}, expected (..., n, {self.to_base.shape[1]})"
            )
        return Y[..., np.asarray(self.independent)]


def base_parameters(
    robot: Robot,
    key=0,
    *,
    n_samples: int = 64,
    rtol: float = DEFAULT_RTOL,
    params: RobotParams | None = None,
    gravity: Array | None = None,
) -> BaseParameters:
    """Base parameters of ``robot`` by QR with column pivoting of the stacked regressor (Gautier).

    Args:
        robot: the robot; its kinematics (``params.rpy``, ``params.xyz``) fix the structure.
        key: ``jax.random`` key or integer seed for the states (:func:`sample_states`).
        n_samples: number of random states stacked (at least ``10``; more rows make the rank
            decision safer).
        rtol: relative threshold on ``|R_kk| / |R_00|`` for the rank.
        params: kinematic parameters to use (default: nominal).
        gravity: (3,) gravity in the base frame (default: the robot's). With zero gravity fewer
            parameters are identifiable.

    Returns:
        A :class:`BaseParameters`.

    Raises:
        ValueError: ``n_samples`` too small or ``rtol`` not in (0, 1).
    """
    if n_samples < 10:
        raise ValueError(f"n_samples must be >= 10 (rows >= columns), got {n_samples}")
    if not 0 < rtol < 1:
        raise ValueError(f"rtol must be in (0, 1), got {rtol}")
    q, qd, qdd = sample_states(robot, key, n_samples)
    if params is None:
        params = robot.nominal.astype(q.dtype)

    def regressor(q, qd, qdd):
        return joint_torque_regressor(robot, q, qd, qdd, params=params, gravity=gravity)

    W = np.asarray(jax.jit(jax.vmap(regressor))(q, qd, qdd), dtype=np.float64)
    W = W.reshape(-1, W.shape[-1])
    return base_parameters_from_matrix(W, rtol=rtol, labels=_labels(robot))


def base_parameters_from_matrix(
    W: np.ndarray, *, rtol: float = DEFAULT_RTOL, labels: tuple[str, ...] | None = None
) -> BaseParameters:
    """Base parameters of an already stacked regressor ``W`` (rows, p); see :func:`base_parameters`.

    Args:
        W: (rows, p) stacked regressor, p = 10 n.
        rtol: relative rank threshold.
        labels: (p,) names of theta's entries for :attr:`BaseParameters.names`.
    """
    W = np.asarray(W, dtype=np.float64)
    if W.ndim != 2:
        raise ValueError(f"W has shape {W.shape}, expected (rows, p)")
    p = W.shape[1]
    if labels is None:
        labels = tuple(f"theta[{k}]" for k in range(p))
    R, perm = pivoted_qr(W)
    b = numerical_rank(R, rtol)
    d = np.abs(np.diagonal(R))
    independent = np.sort(perm[:b])
    dependent = np.sort(perm[b:])
    W1, W2 = W[:, independent], W[:, dependent]
    K = np.linalg.lstsq(W1, W2, rcond=None)[0] if dependent.size else np.zeros((b, 0))
    K[np.abs(K) < 1e-12 * max(1.0, np.abs(K).max(initial=0.0))] = 0.0
    B = np.zeros((b, p))
    B[:, independent] = np.eye(b)
    B[:, dependent] = K
    E = np.zeros((p, b))
    E[independent, :] = np.eye(b)
    names = tuple(_expression(B[k], labels) for k in range(b))
    return BaseParameters(
        n_base=b,
        independent=tuple(int(i) for i in independent),
        dependent=tuple(int(i) for i in dependent),
        to_base=B,
        to_theta=E,
        names=names,
        singular_ratio=float(d[b] / d[0]) if b < d.size and d[0] > 0 else 0.0,
        smallest_ratio=float(d[b - 1] / d[0]) if b > 0 else 0.0,
    )


def _labels(robot: Robot) -> tuple[str, ...]:
    return tuple(f"{name}[{body}]" for body in robot.body_names for name in THETA_NAMES)


def _expression(row: np.ndarray, labels, digits: int = 4) -> str:
    terms = []
    for k in np.flatnonzero(row):
        c = row[k]
        if np.isclose(c, 1.0, rtol=1e-12, atol=0):
            terms.append(f"+ {labels[k]}")
        elif np.isclose(c, -1.0, rtol=1e-12, atol=0):
            terms.append(f"- {labels[k]}")
        else:
            terms.append(f"{'-' if c < 0 else '+'} {abs(c):.{digits}g} {labels[k]}")
    text = " ".join(terms)
    return text[2:] if text.startswith("+ ") else text
