"""A pod's cached view of shared places: the manifest and the capped MEMORY.md, for ``ttl`` s.

Why: every agent build (prompt) and every recall reads the shared agent memory, which changes
rarely; one cached read serves both and saves a request per build. A store failure answers with
the last known view (or an empty one) and a warning. A build drops a view whose version Redis
announces otherwise (``check``; ``versions.py``). Owned by the composition root (one per
``MemoryServices``), so the cache lives and dies with it.
"""

from __future__ import annotations

import logging
import threading
import time

from .directory import MemoryDir
from .index import CappedText, Manifest
from .versions import ABSENT, Versions

log = logging.getLogger(__name__)

SHARED_VIEW_TTL = 30.0
#: Shared places remembered at most (there is one per agent type; bounded all the same).
MAX_PLACES = 1024


class SharedViews:
    """Per place prefix: (expiry, manifest, capped index)."""

    def __init__(self, ttl: float = SHARED_VIEW_TTL) -> None:
        self.ttl = ttl
        self._lock = threading.Lock()
        self._views: dict[str, tuple[float, Manifest, CappedText]] = {}

    def get(self, shared: MemoryDir) -> tuple[Manifest, CappedText]:
        """The place's manifest and capped index, read at most once per ``ttl`` s."""
        now = time.monotonic()
        with self._lock:
            hit = self._views.get(shared.place.prefix)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2]
        try:
            manifest = shared.manifest()
            index = shared.index_text(manifest)
        except Exception as exc:  # a dead store must not stop the build
            log.warning("shared memory %s unavailable (%s)", shared.place.label, exc)
            return (hit[1], hit[2]) if hit else (Manifest(), CappedText("", False, 0))
        with self._lock:
            if len(self._views) >= MAX_PLACES and shared.place.prefix not in self._views:
                self._views.clear()
            self._views[shared.place.prefix] = (now + self.ttl, manifest, index)
        return manifest, index

    def check(self, shared: MemoryDir, versions: Versions) -> None:
        """Drop the cached view when Redis announces another version of the place than the one it
        holds (``versions.py``): a build never serves a shared view older than the announced one.
        No answer or no key: the ``ttl`` bounds the view's age as before."""
        answered, announced = versions.of(shared.place.prefix)
        if not answered or announced is None:
            return
        with self._lock:
            hit = self._views.get(shared.place.prefix)
            if hit is not None and (hit[1].head_etag or ABSENT) != announced:
                del self._views[shared.place.prefix]

    def forget(self, shared: MemoryDir) -> None:
        """Drop the cached view after this pod changed the shared place."""
        with self._lock:
            self._views.pop(shared.place.prefix, None)


__all__ = ["SHARED_VIEW_TTL", "SharedViews"]
