"""Kernels compiled ahead of time: numba functions built once into a CPython extension, loaded without numba.

What: a ``KernelSet`` names numba source functions and one explicit signature each. numba's
ahead-of-time compiler (``numba.pycc``, for the host CPU) builds the set into a shared library
(where: below); a process loads it without importing numba or building numba's typing context,
the fixed cost every process paid for a cached JIT kernel (docs/design.md § Start-up).

Keyed on everything the machine code depends on: the set's exports, the bytes of its source
files, numba's and NumPy's versions, the Python ABI and the CPU (model and feature flags), so a
changed kernel or a cache copied to another machine is a different file, never a wrong one.
Each library has a record beside it (``openhood.diskcache``'s format: the key, the library's
SHA-256, the record's own hash): a library whose record or hash does not match (corrupted,
truncated, foreign) is reported in one warning line, deleted and rebuilt. Builds take an
exclusive lock per key and rename whole files into place, so two processes starting at once
build once and neither reads half a file.

Safety at the boundary: a pycc function does not check what it is given (a float64 array where
it expects float32 is read as garbage or crashes the process), so each call goes through an
entry point that checks every array's dtype, dimensions and C order and raises ``TypeError``.

Where: installation builds every set once (``openhood kernels --build``, which ``make``
runs) into the install folder, ``$OPENHOOD_KERNEL_DIR`` or ``openhood/_aot/`` beside this
file, like any compiled extension; a process looks there first, then in the cache directory,
and builds into the cache only what neither holds (a kernel edited after installation, a
plain ``pip install``). Empty caches therefore cost no compilation where the install built them.

The trade-off: a start that finds no library (no install-time build, or a kernel's source
changed) pays numba's import plus the ahead-of-time build (several seconds per set, more than
numba's JIT compile of the same kernels), and the build needs a C compiler (pycc compiles a
small C wrapper). Where the build fails (no compiler, ``OPENHOOD_AOT=0``), the set falls back to numba's JIT with one log line: slower to
start, the same results. ``numba.pycc`` is marked deprecated upstream; the fallback is the
plan for the day it goes.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import logging
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from openhood import diskcache
from openhood.cachedir import cache_root

log = logging.getLogger("openhood.aot")

ENV_VAR = "OPENHOOD_AOT"  # "0": never build or load ahead-of-time kernels, use numba's JIT
DIR_ENV_VAR = "OPENHOOD_KERNEL_DIR"  # where installation builds them (default: openhood/_aot/)
SUBDIR = "aot"  # the cache directory's sub-folder for what a process had to build itself


def install_dir() -> Path:
    """The folder installation builds the kernel sets into (looked up before the cache)."""
    return Path(os.environ.get(DIR_ENV_VAR) or Path(__file__).with_name("_aot"))


def cache_dir() -> Path:
    """The cache directory's folder for sets a process built itself."""
    return Path(cache_root()) / SUBDIR


FORMAT = 2  # bump when the library layout or the record changes (2: diskcache records)


@dataclass(frozen=True)
class Export:
    """One compiled function: its name in the set, the numba source (``"module:function"``, a
    plain function or an ``@njit`` dispatcher), its argument types and its return type.

    Types are numba's signature spelling, restricted to what the call-time check understands:
    C-contiguous arrays ``"f4[::1]"``, ``"u4[:, ::1]"`` (dtype code, one ``:`` per dimension) and
    scalars ``"i8"``, ``"f4"``. ``readonly``: the indices of array arguments the function only
    reads, typed read-only so that read-only arrays (a memory-mapped weight) are accepted by the
    JIT fallback too. ``options``: numba options of the compiled function (fastmath…).
    """

    name: str
    source: str
    args: tuple[str, ...]
    returns: str = "void"
    readonly: tuple[int, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)

    def signature(self) -> str:
        return f"{self.returns}({', '.join(self.args)})"

    def numba_signature(self) -> Any:
        """The signature as numba types (numba must be importable: build and JIT time only)."""
        from numba.core import sigutils

        args, returns = sigutils.normalize_signature(self.signature())
        args = tuple(a.copy(readonly=True) if i in self.readonly else a for i, a in enumerate(args))
        return returns(*args)


def _array_spec(code: str) -> tuple[np.dtype, int] | None:
    """``"f4[:, ::1]"`` → (float32, 2); a scalar code → None.

    >>> _array_spec("u4[::1]"), _array_spec("i8")
    ((dtype('uint32'), 1), None)
    """
    if "[" not in code:
        return None
    dtype, dims = code.split("[", 1)
    if not dims.endswith("::1]"):
        raise ValueError(f"{code!r}: only C-contiguous arrays (ending in ::1]) are supported")
    return np.dtype(dtype), dims.count(":") - 1


def _entry_point(kernels: KernelSet, name: str, args: tuple[str, ...]) -> Callable[..., Any]:
    """The function callers get for export ``name``: it checks every array argument (pycc's own
    entry points check nothing) and calls the loaded function, loading the set on first use.

    Generated with one inline test per array argument, in one Python frame: a loop over specs
    doubled the cost of a short text's encoding (11 arguments).
    """
    specs = [_array_spec(a) for a in args]
    params = ", ".join(f"a{i}" for i in range(len(args)))
    lines = [f"def {name}({params}):"]
    namespace: dict[str, Any] = {"kernels": kernels, "ndarray": np.ndarray, "_reject": _reject}
    for i, spec in enumerate(specs):
        if spec is not None:
            namespace[f"D{i}"] = spec[0]
            lines.append(
                f"    if not (type(a{i}) is ndarray and (a{i}.dtype is D{i} or a{i}.dtype == D{i}) "
                f"and a{i}.ndim == {spec[1]} and a{i}.flags.c_contiguous):\n"
                f"        _reject({name!r}, {i}, D{i}, {spec[1]}, a{i})"
            )
    lines += [
        f"    fn = kernels._functions.get({name!r})",
        f"    if fn is None:\n        fn = kernels.loaded({name!r})",
        f"    return fn({params})",
    ]
    exec("\n".join(lines), namespace)
    return namespace[name]


def _reject(name: str, index: int, dtype: np.dtype, ndim: int, value: Any) -> None:
    raise TypeError(
        f"{name}(): argument {index} must be a C-contiguous {ndim}-d {dtype} array, "
        f"got {getattr(value, 'dtype', type(value).__name__)} with ndim {getattr(value, 'ndim', '-')}"
    )


def resolve(source: str) -> Any:
    """``"module:attribute"`` → the attribute (the module imported now)."""
    module, _, attr = source.partition(":")
    return getattr(importlib.import_module(module), attr)


def build_failure(exc: BaseException) -> str:
    """One line for a failed build: the error's type and the first line of its message."""
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


def _package_version_bytes(package: str) -> bytes:
    """A fingerprint of an installed package's version without importing it (numba's import is
    what this module exists to avoid): the bytes of its ``_version.py``/``version.py``, else its
    distribution metadata's version."""
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.origin:
        root = Path(spec.origin).parent
        for name in ("_version.py", "version.py"):
            if (root / name).is_file():
                return (root / name).read_bytes()
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package).encode()
    except PackageNotFoundError:
        return b"absent"


class KernelSet:
    """Numba functions compiled together into one ahead-of-time library (see the module docstring).

    ``kernel(name)`` returns a callable that loads (or builds) the whole set on its first call;
    ``load()`` does it now and returns the backing ("aot" or "jit")."""

    def __init__(self, name: str, exports: tuple[Export, ...], sources: tuple[Path, ...]):
        self.name = name
        self.exports = {e.name: e for e in exports}
        self.sources = sources
        self.backing = ""  # "aot" or "jit" once loaded
        self.load_seconds = 0.0
        self._functions: dict[str, Callable[..., Any]] = {}  # export name → the loaded function
        self._lock = threading.Lock()
        self._entry_points = {e.name: _entry_point(self, e.name, e.args) for e in exports}

    # -- identity -------------------------------------------------------------------------------

    def key(self) -> str:
        h = hashlib.sha256()
        for part in (
            f"format {FORMAT} set {self.name}".encode(),
            json.dumps(
                sorted((e.name, e.source, e.signature(), e.readonly, e.options) for e in self.exports.values()),
                sort_keys=True,
                default=sorted,  # a set of fastmath flags, in a stable order
            ).encode(),
            *(p.read_bytes() for p in self.sources),
            _package_version_bytes("numba"),
            np.__version__.encode(),
            f"{sys.implementation.cache_tag} {sys.version} {importlib.machinery.EXTENSION_SUFFIXES[0]}".encode(),
            f"{platform.machine()} {diskcache.cpu_model()} {diskcache.cpu_flags()}".encode(),
        ):
            h.update(hashlib.sha256(part).digest())
        return h.hexdigest()

    def module_name(self) -> str:
        return f"openhood_aot_{self.name}"

    def paths(self, key: str, root: Path | None = None) -> tuple[Path, Path]:
        """(library, record) for ``key`` under ``root`` (the cache's folder by default); the
        record is a ``diskcache`` record of the library's SHA-256, keyed on ``key``."""
        folder = root if root is not None else cache_dir()
        stem = f"{self.name}-{key[:24]}"
        return folder / f"{stem}.so", folder / f"{stem}.json"

    def status(self) -> tuple[str, Path | None]:
        """Where a process would load the set from now: ("installed" | "cached" | "missing", path)."""
        key = self.key()
        for label, root in (("installed", install_dir()), ("cached", cache_dir())):
            library, record = self.paths(key, root)
            if not _entry_problem(key, library, record):
                return label, library
        return "missing", None

    def build_into(self, root: Path) -> tuple[str, float]:
        """Build the set into ``root`` unless a whole entry for its key is there already:
        ("built" | "present", seconds); installation calls it (``openhood kernels --build``)."""
        key = self.key()
        library, record = self.paths(key, root)
        root.mkdir(parents=True, exist_ok=True)
        with _exclusive(library.with_suffix(".lock")):
            if not _entry_problem(key, library, record):
                return "present", 0.0
            return "built", self.build(key, library, record)

    # -- loading --------------------------------------------------------------------------------

    def kernel(self, name: str) -> Callable[..., Any]:
        """The checked entry point of export ``name`` (it loads the set on first use)."""
        if name not in self.exports:
            raise KeyError(f"kernel set {self.name!r} has no export {name!r}")
        return self._entry_points[name]

    def loaded(self, name: str) -> Callable[..., Any]:
        """Export ``name``'s function, loading the set first if needed."""
        self.load()
        return self._functions[name]

    def load(self) -> str:
        """Load the set (building it if needed); returns ``"aot"`` or ``"jit"``. Thread-safe."""
        with self._lock:
            if not self.backing:
                t0 = time.perf_counter()
                module = None
                if os.environ.get(ENV_VAR, "1") != "0":
                    module = self._load_or_build()
                if module is not None:
                    self._functions = {n: getattr(module, n) for n in self.exports}
                    self.backing = "aot"
                else:
                    self._functions = self._jit_functions()
                    self.backing = "jit"
                self.load_seconds = time.perf_counter() - t0
        return self.backing

    def _load_or_build(self) -> Any:
        key = self.key()
        # never delete what installation put there
        module = self._try_load(key, *self.paths(key, install_dir()), remove=False)
        if module is not None:
            return module
        library, record = self.paths(key)
        module = self._try_load(key, library, record)
        if module is not None:
            return module
        try:
            library.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log.warning(
                "ahead-of-time kernels %r: cache directory not writable (%s); using numba's JIT", self.name, exc
            )
            return None
        with _exclusive(library.with_suffix(".lock")):
            module = self._try_load(key, library, record)  # another process built it meanwhile
            if module is not None:
                return module
            log.info("building ahead-of-time kernels %r for this CPU (once per kernel source and machine)", self.name)
            try:
                seconds = self.build(key, library, record)
            except Exception as exc:  # no C compiler, pycc gone from numba, …: the JIT still works
                log.warning(
                    "ahead-of-time kernels %r could not be built (%s); using numba's JIT", self.name, build_failure(exc)
                )
                return None
            log.info("built ahead-of-time kernels %r in %.1f s", self.name, seconds)
            return self._try_load(key, library, record)

    def _try_load(self, key: str, library: Path, record: Path, remove: bool = True) -> Any:
        """The library's module if the entry is whole and ours; a bad entry is reported and (in
        the cache) removed."""
        problem = _entry_problem(key, library, record)
        if problem == "missing":
            return None
        if not problem:
            try:
                loader = importlib.machinery.ExtensionFileLoader(self.module_name(), str(library))
                spec = importlib.util.spec_from_file_location(self.module_name(), library, loader=loader)
                assert spec is not None
                module = importlib.util.module_from_spec(spec)
                loader.exec_module(module)
                if all(hasattr(module, n) for n in self.exports):
                    return module
                problem = "it lacks exported functions"
            except ImportError as exc:
                problem = f"it does not load ({exc})"
        log.warning(
            "ahead-of-time kernels %r: ignoring %s: %s; %s",
            self.name,
            library,
            problem,
            "rebuilding" if remove else "looking in the cache",
        )
        if remove:
            for path in (library, record):
                with contextlib.suppress(OSError):
                    path.unlink()
        return None

    def build(self, key: str, library: Path, record: Path) -> float:
        """Compile the set with numba.pycc into ``library`` (+ ``record``); returns the seconds."""
        import warnings

        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pycc's pending-deprecation notice, once per build
            from numba import njit
            from numba.core.registry import CPUDispatcher
            from numba.pycc import CC

            scratch = Path(tempfile.mkdtemp(prefix=f".{self.name}-", dir=library.parent))
            try:
                cc = CC(self.module_name())
                cc.output_dir = str(scratch)
                cc.target_cpu = "host"
                cc.verbose = False
                for export in self.exports.values():
                    fn = resolve(export.source)
                    inner = fn if isinstance(fn, CPUDispatcher) else njit(**export.options)(fn)
                    cc.export(export.name, export.numba_signature())(_forwarder(export.name, len(export.args), inner))
                cc.compile()
                built = next(p for p in scratch.iterdir() if p.name.startswith(self.module_name()))
                digest = hashlib.sha256(built.read_bytes()).hexdigest()
                os.replace(built, library)  # same directory: atomic
                seconds = time.perf_counter() - t0
                if not diskcache.write(key, {"sha256": digest, "build_seconds": round(seconds, 2)}, record):
                    raise OSError(f"{record} could not be written")
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        return seconds

    def _jit_functions(self) -> dict[str, Callable[..., Any]]:
        """The same functions through numba's JIT (its own disk cache): an ``@njit`` source is used
        as it is (it may specialize on read-only arrays); a plain one is compiled for its signature."""
        from numba import njit
        from numba.core.registry import CPUDispatcher

        out = {}
        for name, export in self.exports.items():
            fn = resolve(export.source)
            if not isinstance(fn, CPUDispatcher):
                fn = njit(export.numba_signature(), cache=True, **export.options)(fn)
            out[name] = fn
        return out


def _entry_problem(key: str, library: Path, record: Path) -> str:
    """What is wrong with a library and its record: "" when whole and built for ``key``,
    "missing" when either is absent."""
    meta, problem = diskcache.check(key, record)
    if problem:
        return f"its record is {problem}"
    if meta is None or not library.exists():
        return "missing"
    if meta.get("sha256") != hashlib.sha256(library.read_bytes()).hexdigest():
        return "its hash does not match (corrupted or truncated)"
    return ""


def _forwarder(name: str, n_args: int, inner: Any) -> Callable[..., Any]:
    """A plain function ``name(a0, …) → inner(a0, …)`` for pycc to export: it keeps ``inner``'s
    own numba options (fastmath, inlining), which an export signature cannot carry."""
    params = ", ".join(f"a{i}" for i in range(n_args))
    namespace: dict[str, Any] = {"inner": inner}
    exec(f"def {name}({params}):\n    return inner({params})\n", namespace)
    return namespace[name]


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """An exclusive advisory lock held for the block (no-op where fcntl is absent)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(lock_path, "a+b") as f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)
