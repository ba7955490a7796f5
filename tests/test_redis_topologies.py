"""Every Redis user on every topology (one server, TLS, Sentinel, a 3-master Cluster), end to end
through ``MemoryServices``: two pods share a conversation's buffer and summary and recall's
surfaced set, the place lock excludes across pods, and a short multi-process write storm with the
Redis lock alone (conditional PUT off, as on real COS) loses no index entry.

On the cluster, any command or script of ours touching keys of two slots would raise here (the
cluster client refuses it before sending) — this file and the buffer contract in
``test_session_buffer.py`` are the audit of our hash tags. Failover under load is measured in
``make bench`` (``bench/bench_failover.py``), not here.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness_memory.config import MemoryConfig
from harness_memory.errors import LockTimeout
from harness_memory.memdir import parse_index
from harness_memory.services import MemoryServices
from harness_memory.session import ExtractStatus, SessionMemoryManager
from harness_memory.session.summary import PROMPT_MARKER
from tests.fakellm import ScriptedLLM, text
from tests.redis_topologies import Topology

from .helpers import child_env, spawn, write_config

SESSION = {"first_threshold_tokens": 100, "update_threshold_tokens": 50, "keep_messages": 2}
WORKERS, SAVES = 2, 10  # storm size per topology (the 8 × 50 storm on one server is in test_locks.py)
SUMMARY = "# Build fix\n\n## Current State\n- working\n\n## Task\n- fix the build\n\n## Worklog\n- read logs\n"


def turn(i: int, pod: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{pod}{i} user: " + "please look at build.log " * 6},
            {"role": "assistant", "content": f"{pod}{i} assistant: " + "the log says ok " * 6}]


@pytest.fixture
def pods() -> Iterator[Callable[[MemoryConfig], MemoryServices]]:
    made: list[MemoryServices] = []

    def make(cfg: MemoryConfig) -> MemoryServices:
        made.append(MemoryServices.from_config(cfg))
        return made[-1]

    yield make
    for services in made:
        services.close()


def test_two_pods_share_the_conversation_and_recall_state(
    redis_topology: Topology, make_config: Callable[..., MemoryConfig],
    pods: Callable[[MemoryConfig], MemoryServices], llm_server: ScriptedLLM,
) -> None:
    cfg = make_config("local", redis=redis_topology.name, session=SESSION,
                      model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"})
    a, b = pods(cfg), pods(cfg)
    sa: SessionMemoryManager = a.session_manager()
    sb: SessionMemoryManager = b.session_manager()
    sid = "topo-" + uuid.uuid4().hex[:6]
    sa.collect_messages_sync(sid, turn(0, "a"))
    sb.collect_messages_sync(sid, turn(1, "b"))
    sa.collect_messages_sync(sid, turn(2, "a"))
    assert sa.mode == sb.mode == "redis"
    assert sb.should_extract_sync(sid)
    llm_server.script(text(SUMMARY))
    result = sb.maybe_extract_sync(sid)
    assert result.status is ExtractStatus.EXTRACTED and result.messages_sent == 6
    sent = [r for r in llm_server.chat_requests if PROMPT_MARKER in str(r.messages[0].get("content"))]
    prompt = sent[0].messages[1]["content"]
    assert all(f"{p}{i} user" in prompt for p, i in (("a", 0), ("b", 1), ("a", 2)))  # both pods' runs
    assert sa.get_summary_sync(sid) == result.summary  # the other pod sees it
    state = sa.buffer.state(sid)
    assert state is not None and (state.summarized, state.length, state.summary_version) == (6, 2, 1)

    a.surfaced_tracker().mark(sid, ["deploy.md", "db.md"], user_id="u1")
    assert b.surfaced_tracker().surfaced(sid, user_id="u1") == {"deploy.md", "db.md"}
    assert b.surfaced_tracker().local_session_count() == 0  # answered by Redis, not this pod
    sb.clear_session_sync(sid)
    assert sa.buffer.state(sid) is None
    assert sa.buffer.warnings == sb.buffer.warnings == 0


def test_place_lock_excludes_across_pods(
    redis_topology: Topology, make_config: Callable[..., MemoryConfig],
    pods: Callable[[MemoryConfig], MemoryServices],
) -> None:
    """Two services objects ("pods") without a shared local lock (COS store: no lock folder):
    only the Redis lock can keep their read-modify-write updates from interleaving."""
    cfg = make_config("cos", redis=redis_topology.name)
    a, b = pods(cfg), pods(cfg)
    name = "place-" + uuid.uuid4().hex[:6]
    box = {"n": 0, "inside": 0, "overlap": 0}

    def work(services: MemoryServices) -> None:
        for _ in range(15):
            with services.locker.hold(name):
                box["inside"] += 1
                box["overlap"] = max(box["overlap"], box["inside"])
                value = box["n"]
                time.sleep(0.001)
                box["n"] = value + 1
                box["inside"] -= 1

    threads = [threading.Thread(target=work, args=(pod,)) for pod in (a, b, a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (box["n"], box["overlap"]) == (60, 1)

    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with a.locker.hold(name):
            held.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(10)
    try:
        with pytest.raises(LockTimeout), b.locker.hold(name, wait=0.3):
            pass
    finally:
        release.set()
        t.join()
    with b.locker.hold(name, wait=5):  # released by the holder: free again
        pass


@pytest.mark.xdist_group("storms")
@pytest.mark.parametrize("topology", ["sentinel", "cluster"])  # TLS changes the connection, not the lock
def test_write_storm_with_the_redis_lock_loses_nothing(
    topology: str, make_config: Callable[..., MemoryConfig], tmp_path: Path,
) -> None:
    """2 OS processes × 10 saves into one place, COS protocol with conditional PUT off: the
    Redis lock on this topology alone keeps MEMORY.md and the manifest whole. (The 8 × 50 storm
    on a single server is in ``test_locks.py``.)"""
    cfg = make_config("cos", redis=topology, store={"cos_conditional_put": "off"})
    env = child_env(write_config(cfg, tmp_path / "storm.yaml"))
    procs = [spawn("tests.storm_worker", "storm-user", str(w), str(SAVES), env=env) for w in range(WORKERS)]
    for p in procs:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0, out
    with MemoryServices.from_config(cfg) as services:
        memdir = services.user_agent_dir("storm-user")
        index = services.store.get(memdir.index_key).data.decode()
        manifest = memdir.manifest()
    files = [f for _, f, _ in parse_index(index)]
    expected = {f"w{w:02d}_m{i:03d}.md" for w in range(WORKERS) for i in range(SAVES)}
    assert set(manifest.entries) == expected and set(files) == expected and len(files) == WORKERS * SAVES
