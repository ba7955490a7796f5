"""The optional semantic tier: memories embedded through any OpenAI-compatible ``/v1/embeddings``,
ranked by cosine similarity and fused with the lexical ranking (``ranking.fuse``, RRF).

Why optional and off by default: words miss meaning ("my car" vs "the Corolla"), but an
embeddings endpoint is one more service to run and pay for. Configured with
``HARNESS_MEMORY_EMBED_MODEL`` / ``_EMBED_BASE_URL`` / ``_EMBED_API_KEY`` (the ``embed`` section);
without them ``semantic_tier`` is None, nothing changes and no call is made.

Storage: one object per place, ``.search-vectors.bin`` — a JSON header (the model, one
``[file, size, updated_at]`` row per vector: the manifest entry's version) and a float16 matrix
(384 dimensions × 1,000 memories = 750 KB). Readers cache it per pod by manifest version (at most
one GET per version) and use only rows whose version matches the manifest.

Writes never wait for the endpoint: a commit (``search.place.after_commit``) tells the tier which
place changed and a background worker embeds what the place's vectors lack (bounded per round),
then merges them into the object under the place lock. A query that finds vectors missing
schedules the same fill ("filled lazily") and ranks with what exists.
"""

from __future__ import annotations

import json
import logging
import struct
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import MemoryFormatError
from ..layout import SEARCH_VECTORS_FILE
from ..search import place as search_place
from ..search.index import stamp_of
from .lexical import ScoredFile

if TYPE_CHECKING:
    from typing import Protocol

    from ..config import EmbedConfig
    from ..memdir import Manifest, MemoryDir
    from .ranking import Places

    class HasSemanticTier(Protocol):
        """A composition root that may run the tier (``MemoryServices`` is one)."""

        def semantic(self) -> SemanticTier | None: ...

log = logging.getLogger(__name__)

MAGIC = b"HMVECTORS1\n"
EMBED_CHARS = 2000  # text embedded per memory: name, description and the head of the body
FILL_BATCH = 64  # memories embedded per background round
QUERY_CACHE = 512
RETRY_AFTER = 30.0  # seconds the endpoint is left alone after a failure


@dataclass(frozen=True, slots=True)
class Vectors:
    """The embedded memories of one place (rows L2-normalised, float32 in memory)."""

    model: str
    rows: dict[str, tuple[int, float]]  # file -> stamp
    files: list[str]
    matrix: np.ndarray

    @classmethod
    def empty(cls, model: str) -> Vectors:
        return cls(model, {}, [], np.zeros((0, 0), dtype=np.float32))

    def to_bytes(self) -> bytes:
        header = json.dumps({"model": self.model, "docs": [[f, *self.rows[f]] for f in self.files]},
                            ensure_ascii=False).encode("utf-8")
        dim = int(self.matrix.shape[1]) if self.matrix.size else 0
        return (MAGIC + struct.pack("<II", len(header), dim) + header
                + self.matrix.astype("<f2").tobytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> Vectors:
        if not data.startswith(MAGIC):
            raise ValueError("not a vectors object")
        n_header, dim = struct.unpack_from("<II", data, len(MAGIC))
        pos = len(MAGIC) + 8
        header = json.loads(data[pos: pos + n_header].decode("utf-8"))
        docs = header["docs"]
        matrix = np.frombuffer(data, dtype="<f2", count=len(docs) * dim, offset=pos + n_header)
        matrix = matrix.reshape(len(docs), dim).astype(np.float32) if dim else np.zeros((0, 0), np.float32)
        return cls(header["model"], {d[0]: (int(d[1]), float(d[2])) for d in docs}, [d[0] for d in docs], matrix)

    def merged(self, new: dict[str, tuple[tuple[int, float], np.ndarray]], keep: set[str]) -> Vectors:
        """These rows (only files in ``keep``) with ``new`` put in."""
        files = [f for f in self.files if f in keep and f not in new]
        rows = [self.matrix[self.files.index(f)] for f in files] if files else []
        stamps = {f: self.rows[f] for f in files}
        for f, (stamp, vec) in new.items():
            files.append(f)
            rows.append(vec)
            stamps[f] = stamp
        matrix = np.vstack(rows).astype(np.float32) if rows else np.zeros((0, 0), np.float32)
        return Vectors(self.model, stamps, files, matrix)


def _normalise(matrix: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


def embed_text(name: str, description: str, body: str) -> str:
    return f"{name}. {description}\n{body}"[:EMBED_CHARS]


class SemanticTier:
    """Embeddings client, per-pod vector cache and the background filler of one ``MemoryServices``."""

    def __init__(self, config: EmbedConfig) -> None:
        from openai import OpenAI

        assert config.model and config.base_url
        self.config = config
        self.model = config.model
        key = config.api_key.get_secret_value() if config.api_key else "none"
        self._client = OpenAI(base_url=config.base_url, api_key=key, timeout=config.timeout, max_retries=0)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="hm-embed")
        self._pending: dict[str, Future[None]] = {}
        self._cache: OrderedDict[tuple[int, str], tuple[float, Vectors]] = OrderedDict()
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._closed = False
        self._down_until = 0.0
        self.calls = 0  # requests made to the endpoint (benchmarks and tests read it)

    # -- the endpoint ---------------------------------------------------------------------------
    def embed(self, texts: list[str]) -> np.ndarray:
        """Normalised vectors of ``texts`` (batched ``config.batch_size`` per request). A failure
        marks the endpoint down for ``RETRY_AFTER`` s: queries then rank by words without waiting
        on it, and background rounds are not started."""
        out: list[list[float]] = []
        try:
            for start in range(0, len(texts), self.config.batch_size):
                batch = [t or " " for t in texts[start: start + self.config.batch_size]]
                self.calls += 1
                response = self._client.embeddings.create(model=self.model, input=batch)
                out.extend(d.embedding for d in sorted(response.data, key=lambda d: d.index))
        except Exception:
            self._down_until = time.monotonic() + RETRY_AFTER
            raise
        return _normalise(np.asarray(out, dtype=np.float32))

    @property
    def down(self) -> bool:
        """The endpoint failed less than ``RETRY_AFTER`` s ago."""
        return time.monotonic() < self._down_until

    def _query_vector(self, query: str) -> np.ndarray:
        with self._lock:
            hit = self._queries.get(query)
        if hit is not None:
            return hit
        vec = self.embed([query])[0]
        with self._lock:
            self._queries[query] = vec
            while len(self._queries) > QUERY_CACHE:
                self._queries.popitem(last=False)
        return vec

    # -- the stored vectors ---------------------------------------------------------------------
    def _key(self, memdir: MemoryDir) -> tuple[int, str]:
        return id(memdir.store), memdir.place.prefix

    def _read(self, memdir: MemoryDir) -> Vectors:
        obj = memdir.store.get_or_none(memdir.place.reserved_key(SEARCH_VECTORS_FILE))
        if obj is None:
            return Vectors.empty(self.model)
        try:
            vectors = Vectors.from_bytes(obj.data)
        except (ValueError, KeyError, IndexError) as exc:
            log.warning("vectors of %s unreadable (%s); they are embedded again", memdir.place.label, exc)
            return Vectors.empty(self.model)
        return vectors if vectors.model == self.model else Vectors.empty(self.model)  # another model: redo

    def load(self, memdir: MemoryDir, manifest: Manifest) -> Vectors:
        """The place's vectors (cached per pod; at most one GET per manifest version)."""
        key = self._key(memdir)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and (hit[0] == manifest.updated_at or _covers(hit[1], manifest)):
            return hit[1]
        vectors = self._read(memdir)
        self._remember(memdir, vectors, manifest.updated_at)
        return vectors

    def _remember(self, memdir: MemoryDir, vectors: Vectors, version: float) -> None:
        with self._lock:
            self._cache[self._key(memdir)] = (version, vectors)
            while len(self._cache) > search_place.CACHE_PLACES:
                self._cache.popitem(last=False)

    # -- ranking ----------------------------------------------------------------------------------
    def rank(self, places: Places, query: str, k: int, exclude: frozenset[str] = frozenset()) -> list[ScoredFile]:
        """The ``k`` memories nearest to ``query`` over ``places`` (names with the places' prefixes)."""
        scored: list[ScoredFile] = []
        qvec: np.ndarray | None = None
        if self.down:
            return []
        for memdir, manifest, prefix in places.items:
            vectors = self.load(memdir, manifest)
            if not _covers(vectors, manifest):
                self.schedule_fill(memdir)
            if not vectors.files:
                continue
            if qvec is None:
                qvec = self._query_vector(query)
            sims = vectors.matrix @ qvec
            for i, file in enumerate(vectors.files):
                entry = manifest.entries.get(file)
                if entry is None or vectors.rows[file] != stamp_of(entry) or prefix + file in exclude:
                    continue
                scored.append(ScoredFile(prefix + file, float(sims[i])))
        scored.sort(key=lambda s: (-s.score, s.file))
        return scored[:k]

    # -- filling ----------------------------------------------------------------------------------
    def schedule_fill(self, memdir: MemoryDir) -> Future[None] | None:
        """Embed what the place lacks, in the background (one pending round per place)."""
        with self._lock:
            if self._closed or self.down:
                return None
            pending = self._pending.get(memdir.place.prefix)
            if pending is not None and not pending.done():
                return pending
            future = self._pool.submit(self._fill_quietly, memdir)
            self._pending[memdir.place.prefix] = future
            return future

    def _fill_quietly(self, memdir: MemoryDir) -> None:
        try:
            while self.fill_round(memdir) and not self._closed:
                pass
        except Exception as exc:  # the endpoint or the store failed: the next write or query retries
            log.warning("embedding memories of %s failed (%s); recall ranks them by words meanwhile",
                        memdir.place.label, exc)

    def fill(self, memdir: MemoryDir) -> None:
        """Embed everything the place lacks now (benchmarks, ``reindex``-like tools)."""
        while self.fill_round(memdir):
            pass

    def fill_round(self, memdir: MemoryDir) -> bool:
        """Embed up to ``FILL_BATCH`` missing memories; True when more may remain."""
        from ..memdir.model import parse_memory

        manifest = memdir.manifest()
        vectors = self.load(memdir, manifest)
        todo = [e for f, e in manifest.entries.items() if vectors.rows.get(f) != stamp_of(e)][:FILL_BATCH]
        stale = [f for f in vectors.files if f not in manifest.entries]
        if not todo and not stale:
            return False
        texts: dict[str, str] = {}
        for entry in todo:
            obj = memdir.store.get_or_none(memdir.place.key(entry.file))
            if obj is None:
                continue
            try:
                memory = parse_memory(obj.data.decode("utf-8", "replace"))
                texts[entry.file] = embed_text(memory.name, memory.description, memory.body)
            except MemoryFormatError:
                texts[entry.file] = embed_text(entry.name, entry.description, "")
        files = list(texts)
        matrix = self.embed([texts[f] for f in files]) if files else np.zeros((0, 0), np.float32)
        new = {f: (stamp_of(manifest.entries[f]), matrix[i]) for i, f in enumerate(files)}
        with memdir.locker.hold(memdir.place.lock_name()):  # merge with what another pod may have stored
            current = memdir.manifest()
            keep = {f for f, e in current.entries.items()}
            new = {f: v for f, v in new.items() if f in current.entries and stamp_of(current.entries[f]) == v[0]}
            merged = self._read(memdir).merged(new, keep)
            memdir.store.put(memdir.place.reserved_key(SEARCH_VECTORS_FILE), merged.to_bytes(),
                             content_type="application/octet-stream")
        self._remember(memdir, merged, current.updated_at)
        return len(todo) == FILL_BATCH

    def after_commit(self, memdir: MemoryDir) -> None:
        """A commit changed memory files of ``memdir``: embed them in the background."""
        self.schedule_fill(memdir)

    def wait_idle(self, timeout: float = 30.0) -> None:
        """Wait for the background rounds started so far (tests, benchmarks, close)."""
        with self._lock:
            pending = list(self._pending.values())
        for future in pending:
            try:
                future.result(timeout=timeout)
            except Exception as exc:  # _fill_quietly logs; a timeout here just stops waiting
                log.debug("waiting for embeddings: %s", exc)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._client.close()


def _covers(vectors: Vectors, manifest: Manifest) -> bool:
    rows = vectors.rows
    return all(rows.get(f) == stamp_of(e) for f, e in manifest.entries.items())


def semantic_tier(services: HasSemanticTier) -> SemanticTier | None:
    """The services' semantic tier, or None when no embeddings endpoint is configured."""
    tier: Any = services.semantic()
    return tier


__all__ = ["EMBED_CHARS", "FILL_BATCH", "SemanticTier", "Vectors", "embed_text", "semantic_tier"]
