"""Snapshot state of one user's place, and the actions: initialize, replace, mark synced.

See the package docstring for the states. Every write is one ``MemoryDir`` transaction (the
files, the manifest with the sync record, and ``.snapshot-synced.json``, under the place lock);
a per-place ``snapshot:`` lock serialises whole actions across pods.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..layout import INDEX_FILE, SNAPSHOT_SYNC_FILE
from ..memdir import Manifest, ManifestEntry, MemoryDir
from ..memdir.trash import keep_removed, record_origin
from .model import (
    META_KEY,
    Snapshot,
    SnapshotError,
    SnapshotState,
    SnapshotStatus,
    SyncRecord,
    iso_now,
    load_snapshot,
    parse_time,
)

if TYPE_CHECKING:
    from ..config import MemoryConfig

log = logging.getLogger(__name__)

NEGATIVE_TTL = 60.0  # seconds a missing .snapshot-synced.json is remembered per place


class SnapshotRoot(Protocol):
    """What the snapshot functions use of the composition root (``MemoryServices`` is one): the
    config, the user's place and the cache of known-absent sync records (owned by the root)."""

    config: MemoryConfig
    snapshot_absent: KnownAbsent

    def user_agent_dir(self, user_id: str, agent_type: str = "default") -> MemoryDir: ...


# -- reading the place's state ---------------------------------------------------------------------
Absent = dict[str, float]
"""Place prefix -> monotonic time until which "no sync file" is trusted."""


class KnownAbsent(Absent):
    """The composition root's record of places known to have no sync file (``SnapshotRoot``):
    saves a GET per build for a place never synced. Bounded: past ``MAX`` places it starts over."""

    MAX = 10_000

    def trimmed(self) -> KnownAbsent:
        if len(self) > self.MAX:
            self.clear()
        return self


def _absent_of(target: SnapshotRoot | MemoryDir) -> Absent | None:
    if isinstance(target, MemoryDir):
        return None
    return target.snapshot_absent.trimmed()


def _memdir(target: SnapshotRoot | MemoryDir, agent_type: str, user_id: str) -> MemoryDir:
    return target.user_agent_dir(user_id, agent_type) if not isinstance(target, MemoryDir) else target


def _snapshots_dir(target: SnapshotRoot | MemoryDir, snapshots_dir: str | Path | None) -> Path:
    if snapshots_dir is not None:
        return Path(snapshots_dir)
    if not isinstance(target, MemoryDir):
        return target.config.agent.snapshots_dir
    raise ValueError("snapshots_dir is required when a MemoryDir is given")


def read_sync_record(memdir: MemoryDir, manifest: Manifest, absent: Absent | None = None) -> SyncRecord | None:
    """The place's sync record: the manifest's mirror, else ``.snapshot-synced.json`` (one GET;
    with ``absent``, a missing file is remembered for ``NEGATIVE_TTL`` s)."""
    record = SyncRecord.from_json(manifest.meta.get(META_KEY))
    if record is not None:
        return record
    if absent is not None and absent.get(memdir.place.prefix, 0.0) > time.monotonic():
        return None
    obj = memdir.store.get_or_none(memdir.place.reserved_key(SNAPSHOT_SYNC_FILE))
    if obj is None:
        if absent is not None:
            absent[memdir.place.prefix] = time.monotonic() + NEGATIVE_TTL
        return None
    try:
        return SyncRecord.from_json(json.loads(obj.data.decode("utf-8")))
    except (ValueError, UnicodeDecodeError):
        log.warning("%s in %s is damaged; treating the place as never synced", SNAPSHOT_SYNC_FILE,
                    memdir.place.label)
        return None


def _place_is_empty(memdir: MemoryDir, manifest: Manifest) -> bool:
    """No memory files. A place without a manifest is LISTed (hand-copied files have no index)."""
    if manifest.entries:
        return False
    if manifest.updated_at > 0:
        return True  # the index exists and is empty
    prefix = memdir.place.prefix
    for info in memdir.store.list(prefix):
        rel = info.key[len(prefix):]
        if rel.endswith(".md") and rel != INDEX_FILE and not any(p.startswith(".") for p in rel.split("/")):
            return False
    return True


def _status(state: SnapshotState, snapshot: Snapshot | None, agent_type: str, user_id: str | None, reason: str,
            record: SyncRecord | None = None, **extra: Any) -> SnapshotStatus:
    return SnapshotStatus(
        state=state, agent_type=agent_type, user_id=user_id, reason=reason,
        snapshot_updated_at=snapshot.updated_at if snapshot else None,
        synced_from=record.synced_from if record else None, synced_at=record.synced_at if record else None,
        files=tuple(f.file for f in snapshot.files) if snapshot else (),
        problems=snapshot.problems if snapshot else (), **extra)


def _compute(memdir: MemoryDir, snapshot: Snapshot | None, agent_type: str, user_id: str | None,
             manifest: Manifest, absent: Absent | None = None) -> SnapshotStatus:
    if snapshot is None:
        return _status(SnapshotState.NONE, None, agent_type, user_id, f"no snapshot for agent type {agent_type!r}")
    if snapshot.updated is None:
        return _status(SnapshotState.NONE, snapshot, agent_type, user_id, "the snapshot's snapshot.json is invalid")
    record = read_sync_record(memdir, manifest, absent)
    if record is None:
        if _place_is_empty(memdir, manifest):
            if not snapshot.files:
                return _status(SnapshotState.NONE, snapshot, agent_type, user_id,
                               "the snapshot has no valid memory files")
            return _status(SnapshotState.INITIALIZE, snapshot, agent_type, user_id,
                           "the user's memory is empty: copy the snapshot in")
        return _status(SnapshotState.PROMPT_UPDATE, snapshot, agent_type, user_id,
                       "the user has memories of their own and never synced with the snapshot")
    synced = parse_time(record.synced_from)
    if synced is None or snapshot.updated > synced:
        return _status(SnapshotState.PROMPT_UPDATE, snapshot, agent_type, user_id,
                       "the snapshot is newer than the version the user synced from", record)
    return _status(SnapshotState.NONE, snapshot, agent_type, user_id, "already synced with the snapshot", record)


def snapshot_state(
    services_or_memdir: SnapshotRoot | MemoryDir,
    snapshots_dir: str | Path | None,
    agent_type: str,
    user_id: str | None = None,
    *,
    manifest: Manifest | None = None,
) -> SnapshotStatus:
    """The state of the user's place against the snapshot (reads only; nothing is written).

    ``manifest`` is the place's manifest when the caller has it (saves a GET). ``snapshots_dir``
    defaults to ``agent.snapshots_dir`` when services are given.
    """
    memdir = _memdir(services_or_memdir, agent_type, user_id or "")
    snapshot = load_snapshot(_snapshots_dir(services_or_memdir, snapshots_dir), agent_type,
                             max_file_bytes=memdir.limits.max_file_bytes)
    if manifest is None:
        manifest = memdir.manifest()
    return _compute(memdir, snapshot, agent_type, user_id, manifest, _absent_of(services_or_memdir))


# -- actions ---------------------------------------------------------------------------------------
def _lock_name(memdir: MemoryDir) -> str:
    return "snapshot:" + memdir.place.rel_dir


def _require(snapshot: Snapshot | None, agent_type: str, folder: Path) -> Snapshot:
    if snapshot is None:
        raise SnapshotError(f"there is no snapshot for agent type {agent_type!r} in {folder}")
    if snapshot.updated is None or snapshot.updated_at is None:
        detail = "; ".join(f"{p.file}: {p.message}" for p in snapshot.problems)
        raise SnapshotError(f"the snapshot in {snapshot.path} has an invalid snapshot.json ({detail})")
    return snapshot


def _copy_in(memdir: MemoryDir, snapshot: Snapshot, *, stale: set[str] | None = None,
             absent: Absent | None = None) -> tuple[list[ManifestEntry], SyncRecord, Manifest]:
    """One place transaction: the snapshot's files, their index entries and the sync record (in
    the manifest and in ``.snapshot-synced.json``). With ``stale`` (replace) the index holds
    exactly the snapshot's files afterwards and the stale files are removed. If the commit fails
    nothing changes, so a place is either fully initialised *and* synced, or untouched."""
    assert snapshot.updated_at is not None
    files = list(snapshot.files)
    limit = memdir.limits.max_files_per_place
    if len(files) > limit:
        log.warning("snapshot %s has %d files; only the first %d fit in a place", snapshot.path, len(files), limit)
        files = files[:limit]
    record = SyncRecord(snapshot.updated_at, iso_now())
    with memdir.transaction() as txn:
        for f in files:
            txn.write(f.file, f.content)
        if stale is not None:
            keep_removed(txn, sorted(stale), "snapshot")  # what the snapshot removes or overwrites: the trash
            txn.clear_entries()
            for file in sorted(stale - {f.file for f in files}):
                txn.delete(file)
        txn.mutate(lambda m: m.meta.__setitem__(META_KEY, record.to_json()))
        record_origin(txn, "snapshot")  # the page says these came from the snapshot
        txn.put_state(SNAPSHOT_SYNC_FILE, _record_bytes(record))
    result = txn.committed
    assert result is not None
    if absent is not None:
        absent.pop(memdir.place.prefix, None)
    return [s.entry for s in result.saved], record, result.manifest


def _record_bytes(record: SyncRecord) -> bytes:
    return json.dumps(record.to_json(), ensure_ascii=False).encode("utf-8")


def initialize_from_snapshot(
    services_or_memdir: SnapshotRoot | MemoryDir,
    snapshots_dir: str | Path | None,
    agent_type: str,
    user_id: str | None = None,
) -> SnapshotStatus:
    """Copy the snapshot into the user's place if (re-checked under the lock) it is still empty and
    unsynced. Returns the resulting status; ``applied`` says whether this call did the copy."""
    memdir = _memdir(services_or_memdir, agent_type, user_id or "")
    folder = _snapshots_dir(services_or_memdir, snapshots_dir)
    snapshot = load_snapshot(folder, agent_type, max_file_bytes=memdir.limits.max_file_bytes)
    absent = _absent_of(services_or_memdir)
    with memdir.locker.hold(_lock_name(memdir)):
        status = _compute(memdir, snapshot, agent_type, user_id, memdir.manifest(), absent)
        if status.state is not SnapshotState.INITIALIZE or snapshot is None or snapshot.updated_at is None:
            return status  # another pod initialised it meanwhile, or nothing to do
        entries, record, manifest = _copy_in(memdir, snapshot, absent=absent)
    log.info("initialised %s from snapshot %s (%d files)", memdir.place.label, snapshot.path, len(entries))
    return _status(SnapshotState.NONE, snapshot, agent_type, user_id,
                   f"copied {len(entries)} snapshot memories into the user's empty memory", record,
                   applied=True, manifest=manifest)


def replace_from_snapshot(
    services_or_memdir: SnapshotRoot | MemoryDir,
    snapshots_dir: str | Path | None,
    agent_type: str,
    user_id: str | None = None,
) -> SnapshotStatus:
    """Remove the user's memory files, copy the snapshot in and mark the place synced.

    Order (so a crash never leaves a half index): PUT the snapshot files, commit the index with
    exactly the snapshot's entries and the sync record, then delete the old files not in the
    snapshot. Raises ``SnapshotError`` when there is no valid snapshot.
    """
    memdir, snapshot = _memdir_and_snapshot(services_or_memdir, snapshots_dir, agent_type, user_id)
    assert snapshot.updated_at is not None
    with memdir.locker.hold(_lock_name(memdir)):
        old = memdir.memory_files()
        entries, record, manifest = _copy_in(memdir, snapshot, stale=old, absent=_absent_of(services_or_memdir))
        stale = sorted(old - {e.file for e in entries})
    return _status(SnapshotState.NONE, snapshot, agent_type, user_id,
                   f"replaced {len(stale)} local memories with {len(entries)} snapshot memories", record,
                   applied=True, manifest=manifest)


def mark_snapshot_synced(
    services_or_memdir: SnapshotRoot | MemoryDir,
    snapshots_dir: str | Path | None,
    agent_type: str,
    user_id: str | None = None,
) -> SnapshotStatus:
    """Keep the user's memories and record the current snapshot as synced (dismiss the update)."""
    memdir, snapshot = _memdir_and_snapshot(services_or_memdir, snapshots_dir, agent_type, user_id)
    assert snapshot.updated_at is not None
    record = SyncRecord(snapshot.updated_at, iso_now())
    with memdir.transaction() as txn:
        txn.mutate(lambda m: m.meta.__setitem__(META_KEY, record.to_json()))
        record_origin(txn, "snapshot")  # the page says these came from the snapshot
        txn.put_state(SNAPSHOT_SYNC_FILE, _record_bytes(record))
    assert txn.committed is not None
    manifest = txn.committed.manifest
    absent = _absent_of(services_or_memdir)
    if absent is not None:
        absent.pop(memdir.place.prefix, None)
    return _status(SnapshotState.NONE, snapshot, agent_type, user_id, "marked as synced with the snapshot",
                   record, applied=True, manifest=manifest)


def _memdir_and_snapshot(services_or_memdir: SnapshotRoot | MemoryDir, snapshots_dir: str | Path | None,
                         agent_type: str, user_id: str | None) -> tuple[MemoryDir, Snapshot]:
    """The user's place and the valid snapshot an action needs (SnapshotError when there is none)."""
    memdir = _memdir(services_or_memdir, agent_type, user_id or "")
    folder = _snapshots_dir(services_or_memdir, snapshots_dir)
    snapshot = _require(load_snapshot(folder, agent_type, max_file_bytes=memdir.limits.max_file_bytes),
                        agent_type, folder)
    return memdir, snapshot


def apply_snapshot_on_build(
    services: SnapshotRoot,
    user_id: str,
    agent_type: str,
    manifest: Manifest | None = None,
) -> str | None:
    """Called by ``build_agent``: initialise an empty place from the snapshot, or return the prompt
    note when an update is available (else None). Never raises.

    ``manifest`` is the user's manifest the build already read; when the snapshot is copied in it
    is updated IN PLACE (entries, meta), so the MEMORY.md prompt rendered from it afterwards lists
    the new files without another GET.
    """
    try:
        status = snapshot_state(services, None, agent_type, user_id, manifest=manifest)
        if manifest is not None and status.synced_from is not None and META_KEY not in manifest.meta:
            _heal_mirror(services.user_agent_dir(user_id, agent_type), status, manifest)
        if status.state is SnapshotState.INITIALIZE:
            status = initialize_from_snapshot(services, None, agent_type, user_id)
            if status.manifest is not None and manifest is not None:
                manifest.entries = dict(status.manifest.entries)
                manifest.meta = dict(status.manifest.meta)
                manifest.updated_at = status.manifest.updated_at
        return status.prompt_note()
    except Exception as exc:  # the build must go on without the snapshot
        log.warning("snapshot for user %s / %s skipped (%s: %s)", user_id, agent_type, type(exc).__name__, exc)
        return None


def _heal_mirror(memdir: MemoryDir, status: SnapshotStatus, manifest: Manifest) -> None:
    """The sync record came from ``.snapshot-synced.json`` only (a hand-synced or older place): copy
    it into the manifest's meta once, so later builds need no extra GET. Best effort."""
    record = SyncRecord(status.synced_from or "", status.synced_at or "").to_json()
    try:
        memdir.update_meta(lambda m: m.meta.setdefault(META_KEY, record))
        manifest.meta[META_KEY] = record
    except Exception as exc:  # the next build tries again
        log.info("could not mirror the snapshot sync record of %s (%s)", memdir.place.label, exc)
