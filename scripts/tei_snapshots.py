"""Turn TEI's all-MiniLM-L6-v2 candle snapshots into tests/fixtures/tei_minilm_snapshots.json.

TEI (huggingface/text-embeddings-inference) tests its candle backend against insta YAML
snapshots: ``backends/candle/tests/snapshots/test_bert__mini_batch.snap`` holds the mean-pooled,
un-normalized float32 vectors of the inputs below (``test_bert.rs: test_mini``); the files were
removed from TEI's tree in commit 61c070a, so read them from its parent:

    git -C TEI show 61c070a^:backends/candle/tests/snapshots/test_bert__mini_batch.snap > mini_batch.snap
    python scripts/tei_snapshots.py mini_batch.snap > tests/fixtures/tei_minilm_snapshots.json

TEI's own check is cosine > 0.999 per vector (``tests/common.rs``); ours is stricter.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

INPUTS = ["What is Deep Learning?", "Deep Learning is...", "What is Deep Learning?"]  # test_mini's batch


def read_snapshot(path: str) -> list[list[float]]:
    body = Path(path).read_text(encoding="utf-8").split("---", 2)[2]  # after insta's header
    rows: list[list[float]] = []
    for line in body.splitlines():
        match = re.match(r"^(- - |  - )(\S+)$", line)
        if match:
            if match.group(1) == "- - ":
                rows.append([])
            rows[-1].append(float(match.group(2)))
    return rows


def main() -> None:
    rows = read_snapshot(sys.argv[1])
    assert len(rows) == len(INPUTS) and all(len(r) == 384 for r in rows), [len(r) for r in rows]
    json.dump(
        {
            "source": "huggingface/text-embeddings-inference 61c070a^ backends/candle/tests/snapshots/"
            "test_bert__mini_batch.snap (mean pooling, not normalized)",
            "model": "sentence-transformers/all-MiniLM-L6-v2",
            "inputs": INPUTS,
            "embeddings": rows,
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
