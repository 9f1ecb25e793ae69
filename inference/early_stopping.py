"""Early stopping of SVI on held-out episodes: the model's own negative log-likelihood.

A network fitted to a few episodes goes on lowering its training loss long after it stopped
predicting episodes it has not seen (Furuta hardware-like ``diffnea/nn-residual``, 30 s: held-out
acceleration NMSE 0.050 at 500 steps, 0.094 at 2,250, while the training NMSE fell from 0.023 to
0.011; docs/measurements.md). Reuss et al. (section IV) stop every model's training when the
validation loss has not improved for 30 epochs; here the score is the likelihood the model
itself is conditioned on (its noise model included), evaluated on validation episodes at the
guide's median after every compiled chunk of steps, and the fit keeps the best-scored state.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from numpyro import handlers


def _observed_log_probs(bayes_model, data, point, model_kwargs) -> list:
    """The log-probabilities (each weighted by its plate scale) of the model's observed sites
    with the latent sites substituted from ``point``, one array per site."""
    model = handlers.substitute(handlers.seed(bayes_model.model, 0), data=point)
    trace = handlers.trace(model).get_trace(data, **model_kwargs)
    out = []
    for site in trace.values():
        if site["type"] != "sample" or not site["is_observed"]:
            continue
        lp = site["fn"].log_prob(site["value"])
        if site.get("scale") is not None:
            lp = site["scale"] * lp
        out.append(lp)
    return out


def heldout_nll(bayes_model, data, num_obs: int, *, model_kwargs=None) -> Callable:
    """``point -> negative log-likelihood of data per observation`` (jittable). The callable
    also takes the data as a second argument (``nll(point, data)``): inside a jitted function
    pass them so, or the data become constants of the compiled program.

    Args:
        bayes_model: the model (``bayes_model.model(data)`` its NumPyro program).
        data: prepared held-out data (``bayes_model.prepare(...)``).
        num_obs: observed scalars in ``data`` (the normaliser, e.g. ``N n``).
        model_kwargs: keyword arguments of the model (e.g. none for full data).

    The sum runs over the model's observed sites (``obs_*`` samples and the sufficient-statistics
    factor of the exact linear likelihood), each weighted by its plate scale; the latent sites are
    substituted from ``point`` ({site: value}, as the guide's median gives it).
    """
    model_kwargs = model_kwargs or {}

    def nll(point, data=data):
        lps = _observed_log_probs(bayes_model, data, point, model_kwargs)
        return -sum((jnp.sum(lp) for lp in lps), jnp.zeros(())) / num_obs

    return nll


def heldout_log_likelihood(bayes_model, data, *, model_kwargs=None) -> Callable:
    """``point -> (M,)`` log-likelihood of each observed element of ``data`` (jittable; also
    ``(point, data)``, as :func:`heldout_nll`).

    As :func:`heldout_nll`, without the sum: the observed sites' log-probabilities (per row, or
    per row and joint, as the site factorises), flattened and concatenated. Stacked over the
    members of an ensemble it gives the mixture's predictive density of every element.
    """
    model_kwargs = model_kwargs or {}

    def loglik(point, data=data):
        lps = _observed_log_probs(bayes_model, data, point, model_kwargs)
        return jnp.concatenate([jnp.ravel(lp) for lp in lps])

    return loglik


def _select(mask, new, old):
    """Leaves of ``new`` where ``mask`` (R,) is true, else ``old`` (stacked states, leading R axis);
    PRNG-key leaves are taken from ``new``."""

    def pick(n, o):
        if jax.dtypes.issubdtype(n.dtype, jax.dtypes.prng_key):
            return n
        return jnp.where(mask.reshape(mask.shape + (1,) * (n.ndim - 1)), n, o)

    return jax.tree.map(pick, new, old)


class EarlyStopping:
    """Scores SVI states on held-out data and keeps the best (see the module docstring).

    Args:
        score: ``state -> float`` (lower is better), e.g. :func:`heldout_nll` at the guide's
            median; for ``batched`` states (a leading member axis R) ``state -> (R,)``.
        patience: scores without improvement after which the run stops (>= 1); batched: after
            which a member counts as stopped, and the run stops when every member has.
        label: the stage, for the report (``"map"``, ``"lowrank"``, ``"ensemble"``, ...).
        batched: states carry a leading member axis; each member keeps its own best.
        data: passed to ``score`` as its second argument (``score(state, data)``), so that the
            compiled score takes the data as an argument rather than as constants.
        jit: compile ``score`` here; False for a score that is already a compiled program.
        min_delta: the least fall of the score below the last such fall that restarts the
            patience count (Keras' ``min_delta``); smaller gains still update the best state.
    """

    def __init__(
        self,
        score: Callable,
        *,
        patience: int,
        label: str,
        batched: bool = False,
        data=None,
        min_delta: float = 0.0,
        jit: bool = True,
    ):
        if not min_delta >= 0:
            raise ValueError(f"min_delta must be >= 0, got {min_delta}")
        self.min_delta = float(min_delta)
        self._score = jax.jit(score) if jit else score
        self._data = () if data is None else (data,)
        self.patience = int(patience)
        self.label = label
        self.batched = batched
        self.start = 0  # steps of the stage run before the monitored ones (restart screening)
        self.steps: list[int] = []
        self.scores: list = []
        self.best_state = None
        self._best_step = None  # (R,) or () int array, -1: no finite score yet
        self._best_score = None
        self._since_best = None
        self._reference = None  # the score at the last fall of more than min_delta

    def record(self, state, step: int):
        """Score ``state`` (after ``step`` steps of this stage); keep what improves on the best.
        Returns the score (a float, or the best member's when batched)."""
        value = np.asarray(self._score(state, *self._data), dtype=np.float64)
        self.steps.append(int(step))
        self.scores.append(value.tolist())
        if self.best_state is None:
            self.best_state = state
            self._best_score = np.full(value.shape, np.inf)
            self._best_step = np.full(value.shape, -1)
            self._since_best = np.zeros(value.shape, dtype=int)
            self._reference = np.full(value.shape, np.inf)
        better = np.isfinite(value) & (value < self._best_score)
        gained = np.isfinite(value) & (value < self._reference - self.min_delta)
        if self.batched:
            self.best_state = _select(jnp.asarray(better), state, self.best_state)
        elif better:
            self.best_state = state
        self._best_score = np.where(better, value, self._best_score)
        self._best_step = np.where(better, int(step), self._best_step)
        self._reference = np.where(gained, value, self._reference)
        self._since_best = np.where(gained, 0, self._since_best + 1)
        return float(np.min(value)) if value.ndim else float(value)

    @property
    def exhausted(self) -> bool:
        """Whether ``patience`` scores in a row did not gain on the last gain (more than
        ``min_delta``; every member's)."""
        return self._since_best is not None and bool(np.all(self._since_best >= self.patience))

    @property
    def best_step(self):
        """Step of the best score (int, or a list per member; None / -1: no finite score)."""
        if self._best_step is None:
            return None
        out = self._best_step.tolist()
        return None if out == -1 else out

    @property
    def best_score(self):
        """The best score (float, or a list per member; inf where none was finite)."""
        return np.inf if self._best_score is None else self._best_score.tolist()

    def report(self) -> dict:
        """What the stage did: steps scored, scores, the best step and whether it stopped early
        (``stopped``: the run ended on patience, so the best score is a minimum the next
        ``patience`` scores did not beat)."""
        finite = self._best_score is not None and bool(np.all(np.isfinite(self._best_score)))
        return {
            "stage": self.label,
            "patience": self.patience,
            "min_delta": self.min_delta,
            "steps": list(self.steps),
            "scores": list(self.scores),
            "best_step": self.best_step,
            "best_score": self.best_score if finite else None,
            "stopped": bool(self.exhausted),
        }

