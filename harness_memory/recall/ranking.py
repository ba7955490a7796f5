"""One ranker over a user's own and the shared memory: the places' search indexes (whole bodies),
fused with the semantic tier's similarities when an embeddings endpoint is configured
(``recall/fusion.py``: calibrated, length-aware weights; a relevance floor).

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
from .fusion import FusionParams, below_floor, confident, fuse_scores
from .lexical import ScoredFile

log = logging.getLogger(__name__)
LEXICAL_CANDIDATES = 100  # BM25 matches put on the fused scale (beyond them: no shared word counts as 0)


@dataclass(slots=True)
class Places:
    """The places a search covers: (directory, its manifest, name prefix)."""

    items: list[tuple[MemoryDir, Manifest, str]] = field(default_factory=list)

    def add(self, memdir: MemoryDir | None, manifest: Manifest | None, prefix: str = "") -> Places:
        if memdir is not None and manifest is not None and manifest.entries:
            self.items.append((memdir, manifest, prefix))
        return self


class PlaceRanker:
    """``select.Ranker`` over ``places``: BM25 on the search indexes, fused with vectors when the
    semantic tier is given (``fusion`` knobs; default ``FusionParams()``)."""

    def __init__(self, places: Places, semantic: object | None = None, fusion: FusionParams | None = None) -> None:
        self.places = places
        self.semantic = semantic  # recall.semantic.SemanticTier, when configured
        if fusion is None and semantic is not None:
            fusion = _params_of(semantic)
        self.fusion = fusion or FusionParams()
        self.last_lexical: list[ScoredFile] = []
        self.last_fused = False  # the last ranking was fused (its confidence rule is ``confident``)
        self.last_floor = False  # the last query fell below the relevance floor (nothing recalled)
        self.last_similarities: dict[str, float] = {}  # the last query's semantic similarities
        self.last_ranked: list[ScoredFile] = []  # what the last call returned (recall's "why" view)

    def _parts(self, exclude: frozenset[str]) -> list[Part]:
        out: list[Part] = []
        for memdir, manifest, prefix in self.places.items:
            out.extend(search_place.parts(memdir, manifest, prefix, exclude))
        return out

    def lexical(self, query: str, k: int, exclude: frozenset[str] = frozenset()) -> list[ScoredFile]:
        return [ScoredFile(f, s) for f, s in bm25(self._parts(exclude), query, k)]

    def similarities(self, query: str, exclude: frozenset[str] = frozenset()) -> dict[str, float]:
        """name -> best-chunk cosine (empty without a semantic tier or when it failed)."""
        if self.semantic is None:
            return {}
        try:
            return self.semantic.similarities(self.places, query, exclude)  # type: ignore[attr-defined, no-any-return]
        except Exception as exc:  # the semantic tier is an extra: never fatal
            log.warning("recall: semantic ranking failed (%s); lexical ranking only", exc)
            return {}

    def _small_talk(self, query: str) -> float:
        try:
            return float(self.semantic.small_talk(query))  # type: ignore[attr-defined]
        except Exception as exc:  # an extra: never fatal
            log.info("recall: small-talk check failed (%s)", exc)
            return 0.0

    def _words_cover(self, query: str, lexical: list[ScoredFile]) -> float:
        """Share of the query's distinct words found in its best lexical match (0.0: none)."""
        if not lexical:
            return 0.0
        from ..search.index import tokenize

        words = set(tokenize(query))
        if not words:
            return 0.0
        top = lexical[0].file
        for memdir, manifest, prefix in self.places.items:
            if top.startswith(prefix) and top[len(prefix):] in manifest.entries:
                doc = search_place.load(memdir, manifest).docs.get(top[len(prefix):])
                if doc is not None:
                    return len(words & doc.terms.keys()) / len(words)
        return 0.0

    def lengths(self) -> dict[str, int]:
        return {prefix + f: int(e.size) for _, manifest, prefix in self.places.items
                for f, e in manifest.entries.items()}

    def __call__(self, query: str, k: int, exclude: frozenset[str] = frozenset()) -> list[ScoredFile]:
        lexical = self.lexical(query, max(k, LEXICAL_CANDIDATES), exclude)
        self.last_lexical = lexical
        self.last_fused = self.last_floor = False
        sims = self.similarities(query, exclude)
        self.last_similarities = sims
        if not sims:
            self.last_ranked = lexical[:k]
            return self.last_ranked
        baseline = float(getattr(self.semantic, "baseline", 0.0))
        if below_floor(sims, self.fusion, self._small_talk(query), self._words_cover(query, lexical), baseline):
            self.last_floor = True
            self.last_ranked = []
            return []
        self.last_fused = True
        self.last_ranked = fuse_scores(lexical, sims, self.lengths(), self.fusion, k)
        return self.last_ranked

    def confident(self, ranked: list[ScoredFile], max_files: int) -> bool | None:
        """The fused ranking's own confidence rule (None: the last ranking was BM25 alone, whose
        rule is ``select.skip_reason``'s)."""
        if not self.last_fused:
            return None
        return confident(ranked, max_files, self.fusion.margin)

    def snippets(self) -> dict[str, str]:
        """file → the first words of its body (for the light model's candidate lines)."""
        out: dict[str, str] = {}
        for memdir, manifest, prefix in self.places.items:
            for file, snippet in search_place.snippets(memdir, manifest).items():
                out[prefix + file] = snippet
        return out


def _params_of(semantic: object) -> FusionParams:
    cfg = getattr(semantic, "config", None)
    if cfg is None:
        return FusionParams()
    return FusionParams(weight_short=cfg.weight_short, weight_long=cfg.weight_long,
                        min_similarity=cfg.min_similarity)


def places_for(own: MemoryDir, own_manifest: Manifest, shared: MemoryDir | None,
               shared_manifest: Manifest | None) -> Places:
    """The user's place and the shared one (named ``shared/<file>``)."""
    return Places().add(own, own_manifest).add(shared, shared_manifest, SHARED_PREFIX)


__all__ = ["LEXICAL_CANDIDATES", "PlaceRanker", "Places", "places_for"]
