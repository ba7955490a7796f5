"""A store wrapper that counts requests and bytes by operation and by kind of object.

Why: the capacity model needs what one turn costs the object store — how many GETs / PUTs /
LISTs, how many bytes each way, and how many writes land on the per-place objects every save
rewrites (the manifest and MEMORY.md), which are the hot objects real COS limits (~50 writes/s
per object). ``ObjectStore.request_count`` gives only the total.
"""

from __future__ import annotations

import os
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from harness_memory.layout import INDEX_FILE, MANIFEST_FILE
from harness_memory.storage.base import DeleteFailure, ObjectInfo, ObjectStore, StoredObject

T = TypeVar("T")
WRITES = ("put", "put_if_absent", "put_if_match")


def kind_of(key: str) -> str:
    """Which kind of object a key is, for the per-turn breakdown: the place (user agent memory,
    user auto memory, shared ones, session summaries) and the object (manifest, MEMORY.md, state,
    file)."""
    parts = key.split("/")
    name = parts[-1]
    if "sessions" in parts:
        return "session summary"
    shared = "users" not in parts
    place = "auto memory" if "projects" in parts else "agent memory"
    place = f"shared {place}" if shared else place
    if name == MANIFEST_FILE:
        return f"{place} manifest"
    if name == INDEX_FILE:
        return f"{place} MEMORY.md"
    if name.startswith("."):
        return f"{place} state"
    return f"{place} file"


#: ``HM_METER_TRACE=1``: each kind also names the code that sent the request (the innermost
#: harness_memory frames outside the storage layer), for a per-purpose breakdown.
TRACE = bool(os.environ.get("HM_METER_TRACE"))


_PLUMBING = ("harness_memory.storage", "harness_memory.observe")


def _caller(depth: int = 6) -> str:
    names: list[str] = []
    frame = sys._getframe(2)
    while frame is not None and len(names) < depth:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("harness_memory") and not module.startswith(_PLUMBING):
            names.append(f"{module.rsplit('.', 1)[-1]}.{frame.f_code.co_name}")
        frame = frame.f_back
    return " < ".join(names)


class MeteredStore(ObjectStore):
    """``inner`` with every request counted: ``requests[(op, kind)]``, ``bytes_up`` / ``bytes_down``."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(io_threads=8)
        self.inner = inner
        self.key_prefix = getattr(inner, "key_prefix", "memory/")
        self.supports_conditional_put = inner.supports_conditional_put
        self.requests: Counter[tuple[str, str]] = Counter()
        self.bytes_up = 0
        self.bytes_down = 0
        self.hot_writes: Counter[str] = Counter()  # writes per manifest / MEMORY.md object
        self._lock = threading.Lock()

    def _count(self, op: str, key: str, up: int = 0) -> None:
        kind = kind_of(key) if op != "list" else "listing"
        if TRACE:
            kind = f"{kind} {key.rsplit('/', 1)[-1][:40]} [{_caller()}]"
        with self._lock:
            self.requests[(op, kind)] += 1
            self.request_count += 1
            self.bytes_up += up
            if op in WRITES and kind.endswith(("manifest", "MEMORY.md")):
                self.hot_writes[key] += 1

    def _down(self, n: int) -> None:
        with self._lock:
            self.bytes_down += n

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"requests": [[op, kind, n] for (op, kind), n in self.requests.items()],
                    "bytes_up": self.bytes_up, "bytes_down": self.bytes_down,
                    "hot_writes": dict(self.hot_writes)}

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.hot_writes.clear()
            self.bytes_up = self.bytes_down = self.request_count = 0

    # -- ObjectStore ------------------------------------------------------------------------
    def get(self, key: str) -> StoredObject:
        self._count("get", key)
        obj = self.inner.get(key)
        self._down(len(obj.data))
        return obj

    def head(self, key: str) -> ObjectInfo:
        self._count("head", key)
        return self.inner.head(key)

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> str:
        self._count("put", key, len(data))
        return self.inner.put(key, data, content_type=content_type)

    def put_if_absent(self, key: str, data: bytes, *, content_type: str | None = None) -> str:
        self._count("put_if_absent", key, len(data))
        return self.inner.put_if_absent(key, data, content_type=content_type)

    def put_if_match(self, key: str, data: bytes, etag: str, *, content_type: str | None = None) -> str:
        self._count("put_if_match", key, len(data))
        return self.inner.put_if_match(key, data, etag, content_type=content_type)

    def delete(self, key: str) -> None:
        self._count("delete", key)
        self.inner.delete(key)

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        self._count("list", prefix)
        return iter(list(self.inner.list(prefix)))

    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        keys = list(keys)
        for key in keys:
            self._count("delete", key)
        return self.inner.delete_many(keys)

    def close(self) -> None:
        super().close()
        self.inner.close()

    def describe(self) -> str:
        return f"MeteredStore({self.inner.describe()})"


def timed_method(obj: Any, name: str, sink: list[float], keep: Callable[[Any], bool] = lambda _: True) -> None:
    """Replace ``obj.name`` by a wrapper appending each call's milliseconds to ``sink`` (calls
    whose result ``keep`` rejects are not recorded). Bench instrumentation of one instance."""
    import time

    inner = getattr(obj, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        result = inner(*args, **kwargs)
        if keep(result):
            sink.append((time.perf_counter() - t0) * 1000)
        return result

    setattr(obj, name, wrapper)
