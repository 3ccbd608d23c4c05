"""What a batch job computes per row: a task turns a shard's input values into output columns.

Only text embedding exists today (``EmbedTask``: texts → an ``embedding`` column). The job
runner knows nothing else about models: it hands a task the usable values of a shard (in input
order) and writes the columns it returns next to ``id``. An image task would take file paths in
the same way and report the rows it could not decode in ``TaskOutput.failed``, so one broken
image never fails its shard. The trade-off: a task sees one shard at a time, so the sort window
for padding is the shard.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WARM_UP_LENGTH = 16  # tokens of the one warm-up call per worker: it loads every kernel the forward pass uses


@dataclass
class TaskOutput:
    columns: dict  # name → pyarrow Array, one entry per value not in ``failed``
    failed: dict[int, str] = field(default_factory=dict)  # position in the shard's values → reason


class EmbedTask:
    """Sentence embeddings through ``openhood.Embedder``: sorted by length, padded per batch.

    ``Embedder.embed`` does the sorting and the dynamic padding (pad to the longest text of each
    batch of ``batch_size``) over whatever it is given, here one shard, on ``workers`` engines
    side by side.
    """

    def __init__(
        self,
        model: str | None = None,
        backend: str = "numpy",
        precision: str = "fp32",
        threads: int | None = None,
        batch_size: int = 32,
        workers: int = 1,
    ):
        from openhood import Embedder

        options = {"threads": threads} if threads is not None else {}
        self.embedder = Embedder.from_pretrained(
            model, backend=backend, precision=precision, workers=workers, **options
        )
        self.batch_size = batch_size
        for worker in range(workers):  # first-call costs (kernel loading, BLAS) belong to start-up
            self.embedder.model.warm_up(worker, (WARM_UP_LENGTH,))

    @property
    def name(self) -> str:
        return self.embedder.model_name

    def schema(self):
        import pyarrow as pa

        return pa.schema([("id", pa.string()), ("embedding", pa.list_(pa.float32(), self.embedder.dim))])

    def run(self, values: list[str]) -> TaskOutput:
        import pyarrow as pa

        emb = self.embedder.embed(values, batch_size=self.batch_size)  # (n, dim) float32
        flat = pa.array(emb.reshape(-1), type=pa.float32())
        return TaskOutput({"embedding": pa.FixedSizeListArray.from_arrays(flat, self.embedder.dim)})
