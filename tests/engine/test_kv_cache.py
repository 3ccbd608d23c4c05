"""The KV cache's memory: pages become resident only as positions are written, a small page at a
time. With numpy's allocation (it advises transparent huge pages for large arrays) the first write
to each slot's region of each layer faulted in 2 MiB; a server's 16 busy SmolLM2 slots held
1.4 GiB for 191 MiB of keys and values."""

from __future__ import annotations

import numpy as np

from openhood.engine.models.kv_cache import KVCache, lazy_zeros


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) / 1024


def test_lazy_zeros_are_writable_zeros_of_the_asked_shape():
    a = lazy_zeros((3, 5, 7))
    assert a.shape == (3, 5, 7) and a.dtype == np.float32 and a.flags.writeable and not a.any()
    a[1, 2] = 4.0
    assert a.sum() == 28.0
    assert lazy_zeros((0, 4)).size == 0


def test_resident_memory_follows_the_positions_written_not_the_slots_touched():
    # 4 layers x 8 slots x 3 heads x 2048 positions x 64 x 4 bytes = 48 MiB each for K and V; 100
    # positions written in every slot = 2.3 MiB of data. Huge pages made that 4 x 8 x 2 x 2 MiB = 128.
    before = rss_mib()
    cache = KVCache(n_layers=4, n_kv_heads=3, head_dim=64, n_slots=8, max_len=2048)
    kv = np.ones((100, 3, 64), np.float32)
    for layer in range(4):
        for slot in range(8):
            cache.write(layer, slot, 0, kv, kv)
    grown = rss_mib() - before
    written = 2 * 4 * 8 * kv.nbytes / 2**20
    assert grown < written + 16, (grown, written)
    k, v = cache.view(0, np.arange(8), 100)
    assert k.shape == (8, 3, 100, 64) and k.sum() == 8 * kv.size and v.sum() == 8 * kv.size
