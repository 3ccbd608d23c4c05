"""How batch size and engine threading change the cost of a sentence on this machine.

The server's defaults rest on two measurements, both made here on dev-corpus texts (cut at
1000 characters like the load tests, length-sorted so padding is nearly zero):

1. **Padded-token budget per engine call.** Texts are packed shortest-first into batches of at
   most ``budget`` padded tokens (budget 1 = one text per call), every batch run through one
   engine with all cores; sentences/s per budget. On a CPU whose caches hold a small batch's
   activations, larger batches stop paying (and can cost) beyond a few hundred tokens.
2. **One 2-thread engine vs two 1-thread engines side by side** (two Python threads, each
   owning its engine, each fed half of the batches): the layout ``openhood serve --workers 2``
   uses on 2 cores.
3. **Padding-free execution** (NumPy, ``--packing``): the same texts in *arrival order*, cut into
   batches of ≤ 512 padded tokens (what a server's FIFO batches look like, every row padded to
   its batch's longest), two 1-thread engines side by side, with ``engine.graph.packing`` on and
   off, rounds alternating; the share of padding in those batches is printed beside.

Backends are run one after the other, each batch list twice; the best round counts.

    flock /tmp/openhood-bench.lock .venv/bin/python benchmarks/batching.py \\
        --corpus /work/shared/data/dev_corpus.jsonl
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

import numpy as np


def pack(rb, budget: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Batches of at most ``budget`` padded tokens (at least one text each, every row padded to
    its batch's longest), texts taken in ``rb``'s order: on a length-sorted RaggedBatch the
    shortest-first packing of the ceiling, in arrival order what a FIFO server forms."""
    groups, cur, longest = [], [], 0
    for i, length in enumerate(rb.lengths):
        longest_with = max(longest, int(length))
        if cur and (len(cur) + 1) * longest_with > budget:
            groups.append(cur)
            cur, longest_with = [], int(length)
        cur.append(i)
        longest = longest_with
    if cur:
        groups.append(cur)
    return [(p.input_ids, p.attention_mask) for p in (rb.take(g).pad() for g in groups)]


def run_batches(model, batches) -> float:
    t0 = time.perf_counter()
    for ids, mask in batches:
        model.run_feeds(0, {"input_ids": ids, "attention_mask": mask})
    return time.perf_counter() - t0


def run_side_by_side(backends, batches) -> float:
    """Each backend on its own thread, taking every other batch."""
    threads = [
        threading.Thread(target=run_batches, args=(b, batches[i :: len(backends)])) for i, b in enumerate(backends)
    ]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    from openhood.corpus import read_texts
    from openhood.engine.kernels.cores import available_cores
    from openhood.models import EngineOptions, ModelSpec, load_model, resolve_model_dir
    from openhood.tokenizer import WordPieceTokenizer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--texts", type=int, default=500)
    ap.add_argument("--max-chars", type=int, default=1000)
    ap.add_argument("--budgets", default="1,128,256,512,1024,2048,4096")
    ap.add_argument("--backends", nargs="+", default=["onnxruntime", "numpy"], choices=["onnxruntime", "numpy"])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--packing", action="store_true", help="add section 3: NumPy padded vs padding-free (arrival order)"
    )
    args = ap.parse_args(argv)

    folder = resolve_model_dir(None)
    tok = WordPieceTokenizer.from_pretrained(folder)
    texts = read_texts(args.corpus)
    pick = np.random.default_rng(args.seed).choice(len(texts), size=min(args.texts, len(texts)), replace=False)
    texts = [texts[int(i)][: args.max_chars] for i in pick]
    rb = tok.encode_batch(texts, max_length=256)
    rb_arrival = rb  # the random draw's order: what a FIFO server sees
    rb = rb.take(np.argsort(rb.lengths, kind="stable"))  # length-sorted: nearly no padding
    lengths = np.asarray(rb.lengths)
    budgets = [int(b) for b in args.budgets.split(",")]
    cores = available_cores()
    print(
        f"{len(texts)} texts (seed {args.seed}, cut at {args.max_chars} chars): tokens mean {lengths.mean():.1f}, "
        f"p50 {np.median(lengths):.0f}, p90 {np.percentile(lengths, 90):.0f}; {cores} cores; best of {args.rounds} rounds",
        file=sys.stderr,
    )
    packed = {b: pack(rb, b) for b in budgets}
    print("| backend | layout | padded tokens per call | calls | sentences/s | vs budget 1 |")
    print("|---|---|---:|---:|---:|---:|")
    for name in args.backends:
        spec = ModelSpec(path=str(folder))
        full = load_model(spec, EngineOptions(backend=name, threads=cores))
        halves = [load_model(spec, EngineOptions(backend=name, threads=max(1, cores // 2))) for _ in range(2)]
        warm = packed[budgets[-1]][:4]  # warm-up: first-call allocations
        for m in (full, *halves):
            run_batches(m, warm)
        rates: dict[tuple[str, int], float] = {}
        for _ in range(args.rounds):
            for b in budgets:
                rates[("full", b)] = max(rates.get(("full", b), 0.0), len(rb) / run_batches(full, packed[b]))
            for b in (budgets[0], 512):
                batches = packed[b] if b in packed else pack(rb, b)
                rates[("halves", b)] = max(rates.get(("halves", b), 0.0), len(rb) / run_side_by_side(halves, batches))
        base = rates[("full", budgets[0])]
        for b in budgets:
            label = "1 text per call" if b == 1 else f"≤ {b}"
            print(
                f"| {name} | one engine, {cores} threads | {label} | {len(packed[b])} | {rates[('full', b)]:.1f} | "
                f"{rates[('full', b)] / base:.2f}x |"
            )
        for b in (budgets[0], 512):
            label = "1 text per call" if b == 1 else f"≤ {b}"
            n_calls = len(packed[b]) if b in packed else len(pack(rb, b))
            print(
                f"| {name} | two engines × {max(1, cores // 2)} thread side by side | {label} | {n_calls} | "
                f"{rates[('halves', b)]:.1f} | {rates[('halves', b)] / base:.2f}x |"
            )
        if name == "numpy" and args.packing:
            packing_rows(halves, rb_arrival, args.rounds)
        for be in (full, *halves):
            close = getattr(be, "close", None)
            if close:
                close()
    return 0


def packing_rows(halves, rb_arrival, rounds: int) -> None:
    """Section 3: arrival-order ≤ 512-token batches, padded rows vs padding-free, alternating."""
    from openhood.engine.graph import packing

    batches = pack(rb_arrival, 512)
    real = sum(int(m.sum()) for _, m in batches)
    padded = sum(m.size for _, m in batches)
    best = {False: 0.0, True: 0.0}
    default = packing.PACK_TOKENS
    try:
        for _ in range(max(2, rounds)):
            for on in (False, True):
                packing.PACK_TOKENS = on
                best[on] = max(best[on], len(rb_arrival) / run_side_by_side(halves, batches))
    finally:
        packing.PACK_TOKENS = default
    print(
        f"\narrival-order batches of ≤ 512 padded tokens: {len(batches)} calls, padding {1 - real / padded:.1%} of "
        f"the rows; two engines × 1 thread, best of {max(2, rounds)} alternating rounds:"
    )
    print("| numpy | padded rows | padding-free |\n|---|---:|---:|")
    print(f"| sentences/s | {best[False]:.1f} | {best[True]:.1f} ({best[True] / best[False]:.2f}x) |")


if __name__ == "__main__":
    sys.exit(main())
