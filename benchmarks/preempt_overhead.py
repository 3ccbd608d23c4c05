"""What layer-granular preemption costs the engine, in CPU time (usable on a busy machine).

Per yield: ``slo_model.yield_overhead`` (a 256-token pass stepped with a 16-token batch between
every two layer groups, against the same work uninterrupted). Per lone request: one 48-token
item run whole (``ServedModel.run``) against the same item through a resumable pass stepped to
the end (``ServedModel.starter``), which is what a preemptive worker does with nothing to switch
to. Both on a 1-thread NumPy engine, timed with ``time.thread_time`` (the calling thread's CPU
seconds: the engine's own work, whatever else the 2 cores run), best of ``--repeats``, for
``--rounds`` rounds. The trade-off: CPU time leaves out waiting (none here: one thread, no I/O)
but still includes what neighbours do to the shared caches.

    .venv/bin/python benchmarks/preempt_overhead.py --rounds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path


def main() -> None:
    from openhood.models import EngineOptions, ModelSpec, load_model, resolve_model_dir
    from openhood.scheduler.calibrate import best_time

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    args = ap.parse_args()
    path = Path(__file__).resolve().parent / "slo_model.py"
    spec = importlib.util.spec_from_file_location("slo_model", path)
    assert spec is not None and spec.loader is not None
    slo_model = importlib.util.module_from_spec(spec)
    sys.modules["slo_model"] = slo_model  # dataclasses look their module up while the file runs
    spec.loader.exec_module(slo_model)
    model = load_model(ModelSpec(path=str(resolve_model_dir(None))), EngineOptions(backend="numpy", threads=1))
    dummy = model.preprocessor.dummy
    start = model.starter(0)
    assert start is not None  # the NumPy engine yields

    def stepped() -> None:
        p = start([dummy(48)], 48)
        while not p.step():
            pass
        p.result()

    for r in range(args.rounds):
        per_yield, steps = slo_model.yield_overhead(model, dummy, args.repeats)
        whole = best_time(lambda: model.run(0, [dummy(48)], 48), args.repeats, time.thread_time)
        in_steps = best_time(stepped, args.repeats, time.thread_time)
        print(
            f"round {r}: per yield {per_yield * 1e3:.3f} ms CPU ({steps} layer groups); one 48-token item "
            f"whole {whole * 1e3:.2f} ms, in steps {in_steps * 1e3:.2f} ms CPU ({in_steps / whole:.3f}x)",
            flush=True,
        )
    model.close()


if __name__ == "__main__":
    main()
