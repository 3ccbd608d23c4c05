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
measurements. It is compiled on first use (no on-disk cache: numba's cache pickles).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from openhood.tokenizer.normalizer import DROP, MAX_CODE_POINT, REMAP, SPACE, WORD
from openhood.tokenizer.trie import child


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


@njit(nogil=True)
def encode_kernel(cps, starts, ends, char_class, symbol, token_id, keys, children, mask, n_symbols, cont_root,
                  unk_id, max_chars, prefix_ids, suffix_ids, limit, added_ids, remap_src, remap_dst,
                  out, lengths, truncated):
    """Encode texts t = 0..len(starts)-1 from cps[starts[t]:ends[t]]; returns the number of ids written.

    out must hold len(cps) + n_texts * (len(prefix_ids) + len(suffix_ids)) ids: every token
    consumes at least one code point, so that bound can never overflow.
    """
    n_texts = starts.size
    longest = 0
    for t in range(n_texts):
        longest = max(longest, ends[t] - starts[t])
    scratch = np.empty(longest, dtype=np.uint32)
    p = 0
    for t in range(n_texts):
        m = 0
        for i in range(starts[t], ends[t]):
            c = cps[i]
            if c < MAX_CODE_POINT:
                k = char_class[c]
                if k == DROP:
                    continue
                if k == REMAP:
                    c = remap_dst[np.searchsorted(remap_src, c)]
            scratch[m] = c
            m += 1
        text_start = p
        for k in range(prefix_ids.size):
            out[p] = prefix_ids[k]
            p += 1
        body = p
        cut = False
        i = 0
        while i < m:
            c = scratch[i]
            if c >= MAX_CODE_POINT:
                out[p] = added_ids[c - MAX_CODE_POINT]
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
                p = _wordpiece(scratch, i, j, out, p, symbol, token_id, keys, children, mask, n_symbols,
                               cont_root, unk_id, max_chars)
                i = j
            if p - body > limit:
                p = body + limit
                cut = True
                break
        for k in range(suffix_ids.size):
            out[p] = suffix_ids[k]
            p += 1
        lengths[t] = p - text_start
        truncated[t] = cut
    return p

