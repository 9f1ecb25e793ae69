"""Simulation-based calibration (SBC; Talts et al. 2018) of the identifiable-geometry posteriors.

One replicate: draw a truth from the prior (:meth:`models.identifiable.IdentifiableModel.sample_prior`:
base parameters, friction coefficients, noise scales, and a consistent theta), simulate data from
it (uniform states, random efforts, forward dynamics plus the drawn noise), fit the posterior
(Newton MAP, then NUTS from it with the Laplace metric; Stribeck friction's scale
coefficients in the softplus coordinates ``fit_nuts`` uses for them), keep the draws whose base parameters
some consistent body has (the truths' prior is restricted so: :func:`consistent_draws`) and
record the rank of the truth among ``L`` of them, evenly spaced, for every base parameter,
friction coefficient and noise scale. If
the posterior is the exact posterior of the prior that generated the truth, every rank is uniform
on ``0..L`` and every central ``p`` interval covers the truth in a fraction ``p`` of replicates.

:func:`run_calibration` runs replicates as dask tasks (like ``analysis.benchmark``), one JSON
record per replicate written atomically, so an interrupted run resumes; :func:`summarise` gives
per-quantity uniformity tests (chi-square on ``bins`` equal rank bins; Bonferroni correction over
the quantities of a (system, variant)) and 50 % / 90 % coverage with its binomial standard error;
:func:`plot_ranks` draws rank histograms with the 99 % band of a uniform histogram.

``simuk`` (the ArviZ-verse SBC package) drives PyMC/Bambi/NumPyro models through their own
samplers; our fits start from a Newton MAP with a fixed Laplace metric and record quantities that
are functions of the latent sites, so a small harness here is simpler.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import time
import zlib
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
from jax.flatten_util import ravel_pytree
from numpyro.infer.hmc import hmc
from numpyro.infer.util import potential_energy
from scipy import stats

import bayes_nea as bn
from analysis.benchmark import read_cell, run_and_record
from analysis.plots import plt
from analysis.resources import sweep_client
from data.io import remove_stale_temporaries, write_atomic
from inference.laplace import floored_inverse, potential_hessian
from inference.polish import polish_map_batched
from inference.softplus_map import fit_softplus_map
from models import ModelData, build_model
from models._sites import characteristic_scales
from models.identifiable import identifiable_model

RECORD_SCHEMA = 5  # 2: own key per cell (cell_key); 3: a chain per replicate; 4: consistent
# draws; 5: per-replicate metric blocks, softplus coordinates (CalibrationSettings.coordinates)
SYSTEMS = ("cartpole", "furuta")
VARIANTS = ("diffnea/viscous/informative", "diffnea/stribeck/informative")


@dataclasses.dataclass(frozen=True)
class CalibrationSettings:
    """Size of one SBC replicate.

    Fields:
        n_samples: simulated states per replicate.
        num_warmup, num_samples: NUTS warm-up (step size only: Laplace metric) and draws (1 chain).
        ranks: ``L`` thinned draws the truth is ranked among (``num_samples`` divisible by it).
        batch_size: replicates fitted jointly in one NUTS run (:class:`StackedModel`).
        seed: base seed (:func:`cell_key`).
        coordinates: where the chains move: ``"unconstrained"`` (the latent sites), ``"softplus"``
            (the friction's scale coefficients as ``c = k softplus(s)``,
            :mod:`inference.softplus_map`, each replicate's knees at its own MAP) or ``"auto"``
            (softplus for the models whose ``nuts_metric`` is ``softplus-adapt``, as
            ``fit_nuts``). The Laplace metric is taken in those coordinates.
    """

    n_samples: int = 200
    num_warmup: int = 300
    num_samples: int = 400
    ranks: int = 100
    batch_size: int = 20
    seed: int = 0
    coordinates: str = "auto"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def batch_id(system: str, variant: str, batch: int) -> str:
    return f"{system}__{variant.replace('/', '-')}__{batch:04d}"


def cell_key(seed: int, system: str, variant: str, batch: int):
    """The key of one batch: ``fold_in(fold_in(key(seed), crc32(system/variant)), batch)``.

    Every (system, variant) gets its own stream: with one stream per batch only, the cells of a
    run shared their truth, state and noise draws (both built-in systems have 2 joints), so
    their replicates were not independent experiments and one unlucky draw showed in all cells.
    """
    cell = zlib.crc32(f"{system}/{variant}".encode())
    return jax.random.fold_in(jax.random.fold_in(jax.random.key(seed), cell), batch)


def _identified(model, physical: dict) -> dict[str, np.ndarray]:
    """The calibrated quantities of one draw or a batch: base parameters, coefficients, noise."""
    out = {}
    beta = np.asarray(physical["base_parameters"])
    for k in range(beta.shape[-1]):
        out[f"beta[{k}]"] = beta[..., k]
    joints = model.robot.joint_names
    for name, value in physical.items():
        if name == "base_parameters":
            continue
        value = np.asarray(value)
        for j, joint in enumerate(joints):
            out[f"{name}[{joint}]"] = value[..., j]
    return out


def _replicate_loglik(model, sample, data) -> jax.Array:
    """Log likelihood of one replicate's forward-dynamics data (features of ``model.prepare``)."""
    rows = model._qdd_features(sample, data)  # (n, N)
    return jnp.sum(model.source.noise_dist_rows(rows, sample, "qdd").log_prob(data.qdd))


class StackedModel:
    """``R`` independent replicates of an identifiable model as one NumPyro model.

    Latent sites get a leading replicate axis (``numpyro.plate``); the log likelihood is the sum
    of the replicates' (vmapped). Its MAP and Laplace metric are the replicates' (the Hessian is
    block diagonal), computed in one compile.
    """

    def __init__(self, model, replicates: int):
        self.inner = model
        self.replicates = replicates

    def model(self, data) -> None:
        m = self.inner
        dtype = jnp.result_type(data.q)
        with numpyro.plate("replicate", self.replicates):
            sample = m.sample_latent(dtype)
        loglik = jax.vmap(lambda s, d: _replicate_loglik(m, s, d))(sample, data)
        numpyro.factor("obs_qdd", jnp.sum(loglik))


def _replicate_blocks(point: dict, replicates: int) -> np.ndarray:
    """(R, d) indices of each replicate's entries in the stacked flat latent vector.

    NumPyro flattens ``{site: (R, ...)}`` with ``ravel_pytree`` (sorted site names, each site's
    array row-major, so replicate-major); one replicate's own flat vector takes the same sites in
    the same order.
    """
    blocks, offset = [], 0
    for name in sorted(point):
        size = int(np.prod(np.shape(point[name])[1:], dtype=int))
        blocks.append(offset + np.arange(replicates)[:, None] * size + np.arange(size)[None, :])
        offset += replicates * size
    return np.concatenate(blocks, axis=1)


COORDINATES = ("auto", "unconstrained", "softplus")


def replicate_metrics(model, data, point: dict, *, softplus: bool):
    """Each replicate's start and Laplace metric in the chains' coordinates.

    The stacked model's Hessian (block diagonal: one block per replicate) and gradient at the
    replicates' MAPs ``point`` ({site: (R, ...)}, the identifiable model's latent sites, all
    real-valued); with ``softplus`` each replicate's :class:`inference.softplus_map.
    SoftplusCoefficientMap` fitted at its own MAP and the Hessian taken through it. Eigenvalues
    below ``1000 eps`` of a block's largest are floored (``inference.laplace``); a block that is
    not finite gets the identity.

    Returns:
        ``(starts (R, d), inverse masses (R, d, d), knees (R, m) or None, a map or None)``:
        coordinates flattened as one replicate's latent sites (``ravel_pytree``); the maps
        differ only in their knees (the returned one has the last replicate's).
    """
    R = jax.tree.leaves(point)[0].shape[0]
    stacked = StackedModel(model, R)
    flat, unravel = ravel_pytree(point)
    dtype = flat.dtype
    H = np.asarray(potential_hessian(stacked, data, point, batch_size=32), np.float64)
    g = jax.grad(lambda x: potential_energy(stacked.model, (data,), {}, unravel(x)))(flat)
    g = np.asarray(g, np.float64)
    idx = _replicate_blocks(point, R)
    starts, metrics, knees, cmap = [], [], [], None
    for r in range(R):
        own = {k: np.asarray(v[r]) for k, v in point.items()}
        z = np.asarray(ravel_pytree(own)[0], np.float64)
        H_r, g_r = H[np.ix_(idx[r], idx[r])], g[idx[r]]
        if softplus:
            cmap = fit_softplus_map(model, own, H_r, g_r)
            # a Hessian that is not finite: the knee at the MAP's coefficient (any knee is valid)
            c = np.exp(cmap.loc + cmap.scale * z[cmap.index])
            cmap = cmap._replace(knee=np.where(np.isfinite(cmap.knee), cmap.knee, c))
            z = cmap.inverse(z)
            H_r = cmap.hessian(z, H_r, g_r)
            knees.append(cmap.knee)
        starts.append(z)
        finite = np.all(np.isfinite(H_r))
        metrics.append(floored_inverse(H_r, dtype, None)[0] if finite else np.eye(z.size))
    cast = functools.partial(jnp.asarray, dtype=dtype)
    knees = cast(np.stack(knees)) if softplus else None
    return cast(np.stack(starts)), cast(np.stack(metrics)), knees, cmap


def replicate_nuts(
    model,
    data,
    point: dict,
    starts,
    metrics,
    key,
    *,
    num_warmup: int,
    num_samples: int,
    knees=None,
    cmap=None,
):
    """One NUTS chain per replicate, all in one vmapped, jitted computation.

    Each chain has its own step size (dual averaging over ``num_warmup`` steps), its own fixed
    dense metric (``metrics`` (R, d, d), :func:`replicate_metrics`) and its own divergence
    count: a replicate whose posterior is hard does not set the step of the others, and its
    divergences are its own. The chains move in flat coordinates from ``starts`` (R, d): the
    latent sites (``point``'s structure, one replicate's) or, with ``cmap`` and ``knees``
    (R, m), the softplus map's (the density carries its log-Jacobian; the draws are mapped
    back). NumPyro's functional NUTS (``numpyro.infer.hmc.hmc``).

    Returns:
        ``(draws {site: (D, R, ...)}, num_steps (D, R), diverging (D, R))``.
    """
    R = starts.shape[0]
    dtype = jnp.result_type(data.q)
    unravel = ravel_pytree({k: v[0] for k, v in point.items()})[1]
    if knees is None:
        knees = jnp.zeros((R, 0), dtype)

    def single(data_r):
        sample = model.sample_latent(dtype)
        numpyro.factor("obs_qdd", _replicate_loglik(model, sample, data_r))

    def to_latent(s, knee):
        if cmap is None:
            return s, jnp.zeros((), s.dtype)
        return cmap._replace(knee=knee).forward(s)

    def potential_fn_gen(data_r, knee):
        def potential(s):
            z, log_jac = to_latent(s, knee)
            return potential_energy(single, (data_r,), {}, unravel(z)) - log_jac

        return potential

    init_kernel, sample_kernel = hmc(potential_fn_gen=potential_fn_gen, algo="NUTS")

    def chain(key, init, data_r, inverse_mass, knee):
        state = init_kernel(
            init,
            num_warmup,
            inverse_mass_matrix=inverse_mass,
            adapt_mass_matrix=False,
            dense_mass=True,
            model_args=(data_r, knee),
            rng_key=key,
        )

        def step(state, _):
            state = sample_kernel(state, model_args=(data_r, knee))
            return state, (state.z, state.num_steps, state.diverging)

        state, _ = jax.lax.scan(step, state, None, length=num_warmup)
        _, (s, steps, diverging) = jax.lax.scan(step, state, None, length=num_samples)
        z = jax.vmap(lambda v: to_latent(v, knee)[0])(s)
        return jax.vmap(unravel)(z), steps, diverging

    run = jax.jit(jax.vmap(chain))
    draws, steps, diverging = run(jax.random.split(key, R), starts, data, metrics, knees)
    # (R, D, ...) -> (D, R, ...) as the stacked chain's draws
    swap = functools.partial(jnp.swapaxes, axis1=0, axis2=1)
    return jax.tree.map(swap, draws), swap(steps), swap(diverging)


def consistent_draws(model, draws: dict, key) -> np.ndarray:
    """(D, R) bool: whether some physically consistent body has each draw's base parameters.

    The truths come from the prior restricted to such base parameters
    (:meth:`models.identifiable.IdentifiableModel.sample_prior` redraws the others); the
    sampler's Gaussian prior on ``beta`` is not restricted, and its posterior restricted to the
    draws with a consistent completion is the posterior of the truths' prior. Phase 1 of the
    completion decides (no hit-and-run moves are needed for the flag).
    """
    D, R = jax.tree.leaves(draws)[0].shape[:2]
    flat = {k: np.asarray(v).reshape(D * R, *np.shape(v)[2:]) for k, v in draws.items()}
    ok = dataclasses.replace(model, completion_steps=1).complete(key, flat)["completion_ok"]
    return np.asarray(ok).reshape(D, R)


def sbc_batch(system: str, variant: str, batch: int, settings: dict) -> list[dict]:
    """``settings["batch_size"]`` SBC replicates (module docstring) fitted jointly; one record each.

    Truths from the prior, data simulated per replicate, then a Newton MAP of every replicate
    (:func:`inference.polish.polish_map_batched`: vmapped, each with its own damping) and one
    NUTS chain per replicate with its Laplace metric there (:func:`replicate_metrics`,
    :func:`replicate_nuts`).
    """
    s = CalibrationSettings(**settings)
    if s.coordinates not in COORDINATES:
        raise ValueError(f"coordinates {s.coordinates!r} is not one of {list(COORDINATES)}")
    if s.num_samples % s.ranks:
        raise ValueError(f"num_samples {s.num_samples} is not a multiple of ranks {s.ranks}")
    R = s.batch_size
    robot = bn.get_system(system)
    model = identifiable_model(build_model(variant, robot))
    key = cell_key(s.seed, system, variant, batch)
    k_truth, k_states, k_tau, k_noise, k_fit = jax.random.split(key, 5)
    truth, completion = model.sample_prior(k_truth, R)
    truth = {k: jnp.asarray(v) for k, v in truth.items()}
    q, qd, _ = bn.sample_states(robot, k_states, R * s.n_samples)
    q, qd = (x.reshape(R, s.n_samples, robot.n) for x in (q, qd))
    scale = jnp.asarray(characteristic_scales(robot).tau, q.dtype)
    tau = scale[None, None, :] * jax.random.normal(k_tau, q.shape, q.dtype)

    def simulate(sample, q, qd, tau, key):
        clean = jax.vmap(model.qdd_fn(sample))(q, qd, tau)
        sigma = model.physical(sample)["sigma_qdd"]
        return clean + sigma[None, :] * jax.random.normal(key, q.shape, q.dtype)

    qdd = jax.vmap(simulate)(truth, q, qd, tau, jax.random.split(k_noise, R))
    prepared = [model.prepare(ModelData(q[r], qd[r], qdd[r], tau[r])) for r in range(R)]
    data = jax.tree.map(lambda *xs: jnp.stack(xs), *prepared)
    init = jax.tree.map(lambda x: jnp.broadcast_to(x, (R, *x.shape)), model.init_sample())
    point, reports = polish_map_batched(model, data, init)
    map_ok = [r.converged for r in reports]
    softplus = s.coordinates == "softplus" or (
        s.coordinates == "auto" and model.nuts_metric == "softplus-adapt"
    )
    starts, metrics, knees, cmap = replicate_metrics(model, data, point, softplus=softplus)
    draws, steps, diverging = replicate_nuts(
        model,
        data,
        point,
        starts,
        metrics,
        k_fit,
        num_warmup=s.num_warmup,
        num_samples=s.num_samples,
        knees=knees,
        cmap=cmap,
    )
    steps, diverging = np.asarray(steps), np.asarray(diverging)
    phys = jax.vmap(jax.vmap(model.physical), in_axes=1, out_axes=1)(draws)  # (D, R, ...)
    post = _identified(model, {k: np.asarray(v) for k, v in phys.items()})
    true = _identified(
        model, {k: np.asarray(v) for k, v in jax.vmap(model.physical)(truth).items()}
    )
    consistent = consistent_draws(model, draws, jax.random.fold_in(k_fit, 1))  # (D, R)
    records = []
    for r in range(R):
        keep = np.flatnonzero(consistent[:, r])
        enough = keep.size >= s.ranks  # else left out of the summary (a data-only choice)
        keep = keep if enough else np.arange(consistent.shape[0])
        # L draws evenly spaced over the kept ones (all kept: every (D / L)-th draw)
        ranked = keep[(np.arange(1, s.ranks + 1) * keep.size) // s.ranks - 1]
        quantities = {}
        for name, values in post.items():
            v = values[keep, r]
            t = float(true[name][r])
            lo50, hi50, lo90, hi90 = np.quantile(v, [0.25, 0.75, 0.05, 0.95])
            quantities[name] = {
                "rank": int(np.sum(values[ranked, r] < t)),
                "truth": t,
                "mean": float(v.mean()),
                "sd": float(v.std()),
                "in50": bool(lo50 <= t <= hi50),
                "in90": bool(lo90 <= t <= hi90),
            }
        records.append(
            {
                "replicate": batch * R + r,
                "quantities": quantities,
                "truth_completion_margin": float(completion["completion_margin"][r]),
                "map_converged": bool(map_ok[r]),
                "divergences": int(diverging[:, r].sum()),
                "consistent_draws": float(consistent[:, r].mean()),
                "leapfrog_per_draw": float(steps[:, r].mean()),
            }
        )
    return {
        "replicates": records,
        "map_converged": bool(all(map_ok)),
        "map_message": next((r.message for r in reports if not r.converged), reports[0].message),
        "map_converged_replicates": int(sum(map_ok)),
        "divergences": int(diverging.sum()),
        "leapfrog_per_draw": float(steps.mean()),
    }


def _run_one(system, variant, batch, settings, path) -> dict:
    return run_and_record(
        lambda: sbc_batch(system, variant, batch, settings),
        path,
        schema=RECORD_SCHEMA,
        system=system,
        variant=variant,
        batch=batch,
        settings=settings,
    )


def _read(path) -> dict | None:
    return read_cell(path, schema=RECORD_SCHEMA)


def run_calibration(
    out_dir,
    *,
    replicates: int,
    systems=SYSTEMS,
    variants=VARIANTS,
    settings: CalibrationSettings | None = None,
    scheduler: str | None = None,
    n_workers: int | None = None,
    progress: bool = True,
) -> list[dict]:
    """Run (or resume) SBC: ``replicates`` per (system, variant) (rounded up to whole batches of
    ``settings.batch_size``), one dask task per batch.

    Records go to ``out_dir/batches/<id>.json``; finished ones with the same settings are kept,
    except batches of the earlier joint Newton MAP that did not converge (fitted again).
    Returns the finished batch records of the requested grid.
    """
    # dask is imported here on purpose: only the sweep itself needs it
    from dask.distributed import as_completed

    if replicates < 1:
        raise ValueError(f"replicates must be >= 1, got {replicates}")
    settings_dict = (settings or CalibrationSettings()).to_dict()
    rep_dir = Path(out_dir) / "batches"
    rep_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(rep_dir)  # of killed runs only: a live one may write here too
    n_batches = -(-replicates // settings_dict["batch_size"])
    grid = [(s, v, b) for s in systems for v in variants for b in range(n_batches)]
    records, todo = {}, []
    for cell in grid:
        path = rep_dir / f"{batch_id(*cell)}.json"
        record = _read(path)
        if (
            record
            and record["status"] == "ok"
            and record["settings"] == settings_dict
            # batches of the joint Newton that did not converge are fitted again
            and (
                record["metrics"].get("map_converged", True)
                or "map_converged_replicates" in record["metrics"]
            )
        ):
            records[cell] = record
        else:
            todo.append(cell)
    started = time.perf_counter()
    kept = len(records)
    if todo:
        with sweep_client(scheduler, n_workers) as client:
            futures = []
            try:
                futures = [
                    client.submit(
                        _run_one,
                        *cell,
                        settings_dict,
                        str(rep_dir / f"{batch_id(*cell)}.json"),
                        key=f"sbc-{batch_id(*cell)}",
                        pure=False,
                    )
                    for cell in todo
                ]
                for future in as_completed(futures, loop=client.loop):
                    record = future.result()
                    if record["status"] == "ok":
                        records[(record["system"], record["variant"], record["batch"])] = record
                    if progress:
                        done, total = len(records), len(grid)
                        ran = done - kept
                        left = (time.perf_counter() - started) / max(ran, 1) * (total - done)
                        print(
                            f"\rSBC {done}/{total} batches ({kept} kept)  left ~{left / 60:.0f} min",
                            end="",
                            file=sys.stderr,
                            flush=True,
                        )
            finally:
                for future in futures:
                    future.cancel()
        if progress:
            print(file=sys.stderr)
    return [records[c] for c in grid if c in records]


def load_records(out_dir) -> list[dict]:
    """Every finished batch record under ``out_dir/batches``."""
    rep_dir = Path(out_dir) / "batches"
    if not rep_dir.is_dir():
        raise ValueError(f"{rep_dir} does not exist: run the calibration into {out_dir} first")
    records = [_read(p) for p in sorted(rep_dir.glob("*.json"))]
    return [r for r in records if r and r["status"] == "ok"]


def _too_few_consistent(rep: dict, settings: dict) -> bool:
    """Whether a replicate had fewer than ``L`` posterior draws with a consistent body."""
    count = round(rep.get("consistent_draws", 1.0) * settings["num_samples"])  # as recorded
    return count < settings["ranks"]


def _replicates(records: list[dict]) -> dict[tuple, list[dict]]:
    """Batch records flattened to ``{(system, variant): [replicate, ...]}`` (each with ``ranks``).

    Replicates whose Newton MAP did not converge (NUTS then started from a non-stationary point
    with a floored metric) are left out (in records without per-replicate flags, the whole
    batch), and so are replicates whose own NUTS chain diverged (a fit that reports divergences
    is not converged, as a user would be told), and replicates with fewer than ``L`` draws of a
    consistent body. These choices depend on the data and the
    sampler's randomness only, never on the truth, so the ranks of the kept replicates stay
    uniform under a correct posterior (given the data, the truth is a draw from it);
    :func:`batch_table` reports how many were left out.
    """
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        metrics = r["metrics"]
        batch_ok = metrics.get("map_converged", True)
        for rep in metrics["replicates"]:
            if (
                not rep.get("map_converged", batch_ok)
                or rep.get("divergences", 0) > 0
                or _too_few_consistent(rep, r["settings"])
            ):
                continue
            groups.setdefault((r["system"], r["variant"]), []).append(
                dict(rep, ranks=r["settings"]["ranks"])
            )
    return groups


def summarise(records: list[dict], *, bins: int = 10, alpha: float = 0.01) -> list[dict]:
    """Per (system, variant, quantity): rank uniformity and coverage (batches whose MAP did not
    converge are left out).

    Uniformity: chi-square test of the ranks in ``bins`` bins (integer edges, expected counts
    proportional to the number of rank values in each) against uniform; a quantity
    fails when its p-value is below ``alpha / m`` (Bonferroni over the ``m`` quantities of its
    (system, variant)). Coverage: fraction of replicates whose central 50 % / 90 % interval holds
    the truth, with the binomial standard error ``sqrt(p (1 - p) / R)``.
    """
    groups = _replicates(records)
    rows = []
    for (system, variant), recs in sorted(groups.items()):
        L = recs[0]["ranks"]
        names = list(recs[0]["quantities"])
        m = len(names)
        for name in names:
            q = [r["quantities"][name] for r in recs]
            ranks = np.array([x["rank"] for x in q])
            # ranks take the L + 1 values 0..L: integer bin edges, expected counts by bin width
            edges = np.round(np.linspace(0, L + 1, bins + 1))
            counts = np.histogram(ranks, bins=edges)[0]
            expected = len(ranks) * np.diff(edges) / (L + 1)
            p = float(stats.chisquare(counts, expected).pvalue)
            R = len(q)
            in50 = float(np.mean([x["in50"] for x in q]))
            in90 = float(np.mean([x["in90"] for x in q]))
            z2 = _squared_z(q)
            rows.append(
                {
                    "system": system,
                    "variant": variant,
                    "quantity": name,
                    "replicates": R,
                    "chi2_p": p,
                    "uniform": p >= alpha / m,
                    "cover50": in50,
                    "cover50_se": float(np.sqrt(0.5 * 0.5 / R)),
                    "cover90": in90,
                    "cover90_se": float(np.sqrt(0.9 * 0.1 / R)),
                    "z2": float(np.mean(z2)) if z2.size else float("nan"),
                    "z2_se": float(np.std(z2) / np.sqrt(z2.size)) if z2.size else float("nan"),
                }
            )
    return rows


def _squared_z(quantities: list[dict]) -> np.ndarray:
    """``((truth - posterior mean) / posterior sd)^2`` of each replicate (records with moments).

    Under a calibrated posterior its expectation is exactly 1 (given the data the truth is a
    draw from the posterior), whatever the posterior's shape: a mean above 1 says intervals too
    narrow or shifted, below 1 too wide.
    """
    q = [x for x in quantities if "mean" in x and x.get("sd", 0) > 0]
    return np.array([((x["truth"] - x["mean"]) / x["sd"]) ** 2 for x in q])


def coverage_outside(R: int, *, nominal: float = 0.9, band=(0.85, 0.95)) -> float:
    """Probability that the observed coverage of ``R`` replicates falls outside ``band`` when
    the intervals cover exactly ``nominal`` (binomial): what chance alone gives per quantity."""
    lo = np.ceil(band[0] * R - 1e-9)  # smallest count inside
    hi = np.floor(band[1] * R + 1e-9)  # largest count inside
    inside = stats.binom.cdf(hi, R, nominal) - stats.binom.cdf(lo - 1, R, nominal)
    return float(1.0 - inside)


def cell_summary(rows: list[dict], *, band=(0.85, 0.95)) -> list[dict]:
    """Per (system, variant): pooled 90 % coverage, mean squared z, and how many quantities lie
    outside the coverage ``band`` beside the number exact calibration would put there by chance
    (the sum of :func:`coverage_outside` over the quantities)."""
    cells: dict[tuple, list[dict]] = {}
    for r in rows:
        cells.setdefault((r["system"], r["variant"]), []).append(r)
    out = []
    for (system, variant), rs in sorted(cells.items()):
        outside = [r for r in rs if not band[0] <= r["cover90"] <= band[1]]
        out.append(
            {
                "system": system,
                "variant": variant,
                "quantities": len(rs),
                "replicates": min(r["replicates"] for r in rs),
                "cover90": float(np.mean([r["cover90"] for r in rs])),
                "z2": float(np.nanmean([r["z2"] for r in rs])),
                "outside": [r["quantity"] for r in outside],
                "expected_outside": sum(coverage_outside(r["replicates"], band=band) for r in rs),
                "uniform_fail": [r["quantity"] for r in rs if not r["uniform"]],
            }
        )
    return out


def summary_table(rows: list[dict], *, alpha: float = 0.01) -> str:
    """Markdown table of :func:`summarise` rows."""
    lines = [
        f"Uniformity: chi-square on 10 rank bins, Bonferroni over the quantities of each "
        f"(system, variant) at family-wise alpha = {alpha}. Coverage: fraction of replicates "
        "whose central interval holds the truth (binomial se of the nominal rate in brackets).",
        "",
        "E z^2: mean of ((truth - posterior mean) / posterior sd)^2, exactly 1 under calibration "
        "(its standard error in brackets).",
        "",
        "| system | variant | quantity | R | chi2 p | uniform | 50 % cover | 90 % cover | E z^2 |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['system']} | {r['variant']} | {r['quantity']} | {r['replicates']} | "
            f"{r['chi2_p']:.3f} | {'yes' if r['uniform'] else 'NO'} | {r['cover50']:.2f} "
            f"(+-{r['cover50_se']:.2f}) | {r['cover90']:.2f} (+-{r['cover90_se']:.2f}) | "
            f"{r.get('z2', float('nan')):.2f} (+-{r.get('z2_se', float('nan')):.2f}) |"
        )
    cells = cell_summary(rows)
    lines += [
        "",
        "Per (system, variant): pooled 90 % coverage, mean E z^2, quantities whose 90 % coverage "
        "lies outside [0.85, 0.95] and how many exact calibration puts there by chance "
        "(binomial, summed over the quantities), quantities failing uniformity.",
        "",
        "| system | variant | quantities | R | pooled 90 % cover | E z^2 | outside [0.85, 0.95] "
        "| expected by chance | not uniform |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in cells:
        lines.append(
            f"| {c['system']} | {c['variant']} | {c['quantities']} | {c['replicates']} | "
            f"{c['cover90']:.3f} | {c['z2']:.2f} | {len(c['outside'])} "
            f"{'(' + ', '.join(c['outside']) + ')' if c['outside'] else ''} | "
            f"{c['expected_outside']:.1f} | {', '.join(c['uniform_fail']) or 'none'} |"
        )
    return "\n".join(lines)


def batch_table(records: list[dict]) -> str:
    """Markdown table of the fits per (system, variant): batches, divergences and the
    replicates whose chain had any (left out of the summary), leapfrog steps per draw (per
    batch), replicates left out because their own Newton MAP did not converge, the mean
    fraction of draws with a consistent body and the replicates left out for fewer than ``L``."""
    cells: dict[tuple, list[dict]] = {}
    for r in records:
        cells.setdefault((r["system"], r["variant"]), []).append(r)
    lines = [
        "| system | variant | batches | divergences (replicates with any) | leapfrog / draw "
        "(median, max) | MAP not converged | consistent draws (replicates < L) | seconds per "
        "batch (median) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (system, variant), cell in sorted(cells.items()):
        ms = [r["metrics"] for r in cell]
        reps = [rep for m in ms for rep in m["replicates"]]
        per_replicate = all("divergences" in rep for rep in reps)  # else: counts per batch
        div = (
            [rep["divergences"] for rep in reps]
            if per_replicate
            else [m["divergences"] for m in ms]
        )
        steps = [m["leapfrog_per_draw"] for m in ms]
        failed = sum(not rep.get("map_converged", True) for m in ms for rep in m["replicates"])
        seconds = [r["seconds"] for r in cell]
        consistent = np.mean([rep.get("consistent_draws", 1.0) for rep in reps])
        few = sum(
            _too_few_consistent(rep, r["settings"])
            for r in cell
            for rep in r["metrics"]["replicates"]
        )
        consistent_text = f"{consistent:.3f} ({few})"
        lines.append(
            f"| {system} | {variant} | {len(ms)} | {sum(div)} ({sum(d > 0 for d in div)}) | "
            f"{np.median(steps):.0f}, {max(steps):.0f} | {failed} | {consistent_text} | "
            f"{np.median(seconds):.0f} |"
        )
    return "\n".join(lines)


def plot_ranks(records: list[dict], path, *, bins: int = 10) -> None:
    """Rank histograms (one panel per quantity and (system, variant)) with the 99 % band of a
    uniform histogram (binomial quantiles), written atomically as PNG."""
    groups = _replicates(records)
    panels = [(key, name) for key, recs in sorted(groups.items()) for name in recs[0]["quantities"]]
    cols = 4
    rows = max(1, -(-len(panels) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax in axes.flat[len(panels) :]:
        ax.axis("off")
    for ax, (key, name) in zip(axes.flat, panels, strict=False):
        recs = groups[key]
        L = recs[0]["ranks"]
        ranks = [r["quantities"][name]["rank"] for r in recs]
        R = len(ranks)
        lo, hi = stats.binom.ppf([0.005, 0.995], R, 1 / bins)
        ax.axhspan(lo, hi, color="0.85")
        ax.axhline(R / bins, color="0.5", lw=0.8)
        ax.hist(ranks, bins=bins, range=(0, L + 1), color="C0", edgecolor="white")
        ax.set_title(f"{key[0]} {key[1].split('/')[1]}\n{name}", fontsize=7)
        ax.tick_params(labelsize=6)
    fig.tight_layout()
    write_atomic(path, lambda f: fig.savefig(f, format="png", dpi=90))
    plt.close(fig)
