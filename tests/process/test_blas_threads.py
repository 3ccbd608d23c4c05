"""process/blas_threads: OpenBLAS's idle-worker timeout is set only before NumPy loads, never over yours."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = """
import json, os, sys
from openhood.process.blas_threads import ENV, sleep_idle_blas_threads
if sys.argv[1] == "numpy-first":
    import numpy
first = sleep_idle_blas_threads()
second = sleep_idle_blas_threads()
import numpy
print(json.dumps([first, second, os.environ.get(ENV)]))
"""


def _run(mode: str, **env: str) -> list:
    clean = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE, mode],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout)


def test_set_before_numpy_loads_and_only_once():
    assert _run("fresh") == [True, False, "4"]


def test_too_late_once_numpy_is_loaded():
    assert _run("numpy-first") == [False, False, None]


def test_your_own_value_is_left_alone():
    assert _run("fresh", OPENBLAS_THREAD_TIMEOUT="20") == [False, False, "20"]
