"""The result of a fit: an ArviZ ``xarray.DataTree`` plus what is needed to rebuild the model.

Groups (ArviZ conventions, dims ``chain``, ``draw`` first):

- ``posterior``: the model's latent sites (virtual parameters) and the physical quantities of each
  draw from ``bayes_model.physical`` (``theta`` (joint, theta_param), ``rpy``, ``xyz``, friction
  coefficients, ...), plus, where ``theta`` is reported, ``mass`` (joint), ``com`` (joint, axis),
  ``inertia`` (joint, inertia_component; about the body origin, order ``I_xx, I_xy, I_yy, I_xz,
  I_yz, I_zz``) and, when the kinematics are not learned, the identified ``base_parameters``
  ``beta = B theta`` (Gautier 1991; :func:`bayes_nea.base_parameters`).
- ``sample_stats``: NUTS: ``diverging``, ``tree_depth``, ``reached_max_tree_depth``, ``n_steps``,
  ``energy``, ``lp``, ``acceptance_rate``, ``step_size``. SVI: none (the loss trace is the
  ``svi_loss`` group, dim ``step``).
- ``log_likelihood``: pointwise log likelihood of each observed site (``numpyro.infer.log_likelihood``).
- ``observed_data``: the observed sites' values; ``constant_data``: the fitted ``q, qd, qdd, tau``.
- ``posterior_predictive``: draws of the observed sites from ``numpyro.infer.Predictive`` on an
  evenly thinned subset of the posterior draws (its ``draw`` coordinate names the draws used).
- ``svi_state`` / ``nuts_state``: the optimiser or sampler state, to resume or extend a fit.

NumPyro site names may contain ``/`` (name scopes); xarray forbids it in variable names, so ``/``
is stored as ``.`` and the root attribute ``site_names`` maps stored names back to site names.
Root attributes (JSON strings where structured) hold variant, system, likelihood, method, seed,
settings, dataset summary, data fingerprint, package versions and the robot as URDF text.
"""

from __future__ import annotations

import dataclasses
import json
import os
from importlib import metadata

import arviz as az  # noqa: I001  (after numpyro)
import jax
import jax.numpy as jnp
import numpy as np
import numpyro  # (NumPyro before ArviZ: see inference/__init__.py)
import xarray as xr
from numpyro import handlers
from numpyro.infer import Predictive, log_likelihood
from numpyro.infer.initialization import init_to_mean

import bayes_nea as bn
from bayes_nea.spatial import THETA_NAMES
from data.io import checksum_arrays, write_atomic
from models import ModelSpec, build
from models.actuators import NETWORK_FORMAT, reshaped_since

SCHEMA_VERSION = 2  # 2: the complete model spec is stored (``model_spec``)
INERTIA_COMPONENTS = ("I_xx", "I_xy", "I_yy", "I_xz", "I_yz", "I_zz")
XYZ = ("x", "y", "z")
METHODS = ("svi", "nuts")
_PACKAGES = ("bayes-nea", "jax", "numpyro", "arviz", "optax", "xarray", "numpy")


def stored_name(site: str) -> str:
    """A NumPyro site name as an xarray variable name (``/`` becomes ``.``)."""
    return site.replace("/", ".")


def package_versions() -> dict[str, str]:
    """Installed versions of the packages a result depends on."""
    out = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def trace_sites(bayes_model, data, sample: dict | None = None) -> tuple[dict, dict]:
    """Latent and observed sites of one run of the model on ``data`` (latents at their prior
    means unless ``sample`` gives them; the likelihood's arguments are not validated, since the
    prior mean may be a degenerate point, e.g. weak-prior placements with the rail along gravity).

    Returns:
        ``(latent, observed)``: ``{site name: value}`` for the non-observed sample sites (shapes of
        one draw) and for the observed ones (the observed values).
    """
    model = handlers.substitute(bayes_model.model, substitute_fn=init_to_mean)
    if sample is not None:
        model = handlers.substitute(model, data=sample)
    with numpyro.validation_enabled(False):
        tr = handlers.trace(handlers.seed(model, jax.random.PRNGKey(0))).get_trace(data)
    latent, observed = {}, {}
    for name, site in tr.items():
        if site["type"] != "sample" or site.get("infer", {}).get("is_auxiliary"):
            continue
        (observed if site["is_observed"] else latent)[name] = site["value"]
    return latent, observed


def _dims(name: str, shape: tuple, *, n: int, n_obs: int | None = None) -> tuple[str, ...]:
    """Dimension names for a variable of one draw with ``shape``."""
    if name == "theta" and shape[-1:] == (10,) and len(shape) == 2:
        return ("joint", "theta_param")
    if name in ("com", "rpy", "xyz") and shape == (n, 3):
        return ("joint", "axis")
    if name == "inertia" and shape == (n, 6):
        return ("joint", "inertia_component")
    if name == "base_parameters":
        return ("base_parameter",)
    dims = []
    for k, size in enumerate(shape):
        if k == 0 and n_obs is not None and size == n_obs:
            dims.append("obs_index")
        elif (
            size == n
            and "joint" not in dims
            and (k == len(shape) - 1 or (k == 0 and n_obs is None))
        ):
            dims.append("joint")
        else:
            dims.append(f"{stored_name(name)}_dim_{k}")
    return tuple(dims)


def _dataset(values: dict, *, n: int, sample_dims: tuple[str, ...], n_obs=None, coords=None):
    variables = {}
    for name, value in values.items():
        arr = np.asarray(value)
        dims = sample_dims + _dims(name, arr.shape[len(sample_dims) :], n=n, n_obs=n_obs)
        variables[stored_name(name)] = (dims, arr)
    ds = xr.Dataset(variables)
    return ds.assign_coords({k: v for k, v in (coords or {}).items() if k in ds.dims})


def physical_quantities(
    bayes_model, flat: dict, *, base: bool = True, key=None
) -> dict[str, np.ndarray]:
    """Physical quantities of each draw: ``bayes_model.physical`` vmapped, plus derived ones.

    Args:
        bayes_model: the model.
        flat: latent sites with one leading draw axis (D, ...).
        base: add base parameters when ``theta`` is reported and the kinematics are not learned.
        key: ``jax.random`` key for models with a ``complete(key, flat)`` method (the
            identifiable geometry, ``models.identifiable``: theta of each draw from the prior
            given its base parameters); such models' completion is skipped without a key.

    Returns:
        ``{name: (D, ...)}``: the model's physical quantities, and from ``theta`` (D, n, 10):
        ``mass`` (D, n), ``com`` (D, n, 3) (``h / m``), ``inertia`` (D, n, 6) and
        ``base_parameters`` (D, b).
    """
    phys = jax.jit(jax.vmap(bayes_model.physical))(flat)
    out = {k: np.asarray(v) for k, v in phys.items()}
    complete = getattr(bayes_model, "complete", None)
    if complete is not None and key is not None:
        out.update(complete(key, flat))
    if "base_parameters" in out and getattr(bayes_model, "base_names", None) is not None:
        out["_base_names"] = np.asarray(bayes_model.base_names)
        base = False
    theta = out.get("theta")
    robot = bayes_model.robot
    if theta is not None and theta.shape[1:] == (robot.n, 10):
        mass = theta[..., 0]
        out["mass"] = mass
        with np.errstate(divide="ignore", invalid="ignore"):
            out["com"] = np.where(mass[..., None] > 0, theta[..., 1:4] / mass[..., None], np.nan)
        out["inertia"] = theta[..., 4:10]
        if base and not learns_kinematics(bayes_model):
            bp = bn.base_parameters(robot, 0)
            flat_theta = theta.reshape(theta.shape[0], -1).astype(np.float64)
            out["base_parameters"] = flat_theta @ np.asarray(bp.to_base).T
            out["_base_names"] = np.asarray(bp.names)
    return out


def learns_kinematics(bayes_model) -> bool:
    """Whether the model's joint placements are latent (no-Kin DiffNEA), so base parameters move."""
    return bool(getattr(getattr(bayes_model, "family", None), "learns_kinematics", False))


def build_idata(
    bayes_model,
    data,
    samples: dict,
    *,
    key,
    sample_stats: dict | None = None,
    num_predictive: int = 200,
    compute_log_likelihood: bool = True,
    attrs: dict,
    extra_groups: dict | None = None,
    complete: bool = True,
) -> xr.DataTree:
    """Assemble the ArviZ DataTree of a fit (see the module docstring for the groups).

    Args:
        bayes_model: the fitted model.
        data: the data it was fitted to (fields ``q, qd, qdd, tau`` (N, n)).
        samples: latent sites ``{name: (C, D, ...)}`` (chains, draws).
        key: ``jax.random`` key for the posterior predictive draws.
        sample_stats: ``{name: (C, D)}`` sampler statistics, or None.
        num_predictive: at most this many draws (evenly thinned per chain) for the predictive.
        compute_log_likelihood: add the ``log_likelihood`` group (C x D x N values per site).
        attrs: root attributes (JSON-able values; dicts and lists are JSON-encoded).
        extra_groups: further ``{group: xr.Dataset}`` (states, loss traces).
        complete: complete every draw's theta and virtual parameters where the model has a
            ``complete`` method (:func:`physical_quantities`); False leaves them out.
    """
    robot = bayes_model.robot
    n = robot.n
    n_obs = int(np.shape(data.q)[0])
    first = {k: jnp.asarray(v)[0, 0] for k, v in samples.items()}
    latent, observed = trace_sites(bayes_model, data, first)
    missing = sorted(set(latent) - set(samples))
    if missing:
        raise ValueError(f"posterior samples lack the model's latent sites {missing}")
    C, D = np.shape(next(iter(samples.values())))[:2]
    flat = {k: jnp.reshape(jnp.asarray(v), (C * D, *np.shape(v)[2:])) for k, v in samples.items()}
    coords = {
        "chain": np.arange(C),
        "draw": np.arange(D),
        "joint": list(robot.joint_names),
        "theta_param": list(THETA_NAMES),
        "axis": list(XYZ),
        "inertia_component": list(INERTIA_COMPONENTS),
    }
    phys = physical_quantities(
        bayes_model, flat, key=jax.random.fold_in(key, 1) if complete else None
    )
    base_names = phys.pop("_base_names", None)
    if base_names is not None:
        coords["base_parameter"] = [str(s) for s in base_names]
    clash = sorted(set(phys) & set(samples))
    phys = {(f"{k}_physical" if k in clash else k): v for k, v in phys.items()}
    post = {k: np.asarray(v) for k, v in samples.items()}
    post.update({k: v.reshape(C, D, *v.shape[1:]) for k, v in phys.items()})
    sample_dims = ("chain", "draw")
    groups = {"posterior": _dataset(post, n=n, sample_dims=sample_dims, coords=coords)}
    if sample_stats:
        groups["sample_stats"] = _dataset(sample_stats, n=n, sample_dims=sample_dims, coords=coords)
    if compute_log_likelihood:
        ll = log_likelihood(bayes_model.model, flat, data)
        ll = {k: np.asarray(v).reshape(C, D, *np.shape(v)[1:]) for k, v in ll.items()}
        groups["log_likelihood"] = _dataset(
            ll, n=n, sample_dims=sample_dims, n_obs=n_obs, coords=coords
        )
    groups["observed_data"] = _dataset(observed, n=n, sample_dims=(), n_obs=n_obs, coords=coords)
    groups["constant_data"] = _dataset(
        {f: getattr(data, f) for f in ("q", "qd", "qdd", "tau")},
        n=n,
        sample_dims=(),
        n_obs=n_obs,
        coords=coords,
    )
    if num_predictive > 0 and observed:
        per_chain = max(1, min(D, num_predictive // C))
        idx = np.unique(np.linspace(0, D - 1, per_chain).round().astype(int))
        thin = {k: jnp.asarray(v)[:, idx] for k, v in samples.items()}
        thin_flat = {k: v.reshape(C * len(idx), *v.shape[2:]) for k, v in thin.items()}
        # uncondition: draw the observed sites anew instead of returning the observations
        pred = Predictive(
            handlers.uncondition(bayes_model.model),
            posterior_samples=thin_flat,
            return_sites=list(observed),
        )
        draws = pred(key, data)
        draws = {k: np.asarray(v).reshape(C, len(idx), *np.shape(v)[1:]) for k, v in draws.items()}
        pp_coords = dict(coords, draw=idx)
        groups["posterior_predictive"] = _dataset(
            draws, n=n, sample_dims=sample_dims, n_obs=n_obs, coords=pp_coords
        )
    for name, ds in (extra_groups or {}).items():
        groups[name] = ds
    site_names = {stored_name(s): s for s in [*samples, *observed]}
    root = dict(attrs)
    root.update(
        schema_version=SCHEMA_VERSION,
        latent_sites=sorted(samples),
        observed_sites=sorted(observed),
        physical_names=sorted(phys),
        site_names=site_names,
        energy_class=str(getattr(bayes_model, "energy_class", "unknown")),
        robot_name=robot.name,
        geometry=str(getattr(bayes_model.spec, "geometry", "whitened")),
        family_learns_kinematics=learns_kinematics(bayes_model),
        robot_urdf=bn.to_urdf(robot),
        joint_names=list(robot.joint_names),
        packages=package_versions(),
        x64=bool(jax.config.jax_enable_x64),
    )
    encoded = {
        k: (json.dumps(v) if isinstance(v, dict | list | tuple | bool) or v is None else v)
        for k, v in root.items()
    }
    tree = xr.DataTree.from_dict({f"/{k}": v for k, v in groups.items()})
    tree.attrs = encoded
    return tree


def _decode(value):
    if isinstance(value, str) and value[:1] in ("{", "[") or value in ("true", "false", "null"):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


@dataclasses.dataclass(frozen=True, eq=False)
class FitResult:
    """One fit: the ArviZ DataTree and the names that identify what was fitted.

    Fields:
        idata: ``xarray.DataTree`` with the groups listed in this module's docstring.
        variant: the model variant's name (e.g. ``"diffnea/viscous/informative"``).
        system: the robot's name (``"cartpole"``, ``"furuta"`` or a user's robot).
        method: ``"svi"`` or ``"nuts"``.
    """

    idata: xr.DataTree
    variant: str
    system: str
    method: str

    @property
    def attrs(self) -> dict:
        """Root attributes, JSON-decoded."""
        return {k: _decode(v) for k, v in self.idata.attrs.items()}

    @property
    def latent_sites(self) -> tuple[str, ...]:
        """Names of the model's latent sites (virtual parameters)."""
        return tuple(self.attrs["latent_sites"])

    @property
    def physical_names(self) -> tuple[str, ...]:
        """Names of the physical quantities in the posterior group."""
        return tuple(self.attrs["physical_names"])

    @property
    def num_chains(self) -> int:
        return int(self.idata["posterior"].sizes["chain"])

    @property
    def num_draws(self) -> int:
        return int(self.idata["posterior"].sizes["draw"])

    def ensemble_members(self) -> dict[str, jax.Array] | None:
        """An ensemble fit's kept members ``{site: (R, ...)}`` (``fit_svi(guide="ensemble")``,
        group ``ensemble``), else None. Average the members' *predictions* (weighted by
        :meth:`ensemble_weights`), never their weights: each member is its own mode."""
        if "ensemble" not in self.idata.children:
            return None
        group = self.idata["ensemble"]
        return {s: jnp.asarray(group[stored_name(s)].values) for s in self.latent_sites}

    def ensemble_weights(self) -> np.ndarray | None:
        """The mixture weight of each of :meth:`ensemble_members` (R,) (0 for a member whose
        optimisation failed, equal for the others), else None. The draws carry them rounded
        (``attrs["ensemble"]["draw_member"]``)."""
        if "ensemble" not in self.idata.children:
            return None
        return np.asarray(self.idata["ensemble"]["weight"].values)

    def consistent(self) -> np.ndarray | None:
        """``(C, D)`` bool: the draws whose base parameters a physically consistent body has
        (``completion_ok`` of the identifiable geometry's completion), or None where the draws
        were not completed (other geometries, ``complete=False``).

        The identifiable models' prior on the base parameters is truncated to those of
        consistent bodies (``IdentifiableModel.sample_prior``), while NUTS samples the
        untruncated density: the posterior is the chains' draws restricted to this set, exactly
        (the indicator multiplies the density, so keeping the draws inside it is rejection
        sampling). The flat samples below are those draws; the chains keep all of theirs.
        """
        post = self.idata["posterior"]
        if "completion_ok" not in post:
            return None
        return np.asarray(post["completion_ok"].values, dtype=bool)

    def _flat(self, values: dict, consistent_only: bool) -> dict:
        """``{name: (C, D, ...)}`` -> ``{name: (K, ...)}``: all ``K = C * D`` draws, or the
        consistent ones (:meth:`consistent`) where ``consistent_only``."""
        keep = self.consistent() if consistent_only else None
        if keep is None:
            return {k: v.reshape(-1, *v.shape[2:]) for k, v in values.items()}
        if not keep.any():
            raise ValueError(
                f"no draw of this {self.variant!r} fit has base parameters that a physically "
                "consistent body has (completion_margin in the posterior says by how much they "
                "miss): the model does not fit the data (try a richer variant, e.g. "
                "diffnea/stribeck/...); consistent_only=False returns the draws anyway"
            )
        idx = np.flatnonzero(keep.reshape(-1))
        return {k: v.reshape(-1, *v.shape[2:])[idx] for k, v in values.items()}

    def posterior_samples(
        self, *, group_by_chain: bool = False, consistent_only: bool = True
    ) -> dict[str, jax.Array]:
        """Latent sites ``{site name: (K, ...)}``: the posterior's draws, for the identifiable
        geometry only those with a consistent body (:meth:`consistent`; ``consistent_only=False``
        for all ``C * D``). Grouped by chain: the sampler's chains ``(C, D, ...)``, every draw
        (for diagnostics and for continuing them).

        Feed one draw (``jax.tree.map(lambda x: x[i], samples)``) or all of them through
        ``jax.vmap`` to ``bayes_model.physical`` or ``bayes_model.qdd_fn``.

        Raises:
            ValueError: ``consistent_only`` and no draw has a consistent body.
        """
        post = self.idata["posterior"]
        out = {site: jnp.asarray(post[stored_name(site)].values) for site in self.latent_sites}
        return out if group_by_chain else self._flat(out, consistent_only)

    def physical_samples(
        self, *, group_by_chain: bool = False, consistent_only: bool = True
    ) -> dict[str, np.ndarray]:
        """Physical quantities ``{name: (K, ...)}``, the same draws as :meth:`posterior_samples`
        (``(C, D, ...)`` grouped by chain)."""
        post = self.idata["posterior"]
        out = {name: np.asarray(post[name].values) for name in self.physical_names}
        return out if group_by_chain else self._flat(out, consistent_only)

    def spec(self) -> ModelSpec:
        """The complete ``models.ModelSpec`` of the fitted model, robot included.

        Raises:
            ValueError: the result holds no spec (fitted with a model that is not built from one).
        """
        stored = self.attrs.get("model_spec")
        if stored is None:
            raise ValueError(
                f"this {self.variant!r} result holds no model spec (its model was not built by "
                "models.build_model), so the model cannot be rebuilt"
            )
        return ModelSpec.from_dict(stored) if isinstance(stored, dict) else ModelSpec.from_json(stored)

    def robot(self) -> bn.Robot:
        """The fitted robot exactly as it was fitted (stored in the spec, never looked up by name)."""
        return self.spec().robot

    def model(self):
        """The model that was fitted, rebuilt from the stored spec (``models.build``).

        Raises:
            ValueError: the rebuilt model's base parameters are not the stored ones (a fit
                written by a version whose choice of base columns could differ between CPUs).
        """
        model = build(self.spec())
        post = self.idata["posterior"] if "posterior" in self.idata.children else None
        stored = None if post is None else post.coords.get("base_parameter")
        names = getattr(model, "base_names", None)
        if stored is not None and names is not None and list(stored.values) != list(names):
            raise ValueError(
                f"the base parameters stored in this result ({list(stored.values)}) are not the "
                f"ones of its rebuilt model ({list(names)}): it was written by an earlier "
                "bayes-nea whose choice of base parameters depended on the CPU; refit it"
            )
        return model

    def data(self) -> dict[str, np.ndarray]:
        """The fitted arrays ``{"q", "qd", "qdd", "tau"}``, each (N, n)."""
        cd = self.idata["constant_data"]
        return {f: np.asarray(cd[f].values) for f in ("q", "qd", "qdd", "tau")}

    def diagnostics(self) -> dict:
        """Convergence diagnostics of the posterior's latent sites.

        Returns:
            ``{"rhat_max", "ess_bulk_min", "ess_tail_min", "divergences", "max_tree_depth_hits",
            "num_chains", "num_draws"}``, and ``"consistent_fraction"`` where the draws were
            completed (:meth:`consistent`); R-hat and ESS (rank-normalised, Vehtari et al.
            2021, ArviZ) are ``nan`` with fewer than 2 chains or 4 draws; counts are 0 for SVI.
        """
        post = self.idata["posterior"].to_dataset()[[stored_name(s) for s in self.latent_sites]]
        C, D = self.num_chains, self.num_draws
        out = {"num_chains": C, "num_draws": D}
        if C >= 2 and D >= 4:
            rhat = az.rhat(post)
            ess_bulk = az.ess(post, method="bulk")
            ess_tail = az.ess(post, method="tail")
            out["rhat_max"] = float(max(float(rhat[v].max()) for v in rhat.data_vars))
            out["ess_bulk_min"] = float(min(float(ess_bulk[v].min()) for v in ess_bulk.data_vars))
            out["ess_tail_min"] = float(min(float(ess_tail[v].min()) for v in ess_tail.data_vars))
        else:
            out.update(rhat_max=float("nan"), ess_bulk_min=float("nan"), ess_tail_min=float("nan"))
        stats = self.idata["sample_stats"] if "sample_stats" in self.idata.children else None
        out["divergences"] = int(stats["diverging"].sum()) if stats is not None else 0
        hits = (
            stats["reached_max_tree_depth"]
            if stats is not None and "reached_max_tree_depth" in stats
            else None
        )
        out["max_tree_depth_hits"] = int(hits.sum()) if hits is not None else 0
        consistent = self.consistent()
        if consistent is not None:
            out["consistent_fraction"] = float(consistent.mean())
        return out

    def summary(self, *, physical: bool = True, var_names=None):
        """``arviz.summary`` (mean, sd, 89% ETI, MCSE, ESS, R-hat) as a pandas DataFrame.

        The physical quantities are summarised over the posterior's draws (:meth:`consistent`):
        each chain's consistent draws in order, cut to the shortest chain's count so that the
        chains stay comparable (R-hat and ESS of those sequences); the latent sites over every
        draw of the chains.

        Args:
            physical: summarise the physical quantities (default) rather than the latent sites.
            var_names: restrict to these stored variable names.
        """
        fixed = () if self.attrs.get("family_learns_kinematics", False) else ("rpy", "xyz")
        names = var_names or (
            [k for k in self.physical_names if k not in fixed and not k.startswith("completion_")]
            if physical
            else [stored_name(s) for s in self.latent_sites]
        )
        post = self.idata["posterior"].to_dataset()[list(names)]
        keep = self.consistent() if physical else None
        if keep is not None and not keep.all():
            m = int(keep.sum(axis=1).min())
            if m == 0:
                raise ValueError(
                    f"a chain of this {self.variant!r} fit has no draw with a physically "
                    "consistent body: summarise the latent sites (physical=False)"
                )
            idx = xr.DataArray(
                np.stack([np.flatnonzero(row)[:m] for row in keep]), dims=("chain", "draw")
            )
            post = post.isel(draw=idx).assign_coords(draw=np.arange(m))
        return az.summary(xr.DataTree.from_dict({"/posterior": post}), group="posterior")


def result_from_tree(tree: xr.DataTree) -> FitResult:
    """Wrap a DataTree written by :func:`build_idata` (checks the schema version)."""
    version = tree.attrs.get("schema_version")
    try:
        version = int(version)
    except (TypeError, ValueError):
        raise ValueError("not a bayes-nea fit result (no valid schema_version attribute)") from None
    if version != SCHEMA_VERSION:
        raise ValueError(
            f"this result was written in format {version} and this bayes-nea reads format "
            f"{SCHEMA_VERSION} (format 1 did not store the complete model spec, so its model "
            "cannot be rebuilt exactly): fit it again"
        )
    missing = [k for k in ("variant", "system", "method") if k not in tree.attrs]
    if missing or "posterior" not in tree.children:
        raise ValueError(
            f"not a complete bayes-nea fit result (missing attributes {missing}"
            f"{'' if 'posterior' in tree.children else ' and the posterior group'})"
        )
    network_format = int(tree.attrs.get("network_format", 1))
    if reshaped_since(tree.attrs["variant"], network_format):
        raise ValueError(
            f"this result ({tree.attrs['variant']}) was fitted with network format "
            f"{network_format}, whose {tree.attrs['variant'].split('/')[1]!r} actuator had "
            f"another structure than this bayes-nea's (format {NETWORK_FORMAT}, "
            "models.actuators.NETWORK_FORMAT); its weights cannot be read into the current "
            "model: fit it again"
        )
    return FitResult(
        idata=tree,
        variant=str(tree.attrs["variant"]),
        system=str(tree.attrs["system"]),
        method=str(tree.attrs["method"]),
    )


CHECKSUM_ATTR = "array_checksum"
"""Root attribute holding the SHA-256 of every array and attribute of a saved result."""


def _canonical(values: np.ndarray) -> np.ndarray:
    """Values in a form that survives the netCDF round trip (strings as UTF-8 bytes)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "OUS":
        text = "\x1f".join(x.decode() if isinstance(x, bytes) else str(x) for x in arr.ravel())
        return np.frombuffer(text.encode("utf-8"), np.uint8)
    if arr.dtype.kind == "b":
        return arr.astype(np.uint8)
    return arr.astype(arr.dtype.newbyteorder("<"))


def tree_checksum(tree: xr.DataTree) -> str:
    """SHA-256 (hex) of a result tree: every group's variables and coordinates (name, dtype,
    shape, values) and every group's attributes except :data:`CHECKSUM_ATTR`."""

    def items():
        for node in sorted(tree.subtree, key=lambda nd: nd.path):
            ds = node.to_dataset()
            for name in sorted(map(str, ds.variables)):
                yield f"{node.path}:{name}", _canonical(ds.variables[name].values)
            attrs = {
                str(k): v if isinstance(v, str) else np.asarray(v).tolist()
                for k, v in node.attrs.items()
                if k != CHECKSUM_ATTR
            }
            text = json.dumps(attrs, sort_keys=True, default=str).encode("utf-8")
            yield f"{node.path}:attrs", np.frombuffer(text, np.uint8)

    return checksum_arrays(items())


def save_result(result: FitResult, path) -> None:
    """Write a result to ``path`` (netCDF 4 via h5netcdf), atomically, with a checksum.

    :func:`data.io.write_atomic` writes a temporary file in the target directory and renames it
    over ``path``, so an interrupted write never leaves a partial file and an existing file is
    untouched when writing fails. The root attribute :data:`CHECKSUM_ATTR` holds
    :func:`tree_checksum`, which :func:`load_result` verifies.

    Raises:
        ValueError: ``path`` is a directory or its directory does not exist or is not writable.
    """
    path = os.fspath(path)
    if not isinstance(result, FitResult):
        raise ValueError(f"save_result expects a FitResult, got {type(result).__name__}")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ValueError(f"cannot save result to {path!r}: directory {directory!r} does not exist")
    tree = result.idata.copy()
    tree.attrs = {k: v for k, v in tree.attrs.items() if k != CHECKSUM_ATTR}
    tree.attrs[CHECKSUM_ATTR] = tree_checksum(tree)
    write_atomic(
        path, lambda tmp: tree.to_netcdf(tmp, engine="h5netcdf"), by_path=True, create_dirs=False
    )


def load_result(path, *, verify: bool = True) -> FitResult:
    """Read a result written by :func:`save_result` (fully into memory; the file is closed).

    Args:
        verify: check the stored checksum of the arrays (:func:`tree_checksum`); ``False`` reads
            files written before results carried one.

    Raises:
        ValueError: the file does not exist, is not a bayes-nea result, is damaged, or its
            checksum is missing or does not match (a corrupted file).
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"result path {path!r} is a directory, not a result file")
    if not os.path.isfile(path):
        raise ValueError(f"no result file at {path!r}")
    with open(path, "rb") as f:
        head = f.read(8)
    if not head.startswith(b"\x89HDF"):
        what = "an .npz archive (a dataset?)" if head.startswith(b"PK") else "not netCDF 4/HDF5"
        raise ValueError(f"{path!r} is not a readable netCDF result: {what}")
    try:
        with xr.open_datatree(path, engine="h5netcdf") as tree:
            tree = tree.load().copy()
    except Exception as err:  # h5py raises many kinds on a damaged file
        raise ValueError(
            f"{path!r} is not a readable netCDF result (damaged? {type(err).__name__}: {err})"
        ) from None
    try:
        result_from_tree(tree)  # a bayes-nea result at all?
    except ValueError as err:
        raise ValueError(f"{path!r}: {err}") from None
    stored = tree.attrs.get(CHECKSUM_ATTR)
    if verify and stored is None:
        raise ValueError(
            f"{path!r} has no checksum (written by an older bayes-nea); re-save it, or read it "
            "unverified with inference.load_result(path, verify=False)"
        )
    if verify and tree_checksum(tree) != str(stored):
        raise ValueError(
            f"{path!r} is corrupted: the checksum of its arrays does not match the one stored "
            "when it was written"
        )
    tree.attrs = {k: v for k, v in tree.attrs.items() if k != CHECKSUM_ATTR}
    result = result_from_tree(tree)
    return result


__all__ = ["FitResult", "build_idata", "load_result", "save_result"]
