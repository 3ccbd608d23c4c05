import subprocess
import sys

import pytest

from openhood.cli import main
from openhood.loadtest import profiler
from openhood.loadtest.profiler import ProfilerError, record


def _free_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid  # just exited and reaped: no such process now


def test_missing_pid_is_a_clear_error(capsys):
    with pytest.raises(ProfilerError, match="no process with pid"):
        profiler.check_pid(_free_pid())
    assert main(["profile", "--pid", str(_free_pid()), "--duration", "1", "--out", "x.svg"]) == 2
    assert "no process with pid" in capsys.readouterr().err


def test_missing_py_spy_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(profiler.sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ProfilerError, match=r"pip install 'openhood\[profile\]'"):
        profiler.find_py_spy()


BUSY = """
import time


def spin_for_the_profiler():
    t = time.time()
    while time.time() - t < 20:
        sum(range(1000))


spin_for_the_profiler()
"""


def test_records_a_flame_graph_of_a_live_process(tmp_path, missing_tool):
    try:
        exe = profiler.find_py_spy()
    except ProfilerError:
        missing_tool("py-spy is not installed (pip install 'openhood[profile]')", "OPENHOOD_REQUIRE_PYSPY")
    script = tmp_path / "busy.py"
    script.write_text(BUSY)
    busy = subprocess.Popen([sys.executable, str(script)])
    try:
        out = record(busy.pid, tmp_path / "p.svg", duration_s=1, py_spy=exe)
    except ProfilerError as exc:
        if "ptrace" in str(exc) or "ermission" in str(exc):
            missing_tool(f"no ptrace permission here: {exc}", "OPENHOOD_REQUIRE_PYSPY")
        raise
    finally:
        busy.kill()
        busy.wait()
    text = out.read_text()
    assert text.lstrip().startswith("<?xml") or "<svg" in text[:500]
    # The sampled stack itself: the busy function, by name, in the file it runs from.
    assert "spin_for_the_profiler" in text and "busy.py" in text
