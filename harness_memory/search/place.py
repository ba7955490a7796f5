"""The search index of one place: kept in step by the commit, loaded and cached by readers.

Stored like the manifest (``memdir/stored.py``), so a save writes O(changed) bytes: the whole
index (``.search-index.bin``, generation ``gen``) is written now and then, and a **delta**
(``.search-delta.bin``: the documents written since, naming the generation it stands on) by
every commit. Past ``DELTA_MAX_DOCS`` documents or ``DELTA_MAX_BYTES`` the commit writes the whole
index under a new generation and an empty delta (compaction).

Write side (``after_commit``): ``PlaceTxn.commit`` calls it once (through ``SearchListener``,
the commit listener the composition root gives every ``MemoryDir``), under the place lock, after the
manifest is committed. It starts from this pod's cached index when that matches the manifest the
transaction started from (else the delta and the whole index are read), replaces the documents
the commit wrote or removed, fills in up to ``LAZY_FILL`` documents the index lacks (a place
written before the index existed) by reading those files, and PUTs the delta (or compacts). A
failure is logged, never raised: the memory change is committed and readers fall back (below).
``rebuild`` (from ``reindex``) writes it from scratch.

Read side (``load``): the index for a manifest. The pod's cached copy answers when it holds every
entry of the manifest at its current version (no request); otherwise the delta is read (one GET;
the whole index too when its generation is not the cached one) — at most once per manifest
version, so a stale object is not fetched again and again. Where a delta and a whole index both
hold a document, the one stamped with the later ``updated_at`` wins.
Entries the index lacks or holds at an older version are searched by their manifest line only
(``view``), so the ranking is never wrong about what exists, only blunter for those memories.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import HarnessMemoryError, MemoryFormatError
from ..layout import SEARCH_DELTA_FILE, SEARCH_INDEX_FILE
from ..observe import wrap_context
from ..storage.caches import PerStore
from .index import Doc, Part, SearchIndex, doc_from_entry, entry_tags, make_doc, stamp_of

if TYPE_CHECKING:
    from ..memdir import Manifest, MemoryDir
    from ..memdir.model import MemoryFile
    from ..memdir.port import PlaceDir

log = logging.getLogger(__name__)

LAZY_FILL = 64  # missing documents read and indexed per commit (bounded: a commit stays quick)
#: A delta holding more documents (or bytes) than this is folded into a new whole index.
DELTA_MAX_DOCS = 128
DELTA_MAX_BYTES = 256 * 1024
CACHE_PLACES = 256
CONTENT_TYPE = "application/octet-stream"


@dataclass(slots=True)
class _Cached:
    index: SearchIndex  # the whole index with the delta applied: what is searched
    checked_version: float  # the manifest updated_at last checked against the store
    base: SearchIndex | None = None  # the stored whole index (its ``gen``)
    delta: dict[str, Doc | None] | None = None  # the stored delta's documents (None: removed)


#: Per store (dies with it): place prefix -> the pod's copy of the place's index.
_cache: PerStore[OrderedDict[str, _Cached]] = PerStore(OrderedDict)
_fallback: OrderedDict[tuple[object, ...], Doc] = OrderedDict()
_lock = threading.Lock()


def _get_cached(memdir: MemoryDir) -> _Cached | None:
    cache, key = _cache.of(memdir.store), memdir.place.prefix
    with _lock:
        hit = cache.get(key)
        if hit is not None:
            cache.move_to_end(key)
        return hit


def _put_cached(memdir: MemoryDir, index: SearchIndex, version: float, base: SearchIndex | None = None,
                delta: dict[str, Doc | None] | None = None) -> None:
    cache, key = _cache.of(memdir.store), memdir.place.prefix
    with _lock:
        cache[key] = _Cached(index, version, base, delta)
        cache.move_to_end(key)
        while len(cache) > CACHE_PLACES:
            cache.popitem(last=False)


def clear_cache() -> None:
    """Forget every cached index (benchmarks measure cold loads; tests start clean)."""
    _cache.clear()
    with _lock:
        _fallback.clear()


def index_key(memdir: MemoryDir) -> str:
    return memdir.place.reserved_key(SEARCH_INDEX_FILE)


def delta_key(memdir: MemoryDir) -> str:
    return memdir.place.reserved_key(SEARCH_DELTA_FILE)


def _read_object(memdir: MemoryDir, key: str) -> SearchIndex | None:
    obj = memdir.store.get_or_none(key)
    if obj is None:
        return None
    try:
        return SearchIndex.from_bytes(obj.data)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("search index of %s unreadable (%s); it is rebuilt as memories are written", memdir.place.label,
                    exc)
        return None


def _newer(base: Mapping[str, Doc], delta: Mapping[str, Doc | None]) -> list[Doc]:
    """The delta's documents that are not older than the whole index's copy."""
    out = []
    for file, doc in delta.items():
        held = base.get(file)
        if doc is not None and (held is None or doc.stamp[1] >= held.stamp[1]):
            out.append(doc)
    return out


def _read_stored(memdir: MemoryDir, hit: _Cached | None
                 ) -> tuple[SearchIndex, SearchIndex, dict[str, Doc | None]]:
    """(searchable index, whole index, delta documents) as stored; the whole index is reused
    from ``hit`` when the delta stands on the generation the pod holds."""
    held = hit.base if hit is not None and hit.base is not None and hit.base.gen else None
    pool = memdir.executor
    whole_future = None
    if held is None and pool is not None:  # cold: both objects are needed, read them together
        whole_future = pool.submit(wrap_context(_read_object), memdir, index_key(memdir))
    stored = _read_object(memdir, delta_key(memdir))
    base = held if held is not None and stored is not None and stored.base == held.gen else None
    if whole_future is not None:
        base = whole_future.result() or SearchIndex()
    elif base is None:
        base = _read_object(memdir, index_key(memdir)) or SearchIndex()
    if stored is None or stored.base != base.gen:
        # no delta, or one standing on another whole index: still use its later documents
        delta: dict[str, Doc | None] = {}
        extra = _newer(base.docs, stored.docs) if stored is not None else []
        return (base.updated(add=extra) if extra else base), base, delta
    delta = {**stored.docs, **{f: None for f in stored.removed}}
    merged = base.updated(remove=stored.removed, add=_newer(base.docs, stored.docs)) if delta else base
    return merged, base, delta


def stored_index(memdir: MemoryDir) -> SearchIndex:
    """The index as stored (whole index + delta, read now; no cache): tools and tests."""
    return _read_stored(memdir, None)[0]


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
        index, base, delta = _read_stored(memdir, hit)
    except HarnessMemoryError as exc:  # the store failed: search the manifest lines, try again next time
        log.warning("search index of %s not readable now (%s); ranking by the index lines", memdir.place.label, exc)
        return hit.index if hit is not None else SearchIndex()
    _put_cached(memdir, index, manifest.updated_at, base, delta)
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


VIEWS_PER_INDEX = 4


def _view(index: SearchIndex, manifest: Manifest) -> tuple[np.ndarray, Any]:
    """Which of ``index``'s documents are current for ``manifest`` (a mask), and postings of the
    entries it lacks (their manifest lines) or None. Cached per (index, manifest version): the
    warm path of a query must not walk 1,000 entries."""
    key = (manifest.updated_at, len(manifest.entries))
    views = index.views  # owned by the index: gone with it
    with _lock:
        hit = views.get(key)
    if hit is not None:
        return hit[0], hit[1]
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
        views[key] = (valid, extra)
        while len(views) > VIEWS_PER_INDEX:
            views.popitem(last=False)
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


def _write(memdir: MemoryDir, index: SearchIndex, manifest: Manifest, base: SearchIndex | None = None,
           delta: dict[str, Doc | None] | None = None) -> None:
    """Store ``index`` (the searchable whole): as a delta over ``base`` while ``delta`` stays
    small, else as a new whole index and an empty delta (whole index first: a reader that sees
    the old delta with the new index still prefers the later stamps)."""
    store = memdir.store
    if base is not None and delta is not None and base.gen and len(delta) <= DELTA_MAX_DOCS:
        data = SearchIndex({f: d for f, d in delta.items() if d is not None}, base=base.gen,
                           removed=[f for f, d in delta.items() if d is None]).to_bytes()
        if len(data) <= DELTA_MAX_BYTES:
            store.put(delta_key(memdir), data, content_type=CONTENT_TYPE)
            _put_cached(memdir, index, manifest.updated_at, base, delta)
            return
    whole = SearchIndex(index.docs, gen=secrets.token_hex(8))
    store.put(index_key(memdir), whole.to_bytes(), content_type=CONTENT_TYPE)
    store.put(delta_key(memdir), SearchIndex(base=whole.gen).to_bytes(), content_type=CONTENT_TYPE)
    _put_cached(memdir, whole, manifest.updated_at, whole, {})


def after_commit(memdir: MemoryDir, manifest: Manifest, written: Mapping[str, MemoryFile],
                 removed: Iterable[str], cleared: bool, since: float | None = None) -> None:
    """Bring the place's index in step with a commit (called by ``PlaceTxn.commit``; never raises).

    ``manifest`` is the one the commit wrote, ``written`` the memory files it wrote, ``removed``
    the files it deleted, ``cleared`` whether it started from an empty entry list, ``since`` the
    version (``updated_at``) of the manifest the transaction started from. A commit that changed
    no file leaves the index alone. The pod's cached index is the start when it was current for
    ``since`` (no request, no walk over the entries: a save stays O(changed)) or holds every other
    entry at its version, else the stored objects are.
    """
    if not written and not removed and not cleared:
        return
    try:
        hit = _get_cached(memdir)
        if hit is not None and hit.base is not None and hit.delta is not None \
                and ((since is not None and hit.checked_version == since) or covers(hit.index, manifest, written)):
            start, base, delta = hit.index, hit.base, hit.delta
        elif written and all(f in written for f in manifest.entries):
            # the commit wrote every memory the place has (its first): nothing stored is worth a read
            start, base, delta = SearchIndex(), SearchIndex(), {}
        else:
            start, base, delta = _read_stored(memdir, hit)
        added = [_memory_doc(f, stamp_of(manifest.entries[f]), m) for f, m in written.items()
                 if f in manifest.entries]
        index = start.updated(remove=list(removed), add=added, clear=cleared)
        compacting = cleared or len(delta) + len(added) > DELTA_MAX_DOCS or not base.gen
        fill = []
        if compacting or len(index.docs) < len(manifest.entries):  # some entry may lack its document
            fill = _lazy_fill(memdir, index, manifest, set(written))
            if fill:
                index = index.updated(add=fill)
        if compacting or len(index.docs) > len(manifest.entries) + DELTA_MAX_DOCS:
            # documents of memories removed elsewhere pile up in the whole index: fold them away now
            index = index.updated(remove=[f for f in index.docs if f not in manifest.entries])
            _write(memdir, index, manifest)
        else:
            _write(memdir, index, manifest, base,
                   {**delta, **dict.fromkeys(removed), **{d.file: d for d in (*added, *fill)}})
    except Exception as exc:  # the memory change is committed: an index failure must not undo or fail it
        log.warning("search index of %s not updated (%s: %s); recall searches the changed memories by their "
                    "index line until the next write or reindex", memdir.place.label, type(exc).__name__, exc)


class SearchListener:
    """The search index as a commit listener of ``memdir`` (``memdir/port.py``): the composition
    root gives it to every ``MemoryDir`` it builds, so memdir never imports this package.
    Stateless (the caches live per store): one serves every place."""

    def committed(self, memdir: PlaceDir, manifest: Manifest, written: Mapping[str, MemoryFile],
                  removed: Sequence[str], cleared: bool, since: float | None) -> None:
        after_commit(memdir, manifest, written, removed, cleared, since)

    def rebuilt(self, memdir: PlaceDir, manifest: Manifest, memories: Mapping[str, MemoryFile]) -> None:
        rebuild(memdir, manifest, memories)


def rebuild(memdir: MemoryDir, manifest: Manifest, memories: Mapping[str, MemoryFile]) -> SearchIndex:
    """Write the index from scratch (``reindex``; the caller holds the place lock and has read
    every file). Raises on a store failure."""
    index = SearchIndex({d.file: d for d in (_memory_doc(f, stamp_of(manifest.entries[f]), m)
                                             for f, m in memories.items() if f in manifest.entries)})
    _write(memdir, index, manifest)
    return index


__all__ = [
    "LAZY_FILL",
    "SearchListener",
    "after_commit",
    "clear_cache",
    "covers",
    "delta_key",
    "index_key",
    "load",
    "parts",
    "rebuild",
    "snippets",
    "stored_index",
]
