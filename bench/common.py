"""Shared bench helpers: real servers on free 127.0.0.1 ports, timing and table output.

Why real servers: the numbers must be what a deployment sees on loopback (SeaweedFS speaking
the COS protocol, a real redis-server), measured on this machine, side by side in one run.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness_memory.config import MemoryConfig
from tests.servers import RedisServer, SeaweedFS

os.environ.setdefault("AGNO_TELEMETRY", "false")


_scratch: list[str] = []


def scratch_dir(prefix: str = "hm-bench-") -> str:
    """A temporary directory removed when the bench process exits (local stores, SQLite, configs)."""
    path = tempfile.mkdtemp(prefix=prefix)
    _scratch.append(path)
    return path


@atexit.register
def _remove_scratch() -> None:
    for path in _scratch:
        shutil.rmtree(path, ignore_errors=True)


_shared: tuple[SeaweedFS, RedisServer] | None = None
_buckets: list[tuple[SeaweedFS, str]] = []


@contextmanager
def shared_servers(weed: SeaweedFS, red: RedisServer) -> Iterator[None]:
    """Make ``servers()`` hand out these running servers instead of starting its own (the smoke
    test passes the test session's servers; saves a SeaweedFS start per bench)."""
    global _shared
    previous, _shared = _shared, (weed, red)
    try:
        yield
    finally:
        _shared = previous


@contextmanager
def servers(redis: bool = True) -> Iterator[tuple[SeaweedFS, RedisServer | None]]:
    """A SeaweedFS (and a redis-server) on free 127.0.0.1 ports, stopped afterwards.

    Under ``shared_servers`` the shared ones are used and the buckets made meanwhile are deleted."""
    if _shared is not None:
        start = len(_buckets)
        try:
            yield _shared[0], _shared[1] if redis else None
        finally:
            for server, bucket in _buckets[start:]:
                server.delete_bucket(bucket)
            del _buckets[start:]
        return
    weed = SeaweedFS().start()
    red = RedisServer().start() if redis else None
    try:
        yield weed, red
    finally:
        weed.stop()
        if red is not None:
            red.close()


def config_for(backend: str, weed: SeaweedFS | None = None, redis: RedisServer | None = None,
               **sections: dict[str, Any]) -> MemoryConfig:
    """A fresh place per call: a new bucket or a new temp root, a new Redis key prefix."""
    if backend == "cos":
        assert weed is not None
        bucket = weed.create_bucket("b-" + uuid.uuid4().hex[:8])
        if _shared is not None:  # deleted when the enclosing servers() block ends
            _buckets.append((weed, bucket))
        store: dict[str, Any] = {"backend": "cos", "cos_bucket": bucket, "cos_domain": weed.domain_for(bucket),
                                 "cos_scheme": "http", "cos_anonymous": True, "cos_timeout": 10.0,
                                 "cos_retries": 0, "cos_conditional_put": "on"}
    else:
        store = {"backend": "local", "local_root": scratch_dir() + "/.harness"}
    data: dict[str, dict[str, Any]] = {"store": store}
    if redis is not None:
        data["redis"] = {"url": redis.url, "key_prefix": "b-" + uuid.uuid4().hex[:8] + ":"}
    for name, values in sections.items():
        data.setdefault(name, {}).update(values)
    return MemoryConfig.load(env={}, **data)


def timed(fn: Callable[[], Any], repeat: int) -> list[float]:
    """Wall times in milliseconds."""
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    idx = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[idx]


def p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(headers: list[str], rows: list[list[Any]]) -> str:
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.2f}" if v < 100 else f"{v:.0f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def memory_text(i: int) -> str:
    return (f"---\nname: memory {i}\ndescription: remembered fact number {i} about the project and the user\n"
            f"type: project\n---\n\nBody of memory {i}: details that matter later.\n")


def seed(memdir: Any, n: int, chunk: int = 1000, start: int = 0) -> None:
    """Memories ``m{start}`` … ``m{n - 1}`` in batches of ``chunk`` (``save_many``: one index update
    each); ``start`` grows a place seeded before to ``n``."""
    for first in range(start, n, chunk):
        memdir.save_many([(f"m{i:05d}.md", memory_text(i)) for i in range(first, min(n, first + chunk))])


def machine() -> str:
    return f"{os.cpu_count()} cores, {Path('/proc/cpuinfo').read_text().count('processor')} logical"


_POINTER = re.compile(r"JOB 1's new messages \[(\d+)\] to \[(\d+)\]")
_NUMBERED = re.compile(r"^\[(\d+)\] (.*?)(?=^\[\d+\] |\Z)", re.MULTILINE | re.DOTALL)


def extraction_conversation(prompt: str) -> str:
    """What a scripted extractor reads: the ``<conversation>`` block, or — when a combined call points
    to the summary's new messages instead of repeating them — those messages ([a] to [b])."""
    block = prompt.split("<conversation>", 1)[-1].split("</conversation>", 1)[0]
    pointer = _POINTER.search(block)
    if pointer is None:
        return block
    first, last = int(pointer.group(1)), int(pointer.group(2))
    messages = prompt.split("<new_messages", 1)[-1].split("</new_messages>", 1)[0]
    return "\n\n".join(m.group(2) for m in _NUMBERED.finditer(messages) if first <= int(m.group(1)) <= last)
