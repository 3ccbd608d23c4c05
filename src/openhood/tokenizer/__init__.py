"""openhood.tokenizer: the two tokenizers of the served models, ids equal to HF ``tokenizers``, batched in numba.

Both implement one protocol, ``Tokenizer`` (``protocol.py``: ``from_pretrained``, ``encode``,
``encode_batch``, ``decode``, ``special_ids``, HF's argument names and defaults).

- WordPiece (BERT family: the encoders): ``WordPieceTokenizer.from_pretrained(folder)`` → ``encode`` /
  ``encode_batch`` (a ``RaggedBatch`` that pads itself into a ``PaddedBatch``) / ``decode``;
  see ``tokenizer.py`` for the batch design.
- Byte-level BPE (GPT-2 / SmolLM2 family: the decoder): ``bpe.BPETokenizer.from_pretrained`` of a
  GGUF file's metadata or a ``tokenizer.json`` (``bpe.spec_from_gguf`` / ``spec_from_tokenizer_json``), with
  a ``StreamDecoder`` for text that arrives token by token.

Each keeps a plain-Python reference beside its compiled batch path (``reference.py``,
``BPETokenizer.encode_reference``), and the tests hold the fast one to it.
"""

from __future__ import annotations

from openhood.tokenizer.batch import PaddedBatch, RaggedBatch
from openhood.tokenizer.config import TokenizerConfigError, UnsupportedTokenizerError
from openhood.tokenizer.protocol import Tokenizer
from openhood.tokenizer.tokenizer import WordPieceTokenizer

__all__ = [
    "PaddedBatch",
    "RaggedBatch",
    "Tokenizer",
    "TokenizerConfigError",
    "UnsupportedTokenizerError",
    "WordPieceTokenizer",
]
