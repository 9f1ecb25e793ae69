"""Is a state inside the training data? Nearest-neighbour distance in the input space of the
networks (issue 11).

A network's prediction, and the spread of an ensemble of networks, say little where the states
are unlike any training state: there the network extrapolates, and the members may agree on a
wrong answer. This module measures that from the data alone, for any fit.

Input of a state: ``[sin q_r, cos q_r, q_p, qd, tau]`` (revolute joints by sine and cosine, as the
networks see them, ``models._sites.state_features``; prismatic positions, velocities and efforts
as recorded), each column divided by its standard deviation over the training states. The
distance of a state to the training data is the Euclidean distance to its nearest training
state. The radius of the support is the ``quantile`` (default 0.95) of the same distance for
the training states themselves, each measured against the *other* training episodes (consecutive
samples of one episode are near each other by construction, so a state's own episode does not
count): a state farther than that is farther from the training data than 95 % of a training
episode's states are from the other training episodes.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from scipy.spatial import cKDTree

DEFAULT_QUANTILE = 0.95
"""Quantile of the training states' leave-one-episode-out distances that sets the radius."""


def state_inputs(joint_types, q, qd, tau) -> np.ndarray:
    """(N, F) inputs ``[sin q_r, cos q_r, q_p, qd, tau]`` of N states; ``q, qd, tau`` (N, n),
    ``joint_types`` (n,) of ``"revolute"`` / ``"prismatic"``."""
    q, qd, tau = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (q, qd, tau))
    revolute = np.array([t == "revolute" for t in joint_types])
    if revolute.shape != (q.shape[1],):
        raise ValueError(f"{len(revolute)} joint types for states with {q.shape[1]} joints")
    parts = [np.sin(q[:, revolute]), np.cos(q[:, revolute]), q[:, ~revolute], qd, tau]
    return np.concatenate(parts, axis=1)


@dataclasses.dataclass(frozen=True)
class TrainingSupport:
    """The training states of a fit in standardised inputs, and the radius around them.

    Fields:
        joint_types: (n,) joint types, as :func:`state_inputs` reads them.
        scale: (F,) standard deviation of each input column over the training states (``inf``
            for a constant column, which then counts for nothing).
        radius: distance beyond which a state is outside the support.
        quantile: the quantile of the training states' leave-one-episode-out distances that
            ``radius`` is.
        tree: k-d tree of the (M, F) standardised training inputs.
    """

    joint_types: tuple[str, ...]
    scale: np.ndarray
    radius: float
    quantile: float
    tree: cKDTree

    def distance(self, q, qd, tau) -> np.ndarray:
        """(N,) distance of each state ``(q, qd, tau)`` (N, n) to its nearest training state."""
        x = state_inputs(self.joint_types, q, qd, tau) / self.scale
        return self.tree.query(x, k=1)[0]

    def inside(self, q, qd, tau) -> np.ndarray:
        """(N,) bool: the state is within :attr:`radius` of a training state."""
        return self.distance(q, qd, tau) <= self.radius

    def exit_time(self, q, qd, tau, dt: float) -> np.ndarray:
        """(D,) time (s) at which each of D rollouts first leaves the support; ``inf`` for a
        rollout that stays inside over its T steps.

        Args:
            q, qd: (D, T + 1, n) rollout states (:class:`bayes_nea.Trajectory`'s ``q``, ``qd``).
            tau: (T, n) or (D, T, n) applied efforts; state ``k`` is read with ``tau[k]`` and the
                last state, which no effort follows, is not read.
            dt: step (s).
        A non-finite state counts as outside.
        """
        q, qd = np.asarray(q, dtype=float), np.asarray(qd, dtype=float)
        D, T = q.shape[0], q.shape[1] - 1
        tau = np.broadcast_to(np.asarray(tau, dtype=float), (D, T, q.shape[2]))
        flat = [x[:, :T].reshape(D * T, -1) for x in (q, qd)] + [tau.reshape(D * T, -1)]
        finite = np.all(np.isfinite(np.concatenate(flat, axis=1)), axis=1)
        out = ~finite
        out[finite] = ~self.inside(*(x[finite] for x in flat))
        out = out.reshape(D, T)
        first = np.argmax(out, axis=1)
        return np.where(out.any(axis=1), first * float(dt), np.inf)


BLOCKS_WITHOUT_EPISODES = 8
"""Contiguous blocks that states without an episode structure are cut into for the
leave-one-block-out radius: a single episode, or a stored fit of bare arrays. Blocks of one
episode are nearer each other than episodes are, so the radius is then at most the episodes'
one: stricter."""


def support_of_blocks(
    joint_types, blocks, *, quantile: float = DEFAULT_QUANTILE
) -> TrainingSupport:
    """The :class:`TrainingSupport` of training states given as ``blocks``: a list of ``(q, qd,
    tau)``, each (M_b, n), one per episode. A single block (one episode, or states whose
    episodes are not known) is cut into :data:`BLOCKS_WITHOUT_EPISODES` contiguous ones, so that
    leave-one-block-out distances exist.

    The radius is the ``quantile`` of the distances of every training state to the nearest state
    of the other blocks (see the module docstring).

    Raises:
        ValueError: ``quantile`` outside (0, 1], or fewer than 2 states.
    """
    if not 0.0 < quantile <= 1.0:
        raise ValueError(f"quantile must be in (0, 1], got {quantile}")
    x = [state_inputs(joint_types, *b) for b in blocks]
    if len(x) == 1:
        x = [b for b in np.array_split(x[0], BLOCKS_WITHOUT_EPISODES) if len(b)]
    if len(x) < 2:
        raise ValueError("the training data need at least 2 states to define a support")
    allx = np.concatenate(x)
    std = allx.std(axis=0)
    scale = np.where(std > 1e-9 * np.maximum(1.0, np.abs(allx.mean(axis=0))), std, np.inf)
    z = [b / scale for b in x]
    loo = []
    for i, zi in enumerate(z):
        others = np.concatenate([zj for j, zj in enumerate(z) if j != i])
        loo.append(cKDTree(others).query(zi, k=1)[0])
    radius = float(np.quantile(np.concatenate(loo), quantile))
    return TrainingSupport(
        tuple(joint_types), scale, radius, float(quantile), cKDTree(np.concatenate(z))
    )


def training_support(train, *, quantile: float = DEFAULT_QUANTILE) -> TrainingSupport:
    """The :class:`TrainingSupport` of the training dataset ``train`` (a :class:`data.Dataset`,
    whose episodes are the blocks of :func:`support_of_blocks`)."""
    blocks = [(ep.q, ep.qd, ep.tau) for ep in train.episodes]
    return support_of_blocks(train.robot().joint_types, blocks, quantile=quantile)


def fit_support(result, *, quantile: float = DEFAULT_QUANTILE) -> TrainingSupport:
    """The :class:`TrainingSupport` of the states a stored fit (:class:`inference.FitResult`) was
    fitted to: that of the fitted dataset's episodes, as the fit recorded them
    (``attrs["dataset"]["episode_lengths"]``, rows concatenated in episode order). A fit of
    bare arrays records none; its states count as one episode (see
    :data:`BLOCKS_WITHOUT_EPISODES`)."""
    data = result.data()
    rows = len(data["q"])
    lengths = (result.attrs.get("dataset") or {}).get("episode_lengths")
    if lengths is not None and sum(lengths) == rows and min(lengths, default=0) > 0:
        cuts = np.cumsum(lengths)[:-1]
    else:
        cuts = 1
    blocks = zip(*(np.array_split(data[k], cuts) for k in ("q", "qd", "tau")), strict=True)
    blocks = [b for b in blocks if len(b[0])]
    return support_of_blocks(result.robot().joint_types, blocks, quantile=quantile)
