"""Words and meaning in one ranking: score-calibrated, length-aware weighted fusion.

Why not reciprocal-rank fusion: RRF with equal weights throws the scores away, so a memory the
words rank first by a wide margin and the vectors rank 20th ends up below a memory both rank
middling — on long conversations it dragged recall@5 below words alone (0.908 → 0.725). Here both
scores are put on one scale and added with a weight:

* words: BM25 divided by the best BM25 of the query (1.0 = the best lexical match, 0 = no
  shared word);
* meaning: cosine (of the memory's best chunk) rescaled between the place's typical similarity
  (the median over all memories: what "unrelated" looks like for this model and this query) and
  the best one, clipped to [0, 1].

``fused = (1 - w) * words + w * meaning``, with ``w`` depending on the memory's length: a long
memory (a whole conversation, a document) holds many words, and BM25 is precise on it, while a
one-line fact shares few words with a paraphrased question and leans on meaning. ``w`` goes from
``weight_short`` (memories up to ``SHORT_CHARS``) to ``weight_long`` (from ``LONG_CHARS``),
linearly in log-length between.

Confidence (``confident``): the light model is skipped when the fused lead of the first over
the second is at least ``FUSED_MARGIN`` on this [0, 1] scale — a rule on the fused scores, not on
BM25's ratio (fused scores are close together by construction, a ratio rule never fired).

Relevance floor (``below_floor``): nothing is recalled when no memory's best chunk reaches
``min_similarity`` (cosine), or when the query is closer to a pleasantry than to any memory
(``smalltalk.py``) — "Thanks, that's all for today!" shares a word or two with many memories but
means none of them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from .lexical import ScoredFile
from .smalltalk import SMALL_TALK_SIMILARITY, rescaled

SHORT_CHARS = 400
LONG_CHARS = 6000
FUSED_MARGIN = 0.15
DENSE_CANDIDATES = 100
WORDS_COVER = 0.6  # share of a query's words in one memory that says "not small talk"


@dataclass(frozen=True, slots=True)
class FusionParams:
    """The knobs of the fusion (``embed`` section of the config)."""

    weight_short: float = 0.85
    weight_long: float = 0.5
    min_similarity: float = 0.05
    margin: float = FUSED_MARGIN


def weight_for(length: int, params: FusionParams) -> float:
    """The meaning weight for a memory of ``length`` characters (log-linear between the ends)."""
    if length <= SHORT_CHARS:
        return params.weight_short
    if length >= LONG_CHARS:
        return params.weight_long
    t = (math.log(length) - math.log(SHORT_CHARS)) / (math.log(LONG_CHARS) - math.log(SHORT_CHARS))
    return params.weight_short + t * (params.weight_long - params.weight_short)


def below_floor(similarities: Mapping[str, float], params: FusionParams, small_talk: float = 0.0,
                words_cover: float = 0.0, baseline: float = 0.0) -> bool:
    """No memory is close enough in meaning to be worth recalling: the best is under
    ``min_similarity``, or the query is small talk — at least ``SMALL_TALK_SIMILARITY`` close to a
    pleasantry (``small_talk``: its cosine with the nearest, ``smalltalk.py``; measured from the
    model's ``baseline`` similarity of unrelated sentences), closer to it than
    to any memory, and its words do not mostly occur in one memory (``words_cover``: the share of
    the query's distinct words found in the best lexical match; a model that does not know the
    query's language puts every short sentence near the pleasantries, the words still see it)."""
    if not similarities:
        return True
    best = max(similarities.values())
    if best < params.min_similarity:
        return True
    return rescaled(small_talk, baseline) >= SMALL_TALK_SIMILARITY and small_talk > best and words_cover < WORDS_COVER


def fuse_scores(lexical: Sequence[ScoredFile], similarities: Mapping[str, float], lengths: Mapping[str, int],
                params: FusionParams, k: int) -> list[ScoredFile]:
    """The ``k`` best memories by fused score (best first, ties by name). ``lexical``: BM25 top
    list; ``similarities``: name -> best-chunk cosine for every embedded memory; ``lengths``:
    name -> characters (a memory missing there counts as short)."""
    if not similarities:
        return list(lexical[:k])
    names = list(similarities)
    sims = np.fromiter((similarities[n] for n in names), dtype=np.float64, count=len(names))
    base = float(np.median(sims))
    top = float(sims.max())
    # The best cosine maps to exactly 1 (x / x == 1.0 in floats): a memory first by meaning and by
    # words then scores 1.0, the most any memory can, so the fusion never ranks it below another.
    # A floor under ``span`` broke that when the cosines were nearly tied.
    span = top - base
    words = {s.file: s.score for s in lexical}
    best_words = max(words.values(), default=0.0)
    order = np.argsort(-sims, kind="stable")[:DENSE_CANDIDATES]
    candidates = dict.fromkeys([*(names[int(i)] for i in order), *words])
    scored: list[ScoredFile] = []
    for name in candidates:
        w = weight_for(int(lengths.get(name, 0)), params)
        lex = words.get(name, 0.0) / best_words if best_words > 0 else 0.0
        cos = similarities.get(name)
        dense = min(1.0, max(0.0, (cos - base) / span)) if cos is not None and span > 0 else 0.0
        scored.append(ScoredFile(name, (1 - w) * lex + w * dense))
    scored.sort(key=lambda s: (-s.score, s.file))
    return scored[:k]


def confident(ranked: Sequence[ScoredFile], max_files: int, margin: float) -> bool:
    """The fused ranking needs no second opinion: at most ``max_files`` candidates, or the first
    leads the second by ``margin`` (absolute, on the fused [0, 1] scale)."""
    if len(ranked) <= max_files:
        return True
    return ranked[0].score - ranked[1].score >= margin


__all__ = ["FUSED_MARGIN", "WORDS_COVER", "FusionParams", "below_floor", "confident", "fuse_scores", "weight_for"]
