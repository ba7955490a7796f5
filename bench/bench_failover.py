"""Redis Sentinel failover in the middle of conversations and of place writes: what is lost.

Run: ``.venv/bin/python -m bench.bench_failover`` (starts its own Sentinel set — 1 master,
1 replica, 3 sentinels — from Debian's redis-server, and SeaweedFS, on 127.0.0.1; ``--quick``
for one short round).

1. **Conversations** — ``SESSIONS`` conversations, each a thread of one pod's
   ``SessionMemoryManager`` buffering one message every ``PACE`` s (the post-hook's collect), for
   ``SECONDS`` s. Two seconds in, the master fails over:

   * ``SENTINEL FAILOVER`` — the replica is promoted at once, but the old master keeps
     accepting writes from pooled connections until the sentinels demote it (~10 s later); those
     writes are then discarded by the resync. redis-py sees no error.
   * ``kill -9`` of the master — commands fail (connection refused, then "no master") until the
     sentinels promote the replica (~2–3 s); the buffer runs in-process meanwhile and moves its
     messages into the new master when Redis answers again.

   Afterwards every conversation's buffer is read back from the (new) master and compared with
   the messages whose collect returned normally: *lost* = acknowledged but absent, *duplicated*
   = present twice. With ``redis.wait_replicas: 1`` each collect waits (WAIT) until the replica
   has it, and a write the replica did not take is kept in-process instead.

2. **Place writes** — two pods (four threads) saving files into one place on the COS protocol
   with conditional PUT off (as on real COS), where only the Redis place lock orders the
   manifest updates, through the same two failovers. Reported: saves acknowledged, entries
   missing from the manifest / MEMORY.md afterwards, and lock holders that overlapped.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_memory.config import MemoryConfig
from harness_memory.memdir import MemoryDir, parse_index
from harness_memory.services import MemoryServices
from harness_memory.tools import MemoryTools
from tests.redis_topologies import SentinelRedis

from .common import p50, pct, scratch_dir, servers, table

SESSIONS = 6
PACE = 0.05
SECONDS = 16.0
TRIGGER_AT = 2.0
QUICK_SECONDS = 4.0
SAVE_THREADS = 4


@dataclass
class ConversationResult:
    trigger: str
    wait_replicas: int
    acknowledged: int = 0
    failed: int = 0
    lost: int = 0
    duplicated: int = 0
    lost_after_trigger: list[float] = field(default_factory=list)
    warnings: int = 0
    local_collects: int = 0
    seconds_to_new_master: float = float("nan")
    steady_ms: list[float] = field(default_factory=list)  # collect latency before the failover

    def row(self) -> list[Any]:
        window = (f"{min(self.lost_after_trigger):.1f}–{max(self.lost_after_trigger):.1f} s"
                  if self.lost_after_trigger else "—")
        return [self.trigger, "WAIT 1" if self.wait_replicas else "off", p50(self.steady_ms),
                pct(self.steady_ms, 99), self.acknowledged, self.failed,
                self.lost, f"{100 * self.lost / max(1, self.acknowledged):.1f}%", window, self.duplicated,
                self.local_collects, self.warnings, f"{self.seconds_to_new_master:.1f}"]


CONVERSATION_HEADERS = ["trigger", "redis.wait_replicas", "collect p50 ms before", "collect p99 ms before",
                        "messages acknowledged", "collects failed",
                        "lost", "lost %", "lost messages were sent", "duplicated", "collects buffered in-process",
                        "outage warnings", "s until the sentinels named the new master"]


def _trigger(topo: SentinelRedis, how: str) -> tuple[Any, float]:
    """Fail the master over; returns (old master node, seconds until the sentinels name another)."""
    t0 = time.monotonic()
    if how == "SENTINEL FAILOVER":
        old, _ = topo.failover()
        return old, time.monotonic() - t0
    old = topo.node_on(topo.master_port())
    old.kill()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if topo.master_port() != old.port:
                break
        time.sleep(0.05)
    return old, time.monotonic() - t0


@contextlib.contextmanager
def sentinel_set() -> Iterator[SentinelRedis]:
    topo = SentinelRedis(Path(scratch_dir("hm-bench-sentinel-"))).start()
    try:
        yield topo
    finally:
        topo.close()


def conversations(how: str, wait_replicas: int, seconds: float) -> ConversationResult:
    result = ConversationResult(how, wait_replicas)
    with sentinel_set() as topo:
        cfg = MemoryConfig.load(env={}, store={"backend": "local", "local_root": scratch_dir() + "/.harness"},
                                redis={**topo.settings(), "key_prefix": f"fo-{uuid.uuid4().hex[:6]}:",
                                       "socket_timeout": 0.5, "retry_after_seconds": 1.0,
                                       "wait_replicas": wait_replicas},
                                session={"first_threshold_tokens": 10**9})
        services = MemoryServices.from_config(cfg)
        manager = services.session_manager()
        acked: dict[str, list[tuple[str, float]]] = {f"conv{s}": [] for s in range(SESSIONS)}
        failed = Counter[str]()
        steady = result.steady_ms
        stop = threading.Event()
        t_start = time.monotonic()
        trigger_at = [float("inf")]

        def talk(sid: str) -> None:
            i = 0
            while not stop.is_set():
                content = f"{sid} message {i}"
                sent_at = time.monotonic() - t_start
                try:
                    manager.collect_messages_sync(sid, [{"role": "user", "content": content}])
                    acked[sid].append((content, sent_at))
                    if time.monotonic() - t_start < trigger_at[0]:
                        steady.append((time.monotonic() - t_start - sent_at) * 1000)
                except Exception:  # counted: the caller was told
                    failed[sid] += 1
                i += 1
                stop.wait(PACE)

        threads = [threading.Thread(target=talk, args=(sid,)) for sid in acked]
        for t in threads:
            t.start()
        time.sleep(TRIGGER_AT)
        trigger_at[0] = time.monotonic() - t_start
        old, result.seconds_to_new_master = _trigger(topo, how)
        time.sleep(max(0.0, seconds - (time.monotonic() - t_start)))
        stop.set()
        for t in threads:
            t.join()
        if how == "SENTINEL FAILOVER":
            topo.wait_demoted(old)  # what the old master took alone is gone only now
        # Redis answers again: the next operation moves what this pod buffered in-process.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (manager.buffer.mode != "redis" or manager.buffer.local.session_ids()):
            manager.buffer.migrate_all()
            time.sleep(0.2)
        result.warnings = manager.buffer.warnings
        check = services.session_manager().buffer
        for sid, sent in acked.items():
            stored = Counter(m.content for m in check.redis.entries(sid)) if check.redis else Counter()
            for content, at in sent:
                if stored[content] == 0:
                    result.lost += 1
                    result.lost_after_trigger.append(at - trigger_at[0])
            result.duplicated += sum(n - 1 for n in stored.values() if n > 1)
            result.acknowledged += len(sent)
        result.failed = sum(failed.values())
        result.local_collects = manager.buffer.local_collects
        services.close()
    return result


# -- place writes -------------------------------------------------------------------------------
class CountingLocker:
    """Wraps the services' locker and records how many holders were inside at once."""

    def __init__(self, inner: Any, shared: dict[str, int], guard: threading.Lock) -> None:
        self.inner = inner
        self.shared = shared
        self.guard = guard

    @contextlib.contextmanager
    def hold(self, name: str, *, ttl: float | None = None, wait: float | None = None) -> Iterator[Any]:
        with self.inner.hold(name, ttl=ttl, wait=wait) as lease:
            with self.guard:
                self.shared["inside"] += 1
                self.shared["max"] = max(self.shared["max"], self.shared["inside"])
            try:
                yield lease  # the transaction checks it before each write
            finally:
                with self.guard:
                    self.shared["inside"] -= 1


@dataclass
class SaveResult:
    trigger: str
    acknowledged: int = 0
    errors: int = 0
    lost_manifest: int = 0
    lost_index: int = 0
    max_holders: int = 0

    def row(self) -> list[Any]:
        return [self.trigger, self.acknowledged, self.errors, self.lost_manifest, self.lost_index, self.max_holders]


SAVE_HEADERS = ["trigger", "saves acknowledged", "saves that answered an error", "lost manifest entries",
                "lost MEMORY.md entries", "most lock holders at once"]


def saves(how: str, seconds: float, weed: Any) -> SaveResult:
    from .common import config_for

    result = SaveResult(how)
    with sentinel_set() as topo:
        base = config_for("cos", weed, None, store={"cos_conditional_put": "off"})
        cfg = MemoryConfig.load(env={}, store=base.store.model_dump(),
                                redis={**topo.settings(), "key_prefix": f"fs-{uuid.uuid4().hex[:6]}:",
                                       "socket_timeout": 0.5, "retry_after_seconds": 1.0})
        pods = [MemoryServices.from_config(cfg) for _ in range(2)]
        shared = {"inside": 0, "max": 0}
        guard = threading.Lock()
        tools = []
        for pod in pods:
            own = pod.user_agent_dir("failover-user")
            memdir = MemoryDir(pod.store, own.place, locker=CountingLocker(pod.locker, shared, guard),  # type: ignore[arg-type]
                               limits=pod.config.limits, executor=pod.io)
            tools.append(MemoryTools(memdir))
        stop = threading.Event()
        created: list[str] = []
        errors = [0]

        def write(worker: int) -> None:
            i = 0
            while not stop.is_set():
                name = f"w{worker}_{i:04d}.md"
                answer = tools[worker % 2].save_file(name, f"---\nname: {name}\ndescription: saved by {worker}\n"
                                                           f"type: project\n---\n\nbody {i}\n")
                if answer.startswith("Created"):
                    created.append(name)
                else:
                    errors[0] += 1
                i += 1

        threads = [threading.Thread(target=write, args=(w,)) for w in range(SAVE_THREADS)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        time.sleep(TRIGGER_AT)
        _trigger(topo, how)
        time.sleep(max(0.0, seconds - (time.monotonic() - t0)))
        stop.set()
        for t in threads:
            t.join()
        memdir = pods[0].user_agent_dir("failover-user")
        manifest = set(memdir.manifest().entries)
        index = {f for _, f, _ in parse_index(pods[0].store.get(memdir.index_key).data.decode("utf-8"))}
        result.acknowledged, result.errors = len(created), errors[0]
        result.lost_manifest = len(set(created) - manifest)
        result.lost_index = len(set(created) - index)
        result.max_holders = shared["max"]
        for pod in pods:
            pod.close()
    return result


def run(quick: bool = False) -> str:
    """Quick: one short kill -9 round with WAIT (the smoke test's size), no place writes."""
    seconds = QUICK_SECONDS if quick else SECONDS
    triggers = ("SENTINEL FAILOVER", "kill -9 master")
    rounds = [("kill -9 master", 1)] if quick else [(how, w) for how in triggers for w in (0, 1)]
    conv_rows = [conversations(how, w, seconds).row() for how, w in rounds]
    save_rows: list[list[Any]] = []
    if not quick:
        with servers(redis=False) as (weed, _):
            save_rows = [saves(how, seconds, weed).row() for how in triggers]
    return "\n\n".join([
        f"### Conversations through a Sentinel failover ({SESSIONS} conversations, one message every "
        f"{PACE * 1000:.0f} ms each, {seconds:.0f} s, failover {TRIGGER_AT:.0f} s in)",
        table(CONVERSATION_HEADERS, conv_rows),
        "*lost messages were sent*: when the lost messages were acknowledged, in seconds after the failover "
        "was triggered.",
        f"### Place writes through a Sentinel failover (2 pods, {SAVE_THREADS} threads, one place, "
        "COS protocol with conditional PUT off)",
        table(SAVE_HEADERS, save_rows) if save_rows else "(not run in quick mode)",
    ])


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv[1:]))
