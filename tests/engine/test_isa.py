"""engine/kernels/isa: detection, the forced level, and every level this machine supports run
against the naive references (each level in its own process: the level is read once)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from openhood.engine.kernels import isa
from openhood.engine.kernels.isa import Host, IsaError, Level, choose_level

ROOT = Path(__file__).resolve().parents[2]
# The tests of every hand-written kernel and of the paths that replace them below its level.
KERNEL_TESTS = (
    "tests/engine/test_llvm_jit.py",
    "tests/engine/test_gguf_matmul.py",
    "tests/engine/test_llama_step.py",
    "tests/engine/test_conv.py",
    "tests/engine/test_pointwise_simd.py",
    "tests/engine/test_mbconv_plan.py",
    "tests/train/test_panel_gemm.py",
)


def _host(*features: str, amx: bool = False) -> Host:
    return Host("test CPU", "testcpu", frozenset(features), amx)


def test_host_level_is_the_highest_whose_features_are_all_present():
    assert _host("sse4.2").level is Level.GENERIC
    assert _host("avx2").level is Level.GENERIC  # FMA missing
    assert _host("avx2", "fma", "avx512f").level is Level.AVX2  # BW/VL missing
    assert _host("avx2", "fma", "avx512f", "avx512bw", "avx512vl").level is Level.AVX512


def test_amx_is_reported_only_where_the_os_allows_it():
    features = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512vnni", "amx-tile", "amx-int8")
    assert _host(*features).extras == ("avx512-vnni",)
    assert _host(*features, amx=True).extras == ("avx512-vnni", "amx-tile", "amx-int8")


@pytest.mark.parametrize("requested", [None, "", "generic", "AVX2", " avx512 "])
def test_a_level_at_or_below_the_host_is_taken(requested):
    expected = {None: Level.AVX512, "": Level.AVX512}.get(requested) or Level[requested.strip().upper()]
    assert choose_level(requested, Level.AVX512) is expected


def test_a_level_above_the_host_or_unknown_is_refused_in_one_line():
    with pytest.raises(IsaError, match=r"above this CPU's level \(avx2\): pick one of generic, avx2$"):
        choose_level("avx512", Level.AVX2)
    with pytest.raises(IsaError, match="is not a level") as info:
        choose_level("sse9", Level.AVX2)
    assert "\n" not in str(info.value)


def test_llvm_features_below_avx512_switch_every_wide_feature_off():
    assert isa.llvm_features(Level.GENERIC) is None
    if isa.host().level < Level.AVX2:
        pytest.skip("this CPU has no AVX2: nothing is compiled at any level")
    flags = isa.llvm_features(Level.AVX2).split(",")
    assert "+avx2" in flags and "+fma" in flags
    assert not [f for f in flags if f.startswith(("+avx512", "+amx", "+evex512"))]


def _env(level: str) -> dict[str, str]:
    return {**os.environ, isa.ENV_VAR: level}


@pytest.mark.parametrize("level", [lv.label for lv in isa.supported_levels()])
def test_forced_level_decides_whether_kernels_are_compiled(level):
    probe = (
        "from openhood.engine.kernels import isa, panel_gemm, pointwise_simd, call_list, packed_gemv_simd\n"
        "print(isa.level().label, panel_gemm.gemm_kernel() is not None, "
        "pointwise_simd.kernel() is not None, call_list.runner() is not None, packed_gemv_simd.register())"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], env=_env(level), capture_output=True, text=True, timeout=300, check=True
    )
    compiled = str(Level[level.upper()] >= Level.AVX2)
    assert out.stdout.split() == [level, compiled, compiled, compiled, compiled]


@pytest.mark.parametrize("level", [lv.label for lv in isa.supported_levels() if lv != isa.level()])
def test_kernel_tests_pass_at_every_other_level_this_machine_supports(level):
    """The suite itself runs at the chosen level; here each other level re-runs the kernel tests
    (below AVX2 the numba/BLAS paths they fall back to, against the same naive references)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *KERNEL_TESTS]
    out = subprocess.run(cmd, cwd=ROOT, env=_env(level), capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout


def test_cli_refuses_a_level_this_cpu_lacks_in_one_line():
    above = [lv.label for lv in Level if lv > isa.host().level] or ["sse9"]
    out = subprocess.run(
        [sys.executable, "-m", "openhood.cli", "tokenize", "hello"],
        env=_env(above[0]),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and isa.ENV_VAR in out.stderr
    assert "Traceback" not in out.stderr
