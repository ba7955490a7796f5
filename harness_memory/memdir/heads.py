"""The pod's copy of the manifest heads it committed, so its next transaction on a place can skip
reading the head.

Why: a save reads the head (one GET) before it writes anything. When this pod made the place's
last commit and nobody has committed since, that GET returns what the pod already holds. The
holder of the place lock learns "nobody has committed since" from the lock's *done* marker in
Redis (``RedisLease.last_done``: the id and head etag of the last commit whose writes all landed,
left with the lock's release): the marker naming the head this pod remembers means that head is
still the place's head — one Redis GET instead of a store GET.

Used only where the store enforces conditional writes (SeaweedFS, S3), and only by blind writes (a
save: it decides nothing from what the manifest says). There a copy that is stale after all (a
commit made while Redis was down, a marker that outlived a commit because Redis did not answer the
check that removes it) makes the head PUT fail its If-Match, and the commit reads the head again,
completes what it finds and retries — never a lost update, never a decision made on a stale view.
A transaction that reads and decides (a chunk replace, a delete, auto memory, an import) always
reads the head. On real COS (no If-Match) every transaction reads the head.

Along with a head the pod keeps the etags of the files it wrote or read under it, so an overwrite
of such a file needs no GET for the version it replaces (the write's condition; a writer that
must *check* a version — ``expect`` — still reads it). For the small ones it keeps their bytes
too (``TEXT_BYTES`` per place), so the copy an overwrite keeps in the file's history
(``keep.keep_version``) needs no GET either: at most ``TEXT_BYTES`` x ``CACHE_PLACES`` (32 MiB) a pod.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..storage.caches import PerStore

if TYPE_CHECKING:
    from ..storage.base import ObjectStore
    from .index import Manifest

#: Places whose last head this pod keeps, the entries those copies may hold together, and the
#: file etags kept per place.
CACHE_PLACES = 512
CACHE_ENTRIES = 200_000
FILES_PER_PLACE = 4096
#: The bytes of known files kept per place (the oldest go first), and the largest file kept.
TEXT_BYTES = 64 * 1024
TEXT_FILE_BYTES = 16 * 1024


@dataclass(slots=True)
class _Held:
    manifest: Manifest
    etag: str
    files: dict[str, str] = field(default_factory=dict)
    #: file -> its bytes at the etag ``files`` holds for it (small files only).
    texts: dict[str, bytes] = field(default_factory=dict)


#: Per store (dies with it), place prefix -> the head this pod committed there last.
_heads: PerStore[OrderedDict[str, _Held]] = PerStore(OrderedDict)
_lock = threading.Lock()


def private_copy(manifest: Manifest) -> Manifest:
    """A manifest a transaction may change without touching ``manifest``: entries are replaced,
    never changed in place, so the entry dicts are copied shallowly; ``meta`` is copied whole (its
    users change it in place)."""
    return dataclasses.replace(manifest, entries=dict(manifest.entries), meta=copy.deepcopy(manifest.meta),
                               delta=dict(manifest.delta))


def remember(store: ObjectStore, prefix: str, manifest: Manifest, etag: str, files: dict[str, str],
             since: str | None, gone: list[str] | tuple[str, ...] = (),
             texts: dict[str, bytes] | None = None) -> None:
    """``manifest`` (committed by this pod as head ``etag`` on top of head ``since``, every write
    of it landed), the etags of the files it wrote or read and (``texts``) the bytes of those it
    has at those etags. What is known under ``since`` carries over (the commit changed only its
    own files). Keeps a private copy."""
    key = prefix
    held = _Held(private_copy(manifest), etag)
    places = _heads.of(store)
    texts = texts or {}
    with _lock:
        previous = places.get(key)
        if previous is not None and since is not None and previous.etag == since:
            held.files, held.texts = previous.files, previous.texts
        for file in gone:
            held.files.pop(file, None)
            held.texts.pop(file, None)
        held.files.update(files)
        for file in files:  # a new etag: the bytes known for the old one no longer hold
            data = texts.get(file)
            held.texts.pop(file, None)
            if data is not None and len(data) <= TEXT_FILE_BYTES:
                held.texts[file] = data
        while len(held.files) > FILES_PER_PLACE:
            oldest = next(iter(held.files))
            del held.files[oldest]
            held.texts.pop(oldest, None)
        size = sum(len(d) for d in held.texts.values())
        while size > TEXT_BYTES and held.texts:
            size -= len(held.texts.pop(next(iter(held.texts))))
        places[key] = held
        places.move_to_end(key)
        while len(places) > 1 and (len(places) > CACHE_PLACES or
                                   sum(len(h.manifest.entries) for h in places.values()) > CACHE_ENTRIES):
            places.popitem(last=False)


def recall(store: ObjectStore, prefix: str, etag: str) -> tuple[Manifest, dict[str, str]] | None:
    """A private copy of the head this pod remembers for the place when it is head ``etag``, and
    the file etags known under it; None otherwise."""
    got = recall_with_texts(store, prefix, etag)
    return None if got is None else (got[0], got[1])


def recall_with_texts(store: ObjectStore, prefix: str, etag: str
                      ) -> tuple[Manifest, dict[str, str], dict[str, bytes]] | None:
    """``recall``, and the bytes of the known files it keeps (each at the etag given for it)."""
    key = prefix
    places = _heads.of(store)
    with _lock:
        held = places.get(key)
        if held is None or held.etag != etag:
            return None
        places.move_to_end(key)
        files = dict(held.files)
        texts = dict(held.texts)
        manifest = held.manifest
    out = private_copy(manifest)
    out.head_etag = etag
    return out, files, texts


def lists(store: ObjectStore, prefix: str, file: str) -> bool | None:
    """Whether the last head this pod remembers for the place lists ``file`` (None: no head is
    remembered). A hint only, never a decision: a save uses it to skip reading a file its last
    head did not list (the commit still checks the head it reads, and reads a file that head
    lists after all)."""
    with _lock:
        held = _heads.of(store).get(prefix)
        return None if held is None else file in held.manifest.entries


def forget(store: ObjectStore, prefix: str) -> None:
    with _lock:
        _heads.of(store).pop(prefix, None)


def clear() -> None:
    """Forget every head (benchmarks measure cold transactions; tests start clean)."""
    _heads.clear()


__all__ = ["clear", "forget", "lists", "private_copy", "recall", "recall_with_texts", "remember"]
