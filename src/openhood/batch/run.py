"""A batch job end to end: plan the shards, run the missing ones, assemble the output.

``run_job`` is engine-agnostic: it plans the input (``sources.plan``), opens the shard store
(resuming when it holds shards of the same job), hands the missing shards to an engine (this
process, or Ray actors through ``batch.ray_engine``), and assembles the output. Memory stays
bounded by one shard per worker: the input is never loaded whole, and the output is streamed
shard by shard into the final file.
"""

from __future__ import annotations

from pathlib import Path

from openhood.batch.job import BatchJob, JobSummary, run_shard
from openhood.batch.options import ENGINES
from openhood.batch.progress import ProgressBar
from openhood.batch.sources import InputError, plan
from openhood.batch.store import ShardStore


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
    for flag, path in (("--output", Path(job.output)), ("--errors", job.errors_path())):
        check_folder(flag, path)
    store = ShardStore(job.output)
    if Path(job.output).exists() and not store.dir.exists() and not overwrite:
        raise InputError(f"{job.output} already exists; pass --overwrite to replace it")
    specs = list(plan(source, job.shard_rows))  # ~40 bytes a shard: 10 GB of short lines ≈ a few MB
    if not specs:
        raise InputError(f"{Path(source.path).name} has no rows")
    try:
        store.open(job.identity(source), restart=overwrite)
    except OSError as exc:  # e.g. an --output under /proc: a folder that exists but takes no files
        raise InputError(f"cannot write beside --output {job.output} ({store.dir}: {exc.strerror or exc})") from None
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
        from openhood.batch.ray_engine import run_on_ray  # imports ray: only for --engine ray

        setup = run_on_ray(job, pending, progress, concurrency=concurrency, num_cpus=ray_cpus)
    progress.finish()
    rows, bad = store.assemble(len(specs), job.errors_path())
    return JobSummary(
        rows, bad, len(specs), len(done), time.perf_counter() - t0, setup, Path(job.output), job.errors_path()
    )


def check_folder(flag: str, path: Path) -> None:
    """``InputError`` unless ``path`` can be a file in an existing folder: a job never creates
    folders, so a typo in ``--output`` is refused before any work, not after it (or by leaving a
    new directory tree behind)."""
    folder = path.parent
    if not folder.is_dir():
        raise InputError(f"{flag} {path}: the folder {folder} does not exist")
    if path.is_dir():
        raise InputError(f"{flag} {path} is a folder, not a file")
