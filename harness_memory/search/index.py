"""The per-place search index: terms of every memory's name, description and WHOLE body, compact.

Why it exists: recall used to rank memories by their manifest line only (name, description,
tags); a memory whose point sits in its body was never found. Reading every body per query is
out of the question (one GET per file), so the terms are kept in one object per place,
``.search-index.bin``, written by the same ``PlaceTxn`` commit that changes the manifest.

Layout (zlib-compressed): a magic line, a JSON header (one ``[file, size, updated_at, length,
snippet]`` row per document; ``size``/``updated_at`` are the manifest entry's, so a reader can
tell a current document from a stale one without reading the file), then one line per document:
``term count term count …``. Each document's line is made when it is tokenised, so a commit that
changes one memory re-tokenises one memory and writes the others' lines as they were (a 1,000-
memory index is written in a few ms). 1,000 short memories pack to ~40 KB.

Scoring is BM25 (k1 1.2, b 0.75) over field-weighted counts: a term in the file name or name
counts ``NAME_WEIGHT`` times, in the description or tags ``DESC_WEIGHT`` times, in the body once.
Documents are kept forward (per document) so a commit replaces only the documents it wrote;
the inverted postings a query needs are built once per loaded version (cached per pod).
"""

from __future__ import annotations

import json
import struct
import threading
import zlib
from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .tokenize import tokenize  # documents and queries share one tokenizer (recall re-exports it)

if TYPE_CHECKING:
    from ..memdir import ManifestEntry

MAGIC = b"HMSEARCH2\n"
NAME_WEIGHT = 3
DESC_WEIGHT = 2
MAX_TF = 65_535
SNIPPET_CHARS = 160
K1 = 1.2
B = 0.75


class Doc:
    """One memory as the index knows it (``stamp`` = the manifest entry's (size, updated_at));
    ``line`` is its terms as stored (``term count term count …``), made once per document.
    ``terms`` (term → weighted count) is parsed from the line on first use: a loaded index is
    searched through its postings, which are built from the lines directly."""

    __slots__ = ("_terms", "file", "length", "line", "snippet", "stamp")

    def __init__(self, file: str, stamp: tuple[int, float], length: int, snippet: str,
                 terms: dict[str, int] | None, line: str) -> None:
        self.file = file
        self.stamp = stamp
        self.length = length
        self.snippet = snippet
        self.line = line
        self._terms = terms

    @property
    def terms(self) -> dict[str, int]:
        if self._terms is None:
            self._terms = _parse_line(self.line)
        return self._terms


def _term_line(terms: Mapping[str, int]) -> str:
    return " ".join(f"{t} {c}" for t, c in terms.items())


def _parse_line(line: str) -> dict[str, int]:
    parts = line.split(" ") if line else []
    return {parts[i]: int(parts[i + 1]) for i in range(0, len(parts) - 1, 2)}


def stamp_of(entry: ManifestEntry) -> tuple[int, float]:
    """What identifies one version of a memory in the manifest."""
    return int(entry.size), float(entry.updated_at)


def snippet_of(body: str) -> str:
    """The first words of a body on one line (shown to the light model beside the description)."""
    flat = " ".join(body.split())
    return flat if len(flat) <= SNIPPET_CHARS else flat[: SNIPPET_CHARS - 1].rstrip() + "…"


def make_doc(file: str, stamp: tuple[int, float], name: str, description: str, body: str,
             tags: Iterable[str] = ()) -> Doc:
    """Tokenise one memory's fields into weighted term counts."""
    stem = file[:-3] if file.lower().endswith(".md") else file
    counts: Counter[str] = Counter()
    for weight, text in ((NAME_WEIGHT, f"{stem.replace('/', ' ')} {name}"),
                         (DESC_WEIGHT, " ".join([description, *tags])), (1, body)):
        for term in tokenize(text):
            counts[term] += weight
    terms = {t: min(c, MAX_TF) for t, c in counts.items() if " " not in t and "\n" not in t}
    return Doc(file, stamp, sum(terms.values()), snippet_of(body), terms, _term_line(terms))


def entry_tags(entry: ManifestEntry) -> list[str]:
    tags = entry.extra.get("tags") if isinstance(entry.extra, dict) else None
    if isinstance(tags, list):
        return [str(t) for t in tags]
    return [tags] if isinstance(tags, str) else []


def doc_from_entry(entry: ManifestEntry) -> Doc:
    """A document from the manifest line alone (for a memory the index does not hold yet)."""
    return make_doc(entry.file, stamp_of(entry), entry.name, entry.description, "", entry_tags(entry))


class SearchIndex:
    """Documents of one place; serialisable, and searchable once ``postings`` are built."""

    def __init__(self, docs: Mapping[str, Doc] | None = None, *, gen: str = "", base: str = "",
                 removed: Iterable[str] = ()) -> None:
        self.docs: dict[str, Doc] = dict(docs or {})
        #: A delta's removed documents (of memories deleted since its base).
        self.removed = sorted(removed)
        #: Stored form (``search/place.py``): a whole index carries its generation ``gen``; a delta
        #: (the documents changed since) names the generation it stands on in ``base``.
        self.gen = gen
        self.base = base
        self._post: _Postings | None = None
        self._lock = threading.Lock()
        #: ``place._view``'s answers for this index, per manifest version (owned here, so they
        #: die with the index; a few versions at most).
        self.views: OrderedDict[tuple[float, int], tuple[Any, Any]] = OrderedDict()

    # -- changes (write path) ---------------------------------------------------------------
    def updated(self, remove: Iterable[str] = (), add: Iterable[Doc] = (), clear: bool = False) -> SearchIndex:
        """A new index with ``remove`` left out and ``add`` put in (this one is not changed)."""
        docs = {} if clear else dict(self.docs)
        for file in remove:
            docs.pop(file, None)
        for doc in add:
            docs[doc.file] = doc
        return SearchIndex(docs)

    def current(self, file: str, stamp: tuple[int, float]) -> bool:
        doc = self.docs.get(file)
        return doc is not None and doc.stamp == stamp

    # -- bytes ------------------------------------------------------------------------------
    def to_bytes(self) -> bytes:
        docs = list(self.docs.values())
        rows = [[d.file, d.stamp[0], d.stamp[1], d.length, d.snippet] for d in docs]
        head: object = {"gen": self.gen, "base": self.base, "removed": self.removed, "rows": rows} \
            if self.gen or self.base else rows
        header = json.dumps(head, ensure_ascii=False).encode("utf-8")
        body = "\n".join(d.line for d in docs).encode("utf-8")  # each document's line is made once
        return zlib.compress(MAGIC + struct.pack("<I", len(header)) + header + body, 1)

    @classmethod
    def from_bytes(cls, data: bytes) -> SearchIndex:
        """Parse an index object (``ValueError`` when it is not one)."""
        try:
            raw = zlib.decompress(data)
        except zlib.error as exc:
            raise ValueError(f"not a search index ({exc})") from exc
        if not raw.startswith(MAGIC):
            raise ValueError("not a search index (bad magic)")
        pos = len(MAGIC)
        (n_header,) = struct.unpack_from("<I", raw, pos)
        pos += 4
        rows = json.loads(raw[pos: pos + n_header].decode("utf-8"))
        gen = base = ""
        removed: list[str] = []
        if isinstance(rows, dict):  # a generation-stamped index or delta (else the first format: rows only)
            gen, base, removed = str(rows.get("gen") or ""), str(rows.get("base") or ""), rows.get("removed") or []
            rows = rows["rows"]
        lines = raw[pos + n_header:].decode("utf-8").split("\n") if rows else []
        if len(lines) != len(rows):
            raise ValueError("not a search index (document count)")
        docs: dict[str, Doc] = {}
        for (file, size, updated, length, snippet), line in zip(rows, lines, strict=True):
            docs[file] = Doc(file, (int(size), float(updated)), int(length), snippet, None, line)
        return cls(docs, gen=gen, base=base, removed=[str(f) for f in removed])

    # -- search (read path) -----------------------------------------------------------------
    def postings(self) -> _Postings:
        """The inverted form, built once per index object (thread-safe)."""
        if self._post is None:
            with self._lock:
                if self._post is None:
                    self._post = _Postings(list(self.docs.values()))
        return self._post


class _Postings:
    """term → (document numbers, weighted counts) as slices of two arrays sorted by term; document
    lengths; file names. Built from the documents' stored lines in one pass (vectorised)."""

    def __init__(self, docs: Sequence[Doc]) -> None:
        self.files = [d.file for d in docs]
        self.position = {f: i for i, f in enumerate(self.files)}
        self.lengths = np.asarray([d.length for d in docs], dtype=np.float32)
        words: list[str] = []
        counts: list[str] = []
        per_doc: list[int] = []
        for doc in docs:
            parts = doc.line.split(" ") if doc.line else []
            words.extend(parts[0::2])
            counts.extend(parts[1::2])
            per_doc.append(len(parts) // 2)
        self.vocab: dict[str, int] = {}
        setdefault = self.vocab.setdefault
        ids = np.fromiter((setdefault(w, len(self.vocab)) for w in words), dtype=np.int64, count=len(words))
        order = np.argsort(ids, kind="stable")
        self._docs = np.repeat(np.arange(len(docs), dtype=np.int32), per_doc)[order]
        self._tfs = np.asarray(counts, dtype=np.float32)[order] if counts else np.zeros(0, np.float32)
        self._bounds = np.searchsorted(ids[order], np.arange(len(self.vocab) + 1))

    def get(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """(document numbers, weighted counts) of ``term``, or None when no document has it."""
        i = self.vocab.get(term)
        if i is None:
            return None
        start, end = int(self._bounds[i]), int(self._bounds[i + 1])
        return self._docs[start:end], self._tfs[start:end]


@dataclass(frozen=True, slots=True)
class Part:
    """One index's share of a search: its postings and which of its documents count."""

    postings: _Postings
    valid: np.ndarray  # bool per document: current in the manifest, not excluded
    prefix: str = ""  # "shared/" for the shared place


def bm25(parts: Sequence[Part], query: str, k: int) -> list[tuple[str, float]]:
    """BM25 over the valid documents of all ``parts`` as one collection; top ``k`` with a positive
    score, best first (ties: file name order)."""
    terms = list(dict.fromkeys(tokenize(query)))
    n_docs = sum(int(p.valid.sum()) for p in parts)
    if not terms or n_docs == 0 or k <= 0:
        return []
    total_len = sum(float(p.postings.lengths[p.valid].sum()) for p in parts)
    avgdl = max(total_len / n_docs, 1.0)
    scores = [np.zeros(len(p.postings.files), dtype=np.float32) for p in parts]
    for term in terms:
        hits = []
        df = 0
        for p in parts:
            post = p.postings.get(term)
            if post is None:
                hits.append(None)
                continue
            keep = p.valid[post[0]]
            ids, tf = post[0][keep], post[1][keep]
            df += len(ids)
            hits.append((ids, tf))
        if df == 0:
            continue
        idf = float(np.log(1.0 + (n_docs - df + 0.5) / (df + 0.5)))
        for p, s, hit in zip(parts, scores, hits, strict=True):
            if hit is None:
                continue
            ids, tf = hit
            dl = p.postings.lengths[ids]
            s[ids] += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * dl / avgdl))
    found: list[tuple[str, float]] = []
    for p, s in zip(parts, scores, strict=True):
        nz = np.nonzero(s > 0)[0]
        if len(nz) > k:
            nz = nz[np.argpartition(-s[nz], k - 1)[:k]]
        found.extend((p.prefix + p.postings.files[int(i)], float(s[i])) for i in nz)
    found.sort(key=lambda fs: (-fs[1], fs[0]))
    return found[:k]


__all__ = [
    "DESC_WEIGHT",
    "K1",
    "NAME_WEIGHT",
    "B",
    "Doc",
    "Part",
    "SearchIndex",
    "bm25",
    "doc_from_entry",
    "entry_tags",
    "make_doc",
    "snippet_of",
    "stamp_of",
]
