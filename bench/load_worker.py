"""One pod of the load test: serves ``USERS`` users at once, each having a conversation.

Run as ``python -m bench.load_worker POD USERS TURNS`` with ``HARNESS_MEMORY_CONFIG`` set (the
parent, ``bench.bench_load``, writes it). Like the concurrency bench: set up (imports, clients,
each user's seeded memories), print ``READY``, wait for a line on stdin, then run and print one
JSON report as the last stdout line.

One user = one thread, turn after turn (closed loop, no think time), as a pod handling that
user's requests: every turn is ``build_agent(user, session_id, query=message)`` + ``agent.run``
against the scripted model (so the session post-hook buffers the turn in Redis, auto memory
captures it, recall picks files); every ``SAVE_EVERY``-th turn also saves a memory through the
user's ``MemoryTools`` (what the agent's tool call runs). Session summaries and auto-memory
extractions run in the background when due, as in production.

``HM_LOAD_COLD=1``: the pod forgets what it held of the seeding (its warm views) before the run,
as if another pod had written the seeds (bodies then come from Redis's shared bodies, or with
``redis.body_cache_seconds: 0`` from the store).

Measured per operation (ms): build, run, save, session collect (the buffer write), session
summary, auto-memory extraction — the last three by timing those methods of this pod's objects.
The store is wrapped (``bench.metered.MeteredStore``) to count requests and bytes by kind.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from typing import Any

from harness_memory import build_agent
from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from harness_memory.session import ExtractStatus
from harness_memory.storage import make_store

from .common import memory_text
from .cost_server import conversation
from .metered import MeteredStore, timed_method

SAVE_EVERY = 4
SEEDED = 20


def user_id(pod: int, u: int) -> str:
    return f"p{pod}-u{u}"


def main() -> int:
    pod, users, turns = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    cfg = MemoryConfig.load()
    store = MeteredStore(make_store(cfg.store))
    services = MemoryServices.from_config(cfg, store=store)
    script = conversation(turns)
    ops: dict[str, list[float]] = {k: [] for k in ("build", "run", "turn", "save", "collect", "summary", "extraction")}
    manager = services.session_manager()
    timed_method(manager.buffer, "collect", ops["collect"])
    timed_method(manager, "maybe_extract_sync", ops["summary"], lambda r: r.status is ExtractStatus.EXTRACTED)
    auto = services.auto_memory()
    timed_method(auto.updater, "run", ops["extraction"])
    for u in range(users):  # each user arrives with memories (a steady state, not a first day)
        services.user_agent_dir(user_id(pod, u)).save_many(
            [(f"seed_{i:02d}.md", memory_text(i)) for i in range(SEEDED)])
    if os.environ.get("HM_LOAD_COLD"):  # as if another pod had written the seeds: nothing of them held here
        services.warm.clear()
    build_agent(user_id(pod, 0), session_id="warmup", services=services)  # imports, schemas
    store.reset()
    print("READY", flush=True)
    sys.stdin.readline()

    errors: list[str] = []
    lock = threading.Lock()
    done = [0]

    def converse(u: int) -> None:
        uid = user_id(pod, u)
        tools = services.memory_tools(uid)
        for i, (message, _) in enumerate(script):
            try:
                t0 = time.perf_counter()
                agent = build_agent(uid, session_id=f"conv-{uid}", query=message, services=services)
                t1 = time.perf_counter()
                agent.run(message)
                t2 = time.perf_counter()
                with lock:
                    ops["build"].append((t1 - t0) * 1000)
                    ops["run"].append((t2 - t1) * 1000)
                if i % SAVE_EVERY == SAVE_EVERY - 1:
                    answer = tools.save_file(f"note_{i:03d}.md", memory_text(1000 + i))
                    with lock:
                        ops["save"].append((time.perf_counter() - t2) * 1000)
                    if not answer.startswith(("Created", "Updated")):
                        raise RuntimeError(f"save answered: {answer}")
                with lock:
                    ops["turn"].append((time.perf_counter() - t0) * 1000)
                    done[0] += 1
            except Exception as exc:  # counted and reported; the conversation goes on
                with lock:
                    errors.append(f"{uid} turn {i}: {exc!r}"[:300])
                    if len(errors) < 3:
                        traceback.print_exc()

    threads = [threading.Thread(target=converse, args=(u,), name=f"user-{u}") for u in range(users)]
    cpu0 = time.process_time()
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    end = time.time()
    turns_done = done[0]
    manager.wait_idle(120)  # summaries still running count as this run's work
    auto.flush(120)  # the users leave: their pending extractions run
    drained = time.time()
    cpu = time.process_time() - cpu0  # this pod's CPU for the turns and their background work
    stats = manager.stats
    report: dict[str, Any] = {
        "pod": pod, "start": start, "end": end, "drained": drained, "turns": turns_done, "errors": errors,
        "cpu_seconds": cpu,
        "ops": ops, "store": store.snapshot(), "collect_errors": stats.collect_errors,
        "buffer_mode": manager.buffer.mode, "buffer_warnings": manager.buffer.warnings,
        "version_trips": _version_trips(services),
    }
    manager.close()
    services.close()
    print(json.dumps(report), flush=True)
    return 0


def _version_trips(services: MemoryServices) -> float:
    """Redis round trips reading or announcing place versions (``memdir/versions.py``); 0 on a
    release without them."""
    metrics = services.telemetry.metrics
    family = getattr(metrics, "version_round_trips", None)
    return float(family.values.get((), 0.0)) if family is not None else 0.0


if __name__ == "__main__":
    sys.exit(main())
