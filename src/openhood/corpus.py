"""Read text corpora: JSONL files with one ``{"text": ...}`` object per line.

Every command that takes ``--corpus`` / ``--input`` / ``--calibration`` reads through here, so
they all accept the same format and fail the same way: a ``CorpusError`` naming the file and
line. It also holds the one rule of what counts as text to embed (``blank_text``), which the
server's routes (400 ``empty_string``) and ``openhood batch`` (a rejected row) both apply. ``read_texts`` holds the whole list in memory (fine for the 40k-text dev corpus, ~6 MB);
``iter_texts`` streams, with the bytes consumed for progress bars (``openhood tokenize --input``).
"""

from __future__ import annotations

import json
from pathlib import Path

EMPTY_TEXT_CODE = "empty_string"  # the error code of a text that is blank (server and batch alike)


def blank_text(text: str) -> str | None:
    """Why ``text`` cannot be embedded ("an empty string", "whitespace only"), or None when it has
    text. Whitespace alone tokenizes to ``[CLS] [SEP]``: a vector that means nothing.

    >>> blank_text(""), blank_text(" \\n\\t "), blank_text(" a ")
    ('an empty string', 'whitespace only', None)
    """
    if not text:
        return "an empty string"
    return "whitespace only" if text.isspace() else None


class CorpusError(ValueError):
    """The corpus file is missing or a line is not an object with a string text field."""


def iter_texts(path: str | Path, field: str = "text"):
    """Stream ``(bytes consumed, text)`` per non-blank line, for readers that report progress
    by file position (``openhood tokenize --input``); the same checks and errors as ``read_texts``."""
    path = Path(path)
    if not path.is_file():
        raise CorpusError(f"corpus file {path} does not exist")
    with path.open("rb") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                yield len(line), None
                continue
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise CorpusError(f"{path}:{lineno}: not JSON ({getattr(exc, 'msg', 'not UTF-8')})") from None
            value = obj.get(field) if isinstance(obj, dict) else None
            if not isinstance(value, str):
                raise CorpusError(f"{path}:{lineno}: no string field {field!r} (expected one JSON object per line)")
            yield len(line), value


def read_texts(path: str | Path, field: str = "text", limit: int | None = None) -> list[str]:
    """Texts of a JSONL file, blank lines skipped; ``limit`` keeps the first N texts.

    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "c.jsonl")
    >>> _ = open(p, "w").write('{"text": "a"}\\n\\n{"text": "b"}\\n')
    >>> read_texts(p)
    ['a', 'b']
    """
    texts: list[str] = []
    if limit is not None and limit <= 0:
        return texts
    for _, text in iter_texts(path, field):
        if text is not None:
            texts.append(text)
            if len(texts) == limit:  # stop before reading (and judging) the next line
                break
    return texts
