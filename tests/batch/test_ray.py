"""``--engine ray``: a private 2-CPU Ray on loopback runs the job; output byte-identical to local.

While the job runs, every socket of the job's process tree (driver, GCS, raylet, agents,
workers) is checked: listening or connected on loopback only, never on the machine's address.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time

import psutil
import pytest

pytest.importorskip("ray")


def is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def foreign_sockets(root: psutil.Process, names: set[str]) -> set[str]:
    seen = set()
    for proc in [root, *root.children(recursive=True)]:
        try:
            conns = proc.net_connections(kind="inet")
            names.add(proc.name())
        except psutil.Error:
            continue
        for c in conns:
            for end in (c.laddr, c.raddr):
                if end and not is_loopback(end.ip):
                    seen.add(f"{proc.name()} {c.status} {end.ip}:{end.port}")
    return seen


@pytest.mark.timeout(180)
def test_ray_engine_matches_local_and_stays_on_loopback(jsonl, tmp_path):
    common = ["--input", str(jsonl), "--shard-rows", "8", "--batch-size", "4", "--threads", "1"]
    local, on_ray = tmp_path / "local.parquet", tmp_path / "ray.parquet"
    cli = [sys.executable, "-m", "openhood.cli", "batch"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(
        [*cli, *common, "--output", str(on_ray), "--engine", "ray", "--ray-cpus", "2", "--concurrency", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    root = psutil.Process(proc.pid)
    foreign, names, polls = set(), set(), 0
    while proc.poll() is None:
        foreign |= foreign_sockets(root, names)
        polls += 1
        time.sleep(0.2)
    out, err = proc.communicate()
    assert proc.returncode == 0, err[-2000:]
    assert {"gcs_server", "raylet"} <= names  # the sockets of Ray's own daemons were looked at
    assert polls > 10 and not foreign, sorted(foreign)
    assert "40 rows embedded" in out
    subprocess.run([*cli, *common, "--output", str(local)], check=True, capture_output=True, timeout=120)
    assert on_ray.read_bytes() == local.read_bytes()


def test_fewer_shards_than_actors_is_announced():
    from openhood.batch.ray_engine import idle_actors_note

    assert idle_actors_note(5, 2) is None and idle_actors_note(2, 2) is None
    note = idle_actors_note(1, 2)
    assert "1 shard(s) for 2 Ray actors" in note and "--shard-rows" in note
