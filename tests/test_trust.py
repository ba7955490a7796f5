"""Trustworthy writes (issue 12), on the COS backend (SeaweedFS) with real Redis.

Each test reproduces one reported failure: a holder that stalls past its lock and writes over
the next holder's work; a failed save that replaced the good file; unfair lock waits; saves
failing while Redis is down. (Hostile files are in ``test_trust_input.py``; the multi-process
storm with SIGSTOP in ``test_trust_storm.py``.)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from harness_memory.config import ConfigError, MemoryConfig
from harness_memory.errors import StorageUnavailable
from harness_memory.locks import RedisLocker
from harness_memory.memdir import MemoryDir
from harness_memory.services import MemoryServices
from harness_memory.session import ExtractStatus
from harness_memory.tools import MemoryTools
from tests.fakellm import ScriptedLLM, delay, text
from tests.faults import MANIFEST_WRITE, FaultyStore, on
from tests.helpers import faulty_pods
from tests.servers import RedisServer

Pods = Callable[..., tuple[MemoryServices, FaultyStore]]
#: A short lease so a stall can outlive it; a store timeout that fits inside it (the start-up rule).
SHORT_LEASE = {"lock_ttl_seconds": 2.0, "lock_wait_seconds": 10.0}
FAST_STORE = {"cos_timeout": 1.5}


def doc(body: str, desc: str = "the build log") -> str:
    return f"---\nname: build log\ndescription: {desc}\ntype: project\n---\n\n{body}\n"


@pytest.fixture
def pods(make_config: Callable[..., MemoryConfig]) -> Iterator[Pods]:
    """Factory of "pods": services on one bucket and one Redis, each with its own FaultyStore."""
    def config(**sections: dict[str, object]) -> MemoryConfig:
        return make_config("cos", redis=True, limits=SHORT_LEASE, store=FAST_STORE | sections.pop("store", {}),
                           **sections)

    with faulty_pods() as make:
        yield lambda **sections: make(config(**sections))


def frozen(services: MemoryServices) -> MemoryServices:
    """This pod's leases are not renewed: as if the whole process were paused (GC, VM, SIGSTOP)."""
    assert isinstance(services.locker, RedisLocker)
    services.locker.renew_every = 0
    return services


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def in_thread(fn: Callable[[], str]) -> tuple[threading.Thread, dict[str, str]]:
    out: dict[str, str] = {}
    thread = threading.Thread(target=lambda: out.update(result=fn()))
    thread.start()
    return thread, out


# -- 1. lost updates past the lock TTL ----------------------------------------------------------
@pytest.mark.parametrize("conditional", ["on", "off"])
def test_holder_stalled_after_its_read_loses_the_lease_not_the_next_writers_update(
        pods: Pods, conditional: str) -> None:
    """Issue: a replacer paused after its read wrote back over the next holder's replace.
    ``off`` is real COS (no If-Match): the lease check alone must stop it."""
    a, a_store = pods(store={"cos_conditional_put": conditional})
    b, _ = pods(store={"cos_conditional_put": conditional})
    frozen(a)
    a_dir, b_dir = a.user_agent_dir("u"), b.user_agent_dir("u")
    b_dir.save("log.md", doc("status: start"))
    a_store.stall(on("get", "/log.md"), 3.5, times=1)  # A reads under the lock, then stalls past its lease
    thread, a_out = in_thread(lambda: MemoryTools(a_dir).replace_file_chunk("log.md", "start", "start by A"))
    wait_for(lambda: ("get", a_dir.place.key("log.md")) in a_store.calls.log)
    b_said = MemoryTools(b_dir).replace_file_chunk("log.md", "start", "start by B")  # waits for A's lease
    thread.join(20)
    assert b_said.startswith("Updated memory log.md")
    assert a_out["result"].startswith("Error:") and "expired" in a_out["result"], a_out
    assert "Nothing was changed" in a_out["result"]
    text = b_dir.read("log.md").text
    assert "start by B" in text and "start by A" not in text


def test_a_put_sent_after_the_lease_ran_out_is_refused_by_the_conditional_write(pods: Pods) -> None:
    """A's commit point (its head, carrying the redo record) landed; then its file PUT stalled on
    the way past the lease (a store answer taking 10 s x 2). B takes the lock, completes A's
    commit from the record, applies its own edit on top, and A's late PUT (If-Match on the version
    A read) is refused instead of writing A's text back over B's. Both edits stand, in order."""
    a, a_store = pods()
    b, _ = pods()
    frozen(a)
    a_dir, b_dir = a.user_agent_dir("u"), b.user_agent_dir("u")
    b_dir.save("log.md", doc("status: start"))
    a_store.stall(on("put_if_match", "/log.md"), 3.5, times=1)
    thread, a_out = in_thread(lambda: MemoryTools(a_dir).replace_file_chunk("log.md", "start", "start by A"))
    wait_for(lambda: ("put_if_match", a_dir.place.key("log.md")) in a_store.calls.log)
    b_said = MemoryTools(b_dir).replace_file_chunk("log.md", "start by A", "start by A, then B")
    assert b_said.startswith("Updated"), b_said  # B saw A's committed edit: the record was completed
    thread.join(20)
    assert a_out["result"].startswith("Updated"), a_out  # A's commit happened (and B built on it)
    text = b_dir.read("log.md").text
    assert "status: start by A, then B" in text  # A's late PUT did not write over B's
    entry = b_dir.manifest().entries["log.md"]
    assert entry.size == len(text.encode())  # index consistent with the file


def test_expected_version_saves_share_the_guard(pods: Pods) -> None:
    """``save(expect=etag)`` (the HTTP If-Match PUT) from a stalled holder cannot win either."""
    a, a_store = pods()
    b, _ = pods()
    frozen(a)
    a_dir, b_dir = a.user_agent_dir("u"), b.user_agent_dir("u")
    etag = b_dir.save("log.md", doc("v1")) and b_dir.read("log.md").etag
    a_store.stall(on("get", "/log.md"), 3.5, times=1)
    errors: list[BaseException] = []

    def a_save() -> None:
        try:
            a_dir.save("log.md", doc("v2 by A"), expect=etag)
        except Exception as exc:
            errors.append(exc)

    thread = threading.Thread(target=a_save)
    thread.start()
    wait_for(lambda: ("get", a_dir.place.key("log.md")) in a_store.calls.log)
    b_dir.save("log.md", doc("v2 by B"), expect=etag)
    thread.join(20)
    # Refused either way: by the expectation (it read B's version after the stall) or the lease.
    assert errors and type(errors[0]).__name__ in ("LeaseLost", "PreconditionFailed"), errors
    assert "v2 by B" in b_dir.read("log.md").text


def test_a_renewed_lease_outlives_a_slow_store(pods: Pods) -> None:
    """Not frozen: the lease is renewed while a slow store answers, so the slow save succeeds and
    the other writer waits for it instead of taking over."""
    a, a_store = pods()
    b, _ = pods()
    a_dir, b_dir = a.user_agent_dir("u"), b.user_agent_dir("u")
    b_dir.save("log.md", doc("status: start"))
    a_store.stall(on("get", "/log.md"), 3.0, times=1)  # longer than the 2 s lease
    thread, a_out = in_thread(lambda: MemoryTools(a_dir).replace_file_chunk("log.md", "start", "start by A"))
    wait_for(lambda: ("get", a_dir.place.key("log.md")) in a_store.calls.log)
    b_said = MemoryTools(b_dir).replace_file_chunk("log.md", "start by A", "start by A, then B")
    thread.join(20)
    assert a_out["result"].startswith("Updated"), a_out
    assert b_said.startswith("Updated") and "start by A, then B" in b_dir.read("log.md").text


# -- 2. failed means unchanged -------------------------------------------------------------------
def _die_after(store: FaultyStore, suffix: str) -> None:
    """The store goes away right after the first write to a key ending with ``suffix``: every
    later request fails (the rest of the commit, the read back)."""
    armed = {"on": False}

    def match(op: str, key: str) -> bool:
        if armed["on"]:
            return True
        if op.startswith("put") and key.endswith(suffix):
            armed["on"] = True
        return False

    store.fail(match)


@pytest.mark.parametrize("repair", ["next save", "reindex"])
def test_store_dying_between_index_and_file_never_says_nothing_was_saved(pods: Pods, repair: str) -> None:
    """The head (the commit point, carrying the new text) landed, then the store went away before
    the file was written: the save says it may not have taken effect — never "Nothing was saved"
    — and the next writer (or reindex) completes it, so readers see the change whole."""
    svc, store = pods()
    tools, mdir = svc.memory_tools("u"), svc.user_agent_dir("u")
    assert tools.save_file("keep.md", doc("the good text", "good")).startswith("Created")
    _die_after(store, "/.manifest.json")
    said = tools.save_file("keep.md", doc("the new text", "new"))
    assert "Nothing was saved" not in said and "may or may not have taken effect" in said, said
    store.clear()
    assert "the good text" in mdir.read("keep.md").text  # the file is behind its index until repaired
    if repair == "next save":
        assert tools.save_file("other.md", doc("other")).startswith("Created")
    else:
        mdir.reindex()
    assert "the new text" in mdir.read("keep.md").text  # the recorded commit was completed
    assert mdir.manifest().entries["keep.md"].description == "new"


def test_store_dying_before_a_new_files_write_is_completed_by_reindex(pods: Pods) -> None:
    """A new file whose head landed without the file: reindex writes it from the record (it used to
    adopt an unconfirmed file as if saved; now the index and the file always agree)."""
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save("old.md", doc("old"))
    _die_after(store, "/.manifest.json")
    assert "may or may not" in svc.memory_tools("u").save_file("new.md", doc("new"))
    store.clear()
    manifest = mdir.reindex()
    assert sorted(manifest.entries) == ["new.md", "old.md"] and "new" in mdir.read("new.md").text


def test_store_dying_right_after_the_file_write_is_a_save_done(pods: Pods) -> None:
    """Head and file both landed, then the store went away (MEMORY.md and the search index not
    written): the save is done, it says so, and nothing of it is lost."""
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save("keep.md", doc("the good text", "good"))
    _die_after(store, "/keep.md")
    said = svc.memory_tools("u").save_file("keep.md", doc("the new text", "new"))
    assert said.startswith("Updated"), said
    store.clear()
    assert "the new text" in mdir.read("keep.md").text and mdir.manifest().entries["keep.md"].description == "new"
    assert svc.memory_tools("u").save_file("b.md", doc("b")).startswith("Created")
    assert "- [build log](keep.md) — new" in store.get(mdir.index_key).data.decode()  # MEMORY.md healed


def test_an_index_write_that_landed_but_lost_its_answer_is_reported_done(pods: Pods) -> None:
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    store.fail_after(MANIFEST_WRITE, times=1)
    said = svc.memory_tools("u").save_file("a.md", doc("kept"))
    assert said.startswith("Created"), said
    assert "kept" in mdir.read("a.md").text and "a.md" in mdir.manifest().entries


def test_a_file_write_that_timed_out_after_sending_is_resolved_by_reading_it(pods: Pods) -> None:
    """A file PUT that timed out may have been applied (here it was): the file is read back, holds
    exactly our bytes, so the save is reported done (issue 28: an unclear answer is settled by
    reading what landed) — and the next writer finds the file complete (no second write)."""
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save("a.md", doc("before"))
    store.fail_after(on("put_if_match", "/a.md"), times=1)  # landed, but the answer was lost
    said = svc.memory_tools("u").save_file("a.md", doc("after", "changed"))
    assert said.startswith("Updated memory a.md") and "Nothing was saved" not in said, said
    writes = len([c for c in store.calls.log if c == ("put_if_match", mdir.place.key("a.md"))])
    assert svc.memory_tools("u").save_file("b.md", doc("b")).startswith("Created")
    assert len([c for c in store.calls.log if c == ("put_if_match", mdir.place.key("a.md"))]) == writes
    assert "after" in mdir.read("a.md").text and mdir.manifest().entries["a.md"].description == "changed"


def test_a_file_write_refused_after_the_index_is_completed_by_the_next_writer(pods: Pods) -> None:
    """The file PUT fails outright after the head landed (the store refuses it): the change is
    recorded, the save says it may not have taken effect, and the next save completes it."""
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save("a.md", doc("before"))
    store.fail(on(("put_if_match", "put"), "/a.md"), times=1)
    said = svc.memory_tools("u").save_file("a.md", doc("after", "changed"))
    assert "may or may not have taken effect" in said, said
    assert "before" in mdir.read("a.md").text  # behind its index ...
    assert svc.memory_tools("u").save_file("b.md", doc("b")).startswith("Created")
    assert "after" in mdir.read("a.md").text  # ... until the next writer completed it


def test_a_failed_index_write_changes_nothing(pods: Pods) -> None:
    """The manifest write (the commit point) fails and the store still answers: no file was
    written before it, so nothing changed and the save says so."""
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save("a.md", doc("before"))
    puts = len(store.calls.log)
    store.fail(MANIFEST_WRITE)
    said = svc.memory_tools("u").save_file("a.md", doc("after"))
    assert said.startswith("Error:") and "Nothing was saved" in said
    tried = [key for op, key in store.calls.log[puts:] if op.startswith("put") and not key.endswith("/.manifest.json")]
    assert len(tried) == 1 and "/.history/" in tried[0]  # only the copy of what it replaces, before the head ...
    store.clear()
    assert not store.exists(tried[0])  # ... removed again when the commit failed
    assert "before" in mdir.read("a.md").text


def test_a_store_refusing_connections_at_the_index_write_says_nothing_was_saved(pods: Pods) -> None:
    """A head PUT that surely never reached the store (connection refused) is a clean failure even
    though the store cannot be read back to check: nothing was written before it."""
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save("a.md", doc("before"))
    armed = {"on": False}

    def from_the_head_on(op: str, key: str) -> bool:
        armed["on"] = armed["on"] or (op.startswith("put") and key.endswith("/.manifest.json"))
        return armed["on"]

    store.fail(from_the_head_on, StorageUnavailable("connection refused", maybe_applied=False))
    said = svc.memory_tools("u").save_file("a.md", doc("after"))
    assert said.startswith("Error:") and "Nothing was saved" in said, said
    store.clear()
    assert "before" in mdir.read("a.md").text and mdir.manifest().entries["a.md"].size == len(doc("before"))


def test_lease_must_cover_a_store_write_with_retries(make_config: Callable[..., MemoryConfig]) -> None:
    cfg = make_config("cos", limits={"lock_ttl_seconds": 15.0}, store={"cos_timeout": 10.0, "cos_retries": 1})
    with pytest.raises(ConfigError, match="HARNESS_MEMORY_LOCK_TTL_SECONDS") as info:
        MemoryServices.from_config(cfg)
    assert "cos_timeout 10 s x (cos_retries 1 + 1) = 20 s" in str(info.value)
    assert MemoryConfig.load(env={}).limits.lock_ttl_seconds > 10.0 * 2  # the defaults fit


# -- 3. fair, bounded waiting ------------------------------------------------------------------
@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server.url, socket_timeout=2.0)
    yield client
    client.close()


def test_waiters_are_served_in_arrival_order(redis_client: redis.Redis) -> None:
    locker = RedisLocker(redis_client, prefix="t-fair:", ttl=5, wait=10)
    queue_key = locker.keys("p")[1]
    order: list[int] = []
    release = threading.Event()

    def first() -> None:
        with locker.hold("p"):
            release.wait(10)

    def waiter(i: int) -> None:
        with locker.hold("p"):
            order.append(i)

    holder = threading.Thread(target=first)
    holder.start()
    wait_for(lambda: redis_client.exists(locker.keys("p")[0]) == 1)
    threads = []
    for i in range(6):  # each joins the queue before the next starts
        threads.append(threading.Thread(target=waiter, args=(i,)))
        threads[-1].start()
        wait_for(lambda n=i + 1: redis_client.zcard(queue_key) == n)
    release.set()
    for t in [holder, *threads]:
        t.join(10)
    assert order == list(range(6))
    assert redis_client.zcard(queue_key) == 0


def test_a_waiter_that_vanished_does_not_block_the_queue(redis_client: redis.Redis) -> None:
    locker = RedisLocker(redis_client, prefix="t-stale:", ttl=5, wait=10, stale=0.3)
    lock, queue, seen, _ = locker.keys("p")
    redis_client.zadd(queue, {"crashed-waiter": 0})  # first in line, never polls again
    redis_client.zadd(seen, {"crashed-waiter": 0})
    with locker.hold("p") as lease:
        assert lease.fence > 0 and redis_client.get(lock) is not None
    assert redis_client.zscore(queue, "crashed-waiter") is None


def test_a_waiter_that_gives_up_leaves_the_queue(redis_client: redis.Redis) -> None:
    from harness_memory.errors import LockTimeout

    locker = RedisLocker(redis_client, prefix="t-leave:", ttl=5, wait=0.2)
    other = RedisLocker(redis_client, prefix="t-leave:", ttl=5, wait=5)
    with other.hold("p"), pytest.raises(LockTimeout), locker.hold("p"):
        pass
    assert redis_client.zcard(locker.keys("p")[1]) == 0
    with locker.hold("p"):  # and the lock is free for the next one
        pass


def test_place_lock_keys_share_one_cluster_slot(redis_client: redis.Redis) -> None:
    from redis.crc import key_slot

    keys = RedisLocker(redis_client, prefix="hm:").keys("place:users/7/agent-memory/default")
    assert len({key_slot(k.encode()) for k in keys}) == 1


# -- 4. Redis outage = no failed saves ------------------------------------------------------------
def test_redis_outage_during_concurrent_saves_fails_none(make_config: Callable[..., MemoryConfig],
                                                       tmp_path: Path) -> None:
    """Two pods (own in-process fallback locks) save into one place while their Redis is killed
    and brought back: the commit is retried within the lock-wait budget, so no save fails."""
    server = RedisServer(base_dir=tmp_path / "redis").start()
    try:
        cfg = make_config("cos", redis=False, limits={"lock_wait_seconds": 10.0})
        cfg = cfg.model_copy(update={"redis": cfg.redis.model_copy(update={
            "url": server.url, "socket_timeout": 0.5, "retry_after_seconds": 0.5})})
        pods = [MemoryServices.from_config(cfg) for _ in range(2)]
        results: list[str] = []
        stop = threading.Event()

        def writer(pod: int, thread: int) -> None:
            tools = pods[pod].memory_tools("outage")
            i = 0
            while not stop.is_set():
                results.append(tools.save_file(f"p{pod}t{thread}_{i:03d}.md", doc(f"pod {pod} thread {thread} #{i}")))
                i += 1

        threads = [threading.Thread(target=writer, args=(p, t)) for p in range(2) for t in range(3)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        server.kill()
        time.sleep(1.5)
        server.restart()
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(30)
        failed = [r for r in results if not r.startswith("Created")]
        assert failed == [] and len(results) > 20, failed[:3]
        manifest = pods[0].user_agent_dir("outage").manifest()
        assert len(manifest.entries) == len(results)  # every reported save is in the index
        for pod in pods:
            pod.close()
    finally:
        server.stop()


def test_memdir_without_services_still_takes_a_local_lease(cos_store: object) -> None:
    from harness_memory.layout import Place

    mdir = MemoryDir(cos_store, Place.user_agent("solo", "default", "memory/"))  # type: ignore[arg-type]
    mdir.save("a.md", doc("solo"))
    assert mdir.manifest().txn  # the commit point of its intent record


# -- issue 15 item 2: the summary lease -------------------------------------------------------
def test_a_summary_slower_than_the_session_lock_ttl_is_stored(make_config: Callable[..., MemoryConfig],
                                                              llm_server: ScriptedLLM) -> None:
    """Issue 15: a 223 s summary was thrown away ("the summary lock expired") against a 120 s
    lock. Here the lock lasts 1 s and the model answers after 2.5 s: the lease is renewed while
    the model works, another pod meanwhile finds it busy, and the summary is stored."""
    session = {"first_threshold_tokens": 100, "update_threshold_tokens": 50, "keep_messages": 2,
               "failure_backoff_seconds": 600}
    model = {"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"}
    cfg = make_config("cos", redis=True, model=model, session=session)
    pods = [MemoryServices.from_config(cfg) for _ in range(2)]
    try:
        first, second = (p.session_manager() for p in pods)
        first.summariser.cfg = first.summariser.cfg.model_copy(update={"lock_ttl_seconds": 1})  # below the minimum
        for i in range(3):
            first.collect_messages_sync("slow", [{"role": "user", "content": f"turn {i}: " + "read build.log " * 8},
                                                 {"role": "assistant", "content": "the log says ok " * 8}])
        answer = ("# Slow summary\n\n## Current State\n- reading the log\n\n## Task\n- fix the build\n\n"
                  "## Key Results\n- exit code 0\n\n## Worklog\n- read build.log\n")
        llm_server.set_handler(lambda req: delay(2.5, text(answer)))
        thread, out = in_thread(lambda: first.maybe_extract_sync("slow").status.value)
        wait_for(lambda: len(llm_server.chat_requests) == 1)
        time.sleep(1.5)  # past the 1 s TTL: without renewal the lock would be gone by now
        assert second.maybe_extract_sync("slow", force=True).status is ExtractStatus.BUSY
        thread.join(20)
        assert out["result"] == "extracted"
        assert "# Slow summary" in (second.get_summary_sync("slow") or "")
        assert len(llm_server.chat_requests) == 1
        assert first.buffer.lock_ttl_ms("slow") is None  # released afterwards
    finally:
        for p in pods:
            p.close()


# -- a new memory costs no read of its file ------------------------------------------------------
@pytest.mark.parametrize("conditional", ["on", "off"])
def test_a_new_memory_is_saved_without_reading_its_file_yet_a_name_another_pod_created_is_read(
        pods: Pods, conditional: str) -> None:
    """#18: a save read the file it writes beside the head even when it is new (a GET per save on
    real COS). Once the pod remembers the place's head, a name that head does not list is not
    read; a name another pod created meanwhile is still read (its version is the write's
    condition and the answer says "Updated", not "Created")."""
    a, a_store = pods(store={"cos_conditional_put": conditional})
    b, _ = pods(store={"cos_conditional_put": conditional})
    a_dir, b_dir = a.user_agent_dir("u"), b.user_agent_dir("u")
    assert a_dir.save("first.md", doc("one")).created
    a_store.calls.log.clear()
    assert a_dir.save("second.md", doc("two")).created
    assert ("get", a_dir.place.key("second.md")) not in a_store.calls.log
    assert b_dir.save("shared.md", doc("by B")).created  # A's remembered head does not list it
    a_store.calls.log.clear()
    said = MemoryTools(a_dir).save_file("shared.md", doc("by A"))
    assert said.startswith("Updated memory shared.md"), said
    assert ("get", a_dir.place.key("shared.md")) in a_store.calls.log
    assert "by A" in b_dir.read("shared.md").text
    assert set(b_dir.manifest().entries) == {"first.md", "second.md", "shared.md"}
