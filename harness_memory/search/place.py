"""The search index of one place: kept in step by the commit, loaded and cached by readers.

Write side (``after_commit``): ``PlaceTxn.commit`` calls it once, under the place lock, after the
manifest is committed. It starts from this pod's cached index when that matches the manifest the
transaction started from (else one GET), replaces the documents the commit wrote or removed,
fills in up to ``LAZY_FILL`` documents the index lacks (a place written before the index existed)
by reading those files, and PUTs the object. A failure is logged, never raised: the memory change
is committed and readers fall back (below). ``rebuild`` (from ``reindex``) writes it from scratch.

Read side (``load``): the index object for a manifest. The pod's cached copy answers when it holds
every entry of the manifest at its current version (no request); otherwise the object is read
(one GET) — at most once per manifest version, so a stale object is not fetched again and again.
Entries the index lacks or holds at an older version are searched by their manifest line only
(``view``), so the ranking is never wrong about what exists, only blunter for those memories.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import HarnessMemoryError, MemoryFormatError
from ..layout import SEARCH_INDEX_FILE
from .index import Doc, Part, SearchIndex, doc_from_entry, entry_tags, make_doc, stamp_of

if TYPE_CHECKING:
    from ..memdir import Manifest, MemoryDir
    from ..memdir.model import MemoryFile

log = logging.getLogger(__name__)

LAZY_FILL = 64  # missing documents read and indexed per commit (bounded: a commit stays quick)
CACHE_PLACES = 256
CONTENT_TYPE = "application/octet-stream"


@dataclass(slots=True)
class _Cached:
    index: SearchIndex
    checked_version: float  # the manifest updated_at last checked against the store


_cache: OrderedDict[tuple[int, str], _Cached] = OrderedDict()
_fallback: OrderedDict[tuple[object, ...], Doc] = OrderedDict()
_lock = threading.Lock()


def _key(memdir: MemoryDir) -> tuple[int, str]:
    return id(memdir.store), memdir.place.prefix


def _get_cached(memdir: MemoryDir) -> _Cached | None:
    with _lock:
        hit = _cache.get(_key(memdir))
        if hit is not None:
            _cache.move_to_end(_key(memdir))
        return hit


def _put_cached(memdir: MemoryDir, index: SearchIndex, version: float) -> None:
    with _lock:
        _cache[_key(memdir)] = _Cached(index, version)
        _cache.move_to_end(_key(memdir))
        while len(_cache) > CACHE_PLACES:
            _cache.popitem(last=False)


#: Per store object (weakly: a store that is gone takes its listener with it).
_listeners: weakref.WeakKeyDictionary[object, Callable[[MemoryDir], None]] = weakref.WeakKeyDictionary()


def on_commit(store: object, listener: Callable[[MemoryDir], None] | None) -> None:
    """Tell ``listener`` about every commit that changed memory files of a place in ``store``
    (the semantic tier embeds them in the background); None removes it."""
    with _lock:
        if listener is None:
            _listeners.pop(store, None)
        else:
            _listeners[store] = listener


def clear_cache() -> None:
    """Forget every cached index (benchmarks measure cold loads; tests start clean)."""
    with _lock:
        _cache.clear()
        _fallback.clear()
        _views.clear()


def index_key(memdir: MemoryDir) -> str:
    return memdir.place.reserved_key(SEARCH_INDEX_FILE)


def _read(memdir: MemoryDir) -> SearchIndex | None:
    obj = memdir.store.get_or_none(index_key(memdir))
    if obj is None:
        return None
    try:
        return SearchIndex.from_bytes(obj.data)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("search index of %s unreadable (%s); it is rebuilt as memories are written", memdir.place.label,
                    exc)
        return None


def covers(index: SearchIndex, manifest: Manifest, skip: Iterable[str] = ()) -> bool:
    """Every manifest entry (but ``skip``) is in ``index`` at its current version."""
    docs = index.docs
    skipped = set(skip)
    for file, entry in manifest.entries.items():
        if file in skipped:
            continue
        doc = docs.get(file)
        if doc is None or doc.stamp != (int(entry.size), float(entry.updated_at)):
            return False
    return True


def load(memdir: MemoryDir, manifest: Manifest) -> SearchIndex:
    """The place's index for ``manifest`` (cached per pod; at most one GET per manifest version)."""
    hit = _get_cached(memdir)
    if hit is not None and (hit.checked_version == manifest.updated_at or covers(hit.index, manifest)):
        return hit.index
    try:
        index = _read(memdir) or SearchIndex()
    except HarnessMemoryError as exc:  # the store failed: search the manifest lines, try again next time
        log.warning("search index of %s not readable now (%s); ranking by the index lines", memdir.place.label, exc)
        return hit.index if hit is not None else SearchIndex()
    _put_cached(memdir, index, manifest.updated_at)
    return index


def _fallback_doc(entry: object) -> Doc:
    from ..memdir import ManifestEntry

    assert isinstance(entry, ManifestEntry)
    key = (entry.file, entry.name, entry.description, entry.size, entry.updated_at, repr(entry_tags(entry)))
    with _lock:
        doc = _fallback.get(key)
    if doc is None:
        doc = doc_from_entry(entry)
        with _lock:
            _fallback[key] = doc
            while len(_fallback) > 50_000:
                _fallback.popitem(last=False)
    return doc


def parts(memdir: MemoryDir, manifest: Manifest, prefix: str = "", exclude: frozenset[str] = frozenset()
          ) -> list[Part]:
    """The search parts for one place: its index's current documents, plus its other entries
    searched by their manifest line. ``exclude`` (names with ``prefix``) are left out."""
    index = load(memdir, manifest)
    current, extra = _view(index, manifest)
    post = index.postings()
    out = [Part(post, current, prefix), *([Part(extra, np.ones(len(extra.files), dtype=bool), prefix)]
                                          if extra is not None else [])]
    if exclude:
        plen = len(prefix)
        names = [f[plen:] for f in exclude if f.startswith(prefix)]
        out = [Part(p.postings, _without(p.valid, p.postings.position, names), prefix) for p in out]
    return out


def _without(valid: np.ndarray, position: Mapping[str, int], names: list[str]) -> np.ndarray:
    hits = [position[n] for n in names if n in position]
    if not hits:
        return valid
    valid = valid.copy()
    valid[hits] = False
    return valid


_views: OrderedDict[tuple[int, float, int], tuple[SearchIndex, np.ndarray, object]] = OrderedDict()


def _view(index: SearchIndex, manifest: Manifest) -> tuple[np.ndarray, Any]:
    """Which of ``index``'s documents are current for ``manifest`` (a mask), and postings of the
    entries it lacks (their manifest lines) or None. Cached per (index, manifest version): the
    warm path of a query must not walk 1,000 entries."""
    key = (id(index), manifest.updated_at, len(manifest.entries))
    with _lock:
        hit = _views.get(key)
    if hit is not None and hit[0] is index:
        return hit[1], hit[2]
    post = index.postings()
    valid = np.zeros(len(post.files), dtype=bool)
    missing = []
    docs = index.docs
    for file, entry in manifest.entries.items():
        i = post.position.get(file)
        if i is not None and docs[file].stamp == (int(entry.size), float(entry.updated_at)):
            valid[i] = True
        else:
            missing.append(entry)
    extra = SearchIndex({d.file: d for d in map(_fallback_doc, missing)}).postings() if missing else None
    with _lock:
        _views[key] = (index, valid, extra)
        while len(_views) > CACHE_PLACES:
            _views.popitem(last=False)
    return valid, extra


def snippets(memdir: MemoryDir, manifest: Manifest) -> dict[str, str]:
    """file → first words of its body, for the entries the index holds at their version."""
    index = load(memdir, manifest)
    return {f: d.snippet for f, d in index.docs.items()
            if f in manifest.entries and d.stamp == stamp_of(manifest.entries[f]) and d.snippet}


# -- write side -------------------------------------------------------------------------------
def _memory_doc(file: str, stamp: tuple[int, float], memory: MemoryFile) -> Doc:
    extra = memory.extra if isinstance(memory.extra, dict) else {}
    tags = extra.get("tags")
    tag_list = [str(t) for t in tags] if isinstance(tags, list) else ([tags] if isinstance(tags, str) else [])
    return make_doc(file, stamp, memory.name, memory.description, memory.body, tag_list)


def _lazy_fill(memdir: MemoryDir, index: SearchIndex, manifest: Manifest, skip: set[str]) -> list[Doc]:
    """Read (concurrently) and index up to ``LAZY_FILL`` entries the index lacks."""
    from ..memdir.model import parse_memory

    todo = [e for f, e in manifest.entries.items() if f not in skip and not index.current(f, stamp_of(e))]
    todo = todo[:LAZY_FILL]
    if not todo:
        return []

    def one(entry: object) -> Doc | None:
        from ..memdir import ManifestEntry

        assert isinstance(entry, ManifestEntry)
        obj = memdir.store.get_or_none(memdir.place.key(entry.file))
        if obj is None:
            return None
        try:
            return _memory_doc(entry.file, stamp_of(entry), parse_memory(obj.data.decode("utf-8", "replace")))
        except MemoryFormatError:
            return doc_from_entry(entry)

    pool = memdir.executor
    found = list(pool.map(one, todo)) if pool is not None and len(todo) > 1 else [one(e) for e in todo]
    return [d for d in found if d is not None]


def _write(memdir: MemoryDir, index: SearchIndex, manifest: Manifest) -> None:
    memdir.store.put(index_key(memdir), index.to_bytes(), content_type=CONTENT_TYPE)
    _put_cached(memdir, index, manifest.updated_at)


def after_commit(memdir: MemoryDir, manifest: Manifest, written: Mapping[str, MemoryFile],
                 removed: Iterable[str], cleared: bool) -> None:
    """Bring the place's index in step with a commit (called by ``PlaceTxn.commit``; never raises).

    ``manifest`` is the one the commit wrote, ``written`` the memory files it wrote, ``removed``
    the files it deleted, ``cleared`` whether it started from an empty entry list. A commit that
    changed no file leaves the index alone. The pod's cached index is the base when it holds
    every other entry at its version (no GET), else the stored object is.
    """
    if not written and not removed and not cleared:
        return
    try:
        hit = _get_cached(memdir)
        fresh = hit is not None and covers(hit.index, manifest, written)
        base = hit.index if hit is not None and fresh else (_read(memdir) or SearchIndex())
        added = [_memory_doc(f, stamp_of(manifest.entries[f]), m) for f, m in written.items()
                 if f in manifest.entries]
        index = base.updated(remove=list(removed), add=added, clear=cleared)
        gone = [f for f in index.docs if f not in manifest.entries]
        fill = _lazy_fill(memdir, index, manifest, set(written))
        if gone or fill:
            index = index.updated(remove=gone, add=fill)
        _write(memdir, index, manifest)
    except Exception as exc:  # the memory change is committed: an index failure must not undo or fail it
        log.warning("search index of %s not updated (%s: %s); recall searches the changed memories by their "
                    "index line until the next write or reindex", memdir.place.label, type(exc).__name__, exc)
    with _lock:
        listener = _listeners.get(memdir.store)
    if listener is not None:
        try:
            listener(memdir)  # schedules work in the background; never waits for it
        except Exception as exc:
            log.warning("after-commit listener failed for %s (%s)", memdir.place.label, exc)


def rebuild(memdir: MemoryDir, manifest: Manifest, memories: Mapping[str, MemoryFile]) -> SearchIndex:
    """Write the index from scratch (``reindex``; the caller holds the place lock and has read
    every file). Raises on a store failure."""
    index = SearchIndex({d.file: d for d in (_memory_doc(f, stamp_of(manifest.entries[f]), m)
                                             for f, m in memories.items() if f in manifest.entries)})
    _write(memdir, index, manifest)
    return index


__all__ = [
    "LAZY_FILL",
    "after_commit",
    "clear_cache",
    "covers",
    "index_key",
    "load",
    "on_commit",
    "parts",
    "rebuild",
    "snippets",
]
