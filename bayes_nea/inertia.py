"""Physically consistent parameterisations of one rigid body's inertia.

Every parameterisation is a small map ``x (dim,) -> theta (10,)`` with its inverse
``theta -> x``, where ``theta = [m, h_x, h_y, h_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz]`` is the
body's inertial parameter vector in its own frame (``h = m c``, ``I`` about the frame origin;
docs/conventions.md). The maps are pure JAX: they run under ``jit``, ``grad`` and ``vmap`` and keep the
input's dtype (float64 or float32).

Physical consistency (Wensing, Kim & Slotine 2017): theta comes from a non-negative mass density
iff the pseudo-inertia ``J = [[Sigma, h], [h^T, m]]`` with ``Sigma = tr(I)/2 1 - I`` is positive
definite (linear-parametrisation notes, "Pseudo Inertia"). Equivalently ``m > 0`` and the central
second moments ``L_1, L_2, L_3`` are positive, i.e. the principal moments ``D_i`` about the CoM
obey the triangle inequalities ``D_x < D_y + D_z`` and its permutations.

Parameterisations (names as in :func:`get_parameterization`):

``"theta"`` (dim 10)
    theta itself, unconstrained (linear least squares); :func:`is_physically_consistent` and
    :func:`check_physically_consistent` are its consistency checks.
``"diffnea"`` (dim 10): ``[sqrt_m, sqrt_L1, sqrt_L2, sqrt_L3, r_x, r_y, r_z, c_x, c_y, c_z]``
    DiffNEA virtual parameters (Lutter et al. 2021, appendix "Inertias"): ``m = sqrt_m^2``,
    ``L_i = sqrt_L_i^2``, ``J_p = diag(L2 + L3, L1 + L3, L1 + L2)``, principal axes
    ``R_J = exp(S(r))`` (rotation vector ``r``, our choice of unconstrained rotation; see
    :func:`bayes_nea.kinematics.so3_exp`), CoM ``c``, and the parallel-axis theorem
    ``I = R_J J_p R_J^T + m S(c)^T S(c)`` (the paper's eq. 5, written there as
    ``- m [p_m][p_m]``). Not injective (sign of the square roots, order and sign of the principal
    axes); the inverse returns the canonical representative: positive square roots, principal
    moments ascending (``L1 >= L2 >= L3``), and of the four proper frames of those axes the one with
    the smallest rotation angle (always ``<= 2 pi / 3``). Singular where two ``L_i`` are equal
    (a rotation about the repeated axis does not change theta), see the tests.
``"log-cholesky"`` (dim 10): ``phi = [alpha, d1, d2, d3, s12, s23, s13, t1, t2, t3]``
    Rucker & Wensing 2022, as in the linear-parametrisation notes ("Log-Cholesky"):
    ``J = U U^T`` with ``U = e^alpha [[e^d1, s12, s13, t1], [0, e^d2, s23, t2], [0, 0, e^d3, t3],
    [0, 0, 0, 1]]``. A diffeomorphism of R^10 onto the consistent bodies; its Jacobian
    determinant is ``32 e^(20 alpha) e^(2 d1) e^(3 d2) e^(4 d3)`` (notes, last equation).
``"diffbary"`` (dim 10): ``[a, b, c, d, e, f, g, h, i, j]``
    DiffBary (Reuss et al. 2022, appendix A, eqs. 17-19): the LMI matrix ``S_k`` (= J) is
    ``A A^T + r 1_4`` with ``A = [[a, 0, 0, 0], [e, b, 0, 0], [f, g, c, 0], [h, i, j, d]]`` and the
    bias ``r = 1e-8``. We follow eq. 19 as a matrix product; the element list of eqs. 19-21 has
    typos (e.g. ``l_y`` is ``e h + b i``, not ``c h + i b``). Not injective (signs of the
    columns of A); the inverse returns the Cholesky factor of ``J - r 1`` (positive diagonal) and
    needs ``lambda_min(J) > r``.
``"matrix-exp"`` (dim 10): ``gamma = [T00, T01, T02, T03, T11, T12, T13, T22, T23, T33]``
    ``J = expm(T)`` with T symmetric, gamma its upper triangle row by row (notes, "Pseudo Inertia":
    ``gamma = vech(log J)``). A diffeomorphism of R^10 onto the consistent bodies. Computed by a
    symmetric eigen-decomposition with an exact Daleckii-Krein derivative (finite at repeated
    eigenvalues).

Inverse maps check their input at the Python boundary: a concrete theta (not traced) of the wrong
shape or outside the map's image raises ``ValueError``; under ``jit`` no check is possible and a
non-physical theta gives NaN.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from bayes_nea import spatial as sp
from bayes_nea.kinematics import so3_exp, so3_log

Array = jax.Array

THETA_NAMES = sp.THETA_NAMES
DIFFBARY_BIAS = 1e-8  # r of Reuss et al. 2022, eq. 12

# --- pseudo-inertia and consistency ----------------------------------------------------------


def pseudo_inertia(theta: Array) -> Array:
    """Pseudo-inertia ``J = [[Sigma, h], [h^T, m]]``, ``Sigma = tr(I)/2 1 - I`` (notes; Wensing 2017).

    Args:
        theta: (..., 10) inertial parameters in the body frame.

    Returns:
        (..., 4, 4) symmetric pseudo-inertia; ``J = int [x; 1][x; 1]^T rho(x) dV``.

    Raises:
        ValueError: last axis is not 10.
    """
    theta = jnp.asarray(theta)
    _check_last(theta, 10, "theta")
    m, hx, hy, hz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz = jnp.moveaxis(theta, -1, 0)
    half = 0.5 * (Ixx + Iyy + Izz)
    rows = [
        [half - Ixx, -Ixy, -Ixz, hx],
        [-Ixy, half - Iyy, -Iyz, hy],
        [-Ixz, -Iyz, half - Izz, hz],
        [hx, hy, hz, m],
    ]
    return jnp.stack([jnp.stack(r, axis=-1) for r in rows], axis=-2)


def theta_from_pseudo_inertia(J: Array) -> Array:
    """Inverse of :func:`pseudo_inertia`: ``I = tr(Sigma) 1 - Sigma``. (..., 4, 4) -> (..., 10).

    ``J`` is symmetrised first (both triangles are used).

    Raises:
        ValueError: trailing shape is not (4, 4).
    """
    J = jnp.asarray(J)
    if J.ndim < 2 or J.shape[-2:] != (4, 4):
        raise ValueError(f"pseudo-inertia has shape {J.shape}, expected (..., 4, 4)")
    J = 0.5 * (J + jnp.swapaxes(J, -1, -2))
    Sig = J[..., :3, :3]
    tr = Sig[..., 0, 0] + Sig[..., 1, 1] + Sig[..., 2, 2]
    return jnp.stack(
        [
            J[..., 3, 3],
            J[..., 0, 3],
            J[..., 1, 3],
            J[..., 2, 3],
            tr - Sig[..., 0, 0],
            -Sig[..., 0, 1],
            tr - Sig[..., 1, 1],
            -Sig[..., 0, 2],
            -Sig[..., 1, 2],
            tr - Sig[..., 2, 2],
        ],
        axis=-1,
    )


def pseudo_inertia_min_eigenvalue(theta: Array) -> Array:
    """Smallest eigenvalue of the pseudo-inertia, (..., 10) -> (...,); > 0 iff consistent."""
    return jnp.linalg.eigvalsh(pseudo_inertia(theta))[..., 0]


def is_physically_consistent(theta: Array, tol: float = 0.0) -> Array:
    """Whether theta is fully physically consistent: ``J(theta)`` positive definite.

    Equivalent to ``m > 0`` and the triangle inequalities on the principal moments about the CoM
    (Traversaro et al. 2016; Wensing et al. 2017, Thm. 1).

    Args:
        theta: (..., 10) inertial parameters, any leading batch shape (e.g. (n, 10)).
        tol: relative margin: consistent iff ``lambda_min(J) > tol * max(lambda_max(J), 0)``.
            ``0`` tests strict positive definiteness.

    Returns:
        (...,) boolean array (False for NaN or inf entries).

    Raises:
        ValueError: last axis is not 10, or ``tol < 0``.
    """
    if tol < 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    theta = jnp.asarray(theta)
    _check_last(theta, 10, "theta")
    finite = jnp.all(jnp.isfinite(theta), axis=-1)
    safe = jnp.where(finite[..., None], theta, jnp.zeros_like(theta))
    lam = jnp.linalg.eigvalsh(pseudo_inertia(safe))
    return finite & (lam[..., 0] > tol * jnp.maximum(lam[..., -1], 0))


def check_physically_consistent(theta, tol: float = 0.0, *, what: str = "theta") -> None:
    """Raise ``ValueError`` naming the bodies whose concrete ``theta`` (..., 10) is not consistent.

    The consistency check for the raw ``"theta"`` parameterisation (e.g. a least-squares
    estimate); does nothing under tracing.
    """
    if _traced(theta):
        return
    theta_np = np.asarray(theta, dtype=np.float64)
    _check_last(theta_np, 10, what)
    ok = np.asarray(is_physically_consistent(theta_np, tol))
    if not np.all(ok):
        bad = np.argwhere(~ok.reshape(theta_np.shape[:-1]))
        lam = np.asarray(pseudo_inertia_min_eigenvalue(theta_np)).reshape(theta_np.shape[:-1])
        items = [f"{tuple(int(k) for k in b)}: lambda_min(J) = {lam[tuple(b)]:.3g}" for b in bad]
        raise ValueError(
            f"{what} is not physically consistent (pseudo-inertia not positive definite) at "
            f"index {', '.join(items[:5])}{' ...' if len(items) > 5 else ''}"
        )


# --- the maps ---------------------------------------------------------------------------------


def _upper_cholesky(J: Array) -> Array:
    """Upper-triangular ``U`` with ``J = U U^T`` (positive diagonal): reversed lower Cholesky."""
    L = jnp.linalg.cholesky(J[::-1, ::-1])
    return L[::-1, ::-1]


def log_cholesky_to_theta(phi: Array) -> Array:
    """theta (10,) of log-Cholesky parameters ``phi = [alpha, d1, d2, d3, s12, s23, s13, t1, t2, t3]``.

    ``J = U U^T``, ``U = e^alpha [[e^d1, s12, s13, t1], [0, e^d2, s23, t2], [0, 0, e^d3, t3],
    [0, 0, 0, 1]]`` (Rucker & Wensing 2022; linear-parametrisation notes, "Log-Cholesky").
    """
    alpha, d1, d2, d3, s12, s23, s13, t1, t2, t3 = phi
    z, o = jnp.zeros_like(alpha), jnp.ones_like(alpha)
    U = jnp.exp(alpha) * jnp.stack(
        [
            jnp.stack([jnp.exp(d1), s12, s13, t1]),
            jnp.stack([z, jnp.exp(d2), s23, t2]),
            jnp.stack([z, z, jnp.exp(d3), t3]),
            jnp.stack([z, z, z, o]),
        ]
    )
    return theta_from_pseudo_inertia(U @ U.T)


def log_cholesky_from_theta(theta: Array) -> Array:
    """Inverse of :func:`log_cholesky_to_theta` (10,) -> (10,); needs J(theta) positive definite."""
    U = _upper_cholesky(pseudo_inertia(theta))
    alpha = jnp.log(U[3, 3])
    Un = U / U[3, 3]
    return jnp.stack(
        [
            alpha,
            jnp.log(Un[0, 0]),
            jnp.log(Un[1, 1]),
            jnp.log(Un[2, 2]),
            Un[0, 1],
            Un[1, 2],
            Un[0, 2],
            Un[0, 3],
            Un[1, 3],
            Un[2, 3],
        ]
    )


def _diffbary_A(x: Array) -> Array:
    a, b, c, d, e, f, g, h, i, j = x
    z = jnp.zeros_like(a)
    return jnp.stack(
        [
            jnp.stack([a, z, z, z]),
            jnp.stack([e, b, z, z]),
            jnp.stack([f, g, c, z]),
            jnp.stack([h, i, j, d]),
        ]
    )


def diffbary_to_theta(x: Array, *, bias: float = DIFFBARY_BIAS) -> Array:
    """theta (10,) of DiffBary parameters ``[a, b, c, d, e, f, g, h, i, j]``: ``J = A A^T + r 1``.

    ``A = [[a, 0, 0, 0], [e, b, 0, 0], [f, g, c, 0], [h, i, j, d]]`` (Reuss et al. 2022, eqs. 18-19).
    """
    A = _diffbary_A(x)
    return theta_from_pseudo_inertia(A @ A.T + bias * jnp.eye(4, dtype=A.dtype))


def diffbary_from_theta(theta: Array, *, bias: float = DIFFBARY_BIAS) -> Array:
    """Inverse of :func:`diffbary_to_theta`: ``A = chol(J - r 1)``; needs ``lambda_min(J) > r``."""
    J = pseudo_inertia(theta)
    A = jnp.linalg.cholesky(J - bias * jnp.eye(4, dtype=J.dtype))
    return jnp.stack(
        [A[0, 0], A[1, 1], A[2, 2], A[3, 3], A[1, 0], A[2, 0], A[2, 1], A[3, 0], A[3, 1], A[3, 2]]
    )


_TRIU = np.triu_indices(4)  # row-major upper triangle: (0,0) (0,1) (0,2) (0,3) (1,1) ... (3,3)


def _sym_from_vech(gamma: Array) -> Array:
    T = jnp.zeros((4, 4), gamma.dtype).at[_TRIU].set(gamma)
    return T + jnp.triu(T, 1).T


def _divided_difference(f, df, lam_i, lam_j):
    """``(f(a) - f(b)) / (a - b)``, or ``f'`` where the eigenvalues (nearly) coincide."""
    diff = lam_i - lam_j
    close = jnp.abs(diff) <= 1e3 * jnp.finfo(diff.dtype).eps * (jnp.abs(lam_i) + jnp.abs(lam_j))
    safe = jnp.where(close, jnp.ones_like(diff), diff)
    return jnp.where(close, df(0.5 * (lam_i + lam_j)), (f(lam_i) - f(lam_j)) / safe)


def _spectral(f, df):
    """A symmetric matrix function ``X -> V f(Lambda) V^T`` with its Daleckii-Krein JVP."""

    @jax.custom_jvp
    def fn(X):
        lam, V = jnp.linalg.eigh(X)
        return (V * f(lam)[None, :]) @ V.T

    @fn.defjvp
    def fn_jvp(primals, tangents):
        (X,), (dX,) = primals, tangents
        lam, V = jnp.linalg.eigh(X)
        F = _divided_difference(f, df, lam[:, None], lam[None, :])
        dY = V @ (F * (V.T @ dX @ V)) @ V.T
        return (V * f(lam)[None, :]) @ V.T, 0.5 * (dY + dY.T)

    return fn


_expm_sym = _spectral(jnp.exp, jnp.exp)
_logm_spd = _spectral(jnp.log, lambda x: 1 / x)


def matrix_exp_to_theta(gamma: Array) -> Array:
    """theta (10,) of ``gamma = vech(T)`` (row-major upper triangle): ``J = expm(T)`` (notes)."""
    return theta_from_pseudo_inertia(_expm_sym(_sym_from_vech(gamma)))


def matrix_exp_from_theta(theta: Array) -> Array:
    """Inverse of :func:`matrix_exp_to_theta`: ``gamma = vech(logm(J))``; needs J positive definite."""
    return _logm_spd(pseudo_inertia(theta))[_TRIU]


def diffnea_to_theta(x: Array) -> Array:
    """theta (10,) of DiffNEA virtual parameters ``[sqrt_m, sqrt_L1..3, r (3,), c (3,)]``.

    ``m = sqrt_m^2``, ``J_p = diag(L2 + L3, L1 + L3, L1 + L2)`` with ``L_i = sqrt_L_i^2``,
    ``I = R_J J_p R_J^T + m S(c)^T S(c)``, ``R_J = exp(S(r))`` (DiffNEA appendix, "Inertias", eq. 5).
    """
    m = x[0] ** 2
    L = x[1:4] ** 2
    Jp = jnp.stack([L[1] + L[2], L[0] + L[2], L[0] + L[1]])
    R = so3_exp(x[4:7])
    return sp.theta_from_com(m, x[7:10], (R * Jp[None, :]) @ R.T)


# The four proper sign patterns of a principal frame; the inverse picks the smallest rotation.
_FLIPS = np.array([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]], dtype=float)


def diffnea_from_theta(theta: Array) -> Array:
    """Canonical inverse of :func:`diffnea_to_theta` (10,) -> (10,); needs a consistent theta.

    ``c = h / m``, ``I_c = I - m S(c)^T S(c) = R_J diag(D) R_J^T`` (eigen-decomposition, D
    ascending), ``L1 = (D2 + D3 - D1) / 2`` and permutations. Of the four right-handed frames of
    the eigenvectors, the one closest to the identity is used, so the rotation angle is at most
    ``2 pi / 3``. Not differentiable where two principal moments coincide.
    """
    m = theta[0]
    c = theta[1:4] / m
    Sc = sp.skew(c)
    Ic = sp.rotational_inertia(theta) - m * Sc.T @ Sc
    D, V = jnp.linalg.eigh(Ic)
    V = V * jnp.where(jnp.linalg.det(V) < 0, -1.0, 1.0).astype(V.dtype)  # proper rotation
    flips = jnp.asarray(_FLIPS, dtype=V.dtype)
    traces = flips @ jnp.diagonal(V)
    R = V * flips[jnp.argmax(traces)][None, :]
    L = 0.5 * (jnp.sum(D) - 2 * D)
    return jnp.concatenate([jnp.sqrt(m)[None], jnp.sqrt(L), so3_log(R), c])


# --- the registry -----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Parameterization:
    """A per-body inertia parameterisation ``x (dim,) <-> theta (10,)`` (final; hashable, static).

    Fields:
        name: registry name.
        dim: length of ``x``.
        names: (dim,) names of the entries of ``x``.
        always_physical: whether every ``x`` maps to a physically consistent theta.
        description: one line with the map and its source.
        forward: the jit-able map ``x -> theta``.
        inverse: the jit-able map ``theta -> x``.
        margin: the inverse needs ``lambda_min(J(theta)) > margin`` (0: positive definite;
            ``None``: no requirement).
    """

    name: str
    dim: int
    names: tuple[str, ...]
    always_physical: bool
    description: str
    forward: Callable[[Array], Array] = dataclasses.field(repr=False)
    inverse: Callable[[Array], Array] = dataclasses.field(repr=False)
    margin: float | None = 0.0

    @functools.cached_property
    def _batched_forward(self) -> Callable[[Array], Array]:
        return jax.jit(jax.vmap(self.forward))

    @functools.cached_property
    def _batched_inverse(self) -> Callable[[Array], Array]:
        return jax.jit(jax.vmap(self.inverse))

    def to_theta(self, x: Array) -> Array:
        """theta (10,) of one body's parameters ``x`` (dim,).

        Raises:
            ValueError: ``x`` is not of shape (dim,).
        """
        x = jnp.asarray(x)
        _check_exact(x, (self.dim,), f"{self.name} parameters")
        return self.forward(_floating(x))

    def from_theta(self, theta: Array) -> Array:
        """Parameters ``x`` (dim,) of one body's theta (10,) (the canonical representative).

        Raises:
            ValueError: theta is not of shape (10,) or, when concrete, outside the map's image
                (not physically consistent, or below DiffBary's bias).
        """
        theta = jnp.asarray(theta)
        _check_exact(theta, (10,), "theta")
        self._check_domain(theta[None], "theta")
        return self.inverse(_floating(theta))

    def _check_domain(self, theta: Array, what: str) -> None:
        if self.margin is None or _traced(theta):
            return
        t = np.asarray(theta, dtype=np.float64)
        lam = np.full(t.shape[:-1], np.nan)
        finite = np.all(np.isfinite(t), axis=-1)
        if np.any(finite):
            lam[finite] = np.asarray(pseudo_inertia_min_eigenvalue(t[finite]))
        bad = ~(lam > self.margin)
        if np.any(bad):
            where = np.argwhere(bad)
            first = tuple(int(k) for k in where[0])
            index = (
                ""
                if t.ndim == 2 and t.shape[0] == 1
                else f" (body {first[0] if len(first) == 1 else first})"
            )
            need = (
                "> 0 (positive definite)" if self.margin == 0 else f"> {self.margin:g} (its bias r)"
            )
            raise ValueError(
                f"{what}{index} = {np.array2string(t[first], precision=4, max_line_width=10**6)} is outside the image of "
                f"the {self.name!r} parameterisation: the smallest eigenvalue of its pseudo-inertia "
                f"is {lam[first]:.3g}, which must be {need}; {int(bad.sum())} of {bad.size} "
                "bodies fail. Check with is_physically_consistent, or use the 'theta' "
                "parameterisation for unconstrained values"
            )


def _theta_identity(x: Array) -> Array:
    return x


_PARAMETERIZATIONS = {
    "theta": Parameterization(
        "theta",
        10,
        THETA_NAMES,
        False,
        "raw inertial parameters [m, h, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz] (unconstrained)",
        _theta_identity,
        _theta_identity,
        None,
    ),
    "diffnea": Parameterization(
        "diffnea",
        10,
        ("sqrt_m", "sqrt_L1", "sqrt_L2", "sqrt_L3", "r_x", "r_y", "r_z", "c_x", "c_y", "c_z"),
        True,
        "DiffNEA virtual parameters: sqrt mass, sqrt central second moments, principal axes as a "
        "rotation vector, CoM (Lutter et al. 2021, appendix eq. 5)",
        diffnea_to_theta,
        diffnea_from_theta,
    ),
    "log-cholesky": Parameterization(
        "log-cholesky",
        10,
        ("alpha", "d1", "d2", "d3", "s12", "s23", "s13", "t1", "t2", "t3"),
        True,
        "log-Cholesky factor of the pseudo-inertia (Rucker & Wensing 2022)",
        log_cholesky_to_theta,
        log_cholesky_from_theta,
    ),
    "diffbary": Parameterization(
        "diffbary",
        10,
        tuple("abcdefghij"),
        True,
        f"Cholesky factor of the LMI matrix plus bias r = {DIFFBARY_BIAS:g} (Reuss et al. 2022, eq. 12)",
        diffbary_to_theta,
        diffbary_from_theta,
        DIFFBARY_BIAS,
    ),
    "matrix-exp": Parameterization(
        "matrix-exp",
        10,
        tuple(f"T{i}{j}" for i, j in zip(*_TRIU, strict=True)),
        True,
        "matrix logarithm of the pseudo-inertia, upper triangle (linear-parametrisation notes)",
        matrix_exp_to_theta,
        matrix_exp_from_theta,
    ),
}

PARAMETERIZATION_NAMES = tuple(_PARAMETERIZATIONS)


def get_parameterization(name: str | Parameterization) -> Parameterization:
    """The per-body inertia parameterisation called ``name`` (see the module docstring).

    Args:
        name: one of ``"theta"``, ``"diffnea"``, ``"log-cholesky"``, ``"diffbary"``,
            ``"matrix-exp"``; a :class:`Parameterization` is returned as is.

    Raises:
        ValueError: unknown name (the message lists the valid ones).
    """
    if isinstance(name, Parameterization):
        return name
    if name not in _PARAMETERIZATIONS:
        raise ValueError(
            f"unknown inertia parameterisation {name!r}; valid names are {list(PARAMETERIZATION_NAMES)}"
        )
    return _PARAMETERIZATIONS[name]


def diffbary_parameterization(bias: float = DIFFBARY_BIAS) -> Parameterization:
    """DiffBary with a bias ``r`` other than the paper's ``1e-8`` (``r >= 0``)."""
    if not bias >= 0:
        raise ValueError(f"DiffBary bias must be >= 0, got {bias}")
    base = _PARAMETERIZATIONS["diffbary"]

    def forward(x):
        return diffbary_to_theta(x, bias=bias)

    def inverse(theta):
        return diffbary_from_theta(theta, bias=bias)

    return dataclasses.replace(
        base,
        description=f"Cholesky factor of the LMI matrix plus bias r = {bias:g} (Reuss et al. 2022)",
        forward=forward,
        inverse=inverse,
        margin=float(bias),
    )


# --- whole robot ------------------------------------------------------------------------------


def bodies_to_theta(parameterization: str | Parameterization, x: Array) -> Array:
    """Per-body map over a robot: x (..., n, dim) -> theta (..., n, 10) (vmapped).

    Raises:
        ValueError: unknown parameterisation or last axis not ``dim``.
    """
    p = get_parameterization(parameterization)
    x = jnp.asarray(x)
    _check_last(x, p.dim, f"{p.name} parameters", min_ndim=1)
    flat = _floating(x).reshape(-1, p.dim)
    return p._batched_forward(flat).reshape(*x.shape[:-1], 10)


def bodies_from_theta(parameterization: str | Parameterization, theta: Array) -> Array:
    """Inverse per-body map over a robot: theta (..., n, 10) -> x (..., n, dim) (vmapped).

    Raises:
        ValueError: unknown parameterisation, last axis not 10, or (concrete input) a body outside
            the map's image; the message names the first such body.
    """
    p = get_parameterization(parameterization)
    theta = jnp.asarray(theta)
    _check_last(theta, 10, "theta", min_ndim=1)
    p._check_domain(theta, "theta")
    flat = _floating(theta).reshape(-1, 10)
    return p._batched_inverse(flat).reshape(*theta.shape[:-1], p.dim)


# --- helpers ----------------------------------------------------------------------------------


def _traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _floating(x: Array) -> Array:
    return x if jnp.issubdtype(x.dtype, jnp.floating) else x.astype(jnp.result_type(float))


def _check_exact(x, shape: tuple[int, ...], what: str) -> None:
    if tuple(np.shape(x)) != shape:
        raise ValueError(
            f"{what} has shape {tuple(np.shape(x))}, expected {shape} for one body; "
            "use bodies_to_theta / bodies_from_theta (or jax.vmap) for many"
        )


def _check_last(x, size: int, what: str, min_ndim: int = 1) -> None:
    shape = tuple(np.shape(x))
    if len(shape) < min_ndim or shape[-1] != size:
        raise ValueError(f"{what} has shape {shape}, expected (..., {size})")
