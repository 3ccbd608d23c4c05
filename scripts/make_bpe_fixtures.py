"""Record llama.cpp's token ids for SmolLM2's tokenizer, once, as the cross-check fixture.

Run in the reference environment (llama-cpp-python lives there, never in openhood's):

    PYTHONPATH=$PWD/src /work/main/.venv-ref/bin/python scripts/make_bpe_fixtures.py

It also builds the HF ``tokenizers`` reference (``openhood.tokenizer.bpe_anchor``) and prints
how many texts llama.cpp and HF disagree on. It writes ``tests/fixtures/bpe_llamacpp.json``:
the hand-written texts with llama.cpp's ids, and for a deterministic sample of the dev corpus
only line numbers and ids (the corpus itself is not committed; tests read it when present).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "tokenizer"))

from bpe_cases import BPE_NASTY  # noqa: E402

from openhood.generate.bundled import default_gguf_path  # noqa: E402
from openhood.tokenizer.bpe import spec_from_gguf  # noqa: E402
from openhood.tokenizer.bpe_anchor import hf_bpe_tokenizer  # noqa: E402

DEV = ROOT.parent.parent / "shared" / "data" / "dev_corpus.jsonl"
DEV = DEV if DEV.is_file() else Path("/work/shared/data/dev_corpus.jsonl")
DEV_EVERY = 100  # every 100th line: ~400 texts


def main() -> None:
    import llama_cpp

    path = default_gguf_path()
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    hf = hf_bpe_tokenizer(spec_from_gguf(path))

    def lc(text: str) -> list[int]:
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    nasty = [{"text": t, "ids": lc(t)} for t in BPE_NASTY]
    lines = DEV.read_text(encoding="utf-8").splitlines()
    dev = [{"line": n, "ids": lc(json.loads(lines[n])["text"])} for n in range(0, len(lines), DEV_EVERY)]
    diff_nasty = [r["text"] for r in nasty if hf.encode(r["text"]).ids != r["ids"]]
    diff_dev = [r["line"] for r in dev if hf.encode(json.loads(lines[r["line"]])["text"]).ids != r["ids"]]
    print(
        f"llama.cpp vs HF tokenizers: {len(diff_nasty)}/{len(nasty)} nasty texts differ, "
        f"{len(diff_dev)}/{len(dev)} dev-corpus lines differ"
    )
    for t in diff_nasty:
        print("  differs:", repr(t)[:80])
    out = ROOT / "tests" / "fixtures" / "bpe_llamacpp.json"
    out.write_text(
        json.dumps(
            {
                "model": path.name,
                "llama_cpp_python": llama_cpp.__version__,
                "dev_every": DEV_EVERY,
                "nasty": nasty,
                "dev": dev,
            },
            ensure_ascii=False,
        )
        + "\n",
        encoding="utf-8",
    )
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
