"""What a batch job is and what one shard of it does: ``BatchJob`` and ``run_shard``.

Both engines (this process through ``batch.run``, Ray actors through ``batch.ray_engine``) call
``run_shard`` — read the shard's rows, run the task on the usable ones, return the output table
and the rejected rows — so a shard's bytes do not depend on which engine ran it. ``BatchJob``
holds plain types only: it travels to Ray actors as a dict.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path

from openhood.batch.options import DEFAULT_BATCH_SIZE, DEFAULT_SHARD_ROWS
from openhood.batch.sources import InputError, ShardSpec, Source, read_shard
from openhood.batch.tasks import EmbedTask


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
