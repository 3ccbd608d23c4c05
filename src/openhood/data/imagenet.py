"""ImageNet-1k class names in index order (0–999), as classifiers trained on it number them.

The table is ``imagenet_classes.txt`` beside this module (``<wnid>\\t<names>``), generated
once from timm's wheel by ``scripts/make_imagenet_labels.py`` and committed, so nothing is
fetched at run time. A label is the first name of the class (``tabby`` for
``tabby, tabby cat``); ``imagenet_synsets`` gives the WordNet ids.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

CLASSES_FILE = Path(__file__).with_name("imagenet_classes.txt")


@lru_cache(maxsize=1)
def _rows() -> tuple[tuple[str, str], ...]:
    rows = tuple(tuple(line.split("\t", 1)) for line in CLASSES_FILE.read_text(encoding="utf-8").splitlines())
    if len(rows) != 1000:
        raise RuntimeError(f"{CLASSES_FILE} has {len(rows)} classes, expected 1000")
    return rows  # type: ignore[return-value]


def imagenet_labels() -> list[str]:
    """Index → the class's first name, e.g. ``imagenet_labels()[281] == 'tabby'``."""
    return [names.split(",")[0].strip() for _, names in _rows()]


def imagenet_synsets() -> list[str]:
    """Index → WordNet id, e.g. ``'n02123045'`` for 281."""
    return [wnid for wnid, _ in _rows()]
