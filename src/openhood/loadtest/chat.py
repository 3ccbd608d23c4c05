"""Chat mode: closed-loop streaming load on an OpenAI ``/v1/chat/completions`` endpoint.

For each concurrency level, N clients each send a streaming request (``stream: true``, prompt
and ``max_tokens`` drawn from the workload), read the server-sent events as they arrive, and
send the next request when the stream ends. Per request we keep the send time, the arrival time
of every chunk that carries generated text, the finish reason, usage and any error; the
statistics (``chat_stats``) turn those into time to first token, inter-token gaps and aggregate
output tokens/s.

Closed loop, not open loop: a generation request holds its stream for seconds, so "N users
chatting" is the natural load, and concurrency is the knob that continuous batching answers to.
The levels run one after another on one connection pool (size = the largest level), each with
its own warm-up; requests still streaming at a level's end are awaited for up to ``drain``
seconds so their gaps are complete (any still running then are closed by the client and counted
as ``unfinished``, not as server errors), and the next level starts only then.
The trade-off: a chunk's time is when the client *read* it, so a client starved of CPU delays
tokens and counts that delay against the server (on a shared box that is pessimistic, never
flattering). A ``/v1/completions`` URL is driven the same way with ``prompt`` instead of
``messages``.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import numpy as np

from openhood.loadtest.chat_workload import ChatItem, ChatWorkload
from openhood.loadtest.client import ClientPlan, make_client
from openhood.loadtest.runner import drain_tasks, error_kind, new_event_loop, wait_ready
from openhood.loadtest.sse import SseParser

CHAT_PATH = "/v1/chat/completions"
MAX_LEVEL = 1024
UNFINISHED = "unfinished"
MAX_RECONNECTS = 1  # a request the server closed its connection on, unanswered, is sent once more


def chat_url(url: str) -> str:
    """A base URL gets ``/v1/chat/completions``; a URL with a path keeps it.

    >>> chat_url("http://127.0.0.1:8000")
    'http://127.0.0.1:8000/v1/chat/completions'
    """
    parts = urlsplit(url)
    if parts.path in ("", "/"):
        return urlunsplit((parts.scheme, parts.netloc, CHAT_PATH, parts.query, ""))
    return url


@dataclass(frozen=True)
class ChatConfig:
    url: str  # the endpoint POSTed to
    levels: tuple[int, ...]  # closed-loop concurrency levels, run in this order
    duration: float = 15.0  # measured seconds per level
    warmup: float = 2.0  # seconds per level sent but not measured
    seed: int = 0
    max_requests: int = 10_000  # per level
    model: str | None = None  # the request's "model" field; omitted when None
    temperature: float = 0.0
    drain: float = 120.0  # seconds after the window for running streams to end

    def __post_init__(self):
        if not self.levels or any(not (1 <= c <= MAX_LEVEL) for c in self.levels):
            raise ValueError(f"concurrency levels must be in [1, {MAX_LEVEL}], got {list(self.levels)}")
        if not (0 < self.duration <= 3600):
            raise ValueError(f"--duration must be in (0, 3600] s, got {self.duration}")
        if not (0 <= self.warmup <= 3600):
            raise ValueError(f"--warmup must be in [0, 3600] s, got {self.warmup}")
        if not (1 <= self.max_requests <= 1_000_000):
            raise ValueError(f"--max-requests must be in [1, 1000000], got {self.max_requests}")
        if not (0 <= self.drain <= 3600):
            raise ValueError(f"--drain must be in [0, 3600] s, got {self.drain}")
        if not (0 <= self.temperature <= 2):
            raise ValueError(f"--temperature must be in [0, 2], got {self.temperature}")

    @property
    def completions(self) -> bool:
        """True for the legacy ``/v1/completions`` endpoint (a ``prompt``, ``choices[].text``)."""
        return urlsplit(self.url).path.rstrip("/").endswith("/v1/completions")


@dataclass
class ChatSample:
    """One streamed request; times in seconds from its level's start."""

    start: float
    done: float
    status: int | str  # 200, an HTTP status, an error kind ("timeout", "incomplete_stream", ...)
    # or "unfinished" (still streaming at the level's drain deadline)
    finish_reason: str | None
    prompt_words: int  # drawn prompt length (client-side estimate)
    max_tokens: int
    prompt_tokens: int  # usage.prompt_tokens, -1 when the server sent none
    output_tokens: int  # usage.completion_tokens, else the number of text chunks
    token_times: np.ndarray = field(default_factory=lambda: np.zeros(0))  # (K,) arrival of each text chunk
    accepted: bool = False  # the server answered 200 and began the stream
    reconnects: int = 0  # sent again on a new connection: the server had closed the pooled one unanswered

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def timed(self) -> bool:
        """Its tokens are real measurements: it succeeded, or our drain deadline cut it."""
        return self.status in (200, UNFINISHED)

    @property
    def ttft(self) -> float:
        return float(self.token_times[0] - self.start) if self.token_times.size else math.nan


@dataclass
class LevelResult:
    concurrency: int
    samples: list[ChatSample]  # every request of the level, warm-up ones included
    warmup: float
    duration: float
    cancelled: int = 0  # still streaming at the drain deadline (counted as errors)
    wall_s: float = 0.0

    @property
    def measured(self) -> list[ChatSample]:
        return [s for s in self.samples if s.start >= self.warmup]


@dataclass
class ChatRunResult:
    config: ChatConfig
    plan: ClientPlan
    workload: dict  # the length distributions, described
    levels: list[LevelResult]


def request_body(item: ChatItem, cfg: ChatConfig, seed: int, stream: bool = True) -> bytes:
    """One request of the workload: streamed (with usage in the last chunk) unless ``stream`` is
    False (``openhood soak`` sends both kinds)."""
    import orjson

    body: dict[str, object] = {
        "max_tokens": item.max_tokens,
        "stream": stream,
        "temperature": cfg.temperature,
        "seed": seed,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    if cfg.completions:
        body["prompt"] = item.prompt
    else:
        body["messages"] = [{"role": "user", "content": item.prompt}]
    if cfg.model is not None:
        body["model"] = cfg.model
    return orjson.dumps(body)


def hard_timeout(plan: ClientPlan) -> float:
    """A total per request on top of httpx's per-read timeout: a stream that keeps trickling
    resets the read timeout on every chunk and could otherwise hold a client forever."""
    return plan.pool_timeout + plan.connect_timeout + 10 * plan.read_timeout


async def _send(client, url: str, body: bytes):
    """POST ``body`` and wait for the response's headers: (the streaming response, reconnects).

    A pooled keep-alive connection that the server had closed without answering (httpx:
    "Server disconnected without sending a response"; llama.cpp's llama-server closes it after
    each stream, with no "Connection: close") means the request never reached it, so it goes
    once more on a new connection, as the openai SDK retries connection errors. A second close,
    or any failure once the response has begun, is the caller's error to count."""
    import httpx

    headers = {"content-type": "application/json", "accept": "text/event-stream"}
    reconnects = 0
    while True:
        try:
            request = client.build_request("POST", url, content=body, headers=headers)
            return await client.send(request, stream=True), reconnects
        except httpx.RemoteProtocolError:
            if reconnects == MAX_RECONNECTS:
                raise
            reconnects += 1


async def stream_one(
    client,
    url: str,
    body: bytes,
    item: ChatItem,
    t0: float,
    hard: float,
    deadline: float | None = None,
    first_token: asyncio.Event | None = None,
) -> ChatSample:
    """Send one streaming request and time every text chunk; every failure becomes a status.

    ``deadline`` (seconds from ``t0``): the client closes the stream then and marks it unfinished.
    ``first_token`` is set when the first text chunk arrives (for callers that act mid-stream).
    """
    import orjson

    clock = time.perf_counter
    start = clock() - t0
    cut = deadline is not None and deadline - start < hard
    if deadline is not None:
        hard = max(0.0, min(hard, deadline - start))
    times: list[float] = []
    finish: str | None = None
    prompt_tokens = completion_tokens = -1
    status: int | str = 0
    accepted = False
    reconnects = 0
    try:
        async with asyncio.timeout(hard):
            resp, reconnects = await _send(client, url, body)
            try:
                status = resp.status_code
                if status == 200:
                    accepted = True
                    parser = SseParser()
                    async for chunk in resp.aiter_bytes():
                        now = clock() - t0
                        for data in parser.feed(chunk):
                            if data == "[DONE]":
                                continue
                            event = orjson.loads(data)
                            if "error" in event:  # an error reported inside the stream (after the 200)
                                status = "stream_error"
                                continue
                            for choice in event.get("choices") or ():
                                text = (choice.get("delta") or {}).get("content") or choice.get("text")
                                if text:
                                    times.append(now)
                                    if first_token is not None:
                                        first_token.set()
                                finish = choice.get("finish_reason") or finish
                            usage = event.get("usage")
                            if usage:
                                prompt_tokens = int(usage.get("prompt_tokens", -1))
                                completion_tokens = int(usage.get("completion_tokens", -1))
                else:
                    await resp.aread()
            finally:
                await resp.aclose()
    except asyncio.CancelledError:
        raise
    except TimeoutError:
        status = UNFINISHED if cut else "timeout"
    except Exception as exc:  # every failure becomes a counted error kind, never a crash
        status = error_kind(exc)
    if status == 200 and finish is None:
        status = "incomplete_stream"  # the server closed the stream without a finish_reason
    return ChatSample(
        start=start,
        done=clock() - t0,
        status=status,
        finish_reason=finish,
        prompt_words=item.prompt_words,
        max_tokens=item.max_tokens,
        prompt_tokens=prompt_tokens,
        output_tokens=completion_tokens if completion_tokens >= 0 else len(times),
        token_times=np.asarray(times, dtype=np.float64),
        accepted=accepted,
        reconnects=reconnects,
    )


async def run_level(client, cfg: ChatConfig, plan: ClientPlan, concurrency: int, workload: ChatWorkload) -> LevelResult:
    """N closed-loop clients for warm-up + duration seconds, then drain (bounded)."""
    t0 = time.perf_counter()
    end = cfg.warmup + cfg.duration
    hard = hard_timeout(plan)
    deadline = end + cfg.drain
    samples: list[ChatSample] = []
    sent = 0

    async def one_client() -> None:
        nonlocal sent
        while sent < cfg.max_requests and time.perf_counter() - t0 < end:
            sent += 1
            body = request_body(item := workload.draw(), cfg, seed=cfg.seed + sent)
            samples.append(await stream_one(client, cfg.url, body, item, t0, hard, deadline))

    tasks = {asyncio.create_task(one_client()) for _ in range(concurrency)}
    cancelled = await drain_tasks(tasks, deadline + 5.0)  # stream_one ends itself at the deadline
    return LevelResult(
        concurrency=concurrency,
        samples=samples,
        warmup=cfg.warmup,
        duration=cfg.duration,
        cancelled=cancelled,
        wall_s=time.perf_counter() - t0,
    )


async def run_chat_async(
    cfg: ChatConfig,
    plan: ClientPlan,
    make_workload: Callable[[], ChatWorkload],
    log: Callable[[str], None] = lambda s: None,
) -> ChatRunResult:
    client = make_client(plan)
    levels = []
    try:
        for c in cfg.levels:
            # The same seed at every level: the levels differ in concurrency, not in what is asked.
            levels.append(level := await run_level(client, cfg, plan, c, make_workload()))
            log(
                f"[chat x{c}] {len(level.samples)} requests ({sum(s.ok for s in level.samples)} ok) "
                f"in {level.wall_s:.1f}s"
            )
    finally:
        await client.aclose()
    w = make_workload()
    return ChatRunResult(
        config=cfg,
        plan=plan,
        levels=levels,
        workload={"prompt_tokens": w.prompt_dist.describe(), "output_tokens": w.output_dist.describe()},
    )


def run_chat(
    cfg: ChatConfig,
    plan: ClientPlan,
    make_workload: Callable[[], ChatWorkload],
    wait_ready_s: float = 0.0,
    ready_url: str | None = None,
    log: Callable[[str], None] = lambda s: None,
) -> ChatRunResult:
    """Run every level to completion (blocking); see ``run_chat_async``."""
    loop = new_event_loop()
    try:
        if wait_ready_s > 0 and ready_url:
            loop.run_until_complete(wait_ready(ready_url, wait_ready_s))
        return loop.run_until_complete(run_chat_async(cfg, plan, make_workload, log))
    finally:
        loop.close()
