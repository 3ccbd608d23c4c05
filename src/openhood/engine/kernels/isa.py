"""The processor's instruction-set levels, detected once, and the one level every kernel family uses.

Levels, lowest first: ``generic`` (no hand-written SIMD: the numba and BLAS paths every caller
already keeps), ``avx2`` (AVX2 + FMA: today's LLVM IR kernels in ``panel_gemm``,
``pointwise_simd``, ``depthwise_simd``, ``call_list`` and ``packed_gemv_simd``), ``avx512`` (AVX-512 F/BW/VL; no kernel
is written for it yet, so on such a CPU the AVX2 kernels are compiled with the host's full
feature set and LLVM may use the wider registers). Extras beyond the levels (AVX512-VNNI,
AVX512-BF16, AMX) are detected and reported for the int8/bf16 paths that may use them.

Detection reads LLVM's view of the host (``llvmlite``'s CPU name and features, which already
require the OS to save the wide registers) and, on x86-64 Linux, asks the kernel whether it lets
a process use AMX tiles (``arch_prctl(ARCH_GET_XCOMP_SUPP)``: AMX needs the OS's permission, so
it is detected, never assumed). ``OPENHOOD_ISA=generic|avx2|avx512`` forces a lower level so one
machine can test every variant against the naive references; a level above the CPU's is refused
with one line (``IsaError``). A level below the host's also strips the higher features from the
LLVM target, so code compiled "at avx2" on an AVX-512 CPU really is AVX2 code.

The trade-off: one process-wide level, read once (kernels compiled at one level stay for the
process's life), so a test of another level runs in its own process with the variable set.
Numba, OpenBLAS and ONNX Runtime dispatch on the CPU for themselves; the level governs the
kernels this project writes.
"""

from __future__ import annotations

import ctypes
import enum
import functools
import logging
import os
import platform
from dataclasses import dataclass

from openhood.diskcache import cpu_model
from openhood.engine.kernels.cores import available_cores

ENV_VAR = "OPENHOOD_ISA"
log = logging.getLogger("openhood.isa")


class IsaError(ValueError):
    """``OPENHOOD_ISA`` names an unknown level or one this CPU lacks (message: one line)."""


class Level(enum.IntEnum):
    """An instruction-set level; a higher one includes every lower one."""

    GENERIC = 0
    AVX2 = 1
    AVX512 = 2

    @property
    def label(self) -> str:
        return self.name.lower()


# What each level needs, in LLVM's feature names (llvmlite's get_host_cpu_features).
LEVEL_FEATURES = {
    Level.GENERIC: (),
    Level.AVX2: ("avx2", "fma"),
    Level.AVX512: ("avx2", "fma", "avx512f", "avx512bw", "avx512vl"),
}
# Extras reported beside the level (LLVM name → the name users know).
EXTRAS = {"avx512vnni": "avx512-vnni", "avx512bf16": "avx512-bf16", "avx512fp16": "avx512-fp16"}
AMX_FEATURES = ("amx-tile", "amx-int8", "amx-bf16")
# Feature prefixes stripped from the LLVM target below AVX-512 (all of them need EVEX/AVX-512).
_WIDE_PREFIXES = ("avx512", "amx", "evex512", "avx10")
_ARCH_GET_XCOMP_SUPP = 0x1021  # asm/prctl.h: the extended-state components the kernel supports
_XFEATURE_XTILEDATA = 18  # the AMX tile data component
_SYS_ARCH_PRCTL_X86_64 = 158


@dataclass(frozen=True)
class Host:
    """What this CPU (and OS) offer: LLVM's CPU name and enabled features, the model name."""

    cpu_model: str
    llvm_cpu: str
    features: frozenset[str]
    os_allows_amx: bool

    @property
    def level(self) -> Level:
        """The highest level whose features are all present."""
        return max(lv for lv, need in LEVEL_FEATURES.items() if all(f in self.features for f in need))

    @property
    def extras(self) -> tuple[str, ...]:
        """VNNI/BF16/FP16 and AMX where present (AMX only where the OS allows it)."""
        found = [name for f, name in EXTRAS.items() if f in self.features]
        if self.os_allows_amx:
            found += [f for f in AMX_FEATURES if f in self.features]
        return tuple(found)


def parse_llvm_features(flat: str) -> frozenset[str]:
    """``"+avx2,-avx512f,+fma"`` → ``{"avx2", "fma"}`` (the enabled ones only).

    >>> sorted(parse_llvm_features("+avx2,-avx512f,+fma"))
    ['avx2', 'fma']
    """
    return frozenset(f[1:] for f in flat.split(",") if f.startswith("+"))


def _os_allows_amx() -> bool:
    """Whether the Linux kernel supports AMX tile data for processes (x86-64 only). Asking for the
    supported components changes nothing; a process still requests permission before first use."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        mask = ctypes.c_uint64(0)
        if libc.syscall(_SYS_ARCH_PRCTL_X86_64, _ARCH_GET_XCOMP_SUPP, ctypes.byref(mask)) != 0:
            return False  # an older kernel without the call: no AMX for user space
    except (OSError, AttributeError):
        return False
    return bool(mask.value >> _XFEATURE_XTILEDATA & 1)


@functools.cache
def host() -> Host:
    """This machine's CPU, detected once per process."""
    import llvmlite.binding as llvm  # type: ignore[import-untyped]

    llvm.initialize_native_target()
    features = parse_llvm_features(llvm.get_host_cpu_features().flatten())
    amx = any(f in features for f in AMX_FEATURES) and _os_allows_amx()
    return Host(cpu_model(), llvm.get_host_cpu_name(), features, amx)


def choose_level(requested: str | None, host_level: Level) -> Level:
    """The level to run at: the host's, or the lower one ``requested`` names.

    >>> choose_level(None, Level.AVX2).label, choose_level("generic", Level.AVX2).label
    ('avx2', 'generic')
    >>> choose_level("avx512", Level.AVX2)
    Traceback (most recent call last):
    ...
    openhood.engine.kernels.isa.IsaError: OPENHOOD_ISA=avx512 is above this CPU's level (avx2): pick one of generic, avx2
    """
    if requested is None or requested.strip() == "":
        return host_level
    names = {lv.label: lv for lv in Level}
    wanted = names.get(requested.strip().lower())
    allowed = ", ".join(lv.label for lv in Level if lv <= host_level)
    if wanted is None:
        raise IsaError(f"{ENV_VAR}={requested} is not a level: pick one of {allowed}")
    if wanted > host_level:
        raise IsaError(f"{ENV_VAR}={requested} is above this CPU's level ({host_level.label}): pick one of {allowed}")
    return wanted


@functools.cache
def level() -> Level:
    """The process's level (the host's unless ``OPENHOOD_ISA`` forces a lower one), chosen and
    logged once. Raises ``IsaError`` for a bad ``OPENHOOD_ISA``; the CLI checks it at start."""
    h = host()
    chosen = choose_level(os.environ.get(ENV_VAR), h.level)
    forced = f", forced by {ENV_VAR}" if chosen != h.level else ""
    # debug: a command reports the choice once it runs (serve's cpu_layout line), so a usage
    # mistake found while loading a model stays the one line on stderr.
    log.debug("isa: %s; kernels at %s%s", describe(h), chosen.label, forced)
    return chosen


def supported_levels() -> tuple[Level, ...]:
    """Every level this machine can run (and so test), lowest first."""
    return tuple(lv for lv in Level if lv <= host().level)


def describe(h: Host | None = None) -> str:
    """One line for logs and benchmark headers: model, LLVM CPU, cores, level and extras."""
    h = h or host()
    extras = " ".join(h.extras) or "none"
    return f"{h.cpu_model} ({h.llvm_cpu}, {available_cores()} cores), host level {h.level.label}, extras: {extras}"


def llvm_features(at: Level | None = None) -> str | None:
    """The LLVM target feature string for compiling kernels at ``at`` (default: ``level()``);
    None at ``generic`` (nothing is compiled). Below AVX-512 every AVX-512/AMX feature is
    switched off, so forcing ``avx2`` on an AVX-512 CPU yields AVX2 code. This string (with
    ``host().llvm_cpu``) is what a compiled-object cache must key on."""
    import llvmlite.binding as llvm

    at = level() if at is None else at
    if at < Level.AVX2:
        return None
    flags = llvm.get_host_cpu_features().flatten().split(",")
    if at < Level.AVX512:
        flags = ["-" + f[1:] if f[1:].startswith(_WIDE_PREFIXES) else f for f in flags]
    return ",".join(flags)


def header() -> str:
    """The benchmark header line: the CPU and the level this process runs its kernels at."""
    return f"CPU: {describe()}; kernels at ISA level {level().label}"


def run_at_every_level(argv: list[str]) -> int:
    """Run ``python argv…`` once per level this machine supports (lowest first), each with
    ``OPENHOOD_ISA`` set (the level is read once per process); the worst exit status. For the
    benchmarks' ``--every-isa``: one command prints the figures of every level."""
    import subprocess
    import sys

    worst = 0
    for lv in supported_levels():
        print(f"\n===== {ENV_VAR}={lv.label} =====", flush=True)
        rc = subprocess.run([sys.executable, *argv], env={**os.environ, ENV_VAR: lv.label}, check=False).returncode
        worst = max(worst, rc)
    return worst
