"""``TextPreprocessor``: texts → token-id payloads (one per text), and payloads → padded feeds.

Tokenization (openhood's WordPiece, ``openhood.tokenizer``) truncates to the model's max length
and reports which inputs were cut; ``collate`` pads with the tokenizer's own pad id through the
one padding function, ``RaggedBatch.pad``. The trade-off: payloads stay ragged int arrays until
their batch is formed, so the scheduler can bucket them by length and pad each batch only to
its own longest row (or its bucket) — never to the model's maximum.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from openhood.models.served import Prepared
from openhood.tokenizer.batch import RaggedBatch

PROBE_TEXT = "openhood readiness probe"


class TextPreprocessor:
    probe_input = PROBE_TEXT

    def __init__(self, tokenizer, max_length: int):
        self.tokenizer = tokenizer
        self.max_length = max_length

    def prepare(self, inputs: Sequence[str], direction: str = "right") -> Prepared:
        """Texts → (L,) id arrays, special tokens included, truncated to ``max_length``: the end
        of a long text is cut (``direction="right"``) or its beginning (``"left"``, TEI's option)."""
        if direction == "right":
            batch = self.tokenizer.encode_batch(list(inputs), max_length=self.max_length)
            payloads = [np.asarray(ids) for ids in batch]
            return Prepared(payloads, [len(p) for p in payloads], np.asarray(batch.truncated, dtype=bool))
        if direction != "left":
            raise ValueError(f"truncation direction must be 'left' or 'right', got {direction!r}")
        # Left: encode whole, then keep the special prefix/suffix around the last tokens. Costs a
        # full tokenization of long texts (the right cut stops early); only callers who ask pay it.
        spec = self.tokenizer.spec
        head, tail = len(spec.prefix_ids), len(spec.suffix_ids)
        keep = self.max_length - head - tail
        payloads, truncated = [], []
        for ids in self.tokenizer.encode_batch(list(inputs)):
            ids = np.asarray(ids)
            cut = len(ids) > self.max_length
            if cut:
                ids = np.concatenate(
                    [ids[:head], ids[len(ids) - tail - keep : len(ids) - tail], ids[len(ids) - tail :]]
                )
            payloads.append(ids)
            truncated.append(cut)
        return Prepared(payloads, [len(p) for p in payloads], np.asarray(truncated, dtype=bool))

    def encode(self, texts: Sequence[str]) -> RaggedBatch:
        """The ragged batch itself (offline callers sort and slice it without re-tokenizing)."""
        return self.tokenizer.encode_batch(list(texts), max_length=self.max_length)

    def collate(self, payloads: list[np.ndarray], padded_len: int) -> dict[str, np.ndarray]:
        lengths = np.array([len(p) for p in payloads], dtype=np.int64)
        ragged = RaggedBatch(
            np.concatenate(payloads), lengths, np.zeros(len(payloads), dtype=bool), pad_id=int(self.tokenizer.pad_id)
        )
        padded = ragged.pad(padded_len)
        return {"input_ids": padded.input_ids, "attention_mask": padded.attention_mask}  # (B, T) each

    def dummy(self, length: int) -> np.ndarray:
        """[CLS] [PAD]… [SEP] of ``length`` tokens (any ids are valid input)."""
        ids = np.full(length, self.tokenizer.pad_id, dtype=np.int64)
        ids[0], ids[-1] = self.tokenizer.cls_id, self.tokenizer.sep_id
        return ids
