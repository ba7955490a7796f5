"""The Redis side of the session buffer: one list, one hash and one lock string per session.

Keys (``P`` = ``redis.key_prefix``; the ``{id}`` braces are a Redis Cluster hash tag, so the
three keys of a session live in one slot and MULTI / Lua may touch them together):

* ``P session:{id}:messages`` — LIST of compact JSON messages (RPUSH; LTRIM to the cap).
* ``P session:{id}:state`` — HASH of counters (see ``SessionState``).
* ``P session:{id}:lock`` — STRING holding the extraction holder's random token (SET NX PX).

Messages and state get ``session.ttl_seconds`` (3600 s) on every collect, so an idle session
disappears from Redis an hour after its last message; the summary lives on in the object store.

Why Lua for collect, commit and release: a collect appends, trims, counts and renews the TTL
as one command (atomic, one round trip, and one command that ``WAIT`` can follow on the same
connection — see below). After a summary is stored, the buffer must be trimmed to the last few
summarised messages *plus everything that arrived while the model was writing*, and the counters
recomputed — and only if the caller still holds the lock. Reading positions and trimming in one
script makes that atomic on the server; no other pod can interleave.

**Replicated collects** (``redis.wait_replicas`` > 0, Sentinel only): Redis replicates
asynchronously, so a master can acknowledge a message and lose it in a failover — after
``SENTINEL FAILOVER`` the old master keeps accepting writes from pooled connections for ~10 s
and then discards them all. So a collect is followed by ``WAIT n timeout`` on the same
connection. If fewer replicas confirm, the sentinels (and the replicas they know) are asked
whether that server still is the master (``SentinelMaster.still_master``; asking also drops
idle pooled connections to a former master):

* the write went to the current master (its replicas lag, or are gone — e.g. the replica was
  promoted and no other exists yet): it is as safe as Redis can make it; accepted, counted in
  ``unreplicated``;
* the write went to a server that is no longer the master: it will be discarded, so the collect
  raises ``NotReplicated`` (a ``redis.ConnectionError``): the buffer redoes it in-process and
  moves it into the new master later, exactly as in an outage.

Why not "fewer confirmations → keep it in-process" alone: after a failover in a 1 + 1 set the new
master has no replica for a while; every collect would be stored in Redis AND kept in-process,
and every later move would store it again.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import redis

from ..locks import RENEW_SCRIPT as _RENEW
from ..redis_client import RedisClient, SentinelMaster
from .records import BufferedMessage, CommitOutcome, PendingBatch, SessionState

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""

# KEYS: messages, state. ARGV: cap, ttl, new epoch, tokens, tool calls, now, message….
# (Public: the load bench replays it with redis-benchmark.)
# Returns {HGETALL state, LLEN messages}. RPUSH in chunks: Lua's unpack() has a stack limit.
COLLECT_SCRIPT = """
local n = #ARGV - 6
for i = 7, #ARGV, 500 do
  redis.call('rpush', KEYS[1], unpack(ARGV, i, math.min(i + 499, #ARGV)))
end
redis.call('ltrim', KEYS[1], -tonumber(ARGV[1]), -1)
redis.call('hsetnx', KEYS[2], 'epoch', ARGV[3])
redis.call('hincrby', KEYS[2], 'total', n)
redis.call('hincrby', KEYS[2], 'tokens', ARGV[4])
redis.call('hincrby', KEYS[2], 'tool_calls', ARGV[5])
redis.call('hincrby', KEYS[2], 'turns', 1)
redis.call('hset', KEYS[2], 'last_turn_tool_calls', ARGV[5], 'last_collect_at', ARGV[6])
redis.call('expire', KEYS[1], tonumber(ARGV[2]))
redis.call('expire', KEYS[2], tonumber(ARGV[2]))
return {redis.call('hgetall', KEYS[2]), redis.call('llen', KEYS[1])}
"""

# KEYS: messages, state, lock. ARGV: token, epoch, summarized, keep, version, now, ttl.
_COMMIT = """
if redis.call('get', KEYS[3]) ~= ARGV[1] then return -1 end
if (redis.call('hget', KEYS[2], 'epoch') or '') ~= ARGV[2] then return -2 end
local total = tonumber(redis.call('hget', KEYS[2], 'total') or '0')
local len = redis.call('llen', KEYS[1])
local first = total - len
local s = math.min(tonumber(ARGV[3]), total)
local from = math.max(first, s - tonumber(ARGV[4]))
if from > first then redis.call('ltrim', KEYS[1], from - first, -1) end
local tokens, calls = 0, 0
local rest = redis.call('lrange', KEYS[1], math.max(0, s - from), -1)
for _, raw in ipairs(rest) do
  local ok, msg = pcall(cjson.decode, raw)
  if ok and type(msg) == 'table' then
    tokens = tokens + (tonumber(msg['t']) or 0)
    calls = calls + (tonumber(msg['k']) or 0)
  end
end
redis.call('hset', KEYS[2], 'summarized', s, 'tokens', tokens, 'tool_calls', calls,
           'summary_version', ARGV[5], 'last_summary_at', ARGV[6], 'failures', 0, 'retry_at', 0,
           'last_error', '')
redis.call('hincrby', KEYS[2], 'summaries', 1)
redis.call('expire', KEYS[1], tonumber(ARGV[7]))
redis.call('expire', KEYS[2], tonumber(ARGV[7]))
return 1
"""


class NotReplicated(redis.ConnectionError):
    """A collect went to a server the sentinels no longer name as master (its replicas did not
    confirm it): it will be discarded, so the caller keeps it in-process, as in an outage."""


class RedisBuffer:
    """Session-buffer operations on one Redis (any topology); every method may raise what
    ``redis_client.REDIS_ERRORS`` lists. ``wait_replicas`` > 0 (Sentinel): collects are confirmed by
    that many replicas (``WAIT``), or stored on the current master, or raise ``NotReplicated``."""

    def __init__(self, client: RedisClient, key_prefix: str = "hm:", *, wait_replicas: int = 0,
                 wait_timeout_ms: int = 100) -> None:
        self.client = client
        self.key_prefix = key_prefix
        self.wait_replicas = wait_replicas
        self.wait_timeout_ms = wait_timeout_ms
        if wait_replicas and not isinstance(client, SentinelMaster):
            raise ValueError("redis.wait_replicas needs Sentinel (it asks the sentinels who the master is)")
        self.unreplicated = 0  # collects kept on the current master although replicas did not confirm
        self._release = client.register_script(_RELEASE)
        self._renew = client.register_script(_RENEW)
        self._commit = client.register_script(_COMMIT)
        self._collect = client.register_script(COLLECT_SCRIPT)

    # -- keys ---------------------------------------------------------------------------------
    def _base(self, session_id: str) -> str:
        return f"{self.key_prefix}session:{{{session_id}}}"

    def messages_key(self, session_id: str) -> str:
        return self._base(session_id) + ":messages"

    def state_key(self, session_id: str) -> str:
        return self._base(session_id) + ":state"

    def lock_key(self, session_id: str) -> str:
        return self._base(session_id) + ":lock"

    def ping(self) -> bool:
        return bool(self.client.ping())

    # -- hot path -----------------------------------------------------------------------------
    def collect(self, session_id: str, entries: Sequence[BufferedMessage], *, cap: int, ttl: int,
                now: float) -> SessionState:
        """RPUSH + LTRIM + counters + EXPIRE in one script; returns the new state. With
        ``wait_replicas``, confirmed by the replicas or ``NotReplicated``."""
        keys = [self.messages_key(session_id), self.state_key(session_id)]
        args: list[Any] = [cap, ttl, uuid.uuid4().hex, sum(m.tokens for m in entries),
                           sum(m.tool_calls for m in entries), repr(now), *(m.to_json() for m in entries)]
        if not self.wait_replicas:
            raw, length = self._collect(keys=keys, args=args)
        else:
            raw, length = self._collect_replicated(keys, args)
        it = iter(raw)
        return SessionState.from_hash(dict(zip(it, it, strict=True)), length=int(length))

    def _collect_replicated(self, keys: list[str], args: list[Any]) -> Any:
        assert isinstance(self.client, SentinelMaster)
        # WAIT counts the writes of ITS connection: run both on one connection of the pool.
        pinned = redis.Redis(connection_pool=self.client.connection_pool, single_connection_client=True)
        try:
            result = self._collect(keys=keys, args=args, client=pinned)
            confirmed = int(pinned.wait(self.wait_replicas, self.wait_timeout_ms))
            conn = pinned.connection
            wrote_to = (str(conn.host), int(conn.port)) if conn is not None else None
        finally:
            pinned.close()  # back to the pool
        if confirmed >= self.wait_replicas:
            return result
        if wrote_to is not None and self.client.still_master(wrote_to):
            self.unreplicated += 1
            return result
        raise NotReplicated(f"{confirmed} of {self.wait_replicas} replica(s) confirmed a buffered write within "
                            f"{self.wait_timeout_ms} ms and {wrote_to} is no longer the master")

    def state(self, session_id: str) -> SessionState | None:
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(self.state_key(session_id))
        pipe.llen(self.messages_key(session_id))
        raw, length = pipe.execute()
        return SessionState.from_hash(raw, length=int(length)) if raw else None

    def summary_version(self, session_id: str) -> int | None:
        raw = self.client.hget(self.state_key(session_id), "summary_version")
        return int(raw) if raw is not None else None

    def raise_summary_version(self, session_id: str, version: int) -> None:
        """Record a summary made elsewhere (in-process during an outage) if it is newer."""
        known = self.summary_version(session_id)
        if known is not None and known < version:
            self.client.hset(self.state_key(session_id), "summary_version", version)

    def pending(self, session_id: str) -> PendingBatch | None:
        state = self.state(session_id)
        if state is None:
            return None
        first = state.total - state.length
        start = max(first, state.summarized)
        raw = self.client.lrange(self.messages_key(session_id), start - first, -1) if state.length else []
        messages = [m for m in (BufferedMessage.from_json(r) for r in raw) if m is not None]
        return PendingBatch(state, messages, start, dropped=max(0, first - state.summarized))

    def entries(self, session_id: str) -> list[BufferedMessage]:
        raw = self.client.lrange(self.messages_key(session_id), 0, -1)
        return [m for m in (BufferedMessage.from_json(r) for r in raw) if m is not None]

    # -- lock ---------------------------------------------------------------------------------
    def acquire(self, session_id: str, token: str, ttl_ms: int) -> bool:
        return bool(self.client.set(self.lock_key(session_id), token, nx=True, px=max(1, ttl_ms)))

    def release(self, session_id: str, token: str) -> bool:
        return bool(self._release(keys=[self.lock_key(session_id)], args=[token]))

    def renew(self, session_id: str, token: str, ttl_ms: int) -> bool:
        """Compare-and-PEXPIRE: extend the lock while ``token`` holds it (the summary lease)."""
        return bool(self._renew(keys=[self.lock_key(session_id)], args=[token, max(1, ttl_ms)]))

    def holds(self, session_id: str, token: str) -> bool:
        raw = self.client.get(self.lock_key(session_id))
        return raw is not None and raw.decode() == token

    def lock_ttl_ms(self, session_id: str) -> int | None:
        ttl = int(self.client.pttl(self.lock_key(session_id)))
        return ttl if ttl >= 0 else None

    def lock_holder(self, session_id: str) -> str | None:
        raw = self.client.get(self.lock_key(session_id))
        return raw.decode("utf-8", errors="replace").rsplit("/", 1)[0] if raw is not None else None

    # -- after a summary ----------------------------------------------------------------------
    def commit(self, session_id: str, *, token: str, epoch: str, summarized: int, keep: int,
               version: int, now: float, ttl: int) -> CommitOutcome:
        keys = [self.messages_key(session_id), self.state_key(session_id), self.lock_key(session_id)]
        code = int(self._commit(keys=keys, args=[token, epoch, summarized, keep, version, repr(now), ttl]))
        if code == -1:
            return CommitOutcome.LOCK_LOST
        if code == -2:
            return CommitOutcome.STATE_RESET
        return CommitOutcome.DONE

    def record_failure(self, session_id: str, *, error: str, retry_at: float, ttl: int) -> None:
        skey = self.state_key(session_id)
        pipe = self.client.pipeline(transaction=True)
        pipe.hincrby(skey, "failures", 1)
        pipe.hset(skey, mapping={"last_error": error[:500], "retry_at": repr(retry_at)})
        pipe.expire(skey, ttl)
        pipe.execute()

    def clear(self, session_id: str) -> None:
        self.client.delete(self.messages_key(session_id), self.state_key(session_id))
