"""The debounced queue: debounce, maximum wait, merging, bounded depth, retries, and the worker
threads (flush, close, shutdown). Time-dependent rules are checked on a virtual clock."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

import pytest

from harness_memory.auto import DebounceQueue, QueuePolicy, QueueWorker, auto_memory_for
from harness_memory.auto.model import Batch, CapturedMessage, QueueKey, Signals
from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from tests.fakellm import ScriptedLLM, text

K1 = QueueKey("u1", "default", "s1")
K2 = QueueKey("u2", "default", "s1")
K3 = QueueKey("u1", "default", "s2")


def msgs(*texts: str) -> list[CapturedMessage]:
    return [CapturedMessage("user", t, key=f"k-{t}") for t in texts]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_debounce_resets_on_every_message() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=30, max_wait_seconds=300))
    q.add(K1, msgs("a"), Signals(), now=0)
    q.add(K1, msgs("b"), Signals(), now=20)
    assert q.take(now=49, busy=set()) is None  # 20 + 30 not reached
    batch = q.take(now=50, busy=set())
    assert batch is not None and [m.text for m in batch.messages] == ["a", "b"]
    assert len(q) == 0


def test_max_wait_caps_steady_traffic() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=30, max_wait_seconds=100))
    for t in range(0, 100, 10):  # a message every 10 s would postpone a pure debounce forever
        q.add(K1, msgs(str(t)), Signals(), now=t)
        assert q.take(now=t, busy=set()) is None
    assert q.next_due(set()) == 100
    batch = q.take(now=100, busy=set())
    assert batch is not None and len(batch.messages) == 10


def test_min_interval_spaces_extractions_of_one_session() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=30, max_wait_seconds=300, min_interval_seconds=900))
    q.add(K1, msgs("a"), Signals(), now=0)
    first = q.take(now=30, busy=set())  # the first extraction of a session is not held back
    assert first is not None
    q.add(K1, msgs("b"), Signals(), now=60)  # a human pace: the user answers after a minute
    q.add(K2, msgs("x"), Signals(), now=60)
    assert q.take(now=400, busy=set()) is not None  # K2: another session, its own first extraction
    assert q.take(now=400, busy=set()) is None  # K1: quiet and past max_wait, but within the interval
    assert q.next_due(set()) == 930
    second = q.take(now=930, busy=set())
    assert second is not None and [m.text for m in second.messages] == ["b"]
    q.add(K1, msgs(*(str(i) for i in range(200))), Signals(), now=940)
    assert q.take(now=940, busy=set()) is not None  # a full batch does not wait for the interval


def test_merge_ors_flags_and_drops_duplicate_messages() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=1))
    q.add(K1, msgs("a"), Signals.of("correction", excerpts=(("correction", "不对"),)), now=0)
    q.add(K1, msgs("a", "b"), Signals.of("reinforcement"), now=0.5)
    q.add(K1, msgs("c"), Signals(), now=0.6)
    batch = q.take(now=10, busy=set())
    assert batch is not None
    assert [m.text for m in batch.messages] == ["a", "b", "c"]
    assert batch.signals == Signals.of("correction", "reinforcement", excerpts=(("correction", "不对"),))
    assert q.stats.merged == 2


def test_keys_are_separate_and_most_overdue_first() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=10))
    q.add(K1, msgs("a"), Signals(), now=5)
    q.add(K2, msgs("b"), Signals(), now=0)
    q.add(K3, msgs("c"), Signals(), now=1)
    order = [q.take(now=100, busy=set()) for _ in range(3)]
    assert [b.key for b in order if b] == [K2, K3, K1]


def test_full_queue_expedites_the_oldest_instead_of_dropping() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=1000, queue_max=2))
    q.add(K1, msgs("a"), Signals(), now=0)
    q.add(K2, msgs("b"), Signals(), now=1)
    q.add(K3, msgs("c"), Signals(), now=2)  # full: K1 (waiting longest) goes to the ready list
    assert set(q.pending) == {K2, K3} and [b.key for b in q.ready] == [K1]
    assert q.stats.expedited == 1 and q.stats.dropped == 0
    first = q.take(now=3, busy=set())  # long before any debounce
    assert first is not None and first.key == K1


def test_ready_list_overflow_drops_oldest_and_counts() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=1000, queue_max=1))
    for i, key in enumerate([K1, K2, K3]):
        q.add(key, msgs(str(i)), Signals(), now=i)
    assert q.stats.expedited == 2 and q.stats.dropped == 1
    assert [b.key for b in q.ready] == [K2] and list(q.pending) == [K3]


def test_batch_size_limit_makes_it_due_at_once() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=1000, batch_max_messages=4))
    q.add(K1, msgs("a", "b"), Signals(), now=0)
    assert q.take(now=1, busy=set()) is None
    q.add(K1, msgs("c", "d"), Signals(), now=1)
    assert q.take(now=1, busy=set()) is not None


def test_batch_with_much_user_text_is_due_at_once() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=1000, batch_max_user_tokens=100))
    q.add(K1, [CapturedMessage("user", "x", "k1", tokens=60), CapturedMessage("assistant", "y", "k2", tokens=500)],
          Signals(), now=0)
    assert q.take(now=1, busy=set()) is None  # the assistant's words do not count
    q.add(K1, [CapturedMessage("user", "z", "k3", tokens=60)], Signals(), now=1)
    batch = q.take(now=1, busy=set())
    assert batch is not None and batch.user_tokens == 120


def test_busy_key_waits_and_requeue_merges_newer_messages() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=0, max_attempts=2, retry_delay_seconds=5))
    q.add(K1, msgs("a"), Signals(), now=0)
    batch = q.take(now=0, busy=set())
    assert batch is not None
    q.add(K1, msgs("b"), Signals.of("reinforcement"), now=1)  # arrives while the first is processed
    assert q.take(now=1, busy={K1}) is None
    assert q.requeue(batch, now=2)
    merged = q.pending[K1]
    assert [m.text for m in merged.messages] == ["a", "b"] and merged.signals.reinforcement
    assert q.take(now=6, busy=set()) is None  # retry delay
    again = q.take(now=7, busy=set())
    assert again is not None and not q.requeue(again, now=8)  # second failure: abandoned
    assert q.stats.abandoned == 1 and len(q) == 0


def test_force_takes_everything() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=1000))
    q.add(K1, msgs("a"), Signals(), now=0)
    q.add(K2, msgs("b"), Signals(), now=0)
    assert q.take(now=0, busy=set()) is None
    assert q.take(now=0, busy=set(), force=True) is not None
    assert q.take(now=0, busy=set(), force=True) is not None


def test_manual_worker_runs_due_on_a_virtual_clock() -> None:
    clock = Clock()
    seen: list[list[str]] = []
    worker = QueueWorker(lambda b: seen.append([m.text for m in b.messages]) is None,
                         QueuePolicy(debounce_seconds=30, max_wait_seconds=60), clock=clock, start_threads=False)
    worker.submit(K1, msgs("a"), Signals())
    clock.now += 29
    assert worker.run_due() == 0
    clock.now += 1
    assert worker.run_due() == 1 and seen == [["a"]]
    worker.submit(K1, [], Signals())  # empty captures are not queued
    assert worker.pending_count() == 0


def test_worker_thread_processes_after_debounce_and_flush_waits() -> None:
    done = threading.Event()
    processed: list[Batch] = []

    def process(batch: Batch) -> bool:
        processed.append(batch)
        done.set()
        return True

    worker = QueueWorker(process, QueuePolicy(debounce_seconds=0.05, max_wait_seconds=1), workers=2)
    worker.submit(K1, msgs("a"), Signals())
    assert done.wait(10)  # the thread fired by itself after the debounce
    worker.submit(K2, msgs("b"), Signals())
    worker.submit(K3, msgs("c"), Signals())
    assert worker.flush(10)
    assert sorted(b.key.user_id + b.key.session_id for b in processed) == ["u1s1", "u1s2", "u2s1"]
    assert worker.stats.processed == 3
    assert worker.close(5)
    worker.submit(K1, msgs("late"), Signals())  # refused after close, with a warning
    assert worker.pending_count() == 0


def test_failures_are_retried_then_abandoned() -> None:
    calls: list[int] = []

    def flaky(batch: Batch) -> bool:
        calls.append(batch.attempts)
        if batch.attempts == 0:
            raise RuntimeError("model down")
        return batch.attempts >= 2

    worker = QueueWorker(flaky, QueuePolicy(debounce_seconds=1000, max_attempts=3, retry_delay_seconds=1000))
    worker.submit(K1, msgs("a"), Signals())
    assert worker.flush(10)  # flush ignores debounce and retry delay
    assert calls == [0, 1, 2] and worker.stats.failed == 2 and worker.stats.processed == 1
    worker.submit(K2, msgs("b"), Signals())
    never = QueueWorker(lambda b: False, QueuePolicy(max_attempts=2), start_threads=False)
    never.submit(K2, msgs("b"), Signals())
    assert not never.flush() and never.stats.abandoned == 1  # given up: its conversation was not learned
    assert never.flush()  # nothing lost by this flush
    worker.close(5)


def test_exit_handler_flushes_pending_updates(make_config: Callable[..., MemoryConfig],
                                             llm_server: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness_memory import services as services_module

    cfg = make_config(model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      auto={"debounce_seconds": 3600})
    services = MemoryServices.from_config(cfg)
    assert services in services_module._live  # every services object is flushed at interpreter exit
    monkeypatch.setattr(services_module, "_live", weakref.WeakSet([services]))
    auto = services.auto_memory()
    llm_server.script(text('{"newFacts": [{"content": "Likes tea", "category": "preference", "confidence": 0.9}]}'))
    auto.capture("u1", "s1", [{"role": "user", "content": "I like tea"}])
    assert llm_server.chat_requests == []  # an hour of debounce left
    services_module._close_at_exit()  # what atexit runs at interpreter exit
    assert "I like tea" in llm_server.chat_requests[0].messages[-1]["content"]
    assert [f.content for f in auto.list_facts("u1")] == ["Likes tea"]
    auto.capture("u1", "s1", [{"role": "user", "content": "after close"}])
    assert auto.worker.pending_count() == 0
    services.close()


def test_closing_the_services_flushes_auto_memory_first(make_config: Callable[..., MemoryConfig],
                                                         llm_server: ScriptedLLM) -> None:
    cfg = make_config(model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      auto={"debounce_seconds": 3600})
    services = MemoryServices.from_config(cfg)
    auto = auto_memory_for(services)
    llm_server.script(text('{"newFacts": [{"content": "Likes tea", "category": "preference", "confidence": 0.9}]}'))
    auto.capture("u1", "s1", [{"role": "user", "content": "I like tea"}])
    services.close()  # an app shutting down: pending updates are written before the store closes
    again = MemoryServices.from_config(cfg)
    assert [f.content for f in auto_memory_for(again).list_facts("u1")] == ["Likes tea"]
    again.close()


def test_forgetting_a_user_drops_their_queued_updates() -> None:
    q = DebounceQueue(QueuePolicy(debounce_seconds=1000, queue_max=2))
    q.add(K1, msgs("a"), Signals(), now=0)
    q.add(K2, msgs("b"), Signals(), now=1)
    q.add(K3, msgs("c"), Signals(), now=2)  # K1 moves to the ready list
    assert q.drop_user("u1") == 2
    assert list(q.pending) == [K2] and not q.ready
    worker = QueueWorker(lambda batch: True, QueuePolicy(debounce_seconds=1000), start_threads=False)
    worker.submit(K1, msgs("x"), Signals())
    worker.submit(K2, msgs("y"), Signals())
    assert worker.drop_user("u1") == 1 and worker.pending_count() == 1


def test_a_batch_carried_by_session_memory_waits_for_its_summary() -> None:
    """A session that session memory summarises: its extraction rides along with the summary, so
    it is due only after min_interval of quiet (the user left) or summary_wait, or at once by the
    normal rules once the user talks in another session."""
    q = DebounceQueue(QueuePolicy(debounce_seconds=30, max_wait_seconds=300, min_interval_seconds=1800,
                                  summary_wait_seconds=7200))
    for t in range(0, 3000, 60):  # a human pace for 50 minutes
        q.add(K1, msgs(f"m{t}"), Signals(), now=t, carried=True)
        assert q.take(now=t, busy=set()) is None
    assert q.next_due(set()) == 2940 + 1800  # quiet for min_interval: no summary is coming
    q.add(K2, msgs("y"), Signals(), now=0, carried=True)  # another user: not released below
    q.add(K3, msgs("x"), Signals(), now=3000, carried=True)  # the same user, another session
    assert q.pending[K1].carried is False and q.next_due(set()) == 300  # normal rules: overdue, due now
    assert q.pending[K2].carried
    for t in range(60, 7300, 60):  # K2 keeps talking: never later than summary_wait after its first message
        q.add(K2, msgs(f"y{t}"), Signals(), now=t, carried=True)
    assert q.next_due({K1, K3}) == 7200
