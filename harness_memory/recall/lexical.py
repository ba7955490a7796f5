"""BM25 ranking of memory files (bm25s) over name, description, tags and, when given, the body.

Recall ranks by the places' search index (``harness_memory/search``); this ranking of manifest
lines is what answers without one (``recall.body_search=false``, direct ``find_relevant_memories``
calls on a bare manifest) and what the labelled set has always been measured with.

Why the caches: tokenising 1,000 mixed-language descriptions with jieba costs ~150 ms, building
the bm25s index ~20 ms, answering a query well under 1 ms. Recall runs on every query and the
manifest changes only when a memory is saved, so:

* each document's tokens are cached by its text (a bounded LRU), so a manifest that changed by
  one entry re-tokenises one entry;
* the built index is cached by the exact tuple of (file, document text) it was built from (a
  bounded LRU), so an unchanged manifest — the common case — re-uses it outright.

Both caches are per process and thread-safe; stale entries simply age out.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..memdir import ManifestEntry
from .tokenize import tokenize

if TYPE_CHECKING:
    import numpy as np

TOKEN_CACHE_SIZE = 50_000
INDEX_CACHE_SIZE = 64


class _LRU:
    """A tiny thread-safe LRU map."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._data: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            value = self._data.get(key)
            if value is not None:
                self._data.move_to_end(key)
            return value

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


_tokens = _LRU(TOKEN_CACHE_SIZE)
_indexes = _LRU(INDEX_CACHE_SIZE)


def cached_tokens(text: str) -> tuple[str, ...]:
    hit = _tokens.get(text)
    if hit is None:
        hit = tuple(tokenize(text))
        _tokens.put(text, hit)
    return hit


def document_text(entry: ManifestEntry, body: str | None = None) -> str:
    """What a memory is searched by: file stem, name, description, tags and the whole body."""
    stem = entry.file[:-3] if entry.file.lower().endswith(".md") else entry.file
    parts = [stem.replace("/", " "), entry.name, entry.description]
    tags = entry.extra.get("tags") if isinstance(entry.extra, dict) else None
    if isinstance(tags, list):
        parts.extend(str(t) for t in tags)
    elif isinstance(tags, str):
        parts.append(tags)
    if body:
        parts.append(body)
    return "\n".join(p for p in parts if p)


@dataclass(frozen=True, slots=True)
class ScoredFile:
    file: str
    score: float


class LexicalIndex:
    """A bm25s index over a fixed list of (file, document text)."""

    def __init__(self, files: Sequence[str], texts: Sequence[str]) -> None:
        import bm25s  # ~150 ms to import; only when lexical recall first runs

        self.files = list(files)
        docs = [list(cached_tokens(t)) or [""] for t in texts]
        self._bm25 = bm25s.BM25()
        self._empty = not self.files
        if not self._empty:
            self._bm25.index(docs, show_progress=False)

    def scores(self, query: str) -> np.ndarray | None:
        """BM25 score of every file for ``query`` (None when no query word is in the index)."""
        if self._empty:
            return None
        ids = self._bm25.get_tokens_ids([t for t in tokenize(query) if t])
        if not ids:
            return None
        return self._bm25.get_scores_from_ids(ids)

    def rank(self, query: str, k: int, exclude: frozenset[str] = frozenset()) -> list[ScoredFile]:
        """The best ``k`` files with a positive score, best first (ties: file name order)."""
        scores = self.scores(query)
        if scores is None:
            return []
        import numpy as np

        order = np.argsort(-scores, kind="stable")
        out: list[ScoredFile] = []
        for i in order:
            score = float(scores[i])
            if score <= 0 or math.isnan(score):
                break
            file = self.files[int(i)]
            if file in exclude:
                continue
            out.append(ScoredFile(file, score))
            if len(out) >= k:
                break
        return out


def _entry_key(entry: ManifestEntry, body: str | None) -> tuple[object, ...]:
    """Everything ``document_text`` reads, without building the text (the warm path must be cheap:
    the strings are the manifest's own objects, so hashing and comparing them is nearly free)."""
    tags = entry.extra.get("tags") if entry.extra else None
    return (entry.file, entry.name, entry.description, repr(tags) if tags else None, body)


def index_for(entries: Sequence[ManifestEntry], bodies: Mapping[str, str] | None = None) -> LexicalIndex:
    """The (cached) index of these entries; built only when their searchable text changed."""
    get_body = bodies.get if bodies else (lambda _file: None)
    key = tuple(_entry_key(e, get_body(e.file)) for e in entries)
    hit = _indexes.get(key)
    if hit is None:
        hit = LexicalIndex([e.file for e in entries],
                           [document_text(e, get_body(e.file)) for e in entries])
        _indexes.put(key, hit)
    return hit


def lexical_rank(
    query: str,
    entries: Sequence[ManifestEntry],
    *,
    k: int = 5,
    exclude: frozenset[str] = frozenset(),
    bodies: Mapping[str, str] | None = None,
) -> list[ScoredFile]:
    """BM25 top-``k`` of ``entries`` for ``query``; files scoring zero are never returned."""
    if not query.strip() or not entries:
        return []
    return index_for(entries, bodies).rank(query, k, exclude)


def clear_caches() -> None:
    """Forget cached tokens and indexes (benchmarks measure cold builds with it)."""
    _tokens.clear()
    _indexes.clear()


__all__ = ["LexicalIndex", "ScoredFile", "clear_caches", "document_text", "index_for", "lexical_rank"]
