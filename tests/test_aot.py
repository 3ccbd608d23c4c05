"""The ahead-of-time kernel cache (openhood.aot): built once, loaded without numba, safe when damaged.

A tiny kernel source is written into a temporary folder, so every test builds its own library in
its own cache directory (a few seconds each: numba's import and a C compile).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from openhood import aot

pytestmark = pytest.mark.skipif(not (shutil.which("cc") or shutil.which("gcc")), reason="pycc needs a C compiler")

SOURCE = textwrap.dedent(
    """
    import numpy as np

    def scale_rows(y, factor):
        for i in range(y.shape[0]):
            for j in range(y.shape[1]):
                y[i, j] *= factor

    def total(x):
        s = 0
        for v in x:
            s += v
        return s
    """
)

# What a process runs to use the set: the backing, a result, and whether numba was imported.
PROBE = textwrap.dedent(
    """
    import logging, sys
    import numpy as np
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    from aot_probe_set import SET
    y = np.ones((2, 3), np.float32)
    SET.kernel("scale_rows")(y, 2.5)
    print(SET.backing, float(y.sum()), SET.kernel("total")(np.arange(5, dtype=np.int64)), "numba" in sys.modules)
    """
)

SET_MODULE = textwrap.dedent(
    """
    from pathlib import Path
    from openhood.aot import Export, KernelSet

    SET = KernelSet(
        "probe",
        (
            Export("scale_rows", "aot_probe_source:scale_rows", ("f4[:, ::1]", "f4")),
            Export("total", "aot_probe_source:total", ("i8[::1]",), "i8", readonly=(0,)),
        ),
        sources=(Path(__file__).with_name("aot_probe_source.py"),),
    )
    """
)


@pytest.fixture
def probe_dir(tmp_path, monkeypatch):
    """A folder holding the kernel source and its set, importable, with its own cache directory."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "aot_probe_source.py").write_text(SOURCE)
    (code / "aot_probe_set.py").write_text(SET_MODULE)
    monkeypatch.setenv("OPENHOOD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.syspath_prepend(str(code))
    for name in ("aot_probe_source", "aot_probe_set"):
        sys.modules.pop(name, None)
    return code


def run_probe(code: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(code), os.environ.get("PYTHONPATH", "")]), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )


def entry(tmp_cache: Path) -> tuple[Path, Path]:
    return entry_in(tmp_cache / "aot")


def test_first_process_builds_the_second_loads_without_numba(probe_dir, tmp_path):
    first = run_probe(probe_dir)
    assert first.stdout.split() == ["aot", "15.0", "10", "True"]  # the build imported numba
    assert "building ahead-of-time kernels 'probe'" in first.stderr
    second = run_probe(probe_dir)
    assert second.stdout.split() == ["aot", "15.0", "10", "False"]
    assert "building" not in second.stderr and "WARNING" not in second.stderr
    _, sidecar = entry(tmp_path / "cache")
    assert json.loads(sidecar.read_text())["key"] == _fresh_set().key()


def _fresh_set() -> aot.KernelSet:
    sys.modules.pop("aot_probe_set", None)
    import aot_probe_set

    return aot_probe_set.SET


@pytest.mark.parametrize("damage", ["corrupted", "truncated", "foreign", "unreadable record"])
def test_a_damaged_entry_is_reported_once_ignored_and_rebuilt(probe_dir, tmp_path, caplog, damage):
    run_probe(probe_dir)
    library, sidecar = entry(tmp_path / "cache")
    if damage == "corrupted":
        data = bytearray(library.read_bytes())
        data[len(data) // 2] ^= 0xFF
        library.write_bytes(bytes(data))
    elif damage == "truncated":
        library.write_bytes(library.read_bytes()[:1000])
    elif damage == "foreign":
        record = json.loads(sidecar.read_text())
        sidecar.write_text(json.dumps({**record, "key": "0" * 64}))
    else:
        sidecar.write_text("{not json")
    kernels = _fresh_set()
    with caplog.at_level(logging.INFO, logger="openhood.aot"):
        y = np.ones((2, 3), np.float32)
        kernels.kernel("scale_rows")(y, 2.0)
    assert kernels.backing == "aot" and y.sum() == 12.0
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "ignoring" in warnings[0].getMessage()
    assert any("built ahead-of-time kernels 'probe'" in r.getMessage() for r in caplog.records)
    entry(tmp_path / "cache")  # one whole entry again
    assert run_probe(probe_dir).stdout.split()[-1] == "False"  # and the next process loads it


def test_concurrent_first_starts_build_once_and_both_succeed(probe_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(probe_dir), os.environ.get("PYTHONPATH", "")])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROBE], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert [o[0].split()[:3] for o in outs] == [["aot", "15.0", "10"]] * 2
    assert sum(o[1].count("building ahead-of-time kernels") for o in outs) == 1
    assert not any("WARNING" in o[1] for o in outs)
    entry(tmp_path / "cache")


def test_switched_off_it_uses_numbas_jit_with_the_same_results(probe_dir, tmp_path):
    out = run_probe(probe_dir, OPENHOOD_AOT="0")
    assert out.stdout.split() == ["jit", "15.0", "10", "True"]
    assert not (tmp_path / "cache" / "aot").exists()


def test_a_failed_build_falls_back_to_the_jit_in_one_line(probe_dir, caplog, monkeypatch):
    kernels = _fresh_set()

    def no_compiler(*args, **kwargs):
        raise OSError("cc: not found\nmore detail")

    monkeypatch.setattr(aot.KernelSet, "build", no_compiler)
    with caplog.at_level(logging.INFO, logger="openhood.aot"):
        assert kernels.kernel("total")(np.arange(4, dtype=np.int64)) == 6
    assert kernels.backing == "jit"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == ["ahead-of-time kernels 'probe' could not be built (OSError: cc: not found); using numba's JIT"]


def test_array_specs_and_the_call_check():
    assert aot._array_spec("f4[:, :, :, ::1]") == (np.dtype("float32"), 4)
    with pytest.raises(ValueError, match="C-contiguous"):
        aot._array_spec("f4[:, :]")
    loaded = SimpleNamespace(_functions={"k": lambda *a: "ran"})  # a set whose "k" is loaded
    check = aot._entry_point(loaded, "k", ("u4[::1]", "i8"))
    assert check(np.zeros(3, np.uint32), 5) == "ran"
    with pytest.raises(TypeError, match="uint32"):
        check(np.zeros(3, np.int32), 5)
    with pytest.raises(TypeError, match="1-d"):
        check(np.zeros((1, 3), np.uint32), 5)


def test_an_installed_entry_is_used_first_and_a_bad_one_is_left_in_place(probe_dir, tmp_path, monkeypatch):
    from openhood.cli import main

    installed = tmp_path / "installed"
    monkeypatch.setenv("OPENHOOD_KERNEL_DIR", str(installed))
    monkeypatch.setattr("openhood.cli.kernels.KERNEL_SETS", ("aot_probe_set:SET",))
    sys.modules.pop("aot_probe_set", None)
    assert main(["kernels", "--build"]) == 0  # what installation runs
    assert main(["kernels", "--build"]) == 0  # a second time: present, not rebuilt
    library, _ = entry_in(installed)
    out = run_probe(probe_dir, OPENHOOD_KERNEL_DIR=str(installed))
    assert out.stdout.split() == ["aot", "15.0", "10", "False"]
    assert not (tmp_path / "cache" / "aot").exists()  # nothing built into the cache
    library.write_bytes(library.read_bytes()[:-100])  # damaged after installation
    out = run_probe(probe_dir, OPENHOOD_KERNEL_DIR=str(installed))
    assert out.stdout.split() == ["aot", "15.0", "10", "True"]  # it built its own copy
    warnings = [ln for ln in out.stderr.splitlines() if "WARNING" in ln]
    assert len(warnings) == 1 and "looking in the cache" in warnings[0]
    assert library.exists()  # installation's file is not ours to delete
    entry(tmp_path / "cache")


def test_the_kernels_command_lists_every_set(capsys):
    from openhood.cli import main
    from openhood.cli.kernels import KERNEL_SETS

    assert main(["kernels"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == [ref.split(":")[1].lower() for ref in KERNEL_SETS]
    assert all(ln.split()[1] in ("installed", "cached", "missing") for ln in lines)


def entry_in(folder: Path) -> tuple[Path, Path]:
    libraries = sorted(folder.glob("probe-*.so"))
    assert len(libraries) == 1, libraries
    return libraries[0], libraries[0].with_suffix(".json")
