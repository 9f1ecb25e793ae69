"""The README recipe on a log this library did not simulate (issue 10's held-out check).

Pinocchio (a dynamics library we did not write) integrates example-robot-data's Panda (fingers
locked) with RK4 at 250 Hz under a computed-torque controller tracking one sinusoid per joint;
the joints carry viscous friction plus Coulomb friction with stiction (a Stribeck bump), which
``diffnea/viscous`` only approximates; the logged accelerations and efforts get N(0, sd^2)
noise. The user's URDF is the Panda's with every link mass 40 % too heavy and every inertia
tensor 35 % too small. Then the README's "Your own robot" commands run as written
(``bayes-nea import``, ``fit --polish``, ``fit --method nuts --init``) and this prints a table:
leapfrog steps per draw, divergences, R-hat and bulk ESS of the base parameters, the fraction of
draws with a physically consistent completion.

    python benchmarks/foreign_log.py [--seconds 10] [--variants diffnea/viscous/informative ...]
        [--out foreign-log]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

# benchmarks/inference.py would shadow the inference package: run from the repository root
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import arviz as az  # noqa: E402
import numpy as np  # noqa: E402
import pinocchio as pin  # noqa: E402

from inference import load_result  # noqa: E402

RATE_HZ = 250.0
VISCOUS, COULOMB, STICTION, STRIBECK_VELOCITY = 0.1, 0.3, 0.2, 0.05
NOISE = 0.05
LOCKED = ("panda_finger_joint1", "panda_finger_joint2")


def panda_urdf() -> Path:
    robots = Path(sysconfig.get_paths()["purelib"]) / "cmeel.prefix/share/example-robot-data/robots"
    return robots / "panda_description/urdf/panda.urdf"


def friction(qd: np.ndarray) -> np.ndarray:
    """Viscous + Coulomb with stiction, smoothed sign (N m)."""
    bump = COULOMB + STICTION * np.exp(-((qd / STRIBECK_VELOCITY) ** 2))
    return VISCOUS * qd + bump * np.tanh(qd / 0.01)


def simulate_log(path: Path, seconds: float, seed: int) -> None:
    """Pinocchio RK4 rollout under computed torque, written as the importer's CSV."""
    full = pin.buildModelFromUrdf(str(panda_urdf()))
    model = pin.buildReducedModel(full, [full.getJointId(j) for j in LOCKED], pin.neutral(full))
    data = model.createData()
    names = [model.names[i] for i in range(1, model.njoints)]
    n, dt = model.nv, 1.0 / RATE_HZ
    rng = np.random.default_rng(seed)
    mid = 0.5 * (model.lowerPositionLimit + model.upperPositionLimit)
    amp = 0.25 * (model.upperPositionLimit - model.lowerPositionLimit)
    w, phase = rng.uniform(0.3, 1.0, n), rng.uniform(0, 2 * np.pi, n)

    def reference(t):
        s, c = np.sin(w * t + phase), np.cos(w * t + phase)
        return mid + amp * s, amp * w * c, -amp * w * w * s

    def qdd_of(q, qd, tau):
        return pin.aba(model, data, q, qd, tau - friction(qd))

    q, qd, _ = reference(0.0)
    rows = []
    for k in range(int(seconds * RATE_HZ)):
        qr, qdr, qddr = reference(k * dt)
        tau = pin.rnea(model, data, q, qd, qddr + 20 * (qdr - qd) + 100 * (qr - q))
        k1 = qdd_of(q, qd, tau)
        q2, qd2 = q + 0.5 * dt * qd, qd + 0.5 * dt * k1
        k2 = qdd_of(q2, qd2, tau)
        q3, qd3 = q + 0.5 * dt * qd2, qd + 0.5 * dt * k2
        k3 = qdd_of(q3, qd3, tau)
        q4, qd4 = q + dt * qd3, qd + dt * k3
        k4 = qdd_of(q4, qd4, tau)
        noisy_qdd = k1 + NOISE * rng.standard_normal(n)
        noisy_tau = tau + NOISE * rng.standard_normal(n)
        rows.append([k * dt, *q, *qd, *noisy_qdd, *noisy_tau])
        q, qd = (
            q + dt / 6 * (qd + 2 * qd2 + 2 * qd3 + qd4),
            qd + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4),
        )
    header = ["t"] + [f"{s}_{j}" for s in ("q", "qd", "qdd", "tau") for j in names]
    np.savetxt(
        path, np.asarray(rows), delimiter=",", header=",".join(header), comments="", fmt="%.17g"
    )


def wrong_urdf(path: Path) -> None:
    """The Panda's URDF with masses x1.4 and inertia tensors x0.65 (meshes dropped: not needed)."""
    text = panda_urdf().read_text()
    text = re.sub(
        r'<mass value="([^"]+)"', lambda m: f'<mass value="{float(m[1]) * 1.4:.6g}"', text
    )
    text = re.sub(
        r'(i(?:xx|yy|zz|xy|xz|yz))="([^"]+)"', lambda m: f'{m[1]}="{float(m[2]) * 0.65:.6g}"', text
    )
    text = re.sub(r"<visual>.*?</visual>|<collision>.*?</collision>", "", text, flags=re.S)
    path.write_text(text)


def run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=os.path.dirname(_HERE))
    return time.perf_counter() - t0


def fit_row(out: Path, variant: str, args) -> dict:
    bn_cli = [sys.executable, "-m", "cli.main"]
    tag = variant.replace("/", "-")
    fit = ["--variant", variant, "--data", str(out / "panda.npz")]
    fit += ["--likelihood", "inverse", "--geometry", "identifiable"]
    map_s = run(
        [*bn_cli, "fit", *fit, "--steps", "3000", "--polish", "--out", str(out / f"{tag}-map.nc")]
    )
    nuts = ["--method", "nuts", "--init", str(out / f"{tag}-map.nc")]
    nuts += ["--warmup", str(args.warmup), "--samples", str(args.draws)]
    nuts_s = run([*bn_cli, "fit", *fit, *nuts, "--out", str(out / f"{tag}-posterior.nc")])
    svi = load_result(out / f"{tag}-map.nc")
    post = load_result(out / f"{tag}-posterior.nc")
    ds = post.idata["posterior"].to_dataset()[["base_parameters"]]
    stats = post.idata["sample_stats"]
    d = post.diagnostics()
    return {
        "variant": variant,
        "MAP": "yes" if svi.attrs["map"]["converged"] else "NO",
        "map_s": map_s,
        "nuts_s": nuts_s,
        "leapfrog/draw": float(stats["n_steps"].mean()),
        "divergences": d["divergences"],
        "rhat_max (latent)": d["rhat_max"],
        "rhat_max (base)": float(az.rhat(ds)["base_parameters"].max()),
        "ess_bulk_min (base)": float(az.ess(ds, method="bulk")["base_parameters"].min()),
        "consistent": d["consistent_fraction"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="log length (250 Hz)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=300)
    parser.add_argument("--draws", type=int, default=300)
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["diffnea/viscous/informative", "diffnea/stribeck/informative"],
    )
    parser.add_argument("--out", default="foreign-log")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    simulate_log(out / "log.csv", args.seconds, args.seed)
    wrong_urdf(out / "panda_wrong.urdf")
    lock = [a for j in LOCKED for a in ("--lock-joint", j)]
    run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "import",
            "--urdf",
            str(out / "panda_wrong.urdf"),
            *lock,
            "--log",
            str(out / "log.csv"),
            "--out",
            str(out / "panda.npz"),
        ]
    )
    rows = [fit_row(out, v, args) for v in args.variants]
    print(
        f"Panda log from Pinocchio (RK4, {RATE_HZ:g} Hz, {args.seconds:g} s = "
        f"{int(args.seconds * RATE_HZ)} states; Coulomb {COULOMB} + stiction {STICTION} N m, viscous "
        f"{VISCOUS}; noise sd {NOISE}); URDF masses x1.4, inertias x0.65; README recipe; NUTS 2 x "
        f"({args.warmup} + {args.draws})"
    )
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + " --- |" * len(keys))
    for r in rows:
        cells = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in r.values()]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
