"""Where a batch job keeps its finished shards, so a killed job resumes where it stopped.

Next to the output ``OUT.parquet`` lives ``OUT.parquet.shards/``: ``job.json`` (what the job
is: input file, size and mtime, column, shard size, model, batch size) and, per finished shard,
``part-NNNNNN.errors.jsonl`` then ``part-NNNNNN.parquet``. Each file is written under a
temporary name and renamed, and the Parquet file goes last: its presence is the shard's commit
mark, so a shard cut off by a kill is simply redone. When every shard is there, ``assemble``
streams them in order into the output (one row group per shard) and the errors file, then
removes the directory. Vector columns are written without dictionary encoding
(``dictionary_columns``): floats never repeat. The same shards give the same bytes whoever computed them (the local
loop or a Ray actor), which is what makes a resumed or a Ray run identical to a plain one. The
trade-off: the shards need disk space equal to the output until the job ends.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path


class JobMismatchError(ValueError):
    """The shard directory belongs to a different job (changed input or settings)."""


class ShardStore:
    def __init__(self, output: str | Path):
        self.output = Path(output)
        self.dir = self.output.with_name(self.output.name + ".shards")

    def open(self, job: dict, restart: bool = False) -> None:
        """Create the directory for ``job``, or check that an existing one is the same job."""
        manifest = self.dir / "job.json"
        if restart and self.dir.exists():
            shutil.rmtree(self.dir)
        if manifest.is_file():
            old = json.loads(manifest.read_text(encoding="utf-8"))
            changed = sorted(k for k in set(old) | set(job) if old.get(k) != job.get(k))
            if changed:
                raise JobMismatchError(
                    f"{self.dir} holds shards of a different job ({', '.join(changed)} changed); "
                    "pass --restart to discard them"
                )
            return
        self.dir.mkdir(exist_ok=True)  # beside the output, whose folder the job checked exists
        _write_atomic(manifest, json.dumps(job, indent=1, sort_keys=True).encode())

    def part(self, index: int, suffix: str) -> Path:
        return self.dir / f"part-{index:06d}{suffix}"

    def done(self) -> set[int]:
        return {int(p.name[5:11]) for p in self.dir.glob("part-*.parquet")}

    def write(self, index: int, table, errors: list[dict]) -> None:
        import pyarrow.parquet as pq

        body = b"".join(json.dumps(e, ensure_ascii=False).encode() + b"\n" for e in errors)
        _write_atomic(self.part(index, ".errors.jsonl"), body)
        tmp = self.part(index, ".parquet.tmp")
        pq.write_table(
            table, tmp, row_group_size=max(1, table.num_rows), use_dictionary=dictionary_columns(table.schema)
        )
        os.replace(tmp, self.part(index, ".parquet"))  # the commit mark: written last

    def assemble(self, shard_count: int, errors_path: Path) -> tuple[int, int]:
        """Concatenate shards 0..n-1 into the output and the errors file; (rows, errors)."""
        import pyarrow.parquet as pq

        rows = bad = 0
        schema = pq.read_schema(self.part(0, ".parquet"))
        tmp = self.output.with_name(self.output.name + ".tmp")
        with pq.ParquetWriter(tmp, schema, use_dictionary=dictionary_columns(schema)) as writer:
            for i in range(shard_count):
                table = pq.read_table(self.part(i, ".parquet"), schema=schema)
                writer.write_table(table, row_group_size=max(1, table.num_rows))
                rows += table.num_rows
        err_tmp = errors_path.with_name(errors_path.name + ".tmp")
        with open(err_tmp, "wb") as out:
            for i in range(shard_count):
                with open(self.part(i, ".errors.jsonl"), "rb") as f:
                    data = f.read()
                bad += data.count(b"\n")
                out.write(data)
        os.replace(err_tmp, errors_path)
        os.replace(tmp, self.output)
        shutil.rmtree(self.dir)
        return rows, bad


def dictionary_columns(schema) -> list[str]:
    """Columns worth Parquet's dictionary encoding: not the vectors. Float vectors never repeat,
    so the encoder fills a dictionary page, gives up and falls back; without it a 2000 x 384
    embedding shard writes ~3x faster (10 vs 28 ms), reads ~3x faster and is 17% smaller."""
    import pyarrow as pa

    return [f.name for f in schema if not (pa.types.is_fixed_size_list(f.type) or pa.types.is_list(f.type))]


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
