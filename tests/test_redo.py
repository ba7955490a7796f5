"""The redo record (``memdir/redo.py``), the done marker and the pod's copy of its heads
(``memdir/heads.py``): the head is written first and carries the commit's texts; an unfinished
commit is completed by the next writer; a big batch keeps its texts out of the head; a copy of a
head never decides anything and a stale one costs a retry, not an update. On SeaweedFS with Redis
(and the local store where the rule is backend-independent)."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from harness_memory.config import MemoryConfig
from harness_memory.errors import PreconditionFailed, WriteConflict
from harness_memory.locks import LOCAL_LEASE, RedisLocker
from harness_memory.memdir import MemoryDir, heads, redo
from harness_memory.memdir.intent import md5_hex
from harness_memory.services import MemoryServices
from harness_memory.tools import MemoryTools
from tests.faults import MANIFEST_WRITE, FaultyStore, on
from tests.helpers import faulty_pods

Pods = Callable[..., tuple[MemoryServices, FaultyStore]]


def doc(body: str, desc: str = "the build log", name: str = "build log") -> str:
    return f"---\nname: {name}\ndescription: {desc}\ntype: project\n---\n\n{body}\n"


@pytest.fixture
def pods(make_config: Callable[..., MemoryConfig]) -> Iterator[Pods]:
    """Pods on one bucket; ``redis=False`` makes one that writes under its local lock only (as a
    pod does while Redis is down)."""
    with faulty_pods() as make:
        yield lambda *, redis=True, backend="cos": make(make_config(backend, redis=redis and backend == "cos"))
    heads.clear()


def head_of(store: FaultyStore, mdir: MemoryDir) -> dict[str, object]:
    return json.loads(store.get(mdir.manifest_key).data)


def puts(store: FaultyStore, since: int = 0) -> list[str]:
    return [key.rsplit("/", 1)[-1] for op, key in store.calls.log[since:] if op.startswith("put")]


@pytest.mark.parametrize("backend", ["cos", "local"])
def test_the_head_is_written_first_and_carries_the_commit(pods: Pods, backend: str) -> None:
    svc, store = pods(backend=backend)
    mdir = svc.user_agent_dir("u")
    mdir.save("a.md", doc("v1"))
    etag = mdir.read("a.md").etag
    mark = len(store.calls.log)
    mdir.save("a.md", doc("v2"))
    aside = [k for op, k in store.calls.log[mark:] if op.startswith("put") and "/.history/" in k]
    assert len(aside) == 1  # the text v2 replaces is kept aside first (memdir/trash.py) ...
    assert puts(store, mark)[1] == ".manifest.json"  # ... then the commit point, before any file
    assert set(puts(store, mark)[2:]) >= {"a.md", "MEMORY.md"}
    rec = head_of(store, mdir)["redo"]
    assert isinstance(rec, dict) and rec["writes"] == [
        {"file": "a.md", "md5": md5_hex(doc("v2").encode()), "prior": etag, "text": doc("v2")}]
    assert not any(k.endswith("/.intent.json") for _, k in store.calls.log)  # no undo record any more


def test_an_unfinished_commit_is_completed_by_the_next_writer_of_another_pod(pods: Pods) -> None:
    a, a_store = pods()
    b, b_store = pods()
    a_dir, b_dir = a.user_agent_dir("u"), b.user_agent_dir("u")
    a_dir.save("a.md", doc("old"))
    a_store.fail(on(("put", "put_if_match", "put_if_absent"), "/a.md"), times=1)
    said = MemoryTools(a_dir).save_file("a.md", doc("new", "the new one"))
    assert "may or may not have taken effect" in said, said
    assert "old" in b_dir.read("a.md").text and b_dir.manifest().entries["a.md"].description == "the new one"
    mark = len(b_store.calls.log)
    b_dir.save("b.md", doc("b"))  # the next holder: reads a.md, writes what is missing, then its own
    assert ("get", b_dir.place.key("a.md")) in b_store.calls.log[mark:]
    assert "new" in b_dir.read("a.md").text
    mark = len(b_store.calls.log)
    a_dir.save("c.md", doc("c"))  # complete now, and said so: nobody checks a.md again
    b_dir.save("d.md", doc("d"))
    assert ("get", b_dir.place.key("a.md")) not in b_store.calls.log[mark:]
    assert sorted(b_dir.manifest().entries) == ["a.md", "b.md", "c.md", "d.md"]


def test_the_done_marker_spares_the_next_holder_every_file_read(pods: Pods) -> None:
    a, _ = pods()
    b, b_store = pods()
    a_dir, b_dir = a.user_agent_dir("u"), b.user_agent_dir("u")
    a_dir.save_many([(f"n{i}.md", doc(f"body {i}")) for i in range(5)])
    assert isinstance(a.locker, RedisLocker)
    marker = a.redis.get(a.locker.done_key(a_dir.place.lock_name()))  # type: ignore[union-attr]
    assert marker is not None and marker.decode().split()[0] == head_of(b_store, b_dir)["txn"]
    mark = len(b_store.calls.log)
    b_dir.save("b.md", doc("b"))
    gets = {k.rsplit("/", 1)[-1] for op, k in b_store.calls.log[mark:] if op == "get"}
    assert ".manifest.json" in gets and not gets & {f"n{i}.md" for i in range(5)}  # A's files not checked


def test_a_big_batch_keeps_its_texts_out_of_the_head_until_its_files_landed(pods: Pods) -> None:
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    items = [(f"big{i}.md", doc("x" * 3000 + str(i))) for i in range(8)]  # > INLINE_TEXT_BYTES together
    store.fail(on("put_if_absent", "/big3.md"), times=1)
    with pytest.raises(Exception, match="may or may not have taken effect"):
        mdir.save_many(items)
    rec = head_of(store, mdir)["redo"]
    assert isinstance(rec, dict) and rec["object"].startswith(".redo.") and "writes" not in rec  # the head stays small
    obj = mdir.place.prefix + rec["object"]
    assert store.exists(obj) and not store.exists(mdir.place.key("big3.md"))
    mdir.save("after.md", doc("after"))  # completes big3.md from the object, then removes it
    assert mdir.read("big3.md").text == items[3][1] and not store.exists(obj)
    mdir.save_many(items[:4])  # a batch whose files all land removes its object itself
    assert not any(redo.is_object_name(info.key.rsplit("/", 1)[-1]) for info in store.list(mdir.place.prefix))


def test_a_batch_of_many_small_files_leaves_a_small_head(pods: Pods) -> None:
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save_many([(f"n{i:03d}.md", doc(f"b{i}")) for i in range(redo.INLINE_FILES + 1)])
    rec = head_of(store, mdir)["redo"]
    assert isinstance(rec, dict) and set(rec) == {"txid", "fence", "at", "object"}
    assert not store.exists(mdir.place.prefix + str(rec["object"]))  # all landed: removed
    assert len(mdir.manifest().entries) == redo.INLINE_FILES + 1


def test_removed_files_left_behind_are_removed_by_the_next_writer(pods: Pods) -> None:
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save_many([("a.md", doc("a")), ("b.md", doc("b"))])
    store.fail(on(("delete", "delete_many"), ""), times=1)
    assert MemoryTools(mdir).delete_file("a.md").startswith("Deleted")  # its entry is gone: done
    assert store.exists(mdir.place.key("a.md"))  # the object is still there ...
    mdir.save("c.md", doc("c"))
    assert not store.exists(mdir.place.key("a.md"))  # ... until the next writer completes the removal
    assert sorted(mdir.reindex().entries) == ["b.md", "c.md"]  # nothing to resurrect


def test_a_blind_save_uses_the_pods_copy_of_its_head(pods: Pods) -> None:
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save("a.md", doc("a"))
    mark = len(store.calls.log)
    mdir.save("b.md", doc("b"))
    mdir.save("a.md", doc("a2"))  # an overwrite: the etag it replaces is known too
    assert [c for c in store.calls.log[mark:] if c[0] == "get"] == []
    mark = len(store.calls.log)
    assert MemoryTools(mdir).replace_file_chunk("a.md", "a2", "a3").startswith("Updated")
    assert ("get", mdir.manifest_key) in store.calls.log[mark:]  # a transaction that decides reads the head
    assert "a3" in mdir.read("a.md").text


def test_a_stale_copy_costs_a_retry_never_an_update(pods: Pods) -> None:
    """B commits without Redis (as while it is down): the done marker still names A's last head,
    so A's copy is stale. A's blind save is refused by the head's If-Match, reads the head again
    and commits on top of B's; A's replace reads the head and sees B's file."""
    a, a_store = pods()
    b, _ = pods(redis=False)
    a_dir, b_dir = a.user_agent_dir("u"), b.user_agent_dir("u")
    a_dir.save("a.md", doc("a"))
    b_dir.save("b.md", doc("b by B"))
    mark = len(a_store.calls.log)
    a_dir.save("c.md", doc("c"))
    assert [op for op, k in a_store.calls.log[mark:] if k == a_dir.manifest_key].count("put_if_match") == 2
    assert sorted(b_dir.manifest().entries) == ["a.md", "b.md", "c.md"]
    b_dir.save("b.md", doc("b again by B"))
    assert MemoryTools(a_dir).replace_file_chunk("b.md", "b again by B", "b by A").startswith("Updated")
    assert "b by A" in b_dir.read("b.md").text


def test_an_undo_record_of_an_earlier_release_is_resolved_once(pods: Pods) -> None:
    """A place whose last commit (by the release with ``.intent.json``) wrote its file and died
    before its manifest: the first transaction of this release undoes it as that release would."""
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save("a.md", doc("the good text"))
    good = store.get(mdir.place.key("a.md")).data
    head = head_of(store, mdir)
    head.pop("redo", None)
    head["version"] = 2
    etag = store.put(mdir.manifest_key, json.dumps(head).encode())
    store.put(mdir.place.key("a.md"), doc("half written").encode())  # the file, never indexed
    intent = {"txid": "0123456789abcdef", "fence": 7, "at": time.time(), "base": etag,
              "writes": [{"file": "a.md", "after": md5_hex(doc("half written").encode()),
                          "before": base64.b64encode(good).decode()}]}
    store.put(mdir.intent_key, json.dumps(intent).encode())
    heads.clear()
    mdir.save("b.md", doc("b"))
    assert mdir.read("a.md").text == doc("the good text") and not store.exists(mdir.intent_key)
    assert head_of(store, mdir)["version"] == 3
    mark = len(store.calls.log)
    mdir.save("c.md", doc("c"))
    assert ("get", mdir.intent_key) not in store.calls.log[mark:]  # looked for once, on the old head


def test_releasing_the_lock_wakes_the_next_waiter(redis_client_url: str) -> None:
    """Waiters block on their wake list; the release pushes to the one at the head of the queue.
    With a 5 s block a missed wake-up would show as a 5 s wait."""
    client = redis.Redis.from_url(redis_client_url, socket_timeout=10)
    locker = RedisLocker(client, prefix="t-wake:", ttl=10, wait=20, block=5.0, stale=30)
    held = threading.Event()
    waited: list[float] = []

    def waiter() -> None:
        held.wait(5)
        t0 = time.monotonic()
        with locker.hold("p"):
            waited.append(time.monotonic() - t0)

    thread = threading.Thread(target=waiter)
    with locker.hold("p"):
        thread.start()
        held.set()
        time.sleep(0.3)  # the waiter is blocked on its wake list by now
    thread.join(10)
    assert waited and 0.25 < waited[0] < 2.5, waited
    client.close()


@pytest.fixture
def redis_client_url(redis_server: object) -> str:
    return str(redis_server.url)  # type: ignore[attr-defined]


def test_manifest_write_failing_leaves_no_redo_object(pods: Pods) -> None:
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    store.fail(MANIFEST_WRITE, times=1)
    with pytest.raises(Exception, match="injected"):
        mdir.save_many([(f"big{i}.md", doc("y" * 3000 + str(i))) for i in range(8)])
    assert not any(redo.is_object_name(info.key.rsplit("/", 1)[-1]) for info in store.list(mdir.place.prefix))
    assert not mdir.manifest().entries


# -- completing from a head that is no longer the place's head (pods not excluding each other) ----
def test_a_redo_completed_from_a_stale_head_never_undoes_a_later_commit(pods: Pods) -> None:
    """Seen in the Redis-outage storm: pod B loaded a head whose commit was unfinished, pod C
    completed it and committed a later change to the same file (reported done), then B "completed"
    the commit it had loaded — writing its older text over C's change."""
    a, a_store = pods(redis=False)  # pods writing under their local locks only, as while Redis is down
    b, _ = pods(redis=False)
    c, _ = pods(redis=False)
    a_dir, b_dir, c_dir = (p.user_agent_dir("u") for p in (a, b, c))
    a_dir.save("ledger.md", doc("start"))
    a_store.fail(on(("put", "put_if_match", "put_if_absent"), "/ledger.md"), times=1)
    said = MemoryTools(a_dir).replace_file_chunk("ledger.md", "start", "start\n- one")
    assert "may or may not have taken effect" in said, said
    stale = b_dir.manifest()  # B's transaction loads the head carrying A's unfinished commit ...
    assert stale.redo is not None and [w.file for w in stale.redo.writes] == ["ledger.md"]
    c_dir.replace_chunk("ledger.md", "- one", "- one\n- two")  # ... C completes it and commits on top
    b_dir.complete_pending(stale, LOCAL_LEASE)  # ... then B completes what it loaded
    text = c_dir.read("ledger.md").text
    assert "- one" in text and "- two" in text, text
    assert c_dir.manifest().entries["ledger.md"].size == len(text.encode())


def test_a_removal_completed_from_a_stale_head_spares_a_file_written_again(pods: Pods) -> None:
    a, a_store = pods(redis=False)
    b, _ = pods(redis=False)
    c, _ = pods(redis=False)
    a_dir, b_dir, c_dir = (p.user_agent_dir("u") for p in (a, b, c))
    a_dir.save_many([("a.md", doc("a")), ("keep.md", doc("keep"))])
    a_store.fail(on(("delete", "delete_many"), ""), times=1)
    assert MemoryTools(a_dir).delete_file("a.md").startswith("Deleted")  # the object is left behind
    stale = b_dir.manifest()
    assert stale.redo is not None and stale.redo.deletes == ["a.md"]
    c_dir.save("a.md", doc("written again"))  # C completes the removal, then writes the name again
    b_dir.complete_pending(stale, LOCAL_LEASE)
    assert "written again" in c_dir.read("a.md").text
    assert sorted(c_dir.manifest().entries) == ["a.md", "keep.md"]


def test_completing_a_file_that_changed_under_the_completion_is_a_retryable_conflict(pods: Pods) -> None:
    """The commit is still the head but the file holds neither the old nor the new text and
    changes again under the completion: the transaction is redone, never reported as failed."""
    a, a_store = pods(redis=False)
    b, b_store = pods(redis=False)
    a_dir, b_dir = a.user_agent_dir("u"), b.user_agent_dir("u")
    a_dir.save("x.md", doc("old"))
    a_store.fail(on(("put", "put_if_match", "put_if_absent"), "/x.md"), times=1)
    MemoryTools(a_dir).save_file("x.md", doc("new"))
    head = b_dir.manifest()
    b_store.inner.put(b_dir.place.key("x.md"), doc("outside").encode())  # written outside the protocol
    b_store.fail(on(("put_if_match",), "/x.md"), PreconditionFailed("changed meanwhile"), times=1)
    with pytest.raises(WriteConflict) as caught:
        b_dir.complete_pending(head, LOCAL_LEASE)
    assert caught.value.retryable
    b_dir.save("y.md", doc("y"))  # the next transaction completes it: the head is the truth
    assert "new" in b_dir.read("x.md").text


def test_a_file_write_refused_twice_after_its_head_is_looked_at_again_not_given_up(pods: Pods) -> None:
    """While pods cannot exclude each other a file may be written again between our look and our
    write; the writer looks again (its head is still the place's) instead of calling the outcome
    unknown after the second refusal."""
    svc, store = pods(redis=False)
    mdir = svc.user_agent_dir("u")
    mdir.save("x.md", doc("old"))
    rule = store.fail(on(("put_if_match",), "/x.md"), PreconditionFailed("written meanwhile"), times=2)
    said = MemoryTools(mdir).save_file("x.md", doc("new"))
    assert said.startswith("Updated"), said
    assert rule.hits == 2 and "new" in mdir.read("x.md").text
    assert mdir.manifest().entries["x.md"].size == len(doc("new").encode())
