"""``openhood generate``: stream a decoder LLM's continuation of a prompt to stdout.

Examples::

    openhood generate "What is the capital of France?"            # bundled SmolLM2, chat template
    openhood generate --temperature 0 --max-tokens 64 "Write a haiku"   # greedy
    openhood generate --raw "<|im_start|>user\\nHi<|im_end|>\\n<|im_start|>assistant\\n"

Only the continuation is printed (not the prompt, not the end-of-sequence token), piece by
piece as characters complete. A usage mistake is one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

from openhood.cli.validate import usage_error


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate",
        help="generate text with a decoder LLM (default: bundled SmolLM2-135M-Instruct)",
        description=__doc__.splitlines()[0],
    )
    p.add_argument("prompt", help="the prompt (a user message, or the model's raw input with --raw)")
    p.add_argument(
        "--model", type=Path, default=None, help="a llama-architecture .gguf file (default: bundled SmolLM2)"
    )
    p.add_argument("--max-tokens", type=int, default=256, help="most tokens to generate (default 256)")
    p.add_argument("--temperature", type=float, default=0.7, help="0 = greedy (default 0.7)")
    p.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens (0 = off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold (1 = off)")
    p.add_argument("--seed", type=int, default=None, help="random seed for sampling")
    p.add_argument("--stop", action="append", default=[], help="stop before this string (repeatable)")
    p.add_argument("--raw", action="store_true", help="no chat template; special tokens in the prompt are parsed")
    p.add_argument(
        "--weights",
        default=None,
        help="quantized or float32. quantized: multiply the file's Q4_1/Q8_0 blocks in place (default: least memory, fastest "
        "one-stream decode); float32: dequantize at load (~5x the memory, faster long prompts)",
    )
    p.set_defaults(func=run)


_usage = functools.partial(usage_error, "generate")


def run(args: argparse.Namespace) -> int:
    from openhood.process.blas_threads import sleep_idle_blas_threads

    sleep_idle_blas_threads()  # before NumPy loads OpenBLAS: its pollers would share the decode's cores
    from openhood.generate import GenerationConfig, Generator, SamplingParams
    from openhood.generate.bundled import DecoderModelNotFoundError
    from openhood.generate.generator import DEFAULT_WEIGHTS
    from openhood.process.allocator import apply_malloc_policy

    if not args.prompt:
        return _usage("the prompt is empty")
    if args.model is not None and not args.model.is_file():
        return _usage(f"{args.model} does not exist")
    try:
        config = GenerationConfig(
            max_tokens=args.max_tokens,
            sampling=SamplingParams(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed),
            stop=tuple(args.stop),
        )
        apply_malloc_policy("pinned")  # prefill temporaries mapped and returned, not heap fragments
        gen = Generator(args.model, weights=args.weights or DEFAULT_WEIGHTS)  # a bad mode: ValueError, exit 2
        for piece in gen.stream(args.prompt, config, raw=args.raw):
            sys.stdout.write(piece)
            sys.stdout.flush()
    except (ValueError, DecoderModelNotFoundError) as exc:
        return _usage(str(exc))
    sys.stdout.write("\n")
    return 0
