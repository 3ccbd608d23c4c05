"""``Tokenizer``: the one interface both of openhood's tokenizers implement.

``WordPieceTokenizer`` (BERT encoders) and ``BPETokenizer`` (byte-level BPE decoders) differ
inside — a normalizer and a vocabulary trie vs. merge ranks over UTF-8 bytes — but a caller
(a preprocessor, ``openhood tokenize``, the TEI ``/tokenize`` and ``/decode`` routes, a test
holding them to HF ``tokenizers``) uses the same calls with the same argument names and
defaults, HF's: ``max_length`` counts special tokens, ``decode`` skips special tokens unless
``skip_special_tokens=False``. The trade-off: what only one of them has stays on that class
(``BPETokenizer.stream_decoder`` for token-by-token text, ``parse_special`` for raw prompts,
WordPiece's offsets), so the protocol is the common floor, not a union of features.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from openhood.tokenizer.batch import RaggedBatch


class Tokenizer(Protocol):
    @property
    def vocab_size(self) -> int: ...

    @property
    def special_ids(self) -> frozenset[int]:
        """Ids of the special (control) tokens: ``decode`` skips them by default."""
        ...

    @classmethod
    def from_pretrained(cls, path: str | Path) -> Tokenizer:
        """Load from a model folder or the tokenizer's own file."""
        ...

    def encode(self, text: str, max_length: int | None = None) -> np.ndarray:
        """Ids of one text (int32), its special tokens included; ``max_length`` counts them."""
        ...

    def encode_batch(self, texts: list[str], max_length: int | None = None) -> RaggedBatch:
        """Ids of many texts in one flat array with their lengths (``RaggedBatch.pad()`` pads)."""
        ...

    def decode(self, ids: object, skip_special_tokens: bool = True) -> str: ...

    def convert_ids_to_tokens(self, ids: object) -> list[str]: ...
