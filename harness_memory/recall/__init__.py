"""Relevant recall: pick at most five memory files for the user's message and put their text in context.

Pipeline: ``find_relevant_memories`` ranks with ``ranking.PlaceRanker`` — BM25 over each place's
search index (``harness_memory/search``: name, description and the whole body, jieba-aware),
fused with the semantic tier's similarities when an embeddings endpoint is configured
(``semantic.py``, ``fusion.py``: calibrated, length-aware weights and a relevance floor) — and asks
the light model (one line plus a body snippet per candidate) only
when the ranking leaves a real choice and the model's measured latency fits the deadline →
``load_recalled_context`` (one GET per file, concurrent; per-file and total caps; a staleness note
on memories older than a day) → ``SurfacedTracker`` (files already surfaced in a session are not
repeated; Redis SET with the session TTL when Redis is configured, else a bounded in-process map).
``recall_for_query`` runs it all for one user and never raises.

Build time or per run? Both are offered, for different shapes of app:

* **Build time** (``recall_for_query`` from ``build_agent(..., query=...)``): the block is appended
  to the Agent's ``additional_context`` (the system prompt). Right when an app builds an Agent per
  request, which is how harness-memory is meant to be used: the query is known at build time and
  the system prompt is the natural place for background knowledge.
* **Per run** (``make_recall_pre_hook``): for a long-lived Agent (AgentOS, one Agent serving many
  runs/users). agno 3.1 lets a pre-hook change the run's input but offers no per-run, concurrency-
  safe way to add to the system context, so the hook prepends the block (fenced in
  ``<recalled-memories>``) to the user message. It is a ``BaseGuardrail`` so that agno runs it inline
  before the model in both ``run()`` and ``arun()`` and even in background-hooks mode. See
  ``recall/hook.py`` for the agno details and caveats.

``make_recall_pre_hook`` / ``RecallPreHook`` are imported lazily (they import agno).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .lexical import clear_caches
from .select import find_relevant_memories
from .service import RecallResult, recall, recall_for_query
from .surfaced import SurfacedTracker
from .tokenize import tokenize, warm_up

if TYPE_CHECKING:
    from .hook import RecallPreHook, make_recall_pre_hook


def __getattr__(name: str) -> Any:
    if name in ("RecallPreHook", "make_recall_pre_hook"):
        from . import hook

        return getattr(hook, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: What users and the layers above use; the parts (ranking, selection, context) are imported from
#: their modules.
__all__ = [
    "RecallPreHook",
    "RecallResult",
    "SurfacedTracker",
    "clear_caches",
    "find_relevant_memories",
    "make_recall_pre_hook",
    "recall",
    "recall_for_query",
    "tokenize",
    "warm_up",
]
