"""Structured logs: one JSON object per line on stderr, one line per request.

Why JSON lines: a log line must be machine-joinable with the request's metrics and trace (via
the request id) without regexes. Request lines carry ids, counts, lengths, bucket, batch sizes,
stage times and status — never request text; ``format_access`` takes only those fields, so
text cannot slip in by accident. Uvicorn's own loggers go through the same formatter.
"""

from __future__ import annotations

import logging
import sys
import time

import orjson

ACCESS_LOGGER = "openhood.access"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = getattr(record, "fields", None)
        if fields is not None:
            entry.update(fields)
        else:
            entry["message"] = record.getMessage()
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def configure_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    for name in ("openhood", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
    # The access line is ours (with stage times); uvicorn's would duplicate it without them.
    logging.getLogger("uvicorn.access").disabled = True
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO)


def log_access(fields: dict) -> None:
    logging.getLogger(ACCESS_LOGGER).info("request", extra={"fields": {"event": "request", **fields}})
