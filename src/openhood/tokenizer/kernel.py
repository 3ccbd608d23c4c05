"""The compiled core: drop / split / WordPiece over a whole batch of code points in one call.

Input is the batch *after* ``BertNormalizer.prepare`` as one uint32 code point array plus
per-text ``[starts, ends)``; code points ≥ 0x110000 are added-token markers (``0x110000 + k`` →
``added_ids[k]``), which can never collide with text. For each text the kernel

1. compacts the text into ``scratch``, dropping the DROP class (controls, marks) and rewriting
   the REMAP class (the few lowercase mappings Python lacks) by binary search in ``remap_src``;
2. pre-tokenizes: whitespace separates words, punctuation and CJK ideographs are one-char words;
3. runs greedy longest-match WordPiece on each word by walking the ``VocabTrie`` (O(n·k)), a
   word longer than ``max_chars`` or with an unmatched remainder becoming one ``unk_id``;
4. writes prefix specials, the ids (stopping once ``limit`` ids are exceeded: truncation), suffix
   specials, straight into the flat output.

Why numba: this is a loop over characters with data-dependent branches and a trie walk, which
NumPy cannot vectorize without materializing every candidate prefix; see docs/design.md for the
measurements. This module is the source only: ``tokenizer/wordpiece_kernels.py`` compiles it
ahead of time into a library the tokenizer loads without importing numba (``openhood.aot``), or,
where that cannot be built, through numba's JIT with its disk cache (``cache=True``; the
directory is ``openhood.NUMBA_CACHE_DIR``). The trie's hash walk (``child``) and its insertion
kernel live here too, so one library holds everything the tokenizer calls.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from openhood.tokenizer.normalizer import DROP, MAX_CODE_POINT, REMAP, SPACE, WORD
from openhood.tokenizer.wordpiece_kernels import (
    P_CONT_ROOT,
    P_MASK,
    P_MAX_CHARS,
    P_N_PREFIX,
    P_N_SUFFIX,
    P_N_SYMBOLS,
    P_UNK,
)

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@njit(inline="always")
def hash_slot(key, mask):
    """Fibonacci hashing of a non-negative int64 key into [0, mask]."""
    return np.int64((np.uint64(key) * _GOLDEN) >> np.uint64(29)) & mask


@njit(inline="always")
def child(node, sym, n_symbols, keys, children, mask):
    key = np.int64(node) * n_symbols + sym
    h = hash_slot(key, mask)
    while True:
        k = keys[h]
        if k == key:
            return children[h]
        if k == -1:
            return -1
        h = (h + 1) & mask


@njit(cache=True)
def _insert_tokens(cps, offsets, ids, symbol, n_symbols, keys, children, mask, token_id, prefix):
    """Insert token t = cps[offsets[t]:offsets[t+1]] with id ids[t].

    Returns (node count, node reached by walking ``prefix`` or -1): the continuation root.
    """
    n_nodes = 1
    for t in range(offsets.size - 1):
        node = 0
        for i in range(offsets[t], offsets[t + 1]):
            key = np.int64(node) * n_symbols + symbol[cps[i]]
            h = hash_slot(key, mask)
            while keys[h] != -1 and keys[h] != key:
                h = (h + 1) & mask
            if keys[h] == -1:
                keys[h] = key
                children[h] = n_nodes
                n_nodes += 1
            node = children[h]
        token_id[node] = ids[t]
    node = 0
    for i in range(prefix.size):
        s = symbol[prefix[i]]
        node = child(node, s, n_symbols, keys, children, mask) if s >= 0 else -1
        if node < 0:
            break
    return n_nodes, node


@njit(inline="always")
def _wordpiece(buf, ws, we, out, p, symbol, token_id, keys, children, mask, n_symbols, cont_root, unk_id, max_chars):
    """Greedy longest-match of buf[ws:we] → ids written at out[p:]; returns the new p."""
    if we - ws > max_chars:
        out[p] = unk_id
        return p + 1
    p0 = p
    start = ws
    while start < we:
        node = 0 if start == ws else cont_root
        best_end = -1
        best_id = -1
        i = start
        while i < we and node >= 0:
            s = symbol[buf[i]]
            if s < 0:
                break
            node = child(node, s, n_symbols, keys, children, mask)
            if node < 0:
                break
            i += 1
            t = token_id[node]
            if t >= 0:
                best_end = i
                best_id = t
        if best_end < 0:
            out[p0] = unk_id  # the whole word becomes one [UNK], as in HF
            return p0 + 1
        out[p] = best_id
        p += 1
        start = best_end
    return p


@njit(inline="always")
def _encode_text(
    cps,
    a,
    b,
    scratch,
    out,
    p,
    limit,
    char_class,
    symbol,
    token_id,
    keys,
    children,
    params,
    specials,
    remap_src,
    remap_dst,
):
    """Encode cps[a:b] into out[p:] with the template specials; returns (new p, truncated)."""
    mask, n_symbols, cont_root = params[P_MASK], params[P_N_SYMBOLS], params[P_CONT_ROOT]
    unk_id, max_chars = params[P_UNK], params[P_MAX_CHARS]
    n_prefix, n_suffix = params[P_N_PREFIX], params[P_N_SUFFIX]
    m = 0
    for i in range(a, b):
        c = cps[i]
        if c < MAX_CODE_POINT:
            k = char_class[c]
            if k == DROP:
                continue
            if k == REMAP:
                c = remap_dst[np.searchsorted(remap_src, c)]
        scratch[m] = c
        m += 1
    for k in range(n_prefix):
        out[p] = specials[k]
        p += 1
    body = p
    cut = False
    i = 0
    while i < m:
        c = scratch[i]
        if c >= MAX_CODE_POINT:
            # specials = prefix ids, suffix ids, then one id per added token marker.
            out[p] = specials[n_prefix + n_suffix + c - MAX_CODE_POINT]
            p += 1
            i += 1
        else:
            k = char_class[c]
            if k == SPACE:
                i += 1
                continue
            j = i + 1
            if k == WORD:
                while j < m and scratch[j] < MAX_CODE_POINT and char_class[scratch[j]] == WORD:
                    j += 1
            # PUNCT and CJK characters are one-character words (j == i + 1).
            p = _wordpiece(
                scratch, i, j, out, p, symbol, token_id, keys, children, mask, n_symbols, cont_root, unk_id, max_chars
            )
            i = j
        if p - body > limit:
            p = body + limit
            cut = True
            break
    for k in range(n_suffix):
        out[p] = specials[n_prefix + k]
        p += 1
    return p, cut


@njit(nogil=True, cache=True)
def encode_batch_kernel(
    cps,
    starts,
    ends,
    limit,
    char_class,
    symbol,
    token_id,
    keys,
    children,
    params,
    specials,
    remap_src,
    remap_dst,
    out,
    lengths,
    truncated,
):
    """Encode texts t = 0..len(starts)-1 from cps[starts[t]:ends[t]]; returns the number of ids written.

    out must hold len(cps) + n_texts * (n_prefix + n_suffix) ids: every token consumes at least
    one code point, so that bound can never overflow.
    """
    longest = 0
    for t in range(starts.size):
        longest = max(longest, ends[t] - starts[t])
    scratch = np.empty(longest, dtype=np.uint32)
    p = 0
    for t in range(starts.size):
        q, cut = _encode_text(
            cps,
            starts[t],
            ends[t],
            scratch,
            out,
            p,
            limit,
            char_class,
            symbol,
            token_id,
            keys,
            children,
            params,
            specials,
            remap_src,
            remap_dst,
        )
        lengths[t] = q - p
        truncated[t] = cut
        p = q
    return p


@njit(nogil=True, cache=True)
def encode_one_kernel(cps, limit, char_class, symbol, token_id, keys, children, params, specials, remap_src, remap_dst):
    """One text → its ids (int32), allocating inside numba to keep the Python side to one call.

    It calls the batch kernel rather than inlining the core again: numba reuses the batch
    kernel's compiled code, which halves the compile time paid at start-up.
    """
    starts = np.zeros(1, dtype=np.int64)
    ends = np.full(1, cps.size, dtype=np.int64)
    out = np.empty(cps.size + params[P_N_PREFIX] + params[P_N_SUFFIX], dtype=np.int32)
    lengths = np.empty(1, dtype=np.int64)
    truncated = np.empty(1, dtype=np.bool_)
    p = encode_batch_kernel(
        cps,
        starts,
        ends,
        limit,
        char_class,
        symbol,
        token_id,
        keys,
        children,
        params,
        specials,
        remap_src,
        remap_dst,
        out,
        lengths,
        truncated,
    )
    return out[:p]
