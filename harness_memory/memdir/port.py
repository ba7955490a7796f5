"""What the parts of a place's directory see of it, and who hears about its commits.

``PlaceDir`` is the face of ``MemoryDir`` that a transaction (``txn.py``), the intent record
(``intent.py``) and commit listeners use; it is a Protocol so that those modules need not import
``directory.py``, which imports them (counting type-only imports, the package has no cycle).

``CommitListener``: a ``MemoryDir`` announces each commit that changed memory files to the
listeners it was given at construction (the search index, the semantic tier's embeddings), in
order, after the manifest is committed and under the place lock. memdir imports nothing above it:
the composition root (``services.py``) decides who listens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import Protocol

from ..config import LimitsConfig
from ..layout import Place
from ..locks import LOCAL_LEASE, Lease
from ..storage.base import ObjectStore
from .index import Manifest
from .model import MemoryFile

log = logging.getLogger(__name__)


class PlaceDir(Protocol):
    """One place's memory files bound to a store (``MemoryDir`` is the one implementation)."""

    store: ObjectStore
    place: Place
    limits: LimitsConfig
    executor: Executor | None
    listeners: tuple[CommitListener, ...]

    @property
    def index_key(self) -> str: ...

    @property
    def intent_key(self) -> str: ...

    def load_manifest(self) -> tuple[Manifest, str | None]: ...

    def check_content(self, content: str) -> MemoryFile: ...

    def complete_pending(self, manifest: Manifest, lease: Lease, *, done: str | None = None) -> object: ...

    def commit_manifest(self, mutate: Callable[[Manifest], object],
                        start: tuple[Manifest, str | None] | None = None, lease: Lease = LOCAL_LEASE, *,
                        compact: bool = False, changes: tuple[list[str], list[str]] | None = None,
                        refresh: Callable[[Manifest], None] | None = None) -> Manifest: ...

    def put_index(self, manifest: Manifest) -> None: ...

    def announce(self, manifest: Manifest, written: Mapping[str, MemoryFile], removed: Sequence[str],
                 cleared: bool, since: float | None) -> None: ...


class CommitListener(Protocol):
    """Hears about the commits of every place of the ``MemoryDir`` it was given to."""

    def committed(self, memdir: PlaceDir, manifest: Manifest, written: Mapping[str, MemoryFile],
                  removed: Sequence[str], cleared: bool, since: float | None) -> None:
        """After a commit that wrote ``written``, removed ``removed`` or ``cleared`` the entries;
        ``manifest`` is the one committed, ``since`` the version the transaction started from
        (None when it re-read the manifest). Must not raise (it is logged if it does); slow work
        goes to the background."""

    def rebuilt(self, memdir: PlaceDir, manifest: Manifest, memories: Mapping[str, MemoryFile]) -> None:
        """After ``reindex`` read every file (place lock held). May raise: reindex fails with it."""


def announce(memdir: PlaceDir, manifest: Manifest, written: Mapping[str, MemoryFile], removed: Sequence[str],
             cleared: bool, since: float | None) -> None:
    """Tell every listener of ``memdir`` about a commit; one failing does not stop the others."""
    for listener in memdir.listeners:
        try:
            listener.committed(memdir, manifest, written, removed, cleared, since)
        except Exception as exc:  # the memory change is committed: a listener must not fail it
            log.warning("commit listener %s failed for %s (%s: %s)",
                  type(listener).__name__, memdir.place.label,
                  type(exc).__name__, exc)


def announce_state(memdir: PlaceDir, manifest: Manifest, name: str, data: bytes) -> None:
    """Tell the listeners that have a ``state_written(memdir, manifest, name, data)`` method that
    the commit of ``manifest`` (its ``head_etag``) wrote state file ``name`` (the warm views keep
    it and announce that head, which a commit of state files alone announces nowhere else:
    ``versions.py``). Never raises."""
    for listener in memdir.listeners:
        hear = getattr(listener, "state_written", None)
        if hear is None:
            continue
        try:
            hear(memdir, manifest, name, data)
        except Exception as exc:
            log.warning("commit listener %s failed for %s (%s: %s)", type(listener).__name__,
                        memdir.place.label, type(exc).__name__, exc)


__all__ = ["CommitListener", "PlaceDir", "announce", "announce_state"]
