"""Choosing at most five memory files for a query: the light model first, BM25 when it cannot.

Why the model sees only one line per memory (type, file name, modified time, description): the
descriptions are written to judge relevance without opening the file, one line each keeps the
request small and fast, and bodies may hold things that should not leave the store just to rank
them. With more memories than ``max_candidates`` the lines shown are pre-filtered (best BM25
matches first, then the most recently modified) so the request stays bounded.

The answer is untrusted: names not in the manifest (invented, or another user's) are dropped, so
are files already surfaced in this session, and at most ``max_files`` are kept. When no model is
configured, it fails (timeout, HTTP error) or its answer is unusable (no JSON list, or only
invented names), the BM25 ranking answers instead. A well-formed empty list is respected: the
model judged nothing relevant.
"""

from __future__ import annotations

import datetime as dt
import logging
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ..escape import inline
from ..llm import LightModel, LLMError, extract_json
from ..memdir import Manifest, ManifestEntry
from .lexical import lexical_rank

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
                      exclude: frozenset[str] = frozenset()) -> list[ManifestEntry]:
    """At most ``limit`` entries for the model, ``exclude`` left out: the best BM25 matches, then the
    most recent; listed newest first."""
    allowed = [e for e in entries if e.file not in exclude]
    if len(allowed) <= limit:
        chosen = allowed
    else:
        by_file = {e.file: e for e in allowed}
        # ranked over ALL entries (the cached index), so a session's surfaced set costs no rebuild
        picked = [by_file[s.file] for s in lexical_rank(query, entries, k=limit, exclude=exclude)]
        seen = {e.file for e in picked}
        for e in sorted(allowed, key=lambda e: e.updated_at, reverse=True):
            if len(picked) >= limit:
                break
            if e.file not in seen:
                picked.append(e)
                seen.add(e.file)
        chosen = picked
    return sorted(chosen, key=lambda e: (-e.updated_at, e.file))


def build_messages(query: str, entries: Sequence[ManifestEntry], max_files: int) -> list[dict[str, str]]:
    """The chat request for the light model: instructions, then the query and one line per memory."""
    q = query.strip()
    if len(q) > QUERY_MAX_CHARS:
        q = q[:QUERY_MAX_CHARS] + " …"
    lines = "\n".join(manifest_line(e) for e in entries)
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


def find_relevant_memories(
    query: str,
    manifest: Manifest,
    *,
    already_surfaced: Iterable[str] = (),
    model: LightModel | None = None,
    max_files: int = MAX_FILES,
    bodies: Mapping[str, str] | None = None,
    timeout: float = 8.0,
    max_candidates: int = 200,
    model_above: int = 0,
    on_path: Callable[[str], None] | None = None,
) -> list[str]:
    """At most ``max_files`` (≤ 5) file names of ``manifest`` relevant to ``query``, best first.

    ``already_surfaced`` files are never returned (nor shown to the model). ``bodies`` (file →
    text), when the caller has them, improve the lexical ranking; they are never sent to the model.
    Never raises for a model failure: the lexical ranking answers instead. The model is only asked
    when more than ``model_above`` memories are candidates: choosing among a handful is not worth a
    model call (the lexical ranking returns only files that share words with the query).
    ``on_path`` is told which path answered: ``model``, ``lexical`` or ``fallback`` (the model
    was asked but failed or answered unusably, so the lexical ranking answered).
    """
    max_files = max(1, min(int(max_files), MAX_FILES))
    surfaced = frozenset(already_surfaced)
    entries = manifest.sorted_entries()
    if not query or not query.strip() or all(e.file in surfaced for e in entries):
        return []
    candidates = sum(1 for e in entries if e.file not in surfaced)
    if model is not None and candidates > model_above:
        picked = _ask_model(query, entries, surfaced, manifest.entries, model, max_files, timeout,
                            max_candidates)
        if picked is not None:
            if on_path is not None:
                on_path("model")
            return [f for f in picked if f not in surfaced][:max_files]
        if on_path is not None:
            on_path("fallback")
    elif on_path is not None:
        on_path("lexical")
    return [s.file for s in lexical_rank(query, entries, k=max_files, exclude=surfaced, bodies=bodies)]


def _ask_model(query: str, entries: list[ManifestEntry], surfaced: frozenset[str],
               known: Mapping[str, ManifestEntry], model: LightModel, max_files: int, timeout: float,
               max_candidates: int) -> list[str] | None:
    """The model's pick, or None when it failed or answered unusably (the caller falls back)."""
    shown = candidate_entries(query, entries, max_candidates, surfaced)
    try:
        result = model.complete(build_messages(query, shown, max_files), json_mode=True,
                                max_tokens=ANSWER_MAX_TOKENS, timeout=timeout, purpose="recall")
    except LLMError as exc:
        log.info("recall: light model unavailable (%s); using lexical ranking", exc)
        return None
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


__all__ = ["SYSTEM_PROMPT", "build_messages", "candidate_entries", "find_relevant_memories", "format_time",
           "manifest_line", "resolve_names"]
