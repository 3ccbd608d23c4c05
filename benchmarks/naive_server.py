"""The naive baseline: the same model served the way most hand-written services do it.

Plain FastAPI + uvicorn, one ``Embedder.embed`` (one forward pass) per request, no
cross-request batching, no length buckets, no queue bound. The handler is a plain ``def``, so
FastAPI runs it in its thread pool: concurrent requests run concurrent forward passes that fight
for the same cores (``--serial`` makes it an ``async def`` that blocks the event loop instead,
i.e. one request at a time). Responses are serialized with orjson, like openhood's, so the
comparison isolates batching and scheduling rather than JSON speed.

It answers in the OpenAI shape with ``usage.prompt_tokens`` (counted by the same tokenizer) so
the load generator buckets its requests exactly as it buckets openhood's.

    python benchmarks/naive_server.py --backend onnxruntime --port 8101

``--debug-memory`` adds what ``openhood soak --url`` reads (``/v1/models`` and openhood's own
``/debug/memory`` probe, which starts tracemalloc), so the soak measures this peer with the same
method as openhood (benchmarks/soak.py's ``naive`` run). Nothing else changes: no body limit,
no input checks beyond what FastAPI and the tokenizer do.
"""

import argparse

import orjson
from fastapi import Depends, FastAPI, Request, Response


def build_app(backend: str, precision: str, serial: bool, threads: int | None = None, debug_memory: bool = False):
    from openhood import Embedder

    options = {"threads": threads} if threads else {}
    emb = Embedder.from_pretrained(backend=backend, precision=precision, **options)
    emb.embed(["warm up"])  # load and compile before the first request, as any service would
    app = FastAPI()

    def handle(raw: bytes) -> Response:
        body = orjson.loads(raw)
        texts = body["input"]
        texts = [texts] if isinstance(texts, str) else texts
        vectors = emb.embed(texts)  # (n, dim): one forward pass for this request's texts only
        tokens = int(emb.tokenizer.encode_batch(texts, max_length=emb.max_length).lengths.sum())
        payload = {
            "object": "list",
            "model": emb.model_name,
            "data": [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return Response(orjson.dumps(payload), media_type="application/json")

    if serial:

        @app.post("/v1/embeddings")
        async def embeddings_serial(request: Request):
            return handle(await request.body())
    else:

        @app.post("/v1/embeddings")
        def embeddings(raw: bytes = Depends(read_body)):
            return handle(raw)

    @app.get("/health/ready")
    def ready():
        return {"status": "ready"}

    if debug_memory:
        add_soak_routes(app, emb)
    return app


def add_soak_routes(app: FastAPI, emb) -> None:
    from openhood.server.memory_probe import DEFAULT_TOP, MemoryProbe

    probe = MemoryProbe()
    probe.start()

    @app.get("/v1/models")
    def models():
        return {
            "object": "list",
            "data": [{"id": emb.model_name, "object": "model", "task": "embed", "max_length": emb.max_length}],
        }

    @app.get("/debug/memory")
    def memory(top: int = DEFAULT_TOP):  # a plain def: FastAPI runs it in its thread pool
        return Response(orjson.dumps(probe.sample(top)), media_type="application/json")


async def read_body(request: Request) -> bytes:
    """A sync handler cannot await the body; this async dependency reads it first."""
    return await request.body()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="numpy", choices=("numpy", "onnxruntime"))
    p.add_argument("--precision", default="fp32")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--serial", action="store_true", help="async handler: one request at a time")
    p.add_argument("--threads", type=int, help="engine intra-op threads (default: all cores)")
    p.add_argument("--debug-memory", action="store_true", help="/v1/models and /debug/memory for openhood soak")
    args = p.parse_args()
    import uvicorn

    uvicorn.run(
        build_app(args.backend, args.precision, args.serial, args.threads, args.debug_memory),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
