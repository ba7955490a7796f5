"""The session hot buffer: in-process mode and Redis mode on every topology (one server, TLS,
Sentinel, a 3-master Cluster — real servers) pass the same contract; outage → in-process with one
warning; recovery moves the buffered messages back."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from harness_memory.session import BufferedMessage
from harness_memory.session.buffer import SessionBuffer
from harness_memory.session.records import CommitOutcome
from tests.redis_topologies import TOPOLOGIES, Topology, topology_settings
from tests.servers import RedisServer


class Clock:
    """A hand-driven clock (wall and monotonic) so TTLs and retry windows need no sleeping."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def msg(i: int, *, tokens: int = 10, calls: int = 0, role: str = "user") -> BufferedMessage:
    return BufferedMessage(role=role, content=f"message {i} 你好", tokens=tokens, tool_calls=calls, created_at=i)


@pytest.fixture
def redis_client(redis_server: Any) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url, socket_timeout=2.0)
    yield client
    client.close()


@pytest.fixture(params=["local", *TOPOLOGIES])
def buffer(request: pytest.FixtureRequest) -> Iterator[SessionBuffer]:
    """The in-process buffer, then the Redis buffer on each topology (a cross-slot command
    would raise here: the cluster client refuses it before sending)."""
    clock = Clock()
    if request.param == "local":
        yield SessionBuffer(None, clock=clock)
        return
    client = Topology(request.param, topology_settings(request, request.param)).client()
    buf = SessionBuffer(client, key_prefix=f"tb-{uuid.uuid4().hex[:8]}:", clock=clock)
    yield buf
    assert buf.mode == "redis" and buf.warnings == 0  # never fell back: the contract ran on Redis
    client.close()


def contents(entries: list[BufferedMessage]) -> list[str]:
    return [e.content for e in entries]


def test_collect_appends_in_order_and_counts(buffer: SessionBuffer) -> None:
    s1 = buffer.collect("s1", [msg(0, tokens=5), msg(1, tokens=7, calls=2, role="assistant")], cap=100, ttl=3600)
    assert (s1.total, s1.tokens, s1.tool_calls, s1.last_turn_tool_calls, s1.turns) == (2, 12, 2, 2, 1)
    s2 = buffer.collect("s1", [msg(2, tokens=3)], cap=100, ttl=3600)
    assert (s2.total, s2.tokens, s2.tool_calls, s2.last_turn_tool_calls, s2.turns) == (3, 15, 2, 0, 2)
    assert s2.epoch and s2.epoch == s1.epoch and s2.length == 3
    assert contents(buffer.entries("s1")) == ["message 0 你好", "message 1 你好", "message 2 你好"]
    assert buffer.entries("s1")[1].tool_calls == 2
    assert buffer.state("other") is None and buffer.entries("other") == []
    batch = buffer.pending("s1")
    assert batch is not None and batch.start == 0 and len(batch.messages) == 3 and batch.dropped == 0


def test_cap_keeps_the_newest_and_reports_dropped(buffer: SessionBuffer) -> None:
    buffer.collect("s1", [msg(i) for i in range(8)], cap=5, ttl=3600)
    state = buffer.state("s1")
    assert state is not None and (state.total, state.length) == (8, 5)
    assert contents(buffer.entries("s1"))[0] == "message 3 你好"
    batch = buffer.pending("s1")
    assert batch is not None and (batch.start, batch.dropped, len(batch.messages)) == (3, 3, 5)


def test_commit_keeps_summarised_tail_and_everything_newer(buffer: SessionBuffer) -> None:
    buffer.collect("s1", [msg(i, tokens=i + 1) for i in range(6)], cap=100, ttl=3600)
    assert buffer.acquire("s1", "tok", 60_000)
    batch = buffer.pending("s1")
    assert batch is not None and len(batch.messages) == 6
    # Two messages arrive while the model writes the summary of the first six.
    buffer.collect("s1", [msg(6, tokens=100, calls=1), msg(7, tokens=200, calls=3)], cap=100, ttl=3600)
    outcome = buffer.commit("s1", token="tok", epoch=batch.state.epoch, summarized=6, keep=2, version=1,
                            ttl=3600)
    assert outcome is CommitOutcome.DONE
    assert contents(buffer.entries("s1")) == [f"message {i} 你好" for i in (4, 5, 6, 7)]
    state = buffer.state("s1")
    assert state is not None
    assert (state.summarized, state.tokens, state.tool_calls, state.summary_version, state.summaries) == (
        6, 300, 4, 1, 1)
    after = buffer.pending("s1")
    assert after is not None and after.start == 6 and contents(after.messages) == ["message 6 你好",
                                                                                  "message 7 你好"]
    assert buffer.summary_version("s1") == 1


def test_commit_needs_the_lock_and_the_same_buffer(buffer: SessionBuffer) -> None:
    buffer.collect("s1", [msg(i) for i in range(4)], cap=100, ttl=3600)
    assert buffer.acquire("s1", "mine", 60_000)
    epoch = buffer.state("s1").epoch  # type: ignore[union-attr]
    assert buffer.commit("s1", token="not-mine", epoch=epoch, summarized=4, keep=0, version=1,
                         ttl=3600) is CommitOutcome.LOCK_LOST
    assert buffer.commit("s1", token="mine", epoch="another-epoch", summarized=4, keep=0, version=1,
                         ttl=3600) is CommitOutcome.STATE_RESET
    state = buffer.state("s1")
    assert state is not None and (state.summarized, state.tokens, state.length) == (0, 40, 4)


def test_lock_is_exclusive_and_released_only_by_its_holder(buffer: SessionBuffer) -> None:
    assert buffer.acquire("s1", "a", 60_000)
    assert not buffer.acquire("s1", "b", 60_000)
    assert buffer.holds("s1", "a") and not buffer.holds("s1", "b")
    assert not buffer.release("s1", "b")
    ttl = buffer.lock_ttl_ms("s1")
    assert ttl is not None and 0 < ttl <= 60_000
    assert buffer.release("s1", "a")
    assert buffer.lock_ttl_ms("s1") is None
    assert buffer.acquire("s1", "b", 60_000)


def test_redis_keys_layout_and_ttl_renewal(redis_client: redis.Redis) -> None:
    prefix = f"tk-{uuid.uuid4().hex[:8]}:"
    buf = SessionBuffer(redis_client, key_prefix=prefix)
    buf.collect("abc", [msg(0)], cap=10, ttl=600)
    assert buf.acquire("abc", "tok", 5000)
    keys = sorted(k.decode() for k in redis_client.scan_iter(match=prefix + "*"))
    assert keys == [f"{prefix}session:{{abc}}:{name}" for name in ("lock", "messages", "state")]
    redis_client.expire(f"{prefix}session:{{abc}}:messages", 5)
    buf.collect("abc", [msg(1)], cap=10, ttl=600)  # renews the TTL
    for name in ("messages", "state"):
        assert 590 <= redis_client.ttl(f"{prefix}session:{{abc}}:{name}") <= 600
    assert redis_client.type(f"{prefix}session:{{abc}}:state") == b"hash"
    assert redis_client.hget(f"{prefix}session:{{abc}}:state", "total") == b"2"


def test_redis_lock_of_a_crashed_holder_expires(redis_client: redis.Redis) -> None:
    buf = SessionBuffer(redis_client, key_prefix=f"tx-{uuid.uuid4().hex[:8]}:")
    assert buf.acquire("s", "crashed", 100)
    assert not buf.acquire("s", "next", 60_000)
    import time

    time.sleep(0.15)  # waiting for Redis to expire the key, not asserting on speed
    assert buf.acquire("s", "next", 60_000)


def test_local_sessions_and_locks_expire_by_ttl() -> None:
    clock = Clock()
    buf = SessionBuffer(None, clock=clock)
    buf.collect("s", [msg(0)], cap=10, ttl=60)
    assert buf.acquire("s", "crashed", 5000)
    clock.advance(6)
    assert buf.acquire("s", "next", 5000)  # the crashed holder's lock expired
    clock.advance(61)
    assert buf.state("s") is None and buf.entries("s") == []


def test_failure_is_recorded_in_the_state(buffer: SessionBuffer) -> None:
    buffer.collect("s", [msg(0)], cap=10, ttl=3600)
    buffer.record_failure("s", error="model said nonsense", retry_at=123.0, ttl=3600)
    state = buffer.state("s")
    assert state is not None and (state.failures, state.retry_at, state.last_error) == (
        1, 123.0, "model said nonsense")


def test_no_redis_url_means_local_mode_without_warning(caplog: pytest.LogCaptureFixture) -> None:
    buf = SessionBuffer(None)
    with caplog.at_level(logging.WARNING):
        buf.collect("s", [msg(0)], cap=10, ttl=3600)
        assert buf.mode == "local" and buf.configured_mode == "local"
    assert not caplog.records and buf.warnings == 0


def test_unreachable_redis_falls_back_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    # from_url, like make_redis: no client-side retries (redis.Redis(host=...) retries 10 times).
    dead = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_timeout=0.2, socket_connect_timeout=0.2)
    clock = Clock()
    buf = SessionBuffer(dead, retry_after_seconds=30, clock=clock, monotonic=clock)
    with caplog.at_level(logging.WARNING, logger="harness_memory"):
        for i in range(3):
            buf.collect("s", [msg(i)], cap=10, ttl=3600)
        clock.advance(31)  # a re-probe is due; it fails silently
        buf.collect("s", [msg(3)], cap=10, ttl=3600)
    assert buf.mode == "local" and buf.configured_mode == "redis"
    assert len(buf.entries("s")) == 4
    warnings = [r for r in caplog.records if "Redis unavailable" in r.getMessage()]
    assert len(warnings) == 1 and buf.warnings == 1


def test_outage_then_recovery_moves_messages_into_redis(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url, socket_timeout=1.0, socket_connect_timeout=1.0)
        buf = SessionBuffer(client, key_prefix="rec:", retry_after_seconds=30, clock=clock, monotonic=clock)
        buf.collect("s", [msg(0), msg(1)], cap=100, ttl=3600)
        assert buf.mode == "redis"
        server.kill()
        with caplog.at_level(logging.INFO, logger="harness_memory"):
            buf.collect("s", [msg(2)], cap=100, ttl=3600)  # fails over, not lost
            buf.collect("s", [msg(3, calls=1)], cap=100, ttl=3600)
            buf.collect("other", [msg(9)], cap=100, ttl=3600)
            assert buf.mode == "local"
            assert contents(buf.entries("s")) == ["message 2 你好", "message 3 你好"]
            server.start()  # same port, empty (no persistence)
            assert buf.mode == "local"  # not re-probed before retry_after_seconds
            clock.advance(31)
            buf.collect("s", [msg(4)], cap=100, ttl=3600)
        assert buf.mode == "redis"
        assert contents(buf.entries("s")) == [f"message {i} 你好" for i in (2, 3, 4)]
        state = buf.state("s")
        assert state is not None and (state.total, state.tool_calls) == (3, 1)
        assert contents(buf.entries("other")) == ["message 9 你好"]  # moved too
        assert buf.local.session_ids() == []
        raw = client.lrange("rec:session:{s}:messages", 0, -1)
        assert [BufferedMessage.from_json(r).content for r in raw] == contents(buf.entries("s"))  # type: ignore[union-attr]
        client.close()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("Redis unavailable" in m for m in messages) == 1
    assert any("Redis reachable again" in m for m in messages)


def test_buffered_message_json_round_trip_and_foreign_entries() -> None:
    m = BufferedMessage("tool", "结果 ok", tokens=3, tool_calls=0, name="search", created_at=1.5)
    assert BufferedMessage.from_json(m.to_json()) == m
    assert BufferedMessage.from_json(b"not json") is None
    assert BufferedMessage.from_json('{"c": "no role"}') is None


def test_replicated_collects_are_confirmed_or_stay_on_the_current_master(redis_sentinel: Any) -> None:
    """``redis.wait_replicas`` (Sentinel): the set has one replica. One confirmation: stored and
    already on the replica. Two (never confirmed): the write went to the master the sentinels
    name, so it is kept in Redis and counted as unreplicated — not copied in-process, where every
    later move would store it again. (Writes to a demoted master: ``make bench``, failover.)"""
    client = Topology("sentinel", redis_sentinel.settings()).client()
    try:
        ok = SessionBuffer(client, key_prefix=f"tw-{uuid.uuid4().hex[:8]}:", wait_replicas=1, wait_timeout_ms=2000)
        state = ok.collect("s", [msg(0), msg(1)], cap=10, ttl=600)
        assert ok.mode == "redis" and state.total == 2 and ok.local_collects == 0
        assert ok.redis is not None and ok.redis.unreplicated == 0
        replica = redis_sentinel.replica.client()
        assert replica.llen(ok.redis.messages_key("s")) == 2  # on the replica already

        lagging = SessionBuffer(client, key_prefix=f"tw-{uuid.uuid4().hex[:8]}:", wait_replicas=2,
                                wait_timeout_ms=50)
        lagging.collect("s", [msg(0)], cap=10, ttl=600)
        lagging.collect("s", [msg(1)], cap=10, ttl=600)
        assert lagging.mode == "redis" and lagging.local_collects == 0 and lagging.warnings == 0
        assert lagging.redis is not None and lagging.redis.unreplicated == 2
        assert contents(lagging.entries("s")) == ["message 0 你好", "message 1 你好"]
    finally:
        client.close()


def test_wait_replicas_needs_sentinel() -> None:
    from harness_memory.config import ConfigError, MemoryConfig

    with pytest.raises(ConfigError, match="wait_replicas needs Sentinel"):
        MemoryConfig.load(env={}, redis={"url": "redis://127.0.0.1:1/0", "wait_replicas": 1})
