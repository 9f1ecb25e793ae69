"""The Newton polish leaves saddles: a double well whose closed-form modes are known."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

from inference.polish import polish_map, polish_map_batched

PRIOR_SD = 10.0


class DoubleWell:
    """``-log p(x) = (x0^2 - 1)^2 + x1^2 + |x|^2 / (2 PRIOR_SD^2)``: a saddle at the origin, modes
    at ``x0 = +-sqrt(1 - 1 / (4 PRIOR_SD^2))``, ``x1 = 0`` (zero derivative of
    ``(x0^2 - 1)^2 + x0^2 / (2 s^2)``: ``4 x0 (x0^2 - 1) + x0 / s^2 = 0``)."""

    def model(self, data):
        x = numpyro.sample("x", dist.Normal(0.0, PRIOR_SD).expand([2]).to_event(1))
        numpyro.factor("well", -((x[0] ** 2 - 1.0) ** 2) - x[1] ** 2 + 0.0 * data)


MODE = np.sqrt(1.0 - 1.0 / (4.0 * PRIOR_SD**2))


@pytest.mark.parametrize("x1", [0.0, 0.5])
def test_polish_leaves_a_saddle_for_the_mode(x1):
    """From the saddle's ridge (zero gradient along ``x0``, curvature -4 there) a damped Newton
    step cannot lower the energy along ``x0``; the negative-curvature search does."""
    point, report = polish_map(DoubleWell(), jnp.zeros(()), {"x": jnp.array([0.0, x1])})
    assert report.converged, report.message
    assert report.min_eigenvalue > 0
    np.testing.assert_allclose(np.abs(np.asarray(point["x"])), [MODE, 0.0], atol=1e-6)


def test_batched_polish_leaves_a_saddle_per_replicate():
    starts = jnp.array([[0.0, 0.5], [0.3, -0.2], [-2.0, 1.0]])
    points, reports = polish_map_batched(DoubleWell(), jnp.zeros(3), {"x": starts})
    assert all(r.converged for r in reports), [r.message for r in reports]
    x = np.asarray(points["x"])
    # within the Newton decrement's tolerance (1e-6) over the curvature's square root (2.8)
    np.testing.assert_allclose(np.abs(x), np.tile([MODE, 0.0], (3, 1)), atol=1e-6)
    # from off-ridge starts Newton descends to the well on the start's side
    assert x[1, 0] > 0 and x[2, 0] < 0


def test_polishing_the_same_model_again_compiles_nothing(monkeypatch):
    """The polish's energy, gradient and Hessian programs are compiled once per model object and
    shapes: a second polish of the same model from another start (fit_svi's restarts, an
    ensemble's members) compiles no program; a model that does not hash still polishes."""
    import jax

    compiled = []

    def count(event, duration, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(duration)

    well = DoubleWell()
    polish_map(well, jnp.zeros(()), {"x": jnp.array([0.3, 0.1])})
    polish_map_batched(well, jnp.zeros(2), {"x": jnp.array([[0.3, 0.1], [-0.4, 0.2]])})
    jax.monitoring.register_event_duration_secs_listener(count)
    try:
        point, report = polish_map(well, jnp.zeros(()), {"x": jnp.array([-0.7, 0.4])})
        points, _ = polish_map_batched(
            well, jnp.zeros(2), {"x": jnp.array([[0.6, -0.3], [-0.2, 0.5]])}
        )
    finally:
        jax.monitoring.unregister_event_duration_listener(count)
    assert compiled == []
    assert report.converged and np.asarray(point["x"])[0] == pytest.approx(-MODE, abs=1e-6)
    assert np.asarray(points["x"])[:, 0] == pytest.approx([MODE, -MODE], abs=1e-6)

    class Unhashable(DoubleWell):
        __hash__ = None

    point, report = polish_map(Unhashable(), jnp.zeros(()), {"x": jnp.array([0.3, 0.1])})
    assert report.converged and np.asarray(point["x"])[0] == pytest.approx(MODE, abs=1e-6)


class StiffSum:
    """``-log p(x) = S/2 (x0 + x1 - 1)^2 + |x|^2 / 2`` with ``S = 1e17``, its first term summed
    over 10 data rows: the sum is pinned to ~2e-9 (sd ``1 / sqrt(2 S)``) while the difference
    ``x0 - x1`` has only the prior's curvature 1, below the Hessian's float64 resolution
    (``eps S`` ~ 22), so ``H = [[S + 1, S], [S, S + 1]]`` rounds to a singular matrix and
    whether the mode's Hessian is positive definite cannot be decided (the grid's
    uniform-data ``nokin-diffnea`` cells: base parameters at 1e16, placements' prior-only
    directions at 1)."""

    def model(self, data):
        x = numpyro.sample("x", dist.Normal(0.0, 1.0).expand([2]).to_event(1))
        numpyro.factor("data", -0.5 * jnp.sum(data * (x[0] + x[1] - 1.0) ** 2))


def test_a_map_report_names_the_eigenvalues_its_roundoff_hides():
    # the mode (closed form): x0 = x1 = S / (2 S + 1) ~ 1/2; the polish reaches the stiff sum but
    # sees no curvature along the difference, and says why it cannot call the point a MAP
    data = jnp.full(10, 1e16)
    point, report = polish_map(StiffSum(), data, {"x": jnp.array([0.3, 0.4])}, max_iter=5)
    assert float(jnp.sum(point["x"])) == pytest.approx(1.0, abs=1e-7)
    assert not report.converged and report.unresolved == 1
    assert "1 of 2 eigenvalues within the Hessian's roundoff" in report.message
    assert report.max_eigenvalue == pytest.approx(2e17, rel=1e-6)
    # well-conditioned: none (the double well's curvatures 8 and 2 at the mode)
    _, report = polish_map(DoubleWell(), jnp.zeros(()), {"x": jnp.array([0.3, 0.1])})
    assert report.converged and report.unresolved == 0
    assert "roundoff" not in report.message
