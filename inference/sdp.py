"""Least squares on the joint-torque regressor with physical-consistency LMIs, solved as an SDP.

The classical baseline of Reuss et al. (2022, Section IV-A; Sousa & Cortesao 2014/2019, Wensing
et al. 2017): ``min_theta ||A theta - b||^2`` subject to, for every body k, the pseudo-inertia
``J_k(theta_k) = [[tr(I_k)/2 1 - I_k, h_k], [h_k^T, m_k]] >= eps 1`` (the paper's eq. 10, an LMI
affine in theta), and non-negative friction coefficients. ``A`` stacks ``[Y | F]``: the regressor
(N n, 10 n) and optional friction features (N n, f). The data are first reduced by a QR
factorisation (``||A theta - b||^2 = ||R theta - Q^T b||^2 + const``) so the cone program has the
size of the parameter vector, not of the data.

Needs ``cvxpy`` (the ``[sdp]`` extra) with the open interior-point solver Clarabel (default) or SCS;
imported lazily so the rest of the package runs without it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class SDPResult(NamedTuple):
    """``theta`` (n, 10) inertial parameters, ``friction`` (f,), the solver's ``status`` and the
    residual sum of squares ``rss`` at the solution."""

    theta: np.ndarray
    friction: np.ndarray
    status: str
    rss: float


def _cvxpy():
    """Lazy import of cvxpy (heavy, optional: the ``[sdp]`` extra)."""
    try:
        import cvxpy as cp
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("the SDP baseline needs cvxpy: pip install 'bayes-nea[sdp]'") from err
    return cp


def reduce_least_squares(A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """``(R, c, r0)`` with ``||A x - b||^2 = ||R x - c||^2 + r0`` for all x (thin QR of [A b])."""
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if A.ndim != 2 or A.shape[0] != b.shape[0]:
        raise ValueError(f"A must be (N, p) and b (N,), got {A.shape} and {b.shape}")
    Rfull = np.linalg.qr(np.column_stack([A, b]), mode="r")
    p = A.shape[1]
    return Rfull[:p, :p], Rfull[:p, p], float(Rfull[p, p] ** 2) if Rfull.shape[0] > p else 0.0


def pseudo_inertia_expression(cp, th):
    """The pseudo-inertia (4, 4) of one body's theta (a cvxpy vector of 10), affine in theta."""
    m, hx, hy, hz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz = (th[i] for i in range(10))
    tr = (Ixx + Iyy + Izz) / 2
    return cp.bmat(
        [
            [tr - Ixx, -Ixy, -Ixz, hx],
            [-Ixy, tr - Iyy, -Iyz, hy],
            [-Ixz, -Iyz, tr - Izz, hz],
            [hx, hy, hz, m],
        ]
    )


def sdp_least_squares(
    A: np.ndarray,
    b: np.ndarray,
    n_bodies: int,
    *,
    n_friction: int = 0,
    eps: float = 0.0,
    solver: str = "CLARABEL",
    consistent: bool = True,
) -> SDPResult:
    """Solve ``min ||A [theta; phi] - b||^2`` s.t. ``J_k >= eps 1`` and ``phi >= 0``.

    Args:
        A: (N, 10 n_bodies + n_friction) stacked regressor rows. b: (N,) torques.
        eps: margin of the LMIs (0: positive semi-definite).
        consistent: False drops the LMIs (unconstrained least squares through the same solver).

    Raises:
        ValueError: shapes disagree. RuntimeError: the solver did not return an optimal solution.
    """
    cp = _cvxpy()
    p = 10 * n_bodies + n_friction
    if np.shape(A)[1] != p:
        raise ValueError(f"A has {np.shape(A)[1]} columns, expected 10 * {n_bodies} + {n_friction}")
    R, c, r0 = reduce_least_squares(A, b)
    scale = max(float(np.linalg.norm(c)), 1e-12)
    x = cp.Variable(p)
    constraints = []
    if consistent:
        for k in range(n_bodies):
            J = pseudo_inertia_expression(cp, x[10 * k : 10 * k + 10])
            constraints.append((J + J.T) / 2 >> eps * np.eye(4))
    if n_friction and consistent:
        constraints.append(x[10 * n_bodies :] >= 0)
    problem = cp.Problem(cp.Minimize(cp.sum_squares(R @ x - c) / scale**2), constraints)
    problem.solve(solver=solver)
    if problem.status not in ("optimal", "optimal_inaccurate") or x.value is None:
        raise RuntimeError(f"SDP solver {solver} returned status {problem.status!r}")
    sol = np.asarray(x.value, dtype=np.float64)
    rss = float(np.sum((R @ sol - c) ** 2) + r0)
    return SDPResult(
        sol[: 10 * n_bodies].reshape(n_bodies, 10), sol[10 * n_bodies :], problem.status, rss
    )
