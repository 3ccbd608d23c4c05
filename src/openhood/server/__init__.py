"""openhood.server: the HTTP server for every served task, over the schedulers.

Four task families, each with its routes in ``routes/`` (registered per task): embeddings
(``POST /v1/embeddings``, OpenAI-compatible, and the TEI routes), classify (``POST
/v1/classify``: feature vectors in, labels out), image classify (``POST /v1/images/classify``
and ``/v1/images/embeddings``) and generation (``POST /v1/chat/completions`` and
``/v1/completions``, streamed or not). ``app.create_app`` builds the ASGI app from a
``ServerConfig`` and the served models; ``state`` holds each model's runtime (the dynamic
batcher for single-pass tasks, the step scheduler for generation); ``openhood serve``
(``cli/serve.py``) wires it to uvicorn with a graceful drain (``lifecycle``). Health, metrics,
tracing and logs each live in their own module. See docs/server.md.
"""
