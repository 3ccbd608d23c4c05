"""The decoder LLM (SmolLM2-135M-Instruct Q4_1 GGUF): openhood vs llama.cpp vs transformers, one run.

Run in the reference environment (llama-cpp-python, torch, transformers), with openhood's
source on the path, inside the shared lock so benchmarks do not overlap on the 2 cores::

    flock /tmp/openhood-bench.lock env PYTHONPATH=$PWD/src \
        /work/main/.venv-ref/bin/python benchmarks/decoder.py --threads 2 --parity

Sections, each printed as a table with ratios against anchors measured in the same run:
1. tokenizer: byte-level BPE vs HF ``tokenizers`` (same pre-tokenizer) on the dev corpus:
   tokens/s and the number of texts whose ids differ (``--only-tokenizer``: this section alone);
2. prefill and decode tokens/s at batch 1, 4, 16 and each ``--decode-tokens`` length (32 and
   128 generated tokens by default: the decode rate falls as the KV cache grows, so the length
   is part of the result) — openhood runs the B prompts as one batch, llama.cpp (same GGUF,
   same threads) runs them one after another (its Python API decodes one sequence at a time:
   at batch > 1 its column is sequential, not batched), transformers (float32, CPU) runs
   batch 1. Each peer runs at its own defaults: llama.cpp with its default ``n_batch`` (its
   batched prompt path; ``--llamacpp-n-batch 1`` for a build that dies on multi-token batches)
   and no ``OMP_WAIT_POLICY`` for any engine (PASSIVE slows every one of them). openhood runs twice: float32
   weights (BLAS) and quantized weights (our Q4_1/Q8_0 kernels on repacked blocks). Each engine runs in its own
   process, so no two thread pools (OpenBLAS, OpenMP of llama.cpp/numba/torch) share the cores;
3. RSS of a fresh openhood process (each weight mode) after generating at batch 16, against
   2 × the GGUF file + KV (``--only-memory``: this section alone), run in ``.venv-runtime``
   (``make runtime-env``: openhood as installed, without the peers this environment holds);
4. a per-op profile of one decode step at batch 1 against measured memory bandwidth;
5. with ``--parity``: logits and 64-step greedy continuations against the committed
   transformers fixtures.

``--every-isa`` runs the whole script once per ISA level this CPU can force (``OPENHOOD_ISA``):
below ``avx2`` openhood's quantized path runs numba's kernels instead of the vector IR.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


def _table(title: str, header: list[str], rows: list[list]) -> None:
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(f"{c:,.1f}" if isinstance(c, float) else str(c) for c in r) + " |")


def bench_tokenizer(path, corpus: Path, limit: int) -> None:
    from importlib.metadata import version

    from openhood.corpus import read_texts
    from openhood.tokenizer.bpe import BPETokenizer
    from openhood.tokenizer.bpe_anchor import hf_bpe_tokenizer

    texts = read_texts(corpus)[:limit]
    ours = BPETokenizer.from_pretrained(path)
    hf = hf_bpe_tokenizer(ours.spec)
    t0 = time.perf_counter()
    rb = ours.encode_batch(texts)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    ref = hf.encode_batch(texts)
    t_hf = time.perf_counter() - t0
    diff = sum(row.tolist() != e.ids for row, e in zip(rb, ref, strict=False))
    n = rb.ids.size
    warm = time.perf_counter()
    ours.encode_batch(texts)
    t_warm = time.perf_counter() - warm
    _table(
        f"Tokenizer: {len(texts)} dev-corpus texts, {n:,} tokens, {diff} texts with different ids "
        f"(tokenizers {version('tokenizers')})",
        ["tokenizer", "tokens/s", "vs HF"],
        [
            ["HF tokenizers (encode_batch, its thread pool)", n / t_hf, "1.00x"],
            ["openhood BPE, cold piece cache", n / t_ours, f"{t_hf / t_ours:.2f}x"],
            ["openhood BPE, warm piece cache (same texts again)", n / t_warm, f"{t_hf / t_warm:.2f}x"],
        ],
    )


def bench_prompts(length: int) -> list[list[int]]:
    """16 prompts of ``length`` tokens: each fixture prompt followed by the next ones, cut to
    ``length`` (the fixture's are 36-42 tokens; the issue's measure is a ~100-token prompt)."""
    cases = [c["ids"] for c in json.loads((FIXTURES / "llama_greedy.json").read_text(encoding="utf-8"))["cases"]]
    prompts = []
    for i in range(16):
        ids: list[int] = []
        k = i
        while len(ids) < length:
            ids += cases[k % len(cases)]
            k += 1
        prompts.append(ids[:length])
    return prompts


def decode_lengths(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def bench_openhood(model, prompts, batch: int, steps: int) -> tuple[float, float]:
    import numpy as np

    ps = [np.asarray(p, dtype=np.int64) for p in prompts[:batch]]
    cache = model.new_cache(batch, max(map(len, ps)) + steps + 1)
    slots = list(range(batch))
    t0 = time.perf_counter()
    logits = model.forward(ps, slots, cache)
    t_pre = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(steps):
        logits = model.forward([np.array([int(t)]) for t in logits.argmax(axis=1)], slots, cache)
    t_dec = time.perf_counter() - t0
    return sum(map(len, ps)) / t_pre, batch * steps / t_dec


def bench_llamacpp(llm, prompts, batch: int, steps: int) -> tuple[float, float]:
    import numpy as np

    n_pre = t_pre = t_dec = 0.0
    n_vocab = llm.n_vocab()
    for p in prompts[:batch]:
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(p)
        t_pre += time.perf_counter() - t0
        n_pre += len(p)
        t0 = time.perf_counter()
        for _ in range(steps):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
            llm.eval([int(logits.argmax())])
        t_dec += time.perf_counter() - t0
    return n_pre / t_pre, batch * steps / t_dec


def bench_transformers(hf_model, prompt, steps: int) -> tuple[float, float]:
    import torch

    with torch.no_grad():
        ids = torch.tensor([prompt])
        t0 = time.perf_counter()
        out = hf_model(ids, use_cache=True)
        t_pre = time.perf_counter() - t0
        past = out.past_key_values
        t0 = time.perf_counter()
        for _ in range(steps):
            nxt = out.logits[:, -1].argmax(-1, keepdim=True)
            out = hf_model(nxt, past_key_values=past, use_cache=True)
            past = out.past_key_values
        t_dec = time.perf_counter() - t0
    return len(prompt) / t_pre, steps / t_dec


RSS_CHILD = """
import json, sys, numpy as np
from openhood.process.allocator import apply_malloc_policy
policy = apply_malloc_policy(sys.argv[5])
from openhood.engine.models.llama import Llama
from openhood.process import resident
mode = sys.argv[4]
def rss(field='VmRSS'):
    for line in open('/proc/self/status'):
        if line.startswith(field + ':'):
            return int(line.split()[1]) * 1024
path, steps = sys.argv[1], int(sys.argv[2])
prompts = [c['ids'] for c in json.load(open(sys.argv[3]))['cases']][:16]
m = Llama.from_gguf(path, weights=mode)
m.after_warm_up = resident.release_after_warm_up  # as generate.Generator wires it
after_load = rss()
cache = m.new_cache(16, max(map(len, prompts)) + steps + 1)
lg = m.forward([np.array(p) for p in prompts], list(range(16)), cache)
for _ in range(steps):
    lg = m.forward([np.array([int(t)]) for t in lg.argmax(axis=1)], list(range(16)), cache)
print(json.dumps({'policy': policy, 'after_load': after_load, 'after_generate': rss(), 'anon': rss('RssAnon'), 'file': rss('RssFile'),
                  'kv_used': int(cache.lengths.sum()) * cache.bytes_per_token, 'kv_alloc': cache.nbytes, 'weights': m.weight_bytes,
                  'released': resident._released.compiler_bytes if resident._released else 0}))
"""


RUNTIME_PYTHON = ROOT / ".venv-runtime" / "bin" / "python"  # `make runtime-env`: openhood's declared deps only


def memory_python() -> tuple[str, str]:
    """The interpreter the memory children run in, and a line saying what it holds.

    Memory is openhood's as installed (`make runtime-env`): this benchmark's own environment
    holds the peers' packages, and numba imports one of them (scipy) at its first compile."""
    if RUNTIME_PYTHON.is_file():
        return str(RUNTIME_PYTHON), f"{RUNTIME_PYTHON.relative_to(ROOT)} (openhood's runtime dependencies only)"
    has_scipy = importlib.util.find_spec("scipy") is not None
    return sys.executable, (
        f"{sys.executable} (no .venv-runtime: run `make runtime-env`"
        + ("; scipy is installed here and numba imports it, ~10 MB more than openhood's runtime)" if has_scipy else ")")
    )


def bench_rss(path: Path, steps: int) -> None:
    python, where = memory_python()
    print(f"\nmemory children run in {where}")
    rows = []
    # numba compiles a kernel only when its on-disk cache misses (first run after an install or
    # a change); compiling leaves tens of MB of heap behind that a process loading from the cache
    # never has. One throw-away child fills the cache, so every measured child is the steady state.
    subprocess.run(
        [python, "-c", RSS_CHILD, str(path), "1", str(FIXTURES / "llama_greedy.json"), "quantized", "default"],
        capture_output=True,
        check=True,
        timeout=600,
    )
    # "pinned" is what `openhood generate` does (process/allocator.py); "default" is glibc's own
    # policy, shown for the quantized weights to give the heap fragments' share.
    for mode, malloc in (("float32", "pinned"), ("quantized", "pinned"), ("quantized", "default")):
        out = subprocess.run(
            [python, "-c", RSS_CHILD, str(path), str(steps), str(FIXTURES / "llama_greedy.json"), mode, malloc],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        r = json.loads(out.stdout)
        file_mb, kv_mb = path.stat().st_size / 1e6, r["kv_used"] / 1e6
        budget = 2 * file_mb + kv_mb
        rows.append(
            [
                f"{mode}, malloc {r['policy']}",
                file_mb,
                kv_mb,
                budget,
                r["after_load"] / 1e6,
                r["after_generate"] / 1e6,
                f"{r['anon'] / 1e6:.0f} / {r['file'] / 1e6:.0f}",
                r["released"] / 1e6,
                f"{r['weights'] / 1e6:.1f} / {r['kv_alloc'] / 1e6:.1f} / {(r['after_generate'] - r['weights'] - r['kv_alloc']) / 1e6:.1f}",
                f"{r['after_generate'] / 1e6 / budget:.2f}x",
                f"{r['after_generate'] / 1e6 / (2 * (file_mb + kv_mb)):.2f}x",
                f"{r['anon'] / 1e6 / budget:.2f}x",
            ]
        )
    _table(
        "Memory (fresh process per weight mode, 16 sequences generated; RSS = anonymous + file-backed pages; "
        "the JIT compiler's clean pages are released after the first decode step, process/resident.py)",
        [
            "weights",
            "GGUF MB",
            "KV in use MB",
            "goal: 2 × file + KV",
            "RSS after load MB",
            "RSS after generating MB",
            "of which anon / file MB",
            "compiler pages released MB",
            "weights / KV allocated / the rest MB",
            "RSS / (2 × file + KV)",
            "RSS / 2 × (file + KV)",
            "anon only / (2 × file + KV)",
        ],
        rows,
    )


def bench_profile(model, steps: int) -> None:
    from llama_profile import measure_bandwidth, profile_decode, profile_table  # benchmarks/, this script's folder

    bw = measure_bandwidth()
    # warm-up first: the first decode step compiles or loads kernels and runs the after-warm-up hook
    # (page release, ~25 ms), which the profile would otherwise charge to the op after it
    profile_decode(model, batch=1, prompt_len=32, steps=2)
    laps, wall = profile_decode(model, batch=1, prompt_len=32, steps=steps)
    rows = profile_table(laps, wall, steps, bw)
    total_mb = sum(r["mb_per_step"] for r in rows)
    kind = "quantized" if hasattr(model.embed, "kind") else "float32"
    _table(
        f"Decode step profile, {kind} weights, batch 1 ({1e3 * wall / steps:.1f} ms/step; measured bandwidth {bw:.1f} GB/s "
        f"(BLAS sgemv over 256 MB); {total_mb:.0f} MB read per token → whole step at "
        f"{total_mb / 1e3 / (wall / steps):.1f} GB/s = {100 * total_mb / 1e3 / (wall / steps) / bw:.0f}% of roofline)",
        ["op", "ms/step", "share", "MB/step", "GB/s", "% of bandwidth"],
        [
            [
                r["op"],
                r["ms_per_step"],
                f"{100 * r['share']:.1f}%",
                r["mb_per_step"],
                r["gb_s"],
                f"{r['roofline_pct']:.0f}%",
            ]
            for r in rows
        ],
    )


def bench_parity(model) -> None:
    import numpy as np
    from llama_parity import compare_greedy  # benchmarks/, this script's folder

    with np.load(FIXTURES / "llama_logits.npz", allow_pickle=False) as z:
        z = dict(z)
    worst = 0.0
    for i in (0, 1):
        full = model.forward_full(z[f"ids_{i}"])
        worst = max(
            worst,
            float(np.abs(full[:, z["vocab_slice"]] - z[f"slice_{i}"]).max()),
            float(np.abs(np.take_along_axis(full, z[f"top_ids_{i}"], 1) - z[f"top_vals_{i}"]).max()),
        )
    cases = json.loads((FIXTURES / "llama_greedy.json").read_text(encoding="utf-8"))["cases"]
    report = compare_greedy(model, cases, 64, tolerance=max(worst, 1e-4))
    same = sum(r.first_mismatch is None for r in report)
    _table(
        f"Parity vs transformers (float32 from the same GGUF): max |Δlogit| {worst:.2e}; "
        f"{same}/{len(report)} greedy continuations identical for 64 tokens",
        ["prompt", "first mismatch", "first near-tie (ref top-2 gap < error)", "ok"],
        [[r.prompt[:40], r.first_mismatch, r.first_near_tie, r.ok] for r in report],
    )


def run_worker(args) -> None:
    """One engine in its own process: prints {batch: [prefill tok/s, decode tok/s]} as JSON."""
    if args.worker.startswith("openhood"):
        from openhood.process.blas_threads import sleep_idle_blas_threads

        if not sleep_idle_blas_threads() and "numpy" in sys.modules:  # as `openhood generate` does
            sys.exit("NumPy was imported before the worker could set OPENBLAS_THREAD_TIMEOUT")
    prompts = bench_prompts(args.prompt_tokens)
    from openhood.generate.bundled import default_gguf_path

    path = default_gguf_path()
    batches = [int(x) for x in args.batches.split(",")]
    steps = decode_lengths(args.decode_tokens)
    if args.worker.startswith("openhood"):
        from openhood.engine.models.llama import Llama
        from openhood.process.allocator import apply_malloc_policy
        from openhood.process.resident import release_after_warm_up

        apply_malloc_policy("pinned")  # as `openhood generate` does
        model = Llama.from_gguf(path, weights=args.worker.split("-", 1)[1])
        model.after_warm_up = release_after_warm_up  # as generate.Generator wires it
        if args.profile:
            bench_profile(model, 64)
            return
        for b in (1, 2):  # warm-up: numba compiles or loads the kernels of each path (batch 1 has its own step)
            bench_openhood(model, prompts, b, 2)
        result = {b: {n: bench_openhood(model, prompts, b, n) for n in steps} for b in batches}
    elif args.worker == "llamacpp":
        import llama_cpp

        # its own batched prompt path (default n_batch) unless told otherwise: pip's build with
        # AMX compiled in died of SIGILL on any multi-token batch on one VM (then pass 1)
        batching = {} if args.llamacpp_n_batch is None else {"n_batch": args.llamacpp_n_batch}
        batching |= {"n_ubatch": args.llamacpp_n_batch} if args.llamacpp_n_batch else {}
        llm = llama_cpp.Llama(
            model_path=str(path),
            n_ctx=512,
            **batching,
            n_threads=args.threads,
            n_threads_batch=args.threads,
            verbose=False,
        )
        bench_llamacpp(llm, prompts, 1, 2)
        result = {b: {n: bench_llamacpp(llm, prompts, b, n) for n in steps} for b in batches}
    else:
        import torch
        import transformers

        torch.set_num_threads(args.threads)
        hf = transformers.AutoModelForCausalLM.from_pretrained(
            str(path.parent), gguf_file=path.name, dtype=torch.float32
        ).eval()
        bench_transformers(hf, prompts[0], 2)
        result = {1: {n: bench_transformers(hf, prompts[0], n) for n in steps}}
    print(json.dumps(result))


def _worker(name: str, args, *extra: str) -> str:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        name,
        "--threads",
        str(args.threads),
        "--decode-tokens",
        str(args.decode_tokens),
        "--prompt-tokens",
        str(args.prompt_tokens),
        "--batches",
        args.batches,
        *(["--llamacpp-n-batch", str(args.llamacpp_n_batch)] if args.llamacpp_n_batch is not None else []),
        *extra,
    ]
    # Every engine at its own OpenMP defaults, alone in its process (no load generator shares the
    # cores here): OMP_WAIT_POLICY=PASSIVE cut llama.cpp's decode by a third and openhood's
    # quantized decode from 37-38 to 24-27 tokens/s (6 Dec, AMD EPYC, `openhood`'s numba threads).
    env = dict(os.environ)
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=1200, env=env).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--decode-tokens", default="32,128", help="generated tokens per run, comma list")
    ap.add_argument("--prompt-tokens", type=int, default=99, help="tokens per prompt (fixture prompts run on)")
    ap.add_argument(
        "--llamacpp-n-batch", type=int, default=None, help="llama.cpp n_batch (default: its own); 1 for a SIGILL build"
    )
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds of every engine (median reported)")
    ap.add_argument("--corpus", type=Path, default=Path("/work/shared/data/dev_corpus.jsonl"))
    ap.add_argument("--corpus-texts", type=int, default=20000)
    ap.add_argument("--parity", action="store_true")
    ap.add_argument("--only-tokenizer", action="store_true", help="run the tokenizer section alone and stop")
    ap.add_argument("--only-memory", action="store_true", help="run the memory (RSS) section alone and stop")
    ap.add_argument(
        "--every-isa", action="store_true", help="run once per ISA level this CPU can force (OPENHOOD_ISA), in turn"
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)

    if args.worker:
        run_worker(args)
        return
    if args.every_isa:
        from openhood.engine.kernels import isa

        sys.exit(isa.run_at_every_level([a for a in sys.argv if a != "--every-isa"]))
    from importlib.metadata import version

    from openhood.engine.kernels import isa
    from openhood.engine.models.llama import Llama
    from openhood.generate.bundled import default_gguf_path

    path = default_gguf_path()
    prompts = bench_prompts(args.prompt_tokens)
    print(
        f"# decoder benchmark: {path.name}, {args.threads} threads, {args.decode_tokens} decode tokens, {isa.header()}, "
        f"prompts of {min(map(len, prompts))}-{max(map(len, prompts))} tokens; llama-cpp-python "
        f"{version('llama-cpp-python')}, torch {version('torch')}, transformers {version('transformers')}; "
        "each engine in its own process"
    )

    if args.corpus.is_file() and not args.only_memory:
        bench_tokenizer(path, args.corpus, args.corpus_texts)
    elif args.only_tokenizer:
        sys.exit(f"{args.corpus}: no such corpus")
    if args.only_tokenizer:
        return
    if args.only_memory:
        bench_rss(path, max(decode_lengths(args.decode_tokens)))
        return
    names = ("openhood-float32", "openhood-quantized", "llamacpp", "transformers")
    # ``--rounds`` alternating rounds, every engine once per round in a fresh process; the median
    # of each (batch, length) figure across rounds (one prefill of a ~100-token prompt is ~0.3 s,
    # and a single process's figure varied by ~15% from one run to the next on this VM)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for _ in range(args.rounds):
        for name in names:
            runs[name].append({int(k): v for k, v in json.loads(_worker(name, args)).items()})
    engines = {
        name: {b: {n: [statistics.median(r[b][n][i] for r in rs) for i in (0, 1)] for n in rs[0][b]} for b in rs[0]}
        for name, rs in runs.items()
    }
    labels = {
        "openhood-float32": "openhood (NumPy, float32 weights)",
        "openhood-quantized": "openhood (quantized weights, packed SIMD kernels, one-call decode step)",
        "llamacpp": "llama.cpp (Q4_1, one sequence at a time, its default n_batch)"
        if args.llamacpp_n_batch is None
        else f"llama.cpp (Q4_1, one sequence at a time, n_batch {args.llamacpp_n_batch})",
        "transformers": "transformers (float32, CPU)",
    }
    rows = []
    for b in (int(x) for x in args.batches.split(",")):
        for n in decode_lengths(args.decode_tokens):
            l_pre, l_dec = engines["llamacpp"][b][str(n)]
            for name, res in engines.items():
                if b in res:
                    pre, dec = res[b][str(n)]
                    rows.append([b, n, labels[name], pre, dec, f"{pre / l_pre:.2f}x", f"{dec / l_dec:.2f}x"])
    _table(
        f"Prefill and decode throughput (aggregate over the batch; median of {args.rounds} alternating rounds)",
        [
            "batch",
            "generated",
            "engine",
            "prefill tok/s",
            "decode tok/s",
            "prefill vs llama.cpp",
            "decode vs llama.cpp",
        ],
        rows,
    )
    bench_rss(path, max(decode_lengths(args.decode_tokens)))
    for name in ("openhood-float32", "openhood-quantized"):
        print(_worker(name, args, "--profile"), end="")
    if args.parity:
        bench_parity(Llama.from_gguf(path))


if __name__ == "__main__":
    main()
