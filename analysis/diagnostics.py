"""Diagnostics through ArviZ 1.x: summaries, R-hat / ESS, held-out posterior-predictive checks and
trace, forest and pair plots (arviz-plots, matplotlib backend) written as PNG.

Import ``numpyro`` before ``arviz`` (STACK-NOTES.md); ``inference`` does so on import.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import inference  # noqa: F401  (numpyro before arviz)
from data.io import write_atomic


def summary(result, *, physical: bool = True, var_names=None):
    """``arviz.summary`` of a :class:`inference.FitResult` (mean, sd, ``eti89_lb``/``eti89_ub``,
    MCSE, ESS, R-hat) over its physical quantities (default) or latent sites."""
    return result.summary(physical=physical, var_names=var_names)


def convergence(result) -> dict:
    """R-hat (max), bulk/tail ESS (min), divergences: :meth:`inference.FitResult.diagnostics`."""
    return result.diagnostics()


def heldout_ppc(bayes_model, result, dataset, *, prob: float = 0.9, max_draws: int = 200) -> dict:
    """Posterior-predictive check of joint accelerations on held-out data.

    Each draw predicts ``qdd`` with its forward dynamics; its observation noise (``sigma_qdd``
    when the model has it) is added with a fixed seed. Returns the NMSE of the posterior mean per
    joint, and the coverage of the observed ``qdd`` by the equal-tailed ``prob`` predictive band.
    """
    import jax
    import jax.numpy as jnp

    draws = result.posterior_samples()
    d_all = next(iter(draws.values())).shape[0]
    idx = np.linspace(0, d_all - 1, min(max_draws, d_all)).astype(int)
    draws = jax.tree.map(lambda x: x[idx], draws)
    q, qd, qdd, tau = (jnp.asarray(x) for x in dataset.arrays())
    pred = np.asarray(
        jax.jit(
            jax.vmap(lambda s: jax.vmap(lambda a, b, c: bayes_model.qdd_fn(s)(a, b, c))(q, qd, tau))
        )(draws)
    )
    physical = jax.vmap(bayes_model.physical)(draws)
    sigma = physical.get("sigma_qdd")
    if sigma is not None:
        noise = np.random.default_rng(0).normal(size=pred.shape)
        pred = pred + noise * np.asarray(sigma).reshape(pred.shape[0], 1, -1)
    qdd = np.asarray(qdd)
    lo, hi = np.nanquantile(pred, [(1 - prob) / 2, (1 + prob) / 2], axis=0)
    mean = np.nanmean(pred, axis=0)
    nmse = np.mean((mean - qdd) ** 2, axis=0) / np.maximum(np.var(qdd, axis=0), 1e-12)
    return {
        "nmse": nmse.tolist(),
        "coverage": float(np.mean((qdd >= lo) & (qdd <= hi))),
        "prob": prob,
        "points": int(qdd.shape[0]),
        "with_noise": sigma is not None,
    }


def _save_collection(pc, path: Path) -> Path:
    """Save an arviz-plots PlotCollection as PNG atomically (:func:`data.io.write_atomic`)."""
    write_atomic(path, lambda tmp: pc.savefig(tmp, dpi=110, format="png"), by_path=True)
    return path


def diagnostic_plots(result, out_dir, *, var_names=None, max_vars: int = 6) -> dict[str, Path]:
    """Trace, forest and pair plots (PNG) of the posterior's physical quantities.

    Args:
        var_names: stored variable names; default: the first ``max_vars`` physical quantities.
    Returns:
        {"trace": path, "forest": path, "pair": path}.
    """
    import arviz_plots as azp
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from analysis.plots import save_figure

    out_dir = Path(out_dir)
    names = list(var_names or result.physical_names[:max_vars])
    post = result.idata["posterior"].to_dataset()[names]
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
