"""A byte DFA (``generate.json_grammar``) lifted to a byte-level BPE vocabulary: which tokens each state allows.

For a state ``s``, ``ends(s)`` (V,) is the state each token leads to after all its bytes (-1: some
byte is rejected). The fast path walks *every* token at once: the tokens are sorted by byte length
(longest first) into a (tokens, max length) byte matrix, and step ``j`` advances only the prefix
of tokens longer than ``j``, so one state costs one gather per vocabulary byte (~0.3 M), a few
ms; ``ends_reference`` is the per-token Python walk it is tested against. States are computed on
first visit and kept in a bounded LRU (int16 rows, ~100 KB each), since a schema's automaton can
have thousands of states of which a generation visits a few dozen.

Decoding never paints itself into a corner: ``distance[s]`` is the fewest single-byte tokens
from ``s`` to an accepting state, and a token is allowed only if the rest of the budget
(``max_tokens``) can still finish the text from where it leads. EOS is allowed exactly in
accepting states. Special tokens are never allowed inside the text (the stream decoder drops
their text, which would change what was validated). The trade-off: the guarantee leans on every
byte being a token of its own (true of byte-level BPE; checked when the vocabulary is built).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence

import numpy as np

from openhood.generate.json_grammar import ByteDFA, distances

MASK_CACHE_STATES = 256  # per grammar: ~25 MB of int16 rows at a 49k vocabulary
GRAMMAR_CACHE = 16  # compiled grammars kept per vocabulary (keyed by the canonical schema)
_NEVER = np.iinfo(np.int32).max  # the distance of a state that cannot reach acceptance


class TokenVocabulary:
    """The tokenizer's token bytes, arranged for the vectorized walk; built once per model."""

    def __init__(self, token_bytes: Sequence[bytes], special_ids: frozenset[int]):
        self.size = len(token_bytes)
        self.token_bytes = list(token_bytes)
        regular = [i for i, b in enumerate(token_bytes) if b and i not in special_ids]
        regular.sort(key=lambda i: -len(token_bytes[i]))
        self.ids = np.asarray(regular, dtype=np.int64)  # (T,) longest first
        lengths = np.asarray([len(token_bytes[i]) for i in regular], dtype=np.int64)
        columns = np.zeros((int(lengths.max()), len(regular)), dtype=np.int32)  # (L, T): byte j of each token
        for col, i in enumerate(regular):
            columns[: lengths[col], col] = np.frombuffer(token_bytes[i], dtype=np.uint8)
        self.columns = columns  # row j contiguous: step j reads one run of memory
        self.longer_than = [int((lengths > j).sum()) for j in range(columns.shape[0])]  # prefix sizes
        singles = {token_bytes[i][0] for i in regular if len(token_bytes[i]) == 1}
        self.single_bytes = np.zeros(256, dtype=bool)
        self.single_bytes[list(singles)] = True


def flat_table(dfa: ByteDFA) -> np.ndarray:
    """((states + 1) * 256,) int32: ``dfa.table`` with rejection as an absorbing dead state (the last),
    flattened so a step is one 1-D gather at ``state * 256 + byte``."""
    dead = dfa.n_states
    table = np.vstack([np.where(dfa.table < 0, dead, dfa.table), np.full((1, 256), dead)])
    return table.astype(np.int32).ravel()


def ends_fast(dfa: ByteDFA, vocab: TokenVocabulary, state: int, flat: np.ndarray | None = None) -> np.ndarray:
    """(V,) int32: the state each token leads to from ``state`` (-1: not allowed)."""
    flat = flat_table(dfa) if flat is None else flat
    dead = dfa.n_states
    cur = np.full(vocab.ids.size, state, dtype=np.int32)
    for j, k in enumerate(vocab.longer_than):
        head = cur[:k]
        head *= 256
        head += vocab.columns[j, :k]
        cur[:k] = flat[head]
    out = np.full(vocab.size, -1, dtype=np.int32)
    out[vocab.ids] = np.where(cur == dead, -1, cur)
    return out


def ends_reference(dfa: ByteDFA, vocab: TokenVocabulary, state: int) -> np.ndarray:
    """The naive reference: each regular token's bytes walked one by one."""
    out = np.full(vocab.size, -1, dtype=np.int32)
    for i in vocab.ids:
        out[i] = dfa.walk(state, vocab.token_bytes[i])
    return out


class TokenGrammar:
    """One compiled response format over one vocabulary: per-state token masks, used on the worker thread."""

    def __init__(self, dfa: ByteDFA, vocab: TokenVocabulary, eos_ids: frozenset[int]):
        self.dfa, self.vocab = dfa, vocab
        self.eos = np.asarray(sorted(eos_ids), dtype=np.int64)
        # single-byte tokens only: the budget must hold even if the model spells the rest byte by byte
        self.distance = distances(np.where(vocab.single_bytes[None, :], dfa.table, -1), dfa.accepting)
        # (states + 1,): distance per state, "never" for unreachable acceptance and at index -1 (a rejected token)
        self._dist_pad = np.append(np.where(self.distance < 0, _NEVER, self.distance), _NEVER)
        self._rows: OrderedDict[int, tuple[np.ndarray, int]] = OrderedDict()
        self._flat = flat_table(dfa)

    @property
    def min_tokens(self) -> int:
        """The fewest tokens any accepted text needs: requests with a smaller max_tokens are refused."""
        return int(self.distance[0])

    def _ends(self, state: int) -> tuple[np.ndarray, int]:
        """(ends (V,) int16, the largest distance among allowed next states)."""
        hit = self._rows.get(state)
        if hit is not None:
            self._rows.move_to_end(state)
            return hit
        ends = ends_fast(self.dfa, self.vocab, state, self._flat)
        ends[self._dist_pad[ends] == _NEVER] = -1  # states that can never finish
        allowed = ends[ends >= 0]
        worst = int(self.distance[allowed].max()) if allowed.size else 0
        entry = (ends.astype(np.int16), worst)
        self._rows[state] = entry
        if len(self._rows) > MASK_CACHE_STATES:
            self._rows.popitem(last=False)
        return entry

    def allowed(self, state: int, remaining: int) -> np.ndarray:
        """(V,) bool: the tokens allowed in ``state`` with ``remaining`` tokens of budget (this one included)."""
        ends, worst = self._ends(state)
        ok = ends >= 0
        if worst > remaining - 1:  # near the end of the budget: only tokens that still finish in time
            ok &= self._dist_pad[ends] <= remaining - 1
        ok[self.eos] = bool(self.dfa.accepting[state])
        return ok

    def constrain(self, row: np.ndarray, state: int, remaining: int) -> np.ndarray:
        """``row`` (V,) logits with every disallowed token at -inf (a new array)."""
        return np.where(self.allowed(state, remaining), row, np.float32(-np.inf)).astype(row.dtype, copy=False)

    def advance(self, state: int, token: int) -> int:
        return self.dfa.walk(state, self.vocab.token_bytes[token])


class GrammarCache:
    """Compiled grammars by key (the canonical response format), LRU-bounded; safe from any thread."""

    def __init__(self, vocab: Callable[[], TokenVocabulary], eos_ids: frozenset[int]):
        self._vocab_factory = vocab
        self._vocab: TokenVocabulary | None = None
        self._eos = eos_ids
        self._grammars: OrderedDict[Hashable, TokenGrammar] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, dfa: Callable[[], ByteDFA]) -> TokenGrammar:
        with self._lock:
            hit = self._grammars.get(key)
            if hit is not None:
                self._grammars.move_to_end(key)
                return hit
            if self._vocab is None:
                self._vocab = self._vocab_factory()
            vocab = self._vocab
        grammar = TokenGrammar(dfa(), vocab, self._eos)  # outside the lock: seconds for a big schema
        with self._lock:
            self._grammars[key] = grammar
            if len(self._grammars) > GRAMMAR_CACHE:
                self._grammars.popitem(last=False)
        return grammar
