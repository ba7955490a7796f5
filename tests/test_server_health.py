"""Liveness, readiness (store and Redis, each with a deadline) and the effective config."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness_memory.config import MemoryConfig
from tests.servers import RedisServer

from .test_server_memory import api

MakeConfig = Callable[..., MemoryConfig]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts TCP connections and never answers (a hung store)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


async def test_ready_on_seaweedfs_and_redis(make_config: MakeConfig) -> None:
    cfg = make_config(backend="cos", redis=True)
    async with api(cfg) as c:
        assert (await c.get("/health/live")).json() == {"status": "ok"}
        r = await c.get("/health/ready")
    assert r.status_code == 200
    checks = r.json()["checks"]
    assert checks["store"] == {**checks["store"], "ok": True, "detail": "object store reachable"}
    assert checks["redis"]["ok"] is True and checks["redis"]["detail"] == "redis reachable"
    assert cfg.store.cos_bucket not in r.text  # probes reveal no names


async def test_ready_on_embedded_defaults(make_config: MakeConfig) -> None:
    async with api(make_config(backend="local")) as c:
        r = await c.get("/health/ready")
    assert r.status_code == 200
    assert r.json()["checks"]["redis"]["detail"] == "not configured (in-process mode)"


async def test_redis_down_is_not_ready_but_alive(tmp_path: Path) -> None:
    redis = RedisServer().start()  # a private server: this test kills it
    try:
        cfg = MemoryConfig.load(env={}, store={"backend": "local", "local_root": str(tmp_path / ".harness")},
                                redis={"url": redis.url, "socket_timeout": 0.5})
        async with api(cfg) as c:
            assert (await c.get("/health/ready")).status_code == 200
            redis.kill()
            r = await c.get("/health/ready")
            assert r.status_code == 503 and r.json()["status"] == "unavailable"
            assert r.json()["checks"]["redis"]["ok"] is False and r.json()["checks"]["store"]["ok"] is True
            assert (await c.get("/health/live")).status_code == 200
            assert (await c.get("/users/me/agents/default/memory", headers={"wid": "u1"})).status_code == 200
    finally:
        redis.stop()


async def test_a_hung_store_times_out_the_check(make_config: MakeConfig, silent_port: int) -> None:
    cfg = make_config(backend="cos", store={"cos_domain": f"127.0.0.1:{silent_port}/b", "cos_timeout": 2.0},
                      server={"ready_timeout_seconds": 0.3})
    async with api(cfg) as c:
        r = await c.get("/health/ready")
    assert r.status_code == 503
    assert r.json()["checks"]["store"] == {**r.json()["checks"]["store"], "ok": False,
                                           "detail": "no answer within 0.3 s"}


async def test_config_without_admin_token_is_open_and_masked(make_config: MakeConfig) -> None:
    cfg = make_config(backend="local", model={"model": "m", "base_url": "http://127.0.0.1:9", "api_key": "sk-xyz"})
    async with api(cfg) as c:
        r = await c.get("/config")
    assert r.status_code == 200
    assert r.json()["model"]["api_key"] == "***" and "sk-xyz" not in r.text
    assert r.json()["server"]["user_source"] == "header"
