"""The optional semantic tier: memories embedded through any OpenAI-compatible ``/v1/embeddings``,
ranked by cosine similarity (best chunk per memory) and fused with the lexical ranking
(``recall/fusion.py``: score-calibrated, length-aware weights).

Why optional and off by default: words miss meaning ("my car" vs "the Corolla"), but an
embeddings endpoint is one more service to run and pay for. Configured with
``HARNESS_MEMORY_EMBED_MODEL`` / ``_EMBED_BASE_URL`` / ``_EMBED_API_KEY`` (the ``embed`` section);
without them ``semantic_tier`` is None, nothing changes and no call is made.

Storage: one object per place, ``.search-vectors.bin`` (``recall/vectors.py``): every memory as
chunk vectors with the manifest entry's version. Readers cache it per pod by manifest version
(at most one GET per version) and use only rows whose version matches the manifest.

Complete embedding: a commit (``search.place.after_commit``) tells the tier which place changed.
One background worker per place runs rounds (``fill_round``: embed up to ``FILL_BATCH``
memories the vectors lack, then merge); a commit that arrives while a round runs marks the place
dirty and the worker runs again after it, so no save is folded into a round that had already
read the list. A failed round is retried after ``RETRY_AFTER`` s (a few times) without waiting
for the next save. Merges are O(changed) and done outside the place lock; the lock is held only
to check that the stored object is still the one merged into (HEAD) and to PUT it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MemoryFormatError, ObjectNotFound
from ..layout import SEARCH_VECTORS_FILE
from ..search import place as search_place
from ..search.index import stamp_of
from .embed_client import EmbedClient
from .lexical import ScoredFile
from .vectors import Vectors, chunk_texts

if TYPE_CHECKING:
    from typing import Protocol

    from ..config import EmbedConfig
    from ..memdir import Manifest, MemoryDir
    from .ranking import Places

    class HasSemanticTier(Protocol):
        """A composition root that may run the tier (``MemoryServices`` is one)."""

        def semantic(self) -> SemanticTier | None: ...

log = logging.getLogger(__name__)

FILL_BATCH = 64  # memories embedded per background round
QUERY_CACHE = 512
RETRY_AFTER = 30.0  # seconds the endpoint is left alone after a failure
RETRIES = 4  # background retries of a failed fill (RETRY_AFTER, x2, x4 ...) before waiting for the next save
MERGE_ATTEMPTS = 3  # optimistic merges before merging under the lock
CALIBRATION = "\0calibration"  # the pending-work key of the one-off calibration request


def embed_text(name: str, description: str, body: str) -> str:
    """The first chunk of a memory (what a one-vector embedding of it would be)."""
    return chunk_texts(name, description, body, max_chunks=1)[0]


class SemanticTier:
    """Embeddings client, per-pod vector cache and the background filler of one ``MemoryServices``."""

    def __init__(self, config: EmbedConfig) -> None:
        assert config.model and config.base_url
        self.config = config
        self.model = config.model
        self.client = EmbedClient(config)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hm-embed")
        self._pending: dict[str, Future[None]] = {}
        self._running: set[str] = set()
        self._dirty: set[str] = set()
        self._cache: OrderedDict[tuple[int, str], tuple[float, Vectors, str | None]] = OrderedDict()
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._down_until = 0.0
        self._anchors: np.ndarray | None = None  # the small-talk phrases' vectors (``smalltalk.py``)
        self.blind_cjk = False  # the model puts unrelated Chinese sentences together (``knows``)
        self.baseline = 0.0  # the model's cosine of unrelated sentences (``smalltalk.BASE_PROBES``)
        self.embedded = 0  # memories embedded by this pod (metrics)
        self.telemetry: Any = None  # an ``observe.Telemetry`` when the owner gives one (metrics)
        self._missing: dict[str, int] = {}  # place prefix -> memories lacking vectors at its last round
        self.failures = 0  # background rounds that failed

    @property
    def calls(self) -> int:
        """Requests made to the endpoint (benchmarks and tests read it)."""
        return self.client.calls

    # -- the endpoint ---------------------------------------------------------------------------
    def embed(self, texts: list[str]) -> np.ndarray:
        """Normalised vectors of memory texts (adaptive batches, the batch deadline)."""
        try:
            return self.client.documents(texts)
        except Exception:
            self._down_until = time.monotonic() + RETRY_AFTER
            raise

    @property
    def down(self) -> bool:
        """The endpoint failed less than ``RETRY_AFTER`` s ago."""
        return time.monotonic() < self._down_until

    def _query_vector(self, query: str) -> np.ndarray:
        with self._lock:
            hit = self._queries.get(query)
        if hit is not None:
            return hit
        try:
            vec = self.client.query(query)
        except Exception:
            self._down_until = time.monotonic() + RETRY_AFTER
            raise
        with self._lock:
            self._queries[query] = vec
            while len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vec

    # -- the stored vectors ---------------------------------------------------------------------
    def _key(self, memdir: MemoryDir) -> tuple[int, str]:
        return id(memdir.store), memdir.place.prefix

    def _read(self, memdir: MemoryDir) -> tuple[Vectors, str | None]:
        """The stored vectors and their etag (None: no object)."""
        obj = memdir.store.get_or_none(memdir.place.reserved_key(SEARCH_VECTORS_FILE))
        if obj is None:
            return Vectors.empty(self.model), None
        try:
            vectors = Vectors.from_bytes(obj.data)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            log.info("vectors of %s not of this format (%s); they are embedded again", memdir.place.label, exc)
            return Vectors.empty(self.model), obj.etag
        return (vectors if vectors.model == self.model else Vectors.empty(self.model)), obj.etag  # another model

    def _stored_etag(self, memdir: MemoryDir) -> str | None:
        try:
            return memdir.store.head(memdir.place.reserved_key(SEARCH_VECTORS_FILE)).etag
        except ObjectNotFound:
            return None

    def load(self, memdir: MemoryDir, manifest: Manifest) -> Vectors:
        """The place's vectors (cached per pod; at most one GET per manifest version)."""
        key = self._key(memdir)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and (hit[0] == manifest.updated_at or _covers(hit[1], manifest)):
            return hit[1]
        vectors, etag = self._read(memdir)
        self._remember(memdir, vectors, manifest.updated_at, etag)
        return vectors

    def _remember(self, memdir: MemoryDir, vectors: Vectors, version: float, etag: str | None) -> None:
        with self._lock:
            self._cache[self._key(memdir)] = (version, vectors, etag)
            self._cache.move_to_end(self._key(memdir))
            while len(self._cache) > search_place.CACHE_PLACES:
                self._cache.popitem(last=False)

    def coverage(self, memdir: MemoryDir, manifest: Manifest | None = None) -> tuple[int, int]:
        """(memories with current vectors, memories) of the place, as stored."""
        manifest = manifest if manifest is not None else memdir.manifest()
        vectors = self.load(memdir, manifest)
        done = sum(1 for f, e in manifest.entries.items() if vectors.stamp(f) == stamp_of(e))
        return done, len(manifest.entries)

    # -- ranking ----------------------------------------------------------------------------------
    def similarities(self, places: Places, query: str, exclude: frozenset[str] = frozenset()
                     ) -> dict[str, float]:
        """name -> best-chunk cosine with ``query`` for every memory with current vectors (names
        with the places' prefixes). Empty when the endpoint is down or nothing is embedded."""
        if self.down or not self.knows(query):
            return {}
        out: dict[str, float] = {}
        qvec: np.ndarray | None = None
        for memdir, manifest, prefix in places.items:
            vectors = self.load(memdir, manifest)
            if not _covers(vectors, manifest):
                self.schedule_fill(memdir)
            if not len(vectors):
                continue
            if qvec is None:
                qvec = self._query_vector(query)
            best = vectors.best(qvec)
            for file, entry in manifest.entries.items():
                slot = vectors.position.get(file)
                if slot is None or vectors.stamps[slot] != stamp_of(entry) or prefix + file in exclude:
                    continue
                out[prefix + file] = float(best[slot])
        return out

    def _calibrate(self) -> bool:
        """True once the small-talk phrases and the language probes are embedded. The first call
        schedules that (one request) in the background and answers False: a query never waits
        on it (the floor then uses ``min_similarity`` only, the tier is used for every language)."""
        if self._anchors is not None:
            return True
        with self._lock:
            if not self._closed.is_set() and CALIBRATION not in self._pending:
                self._pending[CALIBRATION] = self._pool.submit(self._do_calibrate)
        return False

    def _do_calibrate(self) -> None:
        from .smalltalk import BASE_PROBES, BLIND_SIMILARITY, CJK_PROBES, PHRASES

        try:
            vectors = self.client.documents([*PHRASES, *CJK_PROBES, *BASE_PROBES])
        except Exception as exc:
            log.info("calibration phrases not embedded (%s); the relevance floor uses min_similarity only", exc)
            with self._lock:
                self._pending.pop(CALIBRATION, None)  # the next query schedules it again
            return

        def mean_off_diagonal(rows: np.ndarray) -> float:
            pairs = rows @ rows.T
            return float(pairs[~np.eye(len(rows), dtype=bool)].mean())

        n = len(PHRASES)
        cjk = mean_off_diagonal(vectors[n: n + len(CJK_PROBES)])
        self.baseline = mean_off_diagonal(vectors[n + len(CJK_PROBES):])
        self.blind_cjk = cjk - self.baseline >= BLIND_SIMILARITY
        if self.blind_cjk:
            log.info("embeddings model %s does not tell Chinese sentences apart (unrelated ones at cosine %.2f, "
                     "English ones at %.2f): queries in Chinese are ranked by words", self.model, cjk, self.baseline)
        self._anchors = vectors[:n]

    def small_talk(self, query: str) -> float:
        """The query's cosine with the nearest pleasantry (``smalltalk.PHRASES``; 0.0 when they
        cannot be embedded)."""
        if not self._calibrate() or self._anchors is None:
            return 0.0
        return float((self._anchors @ self._query_vector(query)).max())

    def knows(self, query: str) -> bool:
        """The model tells sentences of the query's script apart (``smalltalk.CJK_PROBES``)."""
        from .smalltalk import mostly_cjk

        return not (mostly_cjk(query) and self._calibrate() and self.blind_cjk)

    def rank(self, places: Places, query: str, k: int, exclude: frozenset[str] = frozenset()) -> list[ScoredFile]:
        """The ``k`` memories nearest to ``query`` over ``places`` (names with the places' prefixes)."""
        sims = self.similarities(places, query, exclude)
        scored = sorted((ScoredFile(f, s) for f, s in sims.items()), key=lambda s: (-s.score, s.file))
        return scored[:k]

    # -- filling ----------------------------------------------------------------------------------
    def schedule_fill(self, memdir: MemoryDir) -> Future[None] | None:
        """Embed what the place lacks, in the background. One worker per place: a call while it
        runs marks the place dirty, and the worker runs another round after the current one."""
        prefix = memdir.place.prefix
        with self._lock:
            if self._closed.is_set():
                return None
            if prefix in self._running:
                self._dirty.add(prefix)
                return self._pending.get(prefix)
            if self.down:
                return None
            self._running.add(prefix)
            self._dirty.discard(prefix)
            future = self._pool.submit(self._fill_worker, memdir)
            self._pending[prefix] = future
            return future

    def _fill_worker(self, memdir: MemoryDir) -> None:
        prefix = memdir.place.prefix
        failures = 0
        try:
            while not self._closed.is_set():
                with self._lock:
                    self._dirty.discard(prefix)
                try:
                    while self.fill_round(memdir) and not self._closed.is_set():
                        pass
                    failures = 0
                except Exception as exc:  # the endpoint or the store failed: retried below
                    failures += 1
                    self.failures += 1
                    if self.telemetry is not None:
                        self.telemetry.embeddings("failed")
                    log.warning("embedding memories of %s failed (%s: %s); recall ranks them by words meanwhile%s",
                                memdir.place.label, type(exc).__name__, exc,
                                "" if failures > RETRIES else f"; retry in {RETRY_AFTER * 2 ** (failures - 1):.0f} s")
                    if failures > RETRIES or self._closed.wait(RETRY_AFTER * 2 ** (failures - 1)):
                        return
                    continue
                with self._lock:
                    if prefix not in self._dirty:
                        return
        finally:
            with self._lock:
                self._running.discard(prefix)

    def fill(self, memdir: MemoryDir) -> None:
        """Embed everything the place lacks now (benchmarks, ``reindex``-like tools)."""
        while self.fill_round(memdir):
            pass

    def _texts(self, memdir: MemoryDir, entries: list[Any]) -> dict[str, list[str]]:
        """file -> its chunk texts (read concurrently when the place has an executor)."""
        from ..memdir.model import parse_memory

        cfg = self.config

        def one(entry: Any) -> tuple[str, list[str]] | None:
            obj = memdir.store.get_or_none(memdir.place.key(entry.file))
            if obj is None:
                return None
            try:
                memory = parse_memory(obj.data.decode("utf-8", "replace"))
                return entry.file, chunk_texts(memory.name, memory.description, memory.body,
                                               cfg.chunk_tokens, cfg.max_chunks)
            except MemoryFormatError:
                return entry.file, chunk_texts(entry.name, entry.description, "", cfg.chunk_tokens, 1)

        pool = memdir.executor
        found = list(pool.map(one, entries)) if pool is not None and len(entries) > 1 else [one(e) for e in entries]
        return dict(f for f in found if f is not None)

    def fill_round(self, memdir: MemoryDir) -> bool:
        """Embed up to ``FILL_BATCH`` memories the place's vectors lack and merge them in; True when
        more may remain."""
        manifest = memdir.manifest()
        vectors = self.load(memdir, manifest)
        lacking = [e for f, e in manifest.entries.items() if vectors.stamp(f) != stamp_of(e)]
        todo = lacking[:FILL_BATCH]
        stale = [f for f in vectors.position if f not in manifest.entries]
        self._report(memdir, 0, len(lacking))
        if not todo and not stale:
            return False
        texts = self._texts(memdir, todo)
        flat = [t for chunks in texts.values() for t in chunks]
        splits = self.client.splits
        matrix = self.embed(flat) if flat else np.zeros((0, 0), np.float32)
        if self.client.splits > splits and self.telemetry is not None:
            self.telemetry.embeddings("split", self.client.splits - splits)
        new: dict[str, tuple[tuple[int, float], np.ndarray]] = {}
        row = 0
        for file, chunks in texts.items():
            new[file] = (stamp_of(manifest.entries[file]), matrix[row: row + len(chunks)])
            row += len(chunks)
        self._merge(memdir, new, stale, manifest.updated_at)
        with self._lock:
            self.embedded += len(new)
        self._report(memdir, len(new), len(lacking) - len(new))
        return len(todo) == FILL_BATCH

    def _report(self, memdir: MemoryDir, embedded: int, lacking: int, outcome: str = "embedded") -> None:
        with self._lock:
            self._missing[memdir.place.prefix] = lacking
            missing = sum(self._missing.values())
        if self.telemetry is not None:
            self.telemetry.embeddings(outcome, embedded, missing)

    def _merge(self, memdir: MemoryDir, new: dict[str, tuple[tuple[int, float], np.ndarray]],
               stale: list[str], version: float) -> None:
        """Merge ``new`` into the stored vectors. The merge runs outside the place lock, on the
        pod's copy when the stored object is still the one it holds (HEAD) — else on a fresh read;
        under the lock only the etag is checked again and the object PUT. After
        ``MERGE_ATTEMPTS`` lost races the read and merge happen under the lock."""
        key = memdir.place.reserved_key(SEARCH_VECTORS_FILE)
        for attempt in range(MERGE_ATTEMPTS + 1):
            under_lock = attempt == MERGE_ATTEMPTS
            with self._lock:
                hit = self._cache.get(self._key(memdir))
            etag = self._stored_etag(memdir) if not under_lock else None
            if hit is not None and hit[2] is not None and hit[2] == etag:
                base = hit[1]
            elif not under_lock:
                base, etag = self._read(memdir)
            merged = None if under_lock else base.merged(new, stale)
            with memdir.locker.hold(memdir.place.lock_name()):
                if under_lock:
                    base, etag = self._read(memdir)
                    merged = base.merged(new, stale)
                elif self._stored_etag(memdir) != etag:
                    continue  # another pod stored vectors meanwhile: merge into theirs
                assert merged is not None
                new_etag = memdir.store.put(key, merged.to_bytes(), content_type="application/octet-stream")
            self._remember(memdir, merged, version, new_etag)
            return

    def after_commit(self, memdir: MemoryDir) -> None:
        """A commit changed memory files of ``memdir``: embed them in the background."""
        self.schedule_fill(memdir)

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait for the background rounds started so far (tests, benchmarks, close)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                pending = [f for f in self._pending.values() if not f.done()]
            if not pending:
                return
            for future in pending:
                try:
                    future.result(timeout=max(0.0, deadline - time.monotonic()))
                except Exception as exc:  # the worker logs; a timeout here just stops waiting
                    log.debug("waiting for embeddings: %s", exc)
                    return

    def close(self) -> None:
        with self._lock:
            self._closed.set()
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.client.close()


def _covers(vectors: Vectors, manifest: Manifest) -> bool:
    return len(vectors) >= len(manifest.entries) and all(
        vectors.stamp(f) == stamp_of(e) for f, e in manifest.entries.items())


def semantic_tier(services: HasSemanticTier) -> SemanticTier | None:
    """The services' semantic tier, or None when no embeddings endpoint is configured."""
    tier: Any = services.semantic()
    return tier


__all__ = ["FILL_BATCH", "SemanticTier", "Vectors", "embed_text", "semantic_tier"]
