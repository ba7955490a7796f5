"""Caches that belong to one store object (memdir's heads, bases and done markers, the search
indexes): held under the store itself as a weak key, so they die with the store and a new store
never meets an old one's entries. Never keyed by ``id(store)``: CPython reuses an id once its
object is collected, and a new store could then read an old store's cached head.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

V = TypeVar("V")


class PerStore(Generic[V]):
    """One ``V`` (made by ``make``) per live store; each owner bounds its own ``V``."""

    def __init__(self, make: Callable[[], V]) -> None:
        self._make = make
        self._by: weakref.WeakKeyDictionary[object, V] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def of(self, store: object) -> V:
        with self._lock:
            held = self._by.get(store)
            if held is None:
                held = self._by[store] = self._make()
            return held

    def clear(self) -> None:
        """Forget every store's entries (benchmarks measure cold paths; tests start clean)."""
        with self._lock:
            self._by.clear()


__all__ = ["PerStore"]
