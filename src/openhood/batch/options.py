"""``openhood batch``'s choices and defaults: the engines, the input formats, the shard and batch
sizes.

Its own module, free of the job and source code, because the command's parser reads them:
kept in ``job`` and ``sources`` they made building the parser of every ``openhood`` command
import the whole batch package.
"""

from __future__ import annotations

ENGINES = ("local", "ray")
FORMATS = ("jsonl", "csv", "parquet")
DEFAULT_SHARD_ROWS = 4096  # the sort window too: large enough that padding waste is small
DEFAULT_BATCH_SIZE = 32
