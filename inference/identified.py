"""Diagnostics on what the data identify: base parameters, coefficients, noise, predictions.

R-hat, ESS and MCSE of the virtual parameters of a white-box model judge the sampler on
directions no datum informs (issue 10). :func:`identified_summary` summarises instead the
quantities the likelihood depends on: base parameters ``beta = B theta`` (Gautier 1991), actuator
coefficients and noise scales (``bayes_model.physical``), plus posterior-predictive
accelerations at fixed held-out states (identified for any variant, networks included). Fixed
sites (the placements of ``diffnea``) never appear. Where the truth is known, it is shown beside
the posterior with whether the central ``prob`` interval covers it.
"""

from __future__ import annotations

import arviz as az  # noqa: I001  (after numpyro)
import jax
import numpy as np
import numpyro  # noqa: F401  (before arviz: see inference/__init__.py)
import xarray as xr

from inference.result import physical_quantities

_SKIP = ("theta", "rpy", "xyz", "mass", "com", "inertia", "virtual")


def identified_draws(result, bayes_model, *, states=None) -> dict[str, np.ndarray]:
    """Identified quantities of every draw, ``{name: (C, D, ...)}``.

    Args:
        result: a ``FitResult``.
        bayes_model: the fitted model (``result.model()``).
        states: ``(q, qd, tau)`` each (S, n): held-out states for predicted accelerations
            ``qdd_pred`` (C, D, S, n); None to skip.
    """
    samples = result.posterior_samples(group_by_chain=True)
    C, D = result.num_chains, result.num_draws
    flat = {k: v.reshape(C * D, *v.shape[2:]) for k, v in samples.items()}
    phys = physical_quantities(bayes_model, flat)
    phys.pop("_base_names", None)
    out = {
        k: np.asarray(v).reshape(C, D, *np.shape(v)[1:])
        for k, v in phys.items()
        if k not in _SKIP and not k.startswith("completion_")
    }
    if states is not None:
        q, qd, tau = states

        def predict(sample):
            return jax.vmap(bayes_model.qdd_fn(sample))(q, qd, tau)

        pred = jax.jit(jax.vmap(predict))(flat)
        out["qdd_pred"] = np.asarray(pred).reshape(C, D, *pred.shape[1:])
    return out


def identified_summary(result, bayes_model, *, states=None, truth: dict | None = None, prob=0.9):
    """``arviz.summary`` of :func:`identified_draws` (mean, sd, ETI, ESS, R-hat, MCSE), with the
    truth and a ``covered`` column (truth inside the central ``prob`` interval) where ``truth``
    (``{name: value}`` for some of the names) is given. Returns a pandas DataFrame.
    """
    draws = identified_draws(result, bayes_model, states=states)
    ds = xr.Dataset(
        {
            k: (("chain", "draw", *[f"{k}_dim_{i}" for i in range(v.ndim - 2)]), v)
            for k, v in draws.items()
        }
    )
    tree = xr.DataTree.from_dict({"/posterior": ds})
    table = az.summary(tree, group="posterior", ci_prob=prob, round_to="none")
    if truth:
        lo_q, hi_q = (1 - prob) / 2, 1 - (1 - prob) / 2
        values, covered = [], []
        for label in table.index:
            name, _, idx = label.partition("[")
            if name not in truth or name not in draws:
                values.append(np.nan)
                covered.append(None)
                continue
            t = np.asarray(truth[name], dtype=np.float64)
            d = draws[name].reshape(-1, *draws[name].shape[2:])
            if idx:
                index = tuple(int(i) for i in idx.rstrip("]").split(","))
                t, d = t[index], d[(slice(None), *index)]
            lo, hi = np.quantile(d, [lo_q, hi_q])
            values.append(float(t))
            covered.append(bool(lo <= t <= hi))
        table["truth"] = values
        table[f"covered_{int(round(100 * prob))}"] = covered
    return table
