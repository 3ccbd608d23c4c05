"""openhood.tokenizer: a BERT WordPiece tokenizer with exact HF ``tokenizers`` ids, batched in numba.

``Tokenizer.from_pretrained(folder)`` → ``encode`` / ``encode_batch`` (a ``RaggedBatch`` that
pads itself into a ``PaddedBatch``) / ``decode``. See ``tokenizer.py`` for the batch design.
"""

from __future__ import annotations

from openhood.tokenizer.batch import PaddedBatch, RaggedBatch
from openhood.tokenizer.config import TokenizerConfigError, UnsupportedTokenizerError
from openhood.tokenizer.tokenizer import Tokenizer

__all__ = ["PaddedBatch", "RaggedBatch", "Tokenizer", "TokenizerConfigError", "UnsupportedTokenizerError"]
