"""NUTS with a fixed Laplace metric, started at an SVI MAP.

On the white-box DiffNEA models an adapted diagonal or dense metric saturates NUTS's tree depth
(~1,000 leapfrog steps per draw); the inverse Hessian at the MAP as a fixed dense mass matrix
(:meth:`models.BayesianModel.laplace_inverse_mass`) needs ~15 (measured in ``run_main_job``).
"""

from __future__ import annotations

import contextlib
import functools


@contextlib.contextmanager
def _fixed_metric(inverse_mass_matrix):
    """Inside this block, ``inference.fit_nuts`` builds its NUTS kernel with a fixed dense
    ``inverse_mass_matrix`` (no mass-matrix adaptation; the step size is still adapted).

    WORKAROUND: ``inference.fit_nuts`` has no ``inverse_mass_matrix`` / ``adapt_mass_matrix``
    options yet (asked of the inference owner: pass them through to ``numpyro.infer.NUTS`` and
    store them in the settings). Until then the kernel class it looks up is swapped for this
    block only, and restored on exit.
    """
    import inference.nuts as nuts_module

    original = nuts_module.NUTS
    nuts_module.NUTS = functools.partial(
        original, inverse_mass_matrix=inverse_mass_matrix, adapt_mass_matrix=False
    )
    try:
        yield
    finally:
        nuts_module.NUTS = original


def fit_nuts_laplace(
    bayes_model, data, svi_result, *, key, num_warmup, num_samples, num_chains=1, progress=True
):
    """NUTS from the SVI MAP with the Laplace metric: the inverse Hessian of the negative log
    joint at the MAP as a fixed dense mass matrix (:meth:`models.BayesianModel.laplace_inverse_mass`).

    Measured on the cart-pole ``diffnea/stribeck/informative`` (833 forward-likelihood points,
    2 shared cores): adapted diagonal or dense metrics from the same start saturated the tree
    depth (~1,000 leapfrog steps per draw, step size 3e-5); the Laplace metric took ~16 steps per
    draw (100 + 200 iterations in 7 s). Falls back to an adapted dense metric when the Hessian
    is not finite.
    """
    import numpy as np

    from inference import fit_nuts

    point = {k: v[0] for k, v in svi_result.posterior_samples().items()}
    metric = bayes_model.laplace_inverse_mass(data, point)
    options = dict(
        key=key,
        num_warmup=num_warmup,
        num_samples=num_samples,
        num_chains=num_chains,
        init=svi_result,
        dense_mass=True,
        progress=progress,
    )
    if not np.all(np.isfinite(np.asarray(metric))):
        return fit_nuts(bayes_model, data, **options)
    with _fixed_metric(metric):
        return fit_nuts(bayes_model, data, **options)
