"""Scheduler: length buckets, bounded queues and the dynamic-batching inference workers.

Knows nothing about HTTP or architectures: it takes opaque items with a length (their cost)
and gives back futures of the served model's outputs, one row per item.
"""

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
from openhood.scheduler.policy import PAD_TO, PRIORITIES, BatchPolicy
from openhood.scheduler.protocol import Scheduler

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
