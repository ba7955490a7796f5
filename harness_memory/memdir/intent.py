"""The write-ahead intent record: how a commit that failed half-way is finished or undone.

Why: a commit writes several objects (the files, then the manifest, which is the commit
point). If the store dies between two of them, the files hold new text the index does not
list, and rolling them back may fail for the same reason. So before its first file PUT a
commit writes ``.intent.json`` in the place: a transaction id, its lease's fence number, and
for each file the bytes it held before (or that it was absent) and the MD5 of the new bytes.
The commit then stamps the manifest's ``txn`` with the same id.

The next holder of the place lock (every transaction, ``reindex`` included) reads the record
with the manifest. If the manifest carries its id, the commit happened and the record is
history. If the manifest is still the very one the commit started from, the commit never took
effect: each file still holding the new bytes gets its
old bytes back (or is removed), then the record is deleted. One record per place is enough
because one writer holds the lock at a time; a happy commit leaves its record (overwritten by
the next one), so the normal cost is one PUT per commit and one GET per transaction.

When pods cannot exclude each other (Redis down, in-process fallback lock) a record may belong
to a commit still running elsewhere: a record written without a Redis lease (fence 0), or read
without one, is left alone until it is older than any commit can run (2 x lease + lock wait).
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import StorageError

if TYPE_CHECKING:
    from .port import PlaceDir

log = logging.getLogger(__name__)


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


@dataclass(slots=True)
class IntentWrite:
    file: str
    before: bytes | None  # None: the file did not exist
    after: str  # MD5 of the bytes the commit writes


@dataclass(slots=True)
class Intent:
    txid: str
    fence: int
    at: float
    writes: list[IntentWrite] = field(default_factory=list)
    #: The manifest etag the commit started from (None: the place had no manifest).
    base: str | None = None

    def to_bytes(self) -> bytes:
        rows = [{"file": w.file, "after": w.after,
                 "before": None if w.before is None else base64.b64encode(w.before).decode("ascii")}
                for w in self.writes]
        return json.dumps({"txid": self.txid, "fence": self.fence, "at": self.at, "base": self.base,
                           "writes": rows},
                          ensure_ascii=False, separators=(",", ":")).encode("utf-8")

    @classmethod
    def from_bytes(cls, data: bytes) -> Intent:
        raw: dict[str, Any] = json.loads(data.decode("utf-8"))
        writes = [IntentWrite(str(w["file"]), None if w.get("before") is None else base64.b64decode(w["before"]),
                              str(w["after"])) for w in raw.get("writes", [])]
        base = raw.get("base")
        return cls(str(raw["txid"]), int(raw.get("fence", 0)), float(raw.get("at", 0.0)), writes,
                   None if base is None else str(base))


def load(memdir: PlaceDir) -> Intent | None:
    """The place's intent record; None when absent or unreadable (logged: it cannot be acted on)."""
    obj = memdir.store.get_or_none(memdir.intent_key)
    if obj is None:
        return None
    try:
        return Intent.from_bytes(obj.data)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("intent record of %s is damaged (%s); ignored", memdir.place.label, exc)
        return None


def resolve(memdir: PlaceDir, intent: Intent | None, committed_txid: object, manifest_etag: str | None, *,
            exclusive: bool, fence: int, min_age: float) -> bool:
    """Undo ``intent`` if its commit never happened; True when something was put back.

    The commit never happened when the manifest is still the one it started from (same etag)
    and does not carry its id. A manifest changed otherwise (deleted or edited by hand, or
    written by a pod that could not see this record) is left alone: ``reindex`` adopts the files.
    Raises StorageError when a file cannot be put back (the caller's transaction then fails,
    and the record stays for the next one)."""
    if intent is None or intent.txid == committed_txid or intent.base != manifest_etag:
        return False
    if intent.base is None and memdir.store.exists(memdir.index_key):
        return False  # a first commit that happened and whose manifest was deleted since (MEMORY.md stays)
    # The writer is surely done when we hold an exclusive lease and it wrote under one of the same
    # kind (a Redis lease: ours replaced it). A writer without a shared lease (Redis was down for
    # it) may still be committing: its record is only resolved once it is older than any commit.
    writer_done = exclusive and (intent.fence > 0 or fence == 0)
    if not writer_done and time.time() - intent.at < min_age:
        return False
    store, place = memdir.store, memdir.place
    undone = []
    for w in intent.writes:
        key = place.key(w.file)
        current = store.get_or_none(key)
        if current is None or md5_hex(current.data) != w.after:
            continue  # never written, or already put back / replaced
        if w.before is None:
            store.delete(key)
        else:
            store.put(key, w.before, content_type="text/markdown; charset=utf-8")
        undone.append(w.file)
    try:
        store.delete(memdir.intent_key)
    except StorageError as exc:  # harmless: undoing again finds nothing to do
        log.debug("intent record of %s not removed (%s)", place.label, exc)
    if undone:
        log.warning("%s: undid an unfinished commit (txn %s, fence %d) that had written %s", place.label,
                    intent.txid, intent.fence, ", ".join(undone))
    return bool(undone)
