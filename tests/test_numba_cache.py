"""Finding 10: compiled kernels are cached on disk between processes, in openhood's per-user
directory unless NUMBA_CACHE_DIR says otherwise: the second process loads every kernel (tokenizer
and engine) from the cache and compiles none. This is numba's JIT cache, the fallback of the
ahead-of-time kernels (tests/test_aot.py), so the probe runs with them switched off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PROBE = """
import json
from openhood import Embedder
from openhood.engine.kernels import rows
from openhood.tokenizer import kernel
import openhood

emb = Embedder.from_pretrained()
emb.embed(["[MASK] warm \\x00 cache"])
assert rows.ROWS.backing == "jit"
dispatchers = [kernel.encode_batch_kernel, kernel.encode_one_kernel] + list(rows.ROWS._functions.values())
print(json.dumps({
    "dir": openhood.NUMBA_CACHE_DIR,
    "hits": sum(sum(d.stats.cache_hits.values()) for d in dispatchers),
    "misses": sum(sum(d.stats.cache_misses.values()) for d in dispatchers),
}))
"""


def _probe(env: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=600, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_kernels_load_from_the_per_user_cache_in_a_second_process(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "OPENHOOD_CACHE_DIR")}
    env["XDG_CACHE_HOME"] = str(tmp_path)
    env["OPENHOOD_AOT"] = "0"
    first = _probe(env)
    assert first["dir"] == str(tmp_path / "openhood" / "numba") and first["misses"] > 0
    assert any(Path(first["dir"]).rglob("*.nbi"))  # numba's index files, on disk
    second = _probe(env)
    assert second["misses"] == 0 and second["hits"] >= first["misses"]


def test_user_numba_cache_dir_wins(tmp_path):
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "mine")}
    out = subprocess.run(
        [sys.executable, "-c", "import openhood; print(openhood.NUMBA_CACHE_DIR)"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert out.stdout.strip() == str(tmp_path / "mine")
