"""``KVCacheManager``: the one owner of the decoder's KV-cache slots, reservations and prefix reuse.

The step scheduler asks it, and only it, whether a waiting sequence fits (a free slot and room in
the byte budget for its reservation: prompt + ``max_tokens`` positions, so an admitted sequence
never runs out of cache mid-answer), which slot it gets (``prefix_cache.SlotPrefixIndex``: the
free slot holding the longest prefix of its prompt, or a copy of a running slot's), to make that
slot ready (reset, prefix copied), and to take a slot back when its sequence ends (remembering
what the slot holds for a later prompt, unless a fault left it half-written). Slots go out
lowest first, so a batch's slots stay consecutive and the packed forward reads them as views.
The trade-off: called from the scheduler's worker thread only (admission happens between steps),
so it holds no lock of its own; the scheduler's condition guards the waiting queue around it.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from openhood.scheduler.policy import GenerationPolicy
from openhood.scheduler.prefix_cache import SlotChoice, SlotPrefixIndex


class SlotCache(Protocol):
    """The decoder's KV cache as the manager sees it (``engine.models.kv_cache.KVCache``)."""

    lengths: np.ndarray  # (slots,) positions filled per slot

    @property
    def bytes_per_token(self) -> int: ...

    def reset(self, slot: int) -> None: ...

    def copy_prefix(self, src: int, dst: int, n: int) -> None: ...


class KVCacheManager:
    def __init__(self, cache: SlotCache, policy: GenerationPolicy):
        self.cache = cache
        self.bytes_per_token = int(cache.bytes_per_token)
        self.budget_tokens = policy.kv_cache_bytes // self.bytes_per_token
        self.prefix = SlotPrefixIndex(policy.max_running, policy.prefix_cache)
        self._free = list(range(policy.max_running))
        self.reserved_tokens = 0

    @property
    def free_slots(self) -> list[int]:
        return list(self._free)

    def fits(self, reserved_tokens: int) -> bool:
        """A free slot, and room in the budget for ``reserved_tokens`` more positions."""
        return bool(self._free) and self.reserved_tokens + reserved_tokens <= self.budget_tokens

    def allocate(self, prompt: list[int], reserved_tokens: int, running: dict[int, list[int]]) -> SlotChoice:
        """Take a slot (and the reservation) for ``prompt``; ``running``: slot → tokens it holds."""
        choice = self.prefix.choose(prompt, self._free, running)
        self._free.remove(choice.slot)
        self.reserved_tokens += reserved_tokens
        return choice

    def prepare(self, choice: SlotChoice) -> None:
        """Make the chosen slot hold exactly the reused prefix (copied in when it lives elsewhere)."""
        self.cache.reset(choice.slot)
        if choice.reused:
            if choice.source != choice.slot:
                self.cache.copy_prefix(choice.source, choice.slot, choice.reused)
            self.cache.lengths[choice.slot] = choice.reused

    def free(self, slot: int, reserved_tokens: int, held: list[int]) -> None:
        """``slot`` is free again; ``held``: the tokens its keys/values stand for ([] after a fault)."""
        self.prefix.release(slot, held)
        self._free.append(slot)
        self._free.sort()  # lowest slots first keeps a batch's slots consecutive (no gather)
        self.reserved_tokens -= reserved_tokens

    def length(self, slot: int) -> int:
        return int(self.cache.lengths[slot])

    def tokens_used(self, slots: list[int]) -> int:
        return sum(self.length(s) for s in slots)


def new_manager(decoder: Any, policy: GenerationPolicy, max_context: int) -> KVCacheManager:
    """The decoder's cache for ``policy.max_running`` slots of ``max_context`` positions, managed."""
    return KVCacheManager(decoder.new_cache(policy.max_running, max_context), policy)
