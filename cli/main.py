"""``bayes-nea`` entry point.

Each subcommand lives in its own module ``cli/<name>.py`` (hyphens become underscores; ``import``
is ``cli/import_log.py``) exposing ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int``. Those modules import nothing heavy at module
level (JAX, NumPyro, ArviZ are imported inside ``run``), so ``bayes-nea --help`` is instant.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

SUBCOMMANDS = (
    "run",
    "demo",
    "simulate",
    "import",
    "variants",
    "fit",
    "rollout",
    "check-controller",
    "benchmark",
    "calibrate",
    "report",
    "hybrid",
)


MODULES = {"import": "import_log"}
"""Subcommands whose module name differs (``import`` is a Python keyword)."""


class _UsageError(Exception):
    """A command-line argument that does not parse (reported by :func:`main` as one line)."""


class _Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors reach :func:`main` (one line on stderr, status 2)."""

    def error(self, message: str):
        raise _UsageError(f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)")


def one_line(message: str) -> str:
    """``message`` with its line breaks folded, for a one-line error."""
    return " ".join(str(message).split())


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="bayes-nea",
        description="Bayesian identification of robot multi-body dynamics.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module_name = f"cli.{MODULES.get(name, name.replace('-', '_'))}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:
                raise
            continue
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def prefer_single_threaded_xla_kernels() -> None:
    """Turn off XLA's multi-threaded Eigen kernels unless the user chose otherwise in ``XLA_FLAGS``.

    Our hot paths are thousands of tiny fused ops inside ``lax.scan`` / NUTS; splitting each over
    threads costs more than it gains (measured: vmapped RK4 rollouts 1.5x faster on 2 cores). Only
    takes effect before JAX starts its backend, which the command line guarantees.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()


def use_compilation_cache() -> None:
    """Keep XLA's compiled programs on disk between commands (JAX's persistent compilation
    cache), unless the user set ``JAX_COMPILATION_CACHE_DIR`` or ``BAYES_NEA_CACHE=0``.

    A command compiles hundreds of programs (one per eagerly run primitive while NumPyro sets a
    model up, then the jitted steps); ``fit``, ``fit --method nuts``, ``rollout`` and
    ``check-controller`` on one robot compile many of the same ones. Measured on a 2-DoF fit
    (docs/measurements.md): a second run of the same command took 45 % of the first's time.
    Location: ``$BAYES_NEA_CACHE`` or ``$XDG_CACHE_HOME/bayes-nea/xla`` (default
    ``~/.cache/bayes-nea/xla``); a few MB per robot and model, never pruned: delete the folder
    to reclaim it.
    """
    choice = os.environ.get("BAYES_NEA_CACHE", "")
    if choice == "0" or "JAX_COMPILATION_CACHE_DIR" in os.environ:
        return
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = choice or os.path.join(base, "bayes-nea", "xla")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")


CONSTANTS_AS_ARGUMENTS = {
    "JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS": "true",
    "JAX_EMBEDDED_CONSTANTS_MAX_BYTES": "0",
}
"""The environment of :func:`share_programs_across_constants`."""


def share_programs_across_constants() -> None:
    """Lower a program's array constants as arguments of the compiled executable instead of
    embedding them in it (JAX's simplified constants, every non-scalar constant hoisted), unless
    the user set ``JAX_USE_SIMPLIFIED_JAXPR_CONSTANTS`` or ``JAX_EMBEDDED_CONSTANTS_MAX_BYTES``.

    A model's programs close over its prior's locations and scales and its normalisers. Embedded,
    each prior and each dataset kind made a new program for XLA and a new key for the persistent
    compilation cache; hoisted, the programs of ``diffnea/viscous/weak`` are those of
    ``diffnea/viscous/informative``. Measured on a quick-grid cell after the other prior's
    (docs/measurements.md): 33 programs compiled in 23 s before, none after. Scalars stay
    embedded. Only takes effect before JAX is imported, which the command line guarantees; worker
    processes that it starts inherit it (start the workers of a ``--scheduler`` cluster with
    the same two variables).
    """
    for name, value in CONSTANTS_AS_ARGUMENTS.items():
        os.environ.setdefault(name, value)


def main(argv: list[str] | None = None) -> int:
    prefer_single_threaded_xla_kernels()
    use_compilation_cache()
    share_programs_across_constants()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as err:
        print(err, file=sys.stderr)
        return 2
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except ValueError as err:  # the library's bad-input errors name the file or argument
        message = str(err)
    except OSError as err:  # a file system refusal that no check caught first
        where = f" {err.filename!r}" if err.filename else ""
        message = f"{err.strerror or err}{where}"
    except MemoryError:
        message = "out of memory: use smaller sizes (duration, draws, samples)"
    print(f"bayes-nea {args.command}: error: {one_line(message)}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
