"""Prefix caching by slot: which tokens each KV-cache slot holds, so a new sequence starts from the
longest prefix of its prompt already computed anywhere in the cache.

A finished sequence's slot keeps its keys/values (a free slot is only overwritten when it is
given out again), and this index remembers their tokens. Admitting a sequence, the scheduler asks
``choose`` for a slot: the free slot holding the longest common prefix with the prompt is taken
as is; when the longest prefix sits in a *running* slot (a shared system prompt being decoded
beside), its positions are copied into the least recently freed slot (a memory copy, ~45 KiB a
token for SmolLM2, against a forward per token). At least the prompt's last token is always
recomputed: its logits give the first sampled token.

Why slots rather than vLLM's hashed blocks or SGLang's radix tree: this cache already gives each
sequence one contiguous slot (the packed forward reads slots as views), so whole-slot reuse costs
no new memory and no paging in the attention; a 2-core server runs a few dozen slots, where a
linear scan of their token lists is microseconds. The memory budget is the slots themselves
(``--gen-max-running`` × context, already reserved), and eviction is LRU over free slots. The
trade-off: a prefix shared by several *running* sequences is stored once per slot (blocks would
share it), and a cached prefix lives only as long as its slot is not reused.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the common prefix of two token lists."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


@dataclass(frozen=True)
class SlotChoice:
    slot: int  # the slot the sequence gets
    source: int  # the slot whose first ``reused`` positions it starts from (== slot: in place)
    reused: int  # prompt tokens not computed again


class SlotPrefixIndex:
    """Tokens held by the free slots, the LRU order of their release, and the cache's counters."""

    def __init__(self, n_slots: int, enabled: bool = True):
        self.enabled = enabled
        self._held: list[list[int]] = [[] for _ in range(n_slots)]  # free slots only; running ones are asked
        self._freed_at = [0] * n_slots
        self._clock = 0
        self.lookups = 0
        self.hits = 0  # admissions that reused at least one token
        self.cached_tokens = 0  # prompt tokens not computed again
        self.evictions = 0  # free slots whose held tokens were dropped unused to serve another prompt

    def choose(self, prompt: list[int], free: list[int], running: dict[int, list[int]]) -> SlotChoice:
        """A slot for ``prompt`` from ``free`` (non-empty); ``running``: slot → tokens in its cache."""
        self.lookups += 1
        limit = len(prompt) - 1  # the last prompt token is always computed (its logits sample token 1)
        best, source = 0, -1
        if self.enabled and limit > 0:
            for slot, held in [*((s, self._held[s]) for s in free), *running.items()]:
                n = min(common_prefix(prompt, held), limit)
                if n > best:
                    best, source = n, slot
        if source in free:
            slot = source
        else:  # the least recently freed slot: its held prefix is the oldest
            slot = min(free, key=lambda s: self._freed_at[s])
        if self._held[slot] and (slot != source or best == 0):  # none of what it held is reused
            self.evictions += 1
        self._held[slot] = []
        if best:
            self.hits += 1
            self.cached_tokens += best
        return SlotChoice(slot, source if best else slot, best)

    def release(self, slot: int, tokens: list[int]) -> None:
        """``slot`` is free and holds the keys/values of ``tokens`` ([] when its contents are not to be trusted)."""
        self._clock += 1
        self._freed_at[slot] = self._clock
        self._held[slot] = list(tokens) if self.enabled else []
