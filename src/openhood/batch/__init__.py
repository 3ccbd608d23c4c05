"""Offline batch inference: ``openhood batch`` over JSONL / CSV / Parquet into Parquet.

Offline jobs make the opposite trade-off from serving: no arrival times to respect, so each
shard is sorted by length and padded per batch (dynamic padding) instead of fixed buckets.
``run`` runs a job (planning, resuming, assembling), ``job`` is what a job and a shard are, ``sources`` reads inputs as independent
shards, ``store`` keeps finished shards, ``tasks`` is what a row becomes, ``ray_engine`` runs
the same shards on Ray Data actors.
"""

from openhood.batch.job import BatchJob, JobSummary
from openhood.batch.run import run_job
from openhood.batch.sources import InputError
from openhood.batch.store import JobMismatchError

__all__ = ["BatchJob", "InputError", "JobMismatchError", "JobSummary", "run_job"]
