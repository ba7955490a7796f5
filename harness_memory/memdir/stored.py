"""How a place's manifest is stored: a small head that is the commit point, and for large places an
immutable base, so a save costs O(changed entries) instead of O(memories).

Why: a manifest rewritten whole on every save made each save of a 1,000-memory place PUT ~0.3 MB
(1.7 MB at 10,000) and every build parse all of it. Now:

* ``.manifest.json`` — the **head**, written (conditionally) by every commit: meta, the commit's
  transaction id, and either every entry (**inline**, while they fit in ``INLINE_MAX_BYTES``;
  exactly the version-1 shape, so a place written by an earlier release is simply an inline head)
  or a reference to a base plus the entries changed and removed since it (**based**).
* ``.manifest.<gen>.json`` — a **base**: every entry at one moment, as compact rows in file-name
  order, written once under a new random generation name and never changed. A pod parses a base
  once and keeps it (``_bases``), so a warm load is one GET of the head plus a shallow dict copy.

A commit whose head would carry more than ``DELTA_MAX_ENTRIES`` changes or ``DELTA_MAX_BYTES``
**compacts**: it PUTs a new base (a new key: nothing reads it until the head points at it), then
the head with no changes (the commit point), then deletes the base from two generations back (the
previous one stays for readers that read the old head a moment ago). A reader that finds its
base gone reads the head again.

An earlier release reading a based head fails loudly ("manifest is damaged") instead of seeing only
the changed entries: the based head's ``entries`` is an object, not a list.
"""

from __future__ import annotations

import itertools
import json
import logging
import secrets
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import MemoryFormatError, ObjectNotFound
from .index import MANIFEST_VERSION, RECENT_TXIDS, Manifest, ManifestEntry, entry_from_dict
from .redo import Redo

if TYPE_CHECKING:
    from ..storage.base import ObjectStore

log = logging.getLogger(__name__)

#: A manifest stays inline in its head while that is at most this big (≈ 100 memories).
INLINE_MAX_BYTES = 32 * 1024
#: A based head carrying more changes than this compacts into a new base.
DELTA_MAX_ENTRIES = 128
DELTA_MAX_BYTES = 64 * 1024
#: Bases kept parsed per pod (places), and the entries they may hold together.
CACHE_BASES = 64
CACHE_ENTRIES = 200_000
JSON = "application/json"


def base_name(gen: str) -> str:
    """The object name (inside the place) of base ``gen``."""
    return f".manifest.{gen}.json"


def is_base_name(name: str) -> bool:
    return name.startswith(".manifest.") and name.endswith(".json") and name != ".manifest.json" \
        and "/" not in name


@dataclass(slots=True)
class Head:
    """A parsed head: the manifest with its inline entries (all of them, or the changes)."""

    manifest: Manifest
    base: str | None = None
    removed: list[str] = field(default_factory=list)


def _row(e: ManifestEntry) -> list[Any]:
    return [e.file, e.name, e.description, e.type, e.size, e.created_at, e.updated_at, e.extra]


def _from_row(r: list[Any]) -> ManifestEntry:
    return ManifestEntry(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7])


def _damaged(exc: Exception) -> MemoryFormatError:
    return MemoryFormatError(f"the memory manifest is damaged ({exc}); run `harness-memory reindex`")


def parse_head(data: bytes) -> Head:
    """A head of any version (1: inline dict entries; 2: inline, or a base + changes)."""
    try:
        payload = json.loads(data.decode("utf-8"))
        meta = payload.get("meta") or {}
        manifest = Manifest(updated_at=float(payload.get("updated_at", 0.0)),
                            meta=meta if isinstance(meta, dict) else {}, txn=str(payload.get("txn") or ""),
                            version=int(payload.get("version", 1)))
        recent = payload.get("recent")
        if isinstance(recent, list):
            manifest.recent = [str(t) for t in recent[:RECENT_TXIDS]]
        redo = payload.get("redo")
        if redo is not None:
            manifest.redo = Redo.from_json(redo)
        raw = payload.get("entries", [])
        if isinstance(raw, list):
            manifest.entries = {e.file: e for e in map(entry_from_dict, raw)}
            return Head(manifest)
        base = payload["base"]
        manifest.base, manifest.prev_base = str(base["gen"]), (str(base["prev"]) if base.get("prev") else None)
        manifest.entries = {e.file: e for e in map(_from_row, raw["changed"])}
        removed = [str(f) for f in raw["removed"]]
        return Head(manifest, manifest.base, removed)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise _damaged(exc) from None


@dataclass(frozen=True, slots=True)
class Base:
    gen: str
    entries: dict[str, ManifestEntry]
    files: list[str]  # in order
    names: frozenset[str]


def parse_base(data: bytes, gen: str) -> Base:
    try:
        payload = json.loads(data.decode("utf-8"))
        if str(payload.get("gen")) != gen:
            raise ValueError(f"base {gen} holds generation {payload.get('gen')}")
        entries = {e.file: e for e in map(_from_row, payload["rows"])}
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        raise _damaged(exc) from None
    files = list(entries)
    if any(a >= b for a, b in itertools.pairwise(files)):
        files.sort()  # written in order; a hand-edited one still renders in order
    return Base(gen, entries, files, frozenset(files))


def base_bytes(manifest: Manifest, gen: str, files: list[str]) -> bytes:
    """Base ``gen``: the entries of ``files`` (in that order) as compact rows."""
    entries = manifest.entries
    rows = [_row(entries[f]) for f in files]
    return json.dumps({"version": MANIFEST_VERSION, "gen": gen, "rows": rows}, ensure_ascii=False,
                      separators=(",", ":")).encode("utf-8")


def head_bytes(manifest: Manifest) -> bytes:
    """The based head of ``manifest`` (its ``base`` and ``delta``)."""
    changed = [_row(e) for f, e in sorted(manifest.delta.items()) if e is not None]
    removed = sorted(f for f, e in manifest.delta.items() if e is None)
    payload: dict[str, Any] = {"version": MANIFEST_VERSION, "updated_at": manifest.updated_at, "meta": manifest.meta,
               "txn": manifest.txn, "recent": manifest.recent, "count": len(manifest.entries),
               "base": {"gen": manifest.base, "prev": manifest.prev_base},
               "entries": {"changed": changed, "removed": removed}}
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


# -- the pod's parsed bases ---------------------------------------------------------------------
class _Bases:
    """One store's parsed bases, (place prefix, generation) -> base, bounded in bases and entries."""

    def __init__(self) -> None:
        self.held: OrderedDict[tuple[str, str], Base] = OrderedDict()
        self.entries = 0


#: Per store object, weakly (dies with the store; never keyed by ``id(store)``, which is reused).
_bases: weakref.WeakKeyDictionary[ObjectStore, _Bases] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _bases_of(store: ObjectStore) -> _Bases:
    with _lock:
        bases = _bases.get(store)
        if bases is None:
            bases = _bases[store] = _Bases()
        return bases


def _cached(store: ObjectStore, prefix: str, gen: str) -> Base | None:
    key = (prefix, gen)
    bases = _bases_of(store)
    with _lock:
        hit = bases.held.get(key)
        if hit is not None:
            bases.held.move_to_end(key)
        return hit


def remember(store: ObjectStore, prefix: str, base: Base) -> None:
    key = (prefix, base.gen)
    bases = _bases_of(store)
    with _lock:
        held = bases.held
        if key in held:
            return
        held[key] = base
        bases.entries += len(base.files)
        while held and (len(held) > CACHE_BASES or bases.entries > CACHE_ENTRIES) and len(held) > 1:
            _, old = held.popitem(last=False)
            bases.entries -= len(old.files)


def clear_cache() -> None:
    """Forget every parsed base (benchmarks measure cold loads)."""
    with _lock:
        _bases.clear()


def fetch_base(store: ObjectStore, prefix: str, gen: str) -> Base | None:
    """Base ``gen`` of the place at ``prefix`` (cached; None when it is gone)."""
    hit = _cached(store, prefix, gen)
    if hit is not None:
        return hit
    obj = store.get_or_none(prefix + base_name(gen))
    if obj is None:
        return None
    base = parse_base(obj.data, gen)
    remember(store, prefix, base)
    return base


def on_base(head: Head, base: Base) -> Manifest:
    """The full manifest: ``base``'s entries (a shallow copy) with the head's changes applied."""
    m = head.manifest
    changed = m.entries
    entries = dict(base.entries)
    for file in head.removed:
        entries.pop(file, None)
    entries.update(changed)
    m.entries = entries
    m.base_files, m.base_set = base.files, base.names
    m.delta = {**changed, **{f: None for f in head.removed}}
    return m


def load(store: ObjectStore, prefix: str, head_key: str) -> tuple[Manifest, str | None]:
    """The place's manifest and its head's etag (None when there is none). One GET when warm."""
    for _ in range(4):
        obj = store.get_or_none(head_key)
        if obj is None:
            return Manifest(), None
        head = parse_head(obj.data)
        head.manifest.head_etag = obj.etag
        if head.base is None:
            return head.manifest, obj.etag
        base = fetch_base(store, prefix, head.base)
        if base is not None:
            return on_base(head, base), obj.etag
        log.info("base %s of %s was replaced while being read; reading the head again", head.base, prefix)
    raise MemoryFormatError(f"the memory manifest of {prefix} names a base that is missing; "
                            "run `harness-memory reindex`")


def manifest_from_bytes(data: bytes) -> Manifest:
    """A manifest whose entries are all in ``data`` (version 1, or an inline version-2 head).
    A head that stands on a base is read with ``load``; here it is refused."""
    head = parse_head(data)
    if head.base is not None:
        raise MemoryFormatError("this manifest keeps its entries in a base object; load it with its place")
    return head.manifest


# -- the write side -----------------------------------------------------------------------------
@dataclass(slots=True)
class Plan:
    """What one commit PUTs: the head, and first a new base when it compacts and the redo
    record's texts when they are too big for the head (``redo.py``)."""

    head: bytes
    base: tuple[str, bytes] | None = None  # (gen, bytes)
    #: A base no head refers to any more, removed after the commit.
    retired: str | None = None
    #: (object name, bytes) of the redo texts kept out of the head.
    redo_object: tuple[str, bytes] | None = None


def with_redo(head: bytes, manifest: Manifest) -> bytes:
    """``head`` (a JSON object without a redo member) with ``manifest.redo`` spliced in."""
    redo = manifest.redo
    if redo is None:
        return head
    part = json.dumps(redo.to_json(inline=redo.object is None), ensure_ascii=False, separators=(",", ":"))
    return head[:-1] + b',"redo":' + part.encode("utf-8") + b"}"


def plan(manifest: Manifest, *, compact: bool = False) -> Plan:
    """Choose the stored form for ``manifest`` (its ``delta`` already noted) and make the bytes.
    ``manifest``'s stored-form fields are updated to what the commit will leave. ``compact``: a
    based manifest gets a new base now (``reindex``); an inline one stays inline if it fits.
    The form is chosen on the entries alone: the redo record rides along either way (its texts in
    the head while they are small, else in an object of their own)."""
    from . import redo as redos

    redo, redo_object = manifest.redo, None
    if redo is not None:
        if redo.big:
            redo.object = redos.object_name(redo.txid)
            redo_object = (redo.object, redo.object_bytes())
        else:
            redo.object = None
    manifest.redo = None  # measured and written without it, spliced in below
    try:
        if manifest.base is None:
            data = manifest.to_bytes()
            if len(data) <= INLINE_MAX_BYTES:
                manifest.delta = {}
                manifest.redo = redo
                return Plan(head=with_redo(data, manifest), redo_object=redo_object)
        elif not compact and len(manifest.delta) <= DELTA_MAX_ENTRIES:
            data = head_bytes(manifest)
            if len(data) <= DELTA_MAX_BYTES:
                manifest.redo = redo
                return Plan(head=with_redo(data, manifest), redo_object=redo_object)
        # compaction: a new base holding everything, and a head standing on it with no changes
        gen = secrets.token_hex(8)
        files = list(manifest.sorted_files())
        data = base_bytes(manifest, gen, files)
        retired = manifest.prev_base
        manifest.prev_base, manifest.base = manifest.base, gen
        manifest.base_files, manifest.base_set, manifest.delta = files, frozenset(files), {}
        head = head_bytes(manifest)
        manifest.redo = redo
        return Plan(head=with_redo(head, manifest), base=(gen, data), retired=retired, redo_object=redo_object)
    finally:
        manifest.redo = redo


def adopt(store: ObjectStore, prefix: str, manifest: Manifest) -> None:
    """After a committed compaction: keep the new base parsed (this pod wrote it)."""
    if manifest.base is not None and manifest.base_files is not None and manifest.base_set is not None:
        remember(store, prefix, Base(manifest.base, dict(manifest.entries), manifest.base_files,
                                     manifest.base_set))


def remove_base(store: ObjectStore, prefix: str, gen: str) -> None:
    try:
        store.delete(prefix + base_name(gen))
    except ObjectNotFound:
        pass


__all__ = ["CACHE_BASES", "DELTA_MAX_BYTES", "DELTA_MAX_ENTRIES", "INLINE_MAX_BYTES", "Base", "Head", "Plan",
           "adopt", "base_bytes", "base_name", "clear_cache", "fetch_base", "head_bytes", "is_base_name", "load",
           "manifest_from_bytes", "on_base", "parse_base", "parse_head", "plan", "remember", "remove_base", "with_redo"]
