"""Structured logs: one JSON object per line on stderr, one line per request.

Why JSON lines: a log line must be machine-joinable with the request's metrics and trace (via
the request id) without regexes. Request lines carry ids, counts, lengths, bucket, batch sizes,
stage times and status — never request text; ``format_access`` takes only those fields, so
text cannot slip in by accident. Uvicorn's own loggers go through the same formatter.
"""

from __future__ import annotations

import contextvars
import logging
import sys
import threading
import time
from typing import Any

import orjson

ACCESS_LOGGER = "openhood.access"
# Set by the middleware for the life of a request: every line logged inside it carries the id.
request_id_var: contextvars.ContextVar[str | None] = contextvars.ContextVar("openhood_request_id", default=None)
# Every logger that can write to the process's stderr: ours, uvicorn's, asyncio's (unretrieved
# task exceptions), py.warnings (warnings.warn via captureWarnings) and the root logger.
JSON_LOGGERS = ("openhood", "uvicorn", "uvicorn.error", "asyncio", "py.warnings", "")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        fields = getattr(record, "fields", None)
        request_id = request_id_var.get()
        if request_id is not None:
            entry["request_id"] = request_id
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
    for name in JSON_LOGGERS:
        logger = logging.getLogger(name)
        logger.handlers = [handler]
        if name.startswith(("openhood", "uvicorn")):
            logger.setLevel(level.upper())
        logger.propagate = False
    logging.captureWarnings(True)
    # An uncaught exception (main thread or worker threads) is one JSON line too, not a raw traceback.
    crash = logging.getLogger("openhood")
    sys.excepthook = lambda *exc: crash.critical("uncaught exception", exc_info=exc)
    threading.excepthook = lambda a: crash.critical(
        "uncaught exception in thread %s", a.thread.name if a.thread else "?", exc_info=a.exc_value
    )
    # The access line is ours (with stage times); uvicorn's would duplicate it without them.
    logging.getLogger("uvicorn.access").disabled = True
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.INFO)


def log_access(fields: dict[str, Any]) -> None:
    logging.getLogger(ACCESS_LOGGER).info("request", extra={"fields": {"event": "request", **fields}})
