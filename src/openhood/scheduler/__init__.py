"""Scheduler: length buckets, bounded queues and the dynamic-batching inference workers.

Knows nothing about HTTP or architectures: it takes opaque items with a length (their cost)
and gives back futures of the served model's outputs, one row per item.

The package's names load lazily (``__getattr__``): ``openhood serve``'s parser reads its
defaults from ``scheduler.policy`` (plain dataclasses), and importing a submodule runs this
file first, so an eager import of the batcher (NumPy, the preemption model) here would make
every ``openhood`` command pay for it while building its parser.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openhood.lazy import lazy_attributes
from openhood.scheduler.policy import PAD_TO, PRIORITIES, BatchPolicy

if TYPE_CHECKING:
    from openhood.scheduler.batcher import (
        BatchFailedError,
        BatchInfo,
        DynamicBatcher,
        ItemResult,
        QueueFullError,
        RequestTooLargeError,
        SchedulerStoppedError,
    )
    from openhood.scheduler.buckets import LENGTH_LABEL_EDGES, LENGTH_LABELS, LengthBuckets, length_label
    from openhood.scheduler.protocol import Scheduler

# name → the submodule defining it, imported on first use
_LAZY = {
    "BatchFailedError": "batcher",
    "BatchInfo": "batcher",
    "DynamicBatcher": "batcher",
    "ItemResult": "batcher",
    "QueueFullError": "batcher",
    "RequestTooLargeError": "batcher",
    "SchedulerStoppedError": "batcher",
    "LENGTH_LABEL_EDGES": "buckets",
    "LENGTH_LABELS": "buckets",
    "LengthBuckets": "buckets",
    "length_label": "buckets",
    "Scheduler": "protocol",
}

__all__ = [
    "LENGTH_LABELS",
    "LENGTH_LABEL_EDGES",
    "PAD_TO",
    "PRIORITIES",
    "BatchFailedError",
    "BatchInfo",
    "BatchPolicy",
    "DynamicBatcher",
    "ItemResult",
    "LengthBuckets",
    "QueueFullError",
    "RequestTooLargeError",
    "Scheduler",
    "SchedulerStoppedError",
    "length_label",
]


__getattr__ = lazy_attributes(__name__, _LAZY, globals())
