"""Test-only fault injection: make the engine fail on purpose, read once at start-up.

``OPENHOOD_FAULT_INJECT`` is a comma list (unset in production; the server logs a warning when
it is set):
- ``health``          the model's readiness probe raises → readiness must turn 503.
- ``embed_len=N``     ``embed`` raises for any batch containing a sequence of exactly N tokens
                      (an "engine exception" that fails exactly that batch → 500).
- ``embed_sleep=S``   every ``embed`` call first sleeps S seconds (holds work in flight, fills
                      the queue, makes the worker look wedged).
It wraps the real backend rather than replacing it, so everything else stays real.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from openhood.backends.base import Backend
from openhood.models import ServedModel

ENV_VAR = "OPENHOOD_FAULT_INJECT"


class InjectedFault(RuntimeError):
    """Raised by the fault-injecting backend wrapper."""


def parse_faults(spec: str | None) -> dict[str, float | bool]:
    """The fault spec (comma-separated ``health``, ``embed_len=N``, ``embed_sleep=S``) as a dict.

    >>> parse_faults("health,embed_sleep=0.5")
    {'health': True, 'embed_sleep': 0.5}
    """
    faults: dict[str, float | bool] = {}
    for part in (spec or "").split(","):
        part = part.strip()
        if not part:
            continue
        name, _, value = part.partition("=")
        if name == "health" and not value:
            faults["health"] = True
        elif name in ("embed_len", "embed_sleep") and value:
            faults[name] = float(value)
        else:
            raise ValueError(f"unknown {ENV_VAR} entry {part!r} (expected health, embed_len=N, embed_sleep=S)")
    return faults


class FaultInjectingBackend:
    """Delegates to ``inner`` (a Backend) except where a configured fault fires."""

    def __init__(self, inner: Backend, faults: dict[str, float | bool]):
        self.inner = inner
        self.faults = faults
        self.name, self.precision = inner.name, inner.precision
        self.input_names, self.output_names = inner.input_names, inner.output_names
        self.threads = inner.threads

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        if "embed_sleep" in self.faults:
            time.sleep(float(self.faults["embed_sleep"]))
        mask = feeds.get("attention_mask")
        if (
            "embed_len" in self.faults
            and mask is not None
            and (np.asarray(mask).sum(axis=1) == int(self.faults["embed_len"])).any()
        ):
            raise InjectedFault("injected engine failure (embed_len)")
        return self.inner.run(feeds)

    def replicate(self, threads: int | None = None) -> FaultInjectingBackend:
        return FaultInjectingBackend(self.inner.replicate(threads), self.faults)

    def close(self) -> None:
        self.inner.close()


def _failing_probe(worker: int) -> dict[str, Any]:
    raise InjectedFault("injected health failure")


def inject_faults(models: list[ServedModel], faults: dict[str, float | bool]) -> None:
    """Wrap every model's backends (and, for ``health``, replace its readiness probe) in place."""
    for model in models:
        model.backends = [FaultInjectingBackend(b, faults) for b in model.backends]
        if model.wide is not None:
            model.wide = FaultInjectingBackend(model.wide, faults)
        if faults.get("health"):
            model.probe = _failing_probe  # type: ignore[method-assign]  # the fault replaces the method on purpose
