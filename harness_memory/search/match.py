"""Which memories of a place hold every word of a query: the memory page's search box.

Why not BM25's top k: a person filtering a list expects every memory that has all the words (in
the name, the description or anywhere in the body), however many, in the list's own order. The
terms come from the place's search index (``place.parts``: bodies included, Chinese segmented by
jieba, plurals folded), so "react 数据库" and "数据库 react" find the same memories and a word
that occurs only in a body is found. A query word also matches where it is a substring of the
file name, name or description, so a half-typed word ("reac") already narrows the list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .index import Part, tokenize
from .place import parts

if TYPE_CHECKING:
    from ..memdir import Manifest, MemoryDir


def word_terms(word: str) -> list[str]:
    """The index terms one query word must all match. jieba's search mode also emits the long
    compound beside its parts (数据库迁移 → 数据库, 迁移, 数据库迁移); only the parts are required, so
    a memory saying 数据库 … 迁移 apart is found too."""
    terms = list(dict.fromkeys(tokenize(word)))
    return [t for t in terms if not any(o != t and o in t for o in terms)]


def _having(found: list[Part], term: str) -> set[str]:
    out: set[str] = set()
    for part in found:
        hit = part.postings.get(term)
        if hit is None:
            continue
        ids = hit[0][part.valid[hit[0]]]
        out.update(part.prefix + part.postings.files[int(i)] for i in ids)
    return out


def matching(memdir: MemoryDir, manifest: Manifest, query: str) -> set[str] | None:
    """File names holding every word of ``query``; None when the query has no words (no filter).
    A word that is only a stop word ("the", "的") is skipped."""
    words = query.split()
    if not words:
        return None
    found = parts(memdir, manifest)
    lines = {f: f"{f}\n{e.name}\n{e.description}".casefold() for f, e in manifest.entries.items()}
    chosen: set[str] | None = None
    for word in words:
        terms = word_terms(word)
        needle = word.casefold()
        hits = {f for f, line in lines.items() if needle in line}
        if not terms:
            continue  # a stop word (or punctuation): it filters nothing
        having = _having(found, terms[0])
        for term in terms[1:]:
            having &= _having(found, term)
        hits |= having
        chosen = hits if chosen is None else chosen & hits
        if not chosen:
            return set()
    return chosen if chosen is not None else None


__all__ = ["matching", "word_terms"]
