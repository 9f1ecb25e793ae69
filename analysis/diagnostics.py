"""Diagnostics through ArviZ 1.x: summaries, R-hat / ESS, held-out posterior-predictive checks and
trace, forest and pair plots (arviz-plots, matplotlib backend) written as PNG.

Import ``numpyro`` before ``arviz`` (docs/stack.md); ``inference`` does so on import.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import inference  # noqa: F401  (numpyro before arviz)
from analysis.plots import plt, save_figure
from analysis.rollouts import finite_draws, thin_draws
from data.io import write_atomic


def summary(result, *, physical: bool = True, var_names=None):
    """``arviz.summary`` of a :class:`inference.FitResult` (mean, sd, ``eti89_lb``/``eti89_ub``,
    MCSE, ESS, R-hat) over its physical quantities (default) or latent sites."""
    return result.summary(physical=physical, var_names=var_names)


def convergence(result) -> dict:
    """R-hat (max), bulk/tail ESS (min), divergences: :meth:`inference.FitResult.diagnostics`."""
    return result.diagnostics()


def heldout_predictions(bayes_model, draws, dataset) -> np.ndarray:
    """(D, N, n) joint accelerations that each draw's forward dynamics (``bayes_model.qdd_fn``)
    predicts at the ``(q, qd, tau)`` samples of ``dataset`` (N samples); one jitted, vmapped call.

    Args:
        draws: pytree of latent sites with a leading draw axis (D, ...).
    """
    q, qd, _, tau = (jnp.asarray(x) for x in dataset.arrays())
    predict = jax.jit(  # states as arguments: no constants, one program per shape
        jax.vmap(lambda s, a, b, c: jax.vmap(bayes_model.qdd_fn(s))(a, b, c), (0, None, None, None))
    )
    return np.asarray(predict(draws, q, qd, tau))


def accel_nmse(pred, qdd) -> np.ndarray:
    """(n,) NMSE per joint of the posterior-mean prediction, ``mean((qdd_hat - qdd)^2) / var(qdd)``.

    Args:
        pred: (D, N, n) predictions (:func:`heldout_predictions`); ``qdd_hat`` is their mean over
            the draws that are finite everywhere (NaN if none is).
        qdd: (N, n) observed accelerations.
    """
    return _normalised_sq_error(_finite_mean(pred), qdd).mean(axis=0)


def _finite_mean(pred) -> np.ndarray:
    """(N, n) mean of the (D, N, n) predictions over the draws finite everywhere (NaN if none)."""
    pred = np.asarray(pred, dtype=float)
    finite = finite_draws(pred)
    return pred[finite].mean(axis=0) if finite.any() else np.full(pred.shape[1:], np.nan)


def _normalised_sq_error(mean, qdd) -> np.ndarray:
    """(N, n) squared errors of ``mean`` against ``qdd``, each joint's over the variance of its
    ``qdd``: their mean over the rows is the NMSE."""
    qdd = np.asarray(qdd, dtype=float)
    return (np.asarray(mean) - qdd) ** 2 / np.maximum(np.var(qdd, axis=0), 1e-12)


def heldout_ppc(
    bayes_model, result, dataset, *, prob: float = 0.9, max_draws: int = 200, support=None
) -> dict:
    """Posterior-predictive check of joint accelerations on held-out data.

    Each draw predicts ``qdd`` with its forward dynamics (:func:`heldout_predictions`); its
    observation noise (``bayes_model.noise_dist``: Normal or Student-t) is drawn with a fixed
    seed for the band: on ``qdd`` where the model observes ``qdd`` (forward likelihood; with
    ``"forward-effort"`` also ``M(q)^-1`` times the effort noise), on the
    efforts where it observes them (inverse likelihood: ``tau_obs = tau(qdd) + e``, so ``qdd``
    is the forward dynamics at ``tau_obs - e``; for rigid bodies ``M^-1 e`` around the mean).
    Returns the NMSE of the (noise-free) posterior mean per joint (:func:`accel_nmse`), the
    coverage of the observed ``qdd`` by the equal-tailed ``prob`` predictive band (pooled and per
    joint) and its mean width per joint, and the excess kurtosis of the posterior mean's
    residuals per joint (Fisher's: 0 for Normal errors; hardware-like accelerations, filtered
    differences of quantised positions, measured 20-45: a Normal noise model's band then
    over-covers the bulk, ``noise="student-t"`` fits).

    With ``support`` (an :class:`analysis.support.TrainingSupport` of the fit's training data)
    also the fraction of held-out states outside it, and per joint the coverage and the NMSE of
    the states inside and outside it (``None`` where there are none; the NMSE's denominator is
    the variance over all held-out states, so ``nmse`` is the two parts' average weighted by
    their shares): a network predicts only as well as the training states around the point.
    """
    draws = thin_draws(result.posterior_samples(), max_draws)
    pred = heldout_predictions(bayes_model, draws, dataset)
    qdd = np.asarray(dataset.arrays()[2])
    mean = _finite_mean(pred)
    sq_error = _normalised_sq_error(mean, qdd)
    nmse = sq_error.mean(axis=0)  # accel_nmse
    resid = qdd - mean
    centred = resid - resid.mean(axis=0)
    kurtosis = np.mean(centred**4, axis=0) / np.mean(centred**2, axis=0) ** 2 - 3.0
    observed = tuple(getattr(getattr(bayes_model, "likelihood", None), "noise_keys", ()))
    keys = jax.random.split(jax.random.key(0), pred.shape[0])  # noise with a fixed seed
    with_noise = "qdd" in observed or "tau" in observed
    if hasattr(bayes_model.likelihood, "sample_noisy"):  # noise on the effort and on qdd
        q = jnp.asarray(dataset.arrays()[0])
        noisy = jax.vmap(lambda p, s, k: bayes_model.likelihood.sample_noisy(bayes_model, s, q, p, k))
        pred = np.asarray(jax.jit(noisy)(jnp.asarray(pred), draws, keys))
    elif "qdd" in observed:  # each draw's own observation noise (Normal or Student-t)
        noisy = jax.vmap(lambda p, s, k: bayes_model.noise_dist(p, s, "qdd", 2).sample(k))
        pred = np.asarray(noisy(jnp.asarray(pred), draws, keys))
    elif "tau" in observed:  # tau_obs = tau(qdd) + e: qdd = forward dynamics at tau_obs - e
        q, qd, _, tau = (jnp.asarray(x) for x in dataset.arrays())

        def noisy(s, k, a, b, c):
            e = bayes_model.noise_dist(jnp.zeros_like(c), s, "tau", 2).sample(k)
            return jax.vmap(bayes_model.qdd_fn(s))(a, b, c - e)

        pred = np.asarray(
            jax.jit(jax.vmap(noisy, (0, 0, None, None, None)))(draws, keys, q, qd, tau)
        )
    lo, hi = np.nanquantile(pred, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
    inside = (qdd >= lo) & (qdd <= hi)
    out = {
        "nmse": nmse.tolist(),
        "coverage": float(np.mean(inside)),
        "coverage_per_joint": inside.mean(axis=0).tolist(),
        "width_per_joint": (hi - lo).mean(axis=0).tolist(),
        "residual_excess_kurtosis_per_joint": kurtosis.tolist(),
        "prob": prob,
        "points": int(qdd.shape[0]),
        "with_noise": with_noise,
    }
    if support is not None:
        q, qd, _, tau = dataset.arrays()
        near = support.inside(q, qd, tau)
        out["outside_support"] = float(1.0 - near.mean())
        for name, mask in (("inside", near), ("outside", ~near)):
            cover = inside[mask].mean(axis=0).tolist() if mask.any() else None
            out[f"coverage_{name}_support_per_joint"] = cover
            part = sq_error[mask].mean(axis=0).tolist() if mask.any() else None
            out[f"nmse_{name}_support_per_joint"] = part
    return out


def _save_collection(pc, path: Path) -> Path:
    """Save an arviz-plots PlotCollection as PNG atomically (:func:`data.io.write_atomic`)."""
    write_atomic(path, lambda tmp: pc.savefig(tmp, dpi=110, format="png"), by_path=True)
    return path


def diagnostic_plots(result, out_dir, *, var_names=None, max_vars: int = 6) -> dict[str, Path]:
    """Trace, forest and pair plots (PNG) of the posterior's physical quantities.

    Args:
        var_names: stored variable names; default: the first ``max_vars`` real-valued physical
            quantities.
    Returns:
        {"trace": path, "forest": path, "pair": path}.
    """
    # lazy on purpose: ArviZ must load after NumPyro (az.from_numpyro breaks otherwise), and only
    # the plots need arviz-plots
    import arviz_plots as azp

    out_dir = Path(out_dir)
    post = result.idata["posterior"].to_dataset()
    if var_names is None:  # real-valued quantities (not the completion's flags and counts)
        var_names = [n for n in result.physical_names if post[n].dtype.kind == "f"][:max_vars]
    names = list(var_names)
    post = post[names]
    tree = result.idata.copy()
    paths = {}
    for kind, fn in (("trace", azp.plot_trace_dist), ("forest", azp.plot_forest)):
        pc = fn(tree, var_names=names, backend="matplotlib")
        paths[kind] = _save_collection(pc, out_dir / f"{kind}.png")
        plt.close("all")
    # pair plot of the scalar components of the first variables (matplotlib, readable labels)
    cols, labels = [], []
    for name in names:
        arr = np.asarray(post[name].values).reshape(
            -1, int(np.prod(post[name].shape[2:], dtype=int))
        )
        for k in range(arr.shape[1]):
            if np.std(arr[:, k]) > 0 and len(cols) < 5:
                cols.append(arr[:, k])
                labels.append(f"{name}[{k}]")
    if len(cols) >= 2:
        m = len(cols)
        fig, axes = plt.subplots(m, m, figsize=(2.2 * m, 2.2 * m), squeeze=False)
        for i in range(m):
            for j in range(m):
                ax = axes[i, j]
                if i == j:
                    ax.hist(cols[i], bins=30, color="tab:blue", alpha=0.7)
                elif i > j:
                    ax.plot(cols[j], cols[i], ".", ms=1.5, alpha=0.4)
                else:
                    ax.axis("off")
                if i == m - 1:
                    ax.set_xlabel(labels[j], fontsize=7)
                if j == 0 and i > 0:
                    ax.set_ylabel(labels[i], fontsize=7)
        fig.suptitle("posterior pair plot (physical quantities, SI units)")
        paths["pair"] = save_figure(fig, out_dir / "pair.png")
    return paths
