"""Chat mode without a server: the SSE parser, the length distributions, and the TTFT /
inter-token / tokens-per-second maths against values worked out by hand."""

import random

import numpy as np
import pytest

from openhood.loadtest.chat import ChatSample, LevelResult, chat_url
from openhood.loadtest.chat_stats import inter_token_ms, level_summary, tokens_in_window, ttft_ms
from openhood.loadtest.chat_workload import ChatWorkload, LengthDist
from openhood.loadtest.sse import MAX_EVENT_BYTES, SseError, SseParser
from openhood.loadtest.stats import percentile_reference

STREAM = (
    b'data: {"a": 1}\r\n\r\n: keep-alive comment\n\nevent: ignored\ndata: line one\ndata: line two\n\n'
    b"data:no-space\r\rdata: caf\xc3\xa9\n\ndata: [DONE]\n\n"
)
EVENTS = ['{"a": 1}', "line one\nline two", "no-space", "café", "[DONE]"]


def test_sse_parser_yields_whole_events_however_the_bytes_are_cut():
    whole = SseParser().feed(STREAM)
    assert whole == EVENTS
    for cut in range(1, len(STREAM)):  # every split point, including inside "\r\n" and inside "é"
        p = SseParser()
        assert p.feed(STREAM[:cut]) + p.feed(STREAM[cut:]) == EVENTS, cut
    p = SseParser()
    assert [e for b in STREAM for e in p.feed(bytes([b]))] == EVENTS  # one byte per read


def test_sse_parser_bounds_an_event_that_never_ends():
    p = SseParser()
    with pytest.raises(SseError):
        for _ in range(MAX_EVENT_BYTES // 1000 + 2):
            p.feed(b"data: " + b"x" * 1000 + b"\n")


def test_length_distributions_parse_draw_and_refuse():
    rng = random.Random(0)
    assert LengthDist.parse("64").draw(rng) == 64
    u = LengthDist.parse("16-32")
    draws = [u.draw(rng) for _ in range(2000)]
    assert min(draws) == 16 and max(draws) == 32
    ln = LengthDist.parse("lognormal:64:0.8:300")
    draws = np.array([ln.draw(rng) for _ in range(4000)])
    assert 55 <= np.median(draws) <= 73 and draws.max() == 300 and draws.min() >= 1
    assert LengthDist.parse("lognormal:10:0.5").cap == 80
    for bad in ("", "0", "32-16", "lognormal:64", "normal:3:1", "1-99999999", "-5"):
        with pytest.raises(ValueError):
            LengthDist.parse(bad)


def test_workload_is_seeded_and_prompts_have_the_drawn_length():
    def draws(seed):
        w = ChatWorkload(
            LengthDist.parse("5-50"),
            LengthDist.parse("lognormal:32:0.5"),
            seed,
            texts=["alpha beta gamma", "delta epsilon"],
        )
        return [w.draw() for _ in range(50)]

    a, b = draws(3), draws(3)
    assert a == b and a != draws(4)
    for item in a:
        words = item.prompt.split()
        assert len(words) == 3 + item.prompt_words  # "Continue this text:" + the drawn words
        assert set(words[3:]) <= {"alpha", "beta", "gamma", "delta", "epsilon"}
        assert 1 <= item.max_tokens <= 256


def test_chat_url_defaults_to_the_chat_endpoint():
    assert chat_url("http://127.0.0.1:9/") == "http://127.0.0.1:9/v1/chat/completions"
    assert chat_url("http://127.0.0.1:9/v1/completions") == "http://127.0.0.1:9/v1/completions"


def _sample(start, times, status=200, out=None):
    return ChatSample(
        start=start,
        done=(times[-1] if times else start) + 0.01,
        status=status,
        finish_reason="length" if status == 200 else None,
        prompt_words=10,
        max_tokens=8,
        prompt_tokens=-1,
        output_tokens=len(times) if out is None else out,
        token_times=np.asarray(times, dtype=np.float64),
    )


def test_ttft_inter_token_and_throughput_match_hand_computed_values():
    # Window [1, 3): A and B are measured; C started in warm-up (not in TTFT/gaps, but its tokens
    # that arrive in the window are real load); D failed (an error, its gaps not used).
    a = _sample(1.0, [1.1, 1.2, 1.4])  # TTFT 100 ms, gaps 100, 200 ms
    b = _sample(2.0, [2.3, 2.35])  # TTFT 300 ms, gap 50 ms
    c = _sample(0.5, [0.6, 1.05, 1.5], out=6)  # usage says 6 tokens in 3 chunks: weight 2
    d = _sample(2.5, [2.6, 2.9], status="incomplete_stream")
    level = LevelResult(concurrency=2, samples=[a, b, c, d], warmup=1.0, duration=2.0)

    assert ttft_ms(level.measured) == pytest.approx([100.0, 300.0])
    assert sorted(inter_token_ms(level.measured)) == pytest.approx([50.0, 100.0, 200.0])
    # A 3 + B 2 + C 2 chunks in the window x 2 + D 2 = 11 tokens over 2 s.
    assert tokens_in_window(level.samples, 1.0, 3.0) == pytest.approx(11.0)

    s = level_summary(level)
    assert s["ttft_ms"]["p50"] == pytest.approx(200.0)  # midway between 100 and 300
    assert s["ttft_ms"]["p99"] == pytest.approx(298.0)  # 100 + 0.99 x 200
    assert s["inter_token_ms"]["p50"] == pytest.approx(100.0)  # the middle of 50, 100, 200
    assert s["inter_token_ms"]["p99"] == pytest.approx(198.0)  # 100 + 0.98 x 100
    assert s["inter_token_ms"]["ratio"] == pytest.approx(1.98)
    assert s["output_tokens_per_s"] == pytest.approx(5.5)
    assert s["requests"] == 3 and s["ok"] == 2 and s["errors"] == {"incomplete_stream": 1}
    assert s["warmup_requests"] == 1 and s["finish_reasons"] == {"length": 2}
    assert s["requests_per_s"] == pytest.approx(1.5)  # A, B and C finished in the window


def test_percentiles_agree_with_the_naive_reference_on_random_gaps():
    rng = np.random.default_rng(1)
    samples = [_sample(1.0 + i, list(1.05 + i + np.cumsum(rng.exponential(0.02, 30)))) for i in range(20)]
    level = LevelResult(concurrency=4, samples=samples, warmup=0.5, duration=30.0)
    s = level_summary(level)
    gaps = list(inter_token_ms(level.measured))
    assert len(gaps) == 20 * 29
    for q in (50, 99):
        assert s["inter_token_ms"][f"p{q}"] == pytest.approx(percentile_reference(gaps, q))
        assert s["ttft_ms"][f"p{q}"] == pytest.approx(percentile_reference(list(ttft_ms(level.measured)), q))


def test_a_level_with_no_success_reports_none_not_a_crash():
    level = LevelResult(concurrency=1, samples=[_sample(1.0, [], status=503)], warmup=0.0, duration=1.0, cancelled=1)
    s = level_summary(level)
    assert s["ok"] == 0 and s["errors"] == {"503": 1, "cancelled": 1} and s["requests"] == 2
    assert s["ttft_ms"]["p50"] is None and s["output_tokens_mean"] is None and s["output_tokens_per_s"] == 0.0


# ---- a server that closes its keep-alive connection unanswered (llama.cpp's llama-server does so
# after every stream): the request is sent once more on a new connection, never twice more, and
# a failure after the server began answering is never retried.

CHUNKS = [
    b'data: {"choices": [{"index": 0, "delta": {"content": " hi"}, "finish_reason": null}]}\n\n',
    b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}\n\n',
    b"data: [DONE]\n\n",
]


def _stream_with(failures: int, cut_after: int | None = None):
    import asyncio

    import httpx

    from openhood.loadtest.chat import stream_one

    calls = []

    class Body(httpx.AsyncByteStream):
        async def __aiter__(self):
            for i, chunk in enumerate(CHUNKS):
                if cut_after is not None and i == cut_after:
                    raise httpx.RemoteProtocolError("peer closed connection without sending complete message body")
                yield chunk

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if len(calls) <= failures:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=Body())

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            item = ChatWorkload(LengthDist.parse("4"), LengthDist.parse("4"), 1).draw()
            return await stream_one(client, "http://127.0.0.1:9/v1/chat/completions", b"{}", item, 0.0, 10.0)

    return asyncio.run(go()), calls


def test_a_connection_closed_unanswered_is_retried_once_on_a_new_one():
    sample, calls = _stream_with(failures=1)
    assert sample.ok and sample.finish_reason == "stop" and sample.reconnects == 1 and len(calls) == 2
    sample, calls = _stream_with(failures=0)
    assert sample.ok and sample.reconnects == 0 and len(calls) == 1
    sample, calls = _stream_with(failures=2)  # the second close counts: no endless retrying
    assert sample.status == "protocol_error" and len(calls) == 2 and not sample.accepted


def test_a_stream_cut_after_the_server_answered_is_an_error_not_a_retry():
    sample, calls = _stream_with(failures=0, cut_after=1)
    assert sample.status == "protocol_error" and sample.accepted and len(calls) == 1 and sample.reconnects == 0
