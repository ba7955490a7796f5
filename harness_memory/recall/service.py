"""Recall for one user's query, wired to the services: manifests, light model, surfaced tracking.

Why it reuses the caller's manifest: ``build_agent`` has already read the user's manifest for the
MEMORY.md prompt; recall then costs the shared place's manifest (cached per pod for
``services.SHARED_VIEW_TTL`` s), one light-model call, and one GET per chosen file (concurrent).
Shared-place memories take part under the names ``shared/<file>`` (as the tools name them).

Nothing here may fail the agent: every error is logged and the result is an empty block.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..memdir import Manifest, MemoryDir
from .context import SHARED_PREFIX, Bodies, load_recalled
from .insight import RecallDecision, decision_of
from .ranking import PlaceRanker, places_for
from .select import find_relevant_memories
from .semantic import semantic_tier
from .surfaced import SurfacedTracker

if TYPE_CHECKING:
    from ..config import MemoryConfig
    from ..llm import LightModel
    from ..memdir import CappedText
    from ..observe import Telemetry
    from .semantic import SemanticTier

log = logging.getLogger(__name__)


class RecallRoot(Protocol):
    """What recall uses of the composition root (``MemoryServices`` is one): config, telemetry,
    the ``io`` and ``work`` pools, the user's and shared places, the shared-view cache, the light
    model, the surfaced tracker and the semantic tier."""

    config: MemoryConfig
    telemetry: Telemetry
    io: Executor
    work: Executor

    def user_agent_dir(self, user_id: str, agent_type: str = "default") -> MemoryDir: ...

    def shared_agent_dir(self, agent_type: str = "default") -> MemoryDir: ...

    def shared_view(self, shared: MemoryDir) -> tuple[Manifest, CappedText]: ...

    def light_model(self) -> LightModel | None: ...

    def surfaced_tracker(self) -> SurfacedTracker: ...

    def semantic(self) -> SemanticTier | None: ...

@dataclass(frozen=True, slots=True)
class RecallResult:
    """What recall put into the context: the block and the files in it (in order)."""

    text: str
    files: tuple[str, ...]
    chosen: tuple[str, ...]  # what selection returned (a file may then be unreadable or cut for space)


EMPTY = RecallResult("", (), ())


class _LazySnippets(Mapping[str, str]):
    """The ranker's body snippets, gathered only if the model is actually asked."""

    def __init__(self, ranker: PlaceRanker) -> None:
        self._ranker = ranker
        self._data: dict[str, str] | None = None

    def _all(self) -> dict[str, str]:
        if self._data is None:
            self._data = self._ranker.snippets()
        return self._data

    def __getitem__(self, key: str) -> str:
        return self._all()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


def surfaced_tracker(services: RecallRoot) -> SurfacedTracker:
    """The services' surfaced-file tracker (``services.surfaced_tracker()``; Redis-backed when
    Redis is configured)."""
    return services.surfaced_tracker()


def cached_shared_manifest(services: RecallRoot, shared: MemoryDir) -> Manifest:
    """The shared place's manifest (cached per pod: ``MemoryServices.shared_view``)."""
    return services.shared_view(shared)[0]


def combined_manifest(own: Manifest, shared: Manifest | None) -> Manifest:
    """The user's entries plus the shared place's under ``shared/<file>`` (the tools' names)."""
    entries = {f: e for f, e in own.entries.items() if not f.startswith(SHARED_PREFIX)}
    if shared is not None:
        for file, entry in shared.entries.items():
            name = SHARED_PREFIX + file
            entries[name] = dataclasses.replace(entry, file=name)
    return Manifest(entries=entries, updated_at=max(own.updated_at, shared.updated_at if shared else 0.0))


def recall(
    services: RecallRoot,
    user_id: str,
    agent_type: str,
    query: str,
    *,
    session_id: str | None = None,
    manifest: Manifest | None = None,
    bodies: Bodies | None = None,
) -> RecallResult:
    """Choose, read and render the memories relevant to ``query``; marks them surfaced in the session.

    Raises on store errors (``recall_for_query`` is the never-raising wrapper).
    """
    with services.telemetry.recall(user_id, session_id) as op:
        result = _recall(services, user_id, agent_type, query, session_id, manifest, op, bodies)
        op.outcome = "hit" if result.files else "empty"
        return result


def _recall(services: RecallRoot, user_id: str, agent_type: str, query: str, session_id: str | None,
            manifest: Manifest | None, op: Any, bodies: Bodies | None = None) -> RecallResult:
    cfg = services.config.recall
    if not cfg.enabled or not query or not query.strip():
        return EMPTY
    own = services.user_agent_dir(user_id, agent_type)
    shared = services.shared_agent_dir(agent_type)
    if manifest is None:
        manifest = own.manifest()
    combined = combined_manifest(manifest, cached_shared_manifest(services, shared))
    if not combined.entries:
        return EMPTY
    tracker = surfaced_tracker(services) if session_id else None
    surfaced = (tracker.surfaced(session_id, user_id=user_id, agent_type=agent_type)
                if tracker is not None and session_id else frozenset())
    paths: list[str] = []

    def on_path(path: str) -> None:
        paths.append(path)
        op.path = path
    model = services.light_model() if cfg.use_model else None
    ranker = None
    if cfg.body_search:
        shared_manifest = cached_shared_manifest(services, shared)
        ranker = PlaceRanker(places_for(own, manifest, shared, shared_manifest), semantic_tier(services))
    chosen = find_relevant_memories(query, combined, already_surfaced=surfaced, model=model,
                                    max_files=cfg.max_files, timeout=cfg.model_timeout,
                                    max_candidates=cfg.max_candidates, model_above=cfg.model_above,
                                    on_path=on_path, ranker=ranker,
                                    snippets=_LazySnippets(ranker) if ranker is not None else None,
                                    confident_margin=cfg.confident_margin)
    if not chosen:
        _note(services, user_id, agent_type, session_id, query, paths, ranker, chosen, (), len(surfaced))
        return EMPTY
    text, rendered = load_recalled(own, chosen, config=cfg, shared=shared, entries=combined.entries,
                                   executor=services.io, bodies=bodies)
    files = tuple(r.file for r in rendered)
    _note(services, user_id, agent_type, session_id, query, paths, ranker, chosen, files, len(surfaced))
    log.debug("recall for %s/%s: chose %s, rendered %s", user_id, agent_type, chosen, files)
    return RecallResult(text, files, tuple(chosen))


def _note(services: RecallRoot, user_id: str, agent_type: str, session_id: str | None, query: str,
          paths: list[str], ranker: PlaceRanker | None, chosen: list[str], files: tuple[str, ...],
          surfaced: int) -> None:
    """Mark ``files`` surfaced in the session, and record when they were recalled and (with a
    session) why: one Redis round trip, or this pod's memory (``insight``); never the store."""
    tracker = services.surfaced_tracker()
    decision = _decision(query, paths, ranker, chosen, files, surfaced) if session_id else None
    if session_id and files:
        tracker.mark(session_id, files, user_id=user_id, agent_type=agent_type, decision=decision)
        return
    try:
        tracker.insight.record(user_id, agent_type, files, session_id=session_id, decision=decision)
    except Exception as exc:  # insight is for people; recall goes on without it
        log.info("recall: could not record recall insight (%s: %s)", type(exc).__name__, exc)


def _decision(query: str, paths: list[str], ranker: PlaceRanker | None, chosen: list[str],
              files: tuple[str, ...], surfaced: int) -> RecallDecision | None:
    """What the ranker last computed and which path chose, for the "why" view (None: not available)."""
    try:
        path = paths[-1] if paths else "none"
        if ranker is None:
            return decision_of(query, path, chosen, files, surfaced=surfaced)
        return decision_of(query, "floor" if ranker.last_floor else path, chosen, files, surfaced=surfaced,
                           ranked=ranker.last_ranked, lexical=ranker.last_lexical,
                           similarities=ranker.last_similarities, fused=ranker.last_fused)
    except Exception as exc:  # insight is for people; recall goes on without it
        log.info("recall: could not describe the recall decision (%s: %s)", type(exc).__name__, exc)
        return None


def recall_for_query(
    services: RecallRoot,
    user_id: str,
    agent_type: str,
    query: str,
    session_id: str | None = None,
    manifest: Manifest | None = None,
    bodies: Bodies | None = None,
) -> str:
    """The recalled-memories block for ``query`` ("" when nothing is relevant or anything fails).

    ``manifest`` is the user's own manifest when the caller has already read it (saves a GET).
    With ``session_id`` files surfaced earlier in the session are skipped, and the ones put in
    now are remembered. ``bodies``: the pod's body cache (``memdir.versions.WarmViews.body``).
    """
    try:
        return recall(services, user_id, agent_type, query, session_id=session_id, manifest=manifest,
                      bodies=bodies).text
    except Exception as exc:  # recall must never fail the agent
        log.warning("recall for user %s failed (%s: %s); continuing without recalled memories",
                    user_id, type(exc).__name__, exc)
        return ""


__all__ = ["RecallResult", "cached_shared_manifest", "combined_manifest", "recall", "recall_for_query",
           "surfaced_tracker"]
