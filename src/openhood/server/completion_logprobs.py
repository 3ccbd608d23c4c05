"""The scheduler's per-token logprobs → OpenAI's two JSON shapes (chat's ``content`` list, completions' legacy
``tokens``/``token_logprobs``/``top_logprobs``/``text_offset`` columns).

A token's ``token`` string is its bytes decoded as UTF-8 with U+FFFD for a character a byte-level
token cuts (OpenAI's ``bytes`` field carries the exact bytes, so clients can rejoin them); the
legacy ``text_offset`` counts characters of the completion's text, so it goes through one
incremental UTF-8 decoder per request (a token that only starts a character adds no characters
yet). The trade-off: the legacy ``top_logprobs`` is a ``{token: logprob}`` dict as OpenAI defines
it, so two alternatives that decode to the same string (two halves of different characters)
keep only the likelier one there; chat's list keeps both.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Iterable
from typing import Any

from openhood.generate.logprobs import TokenLogprobs

TokenBytes = Callable[[int], bytes]  # the tokenizer's token_bytes


def _entry(token_bytes: TokenBytes, token: int, logprob: float) -> dict[str, Any]:
    raw = token_bytes(token)
    return {"token": raw.decode("utf-8", errors="replace"), "logprob": logprob, "bytes": list(raw)}


def chat_logprobs(entries: Iterable[TokenLogprobs], token_bytes: TokenBytes) -> dict[str, Any]:
    """A chat choice's (or chunk's) ``logprobs``: ``{"content": [...], "refusal": None}``."""
    content = [
        {
            **_entry(token_bytes, e.token, e.logprob),
            "top_logprobs": [_entry(token_bytes, t, lp) for t, lp in e.top],
        }
        for e in entries
    ]
    return {"content": content, "refusal": None}


class LegacyLogprobs:
    """``/v1/completions``' columns, built chunk by chunk; ``text_offset`` runs on across chunks."""

    def __init__(self, token_bytes: TokenBytes):
        self._bytes = token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._offset = 0  # characters of the completion before the next token

    def columns(self, entries: Iterable[TokenLogprobs]) -> dict[str, Any]:
        out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for e in entries:
            raw = self._bytes(e.token)
            out["tokens"].append(raw.decode("utf-8", errors="replace"))
            out["token_logprobs"].append(e.logprob)
            top: dict[str, float] = {}
            for t, lp in e.top:  # most likely first: a repeated string keeps its likelier logprob
                top.setdefault(self._bytes(t).decode("utf-8", errors="replace"), lp)
            out["top_logprobs"].append(top)
            out["text_offset"].append(self._offset)
            self._offset += len(self._utf8.decode(raw))
        return out
