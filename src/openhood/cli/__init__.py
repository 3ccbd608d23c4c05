"""The ``openhood`` command: one sub-command per capability.

Each command family is one module of this package defining ``register(subparsers)``, so this
file only wires them together and stays small. Imports are lazy per command: ``openhood
tokenize`` must not pay for importing ONNX Runtime or FastAPI.
"""

from __future__ import annotations

import argparse
import importlib

# module path → it defines register(subparsers); modules that do not exist yet are skipped.
COMMAND_MODULES = (
    "openhood.cli.tokenize",
    "openhood.cli.engine",
    "openhood.cli.serve",
    "openhood.cli.loadtest",
    "openhood.cli.soak",
    "openhood.cli.quantize",
    "openhood.cli.convert",
    "openhood.cli.batch",
)


def build_parser() -> argparse.ArgumentParser:
    """One sub-parser per command module (modules import their work only when a command runs).

    >>> build_parser().parse_args(["loadtest", "http://127.0.0.1:8000", "--rate", "5"]).rate
    5.0
    """
    parser = argparse.ArgumentParser(prog="openhood", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # the module itself is absent, not one of its imports
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)

