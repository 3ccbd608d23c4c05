"""Test-only fault injection: make the engine fail on purpose, read once at start-up.

``OPENHOOD_FAULT_INJECT`` is a comma list (unset in production; the server logs a warning when
it is set):
- ``health``          the model's readiness probe raises → readiness must turn 503.
- ``embed_len=N``     ``embed`` raises for any batch containing a sequence of exactly N tokens
                      (an "engine exception" that fails exactly that batch → 500).
- ``embed_sleep=S``   every ``embed`` call first sleeps S seconds (holds work in flight, fills
                      the queue, makes the worker look wedged).
- ``step_sleep=S``    every layer group of a resumable pass (preemption) first sleeps S seconds
                      (holds preempted work in flight: the drain test).
- ``prepare_chars=N`` a single-pass model's preprocessor raises for a request holding an input of
                      exactly N characters (one request's preprocessing fails → that request 500).
- ``sample_max_tokens=N`` a generator's sampler raises for every sequence asking for exactly N
                      ``max_tokens`` (one sequence's postprocessing fails mid-batch).
- ``forward_token=ID`` a generator's shared forward raises whenever a row it carries holds token
                      ``ID`` (a fault in the step every running sequence shares).
Each wraps a part of the served model (backend, preprocessor, sampler, decoder) rather than
replacing it or branching inside a route, so everything else stays real.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from openhood.backends.base import Backend, Resumable, resumable_start
from openhood.generate.generator import GenerationConfig, Sampler
from openhood.models import Served, ServedModel
from openhood.models.generation import ServedGenerator
from openhood.models.served import Prepared, Preprocessor

ENV_VAR = "OPENHOOD_FAULT_INJECT"
VALUED = ("embed_len", "embed_sleep", "step_sleep", "prepare_chars", "sample_max_tokens", "forward_token")


class InjectedFault(RuntimeError):
    """Raised by the fault-injecting backend wrapper."""


def parse_faults(spec: str | None) -> dict[str, float | bool]:
    """The fault spec (comma-separated entries of the module docstring) as a dict.

    >>> parse_faults("health,embed_sleep=0.5,forward_token=42")
    {'health': True, 'embed_sleep': 0.5, 'forward_token': 42.0}
    """
    faults: dict[str, float | bool] = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, _, value = part.partition("=")
        if name == "health" and not value:
            faults["health"] = True
        elif name in VALUED and value:
            faults[name] = float(value)
        else:
            raise ValueError(f"unknown {ENV_VAR} entry {part!r} (expected health or one of {', '.join(VALUED)} =N)")
    return faults


class FaultInjectingBackend:
    """Delegates to ``inner`` (a Backend) except where a configured fault fires."""

    def __init__(self, inner: Backend, faults: dict[str, float | bool]):
        self.inner = inner
        self.faults = faults
        self.name, self.precision = inner.name, inner.precision
        self.input_names, self.output_names = inner.input_names, inner.output_names
        self.threads = inner.threads
        if resumable_start(inner) is not None:  # resumable exactly when the wrapped backend is
            self.start = self._start

    def _fire(self, feeds: Mapping[str, np.ndarray]) -> None:
        if "embed_sleep" in self.faults:
            time.sleep(float(self.faults["embed_sleep"]))
        mask = feeds.get("attention_mask")
        if (
            "embed_len" in self.faults
            and mask is not None
            and (np.asarray(mask).sum(axis=1) == int(self.faults["embed_len"])).any()
        ):
            raise InjectedFault("injected engine failure (embed_len)")

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        self._fire(feeds)
        return self.inner.run(feeds)

    def _start(self, feeds: Mapping[str, np.ndarray]) -> Resumable:
        self._fire(feeds)
        start = resumable_start(self.inner)
        assert start is not None  # set only for a resumable inner backend
        return SlowSteps(start(feeds), float(self.faults.get("step_sleep", 0.0)))

    def replicate(self, threads: int | None = None) -> FaultInjectingBackend:
        return FaultInjectingBackend(self.inner.replicate(threads), self.faults)

    def close(self) -> None:
        self.inner.close()


class SlowSteps:
    """A resumable pass whose every step first sleeps ``seconds`` (``step_sleep``)."""

    def __init__(self, inner: Resumable, seconds: float):
        self.inner, self.seconds = inner, seconds

    @property
    def steps(self) -> int:
        return self.inner.steps

    def step(self) -> bool:
        if self.seconds:
            time.sleep(self.seconds)
        return self.inner.step()

    def result(self) -> dict[str, np.ndarray]:
        return self.inner.result()

    def close(self) -> None:
        self.inner.close()


class FaultInjectingPreprocessor:
    """Delegates to ``inner`` except that ``prepare`` raises for an input of ``chars`` characters."""

    def __init__(self, inner: Preprocessor, chars: int):
        self.inner, self.chars = inner, chars
        self.max_length, self.probe_input = inner.max_length, inner.probe_input

    def prepare(self, inputs: Sequence[Any], *args: Any) -> Prepared:
        if any(isinstance(x, str) and len(x) == self.chars for x in inputs):
            raise InjectedFault("injected preprocessing failure (prepare_chars)")
        return self.inner.prepare(inputs, *args)  # *args: TextPreprocessor's direction

    def collate(self, payloads: list[Any], padded_len: int) -> dict[str, np.ndarray]:
        return self.inner.collate(payloads, padded_len)

    def dummy(self, length: int) -> Any:
        return self.inner.dummy(length)


def failing_sampler(inner: Sampler, max_tokens: int) -> Sampler:
    """``inner``, except that it raises for a sequence configured with ``max_tokens``."""

    def sampler(row: np.ndarray, config: GenerationConfig, rng: np.random.Generator) -> int:
        if config.max_tokens == max_tokens:
            raise InjectedFault("injected sampling failure (sample_max_tokens)")
        return inner(row, config, rng)

    return sampler


class FaultInjectingDecoder:
    """A decoder whose ``forward`` raises when a row it carries holds ``token``; else ``inner``'s."""

    def __init__(self, inner: Any, token: int):
        self.inner, self.token = inner, token
        self.config = inner.config

    def new_cache(self, n_slots: int, max_len: int) -> Any:
        return self.inner.new_cache(n_slots, max_len)

    def forward(self, tokens: list[np.ndarray], slots: Any, cache: Any, laps: Any = None) -> np.ndarray:
        if any((row == self.token).any() for row in tokens):
            raise InjectedFault("injected forward failure (forward_token)")
        return np.asarray(self.inner.forward(tokens, slots, cache, laps))


def _failing_probe(worker: int = 0) -> dict[str, Any]:
    raise InjectedFault("injected health failure")


def inject_faults(models: Sequence[Served], faults: dict[str, float | bool]) -> None:
    """Wrap the parts of every model the faults name (and, for ``health``, replace its readiness
    probe) in place."""
    for model in models:
        if isinstance(model, ServedGenerator):
            inject_generator_faults(model, faults)
            continue
        assert isinstance(model, ServedModel)  # every other task is single-pass
        if "prepare_chars" in faults:
            model.preprocessor = FaultInjectingPreprocessor(model.preprocessor, int(faults["prepare_chars"]))
        model.backends = [FaultInjectingBackend(b, faults) for b in model.backends]
        if model.wide is not None:
            model.wide = FaultInjectingBackend(model.wide, faults)
        if faults.get("health"):
            model.probe = _failing_probe  # type: ignore[method-assign]  # the fault replaces the method on purpose


def inject_generator_faults(model: ServedGenerator, faults: dict[str, float | bool]) -> None:
    if "sample_max_tokens" in faults:
        model.sampler = failing_sampler(model.sampler, int(faults["sample_max_tokens"]))
    if "forward_token" in faults:
        # A stand-in with the decoder's interface (config, new_cache, forward), on purpose.
        model.generator.model = FaultInjectingDecoder(model.generator.model, int(faults["forward_token"]))  # type: ignore[assignment]
    if faults.get("health"):
        model.probe = _failing_probe  # type: ignore[method-assign]  # the fault replaces the method on purpose
