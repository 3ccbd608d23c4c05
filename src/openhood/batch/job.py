"""A batch job end to end: plan the shards, run the missing ones, assemble the output.

``run_job`` is engine-agnostic: it plans the input (``sources.plan``), opens the shard store
(resuming when it holds shards of the same job), hands the missing shards to an engine (this
process, or Ray actors through ``batch.ray_engine``), and assembles the output. Both engines
call ``run_shard`` — read the shard's rows, run the task on the usable ones, return the output
table and the rejected rows — so a shard's bytes do not depend on which engine ran it.
Memory stays bounded by one shard per worker: the input is never loaded whole, and the
output is streamed shard by shard into the final file.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from openhood.batch.progress import ProgressBar
from openhood.batch.sources import InputError, ShardSpec, Source, plan, read_shard
from openhood.batch.store import ShardStore
from openhood.batch.tasks import EmbedTask

ENGINES = ("local", "ray")
DEFAULT_SHARD_ROWS = 4096  # the sort window too: large enough that padding waste is small
DEFAULT_BATCH_SIZE = 32


@dataclass(frozen=True)
class BatchJob:
    """Everything that decides a job's output (plain types: it is sent to Ray actors as a dict)."""

    input: str
    output: str
    format: str | None = None
    column: str = "text"
    id_column: str = "id"
    errors: str | None = None  # default: OUT.errors.jsonl beside the output
    model: str | None = None  # None: the bundled all-MiniLM-L6-v2
    backend: str = "numpy"
    precision: str = "fp32"
    shard_rows: int = DEFAULT_SHARD_ROWS
    batch_size: int = DEFAULT_BATCH_SIZE
    threads: int | None = None  # engine threads per worker (per Ray actor with --engine ray)
    workers: int = 1  # engines side by side in one process (each Ray actor runs one)

    def __post_init__(self) -> None:
        if self.shard_rows < 1 or self.batch_size < 1:
            raise InputError("--shard-rows and --batch-size must be >= 1")
        if self.threads is not None and self.threads < 1:
            raise InputError("--threads must be >= 1")
        if self.workers < 1:
            raise InputError("--workers must be >= 1")
        if Path(self.output).suffix.lower() != ".parquet":
            raise InputError(f"--output must be a .parquet file, got {self.output}")

    def source(self) -> Source:
        return Source.open(self.input, self.format, self.column, self.id_column)

    def errors_path(self) -> Path:
        return Path(self.errors) if self.errors else Path(self.output).with_suffix(".errors.jsonl")

    def make_task(self) -> EmbedTask:
        return EmbedTask(self.model, self.backend, self.precision, self.threads, self.batch_size, self.workers)

    def identity(self, source: Source) -> dict:
        """What must match for shards of an earlier run to be reused (engine, workers and threads
        may differ: they do not change a byte of the output)."""
        st = os.stat(source.path)
        model = str(Path(self.model).resolve()) if self.model else None
        return {
            "input": source.path,
            "input_size": st.st_size,
            "input_mtime_ns": st.st_mtime_ns,
            "format": source.format,
            "column": self.column,
            "id_column": self.id_column,
            "shard_rows": self.shard_rows,
            "model": model,
            "backend": self.backend,
            "precision": self.precision,
            "batch_size": self.batch_size,
        }

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class JobSummary:
    rows: int
    errors: int
    shards: int
    resumed_shards: int
    seconds: float
    setup_seconds: float  # model load (local) or Ray start-up, included in ``seconds``
    output: Path
    errors_path: Path


def run_shard(task, source: Source, spec: ShardSpec):
    """One shard → (output table in input order, rejected rows as dicts sorted by row)."""
    import pyarrow as pa

    rows = read_shard(source, spec)
    errors = [e.to_json() for e in rows.errors]
    schema = task.schema()
    if not rows.values:
        return schema.empty_table(), sorted(errors, key=lambda e: e["row"])
    out = task.run(rows.values)
    keep = [i for i in range(len(rows.values)) if i not in out.failed]
    errors += [{"row": rows.rows[i], "id": rows.ids[i], "reason": reason} for i, reason in out.failed.items()]
    ids = pa.array([rows.ids[i] for i in keep], type=pa.string())
    table = pa.Table.from_arrays([ids, *(out.columns[f.name] for f in schema if f.name != "id")], schema=schema)
    return table, sorted(errors, key=lambda e: e["row"])


def run_job(
    job: BatchJob,
    engine: str = "local",
    stream=None,
    overwrite: bool = False,
    concurrency: int | None = None,
    ray_cpus: int | None = None,
) -> JobSummary:
    """Run (or resume) ``job``; raises ``InputError`` / ``JobMismatchError`` for usage mistakes."""
    import sys
    import time

    if engine not in ENGINES:
        raise InputError(f"--engine must be one of {', '.join(ENGINES)}")
    t0 = time.perf_counter()
    source = job.source()
    store = ShardStore(job.output)
    if Path(job.output).exists() and not store.dir.exists() and not overwrite:
        raise InputError(f"{job.output} already exists; pass --overwrite to replace it")
    specs = list(plan(source, job.shard_rows))  # ~40 bytes a shard: 10 GB of short lines ≈ a few MB
    if not specs:
        raise InputError(f"{Path(source.path).name} has no rows")
    store.open(job.identity(source), restart=overwrite)
    done = store.done()
    pending = [s for s in specs if s.index not in done]
    progress = ProgressBar(
        sum(s.rows for s in specs), stream or sys.stderr, already_done=sum(s.rows for s in specs if s.index in done)
    )
    if engine == "local":
        t_load = time.perf_counter()
        task = job.make_task() if pending else None
        setup = time.perf_counter() - t_load
        for spec in pending:
            table, errors = run_shard(task, source, spec)
            store.write(spec.index, table, errors)
            progress.advance(spec.rows)
    else:
        from openhood.batch.ray_engine import run_on_ray

        setup = run_on_ray(job, pending, progress, concurrency=concurrency, num_cpus=ray_cpus)
    progress.finish()
    rows, bad = store.assemble(len(specs), job.errors_path())
    return JobSummary(
        rows, bad, len(specs), len(done), time.perf_counter() - t0, setup, Path(job.output), job.errors_path()
    )
