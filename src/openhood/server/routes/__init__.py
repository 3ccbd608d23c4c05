"""Routes, one module per API family, registered per task.

``register_routes`` always adds the operational routes (``ops``: health, metrics, stats), the
browser console (``console``) and ``/v1/models`` (``openai_models``), ``/debug/memory`` (``debug``) when the config asks for it,
then, for each task the served models have, that task's route modules from ``TASK_ROUTES``
(``embed``: OpenAI's ``/v1/embeddings`` and the TEI routes). A new task adds its modules here
(``"classify": (classify.register,)`` for ``/v1/classify``) and touches nothing else in the
server.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI

from openhood.models.tasks import Task
from openhood.server.routes import classify, completions, console, debug, embeddings, images, openai_models, ops, tei
from openhood.server.state import ServerState

TASK_ROUTES: dict[str, tuple[Callable[[FastAPI, ServerState], None], ...]] = {
    Task.EMBED: (embeddings.register, tei.register),
    Task.IMAGE_CLASSIFY: (images.register,),
    Task.GENERATE: (completions.register,),
    Task.CLASSIFY: (classify.register,),
}


def register_routes(app: FastAPI, state: ServerState) -> None:
    ops.register(app, state)
    console.register(app, state)
    openai_models.register(app, state)
    if state.config.debug_endpoints:
        debug.register(app, state)
    for task in state.tasks:
        registers = TASK_ROUTES.get(task)
        if registers is None:
            raise ValueError(f"no HTTP routes for task {task!r}; tasks with routes: {sorted(TASK_ROUTES)}")
        for register in registers:
            register(app, state)
    paths = {getattr(route, "path", "") for route in app.routes}
    state.route_labels = paths - {"", "/openapi.json"}
