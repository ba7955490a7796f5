"""Which memory files were already put into a session's context, so recall does not repeat them.

Why it lives here (and in Redis when configured): the session buffer already keeps a session's
messages in Redis for every pod; the recalled files of a session belong next to them, or a
request routed to another pod would surface the same memories again. The key is
``<redis.key_prefix>recall:surfaced:<user>:<agent_type>:<session>`` (a Redis SET), with the
session TTL (``session.ttl_seconds``) refreshed on every write, so it dies with the session.

Without Redis (or while Redis is down) an in-process map answers: bounded to
``recall.surfaced_max_sessions`` sessions (least recently used dropped first) and expiring with
the same TTL. Redis failures are logged once per outage and never raised; Redis is probed again
after ``redis.retry_after_seconds``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable

from ..redis_client import REDIS_ERRORS, RedisClient
from .insight import RecallDecision, RecallInsight
from .redis_gate import RedisGate

log = logging.getLogger(__name__)

MAX_FILES_PER_SESSION = 1000


class SurfacedTracker:
    """Per-session set of surfaced file names: Redis when given a client, in-process otherwise."""

    def __init__(
        self,
        client: RedisClient | None = None,
        *,
        key_prefix: str = "hm:",
        ttl_seconds: int = 3600,
        max_sessions: int = 4096,
        retry_after_seconds: float = 30.0,
    ) -> None:
        self.client = client
        self.key_prefix = key_prefix
        self.ttl_seconds = int(ttl_seconds)
        self.max_sessions = max_sessions
        self.retry_after_seconds = retry_after_seconds
        self._local: OrderedDict[str, tuple[float, set[str]]] = OrderedDict()
        self._lock = threading.Lock()
        self._gate = RedisGate(client, retry_after_seconds)
        # when each memory was last recalled, and why a session got what it got (``insight``)
        self.insight = RecallInsight(client, key_prefix=key_prefix, ttl_seconds=ttl_seconds,
                                     max_sessions=max_sessions, gate=self._gate)

    def __deepcopy__(self, memo: dict[int, object]) -> SurfacedTracker:
        return self  # shared state, never copied (AgentOS deep-copies hooks)

    @staticmethod
    def scope(session_id: str, user_id: str, agent_type: str) -> str:
        return f"{user_id}:{agent_type}:{session_id}"

    def key(self, session_id: str, user_id: str, agent_type: str) -> str:
        """The Redis key of one session's set."""
        return f"{self.key_prefix}recall:surfaced:{self.scope(session_id, user_id, agent_type)}"

    # -- public -----------------------------------------------------------------------------
    def surfaced(self, session_id: str, *, user_id: str, agent_type: str = "default") -> frozenset[str]:
        """Files already surfaced in this session (empty for an unknown or expired session)."""
        local = self._local_get(self.scope(session_id, user_id, agent_type))  # marks made during an outage
        client = self._redis()
        if client is not None:
            try:
                members = client.smembers(self.key(session_id, user_id, agent_type))
                return local | {m.decode("utf-8") if isinstance(m, bytes) else str(m) for m in members}
            except REDIS_ERRORS as exc:
                self._redis_failed(exc)
        return local

    def mark(self, session_id: str, files: Iterable[str], *, user_id: str, agent_type: str = "default",
             decision: RecallDecision | None = None) -> None:
        """Remember ``files`` as surfaced in this session (refreshes the session's TTL); with a
        ``decision``, also note them as recalled now and keep the decision (``insight``), in the
        same round trip."""
        names = [f for f in files if f]
        if not names and decision is None:
            return
        client = self._redis()
        if client is not None:
            key = self.key(session_id, user_id, agent_type)
            try:
                pipe = client.pipeline(transaction=False)
                if names:
                    pipe.sadd(key, *names)
                    pipe.expire(key, self.ttl_seconds)
                if decision is not None:
                    self.insight.queue(pipe, user_id, agent_type, names, session_id=session_id, decision=decision)
                pipe.execute()
                return
            except REDIS_ERRORS as exc:
                self._redis_failed(exc)
        if names:
            self._local_add(self.scope(session_id, user_id, agent_type), names)
        if decision is not None:
            self.insight.remember(user_id, agent_type, names, session_id=session_id, decision=decision)

    def forget(self, session_id: str, *, user_id: str, agent_type: str = "default") -> None:
        """Drop a session's record (e.g. when the session is cleared)."""
        scope = self.scope(session_id, user_id, agent_type)
        with self._lock:
            self._local.pop(scope, None)
        self.insight.forget_session(session_id, user_id=user_id, agent_type=agent_type)
        client = self._redis()
        if client is not None:
            try:
                client.delete(self.key(session_id, user_id, agent_type))
            except REDIS_ERRORS as exc:
                self._redis_failed(exc)

    # -- internals --------------------------------------------------------------------------
    def _redis(self) -> RedisClient | None:
        return self._gate.get()

    def _redis_failed(self, exc: Exception) -> None:
        self._gate.failed(exc, "surfaced-file tracking")

    def _local_get(self, scope: str) -> frozenset[str]:
        now = time.monotonic()
        with self._lock:
            hit = self._local.get(scope)
            if hit is None:
                return frozenset()
            if hit[0] <= now:
                del self._local[scope]
                return frozenset()
            self._local.move_to_end(scope)
            return frozenset(hit[1])

    def _local_add(self, scope: str, names: list[str]) -> None:
        expires = time.monotonic() + self.ttl_seconds
        with self._lock:
            hit = self._local.get(scope)
            files = hit[1] if hit is not None and hit[0] > time.monotonic() else set()
            for name in names:
                if len(files) >= MAX_FILES_PER_SESSION:
                    break
                files.add(name)
            self._local[scope] = (expires, files)
            self._local.move_to_end(scope)
            while len(self._local) > self.max_sessions:
                self._local.popitem(last=False)

    def local_session_count(self) -> int:
        with self._lock:
            return len(self._local)


__all__ = ["SurfacedTracker"]
