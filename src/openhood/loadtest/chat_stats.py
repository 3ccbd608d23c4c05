"""Statistics of a chat load test, per concurrency level: TTFT, inter-token gaps, tokens/s.

- **TTFT** (time to first token): from sending the request to the arrival of the first chunk
  that carries text, for requests that started in the measured window and succeeded (or were
  still streaming at the drain deadline: their tokens are real; one that had no token by then
  is counted in ``unfinished_without_token``, a TTFT the percentiles cannot include).
- **Inter-token gaps**: the differences between consecutive text chunks of each such request,
  pooled over the level (one sample per gap, so long answers weigh in proportion to their
  length, as they do for the users reading them). A server that streams one token per chunk
  (openhood, llama.cpp) makes these per-token latencies; one that batches several tokens per
  chunk shows fewer, longer gaps, which is what its users see.
- **Aggregate output tokens/s**: text chunks that *arrived inside the measured window*, from
  every request (warm-up ones still streaming included), divided by the window length; when the
  server's usage says a request produced more tokens than chunks, each chunk weighs
  ``completion_tokens / chunks``. Counting arrivals in the window, rather than the tokens of the
  requests that finished in it, keeps the start-up ramp and the drain tail out of the rate.

Percentiles are NumPy's linear interpolation (``stats.latency_stats``; its naive reference,
``stats.percentile_reference``, is checked against it in the tests).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from openhood.loadtest.stats import latency_stats


def ttft_ms(samples) -> np.ndarray:
    """(N,) time to first token of the timed samples that produced text, ms."""
    return np.asarray([s.ttft * 1e3 for s in samples if s.timed and s.token_times.size], dtype=np.float64)


def inter_token_ms(samples) -> np.ndarray:
    """(G,) every gap between consecutive text chunks of the timed samples, ms."""
    gaps = [np.diff(s.token_times) * 1e3 for s in samples if s.timed and s.token_times.size > 1]
    return np.concatenate(gaps) if gaps else np.zeros(0)


def tokens_in_window(samples, lo: float, hi: float) -> float:
    """Output tokens whose chunk arrived in [lo, hi), each chunk weighted by usage/chunks (>= 1)."""
    total = 0.0
    for s in samples:
        k = s.token_times.size
        if k == 0:
            continue
        weight = max(1.0, s.output_tokens / k)
        total += weight * int(np.count_nonzero((s.token_times >= lo) & (s.token_times < hi)))
    return total


def level_summary(level) -> dict:
    measured = level.measured
    ok = [s for s in measured if s.ok]
    unfinished = [s for s in measured if s.timed and not s.ok]
    errors = Counter(str(s.status) for s in measured if not s.timed)
    if level.cancelled:
        errors["cancelled"] += level.cancelled
    lo, hi = level.warmup, level.warmup + level.duration
    prompt_usage = [s.prompt_tokens for s in ok if s.prompt_tokens >= 0]
    return {
        "concurrency": level.concurrency,
        "requests": len(measured) + level.cancelled,
        "ok": len(ok),
        "error_count": sum(errors.values()),
        "unfinished": len(unfinished),
        "unfinished_without_token": sum(s.token_times.size == 0 for s in unfinished),
        "errors": dict(sorted(errors.items())),
        # requests sent again because the server closed their pooled connection unanswered (chat.stream_one)
        "reconnects": sum(s.reconnects for s in measured),
        "warmup_requests": len(level.samples) - len(measured),
        "finish_reasons": dict(sorted(Counter(str(s.finish_reason) for s in ok).items())),
        "output_tokens_per_s": tokens_in_window(level.samples, lo, hi) / level.duration,
        "requests_per_s": sum(lo <= s.done < hi for s in level.samples if s.ok) / level.duration,
        "ttft_ms": latency_stats(ttft_ms(measured)),
        "inter_token_ms": latency_stats(inter_token_ms(measured)),
        "output_tokens_mean": float(np.mean([s.output_tokens for s in ok])) if ok else None,
        "prompt_tokens_mean": float(np.mean(prompt_usage or [s.prompt_words for s in ok])) if ok else None,
        "prompt_tokens_source": "usage.prompt_tokens" if prompt_usage else "drawn words (no usage sent)",
        "wall_s": level.wall_s,
    }


def summarize_chat(result) -> dict:
    cfg = result.config
    return {
        "mode": "chat",
        "url": cfg.url,
        "duration_s": cfg.duration,
        "warmup_s": cfg.warmup,
        "seed": cfg.seed,
        "temperature": cfg.temperature,
        "model": cfg.model,
        "client": result.plan.describe(),
        "workload": result.workload,
        "levels": [level_summary(lv) for lv in result.levels],
    }


def _fmt(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def format_chat_summary(s: dict) -> str:
    """The text table ``openhood loadtest --chat`` prints (times in ms)."""
    w = s["workload"]
    lines = [
        f"chat, closed loop, {s['duration_s']:g}s per level (+{s['warmup_s']:g}s warm-up), seed {s['seed']}, "
        f"temperature {s['temperature']:g}",
        f"prompt lengths: {w['prompt_tokens']}; output lengths (max_tokens): {w['output_tokens']}",
        f"client: {s['client']}",
        f"{'streams':>7} {'req':>5} {'err':>4} {'out tok/s':>9} {'TTFT P50':>9} {'TTFT P99':>9} "
        f"{'ITL P50':>8} {'ITL P99':>8} {'P99/P50':>7} {'out/req':>7}",
    ]
    for lv in s["levels"]:
        t, g = lv["ttft_ms"], lv["inter_token_ms"]
        lines.append(
            f"{lv['concurrency']:>7} {lv['requests']:>5} {lv['error_count']:>4} "
            f"{lv['output_tokens_per_s']:>9.1f} {_fmt(t['p50']):>9} {_fmt(t['p99']):>9} "
            f"{_fmt(g['p50']):>8} {_fmt(g['p99']):>8} {_fmt(g['ratio'], '.2f'):>7} "
            f"{_fmt(lv['output_tokens_mean']):>7}"
        )
    errs = {lv["concurrency"]: lv["errors"] for lv in s["levels"] if lv["errors"]}
    if errs:
        lines.append(f"errors by level: {errs}")
    for lv in s["levels"]:
        if lv["unfinished"]:
            lines.append(
                f"note: at {lv['concurrency']} streams {lv['unfinished']} request(s) were still streaming at "
                f"the drain deadline ({lv['unfinished_without_token']} without a first token): --drain "
                "cut them"
            )
        if lv["requests"] == 0:
            lines.append(
                f"note: at {lv['concurrency']} streams no request started inside the measured window "
                f"({lv['warmup_requests']} started in warm-up): the server is far slower than --duration allows"
            )
    return "\n".join(lines)
