"""``WordPieceTokenizer``: HF-exact BERT WordPiece encoding, batched through one compiled kernel call.

Batch path (no Python loop per character or token): join the texts with U+0000 (which NFD and
lowercasing leave alone, and which we check no text contains), run the C-speed string part of
normalization once on the joined string, view it as a uint32 code point array, find the text
boundaries with one vectorized comparison, and hand everything to the compiled batch kernel
(``wordpiece_kernels.encode_batch``). Texts that contain an added token (e.g. ``[SEP]``
written in the text) or a U+0000 take a per-text path: split on the added tokens (matched on
the raw text, leftmost-longest, as HF does), normalize each piece, and mark the tokens with code
points above U+10FFFF; the kernel is the same.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np

from openhood.tokenizer import wordpiece_kernels
from openhood.tokenizer.batch import RaggedBatch
from openhood.tokenizer.config import TokenizerSpec, load_spec
from openhood.tokenizer.normalizer import MAX_CODE_POINT
from openhood.tokenizer.trie import VocabTrie

_SEP = "\x00"
_NO_LIMIT = 1 << 60  # "no truncation": more ids than any text can have

# WordPiece decoder clean-up, in HF's order (applied to each token after its leading space).
_CLEANUP = (
    (" .", "."),
    (" ?", "?"),
    (" !", "!"),
    (" ,", ","),
    (" ' ", "'"),
    (" n't", "n't"),
    (" 'm", "'m"),
    (" do not", " don't"),
    (" 's", "'s"),
    (" 've", "'ve"),
    (" 're", "'re"),
)


def _utf32(text: str) -> np.ndarray:
    try:
        return np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    except UnicodeEncodeError:  # a lone surrogate: Python allows it in str, Unicode does not
        raise ValueError("text is not valid Unicode: it contains a lone surrogate (U+D800..U+DFFF)") from None


class WordPieceTokenizer:
    """A BERT WordPiece tokenizer loaded from a Hugging Face folder; ids match HF ``tokenizers``."""

    def __init__(self, spec: TokenizerSpec):
        self.spec = spec
        self.normalizer = spec.normalizer
        self._trie = VocabTrie.build(spec.vocab, spec.continuing_subword_prefix)
        size = max([len(spec.vocab)] + [max(spec.vocab.values()) + 1] + [t.id + 1 for t in spec.added_tokens])
        self._id_to_token = [""] * size
        for token, tid in spec.vocab.items():
            self._id_to_token[tid] = token
        for tok in spec.added_tokens:
            self._id_to_token[tok.id] = tok.content
        self._vocab = dict(spec.vocab)
        for tok in spec.added_tokens:
            self._vocab.setdefault(tok.content, tok.id)
        self._special_ids = frozenset(t.id for t in spec.added_tokens if t.special)
        self._added = sorted(spec.added_tokens, key=lambda t: -len(t.content))  # longest first
        self._added_contents = tuple(t.content for t in self._added)
        # Leftmost match, longest alternative first at that position = HF's LeftmostLongest.
        self._added_re = (
            re.compile("|".join(re.escape(c) for c in self._added_contents)) if self._added_contents else None
        )
        self._marker = {t.content: MAX_CODE_POINT + k for k, t in enumerate(self._added)}
        self._n_special = len(spec.prefix_ids) + len(spec.suffix_ids)
        self.unk_id = self._vocab[spec.unk_token]
        self.pad_id = spec.pad_id
        self.cls_id = spec.prefix_ids[0] if spec.prefix_ids else self._vocab.get("[CLS]", -1)
        self.sep_id = spec.suffix_ids[-1] if spec.suffix_ids else self._vocab.get("[SEP]", -1)
        self.vocab_size = size
        params = np.zeros(wordpiece_kernels.N_PARAMS, dtype=np.int64)
        tr = self._trie
        params[
            [
                wordpiece_kernels.P_MASK,
                wordpiece_kernels.P_N_SYMBOLS,
                wordpiece_kernels.P_CONT_ROOT,
                wordpiece_kernels.P_UNK,
                wordpiece_kernels.P_MAX_CHARS,
                wordpiece_kernels.P_N_PREFIX,
                wordpiece_kernels.P_N_SUFFIX,
            ]
        ] = (
            tr.mask,
            tr.n_symbols,
            tr.continuation_root,
            self.unk_id,
            spec.max_input_chars_per_word,
            len(spec.prefix_ids),
            len(spec.suffix_ids),
        )
        specials = np.asarray([*spec.prefix_ids, *spec.suffix_ids, *(t.id for t in self._added)], dtype=np.int32)
        remap_src, remap_dst = self.normalizer.lowercase_remap
        # Everything the kernels read besides the text, in their argument order.
        self._tables = (
            self.normalizer.class_table,
            tr.symbol,
            tr.token_id,
            tr.keys,
            tr.children,
            params,
            specials,
            remap_src,
            remap_dst,
        )
        # What the file declares (HF applies them by default); our API never truncates or pads
        # implicitly: pass max_length=tok.declared_max_length or pad(tok.declared_padding_length).
        self.declared_max_length = spec.truncation_max_length
        self.declared_padding_length = spec.padding_length
        t0 = time.perf_counter()
        # Loads the compiled kernels now (openhood.aot: the ahead-of-time library, or numba's JIT
        # where it cannot be built), every specialization a request can reach, so none compiles
        # later on a server's event loop: under the JIT, numba types a read-only array (plain
        # text, np.frombuffer) apart from a writable one (texts holding an added token such as
        # [MASK], or a NUL, are concatenated), and each type is a separate compilation.
        special = (self._added_contents[0] + " ") if self._added_contents else ""
        for text in ("warm up", special + "warm\0up"):
            self.encode(text)
            self.encode_batch([text, "up"])
        self.warmup_seconds = time.perf_counter() - t0

    @classmethod
    def from_pretrained(cls, path: str | Path) -> WordPieceTokenizer:
        """Load from a model folder, a ``tokenizer.json`` or a ``vocab.txt`` (+ ``tokenizer_config.json``)."""
        return cls(load_spec(path))

    # -- encoding -----------------------------------------------------------------------------

    def _limit(self, max_length: int | None) -> int:
        if max_length is None:
            return _NO_LIMIT
        n_special = self._n_special
        if isinstance(max_length, bool) or not isinstance(max_length, (int, np.integer)):
            raise TypeError(f"max_length must be an int or None, not {type(max_length).__name__}")
        if max_length < n_special:
            raise ValueError(f"max_length={max_length} is smaller than the {n_special} special tokens it must keep")
        return int(max_length) - n_special

    def _code_points(self, text: str) -> np.ndarray:
        """One text → (n,) uint32 code points after normalization, added tokens as markers."""
        if self._added_re is None or self._added_re.search(text) is None:
            return _utf32(self.normalizer.prepare(text))
        parts, pos = [], 0
        for match in self._added_re.finditer(text):
            if match.start() > pos:
                parts.append(_utf32(self.normalizer.prepare(text[pos : match.start()])))
            parts.append(np.asarray([self._marker[match.group()]], dtype=np.uint32))
            pos = match.end()
        if pos < len(text):
            parts.append(_utf32(self.normalizer.prepare(text[pos:])))
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.uint32)

    def encode(self, text: str, max_length: int | None = None) -> np.ndarray:
        """Ids of one text, special tokens included; ``max_length`` counts them (HF semantics)."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, not {type(text).__name__}")
        return wordpiece_kernels.encode_one(self._code_points(text), self._limit(max_length), *self._tables)

    def batch_code_points(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The string half of batch encoding: (N,) uint32 code points, (n,) starts, (n,) ends.

        Public so benchmarks can time the two halves (C-speed string work vs the kernel) apart.
        """
        n = len(texts)
        joined = _SEP.join(texts)
        special = []  # indices of texts needing the per-text path
        if joined.count(_SEP) != n - 1 or any(c in joined for c in self._added_contents):
            contents = self._added_contents
            special = [i for i, t in enumerate(texts) if _SEP in t or any(c in t for c in contents)]
        if special:
            fast = np.ones(n, dtype=bool)
            fast[special] = False
            fast_idx = np.flatnonzero(fast)
            joined = _SEP.join(texts[i] for i in fast_idx)
        cps = _utf32(self.normalizer.prepare(joined)) if (n - len(special)) else np.empty(0, np.uint32)
        seps = np.flatnonzero(cps == 0)  # (n_fast - 1,) the joiners; no text holds a U+0000
        starts = np.concatenate(([0], seps + 1)).astype(np.int64)
        ends = np.concatenate((seps, [cps.size])).astype(np.int64)
        if special:
            extra = [self._code_points(texts[i]) for i in special]
            sizes = np.fromiter((a.size for a in extra), np.int64, len(extra))
            extra_starts = cps.size + np.concatenate(([0], np.cumsum(sizes)[:-1]))
            all_starts = np.empty(n, np.int64)
            all_ends = np.empty(n, np.int64)
            if fast_idx.size:
                all_starts[fast_idx], all_ends[fast_idx] = starts, ends
            all_starts[special], all_ends[special] = extra_starts, extra_starts + sizes
            cps = np.concatenate([cps, *extra])
            starts, ends = all_starts, all_ends
        return cps, starts, ends

    def encode_batch(self, texts: list[str], max_length: int | None = None) -> RaggedBatch:
        """Ids of many texts as a ``RaggedBatch``; equal, text by text, to ``encode``."""
        limit = self._limit(max_length)
        texts = list(texts)
        n = len(texts)
        if not all(isinstance(t, str) for t in texts):
            bad = next(type(t).__name__ for t in texts if not isinstance(t, str))
            raise TypeError(f"texts must all be str, got a {bad}")
        if n == 0:
            empty = np.empty(0, np.int64)
            return RaggedBatch(np.empty(0, np.int32), empty, np.empty(0, np.bool_), pad_id=self.pad_id)
        return self.encode_code_points(*self.batch_code_points(texts), limit)

    def encode_code_points(self, cps: np.ndarray, starts: np.ndarray, ends: np.ndarray, limit: int) -> RaggedBatch:
        """The kernel half of ``encode_batch``: normalized code points (from ``batch_code_points``)
        of texts ``cps[starts[i]:ends[i]]`` → ids, at most ``limit`` per text (specials included)."""
        n = len(starts)
        out = np.empty(cps.size + n * self._n_special, dtype=np.int32)
        lengths = np.empty(n, dtype=np.int64)
        truncated = np.empty(n, dtype=np.bool_)
        used = wordpiece_kernels.encode_batch(cps, starts, ends, limit, *self._tables, out, lengths, truncated)
        return RaggedBatch(
            out[:used].copy(),
            lengths,
            truncated,
            pad_id=self.pad_id,
            pad_type_id=self.spec.pad_type_id,
            pad_left=self.spec.pad_left,
        )

    # -- decoding -----------------------------------------------------------------------------

    def convert_ids_to_tokens(self, ids) -> list[str]:
        table = self._id_to_token
        out = []
        for i in np.asarray(ids, dtype=np.int64).ravel().tolist():
            if not 0 <= i < len(table) or (table[i] == "" and i not in self._special_ids):
                raise ValueError(f"token id {i} is not in the vocabulary (size {len(table)})")
            out.append(table[i])
        return out

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special_ids

    def convert_tokens_to_ids(self, tokens: list[str]) -> list[int]:
        return [self._vocab.get(t, self.unk_id) for t in tokens]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """Tokens joined back to text with HF's WordPiece decoder (``##`` merged, punctuation clean-up)."""
        tokens = self.convert_ids_to_tokens(ids)
        if skip_special_tokens:
            keep = [i not in self._special_ids for i in np.asarray(ids, dtype=np.int64).ravel().tolist()]
            tokens = [t for t, k in zip(tokens, keep, strict=True) if k]
        prefix, pieces = self.spec.decoder_prefix, []
        for i, token in enumerate(tokens):
            if i:
                token = token[len(prefix) :] if token.startswith(prefix) else " " + token
            if self.spec.decoder_cleanup:
                for dirty, clean in _CLEANUP:
                    token = token.replace(dirty, clean)
            pieces.append(token)
        return "".join(pieces)

    def __repr__(self) -> str:
        return f"WordPieceTokenizer(vocab_size={self.vocab_size}, source={self.spec.source!r})"
