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
than ``limits.trash_days`` are purged by the next deletion a person makes in the place (or
``purge``); a file keeps its latest ``limits.history_versions`` versions. Neither is exported,
indexed or searched. ``clear`` (forget everything) moves the place's memories into one trash
batch (``MemoryDir.clear``); only ``clear(purge=True)`` removes the trash and history with them.

Every writer of a memory file keeps what it replaces: ``MemoryDir.save`` / ``replace_chunk`` /
``remove`` (the assistant's tools, and the page, API and CLI, which pass their ``origin``) call
``keep_version`` / ``keep_removed`` (``keep.py``) inside their own transaction, as imports and
snapshots do. The cost on the assistant's path is the copy itself: one PUT (and a GET of the
replaced text only when neither the transaction nor the pod's copy of the head has it:
``heads.py``). Pruning a file's versions needs a LIST: after a person's edit it runs
at once; after the assistant's saves, once every ``history_versions`` saves of that file in this
process, so a file may hold up to about twice its versions for a while.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..errors import MemoryFormatError, ObjectNotFound, StorageError
from ..layout import validate_filename
from .keep import (
    ASSISTANT,
    DAY,
    HISTORY_DIR,
    MAX_ORIGINS,
    ORIGINS,
    TRASH_DIR,
    TrashBatch,
    TrashedFile,
    Version,
    history_dir,
    id_time,
    is_kept,
    keep_removed,
    keep_version,
    new_id,
    origin_of,
    purge_expired,
    record_origin,
)
from .model import parse_memory
from .txn import SaveResult

if TYPE_CHECKING:
    from .directory import MemoryDir

log = logging.getLogger(__name__)


def _check_id(item_id: str) -> str:
    if not item_id or len(item_id) > 40 or not all(c.isalnum() or c == "-" for c in item_id):
        raise ObjectNotFound(f"there is no trash item or version {item_id!r}")
    return item_id


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
    """``MemoryDir.save`` by someone other than the assistant (its origin recorded). Every save
    keeps the text it replaces as an earlier version; this name stays for the callers that say so."""
    return mdir.save(file, content, expect=expect, origin=origin)


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


__all__ = [
    "ASSISTANT",
    "DAY",
    "HISTORY_DIR",
    "MAX_ORIGINS",
    "ORIGINS",
    "TRASH_DIR",
    "TrashBatch",
    "TrashedFile",
    "Version",
    "history",
    "history_dir",
    "id_time",
    "is_kept",
    "keep_removed",
    "keep_version",
    "list_trash",
    "new_id",
    "origin_of",
    "purge",
    "purge_expired",
    "record_origin",
    "restore",
    "restore_version",
    "save_versioned",
    "trash_files",
]
