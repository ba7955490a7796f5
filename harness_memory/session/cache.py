"""This pod's LRU of session summaries (hits make ``get_summary`` free of store requests).

Why versions: pod A may rewrite a summary that pod B has cached. Every stored summary carries
a version, and the Redis state hash of the session carries the latest version (written by the
extraction commit). ``get_summary`` compares the two (one HGET) and reloads only when the cache
is behind. When the version is unknown (no Redis, Redis down, or the session's Redis state
expired), a cached entry is trusted for ``session.ttl_seconds`` after it was loaded.

"No summary" is cached too (version 0), so short sessions do not cost a store GET per request.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CachedSummary:
    text: str | None
    version: int
    loaded_at: float  # wall clock when the store read STARTED (or of our own write)

    def fresh(self, known_version: int | None, now: float, ttl: float) -> bool:
        if known_version is None:
            return now - self.loaded_at < ttl
        return self.version >= known_version


class SummaryCache:
    """A thread-safe LRU of ``CachedSummary`` by session id."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._data: OrderedDict[str, CachedSummary] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, session_id: str) -> CachedSummary | None:
        with self._lock:
            entry = self._data.get(session_id)
            if entry is not None:
                self._data.move_to_end(session_id)
            return entry

    def put(self, session_id: str, entry: CachedSummary) -> None:
        with self._lock:
            old = self._data.get(session_id)
            if old is not None and old.version > entry.version and old.loaded_at > entry.loaded_at:
                return  # a read that started before our own write must not undo it
            self._data[session_id] = entry
            self._data.move_to_end(session_id)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def drop(self, session_id: str) -> None:
        with self._lock:
            self._data.pop(session_id, None)

    def __len__(self) -> int:
        with self._lock:
            return len(self._data)
