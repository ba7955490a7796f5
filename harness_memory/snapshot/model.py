"""The snapshot folder on disk: its parsed files, its ``snapshot.json`` time, the sync record type.

Why a per-process cache keyed by ``snapshot.json``'s mtime and size: every agent build asks for the
snapshot, and parsing a folder of markdown files each time would cost more than the rest of the
build. Publishing a new snapshot means bumping ``updatedAt`` in ``snapshot.json`` anyway, which
also refreshes the cache.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..errors import HarnessMemoryError, InvalidName, MemoryFormatError
from ..escape import inline
from ..layout import INDEX_FILE, validate_filename, validate_id
from ..memdir import Manifest, MemoryFile, parse_memory

log = logging.getLogger(__name__)

SNAPSHOT_FILE = "snapshot.json"
META_KEY = "snapshot"
IGNORED_FILES = frozenset({INDEX_FILE.lower(), "readme.md"})


class SnapshotError(HarnessMemoryError):
    """A snapshot action cannot run (no snapshot, or its ``snapshot.json`` is invalid)."""


class SnapshotState(StrEnum):
    NONE = "none"
    INITIALIZE = "initialize"
    PROMPT_UPDATE = "prompt-update"


@dataclass(frozen=True, slots=True)
class SnapshotProblem:
    file: str
    message: str


@dataclass(frozen=True, slots=True)
class SnapshotFile:
    file: str
    content: str
    memory: MemoryFile


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A parsed snapshot folder. ``updated`` is None when ``snapshot.json`` is unusable."""

    agent_type: str
    path: Path
    updated_at: str | None
    updated: dt.datetime | None
    files: tuple[SnapshotFile, ...] = ()
    problems: tuple[SnapshotProblem, ...] = ()


@dataclass(frozen=True, slots=True)
class SyncRecord:
    synced_from: str
    synced_at: str

    def to_json(self) -> dict[str, str]:
        return {"syncedFrom": self.synced_from, "syncedAt": self.synced_at}

    @classmethod
    def from_json(cls, data: Any) -> SyncRecord | None:
        if isinstance(data, dict) and isinstance(data.get("syncedFrom"), str):
            return cls(data["syncedFrom"], str(data.get("syncedAt") or ""))
        return None


@dataclass(frozen=True, slots=True)
class SnapshotStatus:
    """The snapshot state of one user's place, for the prompt and the API."""

    state: SnapshotState
    agent_type: str
    user_id: str | None
    reason: str
    snapshot_updated_at: str | None = None
    synced_from: str | None = None
    synced_at: str | None = None
    files: tuple[str, ...] = ()
    problems: tuple[SnapshotProblem, ...] = ()
    applied: bool = False  # an action (initialize / replace / mark-synced) was carried out
    manifest: Manifest | None = field(default=None, compare=False, repr=False)

    @property
    def update_available(self) -> bool:
        return self.state is SnapshotState.PROMPT_UPDATE

    def prompt_note(self) -> str | None:
        """The note put into the agent's prompt when an update is available, else None."""
        if not self.update_available:
            return None
        # the sync record is a state file a bundle import can carry: memory text, escaped as such
        since = (f"this user's memory was last synced from the version of {inline(self.synced_from)}"
                 if self.synced_from else "this user's memory was not created from it")
        return (
            "## Memory snapshot update available\n"
            f"A newer set of starter memories for this agent (snapshot `{self.agent_type}`, updated "
            f"{inline(self.snapshot_updated_at)}) is available; {since}. Do not change memories because of this "
            "note. When it fits the conversation, tell the user once that updated starter memories are "
            "available and that they can replace their memories with the snapshot or keep their own "
            "(dismiss the update)."
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "state": self.state.value, "updateAvailable": self.update_available, "agentType": self.agent_type,
            "reason": self.reason, "snapshotUpdatedAt": self.snapshot_updated_at,
            "syncedFrom": self.synced_from, "syncedAt": self.synced_at, "files": list(self.files),
            "problems": [{"file": p.file, "message": p.message} for p in self.problems],
            "applied": self.applied,
        }


# -- time ------------------------------------------------------------------------------------------
def parse_time(value: Any) -> dt.datetime | None:
    """An ISO time (``Z``, offsets, date-only) or epoch seconds/ms as an aware UTC datetime."""
    try:
        if isinstance(value, bool):
            return None
        if isinstance(value, int | float):
            secs = value / 1000 if value > 1e12 else value
            return dt.datetime.fromtimestamp(secs, dt.UTC)
        if isinstance(value, str) and value.strip():
            parsed = dt.datetime.fromisoformat(value.strip().replace("z", "Z"))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return None


def iso_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


# -- loading the snapshot folder --------------------------------------------------------------------
_cache_lock = threading.Lock()
_cache: dict[tuple[str, int], tuple[tuple[int, int], Snapshot]] = {}


def load_snapshot(snapshots_dir: str | Path, agent_type: str, *, max_file_bytes: int = 65536) -> Snapshot | None:
    """The snapshot for ``agent_type`` (None when there is none), parsed once per ``snapshot.json`` version."""
    folder = Path(snapshots_dir).expanduser() / validate_id(agent_type, "agent type")
    meta = folder / SNAPSHOT_FILE
    try:
        st = meta.stat()
    except OSError:
        return None
    key, stamp = (str(folder.absolute()), max_file_bytes), (st.st_mtime_ns, st.st_size)
    with _cache_lock:
        hit = _cache.get(key)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    snapshot = _parse_folder(folder, agent_type, max_file_bytes)
    for problem in snapshot.problems:
        log.warning("snapshot %s: %s: %s", folder, problem.file, problem.message)
    with _cache_lock:
        _cache[key] = (stamp, snapshot)
    return snapshot


def _parse_folder(folder: Path, agent_type: str, max_file_bytes: int) -> Snapshot:
    problems: list[SnapshotProblem] = []
    updated_at: str | None = None
    updated: dt.datetime | None = None
    try:
        raw = json.loads((folder / SNAPSHOT_FILE).read_text(encoding="utf-8"))
        value = raw.get("updatedAt") if isinstance(raw, dict) else None
        updated = parse_time(value)
        if updated is None:
            problems.append(SnapshotProblem(SNAPSHOT_FILE, f'"updatedAt" must be an ISO time, got {value!r}'))
        else:
            updated_at = value if isinstance(value, str) else updated.isoformat()
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        problems.append(SnapshotProblem(SNAPSHOT_FILE, f"cannot read it as JSON: {exc}"))
    files: list[SnapshotFile] = []
    for path in sorted(folder.rglob("*.md")):
        rel = path.relative_to(folder).as_posix()
        if rel.lower() in IGNORED_FILES or not path.is_file():
            continue
        try:
            files.append(_check_file(path, rel, max_file_bytes))
        except (InvalidName, MemoryFormatError) as exc:
            problems.append(SnapshotProblem(rel, str(exc)))
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(SnapshotProblem(rel, f"cannot read it as UTF-8 text: {exc}"))
    return Snapshot(agent_type, folder, updated_at, updated, tuple(files), tuple(problems))


def _check_file(path: Path, rel: str, max_file_bytes: int) -> SnapshotFile:
    name = validate_filename(rel)
    if name.split("/", 1)[0] == "shared":
        raise InvalidName("'shared/' is reserved for the shared memory; rename the file")
    data = path.read_bytes()
    if len(data) > max_file_bytes:
        raise MemoryFormatError(f"{len(data)} bytes is over the {max_file_bytes}-byte limit of a memory file")
    content = data.decode("utf-8")
    if "\x00" in content:
        raise MemoryFormatError("contains a NUL character")
    return SnapshotFile(name, content, parse_memory(content))


