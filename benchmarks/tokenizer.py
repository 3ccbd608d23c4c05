"""openhood's tokenizer vs HF ``tokenizers`` on a corpus: batch throughput, short-text latency, id parity.

Usage (wrap in the shared lock so benchmarks do not overlap on the 2 cores)::

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/tokenizer.py --corpus ../shared/data/dev_corpus.jsonl

In one run: the whole corpus encoded as one batch, untruncated, by openhood, by HF with its
default parallelism (a Rayon pool over all cores), and by HF with TOKENIZERS_PARALLELISM=false
(in a subprocess: the variable only counts before HF's pool starts); the latency of ``encode``
on one short text; and the number of texts whose ids differ from HF's. Times are the best of
``--repeat`` runs; ratios are against HF measured in the same run, so machine load cancels out
as far as it can.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from openhood.corpus import read_texts

SHORT_TEXT = "The quick brown fox jumps over the lazy dog."


def best_time(fn, repeat: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def latency_us(fn, calls: int, rounds: int = 5) -> float:
    """Median over rounds of the mean per-call time of ``calls`` back-to-back calls."""
    for _ in range(50):
        fn()
    per_call = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - t0) / calls * 1e6)
    return float(np.median(per_call))


def hf_tokenizer(model_dir: Path):
    from tokenizers import Tokenizer as HFTokenizer

    ref = HFTokenizer.from_file(str(model_dir / "tokenizer.json"))
    ref.no_truncation()
    ref.no_padding()
    return ref


def hf_measure(model_dir: Path, texts: list[str], repeat: int, calls: int) -> dict:
    ref = hf_tokenizer(model_dir)
    batch_s, enc = best_time(lambda: ref.encode_batch(texts), repeat)
    return {
        "batch_s": batch_s,
        "tokens": sum(len(e.ids) for e in enc),
        "latency_us": latency_us(lambda: ref.encode(SHORT_TEXT), calls),
        "ids": enc,
    }


def sequential_worker(args) -> int:
    """Runs in the subprocess started with TOKENIZERS_PARALLELISM=false; prints JSON."""
    texts = read_texts(args.corpus, limit=args.limit)
    res = hf_measure(args.model_dir, texts, args.repeat, args.calls)
    res.pop("ids")
    print(json.dumps(res))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help='JSONL file of {"text": ...} lines')
    parser.add_argument("--model", type=Path, default=None, help="model folder (default: bundled all-MiniLM-L6-v2)")
    parser.add_argument("--repeat", type=int, default=3, help="batch runs per tokenizer; the best counts")
    parser.add_argument("--calls", type=int, default=2000, help="encode calls per latency round")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N texts")
    parser.add_argument("--hf-sequential-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    from openhood.models import resolve_model_dir

    args.model_dir = resolve_model_dir(args.model)
    if args.hf_sequential_worker:
        return sequential_worker(args)

    texts = read_texts(args.corpus, limit=args.limit)
    n_chars = sum(map(len, texts))
    print(f"corpus: {len(texts)} texts, {n_chars} chars; model: {args.model_dir.parent.name}", file=sys.stderr)

    t0, c0 = time.perf_counter(), time.process_time()
    from openhood.tokenizer import WordPieceTokenizer
    from openhood.tokenizer.wordpiece_kernels import WORDPIECE

    tok = WordPieceTokenizer.from_pretrained(args.model_dir)
    load_s, load_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    ours_s, rb = best_time(lambda: tok.encode_batch(texts), args.repeat)
    ours_lat = latency_us(lambda: tok.encode(SHORT_TEXT), args.calls)
    print(f"openhood done: {ours_s:.3f} s", file=sys.stderr)

    hf = hf_measure(args.model_dir, texts, args.repeat, args.calls)
    print(f"HF default parallelism done: {hf['batch_s']:.3f} s", file=sys.stderr)
    differ = sum(1 for row, e in zip(rb, hf["ids"], strict=True) if row.tolist() != e.ids)

    env = dict(os.environ, TOKENIZERS_PARALLELISM="false")
    cmd = [
        sys.executable,
        __file__,
        "--corpus",
        str(args.corpus),
        "--model",
        str(args.model_dir),
        "--repeat",
        str(args.repeat),
        "--calls",
        str(args.calls),
        "--hf-sequential-worker",
    ]
    if args.limit:
        cmd += ["--limit", str(args.limit)]
    seq = json.loads(subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout)
    print(f"HF sequential done: {seq['batch_s']:.3f} s", file=sys.stderr)

    tokens = int(rb.ids.size)
    stages = stage_breakdown(tok, texts, args.repeat)
    assert tokens == hf["tokens"] or differ, "token totals differ while ids match"
    rows = [
        (f"openhood (compiled kernel: {WORDPIECE.backing}, 1 thread)", ours_s, ours_lat),
        (
            f"HF tokenizers {_hf_version()}, default parallelism ({os.cpu_count()} cores)",
            hf["batch_s"],
            hf["latency_us"],
        ),
        ("HF tokenizers, TOKENIZERS_PARALLELISM=false", seq["batch_s"], seq["latency_us"]),
    ]
    print()
    print(
        f"Corpus `{args.corpus.name}`: {len(texts)} texts, {n_chars:,} chars, {tokens:,} tokens "
        f"(untruncated). Short text: {len(SHORT_TEXT)} chars. Python {platform.python_version()}."
    )
    print()
    print(
        "| tokenizer | batch encode (s) | tokens/s | chars/s | batch speed vs HF default | short-text encode (µs) | latency vs HF default |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, secs, lat in rows:
        print(
            f"| {name} | {secs:.3f} | {tokens / secs:,.0f} | {n_chars / secs:,.0f} | "
            f"{hf['batch_s'] / secs:.2f}× | {lat:.1f} | {lat / hf['latency_us']:.2f}× |"
        )
    print()
    print(
        f"Texts whose ids differ from HF: **{differ}** of {len(texts)}. "
        f"openhood import + load: {load_s:.2f} s wall ({load_cpu_s:.2f} s CPU), of which kernel load "
        f"({WORDPIECE.backing}: ahead of time or numba's JIT) and warm-up {tok.warmup_seconds:.2f} s wall "
        "(once per process)."
    )
    print()
    print("Where openhood's batch time goes (best of runs):")
    print()
    print("| stage | time (s) | chars/s |")
    print("|---|---:|---:|")
    for name, secs, chars in stages:
        print(f"| {name} | {secs:.3f} | {chars / secs:,.0f} |")
    return 1 if differ else 0


def stage_breakdown(tok, texts: list[str], repeat: int) -> list[tuple[str, float, int]]:
    """String half vs kernel half, one NumPy pass for scale, and the naive per-character reference."""
    from openhood.tokenizer import reference

    n_chars = sum(map(len, texts))
    str_s, (cps, starts, ends) = best_time(lambda: tok.batch_code_points(texts), repeat)

    kernel_s, _ = best_time(lambda: tok.encode_code_points(cps, starts, ends, tok._limit(None)), repeat)
    class_table = tok.normalizer.class_table
    gather_s, _ = best_time(lambda: class_table[cps], repeat)
    sample = texts[: max(1, len(texts) // 40)]
    naive_s, _ = best_time(lambda: [reference.encode(tok.spec, t) for t in sample], 1)
    return [
        ("join + NFD/lowercase (CPython C code) + UTF-32 view + boundaries", str_s, n_chars),
        ("compiled kernel: drop/split/WordPiece, all texts", kernel_s, n_chars),
        ("for scale: ONE NumPy gather pass over the code points (class_table[cps])", gather_s, n_chars),
        (
            f"naive pure-Python reference (per character, dict lookups), {len(sample)} texts",
            naive_s,
            sum(map(len, sample)),
        ),
    ]


def _hf_version() -> str:
    import tokenizers

    return tokenizers.__version__


if __name__ == "__main__":
    sys.exit(main())
