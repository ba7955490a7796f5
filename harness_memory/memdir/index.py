"""MEMORY.md and the machine-readable manifest beside it (the in-memory form).

Why a manifest: building an agent must read few objects (DESIGN.md). The manifest holds one
entry per memory file (name, description, type, size, times and a few frontmatter extras such as
confidence), so the prompt, recall and auto-memory injection need one GET per place, never one per
file. How it is stored — a small head (``.manifest.json``) that is the commit point, plus an
immutable base for large places, so a save costs O(changed entries) — is ``stored.py``.
MEMORY.md is rendered from the manifest: the human-readable view, and the fallback when a place
has no manifest (a snapshot copied by hand, an older tree).

Entries are shared between manifests (a pod caches a large place's base and hands every load a
shallow copy of it), so code changes a manifest by putting new ``ManifestEntry`` objects in
``entries``, never by assigning to an entry's fields.
"""

from __future__ import annotations

import bisect
import heapq
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .model import MemoryFile, MemoryType, clean_line
from .redo import Redo

#: 3: the head carries the redo record of its commit (``redo.py``); 2: head + base; 1: one object.
MANIFEST_VERSION = 3
#: Commit ids a head remembers besides its own (``Manifest.recent``): ~300 bytes, and enough for
#: any writer to read the head back well before that many commits land on top of its own.
RECENT_TXIDS = 16
# Frontmatter keys copied into the manifest so readers need not open the file.
MANIFEST_EXTRA_KEYS = ("confidence", "category", "source", "source_error", "created", "updated", "tags",
                       "confirmed", "confirmations", "expires")
#: Bound on one entry's copied frontmatter extras (JSON bytes): an entry stays a few KB at most,
#: so one odd file cannot make every later save of its place slow.
MAX_ENTRY_EXTRA_BYTES = 2048
_INDEX_LINE = re.compile(r"^\s*-\s*\[(?P<name>[^\]]*)\]\((?P<file>[^)]+)\)\s*(?:[—-]+\s*(?P<desc>.*))?$")


@dataclass(slots=True)
class ManifestEntry:
    file: str
    name: str
    description: str
    type: str
    size: int = 0
    created_at: float = 0.0
    updated_at: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_memory(cls, file: str, memory: MemoryFile, size: int, *, created_at: float | None = None,
                    now: float | None = None) -> ManifestEntry:
        now = time.time() if now is None else now
        extra = _bounded_extra(memory.extra)
        return cls(file=file, name=memory.name, description=memory.description, type=memory.type.value,
                   size=size, created_at=created_at if created_at is not None else now, updated_at=now,
                   extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The manifest JSON of this entry (what ``asdict`` gives, without its recursive deep copy,
        which made serialising a 1,000-entry manifest ~7x slower on every write)."""
        return {"file": self.file, "name": self.name, "description": self.description, "type": self.type,
                "size": self.size, "created_at": self.created_at, "updated_at": self.updated_at,
                "extra": self.extra}

    @property
    def memory_type(self) -> MemoryType | None:
        try:
            return MemoryType(self.type)
        except ValueError:
            return None


@dataclass(slots=True)
class Manifest:
    entries: dict[str, ManifestEntry] = field(default_factory=dict)
    updated_at: float = 0.0
    #: Free-form state kept beside the entries (snapshot sync info, auto-memory profile, ...).
    meta: dict[str, Any] = field(default_factory=dict)
    #: Id of the commit that wrote this head (with files or removals: its redo record's id).
    #: Not in ``meta``, so exports and imports never carry it.
    txn: str = ""
    #: Ids of the commits before ``txn``, newest first (at most ``RECENT_TXIDS``): a writer whose
    #: head PUT had an unclear answer finds its own commit here even when a later one landed on top
    #: (``txn.py``), so it never applies the same change twice.
    recent: list[str] = field(default_factory=list, repr=False)
    #: What the commit of this head writes after it (``redo.py``): the next holder completes it
    #: unless it is known done. None: that commit wrote no file.
    redo: Redo | None = field(default=None, repr=False)
    #: The manifest version of the head this was read from (< 3: written by an earlier release,
    #: whose undo record ``.intent.json`` may still need resolving).
    version: int = field(default=MANIFEST_VERSION, repr=False, compare=False)
    #: The stored form this manifest was loaded from (``stored.py``): the base generation it
    #: stands on (None: all entries inline in the head), the base's files in order, and the
    #: changes since that base (file -> entry, None when removed) that the head carries.
    base: str | None = field(default=None, repr=False)
    base_files: list[str] | None = field(default=None, repr=False)
    base_set: frozenset[str] | None = field(default=None, repr=False)
    delta: dict[str, ManifestEntry | None] = field(default_factory=dict, repr=False)
    #: The base before ``base`` (kept for readers still on it; removed at the next compaction).
    prev_base: str | None = field(default=None, repr=False)
    #: The etag of the head this manifest was read from or committed as (None: not stored yet).
    head_etag: str | None = field(default=None, repr=False, compare=False)

    def holds_commit(self, txid: str) -> bool:
        """Whether commit ``txid`` is this head's or one of the commits just before it."""
        return bool(txid) and (txid == self.txn or txid in self.recent)

    def sorted_files(self) -> Iterator[str]:
        """File names in order, lazily: the base's stored order merged with the names the changes
        added when the manifest stands on a base (O(changes) to start, so a capped render of a
        10,000-entry place touches ~200 names), else a sort. Falls back to the sort when the
        entries no longer add up to base + changes (changed without ``note_changes``)."""
        entries = self.entries
        base_files, base_set = self.base_files, self.base_set
        if base_files is None or base_set is None:
            return iter(sorted(entries))
        added = sorted(f for f, e in self.delta.items() if e is not None and f not in base_set)
        if not self._adds_up() or any(f not in entries for f in added):
            return iter(sorted(entries))
        return heapq.merge((f for f in base_files if f in entries), added)

    def first_under(self, folder: str, skip: set[str] | frozenset[str] = frozenset()) -> str | None:
        """An entry (not in ``skip``) whose name starts with ``folder`` (``"x.md/"``), or None:
        a binary search in the base's order plus the changes when standing on a base."""
        entries = self.entries
        files = self.base_files
        if files is None or not self._adds_up():
            return next((n for n in entries if n.startswith(folder) and n not in skip), None)
        i = bisect.bisect_left(files, folder)
        while i < len(files) and files[i].startswith(folder):
            if files[i] in entries and files[i] not in skip:
                return files[i]
            i += 1
        return next((f for f, e in self.delta.items()
                     if e is not None and f.startswith(folder) and f in entries and f not in skip), None)

    def _adds_up(self) -> bool:
        """The entries are the base plus the noted changes (else the base's order says nothing)."""
        base_set = self.base_set
        if base_set is None or self.base_files is None:
            return False
        added = sum(1 for f, e in self.delta.items() if e is not None and f not in base_set)
        gone = sum(1 for f in self.delta if f in base_set and f not in self.entries)
        return len(self.base_files) - gone + added == len(self.entries)

    def note_changes(self, changed: dict[str, ManifestEntry], removed: list[str]) -> None:
        """Record entries put or removed since the base (what the next head must carry)."""
        self.delta.update(changed)
        for file in removed:
            self.delta[file] = None

    def sorted_entries(self) -> list[ManifestEntry]:
        entries = self.entries
        return [entries[k] for k in self.sorted_files()]

    def to_bytes(self) -> bytes:
        """Every entry in one JSON object (the inline head; also a portable full copy)."""
        payload: dict[str, Any] = {
            "version": MANIFEST_VERSION,
            "updated_at": self.updated_at,
            "meta": self.meta,
            "txn": self.txn,
            "entries": [e.to_dict() for e in self.sorted_entries()],
        }
        if self.recent:
            payload["recent"] = self.recent
        if self.redo is not None:
            payload["redo"] = self.redo.to_json(inline=self.redo.object is None)
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

def entry_from_dict(raw: dict[str, Any]) -> ManifestEntry:
    """One entry of the inline (dict) form. Positional, not ``**{k: raw[k] for k in __slots__}``:
    ~30% faster on a 1,000-entry manifest. Missing required keys still raise KeyError."""
    return ManifestEntry(raw["file"], raw["name"], raw["description"], raw["type"], raw.get("size", 0),
                         raw.get("created_at", 0.0), raw.get("updated_at", 0.0), raw.get("extra", {}))


def _bounded_extra(front: dict[str, Any]) -> dict[str, Any]:
    """The manifest's copy of the known frontmatter extras, in key order, while they fit."""
    extra: dict[str, Any] = {}
    used = 0
    for key in MANIFEST_EXTRA_KEYS:
        if key not in front:
            continue
        size = len(json.dumps(front[key], ensure_ascii=False, default=str)) + len(key) + 4
        if used + size > MAX_ENTRY_EXTRA_BYTES:
            continue  # still in the file itself; only the index copy is skipped
        extra[key] = front[key]
        used += size
    return extra


def index_line(entry: ManifestEntry) -> str:
    """``- [name](file.md) — description`` (control and bidi characters removed, also from entries
    written before descriptions were cleaned)."""
    name = clean_line(entry.name).replace("]", ")").replace("[", "(")
    target = entry.file.replace(" ", "%20").replace(")", "%29")
    return f"- [{name}]({target}) — {clean_line(entry.description)}"


def index_lines(manifest: Manifest, title: str = "Memory index") -> Iterator[str]:
    """The MEMORY.md lines, lazily (a capped render stops after a few hundred). The lines of a
    base's unchanged entries are rendered once per pod (``_base_lines``), so re-rendering a
    large place's MEMORY.md on every commit costs a join, not 10,000 renders."""
    yield f"# {title}"
    yield ""
    entries = manifest.entries
    files = manifest.sorted_files()
    lines = _base_lines(manifest)
    if lines is None:
        for file in files:
            yield index_line(entries[file])
        return
    delta = manifest.delta
    for file in files:
        line = lines.get(file) if file not in delta else None
        yield line if line is not None else index_line(entries[file])


_LINES_CACHE = 16
_lines: OrderedDict[str, tuple[list[str], dict[str, str]]] = OrderedDict()  # by base generation
_lines_lock = threading.Lock()


def _base_lines(manifest: Manifest) -> dict[str, str] | None:
    """file -> index line for the base ``manifest`` stands on (None when inline). Keyed by the
    base's shared file list, which lives as long as the pod keeps the base."""
    files = manifest.base_files
    if files is None or len(files) < 256:
        return None
    with _lines_lock:
        hit = _lines.get(manifest.base or "")
        if hit is not None and hit[0] is files:  # the very list: not another store's base of that name
            _lines.move_to_end(manifest.base or "")
            return hit[1]
    entries = manifest.entries
    delta = manifest.delta
    # only entries unchanged since the base are the base's own: the others are rendered per call
    rendered = {f: index_line(entries[f]) for f in files if f in entries and f not in delta}
    with _lines_lock:
        _lines[manifest.base or ""] = (files, rendered)
        while len(_lines) > _LINES_CACHE:
            _lines.popitem(last=False)
    return rendered


def render_index(manifest: Manifest, title: str = "Memory index") -> str:
    """The MEMORY.md text: one line per memory, in file-name order. (A whole render sorts the
    names in C — the entries of a loaded manifest iterate in the base's order, so that is two
    runs merged — and takes the base's unchanged lines from the pod's render of it.)"""
    entries = manifest.entries
    files = sorted(entries)
    lines = _base_lines(manifest)
    if lines is None:
        body = [index_line(entries[f]) for f in files]
    else:
        delta = manifest.delta
        body = [(lines.get(f) if f not in delta else None) or index_line(entries[f]) for f in files]
    return "\n".join([f"# {title}", "", *body]) + "\n"


def capped_index(manifest: Manifest, max_lines: int = 200, max_bytes: int = 25_600) -> CappedText:
    """``cap_index(render_index(manifest))`` without rendering the lines past the cap."""
    return _cap(index_lines(manifest), len(manifest.entries) + 2, max_lines, max_bytes)


def parse_index(text: str) -> list[tuple[str, str, str]]:
    """(name, file, description) for each index line of a MEMORY.md (fallback reader)."""
    out = []
    for line in text.splitlines():
        m = _INDEX_LINE.match(line)
        if m:
            out.append((m["name"], m["file"].replace("%20", " ").replace("%29", ")"), (m["desc"] or "").strip()))
    return out


@dataclass(frozen=True, slots=True)
class CappedText:
    text: str
    truncated: bool
    total_lines: int


def cap_index(text: str, max_lines: int = 200, max_bytes: int = 25_600) -> CappedText:
    """Cut MEMORY.md to ``max_lines`` lines and ``max_bytes`` bytes, with a visible warning line.

    The cut happens at a line boundary, so the model never sees half an entry.
    """
    lines = text.splitlines()
    return _cap(iter(lines), len(lines), max_lines, max_bytes)


def _cap(lines: Iterator[str], total: int, max_lines: int, max_bytes: int) -> CappedText:
    kept: list[str] = []
    size = 0
    truncated = False
    for line in lines:
        line_bytes = len(line.encode("utf-8")) + 1
        if len(kept) >= max_lines or size + line_bytes > max_bytes:
            truncated = True
            break
        kept.append(line)
        size += line_bytes
    if truncated:
        kept.append(
            f"> WARNING: MEMORY.md is too long and was cut at {len(kept)} of {total} lines "
            f"(limit {max_lines} lines / {max_bytes // 1024} KB). Use list_files to see every memory, "
            "and merge or delete stale ones to keep the index short."
        )
    return CappedText("\n".join(kept), truncated, total)
