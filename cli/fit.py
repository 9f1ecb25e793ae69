"""``bayes-nea fit``: fit a model variant to a dataset file by SVI or NUTS and save the result."""

from __future__ import annotations

import sys

from cli._args import SEED, integer, real, student_df

HELP = "fit a model variant to a dataset (SVI or NUTS) and save the posterior as netCDF"


def add_arguments(parser) -> None:
    parser.add_argument("--variant", required=True, help="variant name (see `bayes-nea variants`)")
    parser.add_argument("--data", required=True, help="dataset file from `bayes-nea simulate`")
    parser.add_argument("--method", choices=("svi", "nuts"), default="svi")
    parser.add_argument("--out", required=True, help="result file (.nc), written atomically")
    parser.add_argument(
        "--likelihood",
        default=None,
        help="forward, forward-effort (noise on the effort too), inverse or rollout",
    )
    parser.add_argument(
        "--horizon", type=integer(1, 10**4), default=10, help="rollout likelihood: RK4 steps per window"
    )
    parser.add_argument("--noise", default="normal", help="noise model: normal or student-t")
    parser.add_argument(
        "--student-df",
        type=student_df,
        default=4.0,
        help="student-t noise: degrees of freedom, a number > 0 or 'learned' (one latent per "
        "joint: the data choose the tails) (default 4)",
    )
    parser.add_argument(
        "--tails",
        choices=("auto", "trained", "profiled"),
        default="auto",
        help="with --student-df learned: learn the degrees of freedom with the other values "
        "(trained) or, for a network variant's ensemble, train the weights with Normal-like "
        "errors and profile each member's tails after (profiled); auto (default): profiled "
        "where it applies",
    )
    parser.add_argument(
        "--geometry",
        default="whitened",
        help="latent geometry: whitened, centered or identifiable (base-parameter coordinates of "
        "white-box DiffNEA variants without networks: the geometry NUTS mixes in)",
    )
    parser.add_argument(
        "--guide",
        default="auto",
        help="SVI guide: auto (ensemble for network variants: MAPs from 4 prior draws, each "
        "stopped early; else delta), delta, normal, mvn, lowrank, ensemble",
    )
    parser.add_argument(
        "--steps", type=integer(1, 10**7), default=3000, help="SVI steps (default 3000)"
    )
    parser.add_argument(
        "--learning-rate",
        type=real(0.0, 10.0, open_low=True),
        default=1e-2,
        help="SVI learning rate",
    )
    parser.add_argument(
        "--validation",
        default="auto",
        help="SVI: fraction of the dataset's episodes held out for early stopping (the fit keeps "
        "the point where their likelihood is best; at least one episode; never the episodes with "
        "the largest speed of a joint or effort, which train); 0 turns it off; auto "
        "(default): 0.15 for variants with networks when the data have >= 3 episodes, else 0",
    )
    parser.add_argument(
        "--warmup", type=integer(0, 10**6), default=1000, help="NUTS warm-up steps per chain"
    )
    parser.add_argument(
        "--samples", type=integer(1, 10**6), default=1000, help="NUTS draws per chain"
    )
    parser.add_argument("--chains", type=integer(1, 256), default=2, help="NUTS chains (default 2)")
    parser.add_argument("--dense-mass", action="store_true", help="NUTS dense mass matrix")
    parser.add_argument(
        "--init",
        default=None,
        help="NUTS: start at a saved SVI fit of the same variant (e.g. from `fit --method svi`)",
    )
    parser.add_argument(
        "--metric",
        choices=(
            "auto", "adapt", "laplace", "laplace-adapt", "softplus-adapt", "laplace-curved",
            "laplace-curved-or-adapt",
        ),
        default="auto",
        help="NUTS inverse mass matrix: adapted in warm-up, the fixed Laplace metric at --init, "
        "a dense metric adapted from it, the same with friction coefficients in softplus "
        "coordinates, NUTS in a curved Laplace map (learned placements), or that map only where "
        "the posterior bends strongly (auto, the default: the model's choice with --init, else "
        "adapt)",
    )
    parser.add_argument(
        "--target-accept",
        type=real(0.0, 1.0, open_low=True),
        default=None,
        help="NUTS step-size target in (0, 1) (default: the model's: 0.95 for Stribeck friction "
        "in the identifiable geometry, 0.99 with learned placements, else 0.8)",
    )
    parser.add_argument(
        "--polish",
        action="store_true",
        help="SVI with the delta guide: finish with damped Newton steps to a checked MAP "
        "(gradient and Hessian tested; a dense Hessian: small models)",
    )
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--float32", action="store_true", help="run in float32 (BAYES_NEA_X64=0)")
    parser.add_argument(
        "--train-dtype",
        choices=("float32", "float64"),
        default=None,
        help="SVI: dtype of the optimisation steps only (float32: a network model's gradient "
        "costs about half on the CPU; everything after the steps runs in float64)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def completion_warning(consistent) -> str | None:
    """A warning when some draws of an identifiable-geometry fit have no consistent body;
    ``consistent``: ``FitResult.consistent()``, (C, D) bool or None (draws not completed)."""
    if consistent is None:
        return None
    missed = 1.0 - float(consistent.mean())
    if missed <= 0:
        return None
    return (
        f"warning: for {missed:.0%} of the draws no physically consistent body has their base "
        "parameters; the posterior leaves them out (its prior admits consistent bodies only; "
        "theta and virtual are NaN there, completion_margin < 0 says by how much they miss). "
        "Many such draws mean the friction or noise model may not fit the data (try a richer "
        "--variant, e.g. diffnea/stribeck/...)"
    )


def run(args) -> int:
    import os

    if args.float32:
        os.environ["BAYES_NEA_X64"] = "0"
    import numpyro

    # Parallel chains on a CPU need the host split into devices before JAX initialises; this is
    # the one place that does it (the library functions never change global state).
    if args.method == "nuts":
        numpyro.set_host_device_count(max(1, min(args.chains, os.cpu_count() or 1)))

    from data import load_dataset
    from data.io import check_output_path
    from inference import fit_nuts, fit_svi, load_result, save_result
    from models import build_model, data_scales, model_data

    # every check before the fit starts: the output path, the data, the model, the init
    check_output_path(args.out, "--out")
    if args.init is not None and args.method != "nuts":
        raise ValueError("--init starts NUTS; it is meaningless with --method svi")
    if args.polish and (args.method != "svi" or args.guide not in ("auto", "delta")):
        raise ValueError("--polish finishes an SVI MAP: it needs --method svi --guide delta")
    if args.target_accept is not None and args.target_accept >= 1.0:
        raise ValueError(f"--target-accept must be below 1, got {args.target_accept}")
    if args.train_dtype is not None and args.method != "svi":
        raise ValueError("--train-dtype sets the dtype of SVI's steps; it needs --method svi")
    if args.tails == "profiled" and (args.method != "svi" or args.student_df is not None):
        raise ValueError(
            "--tails profiled fits learned Student-t tails after an SVI ensemble's weights: it "
            "needs --method svi --noise student-t --student-df learned"
        )
    validation = validation_fraction(args.validation)
    if validation and (args.method != "svi" or args.polish):
        raise ValueError(
            "--validation (early stopping) applies to SVI without --polish; use --validation 0"
        )
    dataset = load_dataset(args.data)
    init = load_result(args.init) if args.init else None
    if init is not None:
        check_init_matches(init, args.init, dataset, args.data, args.variant)
    robot = dataset.robot()
    model = build_model(
        args.variant,
        robot,
        # network and noise normalisers from the data, stored in the saved model spec
        scales=data_scales(model_data(dataset, robot=robot), robot),
        likelihood=args.likelihood,
        noise=args.noise,
        student_df=args.student_df,
        geometry=args.geometry,
        horizon=args.horizon,
        dt=1.0 / float(dataset.rate_hz),  # the rollout likelihood steps at the data's rate
    )
    progress = not args.quiet
    if args.method == "svi":
        fit_data, held_out = dataset, None
        networks = getattr(model, "has_networks", False)  # (an identifiable model has none)
        auto = networks and not args.polish and len(dataset.episodes) >= 3
        if validation is None and auto:
            validation = 0.15
        if validation:
            fit_data, held_out = dataset.split(
                (1.0 - validation, validation), seed=args.seed, envelope=True
            )
            print(
                f"early stopping on {len(held_out.episodes)} of {len(dataset.episodes)} episodes "
                f"held out ({held_out.arrays()[0].shape[0]} samples; the episodes with the largest "
                "speeds and efforts train; --validation 0 turns it off)"
            )
            if networks:  # early stopping and the band's calibration judge these episodes
                from analysis.support import DEFAULT_QUANTILE, training_support

                q, qd, _, tau = held_out.arrays()
                outside = 1.0 - training_support(fit_data).inside(q, qd, tau).mean()
                print(
                    f"{outside:.0%} of the held-out states lie outside the training states' "
                    f"support (episodes like the training ones: about {1 - DEFAULT_QUANTILE:.0%})"
                )
        result = fit_svi(
            model,
            fit_data,
            key=args.seed,
            validation=held_out,
            guide=args.guide,
            steps=args.steps,
            learning_rate=args.learning_rate,
            progress=progress,
            polish=args.polish,
            train_dtype=args.train_dtype,
            tails=args.tails,
        )
        convergence = result.attrs["convergence"]
        print(convergence["message"])
        if not convergence["converged"]:
            print(
                f"warning: the SVI fit of {args.variant!r} did not converge; its posterior is not "
                f"to be trusted (run more --steps or lower --learning-rate)",
                file=sys.stderr,
            )
    else:
        result = fit_nuts(
            model,
            dataset,
            key=args.seed,
            num_warmup=args.warmup,
            num_samples=args.samples,
            num_chains=args.chains,
            dense_mass=args.dense_mass,
            init=init,
            metric=args.metric,
            target_accept="auto" if args.target_accept is None else args.target_accept,
            progress=progress,
        )
        d = result.diagnostics()
        print(
            f"R-hat max {d['rhat_max']:.4f}, ESS bulk min {d['ess_bulk_min']:.0f}, "
            f"divergences {d['divergences']}, max tree depth hits {d['max_tree_depth_hits']}"
        )
    warning = completion_warning(result.consistent())
    if warning:
        print(warning, file=sys.stderr)
    save_result(result, args.out)
    print(shorten_index(result.summary()).to_string())
    print(f"saved {result.method} fit of {result.variant!r} on {result.system!r} to {args.out}")
    return 0


def validation_fraction(text: str) -> float | None:
    """``--validation``: None for ``auto``, else a fraction in [0, 1).

    Raises:
        ValueError: not ``auto`` nor a number in [0, 1).
    """
    if text == "auto":
        return None
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.0 <= value < 1.0:
        raise ValueError(f"--validation must be auto or a fraction in [0, 1), got {text!r}")
    return value


def check_init_matches(init, init_path: str, dataset, data_path: str, variant: str) -> None:
    """Refuse an ``--init`` fit of another system, joint set or variant than this fit's.

    Raises:
        ValueError: naming both files and what differs.
    """
    import bayes_nea as bn  # lazy: the command line starts without JAX

    if init.system != dataset.system:
        raise ValueError(
            f"--init {init_path!r} is a fit of system {init.system!r} but --data {data_path!r} "
            f"is of {dataset.system!r}"
        )
    joints = tuple(init.attrs.get("joint_names") or ())
    if joints and joints != tuple(dataset.joint_names):
        raise ValueError(
            f"--init {init_path!r} has joints {list(joints)} but --data {data_path!r} has "
            f"{list(dataset.joint_names)}"
        )
    if init.variant != variant:
        raise ValueError(
            f"--init {init_path!r} is a fit of variant {init.variant!r}, not --variant {variant!r}"
        )
    if bn.robot_to_dict(init.robot()) != bn.robot_to_dict(dataset.robot()):
        raise ValueError(
            f"--init {init_path!r} was fitted to another description of robot {init.system!r} "
            f"than the one stored in --data {data_path!r} (same name, other URDF or locked joints)"
        )


def shorten_index(table, width: int = 60):
    """``table`` with row labels cut to ``width`` characters (long base-parameter combinations
    would push the numbers off the screen); the stored result keeps the full names."""
    labels = [str(k) if len(str(k)) <= width else str(k)[: width - 3] + "..." for k in table.index]
    if len(set(labels)) < len(labels):  # keep rows distinguishable
        labels = [f"{lab} #{i}" if lab.endswith("...") else lab for i, lab in enumerate(labels)]
    return table.set_axis(labels, axis=0)
