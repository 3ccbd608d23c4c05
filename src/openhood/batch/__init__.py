"""Offline batch inference: ``openhood batch`` over JSONL / CSV / Parquet into Parquet.

Offline jobs make the opposite trade-off from serving: no arrival times to respect, so each
shard is sorted by length and padded per batch (dynamic padding) instead of fixed buckets.
``run`` runs a job (planning, resuming, assembling), ``job`` is what a job and a shard are, ``sources`` reads inputs as independent
shards, ``store`` keeps finished shards, ``tasks`` is what a row becomes, ``ray_engine`` runs
the same shards on Ray Data actors; ``options`` holds the command's choices and defaults.

The package's names load lazily (``__getattr__``): ``openhood batch``'s parser reads
``batch.options``, and importing a submodule runs this file first, so eager imports of the job,
its sources and store here would make every ``openhood`` command pay for them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from openhood.lazy import lazy_attributes

if TYPE_CHECKING:
    from openhood.batch.job import BatchJob, JobSummary
    from openhood.batch.run import run_job
    from openhood.batch.sources import InputError
    from openhood.batch.store import JobMismatchError

# name → the submodule defining it, imported on first use
_LAZY = {
    "BatchJob": "job",
    "JobSummary": "job",
    "run_job": "run",
    "InputError": "sources",
    "JobMismatchError": "store",
}

__all__ = ["BatchJob", "InputError", "JobMismatchError", "JobSummary", "run_job"]


__getattr__ = lazy_attributes(__name__, _LAZY, globals())
