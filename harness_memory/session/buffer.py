"""The dual-mode hot buffer: Redis when it answers, in-process when it does not.

Mode rules (probed lazily, on the first operation, never at import or construction):

* no Redis URL configured → **in-process mode** for good (one pod; nothing to share);
* ``PING`` answers → **Redis mode**: every pod sees every session's messages and counters;
* ``PING`` (or any later command) fails with a connection error or timeout → **in-process
  mode**, with ONE warning per outage. The failed operation is redone in-process, so the
  messages of that run are not lost. Redis is probed again after ``redis.retry_after_seconds``;
  failed re-probes stay silent.

**When Redis comes back** (the first successful re-probe logs one INFO line):

* Sessions this pod buffered in-process during the outage are moved into Redis — their
  not-yet-summarised messages are appended to the session's Redis list (after anything other
  pods wrote meanwhile) and counted; the in-process copy is dropped. The move happens on the
  next collect in this pod (all sessions), and before any operation on one session (that
  session), so nothing is double-counted and the next summary in ANY pod sees those messages.
  A session whose in-process summary is running right now is moved once that finishes.
* Summaries written during the outage are already in the object store; the Redis state's
  ``summary_version`` is raised to match, so other pods' caches notice them.
* If Redis restarted empty (it is a cache: no persistence), what only lived in Redis before
  the outage is gone: at most the not-yet-summarised tail of each session (below the summary
  threshold). The stored summaries are untouched, and counting restarts from the first
  threshold for those sessions.
* A command that timed out after Redis applied it is redone in-process, so a message may, in
  that rare case, be counted twice — never lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Literal, TypeVar

from ..redis_client import REDIS_ERRORS, RedisClient, is_unavailable
from .local_backend import LocalBuffer
from .records import BufferedMessage, CommitOutcome, PendingBatch, SessionState
from .redis_backend import RedisBuffer

log = logging.getLogger(__name__)

T = TypeVar("T")
Mode = Literal["redis", "local"]


class _Unavailable(Exception):
    """Redis is not there (outage, failover): the operation is redone in-process."""


def _redis_call(fn: Callable[[], T]) -> T:
    """Run one Redis operation; an outage of any topology becomes ``_Unavailable`` (see
    ``redis_client.is_unavailable``), anything else (a script bug, WRONGTYPE, cross-slot keys)
    is raised as it is."""
    try:
        return fn()
    except REDIS_ERRORS as exc:
        if is_unavailable(exc):
            raise _Unavailable(str(exc)) from exc
        raise


class SessionBuffer:
    """One pod's view of the session buffer; thread-safe; every method may be called from any
    thread. Only Redis errors other than an outage escape (a bug, not an outage)."""

    def __init__(
        self,
        client: RedisClient | None,
        *,
        key_prefix: str = "hm:",
        retry_after_seconds: float = 30.0,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 100,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = (RedisBuffer(client, key_prefix, wait_replicas=wait_replicas, wait_timeout_ms=wait_timeout_ms)
                      if client is not None else None)
        self.local = LocalBuffer(clock)
        self.retry_after = retry_after_seconds
        self.clock = clock
        self._monotonic = monotonic
        self._guard = threading.Lock()
        self._up: bool | None = None  # None: not probed yet
        self._outage = False
        self._retry_at = 0.0
        self._migrate_all = False
        self._migrating = threading.Lock()
        self.warnings = 0  # outage warnings logged (tests and health output read it)
        self.local_collects = 0  # collects buffered in-process while Redis is configured (outages)

    # -- mode ---------------------------------------------------------------------------------
    @property
    def mode(self) -> Mode:
        """The mode the next operation will use (probing Redis if it is due)."""
        return "redis" if self._use_redis() else "local"

    @property
    def configured_mode(self) -> Mode:
        return "redis" if self.redis is not None else "local"

    def _use_redis(self) -> bool:
        if self.redis is None:
            return False
        with self._guard:
            if self._up:
                return True
            if self._up is False and self._monotonic() < self._retry_at:
                return False
        try:
            _redis_call(self.redis.ping)
        except _Unavailable as exc:
            self._mark_down(exc.__cause__ or exc)
            return False
        self._mark_up()
        return True

    def _mark_down(self, exc: BaseException) -> None:
        with self._guard:
            self._up = False
            self._retry_at = self._monotonic() + self.retry_after
            if self._outage:
                return
            self._outage = True
            self.warnings += 1
        log.warning("Redis unavailable for session memory (%s): buffering sessions in-process in this "
                    "pod; Redis is retried every %gs", exc, self.retry_after)

    def _mark_up(self) -> None:
        with self._guard:
            self._up = True
            recovered, self._outage = self._outage, False
            if recovered:
                self._migrate_all = True
        if recovered:
            log.info("Redis reachable again: session memory is back in Redis mode; sessions buffered "
                     "in-process meanwhile are moved into Redis")

    def _run(self, session_id: str | None, on_redis: Callable[[RedisBuffer], T],
             on_local: Callable[[LocalBuffer], T]) -> T:
        if self._use_redis():
            assert self.redis is not None
            redis_buffer = self.redis
            try:
                if session_id is not None and session_id in self.local:
                    self._migrate(session_id)
                return _redis_call(lambda: on_redis(redis_buffer))
            except _Unavailable as exc:
                self._mark_down(exc.__cause__ or exc)
        return on_local(self.local)

    # -- migration after an outage ------------------------------------------------------------
    def _migrate(self, session_id: str) -> bool:
        """Move one session's in-process messages into Redis (raises if Redis fails meanwhile)."""
        assert self.redis is not None
        with self._migrating:
            taken = self.local.take(session_id)
            if taken is None:
                return False
            state, pending = taken
            cap = max(self._cap, len(pending))
            redis_buffer = self.redis

            def move() -> None:
                if pending:
                    redis_buffer.collect(session_id, pending, cap=cap, ttl=self._ttl, now=self.clock())
                if state.summary_version:
                    redis_buffer.raise_summary_version(session_id, state.summary_version)

            try:
                _redis_call(move)
            except _Unavailable:  # put them back; they are moved next time
                if pending:
                    self.local.collect(session_id, pending, cap=cap, ttl=self._ttl, now=self.clock())
                raise
        if pending:
            log.info("moved %d in-process message(s) of session %s into Redis", len(pending), session_id)
        return True

    def migrate_all(self) -> int:
        """Move every in-process session into Redis (after an outage); returns sessions moved."""
        moved = 0
        for sid in self.local.session_ids():
            try:
                moved += self._migrate(sid)
            except _Unavailable as exc:
                self._mark_down(exc.__cause__ or exc)
                break
        return moved

    # The cap and TTL of a migration come from the last collect's settings.
    _cap = 2000
    _ttl = 3600

    # -- operations ---------------------------------------------------------------------------
    def collect(self, session_id: str, entries: Sequence[BufferedMessage], *, cap: int,
                ttl: int) -> SessionState:
        """Append one run's messages; renews the session's TTL; returns the updated counters."""
        self._cap, self._ttl = cap, ttl
        now = self.clock()
        if self._migrate_all and self._use_redis():
            self._migrate_all = False
            self.migrate_all()
        return self._run(
            session_id,
            lambda r: r.collect(session_id, entries, cap=cap, ttl=ttl, now=now),
            lambda lo: self._collect_locally(lo, session_id, entries, cap=cap, ttl=ttl, now=now),
        )

    def _collect_locally(self, local: LocalBuffer, session_id: str, entries: Sequence[BufferedMessage], *,
                         cap: int, ttl: int, now: float) -> SessionState:
        if self.redis is not None:
            self.local_collects += 1
        return local.collect(session_id, entries, cap=cap, ttl=ttl, now=now)

    def state(self, session_id: str) -> SessionState | None:
        return self._run(session_id, lambda r: r.state(session_id), lambda lo: lo.state(session_id))

    def summary_version(self, session_id: str) -> int | None:
        """The stored summary's version as the buffer knows it; None when the session is unknown."""
        return self._run(session_id, lambda r: r.summary_version(session_id),
                         lambda lo: lo.summary_version(session_id))

    def pending(self, session_id: str) -> PendingBatch | None:
        return self._run(session_id, lambda r: r.pending(session_id), lambda lo: lo.pending(session_id))

    def entries(self, session_id: str) -> list[BufferedMessage]:
        return self._run(session_id, lambda r: r.entries(session_id), lambda lo: lo.entries(session_id))

    def acquire(self, session_id: str, token: str, ttl_ms: int) -> bool:
        return self._run(session_id, lambda r: r.acquire(session_id, token, ttl_ms),
                         lambda lo: lo.acquire(session_id, token, ttl_ms))

    def release(self, session_id: str, token: str) -> bool:
        # No migration here: the lock must be released where it was taken.
        return self._run(None, lambda r: r.release(session_id, token), lambda lo: lo.release(session_id, token))

    def renew(self, session_id: str, token: str, ttl_ms: int) -> bool:
        # Like release: where the lock was taken, never migrated.
        return self._run(None, lambda r: r.renew(session_id, token, ttl_ms),
                         lambda lo: lo.renew(session_id, token, ttl_ms))

    def holds(self, session_id: str, token: str) -> bool:
        return self._run(None, lambda r: r.holds(session_id, token), lambda lo: lo.holds(session_id, token))

    def lock_ttl_ms(self, session_id: str) -> int | None:
        return self._run(None, lambda r: r.lock_ttl_ms(session_id), lambda lo: lo.lock_ttl_ms(session_id))

    def lock_holder(self, session_id: str) -> str | None:
        """The pod (``host:pid``) holding the session's summary lock, if any."""
        return self._run(None, lambda r: r.lock_holder(session_id), lambda lo: lo.lock_holder(session_id))

    def commit(self, session_id: str, *, token: str, epoch: str, summarized: int, keep: int,
               version: int, ttl: int) -> CommitOutcome:
        now = self.clock()
        return self._run(
            None,
            lambda r: r.commit(session_id, token=token, epoch=epoch, summarized=summarized, keep=keep,
                               version=version, now=now, ttl=ttl),
            lambda lo: lo.commit(session_id, token=token, epoch=epoch, summarized=summarized, keep=keep,
                                 version=version, now=now, ttl=ttl),
        )

    def record_failure(self, session_id: str, *, error: str, retry_at: float, ttl: int) -> None:
        self._run(None, lambda r: r.record_failure(session_id, error=error, retry_at=retry_at, ttl=ttl),
                  lambda lo: lo.record_failure(session_id, error=error, retry_at=retry_at, ttl=ttl))

    def clear(self, session_id: str) -> None:
        """Forget a session's buffer everywhere this pod can reach (Redis and in-process)."""
        self.local.clear(session_id)
        self._run(None, lambda r: r.clear(session_id), lambda lo: lo.clear(session_id))
