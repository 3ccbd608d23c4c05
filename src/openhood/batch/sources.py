"""Batch-job inputs (JSONL, CSV, Parquet) cut into shards that can be read independently.

A job first *plans* its input: one streaming pass that cuts it into shards of ``shard_rows``
rows and records where each starts (a byte offset for JSONL and CSV, a row number for Parquet).
Any process can then read any shard on its own (the local loop, or a Ray actor on another
node), and a resumed job seeks straight to the first missing shard. The trade-off: the plan
costs one extra read of the file (newline counting for JSONL, a CSV parse for CSV; Parquet
only reads its footer) in exchange for random access and a known total for the ETA.

Rows: ``id`` is the input's id field/column when it has one, else the 0-based line (JSONL) or
record (CSV, Parquet) number, always as a string so every shard has the same schema. A row
that cannot be used (not JSON, not UTF-8, no string value in the input column, blank text by
the server's rule, a bad id) becomes a ``RowError`` with its reason; its text is never copied
into the error. A column that no row has is a mistake about the job, not about rows: CSV and
Parquet say so from their header / schema, JSONL from its first ``PROBE_ROWS`` objects.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from openhood.batch.options import FORMATS
from openhood.corpus import EMPTY_TEXT_CODE, blank_text

SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "jsonl",
    ".csv": "csv",
    ".parquet": "parquet",
    ".pq": "parquet",
}
READ_CHUNK = 1 << 20  # bytes per read while planning JSONL
PROBE_ROWS = 100  # JSONL objects read before planning: if none has the column, the job is refused
_ABSENT = object()  # a row without the field (as opposed to one whose value is null)


class InputError(ValueError):
    """The input as a whole is unusable (missing, unknown format, no such column): a usage mistake."""


@dataclass(frozen=True)
class Source:
    """What to read: the file, its format, and which field holds the input and the id."""

    path: str
    format: str
    column: str = "text"
    id_column: str = "id"

    @classmethod
    def open(cls, path: str | Path, format: str | None = None, column: str = "text", id_column: str = "id") -> Source:
        p = Path(path)
        if not p.is_file():
            raise InputError(f"input {p} does not exist")
        fmt = format or SUFFIXES.get(p.suffix.lower())
        if fmt not in FORMATS:
            raise InputError(f"cannot tell the format of {p.name} from its suffix; pass --format {'|'.join(FORMATS)}")
        return cls(str(p.resolve()), fmt, column, id_column)


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index``: rows ``first_row`` … ``first_row + rows - 1``, stored in ``[start, stop)``
    (bytes for JSONL/CSV, rows for Parquet). Plain fields only: it travels to Ray as a dict."""

    index: int
    first_row: int
    rows: int
    start: int
    stop: int

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RowError:
    row: int  # 0-based line / record number
    id: str | None
    reason: str
    code: str | None = None  # the server's error code for the same input, where it has one

    def to_json(self) -> dict:
        out: dict = {"row": self.row, "id": self.id, "reason": self.reason}
        if self.code is not None:
            out["code"] = self.code
        return out


@dataclass
class ShardRows:
    """The usable rows of one shard, in input order, and the rejected ones."""

    ids: list[str]
    rows: list[int]  # each usable row's 0-based line / record number
    values: list[str]
    errors: list[RowError]


def plan(source: Source, shard_rows: int):
    """Yield the ``ShardSpec`` of every shard, streaming (the file is never held in memory)."""
    if shard_rows < 1:
        raise ValueError(f"shard_rows must be >= 1, got {shard_rows}")
    if source.format == "jsonl":
        yield from _plan_jsonl(source, shard_rows)
    elif source.format == "csv":
        yield from _plan_csv(source, shard_rows)
    else:
        yield from _plan_parquet(source, shard_rows)


def read_shard(source: Source, spec: ShardSpec) -> ShardRows:
    if source.format == "jsonl":
        return _read_jsonl(source, spec)
    if source.format == "csv":
        return _read_csv(source, spec)
    return _read_parquet(source, spec)


def _cut(ends, shard_rows: int, start: int = 0):
    """``(byte offset just past a row, rows so far)`` per row → one ShardSpec per ``shard_rows``
    rows, the last one possibly shorter."""
    index = first = rows = 0
    end = start
    for end, rows in ends:
        if rows - first == shard_rows:
            yield ShardSpec(index, first, shard_rows, start, end)
            index, start, first = index + 1, end, rows
    if rows > first:
        yield ShardSpec(index, first, rows - first, start, end)


# --- JSONL: one row per physical line; blank lines count as lines but are not rows ---------------


def _line_ends(path: str):
    """(byte offset just past each line, lines so far); a last line without "\\n" counts too."""
    pos = lines = last_nl = 0
    with open(path, "rb") as f:
        while chunk := f.read(READ_CHUNK):
            i = chunk.find(b"\n")
            while i >= 0:
                lines += 1
                last_nl = pos + i + 1
                yield last_nl, lines
                i = chunk.find(b"\n", i + 1)
            pos += len(chunk)
    if pos > last_nl:
        yield pos, lines + 1


def _plan_jsonl(source: Source, shard_rows: int):
    _check_jsonl_column(source)
    yield from _cut(_line_ends(source.path), shard_rows)


def _check_jsonl_column(source: Source) -> None:
    """``InputError`` when none of the first ``PROBE_ROWS`` JSON objects has the input field (a
    misspelt ``--column``: every row would be rejected). Lines that are not objects say nothing."""
    seen: dict[str, None] = {}  # field names in first-seen order
    objects = 0
    with open(source.path, "rb") as f:
        for line in f:
            if objects == PROBE_ROWS:
                break
            try:
                obj = json.loads(line) if line.strip() else None
            except ValueError:  # not JSON / not UTF-8: that row's own error later
                continue
            if isinstance(obj, dict):
                if source.column in obj:
                    return
                objects += 1
                seen.update(dict.fromkeys(obj))
    if objects:
        raise InputError(
            f"{Path(source.path).name} has no field {source.column!r} in its first {objects} rows "
            f"(fields: {', '.join(seen) or 'none'}); pass --column"
        )


def _read_jsonl(source: Source, spec: ShardSpec) -> ShardRows:
    with open(source.path, "rb") as f:
        f.seek(spec.start)
        data = f.read(spec.stop - spec.start)
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()  # the split's empty tail, not a line
    out = ShardRows([], [], [], [])
    for row, line in enumerate(lines, spec.first_row):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except UnicodeDecodeError:
            out.errors.append(RowError(row, None, "not UTF-8"))
            continue
        except json.JSONDecodeError as exc:
            out.errors.append(RowError(row, None, f"not JSON ({exc.msg})"))
            continue
        if not isinstance(obj, dict):
            out.errors.append(RowError(row, None, "not a JSON object"))
            continue
        _accept(out, row, obj.get(source.id_column, _ABSENT), obj.get(source.column, _ABSENT), source.column)
    return out


def _accept(out: ShardRows, row: int, raw_id, value, column: str) -> None:
    """Check one row's id and value; append it to the usable rows or to the errors."""
    if raw_id is _ABSENT or raw_id is None or raw_id == "":
        rid = str(row)
    elif isinstance(raw_id, str) or (isinstance(raw_id, int) and not isinstance(raw_id, bool)):
        rid = str(raw_id)
    else:
        out.errors.append(RowError(row, None, f"id is a {type(raw_id).__name__}, expected a string or an integer"))
        return
    if value is _ABSENT:
        out.errors.append(RowError(row, rid, f"no field {column!r}"))
    elif not isinstance(value, str):
        out.errors.append(
            RowError(
                row, rid, f"field {column!r} is {'null' if value is None else type(value).__name__}, expected a string"
            )
        )
    elif any("\udc80" <= ch <= "\udcff" for ch in value):  # surrogateescape'd bytes (CSV)
        out.errors.append(RowError(row, rid, "not UTF-8"))
    elif (kind := blank_text(value)) is not None:  # the server's 400 empty_string, as a rejected row
        out.errors.append(
            RowError(row, rid, f"field {column!r} is {kind}; every input must contain text", EMPTY_TEXT_CODE)
        )
    else:
        out.ids.append(rid)
        out.rows.append(row)
        out.values.append(value)


# --- CSV: a header, then one row per record (quoted fields may span lines) -------------------------


def _decoded_lines(f, consumed: list[int]):
    for raw in f:
        consumed[0] += len(raw)
        yield raw.decode("utf-8", "surrogateescape")  # bad bytes survive to be reported per row


def _csv_header(source: Source, f, consumed: list[int]):
    reader = csv.reader(_decoded_lines(f, consumed))
    header = next(reader, None)
    if header is None:
        raise InputError(f"{Path(source.path).name} is empty (expected a CSV header)")
    if source.column not in header:
        raise InputError(f"{Path(source.path).name} has no column {source.column!r} (columns: {', '.join(header)})")
    return reader, header


def _plan_csv(source: Source, shard_rows: int):
    consumed = [0]
    with open(source.path, "rb") as f:
        reader, _ = _csv_header(source, f, consumed)
        # csv pulls lines only as a record needs them: after each record, consumed is its end.
        ends = ((consumed[0], rows) for rows, _rec in enumerate(reader, 1))
        try:
            yield from _cut(ends, shard_rows, start=consumed[0])
        except csv.Error as exc:
            raise InputError(f"{Path(source.path).name}: unreadable CSV ({exc})") from None


def _read_csv(source: Source, spec: ShardSpec) -> ShardRows:
    with open(source.path, "rb") as f:
        _, header = _csv_header(source, f, [0])
        f.seek(spec.start)
        data = f.read(spec.stop - spec.start)
    col = header.index(source.column)
    id_col = header.index(source.id_column) if source.id_column in header else None
    out = ShardRows([], [], [], [])
    text = data.decode("utf-8", "surrogateescape")
    for row, rec in enumerate(csv.reader(io.StringIO(text, newline="")), spec.first_row):
        if len(rec) != len(header):
            out.errors.append(RowError(row, None, f"{len(rec)} fields, the header has {len(header)}"))
            continue
        _accept(out, row, rec[id_col] if id_col is not None else _ABSENT, rec[col], source.column)
    return out


# --- Parquet: rows by number; only the input and id columns are read --------------------------------


def _parquet_columns(source: Source):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(source.path)
    schema = pf.schema_arrow
    if source.column not in schema.names:
        raise InputError(
            f"{Path(source.path).name} has no column {source.column!r} (columns: {', '.join(schema.names)})"
        )
    kind = schema.field(source.column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
        raise InputError(f"column {source.column!r} of {Path(source.path).name} is {kind}, expected strings")
    cols = [source.column] + ([source.id_column] if source.id_column in schema.names else [])
    return pf, cols


def _plan_parquet(source: Source, shard_rows: int):
    pf, _ = _parquet_columns(source)
    total = pf.metadata.num_rows
    for index, first in enumerate(range(0, total, shard_rows)):
        n = min(shard_rows, total - first)
        yield ShardSpec(index, first, n, first, first + n)


def _read_parquet(source: Source, spec: ShardSpec) -> ShardRows:
    import pyarrow as pa
    import pyarrow.compute as pc

    pf, cols = _parquet_columns(source)
    groups: list[int] = []
    offset = skip = 0
    for g in range(pf.metadata.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        if offset + n > spec.start and offset < spec.stop:
            if not groups:
                skip = spec.start - offset
            groups.append(g)
        offset += n
    table = pf.read_row_groups(groups, columns=cols).slice(skip, spec.rows)
    values = table.column(source.column).to_pylist()
    if source.id_column in cols:
        ids = pc.cast(table.column(source.id_column), pa.string()).to_pylist()
    else:
        ids = [_ABSENT] * len(values)
    out = ShardRows([], [], [], [])
    for row, (rid, value) in enumerate(zip(ids, values, strict=True), spec.first_row):
        _accept(out, row, rid, value, source.column)
    return out
