"""``ServedGenerator``: the ``generate`` task's served unit, a decoder LLM from a GGUF file.

It plays ``ServedModel``'s part for the server (name, task, aliases, ``describe``, ``probe``,
``close``) around an ``openhood.generate.Generator`` (tokenizer, chat template, decoder, EOS
ids): the route renders and tokenizes prompts with it, the step scheduler (``scheduler.
generation``) drives its decoder. The trade-off: it is not a ``ServedModel`` (no collate, no
dynamic batcher: generation is stepped, not batched once), so the server keeps one runtime kind
per scheduling kind rather than forcing generation through the single-pass path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from openhood.generate.generator import Generator, Sampler, sample_next
from openhood.generate.sampling import SamplingParams, sample
from openhood.models.options import EngineOptions
from openhood.models.served import model_entry
from openhood.models.tasks import Task

TASK = Task.GENERATE
PROBE_PROMPT = "Hi"  # readiness: one real token from this raw prompt


@dataclass
class ServedGenerator:
    name: str
    path: Path
    generator: Generator
    info: dict = field(default_factory=dict)
    memory_bytes: int = 0
    buckets: tuple[int, ...] | None = None  # unused (no length buckets); set by load_model like every model
    task: Task = TASK
    threads: int = 0  # BLAS threads of the thread that runs the decoder (0 = BLAS's default)
    sampler: Sampler = sample_next  # the postprocessor the step scheduler calls per sequence

    def __post_init__(self) -> None:
        self._probe_ids = self.generator.encode_prompt(PROBE_PROMPT, raw=True)
        # A private one-slot cache: the probe never takes a slot or budget from the scheduler.
        self._probe_cache = self.decoder.new_cache(1, len(self._probe_ids) + 1)

    @property
    def decoder(self) -> Any:
        return self.generator.model

    @property
    def aliases(self) -> set[str]:
        return {self.name, self.name.rsplit("/", 1)[-1]}

    @property
    def context_length(self) -> int:
        return int(self.decoder.config.context_length)

    @property
    def max_length(self) -> int:
        return self.context_length

    @property
    def workers(self) -> int:
        return 1

    def bind_thread(self) -> None:
        """Called once on the thread that will run the decoder: its BLAS thread count."""
        if self.threads:
            from openhood.engine.kernels.blas import blas

            blas().set_threads_local(self.threads)

    def probe(self, worker: int = 0) -> dict:
        """Generate one token (greedy) on the calling thread (the scheduler's, between steps);
        raises when the logits are not finite or the token is not in the vocabulary."""
        t0 = time.perf_counter()
        self._probe_cache.reset(0)
        logits = self.decoder.forward([np.asarray(self._probe_ids, dtype=np.int64)], [0], self._probe_cache)  # (1, V)
        if not np.isfinite(logits).all():
            raise RuntimeError("probe logits are not finite")
        token = sample(logits[0], SamplingParams(temperature=0.0), np.random.default_rng(0))
        if not 0 <= token < len(self.generator.tokenizer.tokens):
            raise RuntimeError(f"probe token {token} is outside the vocabulary")
        return {"probe_ms": round((time.perf_counter() - t0) * 1000, 3), "worker": worker, "probe_tokens": 1}

    def describe(self) -> dict:
        """The /v1/models entry (OpenAI's shape plus openhood's facts)."""
        return model_entry(self.name, self.task, self.max_length, self.info)

    def close(self) -> None:
        pass  # NumPy weights and the memory-mapped file go with the object


def decoder_threads(options: EngineOptions) -> int:
    """BLAS threads for the decoder (0 = BLAS's default). Generation runs on one scheduler
    thread, so it gets the wide engine's threads (every core the process may use) when there is
    one, else the engines' ``threads``. Never ``threads × workers``: with ``--threads 2`` on 2
    cores that asked BLAS for 4 threads, and oversubscribed cores made every decode step wait on
    a descheduled BLAS thread."""
    return options.wide_threads or options.threads or 0


def load_generator(name: str, path: Path, options: EngineOptions) -> ServedGenerator:
    """A llama-architecture GGUF file → the served generator, on ``options.decoder_weights``
    (``--gen-weights``; which one wins where: docs/decoder.md § Weights)."""
    gen = Generator(path, weights=options.decoder_weights)
    threads = decoder_threads(options)
    c = gen.model.config
    info: dict[str, object] = {
        "backend": "numpy",
        "precision": "fp32" if gen.weights == "float32" else "gguf-quantized",  # the file's Q4_1/Q8_0 blocks
        "weights": gen.weights,
        "format": "gguf",
        "layers": c.n_layers,
        "dim": c.dim,
        "context_length": c.context_length,
        "chat_template": gen.chat_template is not None,
    }
    info["threads"] = threads or None
    return ServedGenerator(name, path, gen, info, threads=threads)
