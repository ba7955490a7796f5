"""What recall did, for people: when each memory was last recalled, and why a session got what it got.

Why here and not in the store: recall runs on every agent build; a store write there would add a
PUT (and a place lock) to the user's turn. Both records are small and disposable, so they go
where the surfaced tracker keeps its sets — Redis when configured (one pipelined round trip per
recall, written together with nothing else), else this pod's memory — and are allowed to expire:

- last recalled: ``<prefix>recall:last:<user>:<agent_type>`` (a Redis HASH file -> unix seconds),
  refreshed to ``LAST_RECALLED_TTL`` on every write; in-process bounded to ``max_sessions`` users
  and ``MAX_FILES_PER_PLACE`` files each.
- the last decision of a session: ``<prefix>recall:why:<user>:<agent_type>:<session>`` (JSON, at
  most ``MAX_CANDIDATES`` ranked candidates, the query cut at ``QUERY_CHARS``) with the session TTL.

Redis failures are logged once per outage and never raised (recall must not fail the agent).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..redis_client import REDIS_ERRORS, RedisClient
from .redis_gate import RedisGate

log = logging.getLogger(__name__)

LAST_RECALLED_TTL = 90 * 86_400
MAX_FILES_PER_PLACE = 5000
MAX_CANDIDATES = 20
QUERY_CHARS = 300
#: Paths on which the light model was asked (``select.find_relevant_memories``'s ``on_path``).
MODEL_PATHS = frozenset({"model", "fallback"})


@dataclass(frozen=True, slots=True)
class Candidate:
    """One ranked memory: its BM25 score, its semantic similarity and the fused score (None: not
    computed for this recall — no semantic tier, or the file matched no word)."""

    file: str
    lexical: float | None = None
    semantic: float | None = None
    fused: float | None = None


@dataclass(frozen=True, slots=True)
class RecallDecision:
    """The last recall of a session: what was ranked, which path chose, what went in."""

    at: float
    query: str
    path: str  # model | lexical | confident | slow | fallback | floor | none
    model_asked: bool
    model_picked: tuple[str, ...] | None
    chosen: tuple[str, ...]
    recalled: tuple[str, ...]
    surfaced_before: int
    candidates: tuple[Candidate, ...] = field(default_factory=tuple)

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> RecallDecision:
        data = json.loads(text)
        picked = data.get("model_picked")
        return cls(at=float(data["at"]), query=str(data["query"]), path=str(data["path"]),
                   model_asked=bool(data["model_asked"]),
                   model_picked=tuple(picked) if picked is not None else None,
                   chosen=tuple(data.get("chosen", ())), recalled=tuple(data.get("recalled", ())),
                   surfaced_before=int(data.get("surfaced_before", 0)),
                   candidates=tuple(Candidate(**c) for c in data.get("candidates", ())))


def _num(value: float | None) -> float | None:
    return None if value is None else round(float(value), 4)


def decision_of(query: str, path: str, chosen: Sequence[str], recalled: Sequence[str], *, surfaced: int = 0,
                ranked: Sequence[Any] = (), lexical: Sequence[Any] = (),
                similarities: Mapping[str, float] | None = None, fused: bool = False,
                now: float | None = None) -> RecallDecision:
    """A decision from what the ranker last computed (``ranked``/``lexical``: ``ScoredFile`` rows,
    best first; ``fused``: ``ranked`` holds fused scores, else BM25 ones)."""
    sims = similarities or {}
    lex = {s.file: s.score for s in lexical}
    order = [s.file for s in ranked] or [s.file for s in lexical]
    score = {s.file: s.score for s in ranked} if fused else {}
    rows = tuple(Candidate(f, _num(lex.get(f)), _num(sims.get(f)), _num(score.get(f)))
                 for f in list(dict.fromkeys(order))[:MAX_CANDIDATES])
    asked = path in MODEL_PATHS
    return RecallDecision(at=time.time() if now is None else now, query=query.strip()[:QUERY_CHARS], path=path,
                          model_asked=asked, model_picked=tuple(chosen) if path == "model" else None,
                          chosen=tuple(chosen), recalled=tuple(recalled), surfaced_before=surfaced,
                          candidates=rows)


class RecallInsight:
    """Last-recalled times per place and the last decision per session: Redis or in-process."""

    def __init__(self, client: RedisClient | None = None, *, key_prefix: str = "hm:", ttl_seconds: int = 3600,
                 max_sessions: int = 4096, retry_after_seconds: float = 30.0, gate: RedisGate | None = None) -> None:
        self.key_prefix = key_prefix
        self.ttl_seconds = int(ttl_seconds)
        self.max_sessions = max_sessions
        self._gate = gate or RedisGate(client, retry_after_seconds)  # the surfaced tracker shares its own
        self._last: OrderedDict[str, dict[str, float]] = OrderedDict()
        self._why: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._lock = threading.Lock()

    def last_key(self, user_id: str, agent_type: str) -> str:
        return f"{self.key_prefix}recall:last:{user_id}:{agent_type}"

    def why_key(self, session_id: str, user_id: str, agent_type: str) -> str:
        return f"{self.key_prefix}recall:why:{user_id}:{agent_type}:{session_id}"

    # -- writing (one round trip) -------------------------------------------------------------
    def record(self, user_id: str, agent_type: str, recalled: Iterable[str], *, session_id: str | None = None,
               decision: RecallDecision | None = None, at: float | None = None) -> None:
        """Note ``recalled`` as recalled now and, with a session, its ``decision``. Never raises."""
        files = [f for f in recalled if f]
        if not files and (decision is None or not session_id):
            return
        client = self._redis()
        if client is not None:
            try:
                pipe = client.pipeline(transaction=False)
                self.queue(pipe, user_id, agent_type, files, session_id=session_id, decision=decision, at=at)
                pipe.execute()
                return
            except REDIS_ERRORS as exc:
                self._redis_failed(exc)
        self.remember(user_id, agent_type, files, session_id=session_id, decision=decision, at=at)

    def queue(self, pipe: Any, user_id: str, agent_type: str, files: Sequence[str], *, session_id: str | None,
              decision: RecallDecision | None, at: float | None = None) -> None:
        """Add the record's commands to a Redis ``pipe`` (the surfaced tracker's, so that a recall
        in a session costs one round trip for both)."""
        if files:
            key = self.last_key(user_id, agent_type)
            now = time.time() if at is None else at
            pipe.hset(key, mapping={f: repr(now) for f in files})
            pipe.expire(key, LAST_RECALLED_TTL)
        if decision is not None and session_id:
            pipe.set(self.why_key(session_id, user_id, agent_type), decision.to_json(), ex=self.ttl_seconds)

    def remember(self, user_id: str, agent_type: str, files: Sequence[str], *, session_id: str | None,
                 decision: RecallDecision | None, at: float | None = None) -> None:
        """The record in this pod's memory (no Redis, or Redis down)."""
        why = decision.to_json() if decision is not None and session_id else None
        self._local_record(f"{user_id}:{agent_type}", list(files), time.time() if at is None else at,
                           f"{user_id}:{agent_type}:{session_id}" if why is not None else None, why)

    def forget_session(self, session_id: str, *, user_id: str, agent_type: str = "default") -> None:
        with self._lock:
            self._why.pop(f"{user_id}:{agent_type}:{session_id}", None)
        client = self._redis()
        if client is not None:
            try:
                client.delete(self.why_key(session_id, user_id, agent_type))
            except REDIS_ERRORS as exc:
                self._redis_failed(exc)

    # -- reading -------------------------------------------------------------------------------
    def last_recalled(self, user_id: str, agent_type: str = "default",
                      files: Sequence[str] | None = None) -> dict[str, float]:
        """file -> unix seconds of its last recall for this user (absent: never, or expired);
        ``files``: only these (a page of the listing: HMGET, not the whole hash)."""
        with self._lock:
            local = self._last.get(f"{user_id}:{agent_type}", {})  # noted during an outage
            out = dict(local) if files is None else {f: local[f] for f in files if f in local}
        client = self._redis()
        if client is not None and (files is None or files):
            key = self.last_key(user_id, agent_type)
            try:
                pairs = (client.hgetall(key).items() if files is None
                         else zip(files, client.hmget(key, list(files)), strict=True))
                for k, v in pairs:
                    if v is None:
                        continue
                    name = k.decode("utf-8") if isinstance(k, bytes) else str(k)
                    out[name] = max(out.get(name, 0.0), float(v))
            except (*REDIS_ERRORS, ValueError) as exc:
                self._redis_failed(exc)
        return out

    def decision(self, session_id: str, *, user_id: str, agent_type: str = "default") -> RecallDecision | None:
        """The session's last recall decision (None: none recorded, or expired)."""
        text: str | bytes | None = None
        client = self._redis()
        if client is not None:
            try:
                text = client.get(self.why_key(session_id, user_id, agent_type))
            except REDIS_ERRORS as exc:
                self._redis_failed(exc)
        if text is None:
            with self._lock:
                hit = self._why.get(f"{user_id}:{agent_type}:{session_id}")
                if hit is not None and hit[0] > time.monotonic():
                    text = hit[1]
        if text is None:
            return None
        try:
            return RecallDecision.from_json(text)
        except (ValueError, KeyError, TypeError) as exc:
            log.info("recall: unreadable recall decision for a session (%s)", exc)
            return None

    # -- internals -----------------------------------------------------------------------------
    def _redis(self) -> RedisClient | None:
        return self._gate.get()

    def _redis_failed(self, exc: Exception) -> None:
        self._gate.failed(exc, "recall insight")

    def _local_record(self, place: str, files: list[str], now: float, session: str | None, why: str | None) -> None:
        with self._lock:
            if files:
                seen = self._last.setdefault(place, {})
                for f in files:
                    if f in seen or len(seen) < MAX_FILES_PER_PLACE:
                        seen[f] = now
                self._last.move_to_end(place)
                while len(self._last) > self.max_sessions:
                    self._last.popitem(last=False)
            if session is not None and why is not None:
                self._why[session] = (time.monotonic() + self.ttl_seconds, why)
                self._why.move_to_end(session)
                while len(self._why) > self.max_sessions:
                    self._why.popitem(last=False)


__all__ = ["Candidate", "RecallDecision", "RecallInsight", "decision_of"]
