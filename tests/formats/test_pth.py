"""The restricted .pth reader: real torch.save files in both layouts, and pickles that try to run code."""

from __future__ import annotations

import io
import os
import pickle
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from openhood.formats.pth import LEGACY_MAGIC, UnsafeCheckpointError, load_pth

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vision"


def expected_tiny() -> dict[str, np.ndarray]:
    """The same formulas as scripts/make_vision_fixtures.py:tiny_state_dict."""
    a = np.arange(12, dtype=np.float32).reshape(3, 4) / 4
    return {
        "a": a,
        "a_t": a.T,
        "a_row1": a[1],
        "count": np.array(7, dtype=np.int64),
        "half": (np.arange(5, dtype=np.float16) / 8),
        "bf16": np.array([[1.5, -2.0], [0.25, 3.0]], np.float32),
        "flags": np.array([True, False, True]),
    }


@pytest.mark.parametrize("name", ["tiny_zip.pth", "tiny_legacy.pth"])
def test_real_checkpoints_in_both_layouts(name):
    got = load_pth(FIXTURES / name)
    want = expected_tiny()
    assert list(got) == list(want)
    for key, value in want.items():
        assert got[key].dtype == value.dtype, key
        assert got[key].shape == value.shape, key
        assert np.array_equal(got[key], value), key
        assert got[key].flags.c_contiguous  # a transposed view comes back in logical (C) order


class _RunsCode:
    """Unpickling this calls os.system (what a malicious checkpoint does)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _legacy_stream(obj_pickle: bytes) -> bytes:
    header = b"".join(pickle.dumps(v, protocol=2) for v in (LEGACY_MAGIC, 1001, {"little_endian": True}))
    return header + obj_pickle + pickle.dumps([], protocol=2)


def _zip_archive(obj_pickle: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("archive/data.pkl", obj_pickle)
        zf.writestr("archive/version", "3\n")
    return buf.getvalue()


@pytest.mark.parametrize("layout", ["zip", "legacy"])
@pytest.mark.parametrize("nested", [False, True])
def test_code_in_the_pickle_never_runs(tmp_path, layout, nested):
    marker = tmp_path / "pwned"
    payload = {"weight": _RunsCode(marker)} if nested else _RunsCode(marker)
    obj = pickle.dumps(payload, protocol=2)
    assert b"system" in obj  # the payload really names os.system (posix.system)
    path = tmp_path / "evil.pth"
    path.write_bytes(_zip_archive(obj) if layout == "zip" else _legacy_stream(obj))
    with pytest.raises(UnsafeCheckpointError, match=r"system, which is not needed to rebuild tensors"):
        load_pth(path)
    assert not marker.exists()
    # the same bytes through plain pickle DO run the command: the test can fail
    if layout == "legacy" and not nested:
        pickle.loads(obj)
        assert marker.exists()


def test_other_globals_are_refused(tmp_path):
    for module, name in [("builtins", "eval"), ("subprocess", "Popen"), ("torch", "load"), ("numpy", "load")]:
        evil = b"\x80\x02c" + f"{module}\n{name}\n".encode() + b"q\x00."
        path = tmp_path / "g.pth"
        path.write_bytes(_zip_archive(evil))
        with pytest.raises(UnsafeCheckpointError, match=f"{module}.{name}"):
            load_pth(path)


def test_damaged_files_are_errors_not_crashes(tmp_path):
    data = (FIXTURES / "tiny_legacy.pth").read_bytes()
    cut = tmp_path / "cut.pth"
    cut.write_bytes(data[: len(data) - 10])
    with pytest.raises(pickle.UnpicklingError, match="truncated"):
        load_pth(cut)
    junk = tmp_path / "junk.pth"
    junk.write_bytes(pickle.dumps(12345, protocol=2) + struct.pack("<q", 1))
    with pytest.raises(pickle.UnpicklingError, match="magic"):
        load_pth(junk)


def test_convert_refuses_an_unsafe_checkpoint(tmp_path):
    marker = tmp_path / "pwned"
    src = tmp_path / "evil.pth"
    src.write_bytes(_zip_archive(pickle.dumps({"w": _RunsCode(marker)}, protocol=2)))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "openhood.cli", "convert", str(src), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "not needed to rebuild tensors" in proc.stderr
    assert not out.exists() and not marker.exists()
