"""glibc's mmap threshold pinned: a large array freed stays out of the heap afterwards."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from openhood.process import allocator

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc malloc policy")

# Frees an 8 MiB array (which raises glibc's dynamic threshold to 8 MiB), then reports whether a
# fresh 5 MiB array (above the pinned 4 MiB threshold) was carved out of the main heap (brk) rather than given its own mapping.
CHILD = """
import sys
import numpy as np
from openhood.process.allocator import apply_malloc_policy
print(apply_malloc_policy(sys.argv[1]))
a = np.ones(8 << 20, np.uint8)
del a
b = np.ones(5 << 20, np.uint8)
heap = [line.split()[0] for line in open("/proc/self/maps") if line.rstrip().endswith("[heap]")]
lo, hi = (int(x, 16) for x in heap[0].split("-"))
print(lo <= b.ctypes.data < hi)
"""


def run_child(mode: str, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in (allocator.GLIBC_ENV, allocator.POLICY_ENV)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=60, env={**clean, **env}
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_dynamic_threshold_puts_large_arrays_in_the_heap_and_pinning_stops_it():
    assert run_child("default") == ["default", "True"]  # the trap: glibc's default drifts upward
    assert run_child("pinned") == ["pinned", "False"]


def test_the_environment_overrides_the_command_default():
    assert run_child("pinned", **{allocator.POLICY_ENV: "default"}) == ["default", "True"]
    assert run_child("default", **{allocator.POLICY_ENV: "pinned"}) == ["pinned", "False"]
    assert run_child("pinned", **{allocator.GLIBC_ENV: "16777216"})[0] == "env"


def test_an_unknown_policy_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(allocator.POLICY_ENV, "fast")
    with pytest.raises(ValueError, match="OPENHOOD_MALLOC_POLICY must be one of pinned, default"):
        allocator.apply_malloc_policy("default")


@pytest.mark.parametrize(
    "argv", [["serve"], ["generate", "hello"], ["batch", "--input", "in.jsonl", "--output", "o.parquet"]]
)
def test_commands_turn_a_bad_policy_into_one_usage_line(monkeypatch, capsys, argv):
    from openhood.cli import main

    monkeypatch.setenv(allocator.POLICY_ENV, "fast")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "OPENHOOD_MALLOC_POLICY must be one of pinned, default" in err[0], err
