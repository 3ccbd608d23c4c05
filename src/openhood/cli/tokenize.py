"""``openhood tokenize``: show the tokens of a text, or encode a JSONL corpus to ids in batches.

Examples::

    openhood tokenize "Héllo, wörld!"                       # tokens and ids, default model
    openhood tokenize --model DIR --input corpus.jsonl --output ids.jsonl
    openhood tokenize --model SmolLM2.gguf "12 apples"      # byte-level BPE from a GGUF file

File mode reads ``{"text": ...}`` lines, encodes ``--batch-size`` texts per kernel call, writes
``{"ids": [...]}`` lines in the same order, shows a progress line on stderr and ends with the
throughput. Texts are never echoed in errors or progress: only line numbers and counts.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from openhood.cli import validate as v
from openhood.progress import StatusLine, bar


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "tokenize",
        help="tokenize text or a JSONL corpus with openhood's WordPiece or byte-level BPE tokenizer",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("text", nargs="*", help="text(s) to tokenize (prints tokens and ids)")
    p.add_argument(
        "--model",
        default=None,
        type=v.tokenizer_source,
        help="model folder, tokenizer.json or a .gguf file (byte-level BPE) (default: bundled all-MiniLM-L6-v2)",
    )
    p.add_argument("--input", type=v.existing_file, help='JSONL file of {"text": ...} lines')
    p.add_argument("--output", type=Path, help='JSONL file to write {"ids": [...]} lines to (with --input)')
    p.add_argument(
        "--max-length", type=v.positive_int, default=None, help="truncate to this many ids, specials included"
    )
    p.add_argument(
        "--batch-size", type=v.positive_int, default=4096, help="texts per batch in file mode (default 4096)"
    )
    p.set_defaults(func=run)


def _load(model: str | None):
    from openhood.models import resolve_model_dir
    from openhood.tokenizer import WordPieceTokenizer

    if model and model.endswith(".gguf"):
        from openhood.tokenizer.bpe import BPETokenizer

        return BPETokenizer.from_pretrained(model)
    path = Path(model) if model and Path(model).is_file() else resolve_model_dir(model)
    return WordPieceTokenizer.from_pretrained(path)


def run(args: argparse.Namespace) -> int:
    if args.input is None and not args.text:
        print("openhood tokenize: give TEXT or --input FILE --output FILE", file=sys.stderr)
        return 2
    if args.input is not None and args.output is None:
        print("openhood tokenize: --input needs --output", file=sys.stderr)
        return 2
    if args.batch_size < 1:
        print("openhood tokenize: --batch-size must be >= 1", file=sys.stderr)
        return 2
    if args.model and args.model.endswith(".gguf") and not Path(args.model).is_file():
        print(f"openhood tokenize: {args.model} does not exist", file=sys.stderr)
        return 2
    tok = _load(args.model)
    if args.input is None:
        for text in args.text:
            ids = tok.encode_batch([text], max_length=args.max_length)[0]
            print("tokens:", " ".join(tok.convert_ids_to_tokens(ids)))
            print("ids:   ", " ".join(map(str, ids.tolist())))
        return 0
    return _encode_file(tok, args.input, args.output, args.max_length, args.batch_size)


class _Progress:
    """One self-overwriting stderr line, refreshed at most every 0.2 s."""

    def __init__(self, total_bytes: int):
        self.total = max(total_bytes, 1)
        self.start = time.perf_counter()
        self.status = StatusLine()

    def update(self, done_bytes: int, texts: int, force: bool = False) -> None:
        frac = min(done_bytes / self.total, 1.0)
        rate = texts / max(time.perf_counter() - self.start, 1e-9)
        self.status.update(f"{bar(frac)} {frac:6.1%} {texts} texts {rate:,.0f} texts/s", force=force)


def _encode_file(tok, src: Path, dst: Path, max_length: int | None, batch_size: int) -> int:
    import orjson

    from openhood.corpus import CorpusError, iter_texts

    src = Path(src)
    progress = _Progress(src.stat().st_size)
    n_texts = n_tokens = n_chars = 0
    busy = 0.0  # seconds spent encoding, to report the tokenizer's own throughput too
    t0 = time.perf_counter()
    with dst.open("wb") as fout:
        batch: list[str] = []
        done_bytes = 0

        def flush() -> None:
            nonlocal n_texts, n_tokens, n_chars, busy
            t = time.perf_counter()
            rb = tok.encode_batch(batch, max_length=max_length)
            busy += time.perf_counter() - t
            fout.write(b"".join(orjson.dumps({"ids": row}, option=orjson.OPT_SERIALIZE_NUMPY) + b"\n" for row in rb))
            n_texts += len(batch)
            n_tokens += rb.ids.size
            n_chars += sum(map(len, batch))
            batch.clear()
            progress.update(done_bytes, n_texts)

        try:
            for nbytes, text in iter_texts(src):
                done_bytes += nbytes
                if text is None:  # a blank line
                    continue
                batch.append(text)
                if len(batch) >= batch_size:
                    flush()
        except CorpusError as exc:
            print(f"\nopenhood tokenize: {exc}", file=sys.stderr)
            return 1
        if batch:
            flush()
    progress.update(done_bytes, n_texts, force=True)
    progress.status.close()
    wall = time.perf_counter() - t0
    print(
        f"{n_texts} texts, {n_tokens} tokens, {n_chars} chars in {wall:.2f} s "
        f"({n_texts / wall:,.0f} texts/s, {n_tokens / wall:,.0f} tokens/s end to end; "
        f"encoding alone {n_tokens / max(busy, 1e-9):,.0f} tokens/s, {n_chars / max(busy, 1e-9):,.0f} chars/s) "
        f"→ {dst}"
    )
    return 0
