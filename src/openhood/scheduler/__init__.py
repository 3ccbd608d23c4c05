"""Scheduler: length buckets, a bounded queue and the dynamic-batching inference worker.

Knows nothing about HTTP: it takes token-id arrays and gives back futures of embeddings.
"""

from openhood.scheduler.batcher import (
    BatchFailedError,
    BatchInfo,
    DynamicBatcher,
    ItemResult,
    QueueFullError,
    SchedulerStoppedError,
)
from openhood.scheduler.buckets import LENGTH_LABELS, LengthBuckets, length_label

__all__ = [
    "LENGTH_LABELS",
    "BatchFailedError",
    "BatchInfo",
    "DynamicBatcher",
    "ItemResult",
    "LengthBuckets",
    "QueueFullError",
    "SchedulerStoppedError",
    "length_label",
]
