"""One ranker over a user's own and the shared memory: the places' search indexes (whole bodies),
fused with the semantic tier's vector ranking when an embeddings endpoint is configured.

Why one module: recall and the agent's ``search_memories`` tool must agree on what "relevant"
means, and both must cost the same few requests: each place's index is loaded through the pod
cache (``search.place.load``: no request while it is current, else one GET per manifest
version). Shared memories are named ``shared/<file>``, as the tools name them.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ..memdir import Manifest, MemoryDir
from ..search import Part, bm25
from ..search import place as search_place
from .context import SHARED_PREFIX
from .lexical import ScoredFile

log = logging.getLogger(__name__)
RRF_K = 60  # reciprocal-rank fusion constant (the usual 60: ranks, not scores, are fused)


@dataclass(slots=True)
class Places:
    """The places a search covers: (directory, its manifest, name prefix)."""

    items: list[tuple[MemoryDir, Manifest, str]] = field(default_factory=list)

    def add(self, memdir: MemoryDir | None, manifest: Manifest | None, prefix: str = "") -> Places:
        if memdir is not None and manifest is not None and manifest.entries:
            self.items.append((memdir, manifest, prefix))
        return self


class PlaceRanker:
    """``select.Ranker`` over ``places``: BM25 on the search indexes (+ vectors, fused by RRF)."""

    def __init__(self, places: Places, semantic: object | None = None) -> None:
        self.places = places
        self.semantic = semantic  # recall.semantic.SemanticTier, when configured
        self.last_lexical: list[ScoredFile] = []

    def _parts(self, exclude: frozenset[str]) -> list[Part]:
        out: list[Part] = []
        for memdir, manifest, prefix in self.places.items:
            out.extend(search_place.parts(memdir, manifest, prefix, exclude))
        return out

    def lexical(self, query: str, k: int, exclude: frozenset[str] = frozenset()) -> list[ScoredFile]:
        return [ScoredFile(f, s) for f, s in bm25(self._parts(exclude), query, k)]

    def __call__(self, query: str, k: int, exclude: frozenset[str] = frozenset()) -> list[ScoredFile]:
        lexical = self.lexical(query, max(k, 30), exclude)
        self.last_lexical = lexical
        vector: list[ScoredFile] = []
        if self.semantic is not None:
            try:
                vector = self.semantic.rank(self.places, query, max(k, 30), exclude)  # type: ignore[attr-defined]
            except Exception as exc:  # the semantic tier is an extra: never fatal
                log.warning("recall: semantic ranking failed (%s); lexical ranking only", exc)
        if not vector:
            return lexical[:k]
        return fuse([lexical, vector], k)

    def snippets(self) -> dict[str, str]:
        """file → the first words of its body (for the light model's candidate lines)."""
        out: dict[str, str] = {}
        for memdir, manifest, prefix in self.places.items:
            for file, snippet in search_place.snippets(memdir, manifest).items():
                out[prefix + file] = snippet
        return out


def fuse(rankings: list[list[ScoredFile]], k: int) -> list[ScoredFile]:
    """Reciprocal-rank fusion; the fused score is scaled so the best is 1.0 (``skip_reason`` reads
    the lead of the first over the second on it)."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            scores[item.file] = scores.get(item.file, 0.0) + 1.0 / (RRF_K + rank + 1)
    if not scores:
        return []
    top = max(scores.values())
    ordered = sorted(scores.items(), key=lambda fs: (-fs[1], fs[0]))[:k]
    return [ScoredFile(f, s / top) for f, s in ordered]


def places_for(own: MemoryDir, own_manifest: Manifest, shared: MemoryDir | None,
               shared_manifest: Manifest | None) -> Places:
    """The user's place and the shared one (named ``shared/<file>``)."""
    return Places().add(own, own_manifest).add(shared, shared_manifest, SHARED_PREFIX)


__all__ = ["RRF_K", "PlaceRanker", "Places", "fuse", "places_for"]
