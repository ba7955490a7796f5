"""Distributable memory snapshots: starter memories a project ships in ``snapshots/<agent_type>/``.

A snapshot folder holds memory files (our frontmatter format) and ``snapshot.json`` with
``updatedAt`` (ISO time). On every agent build the user's place is compared with it:

* **none** — no (valid) snapshot for this agent type, or the place is synced with it;
* **initialize** — the place has no memories and was never synced: the snapshot is copied in;
* **prompt-update** — the snapshot is newer than the one the place was synced from (or the place
  has memories of its own and was never synced): the prompt and the API say an update is available,
  and the user decides — ``replace_from_snapshot`` (drop local memories, copy the snapshot) or
  ``mark_snapshot_synced`` (keep local memories, dismiss this version).

Sync state lives in ``.snapshot-synced.json`` (``{"syncedFrom": updatedAt, "syncedAt": now}``) in the
place, mirrored in the manifest's ``meta["snapshot"]`` so a build needs no extra GET. A place
emptied by the user after syncing is NOT re-initialised (its sync record says it was synced);
``MemoryDir.clear()`` removes the record too, so a cleared place starts over.

Why a copy is one index commit (and not ``MemoryDir.save`` per file, nor ``save_many`` followed by
a meta update): the files are validated with the place's own ``check_content``, PUT (concurrently),
then ONE manifest commit (``MemoryDir.update_meta``, under the place lock, conditional PUT) adds
all their entries together with the sync record. If that commit fails the PUTs are undone, so a
place is either fully initialised *and* marked synced, or unchanged — never "half a snapshot" or
"copied but not synced" (which would turn a new user into a prompt-update case). Concurrent
first builds on several pods are serialised by a per-place ``snapshot:`` lock and re-check the
state inside it, so the copy happens once.

Cheap on every build: the snapshot folder is parsed once per process and re-read only when
``snapshot.json`` changes (mtime/size), the state comes from the manifest the build already
read, and ``apply_snapshot_on_build`` never raises. Bad snapshot files (frontmatter, names, size)
are reported in ``SnapshotStatus.problems`` and logged once; the good ones are still used.
"""

from __future__ import annotations

from .model import (
    META_KEY,
    SNAPSHOT_FILE,
    Snapshot,
    SnapshotError,
    SnapshotFile,
    SnapshotProblem,
    SnapshotState,
    SnapshotStatus,
    SyncRecord,
    load_snapshot,
    parse_time,
)
from .state import (
    apply_snapshot_on_build,
    initialize_from_snapshot,
    mark_snapshot_synced,
    read_sync_record,
    replace_from_snapshot,
    snapshot_state,
)

__all__ = [
    "META_KEY",
    "SNAPSHOT_FILE",
    "Snapshot",
    "SnapshotError",
    "SnapshotFile",
    "SnapshotProblem",
    "SnapshotState",
    "SnapshotStatus",
    "SyncRecord",
    "apply_snapshot_on_build",
    "initialize_from_snapshot",
    "load_snapshot",
    "mark_snapshot_synced",
    "parse_time",
    "read_sync_record",
    "replace_from_snapshot",
    "snapshot_state",
]
