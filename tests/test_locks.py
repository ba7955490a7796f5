"""Place locks: Redis (SET NX PX + compare-and-delete) and local, plus the multi-process write storm."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from harness_memory.config import MemoryConfig
from harness_memory.errors import LockTimeout
from harness_memory.locks import LocalLocker, RedisLocker
from harness_memory.memdir import parse_index
from harness_memory.services import MemoryServices

from .helpers import child_env, spawn, write_config


@pytest.fixture
def redis_client(redis_server: Any) -> redis.Redis:
    client = redis.Redis.from_url(redis_server.url, socket_timeout=1.0)
    yield client
    client.close()


def exclusive(locker: Any, name: str, n_threads: int = 8, rounds: int = 20) -> int:
    """Run a non-atomic increment under the lock from many threads; returns the final count."""
    box = {"n": 0}

    def work() -> None:
        for _ in range(rounds):
            with locker.hold(name):
                v = box["n"]
                time.sleep(0.0005)
                box["n"] = v + 1

    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return box["n"]


def test_redis_lock_is_exclusive(redis_client: redis.Redis) -> None:
    locker = RedisLocker(redis_client, prefix="t-excl:", ttl=5, wait=10)
    assert exclusive(locker, "p") == 160
    assert redis_client.get(locker.keys("p")[0]) is None  # released


def test_redis_lock_times_out_and_expires(redis_client: redis.Redis) -> None:
    locker = RedisLocker(redis_client, prefix="t-exp:", ttl=0.3, wait=0.05)
    redis_client.set(locker.keys("p")[0], "someone-else", px=300)  # a crashed holder
    with pytest.raises(LockTimeout, match="another writer holds"), locker.hold("p"):
        pass
    time.sleep(0.35)
    with locker.hold("p"):
        assert redis_client.get(locker.keys("p")[0]) not in (None, b"someone-else")


def test_redis_release_never_frees_a_foreign_lock(redis_client: redis.Redis) -> None:
    locker = RedisLocker(redis_client, prefix="t-cad:", ttl=0.1, wait=1, renew_every=0)  # no renewal
    key = locker.keys("p")[0]
    with locker.hold("p"):
        time.sleep(0.15)  # our lock expired...
        redis_client.set(key, "other", px=5000)  # ...and another pod took it
    assert redis_client.get(key) == b"other"


def test_redis_down_falls_back_to_local_lock(caplog: pytest.LogCaptureFixture) -> None:
    dead = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_timeout=0.2, socket_connect_timeout=0.2)
    locker = RedisLocker(dead, prefix="x:", ttl=1, wait=1)
    with caplog.at_level("WARNING"):
        assert exclusive(locker, "p", n_threads=4, rounds=5) == 20
    assert sum("Redis lock unavailable" in r.message for r in caplog.records) == 1


def test_local_lock_across_threads_and_timeout(tmp_path: Path) -> None:
    # Exclusion with a generous wait (8 threads queue for 160 short holds; a loaded machine made
    # a 0.1 s wait time out), then the timeout with a short one on the same lock folder.
    assert exclusive(LocalLocker(tmp_path / "locks", wait=30), "p") == 160
    locker = LocalLocker(tmp_path / "locks", wait=0.1)
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with locker.hold("q"):
            held.set()
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    held.wait(5)
    with pytest.raises(LockTimeout), locker.hold("q"):
        pass
    release.set()
    t.join()


def run_storm(cfg: MemoryConfig, tmp_path: Path, processes: int = 8, per_process: int = 25) -> list[str]:
    path = write_config(cfg, tmp_path / "storm.yaml")
    env = child_env(path)
    procs = [spawn("tests.storm_worker", "storm-user", str(w), str(per_process), env=env)
             for w in range(processes)]
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=240)
        outputs.append(out)
        assert p.returncode == 0, out
    svc = MemoryServices.from_config(cfg)
    try:
        memdir = svc.user_agent_dir("storm-user")
        index = svc.store.get(memdir.index_key).data.decode()
        manifest = memdir.manifest()
    finally:
        svc.close()
    files = [f for _, f, _ in parse_index(index)]
    assert len(manifest.entries) == processes * per_process
    return files


@pytest.mark.xdist_group("storms")
def test_write_storm_cos_with_redis_lock(make_config: Callable[..., MemoryConfig], tmp_path: Path) -> None:
    # Conditional PUT off, as on real COS: the Redis lock alone must keep the index whole.
    cfg = make_config(backend="cos", redis=True, store={"cos_conditional_put": "off"})
    files = run_storm(cfg, tmp_path)
    assert len(files) == 200 and len(set(files)) == 200


@pytest.mark.xdist_group("storms")
def test_write_storm_local_store(make_config: Callable[..., MemoryConfig], tmp_path: Path) -> None:
    cfg = make_config(backend="local")
    files = run_storm(cfg, tmp_path)
    assert len(files) == 200 and len(set(files)) == 200
