"""MEMORY.md and the machine-readable manifest beside it.

Why a manifest: building an agent must read few objects (DESIGN.md). The manifest
(``.manifest.json``) holds one entry per memory file (name, description, type, size, times and
a few frontmatter extras such as confidence), so the prompt, recall and auto-memory injection
need one GET per place, never one per file. MEMORY.md is rendered from the manifest on every
write: the human-readable view, and the fallback when a place has no manifest (a snapshot
copied by hand, an older tree).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import MemoryFormatError
from .model import MemoryFile, MemoryType, clean_line

MANIFEST_VERSION = 1
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
    #: Id of the last commit that wrote files: the commit point of its intent record
    #: (``intent.py``). Not in ``meta``, so exports and imports never carry it.
    txn: str = ""

    def sorted_entries(self) -> list[ManifestEntry]:
        return [self.entries[k] for k in sorted(self.entries)]

    def to_bytes(self) -> bytes:
        payload = {
            "version": MANIFEST_VERSION,
            "updated_at": self.updated_at,
            "meta": self.meta,
            "txn": self.txn,
            "entries": [e.to_dict() for e in self.sorted_entries()],
        }
        return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        try:
            payload = json.loads(data.decode("utf-8"))
            entries = {}
            for raw in payload.get("entries", []):
                # Positional, not ``**{k: raw[k] for k in __slots__}``: ~30% faster on a 1,000-entry
                # manifest, which every agent build parses. Missing required keys still raise KeyError.
                entry = ManifestEntry(raw["file"], raw["name"], raw["description"], raw["type"],
                                      raw.get("size", 0), raw.get("created_at", 0.0), raw.get("updated_at", 0.0),
                                      raw.get("extra", {}))
                entries[entry.file] = entry
            meta = payload.get("meta") or {}
            return cls(entries=entries, updated_at=float(payload.get("updated_at", 0.0)),
                       meta=meta if isinstance(meta, dict) else {}, txn=str(payload.get("txn") or ""))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise MemoryFormatError(f"the memory manifest is damaged ({exc}); run `harness-memory reindex`")\
                from None


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


def render_index(manifest: Manifest, title: str = "Memory index") -> str:
    """The MEMORY.md text: one line per memory, in file-name order."""
    lines = [f"# {title}", ""]
    lines += [index_line(e) for e in manifest.sorted_entries()]
    return "\n".join(lines) + "\n"


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
    total = len(lines)
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
