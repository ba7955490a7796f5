"""Background work of session memory, so an agent's run never waits for it.

Two stages:

* **Collector** — one daemon thread draining a bounded FIFO queue of finished runs: count tokens,
  append to the buffer, check the thresholds. One thread keeps each session's runs in order.
  When the queue is full (the buffer is far behind), the hook collects inline instead: the run
  is slowed rather than a message dropped.
* **Extractors** — a small thread pool (``session.extract_workers``) for summary calls. A session
  is scheduled at most once at a time in this pod (other pods are kept out by the Redis lock),
  and at most ``max_pending`` sessions wait; a session not scheduled now is scheduled again by
  its next run, since its tokens stay above the threshold.

Threads start on first use (so a process that forks after building a manager is fine) and are
daemons; ``close()`` drains and stops them, and the manager flushes them at interpreter exit.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from .records import BufferedMessage

log = logging.getLogger(__name__)

CollectFn = Callable[[str, list[BufferedMessage]], None]
ExtractFn = Callable[[str], None]
_STOP = object()


class BackgroundWorker:
    def __init__(self, collect: CollectFn, extract: ExtractFn, *, queue_max: int, workers: int,
                 max_pending: int | None = None) -> None:
        self._collect = collect
        self._extract = extract
        self._queue: queue.Queue[object] = queue.Queue(maxsize=queue_max)
        self._workers = workers
        self.max_pending = max_pending or max(64, workers * 32)
        self._cond = threading.Condition()
        self._collects = 0  # queued or running
        self._inflight: set[str] = set()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self.skipped = 0  # extractions not scheduled (already running or too many waiting)

    def _start(self) -> None:
        with self._cond:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, name="hm-session-collector", daemon=True)
                self._thread.start()

    # -- collector ----------------------------------------------------------------------------
    def submit_run(self, session_id: str, entries: list[BufferedMessage]) -> bool:
        """Queue one run's messages; False when the queue is full or closed (collect inline)."""
        if self._closed:
            return False
        if self._thread is None:
            self._start()
        with self._cond:
            self._collects += 1
        try:
            self._queue.put_nowait((session_id, entries))
        except queue.Full:
            with self._cond:
                self._collects -= 1
                self._cond.notify_all()
            return False
        return True

    def _loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            session_id, entries = item  # type: ignore[misc]
            try:
                self._collect(session_id, entries)
            except Exception:  # never let one bad run stop the collector
                log.exception("session memory: collecting a run of session %s failed", session_id)
            finally:
                with self._cond:
                    self._collects -= 1
                    self._cond.notify_all()

    # -- extractors ---------------------------------------------------------------------------
    def schedule_extraction(self, session_id: str) -> bool:
        """Run ``extract(session_id)`` in the pool unless it is already scheduled here."""
        with self._cond:
            if self._closed or session_id in self._inflight or len(self._inflight) >= self.max_pending:
                self.skipped += 1
                return False
            self._inflight.add(session_id)
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="hm-session-extract")
            pool = self._pool
        try:
            pool.submit(self._run_extract, session_id)
        except RuntimeError:  # shut down meanwhile
            self._done(session_id)
            return False
        return True

    def _run_extract(self, session_id: str) -> None:
        try:
            self._extract(session_id)
        except Exception:
            log.exception("session memory: background summary of session %s failed", session_id)
        finally:
            self._done(session_id)

    def _done(self, session_id: str) -> None:
        with self._cond:
            self._inflight.discard(session_id)
            self._cond.notify_all()

    @property
    def busy(self) -> bool:
        with self._cond:
            return bool(self._collects or self._inflight)

    # -- waiting ------------------------------------------------------------------------------
    def _wait(self, done: Callable[[], bool], timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not done():
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every queued run is in the buffer; False on timeout."""
        return self._wait(lambda: self._collects == 0, timeout)

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """Wait until queued runs are collected AND the summaries they triggered are done."""
        return self._wait(lambda: self._collects == 0 and not self._inflight, timeout)

    def close(self, timeout: float = 10.0) -> bool:
        """Drain (up to ``timeout``) and stop; later submissions are refused."""
        idle = self.wait_idle(timeout)
        with self._cond:
            self._closed = True
            thread, pool = self._thread, self._pool
        if thread is not None:
            try:
                self._queue.put(_STOP, timeout=1.0)
            except queue.Full:
                pass
            thread.join(timeout=1.0)
        if pool is not None:
            pool.shutdown(wait=idle, cancel_futures=True)
        return idle
