"""The one Redis client factory: settings → topology, errors → "degrade" or "bug", and every part
(session buffer, place lock, surfaced tracker) degrading — never raising — when a Sentinel,
Cluster or TLS deployment cannot be reached, then recovering when it can."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster
from redis.exceptions import ClusterDownError, CrossSlotTransactionError, RedisClusterException
from redis.sentinel import MasterNotFoundError

from harness_memory.config import ConfigError, MemoryConfig, RedisConfig
from harness_memory.redis_client import (
    LazyCluster,
    SentinelMaster,
    describe,
    is_unavailable,
    make_redis,
    target_for,
)
from harness_memory.services import MemoryServices
from harness_memory.session import BufferedMessage
from harness_memory.session.buffer import SessionBuffer
from tests.redis_topologies import ClusterRedis, TLSRedis
from tests.servers import free_ports


def msg(i: int) -> BufferedMessage:
    return BufferedMessage(role="user", content=f"message {i}", tokens=5, tool_calls=0, created_at=i)


@pytest.mark.parametrize(("settings", "expected"), [
    ({"url": "redis://127.0.0.1:6379/2"}, ("standalone", (), False)),
    ({"url": "rediss://h:6380/0"}, ("standalone", (), True)),
    ({"url": "redis+sentinel://u:p%40ss@a:1,b:2,[::1]:3/cache/2"},
     ("sentinel", (("a", 1), ("b", 2), ("::1", 3)), False)),
    ({"url": "rediss+sentinel://a/cache"}, ("sentinel", (("a", 26379),), True)),
    ({"sentinels": "a:1, b:2", "sentinel_master": "m", "url": "rediss://:pw@/3"},
     ("sentinel", (("a", 1), ("b", 2)), True)),
    ({"url": "redis+cluster://a:7000,b"}, ("cluster", (("a", 7000), ("b", 6379)), False)),
    ({"url": "rediss://a:7000", "mode": "cluster"}, ("cluster", (("a", 7000),), True)),
])
def test_settings_name_the_topology(settings: dict[str, Any], expected: tuple[str, tuple[Any, ...], bool]) -> None:
    target = target_for(RedisConfig(**settings))
    assert target is not None
    assert (target.mode, target.hosts, target.tls) == expected
    client = make_redis(RedisConfig(**settings))
    kind = {"standalone": redis.Redis, "sentinel": SentinelMaster, "cluster": LazyCluster}[expected[0]]
    assert isinstance(client, kind)
    client.close()  # made without connecting: nothing listens on these addresses


def test_sentinel_url_details() -> None:
    target = target_for(RedisConfig(url="redis+sentinel://u:p%40ss@a:1/cache/2"))
    assert target is not None
    assert (target.master, target.db, target.username, target.password) == ("cache", 2, "u", "p@ss")
    by_settings = target_for(RedisConfig(sentinels="a:1", url="redis://:pw@/3", sentinel_master="m"))
    assert by_settings is not None and (by_settings.master, by_settings.db, by_settings.password) == ("m", 3, "pw")
    assert target_for(RedisConfig()) is None and not RedisConfig().enabled
    assert describe(RedisConfig(url="redis://u:secret@h:1/0")) == "standalone redis://h:1/0"


@pytest.mark.parametrize(("settings", "message"), [
    ({"url": "http://h:1"}, "unknown scheme"),
    ({"url": "redis+cluster://a:1/3"}, "only database 0"),
    ({"url": "redis+sentinel://a:1/m", "mode": "standalone"}, "mode is standalone"),
    ({"sentinels": "a:port"}, "redis.sentinels: 'a:port' is not host:port"),
    ({"url": "unix:///tmp/r.sock", "mode": "cluster"}, "not a unix:// URL"),
    ({"key_prefix": "hm{x}:"}, "must not contain { or }"),
])
def test_bad_settings_fail_at_load_naming_the_setting(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="redis") as info:
        MemoryConfig.load(env={}, redis=settings)
    assert message in str(info.value)


def test_public_config_masks_redis_passwords() -> None:
    cfg = MemoryConfig.load(env={}, redis={"url": "redis+sentinel://u:hunter2@a:1/m", "password": "pw2",
                                           "sentinel_password": "pw3"})
    shown = str(cfg.public_dict()["redis"])
    assert "hunter2" not in shown and "pw2" not in shown and "pw3" not in shown
    assert "redis+sentinel://u:***@a:1/m" in shown


def test_error_classes_outage_versus_bug(redis_cluster: ClusterRedis) -> None:
    """The cluster client refuses cross-slot commands itself with an exception that is not a
    RedisError: a bug in our keys (raised), not an outage (degraded)."""
    client = RedisCluster(host="127.0.0.1", port=redis_cluster.nodes[0].port, socket_timeout=2)
    try:
        with pytest.raises(RedisClusterException) as refused:
            client.eval("return 1", 2, "{a}:x", "{b}:x")
        assert not isinstance(refused.value, redis.RedisError) and not is_unavailable(refused.value)
        pipe = client.pipeline(transaction=True)
        pipe.set("{a}:x", 1)
        pipe.set("{b}:x", 1)
        with pytest.raises(CrossSlotTransactionError) as tx:
            pipe.execute()
        assert not is_unavailable(tx.value)
    finally:
        client.close()
    assert is_unavailable(MasterNotFoundError("no master")) and is_unavailable(ClusterDownError("CLUSTERDOWN"))
    assert is_unavailable(RedisClusterException("Redis Cluster cannot be connected"))
    assert is_unavailable(ConnectionRefusedError()) and not is_unavailable(redis.ResponseError("WRONGTYPE"))


def _every_part_degrades(cfg: MemoryConfig, caplog: pytest.LogCaptureFixture) -> None:
    """With Redis unreachable: services start, buffer in-process (one warning), place lock local,
    surfaced tracker in-process — nothing raises."""
    with caplog.at_level(logging.WARNING), MemoryServices.from_config(cfg) as services:
        assert services.redis is not None
        buffer = SessionBuffer(services.redis, key_prefix="deg:", retry_after_seconds=60)
        for i in range(3):
            buffer.collect("s", [msg(i)], cap=10, ttl=60)
        assert buffer.mode == "local" and buffer.warnings == 1 and len(buffer.entries("s")) == 3
        with services.locker.hold("place-a", wait=1):
            pass
        tracker = services.surfaced_tracker()
        tracker.mark("s", ["a.md"], user_id="u")
        assert tracker.surfaced("s", user_id="u") == {"a.md"}
    text = caplog.text
    assert "Redis unavailable for session memory" in text and "Redis lock unavailable" in text


def test_unreachable_sentinels_degrade_every_part(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    ports = free_ports(2)
    cfg = MemoryConfig.load(env={}, store={"backend": "local", "local_root": str(tmp_path)},
                            redis={"url": f"redis+sentinel://127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}/m/0",
                                   "socket_timeout": 0.3})
    client = make_redis(cfg.redis)
    assert isinstance(client, SentinelMaster)
    with pytest.raises(MasterNotFoundError):
        client.ping()
    client.close()
    _every_part_degrades(cfg, caplog)


def test_tls_needs_the_certificates_it_is_given(redis_tls: TLSRedis, caplog: pytest.LogCaptureFixture,
                                                 tmp_path: Any) -> None:
    """The server requires a client certificate: with CA + cert + key the buffer runs on Redis;
    without the client certificate the handshake fails and every part degrades."""
    good = make_redis(RedisConfig(**redis_tls.settings()))
    assert good is not None and good.ping()
    good.close()
    no_client_cert = {k: v for k, v in redis_tls.settings().items() if k not in ("ssl_certfile", "ssl_keyfile")}
    cfg = MemoryConfig.load(env={}, store={"backend": "local", "local_root": str(tmp_path)},
                            redis={**no_client_cert, "socket_timeout": 1.0})
    _every_part_degrades(cfg, caplog)


def test_cluster_down_at_start_then_up_then_nodes_die(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A pod starts while the cluster is down (RedisCluster would raise in its constructor; the
    lazy client does not), buffers in-process, moves the messages into the cluster once it
    answers, and degrades again when the node of its session dies — and when every node dies,
    where the cluster client raises RedisClusterException, which is not a RedisError."""
    ports = free_ports(6)
    cfg = MemoryConfig.load(env={}, store={"backend": "local", "local_root": str(tmp_path / "store")},
                            redis={"url": f"redis+cluster://127.0.0.1:{ports[0]},127.0.0.1:{ports[2]}",
                                   "key_prefix": "lazy:", "socket_timeout": 0.5, "retry_after_seconds": 0})
    clock = [1000.0]
    tick: Callable[[], float] = lambda: clock[0]  # noqa: E731
    cluster = ClusterRedis(tmp_path / "cluster", ports=ports)
    with caplog.at_level(logging.INFO, logger="harness_memory"), MemoryServices.from_config(cfg) as services:
        client = services.redis
        assert isinstance(client, LazyCluster)
        buffer = SessionBuffer(client, key_prefix="lazy:", retry_after_seconds=30, monotonic=tick)
        tracker = services.surfaced_tracker()
        try:
            buffer.collect("s", [msg(0), msg(1)], cap=100, ttl=600)
            assert buffer.mode == "local" and not client.connected
            cluster.start()
            clock[0] += 31  # the re-probe is due
            state = buffer.collect("s", [msg(2)], cap=100, ttl=600)
            assert buffer.mode == "redis" and client.connected and state.total == 3
            assert [m.content for m in buffer.entries("s")] == ["message 0", "message 1", "message 2"]
            assert buffer.local.session_ids() == []
            tracker.mark("s", ["a.md"], user_id="u")
            assert client.smembers("lazy:recall:surfaced:u:default:s") == {b"a.md"}
            with services.locker.hold("place-a", wait=2):
                pass

            cluster.node_for("lazy:session:{s}:messages").kill()
            buffer.collect("s", [msg(3)], cap=100, ttl=600)  # not lost: kept in-process
            assert buffer.mode == "local" and [m.content for m in buffer.entries("s")] == ["message 3"]

            for node in cluster.nodes:
                node.kill()
            clock[0] += 31
            buffer.collect("s", [msg(4)], cap=100, ttl=600)
            assert [m.content for m in buffer.entries("s")] == ["message 3", "message 4"]
            with services.locker.hold("place-a", wait=2):  # falls back to the local lock
                pass
            tracker.mark("s", ["b.md"], user_id="u")
            assert "b.md" in tracker.surfaced("s", user_id="u")
        finally:
            cluster.close()
    assert buffer.warnings == 2  # one per outage
    assert "Redis reachable again" in caplog.text and "Redis lock unavailable" in caplog.text
