"""Choosing at most five memory files for a query: the light model first, BM25 when it cannot.

Why the model sees one line per memory (type, file name, modified time, description) plus, when
the place's search index has it, the first ~160 characters of the body: the descriptions are
written to judge relevance without opening the file, and a short head of the body settles the
cases a description leaves open while keeping the request small. At most ``max_candidates``
lines are shown (the best matches first, then the most recently modified).

Why the model is often not asked: a ranking over whole bodies is usually right on its own. When
nothing or at most ``max_files`` memories match, or the best match leads the next clearly
(``skip_reason``), the ranking answers; so it does while the model's measured latency cannot meet
the deadline (``llm_latency``). The model is asked when there is a real choice to make.

The answer is untrusted: names not in the manifest (invented, or another user's) are dropped, so
are files already surfaced in this session, and at most ``max_files`` are kept. When no model is
configured, it fails (timeout, HTTP error) or its answer is unusable (no JSON list, or only
invented names), the BM25 ranking answers instead. A well-formed empty list is respected: the
model judged nothing relevant.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..escape import inline
from ..llm import LightModel, LLMError, extract_json
from ..llm_latency import TRACKER
from ..memdir import Manifest, ManifestEntry
from .lexical import ScoredFile, lexical_rank

log = logging.getLogger(__name__)

MAX_FILES = 5
QUERY_MAX_CHARS = 2000
ANSWER_MAX_TOKENS = 300
_LIST_KEYS = ("files", "selected_memories", "selected", "memories", "file_names", "names")

SYSTEM_PROMPT = """You select memory files that will help an AI assistant answer the user's message.
You are given the user's message and a list of saved memories, one per line:
[type] file name (last modified) — description

Return a JSON object {{"files": ["file-name.md", ...]}} with AT MOST {max_files} file names, most useful
first, copied exactly from the list. Include a memory only if it is clearly useful for this message
(the user's preferences that apply, earlier decisions or corrections about this topic, where to find
something asked about). If none is clearly useful, return {{"files": []}}. Never invent file names."""


def format_time(ts: float) -> str:
    """Unix seconds as an ISO UTC timestamp (``2026-11-02T10:00:00Z``), ``unknown`` for 0."""
    if not ts or ts <= 0:
        return "unknown"
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def manifest_line(entry: ManifestEntry) -> str:
    """``- [user] user_role.md (2026-11-02T10:00:00Z) — The user's role``"""
    kind = inline(entry.type) or "unknown"
    desc = inline(entry.description or entry.name)  # memory text: one line, no tag of ours
    return f"- [{kind}] {entry.file} ({format_time(entry.updated_at)}) — {desc}"


def candidate_entries(query: str, entries: Sequence[ManifestEntry], limit: int,
                      exclude: frozenset[str] = frozenset(), ranked: Sequence[ScoredFile] | None = None
                      ) -> list[ManifestEntry]:
    """At most ``limit`` entries for the model, ``exclude`` left out: the best matches (``ranked``,
    else BM25 over the manifest lines), then the most recent; listed newest first."""
    allowed = [e for e in entries if e.file not in exclude]
    if len(allowed) <= limit:
        chosen = allowed
    else:
        by_file = {e.file: e for e in allowed}
        if ranked is None:  # ranked over ALL entries (the cached index): a surfaced set costs no rebuild
            ranked = lexical_rank(query, entries, k=limit, exclude=exclude)
        picked = [by_file[s.file] for s in ranked[:limit] if s.file in by_file]
        seen = {e.file for e in picked}
        for e in sorted(allowed, key=lambda e: e.updated_at, reverse=True):
            if len(picked) >= limit:
                break
            if e.file not in seen:
                picked.append(e)
                seen.add(e.file)
        chosen = picked
    return sorted(chosen, key=lambda e: (-e.updated_at, e.file))


def build_messages(query: str, entries: Sequence[ManifestEntry], max_files: int,
                   snippets: Mapping[str, str] | None = None) -> list[dict[str, str]]:
    """The chat request for the light model: instructions, then the query and one line per memory
    (with the first words of its body beneath, when ``snippets`` has them)."""
    q = query.strip()
    if len(q) > QUERY_MAX_CHARS:
        q = q[:QUERY_MAX_CHARS] + " …"
    rows = []
    for e in entries:
        snippet = snippets.get(e.file) if snippets else None
        rows.append(manifest_line(e) + (f"\n    begins: {snippet}" if snippet else ""))
    lines = "\n".join(rows)
    user = f"User message:\n{q}\n\nMemories ({len(entries)}):\n{lines}\n\nAnswer with the JSON object only."
    return [{"role": "system", "content": SYSTEM_PROMPT.format(max_files=max_files)},
            {"role": "user", "content": user}]


def _answer_names(parsed: Any) -> list[str] | None:
    """The list of names in a parsed answer, or None when the answer has no usable list."""
    items: Any = None
    if isinstance(parsed, list):
        items = parsed
    elif isinstance(parsed, dict):
        for key in _LIST_KEYS:
            if isinstance(parsed.get(key), list):
                items = parsed[key]
                break
        else:
            lists = [v for v in parsed.values() if isinstance(v, list)]
            items = lists[0] if len(lists) == 1 else None
    if items is None:
        return None
    names: list[str] = []
    for item in items:
        if isinstance(item, dict):
            item = item.get("file") or item.get("file_name") or item.get("name")
        if isinstance(item, str) and item.strip():
            names.append(item.strip())
    return names


def resolve_names(names: Iterable[str], known: Mapping[str, ManifestEntry]) -> list[str]:
    """Map the model's names onto manifest file names; unknown ones are dropped.

    Tolerates the slips small models make: a leading ``./``, a missing ``.md``, other letter case,
    or decomposed Unicode. Order is kept, duplicates removed.
    """
    lower = {f.lower(): f for f in known}
    out: list[str] = []
    for raw in names:
        name = unicodedata.normalize("NFC", raw.strip().strip("`'\"")).removeprefix("./")
        match = None
        for candidate in (name, name + ".md"):
            match = candidate if candidate in known else lower.get(candidate.lower())
            if match:
                break
        if match and match not in out:
            out.append(match)
    return out


#: Ranks the memories for a query: (query, k, excluded names) → best first, positive scores only.
Ranker = Callable[[str, int, frozenset[str]], list[ScoredFile]]


def skip_reason(ranked: Sequence[ScoredFile], max_files: int, margin: float | None) -> str | None:
    """Why the model need not pick (``confident``), or None when the ranking leaves a real choice.

    Confident: nothing matches (the model would be shown only recent lines), at most ``max_files``
    match (all are returned anyway), or the best match leads the next by at least ``margin`` of
    its score (normalised: ``1 - s2/s1``). ``margin`` None: never confident (always ask)."""
    if margin is None:
        return None
    if len(ranked) <= max_files:
        return "confident"
    top, second = ranked[0].score, ranked[1].score
    if top > 0 and 1 - second / top >= margin:
        return "confident"
    return None


def find_relevant_memories(
    query: str,
    manifest: Manifest,
    *,
    already_surfaced: Iterable[str] = (),
    model: LightModel | None = None,
    max_files: int = MAX_FILES,
    bodies: Mapping[str, str] | None = None,
    timeout: float = 8.0,
    max_candidates: int = 30,
    model_above: int = 0,
    on_path: Callable[[str], None] | None = None,
    ranker: Ranker | None = None,
    snippets: Mapping[str, str] | None = None,
    confident_margin: float | None = None,
) -> list[str]:
    """At most ``max_files`` (≤ 5) file names of ``manifest`` relevant to ``query``, best first.

    ``already_surfaced`` files are never returned (nor shown to the model). ``ranker`` (recall
    passes the places' search index: name, description and whole body) ranks the files; without
    it BM25 over the manifest lines (and ``bodies``, file → text, when given) does. ``snippets``
    (file → the first words of its body) are shown to the model beside each description.
    The model is asked only when more than ``model_above`` memories are candidates, the ranking
    is not confident (``skip_reason`` with ``confident_margin``) and its measured latency can meet
    ``timeout`` (``llm_latency``). Never raises for a model failure: the ranking answers instead.
    ``on_path`` is told which path answered: ``model``; ``lexical`` (no model, or too few
    candidates); ``confident`` / ``slow`` (the model was skipped for that reason); ``fallback``
    (the model was asked but failed or answered unusably).
    """
    max_files = max(1, min(int(max_files), MAX_FILES))
    surfaced = frozenset(already_surfaced)
    known = manifest.entries
    candidates = len(known) - sum(1 for f in surfaced if f in known)
    if not query or not query.strip() or candidates <= 0:
        return []
    entries = manifest.sorted_entries() if ranker is None or model is not None else []

    def rank(k: int) -> list[ScoredFile]:
        if ranker is not None:
            return ranker(query, k, surfaced)
        return lexical_rank(query, entries, k=k, exclude=surfaced, bodies=bodies)

    def tell(path: str) -> None:
        if on_path is not None:
            on_path(path)

    if model is None or candidates <= model_above:
        tell("lexical")
        return [s.file for s in rank(max_files)]
    ranked = rank(max(max_candidates, max_files + 1))
    reason = skip_reason(ranked, max_files, confident_margin)
    rule = getattr(ranker, "confident", None)  # a fused ranking brings its own rule (recall/fusion.py)
    verdict = rule(ranked, max_files) if callable(rule) and confident_margin is not None else None
    if verdict is not None:
        reason = "confident" if verdict else None
    if reason is None and not TRACKER.can_meet(_model_key(model), "recall", timeout):
        reason = "slow"
        log.info("recall: the light model's measured latency (%.1f s) cannot meet the %.1f s deadline; "
                 "using the ranking", TRACKER.expected(_model_key(model), "recall") or 0.0, timeout)
    if reason is not None:
        tell(reason)
        return [s.file for s in ranked[:max_files]]
    shown = candidate_entries(query, entries, max_candidates, surfaced, ranked)
    picked = _ask_model(query, shown, manifest.entries, model, max_files, timeout, snippets)
    if picked is not None:
        tell("model")
        return [f for f in picked if f not in surfaced][:max_files]
    tell("fallback")
    return [s.file for s in ranked[:max_files]]


def _model_key(model: LightModel) -> str:
    """Latency is the model's at that endpoint (the same id may be served fast and slow)."""
    return f"{model.model}@{model.base_url}"


def _ask_model(query: str, shown: list[ManifestEntry], known: Mapping[str, ManifestEntry], model: LightModel,
               max_files: int, timeout: float, snippets: Mapping[str, str] | None) -> list[str] | None:
    """The model's pick, or None when it failed or answered unusably (the caller falls back).
    Its latency is recorded (a failure counts as the whole deadline) for ``llm_latency``."""
    started = time.monotonic()
    try:
        result = model.complete(build_messages(query, shown, max_files, snippets), json_mode=True,
                                max_tokens=ANSWER_MAX_TOKENS, timeout=timeout, purpose="recall")
    except LLMError as exc:
        TRACKER.record(_model_key(model), "recall", max(timeout, time.monotonic() - started))
        log.info("recall: light model unavailable (%s); using lexical ranking", exc)
        return None
    TRACKER.record(_model_key(model), "recall", time.monotonic() - started)
    names = _answer_names(extract_json(result.text))
    if names is None:
        log.info("recall: light model answer has no file list (%d chars); using lexical ranking", len(result.text))
        return None
    picked = resolve_names(names, known)
    invented = len(names) - len(picked)
    if invented:
        log.info("recall: dropped %d name(s) not in the manifest from the model's answer", invented)
    if names and not picked:
        return None  # only invented names: a bad answer
    return picked


__all__ = ["SYSTEM_PROMPT", "Ranker", "build_messages", "candidate_entries", "find_relevant_memories", "format_time",
           "manifest_line", "resolve_names", "skip_reason"]
