"""``Generator``: prompt → streamed continuation with the bundled (or any llama GGUF) decoder.

One object holds the tokenizer, the decoder and the chat template. ``stream`` yields text
pieces as they become complete characters; ``generate`` collects them; ``generate_batch`` runs
several prompts as one batch: a joint prefill, then decode steps where finished sequences
leave the batch (each keeps its own KV-cache slot and its own random stream, so its tokens do
not depend on its batch-mates). Stop conditions: EOS (the file's end token, and
``<|endoftext|>`` where the vocabulary has it), ``max_tokens``, and stop strings. The text of a
stop string never reaches the caller: output that could still be the start of one is held
back until it is decided. The trade-off: the loop is plain Python around NumPy calls, which
keeps it readable and costs ~microseconds per token beside a decode step of milliseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from openhood.generate.logprobs import MAX_TOP_LOGPROBS
from openhood.generate.sampling import SamplingParams, sample
from openhood.generate.token_mask import GrammarCache, TokenGrammar, TokenVocabulary


@dataclass(frozen=True)
class GenerationConfig:
    max_tokens: int = 256
    sampling: SamplingParams = field(default_factory=SamplingParams)
    stop: tuple[str, ...] = ()
    logprobs: int | None = None  # None: off; k: each token's logprob and its k most likely alternatives
    grammar: TokenGrammar | None = None  # structured output: only texts this automaton accepts

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        if self.logprobs is not None and not 0 <= self.logprobs <= MAX_TOP_LOGPROBS:
            raise ValueError(f"logprobs must be in [0, {MAX_TOP_LOGPROBS}]")
        if self.grammar is not None and self.grammar.min_tokens > self.max_tokens:
            raise ValueError(
                f"max_tokens is {self.max_tokens}; the response format needs at least {self.grammar.min_tokens}"
            )


# The generate task's postprocessor as the schedulers call it: one row of logits (V,), the
# sequence's config and its own random stream → the next token id. A served generator may wrap
# it (the test-only fault injection does), so it is a value, not a hard-wired call.
Sampler = Callable[[np.ndarray, GenerationConfig, np.random.Generator], int]


def sample_next(row: np.ndarray, config: GenerationConfig, rng: np.random.Generator) -> int:
    return sample(row, config.sampling, rng)


@dataclass
class GenerationResult:
    text: str
    token_ids: list[int]
    prompt_tokens: int
    finish_reason: str  # "stop" (EOS or stop string) or "length"


class SequenceState:
    """One sequence's decoding state: its slot, sampler, emitted text and stop-string hold-back.

    Shared by ``Generator``'s own loop and the server's step scheduler, so both stop, hold back
    and finish a sequence by the same rules (``accept`` once per sampled token).
    """

    def __init__(self, slot: int, prompt_ids: list[int], config: GenerationConfig, decoder: Any):
        self.slot, self.prompt_ids, self.config = slot, prompt_ids, config
        self.rng = config.sampling.rng()
        self.decoder = decoder  # the tokenizer's StreamDecoder(skip_special_tokens=True)
        self.ids: list[int] = []
        self.pending = ""  # decoded, not yet emitted: might be the start of a stop string
        self.finish_reason: str | None = None
        self.grammar_state = 0  # the response format's automaton state (when config.grammar is set)

    def constrain(self, row: np.ndarray) -> np.ndarray:
        """The logits (V,) the sampler may draw from: ``row`` itself, or with the grammar's disallowed tokens at -inf."""
        grammar = self.config.grammar
        if grammar is None:
            return row
        return grammar.constrain(row, self.grammar_state, self.config.max_tokens - len(self.ids))

    def accept(self, token: int, eos_ids: frozenset[int]) -> str:
        """Record one sampled token; return the text now safe to emit."""
        if token in eos_ids:
            self.finish_reason = "stop"
            return self._release(final=True)
        self.ids.append(token)
        if self.config.grammar is not None:
            self.grammar_state = self.config.grammar.advance(self.grammar_state, token)
        self.pending += self.decoder.push(token)
        for s in self.config.stop:
            at = self.pending.find(s)
            if at >= 0:
                self.pending = self.pending[:at]
                self.finish_reason = "stop"
                return self._release(final=True, flush=False)
        if len(self.ids) >= self.config.max_tokens:
            self.finish_reason = "length"
            return self._release(final=True)
        return self._release(final=False)

    def cut(self) -> str:
        """Finish now with ``finish_reason="length"`` (a time limit, a drain); the held-back text."""
        self.finish_reason = "length"
        return self._release(final=True)

    def _release(self, final: bool, flush: bool = True) -> str:
        if final:
            out = self.pending + (self.decoder.flush() if flush else "")
            self.pending = ""
            return out
        hold = max((k for s in self.config.stop for k in range(1, len(s)) if self.pending.endswith(s[:k])), default=0)
        out, self.pending = self.pending[: len(self.pending) - hold], self.pending[len(self.pending) - hold :]
        return out


DEFAULT_WEIGHTS = "quantized"  # one of engine.models.llama.WEIGHT_MODES


class Generator:
    """``Generator(path=None)`` loads the bundled SmolLM2-135M-Instruct GGUF unless given a path.

    ``weights="quantized"`` (the default) keeps the file's Q4_1 / Q8_0 blocks and multiplies them
    in place: ~1/5 of the memory and the faster decode at batch 1; ``"float32"`` dequantizes at
    load (~540 MB for SmolLM2-135M), faster for prefill and wide batches (docs/decoder.md)."""

    def __init__(self, path: str | Path | None = None, weights: str = DEFAULT_WEIGHTS):
        from openhood.engine.models.llama import WEIGHT_MODES, Llama
        from openhood.formats.gguf import GGUFFile
        from openhood.generate.bundled import default_gguf_path
        from openhood.generate.chat import ChatTemplate
        from openhood.process.resident import release_after_warm_up
        from openhood.tokenizer.bpe import BPETokenizer, spec_from_gguf

        if weights not in WEIGHT_MODES:  # before the tokenizer's few seconds of loading
            raise ValueError(f"weights must be one of {', '.join(WEIGHT_MODES)}, not {weights!r}")
        self.path = Path(path) if path is not None else default_gguf_path()
        g = GGUFFile(self.path)
        self.tokenizer = BPETokenizer(spec_from_gguf(g))
        self.weights = weights
        self.model = Llama.from_gguf(g, weights=weights)
        self.model.after_warm_up = release_after_warm_up  # its first decode step frees the compiler's pages
        tok = self.tokenizer
        source = g.get("tokenizer.chat_template")
        name = lambda i: tok.tokens[i] if i is not None else ""  # noqa: E731
        self.chat_template = ChatTemplate(source, name(tok.bos_id), name(tok.eos_id)) if source else None
        eos = {tok.eos_id} if tok.eos_id is not None else set()
        if "<|endoftext|>" in tok.spec.specials:
            eos.add(tok.spec.specials["<|endoftext|>"])
        self.eos_ids = frozenset(eos)
        self.grammars = GrammarCache(self._token_vocabulary, self.eos_ids)  # structured output, per schema

    def _token_vocabulary(self) -> TokenVocabulary:
        tok = self.tokenizer
        return TokenVocabulary([tok.token_bytes(i) for i in range(tok.vocab_size)], tok.special_ids)

    # ---- prompts --------------------------------------------------------------------------------
    def render(self, prompt: str | list[dict], raw: bool = False) -> str:
        """The text the model reads: ``prompt`` as is with ``raw``, else through the chat template."""
        if raw:
            if not isinstance(prompt, str):
                raise ValueError("a raw prompt must be a string")
            return prompt
        return self._template_spans(prompt)[0]

    def _template_spans(self, prompt: str | list[dict]) -> tuple[str, list[tuple[int, int]]]:
        """The chat template's text for ``prompt`` (a user message, or messages) and its contents' spans."""
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        if self.chat_template is None:
            raise ValueError(f"{self.path.name} has no chat template: use raw=True")
        return self.chat_template.render_spans(messages, add_generation_prompt=True)

    def encode_prompt(self, prompt: str | list[dict], raw: bool = False) -> list[int]:
        """Token ids the model reads. Raw prompts parse special-token text as those tokens; chat
        messages go through the template, whose markup is parsed and whose contents never are."""
        if raw:
            ids = self.tokenizer.encode_list(self.render(prompt, raw=True), parse_special=True)
        else:
            text, spans = self._template_spans(prompt)
            ids = self.tokenizer.encode_list(text, parse_special=True, literal_spans=spans)
        if not ids:
            raise ValueError("the prompt is empty")
        return ids

    # ---- generation -----------------------------------------------------------------------------
    def stream(
        self, prompt: str | list[dict], config: GenerationConfig | None = None, raw: bool = False
    ) -> Iterator[str]:
        """Yield the continuation's text as it is produced (never the prompt, never EOS)."""
        config = config or GenerationConfig()
        for _, piece in self._run(self._start([self.encode_prompt(prompt, raw)], config), config):
            yield piece

    def generate(
        self, prompt: str | list[dict], config: GenerationConfig | None = None, raw: bool = False
    ) -> GenerationResult:
        return self.generate_batch([prompt], config, raw)[0]

    def generate_batch(
        self, prompts: list, config: GenerationConfig | None = None, raw: bool = False
    ) -> list[GenerationResult]:
        config = config or GenerationConfig()
        seqs = self._start([self.encode_prompt(p, raw) for p in prompts], config)
        texts = [""] * len(prompts)
        for i, piece in self._run(seqs, config):
            texts[i] += piece
        return [GenerationResult(texts[s.slot], s.ids, len(s.prompt_ids), s.finish_reason or "length") for s in seqs]

    def _start(self, encoded: list[list[int]], config: GenerationConfig) -> list[SequenceState]:
        limit = self.model.config.context_length
        for ids in encoded:
            if len(ids) + config.max_tokens > limit:
                raise ValueError(
                    f"prompt ({len(ids)} tokens) + max_tokens ({config.max_tokens}) exceeds the context of {limit}"
                )
        return [
            SequenceState(i, ids, config, self.tokenizer.stream_decoder(skip_special_tokens=True))
            for i, ids in enumerate(encoded)
        ]

    def _run(self, seqs: list[SequenceState], config: GenerationConfig) -> Iterator[tuple[int, str]]:
        """The step loop: yields (sequence slot, text) as pieces become final."""
        model = self.model
        cache = model.new_cache(len(seqs), max(len(s.prompt_ids) for s in seqs) + config.max_tokens)
        active = seqs
        feed = [np.asarray(s.prompt_ids, dtype=np.int64) for s in seqs]
        while active:
            logits = model.forward(feed, [s.slot for s in active], cache)  # (B, V)
            still, feed = [], []
            for s, row in zip(active, logits, strict=False):
                token = sample(s.constrain(row), config.sampling, s.rng)
                text = s.accept(token, self.eos_ids)
                if text:
                    yield s.slot, text
                if s.finish_reason is None:
                    still.append(s)
                    feed.append(np.array([token], dtype=np.int64))
            active = still
