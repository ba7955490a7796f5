"""Tool operations: save / read / list / replace_file_chunk / delete latency through ``MemoryTools``.

Run: ``.venv/bin/python -m bench.bench_tools`` (starts its own SeaweedFS and redis-server on
127.0.0.1; ``--quick`` for the smallest configuration).

What a call costs is what the model's tool call waits for: the toolkit's own code, the memdir
rules (validation, frontmatter, the place lock, the manifest read-modify-write, MEMORY.md
re-render) and the object-store round trips. Two deployments side by side:

* **cos** — ``CosStore`` on SeaweedFS (the COS protocol on loopback) with the Redis place lock,
  as a multi-pod deployment runs;
* **local** — ``LocalStore`` with the in-process + ``flock`` lock, the embedded default.

Each place is seeded first (``save_many``) so the manifest a write rewrites has a realistic size.
Every call's answer is checked: a tool that answered with an error would make the numbers
meaningless, so the bench fails instead.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from harness_memory.services import MemoryServices
from harness_memory.tools import MemoryTools

from .common import config_for, memory_text, p50, pct, seed, servers, table

SIZES = (100, 1000)
QUICK_SIZES = (10,)
USER = "bench-user"


@dataclass
class OpResult:
    backend: str
    lock: str
    memories: int
    op: str
    times_ms: list[float]
    requests: list[int]
    #: CPU time of this (client) process over all the calls: its threads' work included, the
    #: servers' not. The cost model of the README's capacity section stands on it.
    cpu_s: float = 0.0

    def row(self) -> list[object]:
        per_op = sum(self.requests) / len(self.requests) if self.requests else float("nan")
        cpu = 1000 * self.cpu_s / len(self.times_ms) if self.times_ms else float("nan")
        return [self.backend, self.lock, self.memories, self.op, len(self.times_ms), p50(self.times_ms),
                pct(self.times_ms, 95), round(per_op, 1), round(cpu, 2)]


HEADERS = ["backend", "lock", "memories in place", "tool", "calls", "p50 ms", "p95 ms", "store requests / call",
           "client CPU ms / call"]


def _expect(answer: str, *prefixes: str) -> None:
    if not answer.startswith(prefixes):
        raise RuntimeError(f"tool answered an error during the bench: {answer[:200]}")


def measure(backend: str, weed: object, redis: object, n: int, repeat: int) -> list[OpResult]:
    """All tool operations against one freshly seeded place of ``n`` memories."""
    cfg = config_for(backend, weed, redis if backend == "cos" else None)  # type: ignore[arg-type]
    services = MemoryServices.from_config(cfg)
    try:
        own = services.user_agent_dir(USER)
        seed(own, n)
        tools = MemoryTools(own, services.shared_agent_dir())
        store = services.store
        lock = "redis" if services.redis is not None else "flock"
        results: list[OpResult] = []

        def measure_op(op: str, calls: list[Callable[[], str]], *ok: str) -> None:
            times: list[float] = []
            requests: list[int] = []
            tools.list_files()  # one untimed call: connection pool and caches warm
            cpu = time.process_time()
            for call in calls:
                before = store.request_count
                t0 = time.perf_counter()
                answer = call()
                times.append((time.perf_counter() - t0) * 1000)
                requests.append(store.request_count - before)
                _expect(answer, *ok)
            results.append(OpResult(backend, lock, n, op, times, requests, time.process_time() - cpu))

        existing = [f"m{i:05d}.md" for i in range(min(n, repeat))]
        existing = (existing * (repeat // max(1, len(existing)) + 1))[:repeat]
        new = [f"bench_new_{i:04d}.md" for i in range(repeat)]
        measure_op("save_file (new file)",
            [lambda f=f, i=i: tools.save_file(f, memory_text(100_000 + i)) for i, f in enumerate(new)], "Created")
        measure_op("save_file (overwrite)",
            [lambda f=f, i=i: tools.save_file(f, memory_text(200_000 + i)) for i, f in enumerate(new)], "Updated")
        measure_op("read_file", [lambda f=f: tools.read_file(f) for f in existing], "---")
        measure_op("list_files", [tools.list_files for _ in range(max(3, repeat // 4))], "Your memories")
        measure_op("replace_file_chunk",
            [lambda f=f, i=i: tools.replace_file_chunk(f, f"Body of memory {200_000 + i}:", f"Body (v2) {i}:")
             for i, f in enumerate(new)], "Updated")
        measure_op("delete_file", [lambda f=f: tools.delete_file(f) for f in new], "Deleted")
        # The floor under every number above: one request to this store, straight through it (no
        # tool, no lock), so a reader can tell the code's cost from the machine's.
        place_key = own.place.prefix + "bench-raw.bin"
        data = b"x" * 300
        store.put(place_key, data)
        for op, fn in (("store PUT, 300 B (one request)", lambda: store.put(place_key, data)),
                       ("store GET, 300 B (one request)", lambda: store.get(place_key))):
            times, counts = [], []
            cpu = time.process_time()
            for _ in range(repeat):
                before = store.request_count
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1000)
                counts.append(store.request_count - before)
            results.append(OpResult(backend, lock, n, op, times, counts, time.process_time() - cpu))
        store.delete(place_key)
        return results
    finally:
        services.close()


def run(quick: bool = False) -> str:
    sizes = QUICK_SIZES if quick else SIZES
    repeat = {"cos": 5, "local": 5} if quick else {"cos": 60, "local": 120}
    results: list[OpResult] = []
    with servers(redis=True) as (weed, red):
        for backend in ("cos", "local"):
            for n in sizes:
                results += measure(backend, weed, red, n, repeat[backend])
    note = ("Each call is timed on its own (sequential; one writer). `save_file (new file)` adds a file to a "
            "place already holding the listed number of memories; `replace_file_chunk` edits those files; "
            "`read_file` reads seeded ones. Store requests are counted at the ObjectStore (GET/PUT/HEAD/DELETE); "
            "the Redis lock's SET/EVAL are not store requests. The two `store …` rows are single requests "
            "straight through the store (no tool, no lock): the floor a tool call stands on, on this machine. "
            "A save is two write round trips in a row (the manifest head, then the file beside MEMORY.md and "
            "the search delta) plus the Redis lock. *client CPU* is this process's CPU time per call (its "
            "I/O threads included, the servers' not): on the COS rows most of it is the HTTP client under "
            "the COS SDK, about the single-request rows' figure per store request.")
    return "\n\n".join([f"### Tool operations through MemoryTools ({'quick' if quick else 'full'})",
                        table(HEADERS, [r.row() for r in results]), note])


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv[1:]))
