"""Parity of every backend (and precision) with the committed PyTorch reference embeddings.

The tests assert a floor (cosine ≥ 0.99999 for fp32); this prints the actual worst cosine and
largest absolute difference per backend, the numbers docs/benchmarks.md quotes. The reference
set (`tests/fixtures/`, 64 texts: 12 languages, emoji, code, 11 beyond 256 tokens) was made by
`scripts/make_reference.py` in a separate torch venv; nothing here imports torch.

    .venv/bin/python benchmarks/parity.py [--quantized DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


def main(argv: list[str] | None = None) -> int:
    from openhood import Embedder

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quantized", help="an `openhood quantize` output folder: also report its int8 and fp16")
    args = ap.parse_args(argv)

    texts = json.loads((FIXTURES / "reference_texts.json").read_text(encoding="utf-8"))["texts"]
    ref = np.load(FIXTURES / "reference_embeddings.npy", allow_pickle=False)  # (64, 384), unit rows
    variants = [(None, b, "fp32") for b in ("numpy", "onnxruntime")]
    if args.quantized:
        variants += [(args.quantized, b, p) for p in ("fp16", "int8") for b in ("numpy", "onnxruntime")]
    print(f"{len(texts)} reference texts (PyTorch sentence-transformers)\n")
    print("| backend | precision | worst cosine | mean cosine | max abs difference |")
    print("|---|---|---:|---:|---:|")
    for folder, backend, precision in variants:
        got = Embedder.from_pretrained(folder, backend=backend, precision=precision).embed(texts, batch_size=16)
        cos = np.sum(got * ref, axis=1)  # both sides unit vectors
        print(f"| {backend} | {precision} | {cos.min():.8f} | {cos.mean():.8f} | {np.abs(got - ref).max():.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
