"""argparse ``type=`` validators and the one-line usage error every ``openhood`` command uses.

A usage mistake (a port out of range, a malformed list, a fraction of 0, a folder that is not a
model) must end in one line on stderr and exit code 2, the way argparse reports its own errors,
never in a traceback or a silently corrected value. Each validator raises
``argparse.ArgumentTypeError`` (argparse turns it into that line, naming the flag); model
errors found after parsing are printed the same way by ``openhood.cli.main``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def usage_error(command: str, message: str) -> int:
    """Print ``openhood COMMAND: error: MESSAGE`` (argparse's own shape) and return exit code 2.

    For mistakes found after parsing (a missing file, an empty prompt); commands bind it once:
    ``_fail = functools.partial(usage_error, "convert")``."""
    sys.stderr.write(f"openhood {command}: error: {message}\n")
    return 2


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error: ``prog: error: message`` (no usage block), exit 2."""

    def error(self, message: str):
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        sys.exit(2)


def _number(kind, text: str):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected {'an integer' if kind is int else 'a number'}, got {text!r}"
        ) from None


def port(text: str) -> int:
    value = _number(int, text)
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a TCP port is 1-65535, got {value}")
    return value


def positive_int(text: str) -> int:
    value = _number(int, text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _number(int, text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive_float(text: str) -> float:
    value = _number(float, text)
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(float, text)
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def open_fraction(text: str) -> float:
    """A share strictly between 0 and 1 (a hold-out of 0 or 1 leaves one side empty)."""
    value = _number(float, text)
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"must be strictly between 0 and 1, got {text}")
    return value


def unit_interval(text: str) -> float:
    """In (0, 1]: a cosine target, a migration strength."""
    value = _number(float, text)
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def unit_interval_or_zero(text: str) -> float:
    """In [0, 1] (0 meaning off)."""
    value = _number(float, text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def int_list(text: str) -> tuple[int, ...]:
    """A comma list of positive integers, e.g. ``48,80,160``; nothing malformed is dropped silently."""
    parts = [p.strip() for p in text.split(",")]
    if not text.strip() or any(not p.isdigit() or int(p) < 1 for p in parts):
        raise argparse.ArgumentTypeError(f"expected a comma list of positive integers like 48,80,160, got {text!r}")
    return tuple(int(p) for p in parts)


def existing_file(text: str) -> str:
    if not Path(text).expanduser().is_file():
        raise argparse.ArgumentTypeError(f"{text} does not exist (or is not a file)")
    return text


def model_dir(text: str) -> str:
    """A Hugging Face model folder (config.json or tokenizer.json inside); returned as given."""
    from openhood.models import ModelNotFoundError, resolve_model_dir

    try:
        resolve_model_dir(text)
    except ModelNotFoundError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def tokenizer_source(text: str) -> str:
    """A model folder, or a tokenizer file (tokenizer.json / vocab.txt) itself."""
    return text if Path(text).expanduser().is_file() else model_dir(text)


def factor_or_zero(text: str) -> float:
    """A finite factor >= 1, or 0 meaning off (a step stretch: shrinking is not on offer)."""
    value = _number(float, text)
    if not (value == 0 or 1 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be 0 (off) or a finite number >= 1, got {text}")
    return value
