"""``openhood batch``: embed a JSONL / CSV / Parquet file offline into Parquet (``id``, ``embedding``).

Examples::

    openhood batch --input corpus.jsonl --output emb.parquet              # bundled model, this machine
    openhood batch --input docs.parquet --column body --output emb.parquet --engine ray

Re-running the same command after a kill resumes from the finished shards (kept in
``OUT.parquet.shards/``); rows that cannot be used go to ``OUT.errors.jsonl`` with their
reason and the job goes on. See docs/batch.md and, for Ray clusters, docs/scale-out.md.
"""

from __future__ import annotations

import argparse
import functools

from openhood.batch.options import DEFAULT_BATCH_SIZE, DEFAULT_SHARD_ROWS, ENGINES, FORMATS
from openhood.cli.validate import usage_error


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "batch",
        help="offline batch embeddings of a JSONL/CSV/Parquet file into Parquet (local or Ray)",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--input", required=True, help="JSONL, CSV (with a header) or Parquet file")
    p.add_argument("--output", required=True, help="Parquet file to write (columns id, embedding)")
    p.add_argument("--model", default=None, help="Hugging Face model folder (default: the bundled all-MiniLM-L6-v2)")
    p.add_argument(
        "--engine",
        default="local",
        choices=ENGINES,
        help="run in this process, or on Ray Data actors (RAY_ADDRESS, else a local Ray)",
    )
    p.add_argument("--format", default=None, choices=FORMATS, help="input format (default: from the file suffix)")
    p.add_argument("--column", default="text", help="field / column holding each row's text")
    p.add_argument(
        "--id-column", default="id", help="field / column holding each row's id (absent: the 0-based line number)"
    )
    p.add_argument("--errors", default=None, help="JSONL file for rejected rows (default: OUT.errors.jsonl)")
    p.add_argument("--backend", default="numpy", choices=("numpy", "onnxruntime"))
    p.add_argument("--precision", default="fp32")
    p.add_argument(
        "--shard-rows",
        type=int,
        default=DEFAULT_SHARD_ROWS,
        help="rows per shard: the unit of resuming and of length sorting",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="rows per engine call (padded to the batch's longest)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="local engine: engines running batches side by side in this process (default: cores / --threads)",
    )
    p.add_argument("--threads", type=int, default=None, help="engine threads per worker, or per Ray actor (default 1)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="Ray actors, each loading the model once (default: cluster CPUs / threads)",
    )
    p.add_argument(
        "--ray-cpus",
        type=int,
        default=None,
        help="CPUs of the local Ray started when RAY_ADDRESS is unset (default: all)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing output and discard shards of an earlier job"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from openhood.batch import BatchJob, InputError, JobMismatchError, run_job
    from openhood.engine.kernels.cores import available_cores
    from openhood.process.allocator import apply_malloc_policy

    for name in ("concurrency", "ray_cpus", "workers", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            return _usage(f"--{name.replace('_', '-')} must be >= 1")
    if args.engine == "ray" and args.workers is not None:
        return _usage("--workers is for the local engine; with --engine ray use --concurrency (actors)")
    # One core per engine: N one-thread engines side by side beat one N-thread engine on a
    # shared CPU (docs/batch.md); on Ray a core is also the actor's scheduling unit.
    args.threads = args.threads or 1
    try:
        apply_malloc_policy("default")  # throughput first; OPENHOOD_MALLOC_POLICY=pinned trades 4% for RSS
    except ValueError as exc:
        return _usage(str(exc))
    if args.workers is None:
        args.workers = max(1, available_cores() // args.threads) if args.engine == "local" else 1
    try:
        job = BatchJob(
            input=args.input,
            output=args.output,
            format=args.format,
            column=args.column,
            id_column=args.id_column,
            errors=args.errors,
            model=args.model,
            backend=args.backend,
            precision=args.precision,
            shard_rows=args.shard_rows,
            batch_size=args.batch_size,
            threads=args.threads,
            workers=args.workers,
        )
        summary = run_job(
            job, engine=args.engine, overwrite=args.overwrite, concurrency=args.concurrency, ray_cpus=args.ray_cpus
        )
    except (InputError, JobMismatchError) as exc:
        return _usage(str(exc))
    except ModuleNotFoundError as exc:
        if exc.name in ("ray", "pyarrow"):
            return _usage(f"--engine ray needs Ray: pip install 'openhood[ray]' ({exc.name} is missing)")
        raise
    print(
        f"{summary.rows} rows embedded, {summary.errors} rejected (see {summary.errors_path}), {summary.shards} shards "
        f"({summary.resumed_shards} from an earlier run) in {summary.seconds:.1f} s ({summary.setup_seconds:.1f} s "
        f"{'loading the model' if args.engine == 'local' else 'starting Ray'}) → {summary.output}"
    )
    return 0


_usage = functools.partial(usage_error, "batch")
