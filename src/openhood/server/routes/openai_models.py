"""``GET /v1/models``: every served model in OpenAI's list shape, plus its task and facts."""

from __future__ import annotations

from fastapi import FastAPI
from starlette.responses import Response

from openhood.server.errors import json_response
from openhood.server.state import ServerState


def register(app: FastAPI, state: ServerState) -> None:
    @app.get("/v1/models")
    async def list_models() -> Response:
        return json_response({"object": "list", "data": [rt.model.describe() for rt in state.runtimes.values()]})
