"""The HTTP server: OpenAI-compatible embeddings over the dynamic-batching scheduler.

``app.create_app`` builds the ASGI app from a ``ServerConfig`` and an engine (tokenizer +
backend); ``cli`` wires it to uvicorn with a graceful drain (``lifecycle``). Health, metrics,
tracing and logs each live in their own module. See docs/server.md.
"""
