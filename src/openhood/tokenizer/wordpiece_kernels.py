"""The WordPiece tokenizer's compiled kernels as the rest of the tokenizer calls them, numba not imported.

The kernels' source is numba code in ``tokenizer/kernel.py`` (trie insertion, batch and one-text
encoding). They run from a library compiled ahead of time (``openhood.aot``: built once per machine
and kernel source, then loaded in about a millisecond), or through numba's JIT where that library
cannot be built. This module holds what both sides share, the layout of the ``params`` array and
the exported signatures, so that importing the tokenizer never imports numba.

The trade-off: each signature is written out once here (pycc compiles exactly these); an array
of another dtype or layout is a ``TypeError`` at the call, never a silent recompilation.
"""

from __future__ import annotations

from pathlib import Path

from openhood.aot import Export, KernelSet

# Layout of the int64 ``params`` array (one array instead of eight scalars: every argument of a
# compiled call costs unboxing time, which dominates single short-text latency).
P_MASK, P_N_SYMBOLS, P_CONT_ROOT, P_UNK, P_MAX_CHARS, P_N_PREFIX, P_N_SUFFIX = range(7)
N_PARAMS = 7

_SOURCE = "openhood.tokenizer.kernel"
# What encoding reads besides the text, in the kernels' argument order (tokenizer.py's _tables):
# char_class, symbol, token_id, keys, children, params, specials, remap_src, remap_dst.
_TABLES = ("u1[::1]", "i4[::1]", "i4[::1]", "i8[::1]", "i4[::1]", "i8[::1]", "i4[::1]", "u4[::1]", "u4[::1]")

WORDPIECE = KernelSet(
    "wordpiece",
    (
        # (code points, offsets, ids, symbol, n_symbols, keys, children, mask, token_id, prefix)
        # → (node count, continuation root)
        Export(
            "insert_tokens",
            f"{_SOURCE}:_insert_tokens",
            ("u4[::1]", "i8[::1]", "i4[::1]", "i4[::1]", "i8", "i8[::1]", "i4[::1]", "i8", "i4[::1]", "u4[::1]"),
            "UniTuple(i8, 2)",
        ),
        # (code points, starts, ends, limit, *tables, out, lengths, truncated) → ids written
        Export(
            "encode_batch",
            f"{_SOURCE}:encode_batch_kernel",
            ("u4[::1]", "i8[::1]", "i8[::1]", "i8", *_TABLES, "i4[::1]", "i8[::1]", "b1[::1]"),
            "i8",
        ),
        # (code points, limit, *tables) → (n,) int32 ids
        Export("encode_one", f"{_SOURCE}:encode_one_kernel", ("u4[::1]", "i8", *_TABLES), "i4[::1]"),
    ),
    sources=(Path(__file__).with_name("kernel.py"), Path(__file__).with_name("normalizer.py"), Path(__file__)),
)

insert_tokens = WORDPIECE.kernel("insert_tokens")
encode_batch = WORDPIECE.kernel("encode_batch")
encode_one = WORDPIECE.kernel("encode_one")
