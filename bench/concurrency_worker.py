"""One OS process ("pod") of the concurrency bench: saves memories into ONE shared place.

Run as ``python -m bench.concurrency_worker USER WORKER COUNT`` with ``HARNESS_MEMORY_CONFIG`` set
(the same approach as ``tests/storm_worker.py``). Why a start gate: importing agno and opening
the store clients takes a second or more per process, much longer than the saves themselves on
this machine; timing from process start would measure Python start-up. So the worker sets
everything up (touches the place once, opening its connections, and saves once into a place of
its own, loading what a pod's first save loads), prints ``READY``, waits for a line on stdin, and
only then saves, timing each ``save_file``. Its last stdout line is a
JSON report: wall-clock start/end (``time.time()``, comparable across processes on one
machine), per-save latencies and the answers that were not ``Created``.
"""

from __future__ import annotations

import json
import sys
import time

from harness_memory.config import MemoryConfig
from harness_memory.search.index import tokenize
from harness_memory.services import MemoryServices
from harness_memory.tools import MemoryTools


def file_name(worker: int, i: int) -> str:
    return f"w{worker:02d}_m{i:04d}.md"


def content(worker: int, i: int) -> str:
    return (f"---\nname: w{worker} m{i}\ndescription: worker {worker} memory {i}\ntype: project\n---\n\n"
            f"Saved by worker {worker}.\n")


def main() -> int:
    user, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    services = MemoryServices.from_config(MemoryConfig.load())
    tools = MemoryTools(services.user_agent_dir(user))
    tools.list_files()  # open the connections before the gate
    tokenize("warm up 预热")  # and load the search tokenizer a long-running pod has loaded long ago
    # One save into a place of its own: what a pod's first save loads once (the example-text
    # registry, the frontmatter parser, the search writer; ~0.1 s of CPU) is not a cost per save.
    MemoryTools(services.user_agent_dir(f"{user}-warm-{worker}")).save_file("warm_up.md", content(worker, -1))
    print("READY", flush=True)
    sys.stdin.readline()
    failures: list[dict[str, str]] = []
    latencies: list[float] = []
    start, cpu = time.time(), time.process_time()
    for i in range(count):
        t0 = time.perf_counter()
        name = file_name(worker, i)
        answer = tools.save_file(name, content(worker, i))
        latencies.append((time.perf_counter() - t0) * 1000)
        if not answer.startswith("Created"):
            failures.append({"file": name, "answer": answer})
    end, cpu = time.time(), time.process_time() - cpu
    services.close()
    print(json.dumps({"worker": worker, "start": start, "end": end, "saved": count - len(failures),
                      "failures": failures, "latencies_ms": latencies, "cpu_s": cpu}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
