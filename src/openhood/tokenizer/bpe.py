"""Byte-level BPE (GPT-2 / SmolLM2 family) from a GGUF file's metadata or a HF ``tokenizer.json``.

Encoding: special tokens are cut out first (longest match, as HF's added-token splitter does);
the rest is pre-tokenized by ``byte_level.pretokenizer_pattern``; each piece becomes UTF-8
bytes, each byte the id of its one-character token, and adjacent ids are merged lowest rank
first until no ranked pair is left. Merges work on id pairs (``(left, right) → (rank, merged)``)
rather than strings, so the inner loop is integer work.

The trade-off: a batch is one compiled call (``bpe_tables.encode_texts``): Python joins the texts,
views them as UTF-32 code points and finds the special tokens with one regex scan; the kernel
pre-tokenizes, looks each piece up in a bounded cache (natural text repeats its words, so most
pieces are hits), merges the misses and writes the ids of all texts into one array. So nothing
in Python runs per piece or per token, at the price of a second, hand-compiled copy of the
pre-tokenizer regex. ``encode_reference`` (``re`` split, plain-Python ``_bpe`` merges, no cache)
stays beside it as the reference the tests compare with. Decoding joins the tokens' byte
strings; ``StreamDecoder`` holds a partial UTF-8 character back until its last byte arrives.
"""

from __future__ import annotations

import bisect
import codecs
import json
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from openhood.tokenizer.batch import RaggedBatch
from openhood.tokenizer.bpe_tables import MergeTable, PieceCache, encode_texts
from openhood.tokenizer.byte_level import bytes_to_unicode, code_point_classes, pretokenizer_pattern

if TYPE_CHECKING:
    from openhood.formats.gguf import GGUFFile

# GGUF token types (llama.cpp's llama_token_type): only these two are matched as whole tokens.
TOKEN_TYPE_CONTROL = 3
TOKEN_TYPE_USER_DEFINED = 4
CACHE_LIMIT = 200_000  # pieces; ~20 MB of arrays, cleared when full


class BPEConfigError(ValueError):
    """The vocabulary, merges or pre-tokenizer are not something this tokenizer implements."""


@dataclass(frozen=True)
class BPESpec:
    tokens: list[str]  # id → token string in byte-level spelling ("Ġthe") or literal for specials
    merges: list[tuple[str, str]]  # by rank
    specials: dict[str, int]  # literal text → id, matched whole in raw text
    split_digits: bool  # SmolLM2/StarCoder: every numeric character is its own piece
    bos_id: int | None
    eos_id: int | None
    pad_id: int | None


# GGUF `tokenizer.ggml.pre` values whose rule is GPT-2's regex after isolating digits, or GPT-2's alone.
_PRE_SPLIT_DIGITS = {"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva"}
_PRE_GPT2 = {"gpt2", "default"}


def spec_from_gguf(path: str | Path | GGUFFile) -> BPESpec:
    from openhood.formats.gguf import GGUFFile

    g = path if not isinstance(path, (str, Path)) else GGUFFile(path)
    model = g.require("tokenizer.ggml.model")
    if model != "gpt2":
        raise BPEConfigError(f"tokenizer.ggml.model={model!r}: only byte-level BPE ('gpt2') is supported")
    pre = g.get("tokenizer.ggml.pre", "default")
    if pre not in _PRE_SPLIT_DIGITS | _PRE_GPT2:
        raise BPEConfigError(f"tokenizer.ggml.pre={pre!r}: pre-tokenizer not supported")
    tokens = list(g.require("tokenizer.ggml.tokens"))
    types = g.get("tokenizer.ggml.token_type") or [1] * len(tokens)
    merges = [tuple(m.split(" ", 1)) for m in g.require("tokenizer.ggml.merges")]
    specials = {
        t: i
        for i, (t, ty) in enumerate(zip(tokens, types, strict=False))
        if ty in (TOKEN_TYPE_CONTROL, TOKEN_TYPE_USER_DEFINED)
    }
    return BPESpec(
        tokens,
        merges,
        specials,
        pre in _PRE_SPLIT_DIGITS,
        g.get("tokenizer.ggml.bos_token_id"),
        g.get("tokenizer.ggml.eos_token_id"),
        g.get("tokenizer.ggml.padding_token_id"),
    )


def spec_from_tokenizer_json(path: str | Path) -> BPESpec:
    obj = json.loads(Path(path).read_text(encoding="utf-8"))
    model = obj.get("model") or {}
    if model.get("type") != "BPE" or obj.get("normalizer") is not None:
        raise BPEConfigError(f"{path}: only a byte-level BPE model without normalizer is supported")
    pre = obj.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    kinds = [s.get("type") for s in steps]
    if kinds == ["Digits", "ByteLevel"] and steps[0].get("individual_digits"):
        split_digits = True
    elif kinds == ["ByteLevel"]:
        split_digits = False
    else:
        raise BPEConfigError(f"{path}: pre-tokenizer {kinds} not supported (ByteLevel, optionally after Digits)")
    if steps[-1].get("add_prefix_space") or steps[-1].get("use_regex") is False:
        raise BPEConfigError(f"{path}: ByteLevel with add_prefix_space or without regex is not supported")
    vocab = model["vocab"]
    specials = {}
    for t in obj.get("added_tokens", []):
        vocab.setdefault(t["content"], t["id"])
        specials[t["content"]] = t["id"]
    tokens = [""] * (max(vocab.values()) + 1)
    for t, i in vocab.items():
        tokens[i] = t
    merges: list[tuple[str, str]] = [
        (m.split(" ", 1)[0], m.split(" ", 1)[1]) if isinstance(m, str) else (m[0], m[1]) for m in model["merges"]
    ]
    eos = specials.get("<|im_end|>", specials.get("<|endoftext|>"))
    return BPESpec(tokens, merges, specials, split_digits, specials.get("<|im_start|>"), eos, eos)


class BPETokenizer:
    """``encode(text) -> int32 ids``, ``encode_batch(texts) -> RaggedBatch``, ``decode(ids) -> str``."""

    def __init__(self, spec: BPESpec):
        self.spec = spec
        self.tokens = spec.tokens
        self.vocab = {t: i for i, t in enumerate(spec.tokens)}
        self.bos_id, self.eos_id = spec.bos_id, spec.eos_id
        self.pad_id = spec.pad_id if spec.pad_id is not None else 0
        b2u = bytes_to_unicode()
        # byte → id of its 1-char token; -1 where the vocabulary lacks it (SmolLM2 lacks some
        # control bytes): HF then drops that byte without an unknown token, and so do we.
        self._byte_id = [self.vocab.get(b2u[b], -1) for b in range(256)]
        if sum(i >= 0 for i in self._byte_id) < 128:
            raise BPEConfigError("fewer than 128 byte tokens: not a byte-level vocabulary")
        self._merge: dict[tuple[int, int], tuple[int, int]] = {}  # (left, right) → (rank, merged id)
        for rank, (a, b) in enumerate(spec.merges):
            ia, ib, im = self.vocab.get(a), self.vocab.get(b), self.vocab.get(a + b)
            if ia is None or ib is None or im is None:
                raise BPEConfigError(f"merge #{rank} {a!r} {b!r} refers to a token not in the vocabulary")
            self._merge.setdefault((ia, ib), (rank, im))
        self._table = MergeTable(
            [(a, b, m) for (a, b), (_, m) in sorted(self._merge.items(), key=lambda kv: kv[1][0])], len(spec.tokens)
        )
        self._byte_id_arr = np.asarray(self._byte_id, dtype=np.int32)
        # id → bytes: specials are literal text, everything else is spelled in byte-level characters.
        # str.translate turns the spelling into code points 0..255 and latin-1 makes them bytes, at C
        # speed (a Python loop over the characters took 0.4 s of start-up for a 49k vocabulary);
        # a token with a character that spells no byte is literal text, as HF decodes it.
        special_ids = set(spec.specials.values())
        to_byte = {ord(u): b for b, u in b2u.items()}
        not_a_byte = re.compile("[^" + re.escape("".join(b2u.values())) + "]")
        self._bytes = [
            t.encode("utf-8") if i in special_ids or not_a_byte.search(t) else t.translate(to_byte).encode("latin-1")
            for i, t in enumerate(spec.tokens)
        ]
        self._special_ids = frozenset(special_ids)
        self._classes = code_point_classes(spec.split_digits)  # HF's \p{L}/\p{N}/\s per code point
        alts = sorted(spec.specials, key=len, reverse=True)
        self._special_re = re.compile("|".join(map(re.escape, alts))) if alts else None
        # Texts are joined with a character no special token contains, so no match spans two texts.
        self._joiner = next(c for c in map(chr, range(0x110000)) if not any(c in t for t in alts))
        self._cache = PieceCache(CACHE_LIMIT)
        self._lock = threading.Lock()  # the kernel releases the GIL and mutates the cache
        self.encode_many(["a 1"])  # load the compiled kernels now (openhood.aot), not on first use
        self._cache.clear()

    @classmethod
    def from_pretrained(cls, path: str | Path) -> BPETokenizer:
        """From a GGUF file's metadata, a ``tokenizer.json``, or a folder holding one."""
        path = Path(path)
        if path.suffix == ".gguf":
            return cls(spec_from_gguf(path))
        if path.is_dir():
            path = path / "tokenizer.json"
        return cls(spec_from_tokenizer_json(path))

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    @property
    def special_ids(self) -> frozenset[int]:
        return self._special_ids

    # ---- encoding -------------------------------------------------------------------------
    def _bpe(self, piece: str) -> tuple[int, ...]:
        """Merge one pre-token's byte ids, lowest rank first (the naive loop, on a short list)."""
        ids = [i for i in map(self._byte_id.__getitem__, piece.encode("utf-8")) if i >= 0]
        merge = self._merge
        while len(ids) > 1:
            best, at = None, -1
            for k in range(len(ids) - 1):
                m = merge.get((ids[k], ids[k + 1]))
                if m is not None and (best is None or m[0] < best[0]):
                    best, at = m, k
            if best is None:
                break
            # merge every occurrence of that pair, left to right (as HF and llama.cpp do)
            pair, new = (ids[at], ids[at + 1]), best[1]
            out, k = [], 0
            while k < len(ids):
                if k < len(ids) - 1 and (ids[k], ids[k + 1]) == pair:
                    out.append(new)
                    k += 2
                else:
                    out.append(ids[k])
                    k += 1
            ids = out
        return tuple(ids)

    def _specials_in(self, text: str, literal_spans: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int, int]]:
        """(start, end, id) of each special token's text in ``text``, except inside ``literal_spans``
        (character ranges, e.g. chat message contents, where that text is ordinary text)."""
        if self._special_re is None:
            return []
        spans = sorted(literal_spans)
        starts = [a for a, _ in spans]

        def literal(start: int, end: int) -> bool:  # overlaps a span? (bisect: a prompt may hold 10^4 spans)
            i = bisect.bisect_left(starts, end) - 1  # the last span starting before ``end``
            return i >= 0 and spans[i][1] > start

        return [
            (m.start(), m.end(), self.spec.specials[m.group()])
            for m in self._special_re.finditer(text)
            if not (spans and literal(m.start(), m.end()))
        ]

    def _split(self, text: str, parse_special: bool, literal_spans: Sequence[tuple[int, int]] = ()) -> list[str | int]:
        """Pre-token pieces of ``text`` with special-token ids in their places."""
        pre = pretokenizer_pattern(self.spec.split_digits)  # compiled on first use (~15 ms), then cached
        if not parse_special or self._special_re is None:
            return pre.findall(text)
        parts: list[str | int] = []
        pos = 0
        for start, end, token in self._specials_in(text, literal_spans):
            parts.extend(pre.findall(text[pos:start]))
            parts.append(token)
            pos = end
        parts.extend(pre.findall(text[pos:]))
        return parts

    def _encode_flat(
        self, texts: list[str], parse_special: bool, literal_spans: Sequence[tuple[int, int]] = ()
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ids of all texts back to back (int32), ids per text (int64)): one numba call for the batch.

        Python's work is per batch, not per piece: join the texts, view them as UTF-32 code points,
        find the special tokens with one regex scan, and hand everything to ``encode_texts``.
        ``literal_spans`` are character ranges of the joined texts where special-token text is
        ordinary text.
        """
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        starts = np.zeros(len(texts), dtype=np.int64)
        np.cumsum(lengths[:-1] + 1, out=starts[1:])  # + 1: the joiner between texts
        joined = self._joiner.join(texts)
        cps = np.frombuffer(joined.encode("utf-32-le"), dtype=np.uint32)
        found = self._specials_in(joined, literal_spans) if parse_special else []
        return self._encode_code_points(cps, starts, starts + lengths, np.asarray(found, dtype=np.int64))

    def _encode_code_points(self, cps: np.ndarray, starts: np.ndarray, ends: np.ndarray, specials: np.ndarray):
        """The kernel call: texts ``cps[starts[t]:ends[t]]`` (uint32), special tokens as (start, end, id) rows."""
        sp = specials.reshape(-1, 3)
        t = self._table
        with self._lock:
            return encode_texts(
                cps,
                starts,
                ends,
                sp[:, 0].copy(),
                sp[:, 1].copy(),
                sp[:, 2].astype(np.int32),
                self._classes,
                bool(self.spec.split_digits),
                self._byte_id_arr,
                t.keys,
                t.ranks,
                t.merged,
                t.vocab_size,
                t.mask,
                *self._cache.arrays(),
            )

    def encode_many(self, texts: list[str], parse_special: bool = True) -> list[list[int]]:
        """Ids of each text, as lists."""
        ids, lengths = self._encode_flat(list(texts), parse_special)
        bounds = np.cumsum(lengths).tolist()
        flat = ids.tolist()
        return [flat[a:b] for a, b in zip([0, *bounds[:-1]], bounds, strict=True)]

    def encode_list(
        self, text: str, parse_special: bool = True, literal_spans: Sequence[tuple[int, int]] = ()
    ) -> list[int]:
        """Ids of ``text``; special-token text inside ``literal_spans`` (character ranges: a chat
        message's content) is encoded as ordinary text even with ``parse_special``, so a user can
        never write a control token."""
        ids, _ = self._encode_flat([text], parse_special, literal_spans)
        return ids.tolist()

    def encode_reference(
        self, text: str, parse_special: bool = True, literal_spans: Sequence[tuple[int, int]] = ()
    ) -> list[int]:
        """The naive path: pure-Python merges per piece, no cache (what the kernel is tested against)."""
        out: list[int] = []
        for p in self._split(text, parse_special, literal_spans):
            out.extend([p] if isinstance(p, int) else self._bpe(p))
        return out

    def encode(self, text: str, max_length: int | None = None, parse_special: bool = True) -> np.ndarray:
        """Ids of ``text`` (int32), at most ``max_length``; with ``parse_special`` the literal text
        of a special token is that token."""
        return np.asarray(self.encode_list(text, parse_special)[:max_length], dtype=np.int32)

    def encode_batch(self, texts: list[str], max_length: int | None = None, parse_special: bool = True) -> RaggedBatch:
        ids, lengths = self._encode_flat(list(texts), parse_special)
        truncated = np.zeros(lengths.size, dtype=bool)
        if max_length is not None and (lengths > max_length).any():
            truncated = lengths > max_length
            starts = np.cumsum(lengths) - lengths
            rank = np.arange(ids.size) - np.repeat(starts, lengths)  # position of each id in its text
            ids = ids[rank < max_length]
            lengths = np.minimum(lengths, max_length)
        return RaggedBatch(ids, lengths, truncated, pad_id=self.pad_id, pad_left=True)

    # ---- decoding -------------------------------------------------------------------------
    def convert_ids_to_tokens(self, ids) -> list[str]:
        return [self.tokens[int(i)] for i in ids]

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[token_id]

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        """Text of ``ids``; invalid UTF-8 (a cut-off character) becomes U+FFFD, as in HF."""
        data = b"".join(self._bytes[int(i)] for i in ids if not (skip_special_tokens and int(i) in self._special_ids))
        return data.decode("utf-8", errors="replace")

    def stream_decoder(self, skip_special_tokens: bool = True) -> StreamDecoder:
        return StreamDecoder(self, skip_special_tokens)


class StreamDecoder:
    """Turns ids arriving one by one into text, holding back bytes of a character not yet complete.

    >>> # "é" is two bytes; a byte-level model may emit them as two tokens.
    """

    def __init__(self, tokenizer: BPETokenizer, skip_special_tokens: bool = True):
        self._tok = tokenizer
        self._skip = skip_special_tokens
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        """Text completed by this token ('' while a multi-byte character is still partial)."""
        if self._skip and token_id in self._tok._special_ids:
            return ""
        return self._utf8.decode(self._tok.token_bytes(token_id))

    def flush(self) -> str:
        """Whatever is still held (an incomplete character becomes U+FFFD)."""
        return self._utf8.decode(b"", final=True)
