"""ONNX Runtime's memory settings come from one place (backends/ort_session.py) and reach every run."""

import numpy as np
import pytest

from openhood.backends import ort_session

pytest.importorskip("onnxruntime")


def test_session_options_carry_the_chosen_memory_settings(monkeypatch):
    so = ort_session.session_options(1)
    assert (so.enable_cpu_mem_arena, so.enable_mem_pattern) == (ort_session.CPU_MEM_ARENA, ort_session.MEM_PATTERN)
    monkeypatch.setattr(ort_session, "CPU_MEM_ARENA", False)
    monkeypatch.setattr(ort_session, "MEM_PATTERN", False)
    so = ort_session.session_options(1)
    assert not so.enable_cpu_mem_arena and not so.enable_mem_pattern


def test_arena_shrink_is_a_run_option_only_with_the_arena(monkeypatch):
    monkeypatch.setattr(ort_session, "ARENA_SHRINK", False)
    assert ort_session.run_options() is None
    monkeypatch.setattr(ort_session, "ARENA_SHRINK", True)
    monkeypatch.setattr(ort_session, "CPU_MEM_ARENA", True)
    ro = ort_session.run_options()
    assert ro.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    monkeypatch.setattr(ort_session, "CPU_MEM_ARENA", False)
    assert ort_session.run_options() is None  # nothing to shrink


def test_the_backend_runs_with_the_run_options(embedders, monkeypatch):
    """Every ``session.run`` gets ``run_options()``; shrinking only returns free arena blocks,
    so results stay identical."""
    emb = embedders("onnxruntime")
    backend = emb.backend
    ids = np.array([[101, 7592, 2088, 102]], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    plain = backend.run(feeds)
    passed = []

    class Spy:
        def __init__(self, session):
            self.session = session

        def run(self, names, arrays, options=None):
            passed.append(options)
            return self.session.run(names, arrays, options)

    monkeypatch.setattr(backend, "session", Spy(backend.session))
    monkeypatch.setattr(ort_session, "ARENA_SHRINK", True)
    monkeypatch.setattr(ort_session, "CPU_MEM_ARENA", True)
    shrunk = backend.run(feeds)
    assert passed[-1].get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    for name in plain:
        np.testing.assert_array_equal(plain[name], shrunk[name])


def test_pool_threads_stop_spinning_when_a_run_returns(monkeypatch):
    so = ort_session.session_options(2)
    assert so.get_session_config_entry("session.force_spinning_stop") == "1"
    monkeypatch.setattr(ort_session, "SPIN_AFTER_RUN", True)  # ORT's default: the entry is not set
    with pytest.raises(RuntimeError):  # ORT raises on reading an entry that was never set
        ort_session.session_options(2).get_session_config_entry("session.force_spinning_stop")
