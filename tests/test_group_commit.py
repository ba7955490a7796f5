"""Group commit (``memdir/group.py``): saves waiting for a place's lock hand their change to the
holder, which commits them with its own — against SeaweedFS and a real Redis. The test holds the
place lock itself, so which saves wait (and post a proposal) is certain."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import pytest

from harness_memory.config import MemoryConfig
from harness_memory.errors import LockTimeout, OutcomeUnknown, PreconditionFailed, StorageError
from harness_memory.locks import RedisLocker
from harness_memory.memdir import MemoryDir
from harness_memory.services import MemoryServices
from tests.faults import FaultyStore, on
from tests.helpers import faulty_pods


def doc(i: int) -> str:
    return f"---\nname: note {i}\ndescription: note {i}\ntype: project\n---\n\nBody {i}.\n"


@pytest.fixture
def pod(make_config: Callable[..., MemoryConfig]) -> Iterator[Callable[..., tuple[MemoryServices, FaultyStore]]]:
    with faulty_pods() as make:
        yield lambda store=None, **limits: make(make_config("cos", redis=True, limits=limits, store=store or {}))


def proposals(locker: RedisLocker, mdir: MemoryDir) -> int:
    return int(locker.client.llen(locker.handoff_keys(mdir.place.lock_name())[0]))


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.005)


def run_all(fns: list[Callable[[], object]]) -> tuple[list[threading.Thread], dict[int, object]]:
    out: dict[int, object] = {}

    def one(i: int, fn: Callable[[], object]) -> None:
        try:
            out[i] = fn()
        except Exception as exc:  # the assertion looks at it
            out[i] = exc

    threads = [threading.Thread(target=one, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    return threads, out


def head_writes(store: FaultyStore, mdir: MemoryDir) -> int:
    return sum(1 for op, key in store.calls.log if op.startswith("put") and key == mdir.manifest_key)


def test_waiting_saves_are_committed_by_the_holder_in_one_manifest_write(pod: Callable[..., tuple[
        MemoryServices, FaultyStore]]) -> None:
    svc, store = pod()
    mdir = svc.user_agent_dir("u")
    mdir.save("first.md", doc(0))
    locker = svc.locker
    assert isinstance(locker, RedisLocker)
    tools = svc.memory_tools("u")
    with locker.hold(mdir.place.lock_name()):
        threads, out = run_all([lambda i=i: tools.save_file(f"n{i}.md", doc(i)) for i in range(6)])
        wait_for(lambda: proposals(locker, mdir) == 6)  # every waiter handed its save over
        store.calls.log.clear()
    for t in threads:
        t.join(30)
    assert all(str(r).startswith("Created memory n") for r in out.values()), out
    assert head_writes(store, mdir) == 1  # the first waiter committed all six in one head write
    assert sorted(mdir.manifest().entries) == ["first.md", *[f"n{i}.md" for i in range(6)]]
    assert all(mdir.read(f"n{i}.md").text == doc(i) for i in range(6))
    assert proposals(locker, mdir) == 0


def test_a_proposal_that_cannot_join_runs_alone_and_meets_its_own_error(pod: Callable[..., tuple[
        MemoryServices, FaultyStore]]) -> None:
    svc, _ = pod()
    mdir = svc.user_agent_dir("u")
    mdir.save("shared.md", doc(1))
    mdir.save("shared.md", doc(2))
    locker = svc.locker
    assert isinstance(locker, RedisLocker)
    with locker.hold(mdir.place.lock_name()):
        threads, out = run_all([lambda: mdir.save("a.md", doc(3)),
                                lambda: mdir.save("shared.md", doc(4), expect="an-etag-long-gone"),
                                lambda: mdir.save("b.md", doc(5))])
        wait_for(lambda: proposals(locker, mdir) == 3)
    for t in threads:
        t.join(30)
    assert isinstance(out[1], PreconditionFailed)  # its own error, as if it had run alone
    assert not isinstance(out[0], Exception) and not isinstance(out[2], Exception), out
    assert mdir.read("shared.md").text == doc(2)  # unchanged
    assert {"a.md", "b.md", "shared.md"} <= set(mdir.manifest().entries)


def test_a_holder_that_stops_after_taking_a_proposal_does_not_lose_it(pod: Callable[..., tuple[
        MemoryServices, FaultyStore]]) -> None:
    svc, _ = pod()
    mdir = svc.user_agent_dir("u")
    locker = svc.locker
    assert isinstance(locker, RedisLocker)
    tools = svc.memory_tools("u")
    with locker.hold(mdir.place.lock_name()):
        threads, out = run_all([lambda: tools.save_file("kept.md", doc(7))])
        wait_for(lambda: proposals(locker, mdir) == 1)
        # a holder takes it ... and stops before committing or answering
        assert locker.client.lpop(locker.handoff_keys(mdir.place.lock_name())[0]) is not None
    threads[0].join(30)
    assert str(out[0]).startswith("Created memory kept.md"), out
    assert mdir.read("kept.md").text == doc(7) and "kept.md" in mdir.manifest().entries


def test_group_commit_can_be_turned_off(pod: Callable[..., tuple[MemoryServices, FaultyStore]]) -> None:
    svc, store = pod(group_commit_max=0)
    mdir = svc.user_agent_dir("u")
    locker = svc.locker
    assert isinstance(locker, RedisLocker)
    with locker.hold(mdir.place.lock_name()):
        threads, _ = run_all([lambda i=i: mdir.save(f"n{i}.md", doc(i)) for i in range(3)])
        time.sleep(0.3)
        assert proposals(locker, mdir) == 0  # waiting the old way
        store.calls.log.clear()
    for t in threads:
        t.join(30)
    assert head_writes(store, mdir) == 3 and len(mdir.manifest().entries) == 3


def test_a_save_that_times_out_takes_its_proposal_back(pod: Callable[..., tuple[MemoryServices, FaultyStore]]) -> None:
    svc, _ = pod(lock_wait_seconds=0.5)
    mdir = svc.user_agent_dir("u")
    locker = svc.locker
    assert isinstance(locker, RedisLocker)
    with locker.hold(mdir.place.lock_name()):
        threads, out = run_all([lambda: mdir.save("late.md", doc(1))])
        threads[0].join(10)
        assert isinstance(out[0], LockTimeout)  # failed ...
        assert proposals(locker, mdir) == 0  # ... and no holder can commit it later
    mdir.save("other.md", doc(2))
    assert "late.md" not in mdir.manifest().entries and not svc.store.exists(mdir.place.key("late.md"))


def test_a_timed_out_save_whose_holder_went_silent_is_reported_unknown(
        pod: Callable[..., tuple[MemoryServices, FaultyStore]]) -> None:
    svc, _ = pod(store={"cos_timeout": 1.0}, lock_wait_seconds=0.5, lock_ttl_seconds=1.5)
    mdir = svc.user_agent_dir("u")
    locker = svc.locker
    assert isinstance(locker, RedisLocker)
    with locker.hold(mdir.place.lock_name()):
        threads, out = run_all([lambda: mdir.save("maybe.md", doc(1))])
        wait_for(lambda: proposals(locker, mdir) == 1)
        locker.client.lpop(locker.handoff_keys(mdir.place.lock_name())[0])  # taken, never answered
        threads[0].join(10)
    assert isinstance(out[0], OutcomeUnknown) and "may or may not" in str(out[0])


def test_a_holder_commits_saves_posted_during_its_own_commit_before_it_lets_go(
        pod: Callable[..., tuple[MemoryServices, FaultyStore]]) -> None:
    """Saves that arrive while the holder's own commit is on its way are committed by the same
    holder in a further round (no hand-over of the lock, no re-read of the manifest), and the
    views (MEMORY.md, search index) come out whole once the rounds are done."""
    from harness_memory.search.place import stored_index
    from tests.faults import MANIFEST_WRITE

    svc, store = pod()
    mdir = svc.user_agent_dir("u")
    mdir.save("first.md", doc(0))
    locker = svc.locker
    assert isinstance(locker, RedisLocker)
    store.stall(MANIFEST_WRITE, 1.5, times=1)
    store.calls.log.clear()
    holder, out = run_all([lambda: mdir.save("a.md", doc(1))])
    wait_for(lambda: any(op.startswith("put") and key == mdir.manifest_key for op, key in store.calls.log))
    others, out2 = run_all([lambda i=i: mdir.save(f"late{i}.md", doc(10 + i)) for i in range(3)])
    wait_for(lambda: proposals(locker, mdir) == 3)
    for t in [*holder, *others]:
        t.join(30)
    assert not any(isinstance(v, Exception) for v in [*out.values(), *out2.values()]), (out, out2)
    head_reads = [key for op, key in store.calls.log if op == "get" and key == mdir.manifest_key]
    assert len(head_reads) <= 1  # the holder's own (none from its pod's copy); the later saves started none
    assert head_writes(store, mdir) == 2  # the holder's save, then the three together
    names = {"first.md", "a.md", "late0.md", "late1.md", "late2.md"}
    assert set(mdir.manifest().entries) == names
    index = svc.store.get(mdir.index_key).data.decode("utf-8")
    assert all(f"({n})" in index for n in names), index
    assert set(stored_index(mdir).docs) == names
    assert mdir.read("late1.md").text == doc(11)


def test_a_holder_alone_on_its_place_does_not_wait_for_more_saves(
        pod: Callable[..., tuple[MemoryServices, FaultyStore]]) -> None:
    """Nobody queued for the lock: no save is about to be handed over, so the holder lets go at
    once (Redis's blocking pops would not do: their timeouts end on its 100 ms ``hz`` tick)."""
    from harness_memory.memdir import group

    svc, _ = pod()
    mdir = svc.user_agent_dir("u")
    locker = svc.locker
    assert isinstance(locker, RedisLocker)
    handoff = group.Handoff(locker, mdir.place.lock_name(), 64)
    started = time.monotonic()
    assert handoff.wait_pending(20.0) is False
    assert time.monotonic() - started < 10.0  # did not sit out the 20 s
    locker.client.rpush(handoff.list_key, group.Proposal("p", "x.md", doc(1), None).to_bytes())
    assert handoff.wait_pending(0.0) is True
    assert handoff.take()[0].file == "x.md"


def test_handed_over_saves_say_memory_md_was_updated_only_when_it_was(pod: Callable[..., tuple[
        MemoryServices, FaultyStore]]) -> None:
    """The holder's commit lands but its MEMORY.md write fails: every save it committed for others
    says so, as a save that ran alone does (the answers used to say "MEMORY.md updated.")."""
    svc, store = pod()
    mdir = svc.user_agent_dir("u")
    mdir.save("first.md", doc(0))
    locker = svc.locker
    assert isinstance(locker, RedisLocker)
    tools = svc.memory_tools("u")
    with locker.hold(mdir.place.lock_name()):
        threads, out = run_all([lambda i=i: tools.save_file(f"n{i}.md", doc(i)) for i in range(3)])
        wait_for(lambda: proposals(locker, mdir) == 3)
        store.fail(on("put", "/MEMORY.md"), StorageError("injected: MEMORY.md write refused"))
    for t in threads:
        t.join(30)
    answers = [str(out[i]) for i in range(3)]
    assert all(a.startswith("Created memory n") for a in answers), answers
    assert not any("MEMORY.md updated" in a for a in answers), answers
    assert all("MEMORY.md was not rewritten this time" in a for a in answers), answers
    store.clear()
    assert sorted(mdir.manifest().entries) == ["first.md", "n0.md", "n1.md", "n2.md"]
