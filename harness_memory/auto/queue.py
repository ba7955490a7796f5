"""The debounced update queue: one pending batch per (user, agent type, session).

Why debounce: extracting after every turn would cost one model call per turn and re-read the
same context; waiting until the conversation goes quiet (``debounce_seconds`` after the last
message) batches a burst of turns into one call. Why a maximum wait: steady traffic would
otherwise postpone the update forever, so a batch is due at
``min(last + debounce, first + max_wait)`` at the latest. Why a minimum interval: at a human
pace (a reply every 30-90 s) the 30 s debounce would fire after almost every turn — one model call
per turn. So after a session's first extraction the next one is not due before
``previous + min_interval_seconds`` (this wins over ``max_wait``); the first extraction of a session
is never held back, and a batch of ``batch_max_messages`` messages or ``batch_max_user_tokens``
tokens of user text (half the extraction's conversation budget) is due at once, so nothing the
user said has to be cut from the extraction prompt.

Bounded depth (``queue_max`` pending batches): a new capture for a key already pending merges
into it (no growth; flags OR-ed). A capture for a NEW key when the queue is full evicts the
batch waiting longest — not dropped but handed to the workers at once (its debounce is cut
short), which loses nothing. Only when the workers are so far behind that the ready list is
full too is the oldest ready batch dropped, with a warning and a counter.

Sessions that session memory summarises too (``carried``): their extraction waits for the
session's next summary and rides along in that call (one model call for both, ``rider.py``), so
its due time is the summary — or ``min_interval_seconds`` after the last message (the user has
left; no summary is coming) or ``summary_wait_seconds`` after the first, whichever comes first —
and at once by the normal rules when the same user starts talking in another session.

``DebounceQueue`` is the pure state (time is passed in: tests and the benchmark use a virtual
clock); ``QueueWorker`` runs it with worker threads so the user's run never waits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from .model import Batch, CapturedMessage, QueueKey, Signals

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    debounce_seconds: float = 30.0
    max_wait_seconds: float = 300.0
    min_interval_seconds: float = 0.0
    queue_max: int = 1000
    batch_max_messages: int = 200
    batch_max_user_tokens: int = 4000
    max_attempts: int = 3
    retry_delay_seconds: float = 30.0
    summary_wait_seconds: float = 7200.0


@dataclass(slots=True)
class QueueStats:
    submitted: int = 0
    merged: int = 0
    expedited: int = 0
    dropped: int = 0
    processed: int = 0
    failed: int = 0
    retried: int = 0
    abandoned: int = 0


class DebounceQueue:
    """Pending batches by key plus a bounded ready list. Not thread-safe (the worker locks)."""

    def __init__(self, policy: QueuePolicy) -> None:
        self.policy = policy
        self.pending: dict[QueueKey, Batch] = {}
        self.ready: deque[Batch] = deque()
        self.stats = QueueStats()
        #: When each key's last batch was taken for processing (for ``min_interval_seconds``).
        self.last_taken: dict[QueueKey, float] = {}

    def __len__(self) -> int:
        return len(self.pending) + len(self.ready)

    def due_at(self, batch: Batch) -> float:
        p = self.policy
        if len(batch.messages) >= p.batch_max_messages or batch.user_tokens >= p.batch_max_user_tokens:
            return max(batch.first_at, batch.not_before)
        if batch.carried:  # waiting for the session's next summary to ride along
            due = min(batch.last_at + max(p.debounce_seconds, p.min_interval_seconds),
                      batch.first_at + p.summary_wait_seconds)
            return max(due, batch.not_before)
        due = min(batch.last_at + p.debounce_seconds, batch.first_at + p.max_wait_seconds)
        previous = self.last_taken.get(batch.key)
        if previous is not None:
            due = max(due, previous + p.min_interval_seconds)
        return max(due, batch.not_before)

    def add(self, key: QueueKey, messages: list[CapturedMessage], signals: Signals, now: float,
            carried: bool = False) -> None:
        self.stats.submitted += 1
        self._release_other_sessions(key)
        batch = self.pending.get(key)
        if batch is not None:
            batch.extend(messages, signals, now)
            batch.carried = batch.carried or carried
            self.stats.merged += 1
            return
        if len(self.pending) >= self.policy.queue_max:
            oldest = min(self.pending.values(), key=lambda b: b.first_at)
            del self.pending[oldest.key]
            self._make_ready(oldest)
            self.stats.expedited += 1
            log.info("auto-memory queue full (%d): updating %s now instead of after its debounce",
                     self.policy.queue_max, oldest.key)
        self.pending[key] = Batch(key, list(messages), signals, first_at=now, last_at=now, carried=carried)

    def take_session(self, session_id: str, now: float, busy: set[QueueKey],
                     accept: Callable[[QueueKey], bool]) -> Batch | None:
        """The pending batch of ``session_id`` that ``accept`` allows (due or not: it rides along in
        a summary call), or None. With several (other agent types), the one waiting longest."""
        found = [b for b in self.pending.values()
                 if b.key.session_id == session_id and b.key not in busy and accept(b.key)]
        if not found:
            return None
        batch = min(found, key=lambda b: b.first_at)
        del self.pending[batch.key]
        self._taken(batch.key, now)
        return batch

    def _release_other_sessions(self, key: QueueKey) -> None:
        """The user moved on to another session: the summary their other sessions' extractions
        wait for may never come, and the new session should soon see what they said — so those
        batches stop waiting and follow the normal rules (debounce, ``min_interval_seconds``)."""
        for other in self.pending.values():
            if other.carried and other.key.session_id != key.session_id and other.key.user_id == key.user_id \
                    and other.key.agent_type == key.agent_type:
                other.carried = False

    def drain(self) -> list[Batch]:
        """Take every queued batch out (the ready ones first), leaving the queue empty."""
        out = [*self.ready, *self.pending.values()]
        self.ready.clear()
        self.pending.clear()
        return out

    def drop_user(self, user_id: str) -> int:
        """Discard every queued batch of ``user_id`` (the user asked to forget everything)."""
        keys = [k for k in self.pending if k.user_id == user_id]
        for key in keys:
            del self.pending[key]
        kept = deque(b for b in self.ready if b.key.user_id != user_id)
        dropped = len(keys) + len(self.ready) - len(kept)
        self.ready = kept
        return dropped

    def requeue(self, batch: Batch, now: float) -> bool:
        """Put a failed batch back (merged with anything newer for its key); False when it has
        used its attempts and is abandoned."""
        batch.attempts += 1
        if batch.attempts >= self.policy.max_attempts:
            self.stats.abandoned += 1
            return False
        self.stats.retried += 1
        batch.not_before = now + self.policy.retry_delay_seconds
        newer = self.pending.pop(batch.key, None)
        if newer is not None:
            batch.extend(newer.messages, newer.signals, newer.last_at)
            batch.first_at = min(batch.first_at, newer.first_at)
            batch.carried = batch.carried or newer.carried
        self.pending[batch.key] = batch
        return True

    def take(self, now: float, busy: set[QueueKey], force: bool = False) -> Batch | None:
        """The next batch to process (ready first, then the most overdue pending one), or None.
        ``force`` treats every pending batch as due (flush). Keys in ``busy`` wait."""
        for i, batch in enumerate(self.ready):
            if batch.key not in busy:
                del self.ready[i]
                self._taken(batch.key, now)
                return batch
        best: Batch | None = None
        best_due = 0.0
        for batch in self.pending.values():
            if batch.key in busy:
                continue
            due = batch.first_at if force else self.due_at(batch)
            if (force or due <= now) and (best is None or due < best_due):
                best, best_due = batch, due
        if best is not None:
            del self.pending[best.key]
            self._taken(best.key, now)
        return best

    def _taken(self, key: QueueKey, now: float) -> None:
        self.last_taken[key] = now
        if len(self.last_taken) > 2 * self.policy.queue_max:  # forget keys whose interval has passed
            horizon = now - self.policy.min_interval_seconds
            for old in [k for k, t in self.last_taken.items() if t < horizon]:
                del self.last_taken[old]

    def next_due(self, busy: set[QueueKey]) -> float | None:
        if any(b.key not in busy for b in self.ready):
            return float("-inf")
        dues = [self.due_at(b) for b in self.pending.values() if b.key not in busy]
        return min(dues) if dues else None

    def _make_ready(self, batch: Batch) -> None:
        if len(self.ready) >= self.policy.queue_max:
            lost = self.ready.popleft()
            self.stats.dropped += 1
            log.warning("auto-memory workers are behind: dropped the pending update of %s (%d messages)",
                        lost.key, len(lost.messages))
        self.ready.append(batch)


ProcessFn = Callable[[Batch], bool]


class QueueWorker:
    """Runs ``process(batch)`` for due batches on ``workers`` daemon threads (started lazily).

    ``process`` returns True when the batch is done (applied, skipped or rejected for good) and
    False to retry it later; an exception counts as False. ``start_threads=False`` gives a
    manual mode where only ``run_due`` / ``flush`` process (in the caller's thread).
    """

    def __init__(self, process: ProcessFn, policy: QueuePolicy, *, workers: int = 1,
                 clock: Callable[[], float] = time.monotonic, start_threads: bool = True,
                 name: str = "hm-auto", on_start: Callable[[], None] | None = None) -> None:
        self._process = process
        #: Called once, in the first worker thread, before it takes a batch (resuming kept work).
        self._on_start = on_start
        self.queue = DebounceQueue(policy)
        self._clock = clock
        self._cond = threading.Condition()
        self._busy: set[QueueKey] = set()
        self._threads: list[threading.Thread] = []
        self._workers = max(1, workers)
        self._auto_start = start_threads
        self._force = 0
        self._closed = False
        self._name = name

    @property
    def stats(self) -> QueueStats:
        return self.queue.stats

    def submit(self, key: QueueKey, messages: list[CapturedMessage], signals: Signals, *,
               carried: bool = False) -> None:
        """Queue a capture. Takes a lock for microseconds; never waits for a model."""
        if not messages:
            return
        with self._cond:
            if self._closed:
                log.warning("auto-memory closed: capture of %s not queued", key)
                return
            self.queue.add(key, messages, signals, self._clock(), carried)
            self._ensure_threads()
            self._cond.notify()

    def drop_user(self, user_id: str) -> int:
        """Discard the user's queued batches; a batch already being processed finishes."""
        with self._cond:
            return self.queue.drop_user(user_id)

    def take_session(self, session_id: str, accept: Callable[[QueueKey], bool]) -> Batch | None:
        """Take the pending batch of ``session_id`` for processing elsewhere (a combined call);
        the caller must hand it back with ``finish``."""
        with self._cond:
            if self._closed:
                return None
            batch = self.queue.take_session(session_id, self._clock(), self._busy, accept)
            if batch is not None:
                self._busy.add(batch.key)
            return batch

    def pending_count(self) -> int:
        with self._cond:
            return len(self.queue) + len(self._busy)

    def run_due(self, now: float | None = None, *, force: bool = False) -> int:
        """Process, in this thread, every batch due at ``now`` (manual mode, benchmarks)."""
        done = 0
        while True:
            with self._cond:
                batch = self.queue.take(self._clock() if now is None else now, self._busy, force)
                if batch is None:
                    return done
                self._busy.add(batch.key)
            self._run_one(batch)
            done += 1

    def flush(self, timeout: float | None = None) -> bool:
        """Process everything pending now (debounce ignored) and wait; False on timeout, or when
        a batch was given up (abandoned or dropped) meanwhile — its conversation was not learned."""
        with self._cond:
            lost_before = self.queue.stats.abandoned + self.queue.stats.dropped
        return self._flush(timeout) and self.queue.stats.abandoned + self.queue.stats.dropped == lost_before

    def _flush(self, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._auto_start or self._closed_without_threads():
            self.run_due(force=True)
            return self.pending_count() == 0
        with self._cond:
            if not (len(self.queue) or self._busy):
                return True
            self._force += 1
            self._ensure_threads()
            self._cond.notify_all()
            try:
                while len(self.queue) or self._busy:
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return False
                    self._cond.wait(left if left is not None else 1.0)
                return True
            finally:
                self._force -= 1

    def close(self, timeout: float = 10.0, keep: Callable[[list[Batch]], int] | None = None) -> bool:
        """Flush (bounded by ``timeout``), then stop the threads; later submits are refused. What is
        still queued then goes to ``keep`` (which stores it for the next start and says how many it
        kept) instead of being dropped."""
        flushed = self.flush(timeout)
        with self._cond:
            self._closed = True
            left = self.queue.drain()
            self._cond.notify_all()
        kept = 0
        if left and keep is not None:
            try:
                kept = keep(left)
            except Exception as exc:
                log.warning("auto-memory: pending updates could not be kept (%s)", exc)
        if kept:
            log.info("auto-memory shut down: %d pending update(s) kept for the next start", kept)
        if len(left) > kept:
            log.warning("auto-memory shut down with %d pending updates not processed", len(left) - kept)
        for thread in self._threads:
            thread.join(timeout=max(0.1, timeout))
        return flushed

    # -- internals --------------------------------------------------------------------------
    def _closed_without_threads(self) -> bool:
        return self._closed and not any(t.is_alive() for t in self._threads)

    def _ensure_threads(self) -> None:
        if not self._auto_start or self._closed:
            return
        self._threads = [t for t in self._threads if t.is_alive()]
        while len(self._threads) < self._workers:
            thread = threading.Thread(target=self._loop, name=f"{self._name}-{len(self._threads)}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def restore(self, batches: list[Batch]) -> None:
        """Queue batches kept from an earlier process (merged with any capture of the same key)."""
        with self._cond:
            for batch in batches:
                self.queue.add(batch.key, batch.messages, batch.signals, self._clock(), batch.carried)
            self._cond.notify_all()

    def _loop(self) -> None:
        with self._cond:
            start, self._on_start = self._on_start, None
        if start is not None:
            try:
                start()
            except Exception as exc:
                log.warning("auto-memory worker start hook failed (%s)", exc)
        while True:
            with self._cond:
                while True:
                    batch = self.queue.take(self._clock(), self._busy, force=self._force > 0)
                    if batch is not None:
                        self._busy.add(batch.key)
                        break
                    if self._closed:
                        return
                    due = self.queue.next_due(self._busy)
                    wait = None if due is None else max(0.0, due - self._clock())
                    self._cond.wait(min(wait, 60.0) if wait is not None else 60.0)
            self._run_one(batch)

    def _run_one(self, batch: Batch) -> None:
        try:
            ok = bool(self._process(batch))
        except Exception:
            log.exception("auto-memory update of %s failed", batch.key)
            ok = False
        self.finish(batch, ok)

    def finish(self, batch: Batch, ok: bool) -> None:
        """A taken batch is done (``ok``) or goes back for another try."""
        with self._cond:
            self._busy.discard(batch.key)
            if ok:
                self.queue.stats.processed += 1
            else:
                self.queue.stats.failed += 1
                if not self.queue.requeue(batch, self._clock()):
                    log.warning("auto-memory gave up on %s after %d attempts (%d messages not learned)",
                                batch.key, batch.attempts, len(batch.messages))
            self._cond.notify_all()
