"""Place versions announced through Redis, and the pod's warm views read while they hold.

Why: a warm build read the user's manifest head, the user's auto place and the recalled files
from the store on every build (7 requests), though they rarely change between two builds. Redis
is on every turn's path already and answers in well under a millisecond. So:

- **Announce.** ``VersionBoard`` is a commit listener (the composition root gives it to every
  ``MemoryDir``): once a commit's head has landed it SETs ``<prefix>ver:{<place prefix>}`` to the
  head's etag (the place's hash tag, as the place lock's keys: one Redis Cluster slot per place).
  Best effort: a Redis failure is logged and costs a later reader one store read.
- **Read.** A build asks for the versions of every place it needs in ONE round trip (``MGET``;
  keys of different slots on Cluster are split by the client). ``WarmViews.manifest`` serves the
  pod's cached manifest (and so MEMORY.md, auto-memory facts, the search index keyed by it) only
  when Redis answered with exactly the etag the pod holds AND the pod read that etag from the store
  less than ``trust_seconds`` ago; otherwise it reads the head, caches it and, when Redis had no
  key, re-announces it (``SET NX``: never over a newer announcement).
  A place without a head is announced as ``-`` (``ABSENT``) the same way, so an empty auto place
  costs no read either; a first commit overwrites it.
- **Bounded staleness.** A commit whose announcement was lost (Redis restarted and lost the key,
  a pod died between head and SET, a meta-only commit that announces nothing) is seen by readers
  at the latest ``trust_seconds`` (default 30 s) after they last read the head; a reader never
  serves a version older than the one Redis announces (a different etag is always a store read).
  Without Redis, or when Redis does not answer, every build reads the store as before (and for
  ``retry_after`` seconds after a failure Redis is not asked at all).
- **Own commits.** ``WarmViews`` is the listener the root registers: it announces through the
  board and keeps the committed manifest as the pod's view (the pod that saved reads nothing to
  build next).
- **Bodies.** Recalled file bodies are cached by (place, file, the entry's ``updated_at`` and
  ``size`` in the manifest being served): a new version of a file has a new entry, so a body is
  never older than the manifest it is served with. A body read from the store is cached only when
  it is that entry's text: its byte size is the entry's and the head this pod holds does not name
  the file in its redo record (its commit is finished) or names exactly these bytes (``_settled``).
  A read racing the file's own PUT (head first, file after: the old bytes, maybe of the same size)
  is served once and kept nowhere.

  **Write-through:** the pod that commits a file keeps the text it wrote (the commit's redo
  record holds it) under the new entry, so it never reads its own write back.

  **Shared through Redis** (``SharedBodies``, ``redis.body_cache_seconds``): the same key in Redis,
  written by the committing pod and by a pod whose store read passed the check above, read by a
  pod that does not hold the body. A key names an immutable version: never stale; a lost key
  costs one store read.
- **State files** (``.auto-state.json``: auto memory's watermarks) are cached by (place, name, the
  head etag of the commit that wrote them), filled when this pod's commit wrote them or when a
  transaction read them under the place lock. Every write of a state file is part of a commit
  (``PlaceTxn.put_state``), so while the place's head is still that etag nobody wrote the file
  since; a reader asks with the head it is serving (a transaction: the head it read under the
  lock; a background reader: a warm view Redis confirms), never with an older one.

The caches are bounded in bytes (one LRU budget) and count hits and misses
(``observe`` metric ``warm_cache{cache="manifest"|"body"|"shared_body"|"state",outcome}``).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..layout import PlaceKind
from .directory import ReadResult
from .heads import private_copy
from .index import Manifest
from .model import MemoryFile
from .port import PlaceDir
from .redo import md5_hex

log = logging.getLogger(__name__)

#: How long a cached view is served without a store read while Redis confirms its version.
TRUST_SECONDS = 30.0
#: How long an announcement lives in Redis (a quiet place's key expires; readers re-announce).
ANNOUNCE_TTL = 7 * 24 * 3600
#: The byte budget of one pod's warm views (manifests and bodies together).
MAX_BYTES = 64 * 1024 * 1024
#: The version of a place that has no manifest head yet (announced by readers, ``SET NX``).
ABSENT = "-"

Counter = Callable[[str, str], None]


class _RedisBackoff:
    """Redis use that steps aside after a failure: a hung server must not cost every build and
    every commit a socket timeout; for ``retry_after`` seconds callers read the store instead."""

    def __init__(self, redis: Any, prefix: str, *, retry_after: float, on_round_trip: Callable[[], None],
                 clock: Callable[[], float]) -> None:
        self.redis = redis
        self.prefix = prefix
        self.retry_after = retry_after
        self._round_trip = on_round_trip
        self._clock = clock
        self._down_until = 0.0

    def _usable(self) -> bool:
        return self._clock() >= self._down_until

    def _failed(self, what: str, exc: Exception) -> None:
        self._down_until = self._clock() + self.retry_after
        log.info("%s (%s: %s); not asking Redis again for %gs", what, type(exc).__name__, exc, self.retry_after)


class VersionBoard(_RedisBackoff):
    """Publishes and reads place versions in Redis (``redis`` a redis-py client)."""

    def __init__(self, redis: Any, prefix: str, *, ttl: int = ANNOUNCE_TTL, retry_after: float = 5.0,
                 on_round_trip: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(redis, prefix, retry_after=retry_after, on_round_trip=on_round_trip, clock=clock)
        self.ttl = ttl

    def key(self, place_prefix: str) -> str:
        return f"{self.prefix}ver:{{{place_prefix}}}"

    def publish(self, place_prefix: str, etag: str, *, only_if_absent: bool = False) -> None:
        """Best effort: a failure costs readers a store read, never a wrong answer."""
        if not self._usable():
            return
        try:
            self._round_trip()
            self.redis.set(self.key(place_prefix), etag, ex=self.ttl, nx=only_if_absent)
        except Exception as exc:
            self._failed(f"place version of {place_prefix} not announced", exc)

    def read(self, place_prefixes: Sequence[str]) -> dict[str, str | None] | None:
        """The announced version of each place (None: no key) in one round trip; None when Redis
        did not answer (the caller then trusts nothing it holds)."""
        if not place_prefixes:
            return {}
        if not self._usable():
            return None
        try:
            self._round_trip()
            # Redis Cluster: the places' keys lie in different slots; the cluster client splits
            # them by node (one round trip per node, sent together).
            mget = getattr(self.redis, "mget_nonatomic", None) or self.redis.mget
            values = mget([self.key(p) for p in place_prefixes])
        except Exception as exc:
            self._failed("place versions unavailable; reading the store", exc)
            return None
        return {p: (v.decode() if isinstance(v, bytes) else v) for p, v in zip(place_prefixes, values, strict=True)}

    # -- CommitListener -----------------------------------------------------------------------------
    def committed(self, memdir: PlaceDir, manifest: Manifest, written: Mapping[str, MemoryFile],
                  removed: Sequence[str], cleared: bool, since: float | None) -> None:
        if manifest.head_etag:
            self.publish(memdir.place.prefix, manifest.head_etag)

    def rebuilt(self, memdir: PlaceDir, manifest: Manifest, memories: Mapping[str, MemoryFile]) -> None:
        if manifest.head_etag:
            self.publish(memdir.place.prefix, manifest.head_etag)


#: The places whose bodies recall reads (auto memory's facts are injected from the manifest).
_RECALLED = (PlaceKind.USER_AGENT, PlaceKind.SHARED_AGENT)
#: How long a body shared through Redis lives (``redis.body_cache_seconds``).
BODY_TTL = 3600.0
#: Bodies larger than this are not shared through Redis (``redis.body_cache_max_bytes``).
BODY_MAX_BYTES = 16 * 1024


class SharedBodies(_RedisBackoff):
    """Recalled file bodies shared by every pod through Redis, keyed by the file's version.

    The key names the place (its hash tag), the file and the manifest entry's ``updated_at`` and
    ``size``: a new version of a file is a new entry and so a new key, and a key is only ever
    written with the text of that very version (``WarmViews`` writes what a commit wrote, or a
    store read it has checked against the head: ``_settled``). So a value is never stale; a lost
    key (TTL, eviction, a Redis restart) costs one store read. Best effort like ``VersionBoard``:
    after a failure Redis is left alone for ``retry_after`` seconds."""

    def __init__(self, redis: Any, prefix: str, *, ttl: float = BODY_TTL, max_bytes: int = BODY_MAX_BYTES,
                 retry_after: float = 5.0, on_round_trip: Callable[[], None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(redis, prefix, retry_after=retry_after, on_round_trip=on_round_trip, clock=clock)
        self.ttl = ttl
        self.max_bytes = max_bytes

    def key(self, place_prefix: str, file: str, updated_at: float, size: int) -> str:
        return f"{self.prefix}body:{{{place_prefix}}}{file}@{updated_at!r}:{size}"

    def fits(self, size: int) -> bool:
        return 0 < size <= self.max_bytes

    def get(self, place_prefix: str, file: str, updated_at: float, size: int) -> str | None:
        """The text of that version when some pod shared it (and it has the entry's size)."""
        if not self.fits(size) or not self._usable():
            return None
        try:
            self._round_trip()
            value = self.redis.get(self.key(place_prefix, file, updated_at, size))
        except Exception as exc:
            self._failed("shared bodies unavailable; reading the store", exc)
            return None
        if value is None:
            return None
        data = value if isinstance(value, bytes) else str(value).encode("utf-8")
        return data.decode("utf-8", errors="replace") if len(data) == size else None

    def put(self, place_prefix: str, items: Sequence[tuple[str, float, int, str]]) -> None:
        """Share (file, updated_at, size, text) of one place, one round trip (a pipeline)."""
        items = [i for i in items if self.fits(i[2])]
        if not items or not self._usable():
            return
        try:
            self._round_trip()
            pipe = self.redis.pipeline(transaction=False)
            for file, updated_at, size, text in items:
                pipe.set(self.key(place_prefix, file, updated_at, size), text.encode("utf-8"),
                         ex=max(1, int(self.ttl)))
            pipe.execute()
        except Exception as exc:
            self._failed("bodies not shared", exc)


@dataclass(slots=True)
class _View:
    etag: str
    manifest: Manifest
    confirmed: float  # monotonic time of the store read that returned ``etag``
    size: int


class Versions:
    """The versions one build read (one round trip), handed to every read of that build."""

    def __init__(self, announced: dict[str, str | None] | None) -> None:
        self.announced = announced

    def of(self, place_prefix: str) -> tuple[bool, str | None]:
        """(Redis answered for this place, the version it announced)."""
        if self.announced is None or place_prefix not in self.announced:
            return False, None
        return True, self.announced[place_prefix]


NO_VERSIONS = Versions(None)


class WarmViews:
    """The pod's manifests and recalled bodies, served while their version is confirmed."""

    def __init__(self, board: VersionBoard | None, *, trust_seconds: float = TRUST_SECONDS,
                 max_bytes: int = MAX_BYTES, count: Counter = lambda cache, outcome: None,
                 clock: Callable[[], float] = time.monotonic, shared: SharedBodies | None = None) -> None:
        self.board = board
        #: Bodies shared with the other pods through Redis (None: this pod's cache only).
        self.shared = shared
        self.trust_seconds = trust_seconds
        self.max_bytes = max_bytes
        self._count = count
        self._clock = clock
        self._lock = threading.Lock()
        self._views: OrderedDict[str, _View] = OrderedDict()
        self._bodies: OrderedDict[tuple[str, str, float, int], Any] = OrderedDict()
        self._states: OrderedDict[tuple[str, str], tuple[str, bytes]] = OrderedDict()
        self._bytes = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    def versions(self, dirs: Sequence[PlaceDir]) -> Versions:
        """One Redis round trip for the versions of ``dirs`` (no Redis: nothing is trusted)."""
        if self.board is None:
            return NO_VERSIONS
        return Versions(self.board.read(list(dict.fromkeys(d.place.prefix for d in dirs))))

    def load_manifest(self, memdir: PlaceDir, versions: Versions) -> tuple[Manifest, str | None]:
        """The place's manifest and head etag: the cached one when Redis announces exactly its
        version and the pod read it from the store less than ``trust_seconds`` ago, else read."""
        prefix = memdir.place.prefix
        answered, announced = versions.of(prefix)
        now = self._clock()
        with self._lock:
            held = self._views.get(prefix)
            hit = (held is not None and answered and announced == held.etag
                   and now - held.confirmed < self.trust_seconds)
            if held is not None and hit:
                self._views.move_to_end(prefix)
        if held is not None and hit:  # a copy: callers may change it (a snapshot seeding a place)
            self._count("manifest", "hit")
            return private_copy(held.manifest), (None if held.etag == ABSENT else held.etag)
        self._count("manifest", "miss")
        manifest, etag = memdir.load_manifest()
        version = etag or ABSENT
        self._keep_view(prefix, _View(version, private_copy(manifest), now, _manifest_bytes(manifest)))
        if answered and announced is None and self.board is not None:
            self.board.publish(prefix, version, only_if_absent=True)  # a lost key: announce again
        return manifest, etag

    def body(self, place_prefix: str, file: str, updated_at: float, size: int,
             read: Callable[[], Any]) -> Any:
        """A recalled file's ``ReadResult`` for the manifest entry (``updated_at``, ``size``):
        cached while that entry is the one served; ``read`` GETs it."""
        key = (place_prefix, file, updated_at, size)
        with self._lock:
            hit = self._bodies.get(key)
            if hit is not None:
                self._bodies.move_to_end(key)
                self._count("body", "hit")
                return hit
        self._count("body", "miss")
        if self.shared is not None and self.shared.fits(size):
            text = self.shared.get(place_prefix, file, updated_at, size)
            self._count("shared_body", "miss" if text is None else "hit")
            if text is not None:
                result = ReadResult(file, text, "", updated_at)
                self._keep_body(key, result)
                return result
        result = read()
        if result is None:
            return None
        data = result.text.encode("utf-8")
        if len(data) != size:
            return result  # another version than the entry's (a read racing a save): served once
        settled = self._settled(place_prefix, file, updated_at, size, data)
        if settled is not False:
            self._keep_body(key, result)
        if settled and self.shared is not None:
            self.shared.put(place_prefix, [(file, updated_at, size, result.text)])
        return result

    def _settled(self, place_prefix: str, file: str, updated_at: float, size: int, data: bytes) -> bool | None:
        """Whether ``data``, read from the store for the entry (``updated_at``, ``size``), is that
        entry's text — judged by the head this pod holds for the place: True when its commit is
        finished (the head does not name the file in its redo record: every commit completes the
        one before it) or the bytes are the ones the redo record names (MD5); False when the
        head's redo names other bytes (the read raced the file's own PUT, which lands after the
        head); None when this pod holds no head with that entry (kept here as before, not shared)."""
        with self._lock:
            view = self._views.get(place_prefix)
        entry = view.manifest.entries.get(file) if view is not None else None
        if view is None or entry is None or (entry.updated_at, entry.size) != (updated_at, size):
            return None
        redo = view.manifest.redo
        if redo is None or redo.empty:
            return True
        row = next((w for w in redo.writes if w.file == file), None)
        if row is None:
            return None if redo.object and not redo.writes else True  # rows in an unread object: unknown
        return md5_hex(data) == row.md5

    def read_manifest(self, memdir: PlaceDir) -> tuple[Manifest, str | None]:
        """``load_manifest`` of one place with its own version round trip (background readers:
        an auto-memory extraction reading the place to build its prompt)."""
        return self.load_manifest(memdir, self.versions([memdir]))

    # -- state files (``.auto-state.json``), by the head that wrote them ---------------------------
    def state(self, place_prefix: str, name: str, head_etag: str | None) -> bytes | None:
        """The state file ``name`` as written or read at head ``head_etag``; None when not held."""
        if not head_etag or self.board is None:
            return None
        key = (place_prefix, name)
        with self._lock:
            held = self._states.get(key)
            hit = held is not None and held[0] == head_etag
            if hit:
                self._states.move_to_end(key)
        self._count("state", "hit" if hit else "miss")
        return held[1] if hit and held is not None else None

    def keep_state(self, place_prefix: str, name: str, head_etag: str | None, data: bytes) -> None:
        """Remember ``data`` as the state file at head ``head_etag`` (written by this pod's commit
        of that head, or read under the place lock while that head was current)."""
        if not head_etag or self.board is None:
            return
        with self._lock:
            old = self._states.pop((place_prefix, name), None)
            if old is not None:
                self._bytes -= _state_bytes(name, old[1])
            self._states[(place_prefix, name)] = (head_etag, data)
            self._bytes += _state_bytes(name, data)
            self._evict()

    # -- CommitListener: this pod's own commits ---------------------------------------------------
    def committed(self, memdir: PlaceDir, manifest: Manifest, written: Mapping[str, MemoryFile],
                  removed: Sequence[str], cleared: bool, since: float | None) -> None:
        """Announce the commit (``VersionBoard``) and keep its manifest as this pod's view: the
        pod that saved needs no read to build next (its head is the one it just wrote). The texts
        it wrote are kept as bodies under their new entries (write-through)."""
        if self.board is None or not manifest.head_etag:
            return
        self.board.committed(memdir, manifest, written, removed, cleared, since)
        prefix = memdir.place.prefix
        self._keep_view(prefix, _View(manifest.head_etag, private_copy(manifest), self._clock(),
                                      _manifest_bytes(manifest)))
        redo = manifest.redo
        if redo is None or redo.txid != manifest.txn or not written:
            return  # read back after an unclear answer: the texts are not at hand
        share: list[tuple[str, float, int, str]] = []
        for file in written:
            entry, text = manifest.entries.get(file), redo.texts.get(file)
            if entry is None or text is None or len(text.encode("utf-8")) != entry.size:
                continue
            # ``last_modified``: the entry's time (the object's own is set by the store as the PUT lands)
            self._keep_body((prefix, file, entry.updated_at, entry.size),
                            ReadResult(file, text, "", entry.updated_at))
            share.append((file, entry.updated_at, entry.size, text))
        if self.shared is not None and share and memdir.place.kind in _RECALLED:
            self.shared.put(prefix, share)

    def state_written(self, memdir: PlaceDir, manifest: Manifest, name: str, data: bytes) -> None:
        """This pod's commit of ``manifest`` wrote state file ``name`` (``port.announce_state``).
        A commit of state files alone (an extraction that learnt nothing but its watermarks) told
        no commit listener: its head is announced and kept here."""
        etag = manifest.head_etag
        if self.board is None or not etag:
            return
        prefix = memdir.place.prefix
        with self._lock:
            held = self._views.get(prefix)
        if held is None or held.etag != etag:
            self.board.publish(prefix, etag)
            self._keep_view(prefix, _View(etag, private_copy(manifest), self._clock(), _manifest_bytes(manifest)))
        self.keep_state(prefix, name, etag, data)

    def rebuilt(self, memdir: PlaceDir, manifest: Manifest, memories: Mapping[str, MemoryFile]) -> None:
        if self.board is not None:
            self.board.rebuilt(memdir, manifest, memories)
        self.forget(memdir.place.prefix)

    def forget(self, place_prefix: str) -> None:
        with self._lock:
            held = self._views.pop(place_prefix, None)
            if held is not None:
                self._bytes -= held.size

    def clear(self) -> None:
        with self._lock:
            self._views.clear()
            self._bodies.clear()
            self._states.clear()
            self._bytes = 0

    # -- bounded in bytes -------------------------------------------------------------------------
    def _keep_view(self, prefix: str, view: _View) -> None:
        with self._lock:
            old = self._views.pop(prefix, None)
            if old is not None:
                self._bytes -= old.size
            self._views[prefix] = view
            self._bytes += view.size
            self._evict()

    def _keep_body(self, key: tuple[str, str, float, int], result: Any) -> None:
        with self._lock:
            if key in self._bodies:
                return
            self._bodies[key] = result
            self._bytes += _body_bytes(key, result)
            self._evict()

    def _evict(self) -> None:
        """Oldest first, bodies before views (a body is one GET to refetch, a view one or two)."""
        while self._bytes > self.max_bytes and self._bodies:
            key, result = self._bodies.popitem(last=False)
            self._bytes -= _body_bytes(key, result)
        while self._bytes > self.max_bytes and self._states:
            (_, name), (_, data) = self._states.popitem(last=False)
            self._bytes -= _state_bytes(name, data)
        while self._bytes > self.max_bytes and len(self._views) > 1:
            _, view = self._views.popitem(last=False)
            self._bytes -= view.size


def _manifest_bytes(manifest: Manifest) -> int:
    """An estimate of what a manifest holds in memory (its entries' texts and a fixed overhead)."""
    return 512 + sum(400 + len(e.file) + len(e.name) + len(e.description) for e in manifest.entries.values())


def _body_bytes(key: tuple[str, str, float, int], result: Any) -> int:
    return 200 + key[3] + sys.getsizeof(key[1]) + len(getattr(result, "etag", ""))


def _state_bytes(name: str, data: bytes) -> int:
    return 200 + len(name) + len(data)


__all__ = ["ABSENT", "ANNOUNCE_TTL", "BODY_MAX_BYTES", "BODY_TTL", "MAX_BYTES", "NO_VERSIONS", "TRUST_SECONDS",
           "SharedBodies", "VersionBoard", "Versions", "WarmViews"]
