"""Store reads a pod no longer makes (issue 33, the load test's reads per turn): write-through
bodies, bodies shared through Redis by version, state files by head, an extraction reading through
the warm views, no GET for a new fact's file, known file etags under this pod's own head, and a
first commit that does not read the search index.

Two or three "pods" (``MemoryServices`` over one SeaweedFS bucket and one redis-server), each store
wrapped so every request it sends is logged: what is read is asserted, and so is that nothing
older than the version Redis announces is ever served — across saves, a Redis restart and a read
that races a file's own PUT.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness_memory import build_agent
from harness_memory.auto.model import Category, Fact
from harness_memory.auto.store import STATE_FILE, AutoPlace
from harness_memory.config import MemoryConfig
from harness_memory.errors import OutcomeUnknown
from harness_memory.layout import SEARCH_DELTA_FILE, SEARCH_INDEX_FILE
from harness_memory.services import MemoryServices
from tests.faults import FaultyStore, on
from tests.helpers import faulty_pods
from tests.servers import RedisServer

QUERY = "python tip"
Pod = tuple[MemoryServices, FaultyStore]


def note(i: int, description: str, body: str) -> str:
    return f"---\nname: note {i}\ndescription: {description}\ntype: user\n---\n{body}\n"


@pytest.fixture
def pods() -> Iterator[Callable[[MemoryConfig], Pod]]:
    with faulty_pods() as make:
        yield make


def config(make_config: Callable[..., MemoryConfig], *, share: bool = True) -> MemoryConfig:
    """Recall (lexical), session and auto memory on; ``share``: bodies shared through Redis."""
    cfg = make_config("cos", redis=True, recall={"enabled": True, "use_model": False, "max_files": 3},
                      session={"enabled": True}, auto={"enabled": True})
    if share:
        return cfg
    return cfg.model_copy(update={"redis": cfg.redis.model_copy(update={"body_cache_seconds": 0.0})})


def build(pod: Pod, user: str = "u1") -> tuple[str, list[tuple[str, str]]]:
    """A build in a new conversation: its context and the store requests it sent."""
    services, store = pod
    store.calls.log.clear()
    agent = build_agent(user, session_id=f"s-{uuid.uuid4().hex[:8]}", query=QUERY, services=services)
    return str(agent.additional_context), list(store.calls.log)


def body_gets(sent: list[tuple[str, str]]) -> list[str]:
    """GETs of the user's recalled memory files (not MEMORY.md of the empty shared place)."""
    return [key for op, key in sent if op == "get" and key.rsplit("/", 1)[-1].startswith("note_")]


def counted(services: MemoryServices, cache: str, outcome: str) -> float:
    metrics = services.telemetry.metrics
    assert metrics is not None
    return metrics.warm_cache.values.get((cache, outcome), 0.0)


def seed(services: MemoryServices, n: int = 6) -> None:
    services.user_agent_dir("u1").save_many(
        [(f"note_{i}.md", note(i, f"python tip number {i}", f"body of python tip {i}")) for i in range(n)])


# -- bodies ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("share", [True, False])
def test_the_pod_that_saved_never_reads_its_own_bodies_back(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod], share: bool) -> None:
    a = pods(config(make_config, share=share))
    seed(a[0])
    context, sent = build(a)
    assert "body of python tip" in context
    assert body_gets(sent) == []  # written through by the commit, with or without Redis sharing
    assert counted(a[0], "body", "hit") >= 1


def test_a_body_is_read_from_the_store_once_across_pods(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod]) -> None:
    cfg = config(make_config)
    a, b = pods(cfg), pods(cfg)
    seed(a[0])
    context, sent = build(b)
    assert "body of python tip" in context
    assert body_gets(sent) == []  # the writer shared them through Redis
    assert counted(b[0], "shared_body", "hit") >= 1

    # Written "long ago": Redis no longer holds them. The first pod to recall them reads the store,
    # every later pod takes them from Redis.
    redis = b[0].redis
    assert redis is not None
    redis.delete(*redis.keys(f"{cfg.redis.key_prefix}body:*"))
    c, d = pods(cfg), pods(cfg)
    context, sent = build(c)
    first = body_gets(sent)
    assert first and "body of python tip" in context
    context, sent = build(d)
    assert body_gets(sent) == [] and "body of python tip" in context


def test_without_sharing_each_pod_reads_a_body_once(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod]) -> None:
    cfg = config(make_config, share=False)
    a, b = pods(cfg), pods(cfg)
    seed(a[0])
    _, sent = build(b)
    assert body_gets(sent)
    redis = b[0].redis
    assert redis is not None and redis.keys(f"{cfg.redis.key_prefix}body:*") == []


def _same_size_versions(k: int) -> tuple[str, str]:
    """Version ``k`` of note 0: every version has the same byte size (an edit of one character
    keeps the size; the cache keys must still tell the versions apart)."""
    return f"python tip revision {k:03d}", f"the body of revision {k:03d}"


def test_bodies_are_never_stale_across_same_size_saves_and_a_redis_restart(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod], tmp_path: Path) -> None:
    server = RedisServer(base_dir=tmp_path / "redis").start()
    try:
        cfg = config(make_config)
        cfg = cfg.model_copy(update={"redis": cfg.redis.model_copy(update={
            "url": server.url, "socket_timeout": 0.5, "retry_after_seconds": 0.0})})
        quiet = cfg.model_copy(update={"redis": cfg.redis.model_copy(update={"body_cache_seconds": 0.0})})
        a, b, c, q = pods(cfg), pods(cfg), pods(cfg), pods(quiet)
        seed(a[0], 2)
        writers = [a[0].user_agent_dir("u1"), q[0].user_agent_dir("u1")]  # q shares nothing it writes
        stale: list[int] = []
        rounds = 10
        for k in range(rounds):
            if k == rounds // 2:
                server.restart()  # announcements and shared bodies are lost
            description, body = _same_size_versions(k)
            writers[k % 2].save("note_0.md", note(0, description, body))
            for pod in (b, c):
                if pod is c:
                    c[0].warm.clear()  # a pod that holds nothing: Redis's shared body or the store
                context, _ = build(pod)
                if body not in context or any(_same_size_versions(j)[1] in context for j in range(k)):
                    stale.append(k)
        assert stale == []
    finally:
        server.stop()


@pytest.mark.parametrize("share", [True, False])
def test_a_read_racing_the_files_own_put_is_neither_kept_nor_shared(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod], share: bool) -> None:
    """The head (the commit point) lands before the file: a reader in between gets the previous
    bytes — of the same size here. They are served once (as before) but never cached under the new
    entry, so once the commit is completed the next build shows the new text."""
    cfg = config(make_config, share=share)
    a, b = pods(cfg), pods(cfg)
    own = a[0].user_agent_dir("u1")
    old_d, old_b = _same_size_versions(1)
    new_d, new_b = _same_size_versions(2)
    own.save("note_0.md", note(0, old_d, old_b))
    context, _ = build(b)
    assert old_b in context
    a[1].fail(on(("put_if_match",), "/note_0.md"), times=1)  # the file's PUT after the head fails
    with pytest.raises(OutcomeUnknown):
        own.save("note_0.md", note(0, new_d, new_b))
    redis = b[0].redis
    assert redis is not None
    redis.delete(*redis.keys(f"{cfg.redis.key_prefix}body:*") or ["none"])  # as if never shared
    context, _ = build(b)
    assert new_d in context  # the new head's entry; its body is the old one still in the store
    own.save("note_9.md", note(9, "another python tip", "completes the commit before it"))
    context, sent = build(b)
    assert new_b in context and old_b not in context
    assert any(key.endswith("/note_0.md") for _, key in sent)  # read, not served from a cache
    if share:
        values = [redis.get(k) for k in redis.keys(f"{cfg.redis.key_prefix}body:*note_0.md*")]
        assert all(v == note(0, new_d, new_b).encode() for v in values)


# -- auto memory: the extraction's reads -----------------------------------------------------------
def _state_gets(sent: list[tuple[str, str]]) -> int:
    return sum(1 for op, key in sent if op == "get" and key.endswith(STATE_FILE))


def _mark(place: AutoPlace, session: str, key: str) -> None:
    with place.transaction() as txn:
        txn.watermarks.mark(session, [key], 1.0)


def test_state_files_are_served_by_the_head_that_wrote_them_and_never_stale(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod], tmp_path: Path) -> None:
    server = RedisServer(base_dir=tmp_path / "redis").start()
    try:
        cfg = config(make_config)
        cfg = cfg.model_copy(update={"redis": cfg.redis.model_copy(update={
            "url": server.url, "socket_timeout": 0.5, "retry_after_seconds": 0.0})})
        a, b = pods(cfg), pods(cfg)
        pa = AutoPlace(a[0].user_auto_dir("u1"), a[0].warm)
        pb = AutoPlace(b[0].user_auto_dir("u1"), b[0].warm)
        _mark(pa, "s1", "k1")
        a[1].calls.log.clear()
        pa.read()
        assert pa.read_watermarks(pa.read_etag).seen("s1") == {"k1"}
        with pa.transaction() as txn:
            assert txn.watermarks.seen("s1") == {"k1"}
            txn.watermarks.mark("s1", ["k2"], 2.0)
        assert _state_gets(a[1].calls.log) == 0  # this pod wrote it at the head it reads
        assert counted(a[0], "state", "hit") >= 2

        _mark(pb, "s2", "k9")  # another pod: a new head, its own state
        for restart in (False, True):
            if restart:
                _mark(pb, "s3", "k10")
                server.restart()  # the announcement of that head is lost
            a[1].calls.log.clear()
            pa.read()
            marks = pa.read_watermarks(pa.read_etag)
            assert marks.seen("s2") == {"k9"} and marks.seen("s1") == {"k1", "k2"}
            assert marks.seen("s3") == ({"k10"} if restart else set())
            assert _state_gets(a[1].calls.log) == 1  # another head: read, never the old one
    finally:
        server.stop()


def test_without_redis_the_state_file_is_read_every_time(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod]) -> None:
    cfg = make_config("cos", auto={"enabled": True})
    a = pods(cfg)
    place = AutoPlace(a[0].user_auto_dir("u1"), a[0].auto_memory().warm)
    assert place.warm is None
    _mark(place, "s1", "k1")
    a[1].calls.log.clear()
    place.read()
    assert place.read_watermarks(place.read_etag).seen("s1") == {"k1"}
    assert _state_gets(a[1].calls.log) == 1


def test_an_update_reads_only_the_fact_files_it_changes(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod]) -> None:
    """New facts are created write-if-absent without a GET; an existing fact is read (a person's
    notes in it are kept); the profile is written whole, its version known to the pod that wrote it."""
    a = pods(config(make_config))
    place = AutoPlace(a[0].user_auto_dir("u1"), a[0].warm)
    from harness_memory.auto.model import Profile, ProfileKey

    with place.transaction() as txn:
        txn.put_fact(Fact(id="fact-00000001", content="Uses vim", category=Category.PREFERENCE, confidence=0.9))
        txn.set_profile(Profile({ProfileKey.WORK: "backend engineer"}))
    key = place.dir.place.key("fact-00000001.md")
    a[0].store.put(key, a[0].store.get(key).data + b"\n\nA note a person added.\n")  # by hand
    a[1].calls.log.clear()
    with place.transaction() as txn:
        old = txn.view.facts["fact-00000001"]
        old.confidence = 0.95
        txn.put_fact(old)
        txn.put_fact(Fact(id="fact-00000002", content="Likes tea", category=Category.PREFERENCE, confidence=0.9))
        txn.put_fact(Fact(id="fact-00000003", content="Lives in Paris", category=Category.CONTEXT,
                          confidence=0.9))
        txn.set_profile(Profile({ProfileKey.WORK: "staff engineer"}))
    gets = [key.rsplit("/", 1)[-1] for op, key in a[1].calls.log if op == "get" and key.endswith(".md")]
    assert gets == ["fact-00000001.md"]
    assert "A note a person added." in a[0].store.get(key).data.decode()
    assert {f.id for f in place.read().facts.values()} == {"fact-00000001", "fact-00000002", "fact-00000003"}
    assert place.read().profile.to_json() == Profile({ProfileKey.WORK: "staff engineer"}).to_json()


def test_the_first_commit_of_a_place_reads_no_search_index(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod]) -> None:
    a = pods(config(make_config))
    a[1].calls.log.clear()
    seed(a[0], 3)
    assert not [k for op, k in a[1].calls.log if op == "get" and k.endswith((SEARCH_INDEX_FILE, SEARCH_DELTA_FILE))]
    b = pods(config(make_config))  # another pod searches what was written
    context, _ = build(b)
    assert "body of python tip" in context


def test_a_state_read_racing_its_own_put_is_not_kept(
        make_config: Callable[..., MemoryConfig], pods: Callable[[MemoryConfig], Pod]) -> None:
    """A commit's state file is PUT after its head: a reader outside the lock may read the previous
    state in between. That read is served (watermarks are advisory) but not kept under the new head,
    so the next read sees the state the commit wrote."""
    import threading
    import time

    cfg = config(make_config)
    a, b = pods(cfg), pods(cfg)
    pa = AutoPlace(a[0].user_auto_dir("u1"), a[0].warm)
    pb = AutoPlace(b[0].user_auto_dir("u1"), b[0].warm)
    _mark(pa, "s1", "k1")
    pa.read()
    board, redis = a[0].versions, a[0].redis
    assert board is not None and redis is not None
    key = board.key(pa.dir.place.prefix)
    before = redis.get(key)
    gate = threading.Event()
    put = b[1].put

    def held_put(key: str, data: bytes, *, content_type: str | None = None) -> str:
        if key.endswith(STATE_FILE):
            gate.wait(30)  # b's state PUT waits until we let it go
        return put(key, data, content_type=content_type)

    b[1].put = held_put  # type: ignore[method-assign]
    def learn() -> None:  # a fact (the head is announced as the commit's files land) and the marks
        with pb.transaction() as txn:
            txn.put_fact(Fact(id="fact-00000009", content="Uses vim", category=Category.PREFERENCE,
                              confidence=0.9))
            txn.watermarks.mark("s2", ["k9"], 1.0)

    writer = threading.Thread(target=learn)
    writer.start()
    try:
        for _ in range(3000):  # b's head is announced; its state not yet written
            if redis.get(key) != before:
                break
            time.sleep(0.01)
        assert redis.get(key) != before, (before, b[1].calls.log[-5:])
        pa.read()
        assert pa.read_watermarks(pa.read_etag).seen("s2") == set()  # the previous state, served once
    finally:
        gate.set()
        writer.join()
    pa.read()
    assert pa.read_watermarks(pa.read_etag).seen("s2") == {"k9"}

