"""The ``openhood`` command: one sub-command per capability.

Each command family is one module of this package defining ``register(subparsers)``, so this
file only wires them together and stays small. Imports are lazy per command: ``openhood
tokenize`` must not pay for importing ONNX Runtime or FastAPI.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from openhood.cli.validate import Parser

# module path → it defines register(subparsers); modules that do not exist yet are skipped.
COMMAND_MODULES = (
    "openhood.cli.tokenize",
    "openhood.cli.engine",
    "openhood.cli.serve",
    "openhood.cli.loadtest",
    "openhood.cli.soak",
    "openhood.cli.quantize",
    "openhood.cli.import_onnx",
    "openhood.cli.generate",
    "openhood.cli.convert",
    "openhood.cli.batch",
    "openhood.cli.train",
    "openhood.cli.kernels",
)


class VersionAction(argparse.Action):
    """``--version``: the installed package's version, read only when asked (metadata lookup
    costs milliseconds every other command would pay)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        import openhood

        print(f"{parser.prog} {openhood.__version__}")
        parser.exit()


def build_parser() -> Parser:
    """One sub-parser per command module (modules import their work only when a command runs).

    >>> build_parser().parse_args(["loadtest", "http://127.0.0.1:8000", "--rate", "5"]).rate
    5.0
    """
    parser = Parser(prog="openhood", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=VersionAction, help="print the version and exit")
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


def check_isa_override() -> None:
    """A set ``OPENHOOD_ISA`` is checked before any command runs (``IsaError``: a level this CPU
    lacks is a usage mistake, one line); unset, nothing is imported or detected here."""
    import os

    from openhood.engine.kernels import isa

    if os.environ.get(isa.ENV_VAR):
        isa.level()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a usage error (2, its line already on stderr)
        return int(exc.code or 0)
    from openhood.engine.kernels.isa import IsaError
    from openhood.formats.errors import ModelFileError
    from openhood.models import ModelNotFoundError, ModelSpecError

    try:
        check_isa_override()
        return int(args.func(args) or 0)
    except (ModelNotFoundError, ModelSpecError, ModelFileError, IsaError) as exc:
        # A usage mistake found after parsing (a folder that is not a model, pickle weights, a
        # damaged or truncated model file, an OPENHOOD_ISA this CPU lacks): one line and exit 2,
        # like argparse's own errors.
        sys.stderr.write(f"openhood {args.command}: error: {exc}\n")
        return 2
