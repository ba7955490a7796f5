"""The safety net of a place: a trash of removed memories and a history of earlier versions.

Why here, in memdir: memdir is the only writer of a place, and the copy must be safe *before* the
removal commits. So both are objects kept aside by the same ``PlaceTxn`` that deletes or
overwrites (``PlaceTxn.put_aside``): written after the lock's lease check and before the
manifest head (the commit point). A commit whose head fails leaves the memory as it was (and
removes the copy again); a copy that cannot be written fails the commit, so nothing is lost.

Keys below the place (``<place>/``)::

    .trash/<ms>-<rand>.json                one batch of removed files (a delete, a bulk delete,
                                           a replacing import): {"id", "deleted_at", "origin",
                                           "files": [{"file", "content", "name", "description", "type"}]}
    .history/<sha256(file)[:24]>/<ms>-<rand>.json   one earlier version of one file:
                                           {"id", "file", "saved_at", "origin", "content"}

``<ms>`` is the time in milliseconds, so age is known from a LIST alone. Trash batches older
than ``limits.trash_days`` are purged by the next deletion in the place (or ``purge``); a file
keeps its latest ``limits.history_versions`` versions. Neither is exported, indexed or
searched; ``clear`` (forget everything) removes them with the rest of the place.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import MemoryFormatError, ObjectNotFound, StorageError
from ..layout import validate_filename
from .model import parse_memory
from .txn import SaveResult

if TYPE_CHECKING:
    from .directory import MemoryDir
    from .index import Manifest
    from .txn import PlaceTxn

log = logging.getLogger(__name__)

TRASH_DIR = ".trash/"
HISTORY_DIR = ".history/"
DAY = 86_400.0


def is_kept(name: str) -> bool:
    """A trash batch or an old version (a place-relative name): never a memory, never exported."""
    return name.startswith((TRASH_DIR, HISTORY_DIR))


@dataclass(slots=True)
class TrashedFile:
    file: str
    content: str
    name: str = ""
    description: str = ""
    type: str = ""


@dataclass(slots=True)
class TrashBatch:
    id: str
    deleted_at: float
    origin: str
    files: list[TrashedFile] = field(default_factory=list)

    def expires_at(self, days: float) -> float:
        return self.deleted_at + days * DAY

    def to_bytes(self) -> bytes:
        return json.dumps({"id": self.id, "deleted_at": self.deleted_at, "origin": self.origin,
                           "files": [vars_of(f) for f in self.files]}, ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> TrashBatch:
        raw = json.loads(data.decode("utf-8"))
        return cls(str(raw["id"]), float(raw["deleted_at"]), str(raw.get("origin") or ""),
                   [TrashedFile(**{k: str(f.get(k) or "") for k in ("file", "content", "name", "description", "type")})
                    for f in raw.get("files") or []])


@dataclass(slots=True)
class Version:
    id: str
    file: str
    saved_at: float
    origin: str
    content: str

    def to_bytes(self) -> bytes:
        return json.dumps(vars_of(self), ensure_ascii=False).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Version:
        raw = json.loads(data.decode("utf-8"))
        return cls(str(raw["id"]), str(raw["file"]), float(raw["saved_at"]), str(raw.get("origin") or ""),
                   str(raw["content"]))


def vars_of(obj: object) -> dict[str, object]:
    return {k: getattr(obj, k) for k in obj.__slots__}  # type: ignore[attr-defined]


def new_id(now: float | None = None) -> str:
    return f"{int((now if now is not None else time.time()) * 1000):013d}-{secrets.token_hex(4)}"


def id_time(item_id: str) -> float:
    try:
        return int(item_id.split("-", 1)[0]) / 1000
    except ValueError:
        return 0.0


def history_dir(file: str) -> str:
    return HISTORY_DIR + hashlib.sha256(file.encode("utf-8")).hexdigest()[:24] + "/"


def _check_id(item_id: str) -> str:
    if not item_id or len(item_id) > 40 or not all(c.isalnum() or c == "-" for c in item_id):
        raise ObjectNotFound(f"there is no trash item or version {item_id!r}")
    return item_id


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


# -- staging into a transaction (the primitive every removal uses) ------------------------------
def keep_removed(txn: PlaceTxn, files: Iterable[str], origin: str) -> TrashBatch | None:
    """Stage a trash batch holding the current text of ``files`` (those that exist) into ``txn``;
    call it before the block ends (the files are read under the lock). None: nothing to keep.
    A replacing import or a snapshot replace calls this with the names it removes or overwrites."""
    names = list(dict.fromkeys(validate_filename(f) for f in files))
    txn.prefetch(names)
    batch = TrashBatch(new_id(), time.time(), origin)
    for name in names:
        obj = txn.read(name)
        if obj is None:
            continue
        text = _text(obj.data)
        entry = txn.manifest.entries.get(name)
        batch.files.append(TrashedFile(name, text, entry.name if entry else "", entry.description if entry else "",
                                       entry.type if entry else ""))
    if not batch.files:
        return None
    txn.put_aside(TRASH_DIR + batch.id + ".json", batch.to_bytes())
    return batch


def keep_version(txn: PlaceTxn, file: str, origin: str, replacing_with: str | None = None) -> Version | None:
    """Stage the current text of ``file`` as an earlier version (none when absent, when history is
    off, or when the new text is the same)."""
    if txn.dir.limits.history_versions <= 0:
        return None
    obj = txn.read(file)
    if obj is None:
        return None
    text = _text(obj.data)
    if replacing_with is not None and text == replacing_with:
        return None
    version = Version(new_id(), file, time.time(), origin, text)
    txn.put_aside(history_dir(file) + version.id + ".json", version.to_bytes())
    return version


# -- provenance ---------------------------------------------------------------------------------
#: ``manifest.meta[ORIGINS]``: {"<updated_at>": "<origin>"} for the last commits made by someone
#: other than the assistant (a person, the API, an import, a snapshot, a restore). Every entry a
#: commit writes carries the commit's time as ``updated_at``, so one short row per commit says who
#: wrote all of its files; an entry whose time has no row was written by the assistant (its
#: tools, during a conversation). Bounded: the head is written by every commit.
ORIGINS = "origins"
MAX_ORIGINS = 64


def record_origin(txn: PlaceTxn, origin: str) -> None:
    """Stage the row saying ``origin`` wrote this commit's files (call once per transaction)."""

    def mutate(manifest: Manifest) -> None:
        stamps = {entry.updated_at for r in txn.committing() for entry in [manifest.entries.get(r)] if entry}
        if not stamps:
            return
        rows = manifest.meta.get(ORIGINS)
        rows = dict(rows) if isinstance(rows, dict) else {}
        for stamp in stamps:
            rows[repr(float(stamp))] = origin
        manifest.meta[ORIGINS] = dict(sorted(rows.items(), key=lambda kv: float(kv[0]))[-MAX_ORIGINS:])

    txn.mutate(mutate)


def origin_of(manifest: Manifest, file: str) -> str:
    """Who wrote the current version of ``file``: a recorded origin, else ``assistant``."""
    entry = manifest.entries.get(file)
    rows = manifest.meta.get(ORIGINS)
    if entry is None or not isinstance(rows, dict):
        return "assistant"
    return str(rows.get(repr(float(entry.updated_at))) or "assistant")


# -- operations ---------------------------------------------------------------------------------
def trash_files(mdir: MemoryDir, files: Iterable[str], origin: str) -> tuple[TrashBatch | None, list[str]]:
    """Delete ``files`` (those that exist), keeping them in one trash batch. Returns the batch and
    the names removed (a name in neither the index nor the store is left out)."""
    names = list(dict.fromkeys(validate_filename(f) for f in files))
    with mdir.transaction(prefetch=tuple(names)) as txn:
        present = [n for n in names if txn.read(n) is not None or n in txn.manifest.entries]
        batch = keep_removed(txn, present, origin)
        for name in present:
            txn.delete(name)
    purge_expired(mdir)
    return batch, present


def save_versioned(mdir: MemoryDir, file: str, content: str, *, expect: str | None = None,
                   origin: str = "person") -> SaveResult:
    """``MemoryDir.save`` that keeps the text it replaces as an earlier version (a person's edit)."""
    file = validate_filename(file)
    mdir.check_content(content)

    def once() -> SaveResult:
        with mdir.transaction(prefetch=(file,)) as txn:
            keep_version(txn, file, origin, content)
            txn.write(file, content, expect=expect)
            record_origin(txn, origin)
        assert txn.committed is not None
        return txn.committed.saved[0]

    result = mdir._redo_on_conflict(once)  # another pod wrote meanwhile (Redis down): redone from a fresh read
    _prune_history(mdir, file)
    return result


def list_trash(mdir: MemoryDir) -> list[TrashBatch]:
    """The place's trash batches still kept, newest first (a LIST and a GET per batch)."""
    cutoff = time.time() - mdir.limits.trash_days * DAY
    out = []
    for info in mdir.store.list(mdir.place.prefix + TRASH_DIR):
        item_id = info.key.rsplit("/", 1)[-1].removesuffix(".json")
        if id_time(item_id) < cutoff:
            continue
        obj = mdir.store.get_or_none(info.key)
        if obj is None:
            continue
        try:
            out.append(TrashBatch.from_bytes(obj.data))
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: unreadable trash batch %s (%s)", mdir.place.label, info.key, exc)
    return sorted(out, key=lambda b: b.id, reverse=True)


def _batch(mdir: MemoryDir, batch_id: str) -> TrashBatch:
    obj = mdir.store.get_or_none(mdir.place.prefix + TRASH_DIR + _check_id(batch_id) + ".json")
    if obj is None or id_time(batch_id) < time.time() - mdir.limits.trash_days * DAY:
        raise ObjectNotFound(f"there is no trash item {batch_id!r} (restored, purged or expired)")
    return TrashBatch.from_bytes(obj.data)


def restore(mdir: MemoryDir, batch_id: str, files: Iterable[str] | None = None, *,
            origin: str = "restore") -> list[str]:
    """Put the files of a trash batch back (all, or ``files``). A file that exists now is replaced
    and its current text kept as an earlier version, so a restore loses nothing either. The batch
    leaves the trash (what was not restored stays in it)."""
    batch = _batch(mdir, batch_id)
    wanted = None if files is None else {validate_filename(f) for f in files}
    chosen = [f for f in batch.files if wanted is None or f.file in wanted]
    if wanted is not None and len(chosen) != len(wanted):
        missing = sorted(wanted - {f.file for f in chosen})
        raise ObjectNotFound(f"trash item {batch_id!r} does not hold {', '.join(missing)}")
    for f in chosen:
        mdir.check_content(f.content)
    rest = [f for f in batch.files if f not in chosen]
    key = mdir.place.prefix + TRASH_DIR + batch.id + ".json"
    with mdir.transaction(prefetch=tuple(f.file for f in chosen)) as txn:
        for f in chosen:
            keep_version(txn, f.file, origin, f.content)
            txn.write(f.file, f.content)
        record_origin(txn, origin)
        if rest:
            txn.put_aside(TRASH_DIR + batch.id + ".json",
                          TrashBatch(batch.id, batch.deleted_at, batch.origin, rest).to_bytes())
    if not rest:
        try:
            mdir.store.delete(key)
        except StorageError as exc:  # restored; the batch stays listed until purged
            log.warning("%s: restored trash item %s not removed (%s)", mdir.place.label, batch.id, exc)
    return [f.file for f in chosen]


def purge(mdir: MemoryDir, batch_id: str | None = None) -> int:
    """Remove one trash batch for good, or (None) every batch. Returns how many were removed."""
    if batch_id is not None:
        _batch(mdir, batch_id)
        mdir.store.delete(mdir.place.prefix + TRASH_DIR + batch_id + ".json")
        return 1
    keys = [info.key for info in mdir.store.list(mdir.place.prefix + TRASH_DIR)]
    failures = mdir.store.delete_many(keys) if keys else []
    if failures:
        raise StorageError(f"{len(failures)} trash objects could not be removed, e.g. {failures[0].key}")
    return len(keys)


def purge_expired(mdir: MemoryDir) -> int:
    """Remove batches past ``limits.trash_days`` (best effort: never fails the caller)."""
    cutoff = time.time() - mdir.limits.trash_days * DAY
    try:
        old = [info.key for info in mdir.store.list(mdir.place.prefix + TRASH_DIR)
               if id_time(info.key.rsplit("/", 1)[-1].removesuffix(".json")) < cutoff]
        if old:
            mdir.store.delete_many(old)
        return len(old)
    except StorageError as exc:
        log.warning("%s: expired trash not purged (%s)", mdir.place.label, exc)
        return 0


# -- history ------------------------------------------------------------------------------------
def history(mdir: MemoryDir, file: str) -> list[Version]:
    """Earlier versions of ``file``, newest first."""
    file = validate_filename(file)
    out = []
    for info in mdir.store.list(mdir.place.prefix + history_dir(file)):
        obj = mdir.store.get_or_none(info.key)
        if obj is None:
            continue
        try:
            version = Version.from_bytes(obj.data)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s: unreadable version %s (%s)", mdir.place.label, info.key, exc)
            continue
        if version.file == file:
            out.append(version)
    return sorted(out, key=lambda v: v.id, reverse=True)


def restore_version(mdir: MemoryDir, file: str, version_id: str, *, origin: str = "restore") -> SaveResult:
    """Make an earlier version the current text (the current one becomes a version in turn)."""
    file = validate_filename(file)
    obj = mdir.store.get_or_none(mdir.place.prefix + history_dir(file) + _check_id(version_id) + ".json")
    if obj is None:
        raise ObjectNotFound(f"{file} has no version {version_id!r}")
    version = Version.from_bytes(obj.data)
    try:
        parse_memory(version.content)
    except MemoryFormatError as exc:
        raise MemoryFormatError(f"that version of {file} cannot be restored: {exc}") from None
    return save_versioned(mdir, file, version.content, origin=origin)


def _prune_history(mdir: MemoryDir, file: str) -> None:
    keep = mdir.limits.history_versions
    try:
        keys = sorted(info.key for info in mdir.store.list(mdir.place.prefix + history_dir(file)))
        if len(keys) > keep:
            mdir.store.delete_many(keys[: len(keys) - keep])
    except StorageError as exc:
        log.warning("%s: old versions of %s not pruned (%s)", mdir.place.label, file, exc)


__all__ = [
    "HISTORY_DIR",
    "ORIGINS",
    "TRASH_DIR",
    "TrashBatch",
    "TrashedFile",
    "Version",
    "history",
    "is_kept",
    "keep_removed",
    "keep_version",
    "list_trash",
    "origin_of",
    "purge",
    "purge_expired",
    "record_origin",
    "restore",
    "restore_version",
    "save_versioned",
    "trash_files",
]
