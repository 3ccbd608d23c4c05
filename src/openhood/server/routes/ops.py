"""Operational routes: ``/health/live``, ``/health/ready`` (every model's readiness), ``/metrics``
(Prometheus) and ``/stats`` (latency percentiles per input length, per model).

Readiness is 200 only when every served model passes its own probe: a load balancer should not
send traffic to a node where one of the routed models is broken. The body says which one is not.
"""

from __future__ import annotations

from fastapi import FastAPI
from starlette.responses import PlainTextResponse, Response

from openhood.scheduler import DynamicBatcher
from openhood.server.errors import json_response
from openhood.server.state import ServerState


def register(app: FastAPI, state: ServerState) -> None:
    @app.get("/health/live")
    async def live() -> Response:
        return json_response({"status": "alive"})

    @app.get("/health/ready")
    async def ready() -> Response:
        runtimes = list(state.runtimes.values())
        first = runtimes[0]
        body = {
            "queue_depth": sum(rt.scheduler.queue_depth for rt in runtimes),
            "in_flight": state.lifecycle.in_flight,
            "rss_bytes": state.metrics.rss_bytes(),
            "worker_busy_s": round(max(rt.scheduler.busy_for_s() for rt in runtimes), 3),
            "workers": first.scheduler.workers,
            "backend": first.model.info.get("backend"),
            "model": first.model.name,
        }
        if state.lifecycle.draining:
            for rt in runtimes:
                rt.metrics.ready.set(0)
            return json_response(
                {"status": "not_ready", "reason": "draining: the server is shutting down", **body}, 503
            )
        models, reason, details = {}, None, {}
        for rt in runtimes:
            ok, info = await rt.readiness.check()
            rt.metrics.ready.set(1 if ok else 0)
            models[rt.model.name] = {"ready": ok, **info}
            if not ok and reason is None:
                reason = (
                    info.get("reason", "not ready")
                    if len(runtimes) == 1
                    else f"model {rt.model.name}: {info.get('reason')}"
                )
            if rt is first:
                details = info
        if reason is not None:
            return json_response({"status": "not_ready", "reason": reason, **body, "models": models}, 503)
        return json_response({"status": "ready", **details, **body, "models": models})

    @app.get("/metrics", response_class=PlainTextResponse)  # documented as text/plain in /openapi.json
    async def metrics() -> Response:
        return PlainTextResponse(state.metrics.exposition(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/stats")
    async def stats() -> Response:
        per_model = {
            name: {
                **rt.metrics.window.table(),
                "queue_depth": rt.scheduler.queue_depth,
                "preemption": {
                    "enabled": isinstance(rt.scheduler, DynamicBatcher) and rt.scheduler.preemptive,
                    "suspended": rt.scheduler.suspended if isinstance(rt.scheduler, DynamicBatcher) else 0,
                    **rt.metrics.preemption(),
                },
                "buckets": list(rt.buckets.bounds) if rt.buckets else None,
            }
            for name, rt in state.runtimes.items()
        }
        first = next(iter(per_model.values()))  # the default model's table at the top level, as before
        return json_response({**first, "in_flight": state.lifecycle.in_flight, "models": per_model})
