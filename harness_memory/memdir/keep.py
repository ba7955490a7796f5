"""What a commit keeps aside before it removes or overwrites memory files: the primitives of the
safety net (``trash.py`` has the operations on a place: list, restore, purge, history).

Staged into a ``PlaceTxn`` (``put_aside``: written before the manifest head, so what a commit
removes is safe before it goes): ``keep_removed`` (a trash batch) and ``keep_version`` (an earlier
version of one file), called by every writer — ``MemoryDir.save`` / ``replace_chunk`` / ``remove``
(the assistant's tools and, with their ``origin``, the page, the API and the CLI), group commit,
imports, snapshots, auto memory, ``clear``. Kept apart from ``trash.py`` so ``directory.py`` and
``group.py`` use it without an import cycle. Key layout and limits: ``trash.py``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import secrets
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import StorageError
from ..layout import validate_filename
from ..storage.caches import PerStore

if TYPE_CHECKING:
    from .index import Manifest
    from .port import PlaceDir
    from .txn import PlaceTxn

log = logging.getLogger(__name__)

#: The origin of a change made by the assistant (its tools): no provenance row is written for it.
ASSISTANT = "assistant"
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
    off, or when the new text is the same). A file neither listed by the manifest nor read by the
    transaction is taken as absent without a GET (a new memory costs nothing here). Once the
    commit has landed, the file's old versions are pruned (``_pruned_after``)."""
    if txn.dir.limits.history_versions <= 0:
        return None
    if file not in txn.manifest.entries and not txn.has_read(file):
        return None
    data = txn.replaced_data(file)  # no GET when the transaction or the pod has it at this version
    if data is None:
        return None
    text = _text(data)
    if replacing_with is not None and text == replacing_with:
        return None
    version = Version(new_id(), file, time.time(), origin, text)
    txn.put_aside(history_dir(file) + version.id + ".json", version.to_bytes())
    mdir = txn.dir
    txn.after_commit(lambda: _pruned_after(mdir, file, origin))
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


#: Per store, (place prefix, file) -> versions the assistant kept in this process since the last prune.
_unpruned: PerStore[dict[tuple[str, str], int]] = PerStore(dict)
_unpruned_lock = threading.Lock()
_UNPRUNED_MAX = 100_000


def _pruned_after(mdir: PlaceDir, file: str, origin: str) -> None:
    """After a commit that kept a version of ``file``: prune its history now (a person, the API, a
    restore), or every ``history_versions``-th time for the assistant (its hot path pays the LIST
    rarely). Never fails the caller."""
    if origin != ASSISTANT:
        _prune_history(mdir, file)
        return
    key = (mdir.place.prefix, file)
    counts = _unpruned.of(mdir.store)
    with _unpruned_lock:
        count = counts.get(key, 0) + 1
        due = count >= max(1, mdir.limits.history_versions)
        if due:
            counts.pop(key, None)
        else:
            if len(counts) >= _UNPRUNED_MAX:
                counts.clear()
            counts[key] = count
    if due:
        _prune_history(mdir, file)


def _prune_history(mdir: PlaceDir, file: str) -> None:
    keep = mdir.limits.history_versions
    try:
        keys = sorted(info.key for info in mdir.store.list(mdir.place.prefix + history_dir(file)))
        if len(keys) > keep:
            mdir.store.delete_many(keys[: len(keys) - keep])
    except StorageError as exc:
        log.warning("%s: old versions of %s not pruned (%s)", mdir.place.label, file, exc)


def purge_expired(mdir: PlaceDir) -> int:
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
    "history_dir",
    "id_time",
    "is_kept",
    "keep_removed",
    "keep_version",
    "new_id",
    "origin_of",
    "purge_expired",
    "record_origin",
]

