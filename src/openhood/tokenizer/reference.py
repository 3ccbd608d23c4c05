"""The naive reference: HF's BERT pipeline written step by step, one character at a time.

It follows the Rust code's order literally (split added tokens → clean_text → CJK padding →
NFD + drop marks → lowercase → split on whitespace / punctuation → WordPiece by shrinking the
candidate from the right, with dict lookups) and shares only the character tables with the fast
path. It is slow on purpose and exists so the tests can check the kernel against an independent,
readable statement of the semantics.
"""

from __future__ import annotations

import unicodedata

from openhood.tokenizer import unicode_tables as ut
from openhood.tokenizer.config import TokenizerSpec
from openhood.tokenizer.normalizer import CJK_RANGES


def _expand(ranges) -> frozenset[int]:
    return frozenset(cp for a, b in ranges for cp in range(a, b + 1))


_CONTROL = _expand(ut.CONTROL) | {0, 0xFFFD}
_CLEAN_SPACE = _expand(ut.CLEAN_SPACE)
_WHITESPACE = _expand(ut.WHITESPACE)
_PUNCT = _expand(ut.PUNCTUATION)
_MARKS = _expand(ut.NONSPACING_MARKS)
_CJK = _expand(CJK_RANGES)


def normalize(spec: TokenizerSpec, text: str) -> str:
    """HF BertNormalizer on one piece of text."""
    norm = spec.normalizer
    if norm.clean_text:
        text = "".join(" " if ord(c) in _CLEAN_SPACE else c for c in text if ord(c) not in _CONTROL)
    if norm.handle_chinese_chars:
        text = "".join(f" {c} " if ord(c) in _CJK else c for c in text)
    if norm.strip_accents:
        pieces: list[str] = []
        run: list[str] = []
        for c in text:  # NFD, except for the code points HF's older NFD tables keep whole
            if ord(c) in ut.NFD_FIXES:
                pieces += [unicodedata.normalize("NFD", "".join(run)), ut.NFD_FIXES[ord(c)]]
                run = []
            else:
                run.append(c)
        decomposed = "".join(pieces) + unicodedata.normalize("NFD", "".join(run))
        text = "".join(c for c in decomposed if ord(c) not in _MARKS)
    if norm.lowercase:
        text = "".join(ut.LOWERCASE_FIXES.get(ord(c)) or c.lower() for c in text)  # char by char, like Rust
    return text


def pre_tokenize(text: str) -> list[str]:
    """HF BertPreTokenizer: split on whitespace, isolate each punctuation character.

    >>> pre_tokenize("Hello, world!")
    ['Hello', ',', 'world', '!']
    """
    words: list[str] = []
    current: list[str] = []
    for c in text:
        if ord(c) in _WHITESPACE or ord(c) in _PUNCT:
            if current:
                words.append("".join(current))
                current = []
            if ord(c) in _PUNCT:
                words.append(c)
        else:
            current.append(c)
    if current:
        words.append("".join(current))
    return words


def wordpiece(spec: TokenizerSpec, word: str) -> list[int]:
    """HF WordPiece on one word: longest vocab prefix first, then ``##`` pieces; any failure → [UNK]."""
    unk = [spec.vocab[spec.unk_token]]
    if len(word) > spec.max_input_chars_per_word:
        return unk
    ids, start = [], 0
    while start < len(word):
        end = len(word)
        while end > start:
            piece = word[start:end] if start == 0 else spec.continuing_subword_prefix + word[start:end]
            if piece in spec.vocab:
                ids.append(spec.vocab[piece])
                break
            end -= 1
        if end == start:
            return unk
        start = end
    return ids


def encode(spec: TokenizerSpec, text: str, max_length: int | None = None) -> list[int]:
    """Ids of one text with the post-processor template, truncated to ``max_length`` if given."""
    added = sorted(spec.added_tokens, key=lambda t: -len(t.content))
    ids: list[int] = []
    pos = piece_start = 0
    while pos <= len(text):
        match = next((t for t in added if text.startswith(t.content, pos)), None) if pos < len(text) else None
        if match is None and pos < len(text):
            pos += 1
            continue
        for word in pre_tokenize(normalize(spec, text[piece_start:pos])):  # the text before the match
            ids.extend(wordpiece(spec, word))
        if match is None:
            break
        ids.append(match.id)
        pos = piece_start = pos + len(match.content)
    if max_length is not None:
        ids = ids[: max_length - len(spec.prefix_ids) - len(spec.suffix_ids)]
    return list(spec.prefix_ids) + ids + list(spec.suffix_ids)
