"""The ASGI app: served models in, a FastAPI app out — the core that wires the server's parts.

Each part has its own module: ``state`` (per-model runtimes: queue, buckets, workers,
readiness, metrics; routing by ``model``), ``middleware`` (request id, drain and auth gates,
the log line), ``auth``, ``body`` (capped body reading), ``errors`` (OpenAI's error shape),
``routes/`` (one module per API family, registered per task), ``lifecycle`` (drain on
SIGTERM), ``health``, ``metrics``, ``tracing``. The trade-off: this module knows no task and
no architecture; a new task registers its routes in ``routes/__init__.py`` instead of here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from opentelemetry import trace
from starlette.responses import HTMLResponse

import openhood
from openhood.models import ServedModel
from openhood.server import docs_page
from openhood.server.config import ServerConfig
from openhood.server.errors import install_error_handlers
from openhood.server.lifecycle import Lifecycle
from openhood.server.middleware import ObservabilityMiddleware
from openhood.server.routes import register_routes
from openhood.server.state import ServerState


def create_app(
    config: ServerConfig,
    models: list[ServedModel],
    *,
    tracer: trace.Tracer | None = None,
    lifecycle: Lifecycle | None = None,
) -> FastAPI:
    state = ServerState(config, models, tracer, lifecycle)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.start()
        await state.warm_up()  # every bucket length on every worker, before the port opens; checks the grace period
        yield
        # Normally DrainingServer already stopped the workers; this covers in-process use.
        await asyncio.to_thread(state.stop, config.grace_period_s)

    # FastAPI's /docs loads Swagger UI from a CDN; docs_page renders a self-contained one instead.
    app = FastAPI(title="openhood", version=openhood.__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.openhood = state
    app.add_middleware(ObservabilityMiddleware, state=state)
    install_error_handlers(app, on_client_gone=state.metrics.client_disconnects.inc)
    register_routes(app, state)
    page: list[str] = []  # rendered on first use: the OpenAPI document is complete once routes are in

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        if not page:
            page.append(docs_page.render(app.openapi()))
        return HTMLResponse(page[0], headers={"Content-Security-Policy": docs_page.CSP})

    return app
