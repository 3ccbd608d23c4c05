"""Byte-level BPE encoding in numba (the source): pre-tokenizer, piece cache and merges for a whole batch in one call.

``encode_texts`` walks the texts' code points (UTF-32, all texts in one array) with the
pre-tokenizer compiled by hand into ``_next_piece`` (the alternatives of
``byte_level.pretokenizer_pattern`` in the same order, over a per-code-point class table), turns
each piece into UTF-8 bytes, and looks them up in a ``PieceCache``; a miss maps the bytes to
their one-character token ids and merges them, lowest-rank pair first, every occurrence of that
pair left to right (what HF and llama.cpp produce), then caches them. Merge lookups use an
open-addressing hash table in NumPy arrays (key ``left * V + right`` → rank, merged id), so no
Python object is touched per piece or per character, and the GIL is released.
The trade-offs: the regex exists twice (``re`` pattern as the reference, this state machine as
the fast path; tests compare them); building the merge table costs ~20 ms at load; the merge
loop is O(n²) per piece, cheap for the short pieces a pre-tokenizer makes (a pathological
10k-character piece is still fine); the cache is bounded and emptied whole when full.

This module is the kernels' source: ``tokenizer/bpe_tables.py`` holds the tables they read and
compiles ``fill_merges`` and ``encode_texts`` ahead of time into a library the tokenizer
loads without numba (``openhood.aot``), or through numba's JIT where that cannot be built.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from openhood.tokenizer.bpe_tables import EMPTY


@njit(inline="always")
def _slot(key, mask):
    return (key * 0x9E3779B1) & mask


@njit(cache=True)
def _insert(keys, ranks, merged, key, rank, new, mask):
    s = _slot(key, mask)
    while keys[s] != EMPTY:
        if keys[s] == key:
            return  # the first (lowest-rank) entry for a pair wins
        s = (s + 1) & mask
    keys[s], ranks[s], merged[s] = key, rank, new


@njit(cache=True)
def _lookup(keys, ranks, key, mask):
    s = _slot(key, mask)
    while keys[s] != EMPTY:
        if keys[s] == key:
            return s
        s = (s + 1) & mask
    return -1


@njit(cache=True)
def fill_merges(keys, ranks, merged, arr, vocab_size, mask):
    """Insert merge rank r = (arr[r, 0], arr[r, 1]) → arr[r, 2] into the table's arrays."""
    for rank in range(arr.shape[0]):
        _insert(keys, ranks, merged, arr[rank, 0] * vocab_size + arr[rank, 1], rank, arr[rank, 2], mask)


@njit(inline="always")
def _merge_run(ids, a, n, keys, ranks, merged, vocab_size, mask):
    """Merge ``ids[a:a+n]`` in place, lowest-rank pair first; returns the merged length."""
    while n > 1:
        best_rank, best_slot = 2**31 - 1, -1
        for k in range(n - 1):
            s = _lookup(keys, ranks, ids[a + k] * vocab_size + ids[a + k + 1], mask)
            if s >= 0 and ranks[s] < best_rank:
                best_rank, best_slot = ranks[s], s
        if best_slot < 0:
            break
        left, right = keys[best_slot] // vocab_size, keys[best_slot] % vocab_size
        new = merged[best_slot]
        w, k = 0, 0
        while k < n:
            if k < n - 1 and ids[a + k] == left and ids[a + k + 1] == right:
                ids[a + w] = new
                k += 2
            else:
                ids[a + w] = ids[a + k]
                k += 1
            w += 1
        n = w
    return n


# Code point classes of the pre-tokenizer (numbered as ``byte_level.code_point_classes``, from HF's tables).
OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3


@njit(inline="always")
def _run(cps, i, e, cls, c):
    """End of the run of class ``c`` that starts at ``i`` (exclusive), stopping at ``e``."""
    while i < e and cls[cps[i]] == c:
        i += 1
    return i


@njit(inline="always")
def _contraction(cps, i, e):
    """Length of the contraction 's 't 're 've 'm 'll 'd at ``cps[i]`` (an apostrophe), or 0."""
    if i + 1 >= e:
        return 0
    c = cps[i + 1]
    if c == 115 or c == 116 or c == 109 or c == 100:  # s t m d
        return 2
    if i + 2 < e:
        d = cps[i + 2]
        if (c == 114 and d == 101) or (c == 118 and d == 101) or (c == 108 and d == 108):  # re ve ll
            return 3
    return 0


@njit(inline="always")
def _next_piece(cps, i, e, cls, split_digits):
    """End of the pre-token piece starting at ``i`` in the segment ``cps[:e]``.

    The hand-compiled form of ``byte_level.pretokenizer_pattern``: its alternatives are tried
    in the pattern's order, and ``\\s+(?!\\S)`` backtracks by one character before a non-space.
    """
    c = cls[cps[i]]
    if split_digits and c == NUMBER:  # [N]
        return i + 1
    if cps[i] == 39:  # 's|'t|'re|'ve|'m|'ll|'d
        k = _contraction(cps, i, e)
        if k:
            return i + k
    nxt = cls[cps[i + 1]] if i + 1 < e else SPACE
    if c == LETTER or (cps[i] == 32 and nxt == LETTER):  # ' ?\p{L}+'
        return _run(cps, i + 1, e, cls, LETTER)
    if not split_digits and (c == NUMBER or (cps[i] == 32 and nxt == NUMBER)):  # ' ?\p{N}+'
        return _run(cps, i + 1, e, cls, NUMBER)
    if c == OTHER or (cps[i] == 32 and nxt == OTHER):  # ' ?[^\s\p{L}\p{N}]+'
        return _run(cps, i + 1, e, cls, OTHER)
    # c == SPACE: '\s+(?!\S)' then '\s+' (with digits split, a digit ends the text like the end does)
    j = _run(cps, i + 1, e, cls, SPACE)
    if j == e:
        return j
    after = cls[cps[j]]
    if split_digits and after == NUMBER:
        return j
    return j - 1 if j - i > 1 else j


@njit(cache=True, nogil=True)
def split_pieces(cps, e, cls, split_digits):
    """Piece boundaries of ``cps[:e]`` (the kernel's pre-tokenizer alone, for tests)."""
    ends = np.empty(e, dtype=np.int64)
    n, i = 0, 0
    while i < e:
        i = _next_piece(cps, i, e, cls, split_digits)
        ends[n] = i
        n += 1
    return ends[:n]


@njit(inline="always")
def _cache_find(cache, buf, nb, h):
    slots, hashes, key_start, key_len, _, _, key_bytes, _, _ = cache
    mask = slots.size - 1
    s = h & mask
    while slots[s] != EMPTY:
        k = slots[s]
        if hashes[k] == h and key_len[k] == nb:
            a = key_start[k]
            same = True
            for q in range(nb):
                if key_bytes[a + q] != buf[q]:
                    same = False
                    break
            if same:
                return k
        s = (s + 1) & mask
    return -1


@njit(inline="always")
def _cache_add(cache, buf, nb, h, ids, a, n):
    slots, hashes, key_start, key_len, value_start, value_len, key_bytes, values, used = cache
    if nb > key_bytes.size or n > values.size:
        return  # too big to ever fit: not cached
    if used[0] >= hashes.size or used[1] + nb > key_bytes.size or used[2] + n > values.size:
        slots.fill(EMPTY)  # full: start over
        used[:] = 0
    k = used[0]
    hashes[k], key_start[k], key_len[k], value_start[k], value_len[k] = h, used[1], nb, used[2], n
    key_bytes[used[1] : used[1] + nb] = buf[:nb]
    values[used[2] : used[2] + n] = ids[a : a + n]
    used[0] += 1
    used[1] += nb
    used[2] += n
    mask = slots.size - 1
    s = h & mask
    while slots[s] != EMPTY:
        s = (s + 1) & mask
    slots[s] = k


@njit(inline="always")
def _utf8_len(c):
    return 1 if c < 0x80 else 2 if c < 0x800 else 3 if c < 0x10000 else 4


@njit(cache=True, nogil=True)
def encode_texts(
    cps,
    starts,
    ends,
    sp_start,
    sp_end,
    sp_id,
    cls,
    split_digits,
    byte_id,
    keys,
    ranks,
    merged,
    vocab_size,
    mask,
    slots,
    hashes,
    key_start,
    key_len,
    value_start,
    value_len,
    key_bytes,
    values,
    used,
):
    """Ids of texts ``cps[starts[t]:ends[t]]`` (code points), with special tokens at the given spans.

    Returns (ids, lengths): every text's ids back to back and how many each has. Per piece:
    UTF-8 bytes and their hash, a cache probe, and on a miss the byte ids merged and cached.
    The merge table (keys … mask) and the piece cache (slots … used) come as separate arrays: an
    ahead-of-time entry point checks each array argument's dtype, which it cannot inside a tuple.
    """
    cache = (slots, hashes, key_start, key_len, value_start, value_len, key_bytes, values, used)
    bound = sp_start.size
    for t in range(starts.size):
        for i in range(starts[t], ends[t]):
            bound += _utf8_len(cps[i])
    out = np.empty(bound, dtype=np.int32)
    lengths = np.zeros(starts.size, dtype=np.int64)
    buf = np.empty(64, dtype=np.uint8)
    scratch = np.empty(64, dtype=np.int64)
    w, sp = 0, 0
    for t in range(starts.size):
        w0, pos, end = w, starts[t], ends[t]
        while sp < sp_start.size and sp_start[sp] < pos:
            sp += 1
        while pos < end:
            seg = end
            if sp < sp_start.size and sp_start[sp] < end:
                seg = sp_start[sp]
            while pos < seg:
                stop = _next_piece(cps, pos, seg, cls, split_digits)
                if 4 * (stop - pos) > buf.size:
                    buf = np.empty(8 * (stop - pos), dtype=np.uint8)
                    scratch = np.empty(8 * (stop - pos), dtype=np.int64)
                nb = 0
                h = -3750763034362895579  # FNV-1a
                for i in range(pos, stop):
                    c = cps[i]
                    if c < 0x80:
                        buf[nb] = c
                        nb += 1
                    elif c < 0x800:
                        buf[nb] = 0xC0 | (c >> 6)
                        buf[nb + 1] = 0x80 | (c & 0x3F)
                        nb += 2
                    elif c < 0x10000:
                        buf[nb] = 0xE0 | (c >> 12)
                        buf[nb + 1] = 0x80 | ((c >> 6) & 0x3F)
                        buf[nb + 2] = 0x80 | (c & 0x3F)
                        nb += 3
                    else:
                        buf[nb] = 0xF0 | (c >> 18)
                        buf[nb + 1] = 0x80 | ((c >> 12) & 0x3F)
                        buf[nb + 2] = 0x80 | ((c >> 6) & 0x3F)
                        buf[nb + 3] = 0x80 | (c & 0x3F)
                        nb += 4
                for q in range(nb):
                    h = (h ^ buf[q]) * 1099511628211
                h ^= h >> 29
                k = _cache_find(cache, buf, nb, h)
                if k >= 0:
                    a, n = cache[4][k], cache[5][k]
                    out[w : w + n] = cache[7][a : a + n]
                    w += n
                else:
                    n = 0
                    for q in range(nb):
                        b = byte_id[buf[q]]
                        if b >= 0:  # a byte without a token is dropped, as HF does
                            scratch[n] = b
                            n += 1
                    n = _merge_run(scratch, 0, n, keys, ranks, merged, vocab_size, mask)
                    _cache_add(cache, buf, nb, h, scratch, 0, n)
                    out[w : w + n] = scratch[:n]
                    w += n
                pos = stop
            if seg < end:
                out[w] = sp_id[sp]
                w += 1
                pos = sp_end[sp]
                sp += 1
        lengths[t] = w - w0
    return out[:w].copy(), lengths  # the bound can be ~2.5x the ids: don't keep it alive
