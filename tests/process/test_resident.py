"""Releasing the JIT compiler's pages: only clean compiler mappings are touched, RSS falls in a
real process, compiled code keeps running (and new code keeps compiling) afterwards, and the
generator's first decode step is what triggers it."""

from __future__ import annotations

import json
import platform
import subprocess
import sys

import numpy as np
import pytest

from openhood.process.resident import Mapping, droppable, read_smaps

linux_glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="Linux smaps and glibc"
)

SMAPS = """\
7f0000000000-7f0000100000 r-xp 00000000 08:01 123 /site-packages/llvmlite/binding/libllvmlite.so
Size:               1024 kB
Rss:                 512 kB
Anonymous:             0 kB
7f0000100000-7f0000200000 r--p 00100000 08:01 123 /site-packages/llvmlite/binding/libllvmlite.so
Size:               1024 kB
Rss:                 256 kB
Anonymous:            64 kB
7f0000200000-7f0000300000 rw-p 00200000 08:01 123 /site-packages/llvmlite/binding/libllvmlite.so
Rss:                  32 kB
Anonymous:            32 kB
7f0000300000-7f0000400000 r-xp 00000000 08:01 456 /usr/lib/libc.so.6
Rss:                 800 kB
Anonymous:             0 kB
7f0000400000-7f0000500000 rw-p 00000000 00:00 0
Rss:                1024 kB
Anonymous:          1024 kB
"""


def test_smaps_parse_and_only_clean_compiler_mappings_are_droppable(tmp_path):
    p = tmp_path / "smaps"
    p.write_text(SMAPS)
    maps = read_smaps(str(p))
    assert [(m.perms, m.rss // 1024, m.anonymous // 1024) for m in maps] == [
        ("r-xp", 512, 0),
        ("r--p", 256, 64),
        ("rw-p", 32, 32),
        ("r-xp", 800, 0),
        ("rw-p", 1024, 1024),
    ]
    assert maps[4].path == ""
    # code: yes; relocated read-only data (private pages): no; writable: no; not the compiler: no
    assert [droppable(m) for m in maps] == [True, False, False, False, False]
    assert not droppable(Mapping(0, 4096, "r-xp", "/x/libllvmlite.so", rss=0, anonymous=0))  # nothing resident


CHILD = """
import json, numba
from openhood.process.resident import read_smaps, release_idle_memory

def llvm_rss():
    return sum(m.rss for m in read_smaps() if "libllvmlite" in m.path)

@numba.njit(cache=False)
def f(x):
    return x * 2 + 1

assert f(3) == 7            # compiling faults LLVM's code in
before = llvm_rss()
report = release_idle_memory()
after = llvm_rss()
ok_old = f(20) == 41        # compiled code still runs

@numba.njit(cache=False)
def g(x):
    return x - 5.5

ok_new = g(1.5) == -4.0     # and the compiler still works: its pages fault back in
print(json.dumps({"before": before, "after": after, "freed": report.compiler_bytes, "mappings": report.mappings,
                  "ok_old": ok_old, "ok_new": ok_new, "skipped": report.skipped}))
"""


@linux_glibc
def test_release_drops_compiler_pages_and_compiling_still_works():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["skipped"] == ""
    assert r["ok_old"] and r["ok_new"]
    assert r["before"] > 20 << 20, r  # a compile touches tens of MB of LLVM
    assert r["freed"] > 0 and r["mappings"] >= 1
    assert r["after"] < r["before"] / 4, r  # what stays is the relocated data no one may drop


def test_the_generators_first_decode_step_releases_the_compilers_pages(smollm2_gen):
    """``generate.Generator`` hangs ``release_after_warm_up`` on its model: after one decode step
    the process has given back the JIT compiler's pages once (measured by benchmarks/decoder.py)."""
    from openhood.process import resident

    model = smollm2_gen.model
    assert model.after_warm_up is resident.release_after_warm_up
    cache = model.new_cache(1, 8)
    logits = model.forward([np.array([1, 2, 3])], [0], cache)  # prefill
    model.forward([np.array([int(logits.argmax())])], [0], cache)  # decode
    assert resident._released is not None  # this process released once (here or in an earlier test)
