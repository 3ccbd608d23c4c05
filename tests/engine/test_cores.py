"""Core detection against fake cgroup trees (v2 cpu.max, v1 CFS quota) in tmp_path."""

from pathlib import Path

from openhood.engine.kernels.cores import CoreBudget, available_cores, detect_cores


def fake_v2(tmp_path: Path, cpu_max: dict[str, str], own: str = "/kubepods/pod1/ctr") -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, value in cpu_max.items():
        d = root / rel.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.max").write_text(value + "\n")
    (root / own.lstrip("/")).mkdir(parents=True, exist_ok=True)
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(f"0::{own}\n")
    return root, proc


def test_v2_quota_caps_the_affinity_and_rounds_up(tmp_path):
    # 150000/100000 = 1.5 cores on an 8-core mask → 2 threads
    root, proc = fake_v2(tmp_path, {"/kubepods/pod1/ctr": "150000 100000"})
    b = detect_cores(root, proc, affinity=8)
    assert (b.cores, b.quota, b.affinity) == (2, 1.5, 8)
    assert "cgroup v2" in b.quota_source and "1.50 cores" in b.describe()


def test_v2_no_limit_and_a_tighter_ancestor(tmp_path):
    root, proc = fake_v2(tmp_path, {"/kubepods/pod1/ctr": "max 100000"})
    assert detect_cores(root, proc, affinity=4).cores == 4
    assert detect_cores(root, proc, affinity=4).quota is None
    root, proc = fake_v2(tmp_path / "b", {"/kubepods/pod1/ctr": "400000 100000", "/kubepods/pod1": "100000 100000"})
    assert detect_cores(root, proc, affinity=4).cores == 1  # the pod's limit binds its containers


def test_v1_cfs_quota_and_unlimited(tmp_path):
    root = tmp_path / "cgroup"
    d = root / "cpu,cpuacct" / "docker" / "abc"
    d.mkdir(parents=True)
    (d / "cpu.cfs_quota_us").write_text("300000\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "cgroup_file"
    proc.write_text("4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n")
    b = detect_cores(root, proc, affinity=16)
    assert (b.cores, b.quota) == (3, 3.0) and "cgroup v1" in b.quota_source
    (d / "cpu.cfs_quota_us").write_text("-1\n")
    assert detect_cores(root, proc, affinity=16) == CoreBudget(16)


def test_affinity_alone_when_there_is_no_cgroup_and_never_below_one(tmp_path):
    missing = tmp_path / "nothing"
    assert detect_cores(missing, missing, affinity=3).cores == 3
    assert CoreBudget(1, 0.2, "x").cores == 1  # a fifth of a core still needs one thread
    assert available_cores() >= 1
