"""DecodePool: image decoding in worker processes, results handed over in shared memory.

    with DecodePool(spec, workers=2) as pool:               # spec=None: full-resolution mode
        fut = pool.submit(jpeg_bytes_or_path)                # server: one future per request
        with fut.result() as d:                              # Decoded; raises NotAnImage, ...
            batch[i] = d.array                               # uint8 (crop, crop, 3) view of the slot
        for d in pool.imap(paths, ordered=True):             # offline: auto-released on next()
            ...
        for b in pool.batches(paths, batch_size=32):         # Batch: pixels (B, crop, crop, 3)
            ...

Design and trade-offs:
- One segment holds a ring of fixed-size slots sized from the model input (crop² × 3 bytes)
  or, in full-resolution mode, for ``full_max_pixels``. A slot is taken when a task is sent
  to a worker and freed when the consumer releases its ``Decoded``; with no free slot, tasks
  wait, and ``submit`` blocks once ``queue_depth`` tasks wait (back-pressure all the way up).
- Tasks are dispatched in submission order (FIFO) and a retried task keeps its slot, so
  ordered iteration cannot deadlock on slots held by later items as long as the consumer
  holds fewer than ``slots`` results at a time.
- Workers are fresh interpreters (``python -m openhood.data.worker``) started with
  ``subprocess`` and talking over a socketpair. Not ``fork``: the serving process has threads
  (ONNX Runtime pools, exporters, the event loop) whose locks a forked child may inherit held.
  Not multiprocessing's ``spawn``/``forkserver`` either: both re-run the caller's main module
  in every worker (a script without a ``__main__`` guard starts pools recursively) and pickle
  the process arguments. The price is ~0.3 s of imports per worker, paid at start and after a
  crash only.
- One dispatcher thread in the consumer process owns every pipe and waits on them plus a
  wake-up pipe. A worker's death shows as EOF on its pipe, so a SIGKILLed worker is noticed
  at once, replaced, and its item retried once, then failed with ``WorkerCrashed`` — never
  a hang.
- Pixels stay uint8 in the slots; ``image.normalize`` turns a batch into float32 in the
  consumer (4× fewer bytes written and read than float32 slots).
- Cleanup: ``close`` (the context manager, atexit, and SIGTERM when no one else handles it)
  unlinks the segment; a SIGKILLed owner's segment is removed by the next pool's
  ``shm.sweep_stale`` before it reports ready.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import weakref
from collections import deque
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

import numpy as np

from openhood.data import shm, worker
from openhood.data.image import MAX_PIXELS, CorruptImage, ImageSpec, ImageTooLarge, NotAnImage, normalize

FULL_MAX_PIXELS = 3840 * 2160  # full-resolution slots hold up to 4K by default
MAX_ATTEMPTS = 2  # a crashed worker's item is retried once
DEPTH = 2  # tasks queued per worker, so it never waits for the pool between two images
START_TIMEOUT_S = 60.0
# A task sent to a busy worker waits in the socket's buffer (~200 KB on Linux) until the worker
# reads it. A larger payload would block the send — and the dispatcher, holding the pool's lock,
# so every submit and release (a server's event loop) — until the worker finished its image.
# Larger payloads go to an idle worker only.
QUEUED_PAYLOAD_BYTES = 64 * 1024


class PoolError(RuntimeError):
    """Base of the pool's own failures (the image errors come from ``openhood.data.image``)."""


class WorkerCrashed(PoolError):
    """The item's worker died (e.g. SIGKILL, OOM) on every attempt."""


class UnreadableFile(PoolError):
    """A path given to ``submit`` could not be read."""


class DecodeFailed(PoolError):
    """An unexpected error inside the decoder; only this item fails."""


class PoolFull(PoolError):
    """``submit`` waited ``timeout`` seconds and the queue stayed full (HTTP 429)."""


class PoolClosed(PoolError):
    """The pool closed before the item was decoded."""


_ERRORS = {
    worker.NOT_AN_IMAGE: NotAnImage,
    worker.CORRUPT: CorruptImage,
    worker.TOO_LARGE: ImageTooLarge,
    worker.UNREADABLE: UnreadableFile,
    worker.FAILED: DecodeFailed,
}


class Decoded:
    """One decoded image: ``array`` is a uint8 (H, W, 3) view of a shared slot, valid until
    ``release()`` (or the end of a ``with`` block); copy it to keep it longer."""

    __slots__ = ("__weakref__", "_release", "array", "error", "index")

    def __init__(self, index: int, array: np.ndarray | None, release=None, error: Exception | None = None):
        self.index, self.array, self.error, self._release = index, array, error, release

    def release(self) -> None:
        if self._release is not None:
            release, self._release, self.array = self._release, None, None
            release()

    def __enter__(self) -> Decoded:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


@dataclass
class Batch:
    """``pixels`` uint8 (B, crop, crop, 3) holds the images that decoded, in ``indices`` order
    (input positions); ``errors`` maps each failed input position to its exception."""

    indices: list[int]
    pixels: np.ndarray
    errors: dict[int, Exception] = field(default_factory=dict)


@dataclass
class _Task:
    item: int
    kind: int
    payload: bytes
    future: Future
    slot: int | None = None
    attempts: int = 0  # dispatches to a worker that was decoding it
    queued: bool = False  # has left the pending queue once (its semaphore unit is returned)


@dataclass
class _Worker:
    proc: subprocess.Popen
    conn: Connection
    ready: bool = False
    tasks: deque = field(default_factory=deque)  # sent, unanswered; the worker takes them FIFO


class DecodePool:
    """N decode worker processes writing into a ring of shared-memory slots.

    spec: the model's ImageSpec (slots of crop×crop×3), or None for full-resolution decoding
        (slots of ``full_max_pixels``×3; larger images fail with ImageTooLarge).
    workers: worker processes. slots: shared slots (default 4 per worker; for ``batches``,
        give at least 2 × batch size so batch k+1 decodes while batch k is used).
    queue_depth: tasks allowed to wait for a worker or slot before ``submit`` blocks.
    """

    def __init__(
        self,
        spec: ImageSpec | None = None,
        *,
        workers: int = 2,
        slots: int | None = None,
        queue_depth: int | None = None,
        max_pixels: int = MAX_PIXELS,
        full_max_pixels: int = FULL_MAX_PIXELS,
    ):
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.spec = spec
        self.n_workers = workers
        self.slots = slots or 4 * workers
        self.queue_depth = queue_depth or self.slots
        if spec is None:
            self.max_pixels = min(max_pixels, full_max_pixels)
            self.slot_bytes = self.max_pixels * 3
        else:
            self.max_pixels = max_pixels
            self.slot_bytes = spec.crop * spec.crop * 3
        self.restarts = 0
        # Reentrant: futures are resolved under the lock, and a done-callback may release a slot.
        self._lock = threading.RLock()
        self._room = threading.Semaphore(self.queue_depth)
        self._pending: deque[_Task] = deque()
        self._free = deque(range(self.slots))
        self._workers: list[_Worker] = []
        self._next_item = 0
        self._closed = False
        self._broken: Exception | None = None
        self._segment: shm.Segment | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    # -- public API ------------------------------------------------------------------------

    def submit(self, image: bytes | str | os.PathLike, *, timeout: float | None = None) -> Future:
        """Queue one image (encoded bytes, or a path the worker reads); the future's result is
        a ``Decoded`` or it raises NotAnImage / CorruptImage / ImageTooLarge / UnreadableFile /
        WorkerCrashed / DecodeFailed. Blocks while ``queue_depth`` tasks wait; PoolFull after
        ``timeout`` seconds."""
        if isinstance(image, (str, os.PathLike)):
            kind, payload = worker.PATH, os.fsencode(Path(image).resolve())
        else:
            kind, payload = worker.BYTES, bytes(image)
        self._check_open()
        if not self._room.acquire(timeout=timeout):
            raise PoolFull(f"{self.queue_depth} images are already waiting to be decoded")
        fut: Future = Future()
        with self._lock:
            if self._closed or self._broken:
                self._room.release()
                self._check_open()
            self._next_item += 1
            self._pending.append(_Task(self._next_item, kind, payload, fut))
        self._wake()
        return fut

    def imap(self, images, *, ordered: bool = True, prefetch: int | None = None):
        """Yield a ``Decoded`` per input (``.index`` = input position); failures come as a
        ``Decoded`` with ``.error`` set and no array. Up to ``prefetch`` (default: slots)
        images are in flight ahead of the consumer. Each result is released when the next one
        is requested — copy ``.array`` to keep it."""
        prefetch = min(prefetch or self.slots, self.slots)
        done: deque = deque()  # unordered: finished (index, future) in completion order
        cond = threading.Condition()

        def finished(index, fut):
            with cond:
                done.append((index, fut))
                cond.notify()

        window: deque = deque()
        source = enumerate(images)
        exhausted = False
        previous: Decoded | None = None
        try:
            while True:
                while not exhausted and len(window) < prefetch:
                    nxt = next(source, None)
                    if nxt is None:
                        exhausted = True
                        break
                    index, image = nxt
                    fut = self.submit(image)
                    window.append((index, fut))
                    if not ordered:
                        fut.add_done_callback(functools.partial(finished, index))
                if previous is not None:
                    previous.release()  # before waiting: its slot may be the one the next needs
                    previous = None
                if not window:
                    return
                if ordered:
                    index, fut = window.popleft()
                else:
                    with cond:
                        cond.wait_for(lambda: done)
                        index, fut = done.popleft()
                    window.remove((index, fut))
                previous = _as_decoded(index, fut)
                yield previous
        finally:
            if previous is not None:
                previous.release()
            for _, fut in window:  # abandoned early: free their slots when they land
                fut.add_done_callback(_release_result)

    def batches(self, images, batch_size: int, *, ordered: bool = True, prefetch: int | None = None):
        """Yield ``Batch``es of up to batch_size images (model mode only). Decoding of the next
        batch runs in the workers while the caller uses this one; ``prefetch`` defaults to
        2 × batch_size (capped at ``slots``)."""
        if self.spec is None:
            raise ValueError("batches() needs a pool built with an ImageSpec (fixed output size)")
        prefetch = prefetch or 2 * batch_size
        indices: list[int] = []
        errors: dict[int, Exception] = {}
        pixels = np.empty((batch_size, *self.spec.shape), np.uint8)  # (B, crop, crop, 3)
        for d in self.imap(images, ordered=ordered, prefetch=prefetch):
            if d.error is not None:
                errors[d.index] = d.error
            else:
                pixels[len(indices)] = d.array
                indices.append(d.index)
                d.release()
            if len(indices) + len(errors) == batch_size:
                yield Batch(indices, pixels[: len(indices)].copy(), errors)
                indices, errors = [], {}
        if indices or errors:
            yield Batch(indices, pixels[: len(indices)].copy(), errors)

    def pipeline(self, images, batch_size: int, infer, *, ordered: bool = True):
        """Yield ``(Batch, infer(x))`` with x = ``normalize(batch.pixels)`` float32 (B, 3, crop, crop):
        the workers decode batch k+1 while ``infer`` runs on batch k. Full overlap needs
        ``slots`` ≥ 2 × batch_size. An all-failed batch yields ``(batch, None)``."""
        spec = self.spec
        for batch in self.batches(images, batch_size, ordered=ordered):
            assert spec is not None  # batches() refused a pool without one
            yield batch, (infer(normalize(batch.pixels, spec)) if batch.indices else None)

    def stats(self) -> dict:
        """Gauges for metrics and tests: pending tasks, free slots, busy worker pids, restarts."""
        with self._lock:
            return {
                "pending": len(self._pending),
                "free_slots": len(self._free),
                "busy": {w.proc.pid: [t.item for t in w.tasks] for w in self._workers if w.tasks and w.ready},
                "workers": [w.proc.pid for w in self._workers],
                "restarts": self.restarts,
                "segment": self._segment.name if self._segment else None,
            }

    def close(self) -> None:
        """Stop the workers, fail what is still queued with PoolClosed, unlink the segment.
        Idempotent; called by ``__exit__``, atexit and the SIGTERM handler."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake()
        thread = getattr(self, "_thread", None)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)
        for w in self._workers:
            w.conn.close()  # EOF: the worker leaves its loop
        for w in self._workers:
            try:
                w.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                w.proc.kill()
                w.proc.wait()
        with self._lock:
            tasks = list(self._pending) + [t for w in self._workers for t in w.tasks]
            self._pending.clear()
            self._workers.clear()
        for task in tasks:
            _fail(task.future, PoolClosed("the decode pool closed before this image was decoded"))
        if self._segment is not None:
            self._segment.close()
        wake_r, wake_w = self._wake_r, self._wake_w
        self._wake_w = -1  # _wake must never write to a recycled descriptor
        os.close(wake_w)
        os.close(wake_r)
        _LIVE.discard(self)

    def __enter__(self) -> DecodePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

    def _start(self) -> None:
        shm.sweep_stale()
        need = self.slots * self.slot_bytes
        shm.check_free(need)
        segment = self._segment = shm.Segment.create(need)
        self._slots = np.frombuffer(segment.buf, dtype=np.uint8)
        _LIVE.add(self)
        _install_sigterm()
        for _ in range(self.n_workers):
            self._workers.append(self._spawn())
        # Wait for every worker's READY so a broken environment fails here, not on first use.
        for w in self._workers:
            try:
                if not w.conn.poll(START_TIMEOUT_S):
                    raise PoolError(f"decode worker {w.proc.pid} did not start within {START_TIMEOUT_S:.0f} s")
                self._on_message(w, w.conn.recv_bytes())
            except EOFError:
                raise PoolError(f"decode worker {w.proc.pid} exited while starting (code {w.proc.wait()})") from None
        self._thread = threading.Thread(target=self._dispatch_loop, name="decode-pool", daemon=True)
        self._thread.start()

    def _spawn(self) -> _Worker:
        parent, child = socket.socketpair()
        spec = json.dumps(asdict(self.spec) if self.spec is not None else None)
        assert self._segment is not None  # created before any worker
        args = [str(child.fileno()), self._segment.name, str(self.slot_bytes), str(self.max_pixels), spec]
        # The worker imports openhood from where we did, even if only sys.path knew it.
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_SRC, env.get("PYTHONPATH")]))
        proc = subprocess.Popen(
            [sys.executable, "-m", "openhood.data.worker", *args],
            pass_fds=[child.fileno()],
            stdin=subprocess.DEVNULL,
            env=env,
        )
        child.close()
        return _Worker(proc, Connection(parent.detach()))

    def _dispatch_loop(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
                self._dispatch()
                workers = list(self._workers)
            ready = wait([w.conn for w in workers] + [self._wake_r])
            if self._wake_r in ready:
                try:
                    os.read(self._wake_r, 4096)
                except OSError:
                    return  # closed under us
            for w in workers:
                if w.conn in ready:
                    try:
                        msg = w.conn.recv_bytes()
                    except (EOFError, OSError):
                        msg = None  # the worker is gone
                    with self._lock:
                        if self._closed:
                            return
                        if msg is None:
                            self._on_death(w)
                        else:
                            self._on_message(w, msg)

    def _dispatch(self) -> None:
        """Send waiting tasks, oldest first, to the least busy worker while slots are free
        (lock held)."""
        ready = [w for w in self._workers if w.ready]
        while self._pending and ready and (self._pending[0].slot is not None or self._free):
            w = min(ready, key=lambda x: len(x.tasks))
            if len(w.tasks) >= DEPTH or (w.tasks and len(self._pending[0].payload) > QUEUED_PAYLOAD_BYTES):
                return
            task = self._pending.popleft()
            if not task.queued:
                task.queued = True
                self._room.release()
                if not task.future.set_running_or_notify_cancel():
                    continue  # cancelled while it waited
            if task.slot is None:
                task.slot = self._free.popleft()
            w.tasks.append(task)
            task.attempts += 1
            try:
                w.conn.send_bytes(worker.TASK.pack(task.item, task.slot, task.kind))
                w.conn.send_bytes(task.payload)
            except OSError:
                pass  # the worker died: EOF on its pipe reports it and the task is retried

    def _on_message(self, w: _Worker, msg: bytes) -> None:
        item, slot, status, h, wd, c, _dtype, n = worker.RESULT.unpack_from(msg)  # dtype: always uint8
        if status == worker.READY:
            w.ready = True
            return
        if not w.tasks or w.tasks[0].item != item:
            return
        task = w.tasks.popleft()
        if status == worker.OK:
            n_bytes = h * wd * c
            start = slot * self.slot_bytes
            view = self._slots[start : start + n_bytes].reshape(h, wd, c)  # uint8 (H, W, 3)
            task.future.set_result(Decoded(item, view, lambda s=slot: self._release(s)))
        else:
            self._free.append(slot)
            error = msg[worker.RESULT.size : worker.RESULT.size + n].decode("utf-8", "replace")
            task.future.set_exception(_ERRORS.get(status, DecodeFailed)(error))

    def _on_death(self, w: _Worker) -> None:
        """A worker exited: replace it and retry its item once (lock held)."""
        self._workers.remove(w)
        w.conn.close()
        try:
            code = w.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # closed its pipe but lingers: make sure
            w.proc.kill()
            code = w.proc.wait()
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        if not w.ready:
            self._broken = PoolError(f"a decode worker died while starting ({how})")
            for task in list(self._pending) + [t for x in self._workers for t in x.tasks]:
                _fail(task.future, self._broken)
            self._pending.clear()
            return
        self.restarts += 1
        self._workers.append(self._spawn())  # READY arrives through the dispatch loop
        if not w.tasks:
            return
        culprit, *queued = w.tasks  # the worker was decoding the first; the rest never started
        for task in reversed(queued):
            task.attempts -= 1
            self._pending.appendleft(task)
        if culprit.attempts < MAX_ATTEMPTS:
            self._pending.appendleft(culprit)  # keeps its slot and its place in line
        else:
            self._free.append(culprit.slot)
            culprit.future.set_exception(
                WorkerCrashed(f"decode worker died ({how}) on each of {culprit.attempts} attempts at this image")
            )

    def _release(self, slot: int) -> None:
        with self._lock:
            if self._closed:
                return
            self._free.append(slot)
        self._wake()

    def _wake(self) -> None:
        fd = self._wake_w
        if fd >= 0:
            with contextlib.suppress(OSError):  # closed or full: the loop is awake anyway
                os.write(fd, b"x")

    def _check_open(self) -> None:
        if self._broken is not None:
            raise self._broken
        if self._closed:
            raise PoolClosed("the decode pool is closed")


def _as_decoded(index: int, fut: Future) -> Decoded:
    try:
        d = fut.result()
    except (PoolError, NotAnImage, CorruptImage, ImageTooLarge) as e:
        if isinstance(e, PoolClosed):
            raise
        return Decoded(index, None, error=e)
    d.index = index
    return d


def _release_result(fut: Future) -> None:
    if not fut.cancelled() and fut.exception() is None:
        fut.result().release()


def _fail(fut: Future, error: Exception) -> None:
    if not fut.done() and (fut.running() or fut.set_running_or_notify_cancel()):
        fut.set_exception(error)


_SRC = str(Path(__file__).resolve().parents[2])  # the directory holding the openhood package
_LIVE: weakref.WeakSet[DecodePool] = weakref.WeakSet()
_sigterm_installed = False


def _close_all() -> None:
    for pool in list(_LIVE):
        pool.close()


def _install_sigterm() -> None:
    """Turn SIGTERM into SystemExit so ``with`` blocks and atexit unlink the segments — only if
    nobody else handles SIGTERM (a server installs its own and closes the pool on drain)."""
    global _sigterm_installed
    if _sigterm_installed or threading.current_thread() is not threading.main_thread():
        return
    _sigterm_installed = True
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


atexit.register(_close_all)
