"""OpenTelemetry tracing: spans per request stage, exported over OTLP/HTTP only when configured.

Spans are created *after* a request finishes, from the monotonic timestamps each stage
recorded (the queue and inference stages happen on the worker thread, per batch, shared by
several requests — recording times there and building spans here keeps the worker free of
tracing and keeps each span in its request's trace). Attributes are lengths, counts, bucket and
batch size only — never text. With no ``OTEL_EXPORTER_OTLP_ENDPOINT`` (and no exporter given by a
test) the tracer is the no-op one, so tracing costs nothing when nobody collects it.
"""

from __future__ import annotations

import os
import time
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor, SpanExporter

# monotonic_ns → epoch ns, fixed at import: span times must be wall-clock, stage times are monotonic.
_EPOCH_OFFSET_NS = time.time_ns() - time.monotonic_ns()


def to_epoch_ns(monotonic_ns: int) -> int:
    return monotonic_ns + _EPOCH_OFFSET_NS


def child_span(
    tracer: trace.Tracer, parent: trace.Span, name: str, start_ns: int, end_ns: int, **attributes: Any
) -> None:
    """A finished span under ``parent`` covering the monotonic interval [start_ns, end_ns]."""
    ctx = trace.set_span_in_context(parent)
    span = tracer.start_span(name, context=ctx, start_time=to_epoch_ns(start_ns), attributes=attributes)
    span.end(end_time=to_epoch_ns(end_ns))


def make_tracer(
    exporter: SpanExporter | None = None, service_name: str = "openhood"
) -> tuple[trace.Tracer, TracerProvider | None]:
    """A tracer for the server, and its provider (to flush on shutdown) when tracing is on."""
    if exporter is None and not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return trace.NoOpTracer(), None
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        # Imported only when used: the OTLP exporter pulls in protobuf and requests.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    return provider.get_tracer("openhood.server"), provider
