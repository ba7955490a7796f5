"""Warm builds (``memdir/versions.py``): versions announced through Redis, cached views and bodies.

Two "pods" (two ``MemoryServices`` over one SeaweedFS bucket and one Redis), each store wrapped so
every request it sends is logged: what a build sends is asserted, not inferred.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from harness_memory import build_agent
from harness_memory.config import MemoryConfig
from harness_memory.layout import Place
from harness_memory.memdir.versions import ABSENT, VersionBoard, WarmViews
from harness_memory.services import MemoryServices
from tests.faults import FaultyStore
from tests.helpers import faulty_pods
from tests.servers import RedisServer

QUERY = "python tip"
NOTES = 12
Pod = tuple[MemoryServices, FaultyStore]


def note(i: int, description: str | None = None, body: str | None = None) -> str:
    return (f"---\nname: note {i}\ndescription: {description or f'python tip number {i}'}\ntype: user\n---\n"
            f"{body or f'body of python tip {i}'}\n")


@pytest.fixture
def pods() -> Iterator[Callable[[MemoryConfig], Pod]]:
    with faulty_pods() as make:
        yield make


def full(make_config: Callable[..., MemoryConfig], redis: bool | str = True) -> MemoryConfig:
    """Recall (lexical: no model server), session and auto memory on."""
    return make_config("cos", redis=redis, recall={"enabled": True, "use_model": False, "max_files": 3},
                       session={"enabled": True}, auto={"enabled": True})


def build(pod: Pod, user: str = "u1") -> tuple[str, list[tuple[str, str]]]:
    """A build in a new conversation (recall never skips what an earlier one surfaced): its context
    and the store requests it sent."""
    services, store = pod
    store.calls.log.clear()
    agent = build_agent(user, session_id=f"s-{uuid.uuid4().hex[:8]}", query=QUERY, services=services)
    return str(agent.additional_context), list(store.calls.log)


def seed(services: MemoryServices, user: str = "u1") -> None:
    own = services.user_agent_dir(user)
    for i in range(NOTES):
        own.save(f"note_{i}.md", note(i))
    services.auto_memory().add_fact(user, "Prefers answers in Chinese")


def counted(services: MemoryServices, cache: str, outcome: str) -> float:
    metrics = services.telemetry.metrics
    assert metrics is not None
    return metrics.warm_cache.values.get((cache, outcome), 0.0)


def test_warm_build_sends_no_store_request_and_a_change_costs_at_most_three(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod]) -> None:
    cfg = full(make_config)
    a, b = pods(cfg), pods(cfg)
    seed(a[0])
    first, cold = build(b)
    assert cold and "Prefers answers in Chinese" in first and "python tip number" in first
    warm, sent = build(b)
    assert sent == []  # manifest heads, MEMORY.md, auto facts, search index, recalled bodies: all warm
    assert warm.count("python tip number") == first.count("python tip number")
    assert counted(b[0], "manifest", "hit") >= 2 and counted(b[0], "body", "hit") >= 1

    recalled = [line for line in warm.splitlines() if "note_" in line]
    assert recalled
    changed = next(i for i in range(NOTES) if f"note_{i}.md" in warm)
    a[0].user_agent_dir("u1").save(f"note_{changed}.md",
                                   note(changed, "python tip CHANGED", "the changed python tip body"))
    after, sent = build(b)
    assert "python tip CHANGED" in after
    assert len(sent) <= 3, sent
    assert all(op == "get" for op, _ in sent)
    again, sent = build(b)
    assert sent == [] and "python tip CHANGED" in again


@pytest.mark.parametrize("topology", ["cluster"])
def test_warm_build_on_redis_cluster(make_config: Callable[..., MemoryConfig],
                                     pods: Callable[[MemoryConfig], Pod], topology: str) -> None:
    """The places' version keys lie in different slots: the build still reads them in one go."""
    cfg = full(make_config, redis=topology)
    a, b = pods(cfg), pods(cfg)
    seed(a[0])
    build(b)
    _, sent = build(b)
    assert sent == []
    a[0].user_agent_dir("u1").save("note_0.md", note(0, "python tip on the cluster"))
    context, sent = build(b)
    assert "python tip on the cluster" in context and 1 <= len(sent) <= 3


def test_a_shared_memory_saved_on_one_pod_shows_in_the_next_build_on_another(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod]) -> None:
    """The shared place's view is cached per pod for 30 s; an announced newer version drops it."""
    cfg = full(make_config)
    a, b = pods(cfg), pods(cfg)
    seed(a[0])
    a[0].shared_agent_dir().save("team.md", note(50, "team python convention v1"))
    first, _ = build(b)
    assert "team python convention v1" in first
    a[0].shared_agent_dir().save("team.md", note(50, "team python convention v2"))
    context, sent = build(b)
    assert "team python convention v2" in context and "convention v1" not in context
    assert len(sent) <= 3, sent
    _, sent = build(b)
    assert sent == []


def test_the_pod_that_saved_builds_without_reading_its_head(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod]) -> None:
    cfg = full(make_config)
    a = pods(cfg)
    seed(a[0])
    build(a)
    a[0].user_agent_dir("u1").save("note_new.md", note(99, "python tip freshly saved"))
    context, sent = build(a)
    assert "python tip freshly saved" in context
    assert not any(key.endswith(".manifest.json") for _, key in sent), sent


def test_interleaved_saves_and_builds_across_a_redis_restart_never_read_stale(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod], tmp_path: Path) -> None:
    server = RedisServer(base_dir=tmp_path / "redis").start()
    try:
        cfg = make_config("cos", redis=False, recall={"enabled": True, "use_model": False, "max_files": 3},
                          session={"enabled": True}, auto={"enabled": True})
        cfg = cfg.model_copy(update={"redis": cfg.redis.model_copy(update={
            "url": server.url, "socket_timeout": 0.5, "retry_after_seconds": 0.0})})
        a, b = pods(cfg), pods(cfg)
        seed(a[0])
        build(b)
        own = a[0].user_agent_dir("u1")
        stale: list[int] = []
        reads: list[int] = []
        rounds = 12
        for k in range(rounds):
            if k == rounds // 2:
                server.restart()  # every announcement is lost
            own.save("note_0.md", note(0, f"python tip version {k}"))
            context, sent = build(b)
            reads.append(len(sent))
            if f"python tip version {k}" not in context:
                stale.append(k)
        assert stale == []
        assert min(reads) >= 1  # each change was read, never served from the old view
        _, sent = build(b)
        assert sent == []  # and once announced again, the view is warm again
    finally:
        server.stop()


def test_a_lost_announcement_is_served_at_most_trust_seconds(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod]) -> None:
    """A pod that died between its head and its announcement: Redis still names the old version.
    Readers serve their view until ``trust_seconds`` after they last read the head, then read."""
    cfg = full(make_config)
    a, b = pods(cfg), pods(cfg)
    seed(a[0])
    now = [1000.0]
    warm = b[0].warm = WarmViews(b[0].versions, trust_seconds=30.0, clock=lambda: now[0])
    build(b)
    own = a[0].user_agent_dir("u1")
    board = a[0].versions
    assert board is not None and b[0].redis is not None
    old = b[0].redis.get(board.key(own.place.prefix))
    own.save("note_0.md", note(0, "python tip LOST ANNOUNCEMENT"))
    b[0].redis.set(board.key(own.place.prefix), old)  # the announcement never happened
    now[0] += 29.0
    context, sent = build(b)
    assert sent == [] and "LOST ANNOUNCEMENT" not in context  # within the documented bound
    now[0] += 1.0
    context, sent = build(b)
    assert "LOST ANNOUNCEMENT" in context and sent
    assert warm.bytes > 0


def test_a_missing_version_key_is_read_and_announced_again(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod]) -> None:
    cfg = full(make_config)
    a, b = pods(cfg), pods(cfg)
    seed(a[0])
    build(b)
    assert b[0].redis is not None and b[0].versions is not None
    keys = [b[0].versions.key(p) for p in (Place.user_agent("u1", "default", "memory/").prefix,
                                           Place.user_auto("u1", "default", "memory/").prefix)]
    b[0].redis.delete(*keys)
    _, sent = build(b)
    assert any(key.endswith(".manifest.json") for _, key in sent)  # read, not trusted
    values = b[0].redis.mget(keys)
    assert all(v is not None for v in values)  # re-announced by the reader
    _, sent = build(b)
    assert sent == []


def test_without_redis_every_build_reads_the_heads(make_config: Callable[..., MemoryConfig],
                                                   pods: Callable[[MemoryConfig], Pod]) -> None:
    cfg = full(make_config, redis=False)
    a, b = pods(cfg), pods(cfg)
    seed(a[0])
    build(b)
    _, sent = build(b)
    assert any(key.endswith("agent-memory/default/.manifest.json") for _, key in sent)


def test_version_keys_carry_the_place_hash_tag() -> None:
    board = VersionBoard(None, "hm:")
    place = Place.user_agent("7", "default", "memory/")
    key = board.key(place.prefix)
    assert key == f"hm:ver:{{{place.prefix}}}"
    assert key_slot(key.encode()) == key_slot(f"hm:lockdone:{{{place.prefix}}}".encode())


class _Manifestless:
    """A place with a fixed manifest answer, counting its loads (the unit tests of the cache)."""

    def __init__(self, prefix: str, etag: str | None) -> None:
        from harness_memory.memdir import Manifest

        self.place = type("P", (), {"prefix": prefix})()
        self.etag = etag
        self.loads = 0
        self.manifest = Manifest()

    def load_manifest(self) -> tuple[object, str | None]:
        self.loads += 1
        return self.manifest, self.etag


class _Redis:
    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.up = True

    def mget(self, keys: list[str]) -> list[str | None]:
        if not self.up:
            raise ConnectionError("down")
        return [self.data.get(k) for k in keys]

    def set(self, key: str, value: str, ex: int, nx: bool = False) -> None:
        if not self.up:
            raise ConnectionError("down")
        if not (nx and key in self.data):
            self.data[key] = value


def test_redis_down_trusts_nothing_and_absent_places_are_announced() -> None:
    redis = _Redis()
    views = WarmViews(VersionBoard(redis, "t:"))
    empty = _Manifestless("memory/users/x/", None)
    views.load_manifest(empty, views.versions([empty]))  # type: ignore[arg-type,list-item]
    assert redis.data == {"t:ver:{memory/users/x/}": ABSENT}
    views.load_manifest(empty, views.versions([empty]))  # type: ignore[arg-type,list-item]
    assert empty.loads == 1
    redis.up = False
    views.load_manifest(empty, views.versions([empty]))  # type: ignore[arg-type,list-item]
    assert empty.loads == 2  # no answer from Redis: the store is read


def test_after_a_redis_failure_the_board_leaves_redis_alone_for_retry_after() -> None:
    redis = _Redis()
    now = [0.0]
    board = VersionBoard(redis, "t:", retry_after=5.0, clock=lambda: now[0])
    calls: list[int] = []
    board._round_trip = lambda: calls.append(1)
    redis.up = False
    assert board.read(["p/"]) is None and len(calls) == 1
    redis.up = True
    assert board.read(["p/"]) is None and len(calls) == 1  # not asked: builds read the store
    board.publish("p/", "e1")
    assert redis.data == {} and len(calls) == 1
    now[0] = 5.0
    assert board.read(["p/"]) == {"p/": None} and len(calls) == 2


def test_the_cache_stays_within_its_byte_budget() -> None:
    from harness_memory.memdir import ReadResult

    views = WarmViews(None, max_bytes=20_000)
    for i in range(200):
        text = "x" * 1000
        views.body("p/", f"f{i}.md", 1.0, 1000, lambda t=text, i=i: ReadResult(f"f{i}.md", t, "e", 0.0))
    assert 0 < views.bytes <= 20_000
    reads: list[int] = []
    views.body("p/", "f199.md", 1.0, 1000, lambda: reads.append(1))
    assert reads == []  # the newest stayed


_OPS = st.lists(st.one_of(
    st.tuples(st.just("commit"), st.booleans()),  # a commit; its announcement lost or not
    st.tuples(st.just("restart"), st.none()),      # Redis restarted empty
    st.tuples(st.just("redis"), st.booleans()),    # Redis answering or not
    st.tuples(st.just("tick"), st.floats(0.0, 40.0)),
    st.tuples(st.just("read"), st.none()),
), max_size=60)


@settings(max_examples=300, deadline=None)
@given(ops=_OPS)
@example(ops=[("commit", True), ("read", None), ("commit", False), ("tick", 31.0), ("read", None)])
def test_reads_are_never_older_than_announced_nor_stale_past_the_bound(ops: list[tuple[str, object]]) -> None:
    """Any interleaving of commits (announced or lost), Redis restarts and outages, time passing
    and reads: a read serves the announced version or the store's; a superseded version is
    served only within ``trust_seconds`` of the commit that superseded it."""
    redis, now = _Redis(), [0.0]
    board = VersionBoard(redis, "t:", retry_after=0.0, clock=lambda: now[0])
    views = WarmViews(board, trust_seconds=30.0, clock=lambda: now[0])
    place = _Manifestless("memory/users/x/", None)
    key = board.key(place.place.prefix)  # type: ignore[attr-defined]
    superseded: dict[str | None, float] = {}
    n = 0
    for op, arg in ops:
        if op == "commit":
            n += 1
            superseded[place.etag] = now[0]
            place.etag = f"e{n}"
            if arg and redis.up:
                redis.data[key] = place.etag
        elif op == "restart":
            redis.data.clear()
        elif op == "redis":
            redis.up = bool(arg)
        elif op == "tick":
            now[0] += float(arg)  # type: ignore[arg-type]
        else:
            announced = redis.data.get(key) if redis.up else None
            _, etag = views.load_manifest(place, views.versions([place]))  # type: ignore[arg-type,list-item]
            if etag != place.etag:  # a superseded version: only the announced one, within the bound
                assert announced is not None and (etag or ABSENT) == announced
                assert now[0] - superseded[etag] < 30.0
