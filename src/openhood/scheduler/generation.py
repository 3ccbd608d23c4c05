"""Continuous batching for generation: sequences join and leave the running batch at every step.

One worker thread owns the decoder and its KV cache (one slot per running sequence) and loops:

1. drop what is over (client gone, request time limit, drain cut) and free those slots;
2. admit waiting sequences, oldest first, while a slot is free and the KV-cache byte budget
   holds their reservation (prompt + ``max_tokens`` positions, so an admitted sequence can
   never run out of cache mid-answer); beyond the budget they wait, past ``max_waiting`` the
   caller gets ``QueueFullError`` (→ 429);
3. one **packed forward** (``engine.models.llama``: rows are packed, not padded) over every running
   sequence that has its prompt in the cache (each feeds its last sampled token, rows at
   different positions) *and* the next chunk of waiting prompts. The chunk is sized by
   ``StepBudget`` (``scheduler.step_budget``): with streams decoding, only as many prompt tokens
   as keep the step within ``step_stretch`` decode steps of the whole running batch (fitted from
   the recent steps' times), at most ``prefill_chunk``; with nobody decoding, the whole ``prefill_chunk``. A long
   prompt is spread over several steps, so it stretches everyone's next token by a bounded
   factor, never by the whole prompt. A sequence whose prompt is complete samples its first
   token from that forward's logits.

Each iteration is three calls, the way vLLM v1 splits its engine step: ``schedule`` (retire,
admit through the ``KVCacheManager``, which alone owns slots, reservations and prefix reuse,
then choose the step's rows: a ``StepPlan``), ``execute`` (the one forward) and ``update``
(sample, advance, finish and free).

Decode rows and prompt chunks share one forward because a forward's fixed cost (one pass over
every weight) is most of a small decode step: two forwards per step would double the gap that
every stream sees whenever a prompt is being read.

Who calls what: the HTTP layer (event loop) calls ``submit`` (non-blocking) with a ``sink``
that receives ``TokenEvent``/``FinishEvent`` on the worker thread (the route forwards them into
an asyncio queue), and ``GenerationHandle.cancel`` when its client leaves; readiness calls
``run_exclusive``; the drain calls ``cut_all`` at the grace deadline and ``stop``. Sampling and
stop strings are ``generate.SequenceState``'s, so the server stops exactly where ``Generator``
does. Faults are isolated per sequence: an exception while admitting (its sampler state), sampling
or stopping *one* sequence finishes that sequence alone with ``finish_reason="error"`` and the
batch goes on; only an exception in the shared forward fails the rows that forward carried
(their cache slots are half-written), each of them with a complete ``"error"`` finish at once.
Every submitted sequence gets exactly one ``FinishEvent``, whatever fails, so no client hangs.

Per-sequence extras run on the worker thread inside that sequence's own fault boundary, only for
sequences that asked: a response format's grammar masks the row before sampling
(``SequenceState.constrain``), and ``logprobs`` adds the sampled token's float64 log-softmax and
its top alternatives to the token's event (``generate.logprobs``), from the unmasked row.

The trade-off: one thread and one cache (no second worker); every sequence's next token waits
for the whole step, prompt chunk included, and a prompt that arrives while many streams decode
waits more steps for its first token.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from itertools import count
from typing import Any, Protocol

import numpy as np

from openhood.generate.generator import GenerationConfig, Sampler, SequenceState, sample_next
from openhood.generate.logprobs import TokenLogprobs, token_logprobs
from openhood.scheduler.batcher import QueueFullError, SchedulerStoppedError
from openhood.scheduler.kv_manager import new_manager
from openhood.scheduler.policy import GenerationPolicy
from openhood.scheduler.prefix_cache import SlotPrefixIndex
from openhood.scheduler.step_budget import StepBudget

log = logging.getLogger("openhood.scheduler")


class StepDecoder(Protocol):
    """What the scheduler drives: ``forward`` appends each row's tokens to its slot, returns (B, V)."""

    def new_cache(self, n_slots: int, max_len: int) -> Any: ...

    def forward(self, tokens: list[np.ndarray], slots: Any, cache: Any, laps: Any = None) -> np.ndarray: ...


@dataclass(frozen=True)
class TokenEvent:
    """Text made final by the latest sampled token ('' while held back); ``tokens``: sampled so far.
    ``logprobs``: that token's, for a sequence that asked (``GenerationConfig.logprobs``), else ()."""

    text: str
    tokens: int
    t_ns: int  # monotonic
    logprobs: tuple[TokenLogprobs, ...] = ()


@dataclass(frozen=True)
class FinishEvent:
    """The sequence is over; its slot is free. ``finish_reason``: stop, length or cancelled."""

    text: str  # the last released text ('' when none)
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    submitted_ns: int
    admitted_ns: int  # 0 when it never left the queue
    first_token_ns: int  # 0 when no token was sampled
    end_ns: int
    cut: bool  # finished early by the time limit or the drain's grace deadline
    logprobs: tuple[TokenLogprobs, ...] = ()  # the last sampled token's (EOS has none), when asked


Sink = Callable[[TokenEvent | FinishEvent], None]


@dataclass(frozen=True)
class StepInfo:
    """One scheduler iteration, for metrics."""

    decode_rows: int
    prefill_rows: int
    prefill_tokens: int
    sampled: int  # tokens sampled this step (one per decode row, one per completed prefill)
    seconds: float


@dataclass
class StepPlan:
    """What one step runs (``schedule``'s answer): decode rows, then prompt chunks, in one forward."""

    decode: list[_Seq]
    prefill: list[tuple[_Seq, int]]  # (sequence, prompt tokens this step)

    @property
    def empty(self) -> bool:
        return not (self.decode or self.prefill)

    def carried(self) -> list[_Seq]:
        return [*self.decode, *(s for s, _ in self.prefill)]


@dataclass(eq=False)
class _Seq:
    id: int
    prompt_ids: list[int]
    config: GenerationConfig
    sink: Sink
    state: SequenceState | None  # made when admitted (it needs the slot)
    new_decoder: Callable[[], Any]
    submitted_ns: int
    deadline_ns: int
    reserved_tokens: int
    slot: int = -1
    reuse_from: int = -1  # the slot whose first ``prefilled`` positions it starts from (set at admission)
    prefilled: int = 0  # prompt tokens already in the cache
    last_token: int = -1
    sampled: int = 0
    admitted_ns: int = 0
    first_token_ns: int = 0
    cancelled: bool = False
    cut_reason: str | None = None


@dataclass(eq=False)
class GenerationHandle:
    """What ``submit`` returns: ``cancel()`` frees the sequence at the next step (client gone)."""

    _seq: _Seq
    _scheduler: GenerationScheduler = field(repr=False)

    @property
    def id(self) -> int:
        return self._seq.id

    def cancel(self) -> None:
        self._scheduler._cancel(self._seq)


class GenerationScheduler:
    """See the module docstring. ``start()`` once, ``submit`` from anywhere, ``stop()`` at the end."""

    def __init__(
        self,
        decoder: StepDecoder,
        policy: GenerationPolicy,
        *,
        eos_ids: frozenset[int],
        new_decoder: Callable[[], Any],
        context_length: int,
        on_step: Callable[[StepInfo], None] | None = None,
        on_thread_start: Callable[[], None] | None = None,
        sampler: Sampler = sample_next,
        name: str = "",
    ):
        self.decoder = decoder
        self.policy = policy
        self.eos_ids = eos_ids
        self._new_decoder = new_decoder  # a fresh StreamDecoder per sequence
        self.max_context = min(policy.max_context, context_length)
        self.kv = new_manager(decoder, policy, self.max_context)  # slots, reservations, prefixes: worker thread only
        self.prefill_computed = 0  # prompt tokens run through the forward (the rest came from the prefix cache)
        self.budget = StepBudget(policy.prefill_chunk, policy.step_stretch)  # worker thread only
        self._on_step = on_step
        self._on_thread_start = on_thread_start  # e.g. set the worker thread's BLAS threads
        self.sampler = sampler
        self.sequence_faults = 0  # sequences finished with "error" by a fault of their own
        self.forward_faults = 0  # shared forwards that raised (each failed the rows it carried)
        self._cond = threading.Condition()  # guards the queues and flags below, never held in a forward
        self._waiting: deque[_Seq] = deque()
        self._jobs: deque[tuple[Callable[[], object], Future[object]]] = deque()
        self._running: list[_Seq] = []  # worker thread only
        self._stopping = False
        self._cut_all = False
        self._busy_since_ns: int | None = None
        self.kv_tokens_used = 0  # positions filled in running slots (written by the worker after each step)
        self.n_running = 0
        self._ids = count(1)
        self._thread = threading.Thread(target=self._loop, name=f"openhood-{name or 'gen'}-scheduler", daemon=True)

    # ---- called from the event loop -------------------------------------------------------------
    @property
    def workers(self) -> int:
        return 1

    @property
    def queue_depth(self) -> int:
        return len(self._waiting)

    @property
    def worker_alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def bytes_per_token(self) -> int:
        """KV-cache bytes one position of one sequence takes (the KV manager's figure)."""
        return self.kv.bytes_per_token

    @property
    def prefix(self) -> SlotPrefixIndex:
        """The prefix cache's index and counters (hits, cached tokens, evictions)."""
        return self.kv.prefix

    @property
    def kv_bytes_used(self) -> int:
        return self.kv_tokens_used * self.bytes_per_token

    def busy_for_s(self) -> float:
        since = self._busy_since_ns
        return 0.0 if since is None else (time.monotonic_ns() - since) / 1e9

    def start(self) -> None:
        self._thread.start()

    def check_fits(self, prompt_tokens: int, max_tokens: int) -> None:
        """ValueError saying why a request can never run here (the route answers 400)."""
        if max_tokens > self.policy.max_tokens:
            raise ValueError(f"max_tokens is {max_tokens}; this server allows at most {self.policy.max_tokens}")
        need = prompt_tokens + max_tokens
        if need > self.max_context:
            raise ValueError(
                f"the prompt ({prompt_tokens} tokens) plus max_tokens ({max_tokens}) is {need} tokens; "
                f"this model is served with a context of {self.max_context} tokens"
            )
        if need * self.bytes_per_token > self.policy.kv_cache_bytes:
            raise ValueError(
                f"the prompt plus max_tokens needs {need * self.bytes_per_token} bytes of KV cache; "
                f"the server's budget is {self.policy.kv_cache_bytes}"
            )

    def submit(self, prompt_ids: list[int], config: GenerationConfig, sink: Sink) -> GenerationHandle:
        """Queue one sequence; events go to ``sink`` on the worker thread. Raises ``ValueError``
        (never fits), ``QueueFullError`` (→ 429) or ``SchedulerStoppedError`` (→ 503)."""
        self.check_fits(len(prompt_ids), config.max_tokens)
        now = time.monotonic_ns()
        seq = _Seq(
            next(self._ids),
            list(prompt_ids),
            config,
            sink,
            None,
            self._new_decoder,
            now,
            now + int(self.policy.timeout_s * 1e9),
            len(prompt_ids) + config.max_tokens,
        )
        with self._cond:
            if self._stopping:
                raise SchedulerStoppedError("the server is shutting down")
            if len(self._waiting) >= self.policy.max_waiting:
                raise QueueFullError(len(self._waiting), self.policy.max_waiting, retry_after_s=1)
            self._waiting.append(seq)
            self._cond.notify_all()
        return GenerationHandle(seq, self)

    def run_exclusive(self, fn: Callable[[], object], worker: int = 0) -> Future[object]:
        """Run ``fn`` on the worker thread between two steps (readiness, warm-up)."""
        future: Future[object] = Future()
        with self._cond:
            self._jobs.append((fn, future))
            self._cond.notify_all()
        return future

    def cut_all(self) -> None:
        """The drain's grace period is over: every sequence finishes at the next step ("length")."""
        with self._cond:
            self._cut_all = True
            self._cond.notify_all()

    def stop(self, timeout: float | None = None) -> bool:
        """No new sequences; running and waiting ones finish (cut when ``timeout`` runs out).
        True when the worker has exited."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if not self._thread.is_alive():
            return True
        self._thread.join(timeout)
        if self._thread.is_alive():
            self.cut_all()
            self._thread.join(1.0)
        return not self._thread.is_alive()

    def _cancel(self, seq: _Seq) -> None:
        with self._cond:
            seq.cancelled = True
            self._cond.notify_all()

    # ---- the worker thread ----------------------------------------------------------------------
    def _loop(self) -> None:
        if self._on_thread_start is not None:
            self._on_thread_start()
        while True:
            with self._cond:
                while not (self._jobs or self._waiting or self._running or self._stopping):
                    self._cond.wait()
                jobs = list(self._jobs)
                self._jobs.clear()
                if self._stopping and not (jobs or self._waiting or self._running):
                    return
            for fn, future in jobs:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn())
                    except BaseException as exc:
                        future.set_exception(exc)
            self._busy_since_ns = time.monotonic_ns()
            try:
                self._step()
            except Exception:  # a fault outside any one sequence and outside the forward: a bug here
                log.exception("generation step failed: finishing every running sequence")
                self._fail_running()
            finally:
                self._busy_since_ns = None

    def _step(self) -> None:
        """One iteration: ``schedule`` what runs, ``execute`` its forward, ``update`` every sequence."""
        t0 = time.perf_counter()
        plan = self.schedule()
        logits = self.execute(plan)
        self.update(plan, logits, t0)

    def schedule(self) -> StepPlan:
        """Retire what is over, admit what fits (the KV-cache manager decides), and choose this
        step's decode rows and prompt chunk (``StepBudget`` sizes the chunk)."""
        self._retire_and_admit()
        decode = [s for s in self._running if s.prefilled == len(s.prompt_ids)]
        reading = [s for s in self._running if s.prefilled < len(s.prompt_ids)]
        return StepPlan(
            decode, self._prefill_chunk(reading, self.budget.prefill_tokens(len(decode), len(self._running)))
        )

    def execute(self, plan: StepPlan) -> np.ndarray | None:
        """The one packed forward over the plan's rows → (B, V) logits (decode rows, then chunks);
        None when it raised: every row it carried is marked failed (its slot is half-written)."""
        if plan.empty:
            return np.empty((0, 0), dtype=np.float32)
        feed = [np.array([s.last_token], dtype=np.int64) for s in plan.decode] + [
            np.asarray(s.prompt_ids[s.prefilled : s.prefilled + n], dtype=np.int64) for s, n in plan.prefill
        ]
        slots = [s.slot for s in plan.carried()]
        try:
            return np.asarray(self.decoder.forward(feed, slots, self.kv.cache))
        except Exception:
            self.forward_faults += 1
            carried = plan.carried()
            log.exception("generation forward failed: finishing the %d sequence(s) it carried", len(carried))
            for s in carried:
                s.cut_reason = "error"
            return None

    def update(self, plan: StepPlan, logits: np.ndarray | None, t0: float) -> None:
        """Sample each row's token (per-sequence fault boundary), advance prompts, finish what is
        over and free its slot, then account for the step."""
        sampled = 0
        if logits is not None:
            for s, row in zip(plan.decode, logits[: len(plan.decode)], strict=True):
                self._accept(s, row)
            sampled += len(plan.decode)
            for (s, n), row in zip(plan.prefill, logits[len(plan.decode) :], strict=True):
                s.prefilled += n
                if s.prefilled == len(s.prompt_ids):  # prompt complete: this row's logits give token 1
                    self._accept(s, row)
                    sampled += 1
        self._running = [s for s in self._running if not self._finish_if_done(s)]
        self.n_running = len(self._running)
        self.kv_tokens_used = self.kv.tokens_used([s.slot for s in self._running])
        if logits is None or plan.empty:
            return
        seconds = time.perf_counter() - t0
        prefill_tokens = sum(n for _, n in plan.prefill)
        self.prefill_computed += prefill_tokens
        self.budget.observe(len(plan.decode) + prefill_tokens, seconds)
        if self._on_step is not None:
            try:
                self._on_step(StepInfo(len(plan.decode), len(plan.prefill), prefill_tokens, sampled, seconds))
            except Exception:  # metrics must never fail the batch
                log.exception("generation on_step hook failed")

    def _prefill_chunk(self, candidates: list[_Seq], budget: int) -> list[tuple[_Seq, int]]:
        """(sequence, tokens) of this step's prompt chunk: oldest first, ``budget`` tokens in all."""
        chunk: list[tuple[_Seq, int]] = []
        for s in candidates:
            if budget <= 0:
                break
            n = min(len(s.prompt_ids) - s.prefilled, budget)
            chunk.append((s, n))
            budget -= n
        return chunk

    def _accept(self, s: _Seq, row: np.ndarray) -> None:
        """Sample and record one token for ``s``; a fault here finishes ``s`` alone ("error")."""
        assert s.state is not None
        try:
            token = self.sampler(s.state.constrain(row), s.config, s.state.rng)  # a grammar masks the row
            k = s.config.logprobs
            lp = (token_logprobs(row, token, k),) if k is not None and token not in self.eos_ids else ()
            s.sampled += 1
            now = time.monotonic_ns()
            if s.first_token_ns == 0:
                s.first_token_ns = now
            s.last_token = token
            text = s.state.accept(token, self.eos_ids)
        except Exception:
            self._sequence_fault(s, "sampling")
            return
        if s.state.finish_reason is None:
            self._emit(s, TokenEvent(text, s.sampled, now, lp))
        else:
            self._release(s, s.state.finish_reason, text, logprobs=lp)

    def _sequence_fault(self, s: _Seq, stage: str) -> None:
        """``s`` failed on its own: it leaves the batch at the end of this step with "error"."""
        self.sequence_faults += 1
        log.exception(
            "generation %s failed for one sequence: finishing it alone",
            stage,
            extra={"fields": {"event": "sequence_fault", "stage": stage, "prompt_tokens": len(s.prompt_ids)}},
        )
        s.cut_reason = "error"

    def _retire_and_admit(self) -> None:
        now = time.monotonic_ns()
        with self._cond:
            cut_all = self._cut_all
            for s in self._running:
                if s.cancelled:
                    s.cut_reason = "cancelled"
                elif cut_all or now > s.deadline_ns:
                    s.cut_reason = "length"
            gone = [s for s in self._waiting if s.cancelled or cut_all or now > s.deadline_ns]
            for s in gone:
                self._waiting.remove(s)
            admitted = []
            # First come, first served: a big request that does not fit is not overtaken forever.
            while self._waiting and self.kv.fits(self._waiting[0].reserved_tokens):
                head = self._waiting.popleft()
                running = {s.slot: self._fed(s) for s in self._running if s.slot >= 0}
                choice = self.kv.allocate(head.prompt_ids, head.reserved_tokens, running)
                head.slot, head.reuse_from, head.prefilled = choice.slot, choice.source, choice.reused
                admitted.append((head, choice))
        if cut_all and (gone or self._running):
            log.warning(
                "drain grace period over: cutting %d running and %d waiting sequence(s)",
                sum(1 for s in self._running if s.cut_reason == "length"),
                len(gone),
                extra={
                    "fields": {
                        "event": "generation_cut",
                        "message": "drain deadline: sequences cut",
                        "running": len(self._running),
                        "waiting": len(gone),
                    }
                },
            )
        for s in gone:
            self._finish(s, "cancelled" if s.cancelled else "length", "", cut=not s.cancelled)
        self._running = [s for s in self._running if not self._finish_if_done(s)]
        for s, choice in admitted:
            s.admitted_ns = now
            try:
                self.kv.prepare(choice)  # its prompt's first tokens may be in the cache already
                s.state = SequenceState(s.slot, s.prompt_ids, s.config, s.new_decoder())
            except Exception:
                self._sequence_fault(s, "admission")
                self._release(s, "error", "")
                continue
            self._running.append(s)

    def _finish_if_done(self, s: _Seq) -> bool:
        """Free ``s`` if it finished (or was cut) and report it; True when it left the batch."""
        if s.cut_reason is not None:
            cut = s.cut_reason == "length"
            self._release(s, s.cut_reason, self._cut_text(s) if cut else "", cut=cut)
        return s.slot < 0

    def _cut_text(self, s: _Seq) -> str:
        """The held-back text of a sequence cut short ('' when its state cannot give it)."""
        try:
            return s.state.cut() if s.state is not None else ""
        except Exception:
            log.exception("generation cut failed for one sequence")
            return ""

    def _release(
        self, s: _Seq, reason: str, text: str, cut: bool = False, logprobs: tuple[TokenLogprobs, ...] = ()
    ) -> None:
        if s.slot >= 0:
            # the slot keeps what it holds for a later prompt with the same prefix (not after a fault)
            self.kv.free(s.slot, s.reserved_tokens, self._fed(s) if reason != "error" else [])
            s.slot = -1
        self._finish(s, reason, text, cut, logprobs)

    def _finish(self, s: _Seq, reason: str, text: str, cut: bool, logprobs: tuple[TokenLogprobs, ...] = ()) -> None:
        s.cut_reason = None
        self._emit(
            s,
            FinishEvent(
                text,
                reason,
                len(s.prompt_ids),
                s.sampled,
                s.submitted_ns,
                s.admitted_ns,
                s.first_token_ns,
                time.monotonic_ns(),
                cut,
                logprobs,
            ),
        )

    def _emit(self, s: _Seq, event: TokenEvent | FinishEvent) -> None:
        try:
            s.sink(event)
        except Exception:  # the listener is gone (e.g. its event loop closed): nobody to stream to
            s.cancelled = True

    def _fed(self, s: _Seq) -> list[int]:
        """The tokens whose keys/values ``s``'s slot holds: its prompt, then its sampled tokens, as fed."""
        n = self.kv.length(s.slot)
        ids = s.state.ids if s.state is not None else []
        return (s.prompt_ids + ids)[:n] if n > len(s.prompt_ids) else s.prompt_ids[:n]

    def _fail_running(self) -> None:
        for s in self._running:
            if s.slot >= 0:  # not already finished in the step that raised
                self._release(s, "error", "")
        self._running = []
        self.n_running = 0
        self.kv_tokens_used = 0
