"""Read text corpora: JSONL files with one ``{"text": ...}`` object per line.

Every command that takes ``--corpus`` / ``--input`` / ``--calibration`` reads through here, so
they all accept the same format and fail the same way: a ``CorpusError`` naming the file and
line. The trade-off: the whole list is held in memory (fine for the 40k-text dev corpus, ~6 MB);
streaming consumers (``openhood tokenize --input``) keep their own loop for byte-level progress.
"""

from __future__ import annotations

import json
from pathlib import Path


class CorpusError(ValueError):
    """The corpus file is missing or a line is not an object with a string text field."""


def read_texts(path: str | Path, field: str = "text", limit: int | None = None) -> list[str]:
    """Texts of a JSONL file, blank lines skipped; ``limit`` keeps the first N texts.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "c.jsonl")
    >>> _ = open(p, "w").write('{"text": "a"}\\n\\n{"text": "b"}\\n')
    >>> read_texts(p)
    ['a', 'b']
    """
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file {path} does not exist")
    texts: list[str] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if limit is not None and len(texts) >= limit:
                break
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{path}:{lineno}: not JSON ({exc.msg})") from None
            value = obj.get(field) if isinstance(obj, dict) else None
            if not isinstance(value, str):
                raise CorpusError(f"{path}:{lineno}: no string field {field!r} (expected one JSON object per line)")
            texts.append(value)
    return texts
