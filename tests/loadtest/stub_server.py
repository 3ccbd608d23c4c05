"""A tiny embeddings server with controllable latency, for testing the load generator alone.

Raw ASGI under uvicorn on 127.0.0.1 in a child process: POST /v1/embeddings answers in the
OpenAI shape (4-dim zero vectors, usage.prompt_tokens = words + 2 per text) after a configurable
delay; ``serial`` makes requests wait for one another (a one-worker server, capacity
1 / service_s); ``stall_at`` makes the N-th request hold the worker for ``stall_s``;
``fail_every`` answers every N-th request with ``fail_status``.

POST /v1/chat/completions (and /v1/completions) streams OpenAI chunks when ``stream`` is true:
a role chunk, then ``max_tokens`` one-token chunks (the first after ``ttft_s``, the rest every
``itl_s``), a finish chunk (``length``), a usage chunk when ``stream_options.include_usage``,
and ``[DONE]``; ``serial`` makes whole generations wait for one another; ``cut_every`` ends every
N-th stream half-way without a finish_reason (a server dying mid-stream).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field


@dataclass
class StubState:
    service_s: float = 0.002
    per_token_s: float = 0.0
    serial: bool = False
    stall_at: int = 0
    stall_s: float = 0.0
    fail_every: int = 0
    fail_status: int = 500
    usage: bool = True
    ttft_s: float = 0.01
    itl_s: float = 0.005
    cut_every: int = 0
    count: int = 0
    lock: asyncio.Lock | None = field(default=None, repr=False)


def make_app(state: StubState):
    async def respond(send, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})

    async def read_body(receive) -> dict:
        chunks = []
        while True:
            msg = await receive()
            chunks.append(msg.get("body", b""))
            if not msg.get("more_body"):
                return json.loads(b"".join(chunks))

    async def generate(send, body: dict, idx: int, completions: bool) -> None:
        await asyncio.sleep(state.ttft_s)
        n = int(body.get("max_tokens", 16))
        prompt = body["prompt"] if completions else " ".join(m["content"] for m in body["messages"])

        def event(payload: dict) -> dict:
            data = b"data: " + json.dumps({"object": "chunk", **payload}).encode() + b"\n\n"
            return {"type": "http.response.body", "body": data, "more_body": True}

        if not completions:
            await send(event({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}))
        for i in range(n):
            if i:
                await asyncio.sleep(state.itl_s)
            if state.cut_every and idx % state.cut_every == 0 and i == n // 2:
                await send({"type": "http.response.body", "body": b""})  # stream closed, no finish_reason
                return
            text = {"text": " tok"} if completions else {"delta": {"content": " tok"}}
            await send(event({"choices": [{"index": 0, **text, "finish_reason": None}]}))
        end = {"text": ""} if completions else {"delta": {}}
        await send(event({"choices": [{"index": 0, **end, "finish_reason": "length"}]}))
        if (body.get("stream_options") or {}).get("include_usage"):
            p = len(prompt.split()) + 5
            await send(
                event({"choices": [], "usage": {"prompt_tokens": p, "completion_tokens": n, "total_tokens": p + n}})
            )
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})

    async def chat(scope, receive, send):
        body = await read_body(receive)
        state.count += 1
        idx = state.count
        if state.fail_every and idx % state.fail_every == 0:
            return await respond(send, state.fail_status, {"error": {"message": "injected failure"}})
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
            }
        )
        completions = scope["path"] == "/v1/completions"
        if state.serial:
            if state.lock is None:
                state.lock = asyncio.Lock()
            async with state.lock:
                await generate(send, body, idx, completions)
        else:
            await generate(send, body, idx, completions)

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                msg = await receive()
                if msg["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif msg["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["path"] == "/health/ready":
            return await respond(send, 200, {"status": "ready"})
        if scope["path"] in ("/v1/chat/completions", "/v1/completions") and scope["method"] == "POST":
            return await chat(scope, receive, send)
        if scope["path"] != "/v1/embeddings" or scope["method"] != "POST":
            return await respond(send, 404, {"error": {"message": "not found"}})
        texts = (await read_body(receive))["input"]
        texts = [texts] if isinstance(texts, str) else texts
        tokens = sum(len(t.split()) + 2 for t in texts)
        state.count += 1
        idx = state.count
        if state.fail_every and idx % state.fail_every == 0:
            return await respond(send, state.fail_status, {"error": {"message": "injected failure"}})
        delay = state.service_s + state.per_token_s * tokens + (state.stall_s if idx == state.stall_at else 0.0)
        if state.serial:
            if state.lock is None:
                state.lock = asyncio.Lock()
            async with state.lock:
                await asyncio.sleep(delay)
        else:
            await asyncio.sleep(delay)
        payload = {
            "object": "list",
            "model": "stub",
            "data": [{"object": "embedding", "index": i, "embedding": [0.0] * 4} for i in range(len(texts))],
        }
        if state.usage:
            payload["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
        await respond(send, 200, payload)

    return app


class StubServer:
    """``with StubServer(state) as s: s.url`` → the stub running in a child process.

    A separate process, not a thread: in one process the server and the load generator would
    share the GIL, and the test would measure their contention instead of the client.
    """

    def __init__(self, state: StubState | None = None):
        self.state = state or StubState()
        self.proc = None
        self.url = ""

    def __enter__(self) -> StubServer:
        cfg = {k: v for k, v in asdict(self.state).items() if k not in ("count", "lock")}
        self.proc = subprocess.Popen([sys.executable, __file__, json.dumps(cfg)], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()  # the port, once the socket is bound and serving
        if not line.strip().isdigit():
            self.proc.kill()
            raise RuntimeError("stub server did not start")
        self.url = f"http://127.0.0.1:{int(line)}"
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=1)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _serve(cfg: dict) -> None:
    import uvicorn

    state = StubState(**cfg)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(
        make_app(state),
        log_level="warning",
        loop="asyncio",
        http="h11",
        lifespan="on",
        backlog=1024,
        timeout_keep_alive=30,
    )
    server = uvicorn.Server(config)

    def announce() -> None:
        while not server.started:
            time.sleep(0.01)
        print(sock.getsockname()[1], flush=True)

    threading.Thread(target=announce, daemon=True).start()
    server.run(sockets=[sock])


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
