"""``openhood --version``: the version pyproject.toml declares, read from the installed metadata,
and the same one the server reports (OpenAPI document, TEI's ``/info``)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import openhood

ROOT = Path(__file__).resolve().parents[1]


def test_version_flag_prints_the_package_version():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    proc = subprocess.run(
        [sys.executable, "-m", "openhood.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"openhood {declared}\n"
    assert openhood.__version__ == version("openhood") == declared
