"""The in-process twin of ``RedisBuffer``: same operations, same bookkeeping, one pod only.

Used when no Redis URL is configured, and while Redis is unreachable. It mirrors the Redis
semantics exactly (absolute positions, the cap, TTL expiry, a lock with a token and a TTL,
the commit that keeps the last ``keep`` summarised messages plus everything newer) so the
manager cannot tell the two apart — and the tests run the same cases against both.

Memory is bounded by the same limits as Redis: ``buffer_max_messages`` per session, each
message at most ``message_max_chars``, and idle sessions dropped after ``ttl_seconds``.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from .records import BufferedMessage, CommitOutcome, PendingBatch, SessionState

SWEEP_EVERY_SECONDS = 60.0


@dataclass
class _Session:
    state: SessionState
    messages: list[BufferedMessage] = field(default_factory=list)
    expires_at: float = 0.0
    lock_token: str | None = None
    lock_expires_at: float = 0.0


class LocalBuffer:
    """Thread-safe in-process session buffer; ``clock`` is wall time (tests inject their own)."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._sessions: dict[str, _Session] = {}
        self._last_sweep = 0.0

    def _live(self, session_id: str, now: float) -> _Session | None:
        sess = self._sessions.get(session_id)
        if sess is not None and sess.expires_at <= now:
            del self._sessions[session_id]
            return None
        return sess

    def _sweep(self, now: float) -> None:
        if now - self._last_sweep < SWEEP_EVERY_SECONDS:
            return
        self._last_sweep = now
        for sid in [s for s, v in self._sessions.items() if v.expires_at <= now]:
            del self._sessions[sid]

    def __contains__(self, session_id: str) -> bool:
        return session_id in self._sessions

    def session_ids(self) -> list[str]:
        with self._lock:
            return list(self._sessions)

    # -- hot path -----------------------------------------------------------------------------
    def collect(self, session_id: str, entries: Sequence[BufferedMessage], *, cap: int, ttl: int,
                now: float) -> SessionState:
        with self._lock:
            self._sweep(now)
            sess = self._live(session_id, now)
            if sess is None:
                sess = self._sessions[session_id] = _Session(SessionState(epoch=uuid.uuid4().hex))
            st = sess.state
            sess.messages.extend(entries)
            if len(sess.messages) > cap:
                del sess.messages[: len(sess.messages) - cap]
            calls = sum(m.tool_calls for m in entries)
            st.total += len(entries)
            st.tokens += sum(m.tokens for m in entries)
            st.tool_calls += calls
            st.turns += 1
            st.last_turn_tool_calls = calls
            st.last_collect_at = now
            st.length = len(sess.messages)
            sess.expires_at = now + ttl
            return replace(st)

    def state(self, session_id: str) -> SessionState | None:
        with self._lock:
            sess = self._live(session_id, self.clock())
            return replace(sess.state, length=len(sess.messages)) if sess else None

    def summary_version(self, session_id: str) -> int | None:
        with self._lock:
            sess = self._live(session_id, self.clock())
            return sess.state.summary_version if sess else None

    def pending(self, session_id: str) -> PendingBatch | None:
        with self._lock:
            sess = self._live(session_id, self.clock())
            if sess is None:
                return None
            st = replace(sess.state, length=len(sess.messages))
            first = st.total - st.length
            start = max(first, st.summarized)
            return PendingBatch(st, list(sess.messages[start - first :]), start,
                                dropped=max(0, first - st.summarized))

    def entries(self, session_id: str) -> list[BufferedMessage]:
        with self._lock:
            sess = self._live(session_id, self.clock())
            return list(sess.messages) if sess else []

    def take(self, session_id: str) -> tuple[SessionState, list[BufferedMessage]] | None:
        """Remove a session unless its lock is held; returns its state and pending messages
        (used to move a session into Redis when Redis comes back)."""
        with self._lock:
            now = self.clock()
            sess = self._live(session_id, now)
            if sess is None:
                return None
            if sess.lock_token is not None and sess.lock_expires_at > now:
                return None  # an in-process extraction is running: move it next time
            del self._sessions[session_id]
            st = sess.state
            first = st.total - len(sess.messages)
            return replace(st), list(sess.messages[max(0, st.summarized - first) :])

    # -- lock ---------------------------------------------------------------------------------
    def acquire(self, session_id: str, token: str, ttl_ms: int) -> bool:
        with self._lock:
            now = self.clock()
            sess = self._live(session_id, now)
            if sess is None:  # like SET NX on a fresh key: the lock may exist without a buffer
                sess = self._sessions[session_id] = _Session(SessionState(epoch=uuid.uuid4().hex),
                                                             expires_at=now + ttl_ms / 1000)
            if sess.lock_token is not None and sess.lock_expires_at > now:
                return False
            sess.lock_token, sess.lock_expires_at = token, now + ttl_ms / 1000
            sess.expires_at = max(sess.expires_at, sess.lock_expires_at)
            return True

    def release(self, session_id: str, token: str) -> bool:
        with self._lock:
            sess = self._sessions.get(session_id)
            if sess is None or sess.lock_token != token:
                return False
            sess.lock_token = None
            return True

    def renew(self, session_id: str, token: str, ttl_ms: int) -> bool:
        """Extend the lock's TTL while ``token`` still holds it (the summary lease)."""
        with self._lock:
            now = self.clock()
            sess = self._sessions.get(session_id)
            if sess is None or sess.lock_token != token or sess.lock_expires_at <= now:
                return False
            sess.lock_expires_at = now + ttl_ms / 1000
            sess.expires_at = max(sess.expires_at, sess.lock_expires_at)
            return True

    def holds(self, session_id: str, token: str) -> bool:
        with self._lock:
            sess = self._sessions.get(session_id)
            return bool(sess and sess.lock_token == token and sess.lock_expires_at > self.clock())

    def lock_holder(self, session_id: str) -> str | None:
        with self._lock:
            sess = self._sessions.get(session_id)
            if sess is None or sess.lock_token is None or sess.lock_expires_at <= self.clock():
                return None
            return sess.lock_token.rsplit("/", 1)[0]

    def lock_ttl_ms(self, session_id: str) -> int | None:
        with self._lock:
            sess = self._sessions.get(session_id)
            now = self.clock()
            if sess is None or sess.lock_token is None or sess.lock_expires_at <= now:
                return None
            return int((sess.lock_expires_at - now) * 1000)

    # -- after a summary ----------------------------------------------------------------------
    def commit(self, session_id: str, *, token: str, epoch: str, summarized: int, keep: int,
               version: int, now: float, ttl: int) -> CommitOutcome:
        with self._lock:
            sess = self._sessions.get(session_id)
            if sess is None or sess.lock_token != token or sess.lock_expires_at <= self.clock():
                return CommitOutcome.LOCK_LOST
            st = sess.state
            if st.epoch != epoch:
                return CommitOutcome.STATE_RESET
            first = st.total - len(sess.messages)
            s = min(summarized, st.total)
            start = max(first, s - keep)
            del sess.messages[: start - first]
            rest = sess.messages[max(0, s - start) :]
            st.summarized, st.summary_version, st.last_summary_at = s, version, now
            st.tokens = sum(m.tokens for m in rest)
            st.tool_calls = sum(m.tool_calls for m in rest)
            st.summaries += 1
            st.failures, st.retry_at, st.last_error = 0, 0.0, ""
            st.length = len(sess.messages)
            sess.expires_at = now + ttl
            return CommitOutcome.DONE

    def record_failure(self, session_id: str, *, error: str, retry_at: float, ttl: int) -> None:
        with self._lock:
            sess = self._sessions.get(session_id)
            if sess is None:
                return
            sess.state.failures += 1
            sess.state.last_error = error[:500]
            sess.state.retry_at = retry_at

    def clear(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)
