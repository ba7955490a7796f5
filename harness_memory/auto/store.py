"""Auto memory as memory files in an auto-memory place, written in one locked transaction.

Layout of a place (``users/<uid>/projects/<project>/memory/`` or the shared
``projects/<project>/memory/``):

* ``fact-<8 hex>.md`` — one fact per file. The fact text is the frontmatter ``description`` (so
  the manifest alone is enough to inject it); frontmatter also carries ``confidence``,
  ``category``, ``source``, ``source_error``, ``created``, ``updated``, ``confirmed`` (when the
  user last said or confirmed it), ``confirmations`` (how often) and ``expires`` (the last day a
  time-bound fact holds) — all copied into the manifest.
* ``profile.md`` — the six profile sections as ``## <title>`` parts. A copy of the sections
  sits in the manifest ``meta`` (stamped with the entry's ``updated_at``) so injection needs
  one GET; when someone edits ``profile.md`` through the tools or API the stamp no longer
  matches and the file itself is read.
* ``.auto-state.json`` — per-session watermarks (message keys already sent to the extractor).
  Kept out of the manifest because the manifest is read on every agent build and watermarks
  are only needed by the updater. Written under the same lock; losing it only means a message
  may be sent twice, and fact dedupe makes that harmless.

Why one transaction instead of ``MemoryDir.save`` per fact: an update touches several files;
the place lock is not re-entrant, and per-file saves would cost ~6 requests each. An update is
one ``PlaceTxn`` (memdir's single write path): the lock is taken once, the files are written,
the manifest is committed once (conditional PUT as a second guard) and MEMORY.md re-rendered
once; a failed manifest commit rolls the file writes back.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import MemoryFormatError, StorageError
from ..memdir import Manifest, ManifestEntry, MemoryDir, MemoryFile, MemoryType, PlaceTxn, TxnResult, parse_memory
from ..memdir.trash import keep_removed
from .history import MAX_HISTORY, UpdateRecord
from .model import FACT_PREFIX, PROFILE_FILE, Category, Fact, Profile, ProfileKey

log = logging.getLogger(__name__)

STATE_FILE = ".auto-state.json"
META_KEY = "auto_memory"
MAX_MARK_KEYS = 256
MAX_MARK_SESSIONS = 100
_SECTION_HEAD = re.compile(r"^##\s+(.+?)\s*$", re.MULTILINE)
_TITLE_TO_KEY = {k.title.lower(): k for k in ProfileKey} | {k.value.lower(): k for k in ProfileKey}


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def new_fact_id(taken: set[str] | dict[str, Fact]) -> str:
    while True:
        fid = FACT_PREFIX + uuid.uuid4().hex[:8]
        if fid not in taken:
            return fid


# -- facts and profile <-> memory files -------------------------------------------------------
def fact_from_entry(entry: ManifestEntry) -> Fact | None:
    """The fact a manifest entry stands for (None for the profile). Files without auto-memory
    frontmatter (written by hand) count as manual ``context`` facts."""
    if entry.file == PROFILE_FILE or not entry.file.endswith(".md"):
        return None
    extra = entry.extra or {}
    category = Category.parse(extra.get("category"))
    source = extra.get("source") if isinstance(extra.get("source"), str) else None
    if category is None:
        category, source = Category.CONTEXT, source or "manual"
    error = extra.get("source_error")
    count = extra.get("confirmations")
    return Fact(id=entry.file[:-3], content=entry.description, category=category,
                confidence=_confidence(extra.get("confidence"), 0.9 if source == "manual" else 0.5),
                source=source or "auto", source_error=error if isinstance(error, str) and error else None,
                created=_text(extra.get("created")), updated=_text(extra.get("updated")),
                stamp=entry.updated_at, confirmed=_text(extra.get("confirmed")),
                confirmations=count if isinstance(count, int) and not isinstance(count, bool) and count > 0 else 1,
                expires=_text(extra.get("expires")))


def _text(value: object) -> str:
    """A frontmatter time/date as text (YAML may have parsed it into a date object)."""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    return str(value) if value else ""


def _confidence(value: object, default: float) -> float:
    """A stored confidence in [0, 1]; anything else (text, bool, NaN, ±infinity) is the default."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return default
    try:
        number = float(value)
    except ValueError:
        return default
    return min(1.0, max(0.0, number)) if math.isfinite(number) else default


def fact_memory(fact: Fact, previous: MemoryFile | None = None) -> MemoryFile:
    """The memory file of ``fact``. Body: the fact, an ``Avoid:`` line for corrections, then any
    notes a person added to an existing file (kept, as are unknown frontmatter keys)."""
    extra: dict[str, object] = dict(previous.extra) if previous else {}
    extra.pop("source_error", None)
    extra.update(confidence=round(fact.confidence, 3), category=fact.category.value, source=fact.source)
    if fact.source_error:
        extra["source_error"] = fact.source_error
    extra.update(created=fact.created or now_iso(), updated=fact.updated or now_iso())
    for key in ("confirmed", "expires"):
        extra.pop(key, None)
    if fact.confirmed:
        extra["confirmed"] = fact.confirmed
    extra["confirmations"] = max(1, fact.confirmations)
    if fact.expires:
        extra["expires"] = fact.expires
    parts = [fact.content] + ([f"Avoid: {fact.source_error}"] if fact.source_error else [])
    if previous is not None:
        paragraphs = [p.strip() for p in previous.body.strip().split("\n\n") if p.strip()]
        parts += [p for p in paragraphs[1:] if not p.startswith("Avoid:")]
    return MemoryFile(name=f"auto {fact.category.value} fact", description=fact.content,
                      type=fact.category.memory_type, body="\n\n".join(parts), extra=extra)


def profile_memory(profile: Profile) -> MemoryFile:
    parts = [f"## {key.title}\n\n{text}" for key, text in profile.items()]
    return MemoryFile(name="user profile", type=MemoryType.USER,
                      description="Auto-maintained profile: work, personal, top of mind and history",
                      body="\n\n".join(parts) or "(empty)",
                      extra={"category": "profile", "source": "auto", "updated": now_iso()})


def parse_profile(body: str) -> Profile:
    sections: dict[ProfileKey, str] = {}
    heads = list(_SECTION_HEAD.finditer(body))
    for i, head in enumerate(heads):
        key = _TITLE_TO_KEY.get(head.group(1).strip().lower())
        end = heads[i + 1].start() if i + 1 < len(heads) else len(body)
        text = body[head.end() : end].strip()
        if key is not None and text:
            sections[key] = text
    return Profile(sections)


# -- watermarks ---------------------------------------------------------------------------------
@dataclass(slots=True)
class Watermarks:
    """Per session (``agent_type/session_id``): keys of messages already sent to the extractor.
    The state file also keeps the place's update history (``history.py``)."""

    sessions: dict[str, list[str]] = field(default_factory=dict)
    times: dict[str, float] = field(default_factory=dict)
    history: list[UpdateRecord] = field(default_factory=list)
    #: Batches the exit flush could not process, kept for the next start (``pending.py``).
    pending: list[dict[str, Any]] = field(default_factory=list)

    def record(self, entry: UpdateRecord) -> None:
        self.history = [*self.history, entry][-MAX_HISTORY:]

    def seen(self, wm_id: str) -> set[str]:
        return set(self.sessions.get(wm_id, ()))

    def mark(self, wm_id: str, keys: list[str], now: float) -> None:
        merged = [k for k in self.sessions.get(wm_id, []) if k not in set(keys)] + keys
        self.sessions[wm_id] = merged[-MAX_MARK_KEYS:]
        self.times[wm_id] = now
        if len(self.sessions) > MAX_MARK_SESSIONS:
            for old in sorted(self.times, key=self.times.__getitem__)[: len(self.sessions) - MAX_MARK_SESSIONS]:
                self.sessions.pop(old, None)
                self.times.pop(old, None)

    def to_bytes(self) -> bytes:
        data: dict[str, object] = {"version": 1, "sessions": {k: {"keys": v, "at": self.times.get(k, 0.0)}
                                                              for k, v in self.sessions.items()}}
        if self.history:
            data["history"] = [h.to_json() for h in self.history]
        if self.pending:
            data["pending"] = self.pending
        return json.dumps(data, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes | None) -> Watermarks:
        out = cls()
        if not data:
            return out
        try:
            whole = json.loads(data.decode("utf-8"))
            raw = whole.get("sessions", {})
            history = whole.get("history") or []
            records = [UpdateRecord.from_json(h) for h in (history if isinstance(history, list) else [])]
            out.history = [r for r in records if r is not None][-MAX_HISTORY:]
            pending = whole.get("pending") or []
            out.pending = [p for p in pending if isinstance(p, dict)] if isinstance(pending, list) else []
            for wm_id, item in raw.items():
                keys = [k for k in item.get("keys", []) if isinstance(k, str)]
                out.sessions[str(wm_id)] = keys[-MAX_MARK_KEYS:]
                out.times[str(wm_id)] = float(item.get("at", 0.0))
        except (ValueError, AttributeError, TypeError) as exc:
            log.warning("auto-memory watermarks unreadable (%s); starting afresh", exc)
            return cls()
        return out


# -- the place ----------------------------------------------------------------------------------
@dataclass(slots=True)
class AutoView:
    """What a place holds: facts by id and the profile (with the stamp it was read at)."""

    facts: dict[str, Fact] = field(default_factory=dict)
    profile: Profile = field(default_factory=Profile)
    profile_stamp: float = 0.0


class WarmPlaces(Protocol):
    """The pod's warm views (``memdir.versions.WarmViews``): manifests served while Redis confirms
    their version, and state files by the head that wrote them."""

    def read_manifest(self, memdir: MemoryDir) -> tuple[Manifest, str | None]: ...

    def state(self, place_prefix: str, name: str, head_etag: str | None) -> bytes | None: ...

    def keep_state(self, place_prefix: str, name: str, head_etag: str | None, data: bytes) -> None: ...


class AutoPlace:
    """Auto memory of one place, on top of a ``MemoryDir`` (its store, place, locker, limits).
    ``warm``: the pod's warm views; the extraction's reads go through them (no store read while
    the place's announced version is the one this pod holds)."""

    def __init__(self, memdir: MemoryDir, warm: WarmPlaces | None = None) -> None:
        self.dir = memdir
        self.warm = warm
        #: The head etag of the last ``read`` (its state file is looked up under it).
        self.read_etag: str | None = None

    @property
    def state_key(self) -> str:
        return self.dir.place.prefix + STATE_FILE

    def read(self) -> AutoView:
        """Facts and profile: one GET (the manifest), two when the profile was edited by hand;
        none when a warm view serves it."""
        manifest, self.read_etag = (self.dir.load_manifest() if self.warm is None
                                    else self.warm.read_manifest(self.dir))
        return self.view_of(manifest)

    def view_of(self, manifest: Manifest) -> AutoView:
        view = AutoView()
        for entry in manifest.entries.values():
            fact = fact_from_entry(entry)
            if fact is not None:
                view.facts[fact.id] = fact
        entry = manifest.entries.get(PROFILE_FILE)
        if entry is not None:
            view.profile_stamp = entry.updated_at
            meta = manifest.meta.get(META_KEY)
            if isinstance(meta, dict) and meta.get("profile_stamp") == entry.updated_at:
                view.profile = Profile.from_json(meta.get("profile"))
            else:
                view.profile = self._read_profile_file()
        return view

    def read_watermarks(self, head: str | None = None, *, locked: bool = False) -> Watermarks:
        """The state file. ``head``: the head etag being served (the last ``read``'s, or the one a
        transaction read under the lock: ``locked``); the warm views then answer when they hold
        the file as written at that head, and a read under the lock is kept for the next reader."""
        prefix = self.dir.place.prefix
        if self.warm is not None and head:
            held = self.warm.state(prefix, STATE_FILE, head)
            if held is not None:
                return Watermarks.from_bytes(held)
        obj = self.dir.store.get_or_none(self.state_key)
        data = obj.data if obj else b""
        if self.warm is not None and head and locked:  # under the lock: exactly the state at ``head``
            self.warm.keep_state(prefix, STATE_FILE, head, data)
        return Watermarks.from_bytes(data)

    @contextlib.contextmanager
    def transaction(self, trash: str | None = None) -> Iterator[AutoTxn]:
        """Hold the place lock, yield the current state; committed (one ``PlaceTxn``: the fact and
        profile files, the manifest, the watermarks) when the block ends cleanly. ``trash``: the
        origin under which the facts the block deletes go to the place's trash, as one item
        (``person`` for the page, ``auto`` for an update's removals, merges, expiry and eviction);
        None deletes without a copy."""
        with self.dir.transaction() as place_txn:
            txn = AutoTxn(self, place_txn)
            yield txn
            if trash is not None and txn.deleted:
                keep_removed(place_txn, [fid + ".md" for fid in sorted(txn.deleted)], trash)
            txn.stage()
        if place_txn.committed is not None:
            txn.done(place_txn.committed)

    def _read_profile_file(self) -> Profile:
        try:
            return parse_profile(parse_memory(self.dir.read(PROFILE_FILE).text).body)
        except (MemoryFormatError, StorageError) as exc:
            log.warning("profile of %s unreadable (%s); treated as empty", self.dir.place.label, exc)
            return Profile()


class AutoTxn:
    """Changes to one place under its lock. Mutate ``view`` through the methods; staged into the
    place's ``PlaceTxn`` when the transaction block ends."""

    def __init__(self, place: AutoPlace, place_txn: PlaceTxn) -> None:
        self.place = place
        self.place_txn = place_txn
        self.manifest = place_txn.manifest
        self.view = place.view_of(self.manifest)
        self._changed: set[str] = set()
        self._deleted: set[str] = set()
        self._profile_changed = False
        self._marks: Watermarks | None = None
        self._written: list[Fact] = []

    # -- mutations ----------------------------------------------------------------------------
    def put_fact(self, fact: Fact) -> None:
        fact.updated = now_iso()
        fact.created = fact.created or fact.updated
        self.view.facts[fact.id] = fact
        self._changed.add(fact.id)
        self._deleted.discard(fact.id)

    def delete_fact(self, fact_id: str) -> bool:
        if self.view.facts.pop(fact_id, None) is None:
            return False
        self._changed.discard(fact_id)
        self._deleted.add(fact_id)
        return True

    @property
    def deleted(self) -> set[str]:
        """The ids of the facts this transaction removes."""
        return set(self._deleted)

    def set_profile(self, profile: Profile) -> None:
        self.view.profile = profile
        self._profile_changed = True

    @property
    def watermarks(self) -> Watermarks:
        if self._marks is None:
            self._marks = self.place.read_watermarks(self.place_txn.etag, locked=True)
        return self._marks

    # -- staging --------------------------------------------------------------------------------
    def stage(self) -> None:
        """Put the changes into the place transaction: fact files (keeping a person's notes and
        extra frontmatter of an existing file), the profile, removals, the profile mirror in the
        manifest's meta, and the watermarks."""
        txn, d = self.place_txn, self.place.dir
        files = {fid: self.view.facts[fid] for fid in self._changed if fid in self.view.facts}
        # Only files the manifest lists are read (to keep a person's notes): a new fact's file is
        # created write-if-absent without a GET (``PlaceTxn._read_priors``), and the profile is
        # written whole (its version is read at commit unless this pod knows it).
        listed = [f.file for f in files.values() if f.file in self.manifest.entries]
        txn.prefetch(listed)
        limit_left = d.limits.max_files_per_place - len(self.manifest.entries)
        for fid, fact in files.items():
            old = txn.read(fact.file) if fact.file in self.manifest.entries else None
            if old is None and fact.file not in self.manifest.entries:
                if limit_left <= 0:
                    log.warning("%s is full; fact %r not stored", d.place.label, fact.content[:60])
                    self.view.facts.pop(fid, None)
                    continue
                limit_left -= 1
            txn.write(fact.file, fact_memory(fact, _parse_or_none(old.data if old else None)))
            self._written.append(fact)
        if self._profile_changed:
            txn.write(PROFILE_FILE, profile_memory(self.view.profile))
        for fid in self._deleted:
            txn.delete(fid + ".md")
        if self._profile_changed or self._written:
            txn.mutate(self._mirror_profile)
        if self._marks is not None:
            txn.put_state(STATE_FILE, self._marks.to_bytes())

    def _mirror_profile(self, manifest: Manifest) -> None:
        """The profile in the manifest's meta, stamped with its entry's time, so readers need not
        open the profile file unless a person edited it since."""
        profile_entry = manifest.entries.get(PROFILE_FILE)
        if profile_entry is not None and self._profile_changed:
            manifest.meta[META_KEY] = {"version": 1, "profile": self.view.profile.to_json(),
                                       "profile_stamp": profile_entry.updated_at}

    def done(self, result: TxnResult) -> None:
        self.manifest = result.manifest
        stamps = {s.file: s.entry.updated_at for s in result.saved}
        for fact in self._written:
            fact.stamp = stamps.get(fact.file, fact.stamp)


def _parse_or_none(data: bytes | None) -> MemoryFile | None:
    if data is None:
        return None
    try:
        return parse_memory(data.decode("utf-8", errors="replace"))
    except MemoryFormatError:
        return None
