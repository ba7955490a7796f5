"""The redo record: the manifest head is the commit point, and it carries what the commit writes.

Why: a commit writes several objects — the manifest head and the memory files. The earlier design
wrote the files first, so it had to PUT an undo record (``.intent.json``: what each file held
before) ahead of them, and every save waited for four store round trips in a row (intent, file,
head, MEMORY.md). Now the order is:

1. the **head** (``.manifest.json``), conditional on the version read under the lease, carrying a
   redo record: the transaction id, the lease's fence number, and for every file the commit
   writes its new text, the MD5 of those bytes and the version (etag) it replaces, plus the files
   it removes. That PUT is the commit point;
2. then, side by side: the **files** (each conditional on the version it replaces where the
   backend enforces it: a stalled ex-holder's late write is refused), **MEMORY.md** and the
   **search index**, and the removed files' objects.

So a save costs two write round trips, and:

* the head PUT is refused or fails → nothing was written: the save failed and changed nothing;
* the head landed and a file PUT failed (or stalled past the lease) → the change is committed but
  not complete: the writer says its outcome is not certain yet, and **the next holder of the place
  lock (or ``reindex``) completes it from the redo record** before doing anything else — readers
  then see the change whole, never half of it;
* a writer whose file writes all landed says so beside the lock in Redis (the *done* marker, set
  with the lock's release) and remembers it in the pod, so the next holder does not check the
  files again; without either it checks them (one GET each, concurrently) and writes what is
  missing. A redo is idempotent: a file already holding the new bytes is left alone, and one that
  a later commit has already moved on (pods not excluding each other) is never written back.

The record rides whole in the head while it is small (``INLINE_TEXT_BYTES``, ``INLINE_FILES``: one
save, or a group commit of a few); a bigger one (an import, a snapshot) is first PUT as
``.redo.<txid>.json`` (a new key nothing reads until the head names it) and the head names only
that object, so the head every build reads stays small. The object is removed once the commit's
writes have all landed (a missing object therefore means there is nothing left to do).

Places written by an earlier release may hold a ``.intent.json`` undo record; a head of that
release (manifest version < 3) makes the next transaction resolve it once (``intent.py``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import PreconditionFailed, StorageError, WriteConflict
from ..observe import wrap_context
from ..storage.caches import PerStore

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..storage.base import ObjectStore, StoredObject

log = logging.getLogger(__name__)


class HeadView(Protocol):
    """What a completion reads of the place's current head (``index.Manifest`` is one): a
    Protocol, because the manifest's module imports this one."""

    txn: str
    entries: Mapping[str, Any]

#: A record rides whole in the head while its texts take at most this many bytes together and it
#: names at most ``INLINE_FILES`` files; a bigger one (an import, a snapshot) is written to
#: ``.redo.<txid>.json`` first and the head only names that object, so a head — which every build
#: reads — stays small after a big batch.
INLINE_TEXT_BYTES = 16 * 1024
INLINE_FILES = 64
MARKDOWN = "text/markdown; charset=utf-8"
JSON = "application/json"


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def object_name(txid: str) -> str:
    """The object (inside the place) holding the record of a big commit."""
    return f".redo.{txid}.json"


def is_object_name(name: str) -> bool:
    return name.startswith(".redo.") and name.endswith(".json") and "/" not in name


@dataclass(frozen=True, slots=True)
class RedoWrite:
    file: str
    #: MD5 (hex) of the bytes the commit writes.
    md5: str
    #: The etag the file had when the commit read it; None when it was absent (create-only).
    prior: str | None


@dataclass(slots=True)
class Redo:
    """What one commit writes after its head: files (with texts) and removals."""

    txid: str
    fence: int
    at: float
    writes: list[RedoWrite] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    #: file -> new text.
    texts: dict[str, str] = field(default_factory=dict, repr=False)
    #: The object holding the whole record (``object_name``), or None when it rides in the head;
    #: read from a head, such a record has no rows until ``complete`` loads the object.
    object: str | None = None

    @property
    def text_bytes(self) -> int:
        return sum(len(t.encode("utf-8")) for t in self.texts.values())

    @property
    def big(self) -> bool:
        """Too big to ride in the head (``INLINE_TEXT_BYTES``, ``INLINE_FILES``)."""
        return len(self.writes) + len(self.deletes) > INLINE_FILES or self.text_bytes > INLINE_TEXT_BYTES

    @property
    def empty(self) -> bool:
        return not (self.writes or self.deletes or self.object)

    def to_json(self, *, inline: bool) -> dict[str, Any]:
        """The head's ``redo`` member: the whole record (``inline``), or only the object holding it."""
        out: dict[str, Any] = {"txid": self.txid, "fence": self.fence, "at": self.at}
        if not inline and self.object:
            out["object"] = self.object
            return out
        out["writes"] = [{"file": w.file, "md5": w.md5, "prior": w.prior, "text": self.texts[w.file]}
                         for w in self.writes]
        out["deletes"] = list(self.deletes)
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Redo:
        """A record as the head (or its object) holds it; one that lives in an object has no rows
        until ``complete`` reads the object."""
        writes, texts = [], {}
        for row in raw.get("writes") or []:
            file = str(row["file"])
            writes.append(RedoWrite(file, str(row["md5"]), None if row.get("prior") is None else str(row["prior"])))
            if row.get("text") is not None:
                texts[file] = str(row["text"])
        obj = raw.get("object")
        return cls(str(raw["txid"]), int(raw.get("fence", 0)), float(raw.get("at", 0.0)), writes,
                   [str(f) for f in raw.get("deletes") or []], texts, None if obj is None else str(obj))

    def object_bytes(self) -> bytes:
        """The whole record, for ``.redo.<txid>.json``."""
        return json.dumps(self.to_json(inline=True), ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def parse_object(data: bytes, txid: str) -> Redo:
    record = Redo.from_json(json.loads(data.decode("utf-8")))
    if record.txid != txid:
        raise ValueError(f"redo object of {record.txid} is not {txid}'s")
    return record


# -- which commits are known complete ---------------------------------------------------------
#: Per store (dies with it): place prefix -> the last txid this pod knows to be complete there.
_done: PerStore[OrderedDict[str, str]] = PerStore(OrderedDict)
_done_lock = threading.Lock()
_DONE_PLACES = 4096


def note_done(store: ObjectStore, prefix: str, txid: str) -> None:
    done = _done.of(store)
    with _done_lock:
        done[prefix] = txid
        done.move_to_end(prefix)
        while len(done) > _DONE_PLACES:
            done.popitem(last=False)


def known_done(store: ObjectStore, prefix: str, txid: str) -> bool:
    with _done_lock:
        return _done.of(store).get(prefix) == txid


# -- completing a redo -------------------------------------------------------------------------
@dataclass(slots=True)
class Completion:
    """What completing a redo did: the objects its files now hold (for the caller's reads), the
    files it had to write, and files it could not (their texts were gone; logged)."""

    objects: dict[str, StoredObject] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    #: Files a later commit had already moved on (pods not excluding each other): left as they are.
    superseded: list[str] = field(default_factory=list)


def complete(store: ObjectStore, prefix: str, redo: Redo, *, executor: Executor | None = None,
             check: Callable[[], None] = lambda: None, label: str = "", running: bool = False,
             load_head: Callable[[], HeadView] | None = None) -> Completion:
    """Finish ``redo``, the record of the head the caller loaded: every file it writes holds its
    new bytes, every file it removes is gone. A file already holding them is left alone; a file
    still at the version the commit replaced (``prior``) is written (conditional on that version,
    so a late PUT of the original writer — the same bytes — cannot interleave).

    A file holding anything else was either written outside this protocol or moved on by a
    *later* commit: while pods cannot exclude each other (Redis down, or the seconds after it
    came back), another pod may have committed on top of this head after the caller loaded it,
    and writing this commit's older text would undo that later, reported-done change (seen in the
    Redis-outage storm). So the file is replaced only while ``load_head()`` (the place's current
    head) is still this commit's; otherwise it is left to the later commit, and a removal is
    carried out only for files the current head does not list (a later commit may have written
    the name again). ``check`` runs before each write (the caller's lease); ``running``: the
    writer may still be at it (the lease is not exclusive), so finding work to do is no news.
    Raises StorageError when the store fails (the head keeps the record: the next writer tries
    again), and a retryable ``WriteConflict`` when the file changed under the completion while
    this commit is still the head."""
    from ..storage.base import StoredObject

    head = _CurrentHead(load_head)

    def still_head(fresh: bool = False) -> bool:
        now = head.get(fresh)
        return now is None or now.txn == redo.txid

    out = Completion()
    if redo.object and not redo.writes and not redo.deletes:
        whole = _load_object(store, prefix, redo)
        if whole is None:  # removed: the writer removes it once all its writes landed
            return out
        redo = dataclasses.replace(whole, object=redo.object)
    texts = redo.texts

    def one(w: RedoWrite) -> None:
        key = prefix + w.file
        current = store.get_or_none(key)
        if current is not None and md5_hex(current.data) == w.md5:
            out.objects[w.file] = current
            return
        at_prior = (current.etag if current is not None else None) == w.prior
        if not at_prior and not still_head():  # a later commit moved the file on: not ours to touch
            out.superseded.append(w.file)
            return
        text = texts.get(w.file)
        if text is None:  # a damaged record: reindex adopts whatever the file holds
            out.foreign.append(w.file)
            if current is not None:
                out.objects[w.file] = current
            return
        data = text.encode("utf-8")
        check()
        try:
            etag = store.put_if_absent(key, data, content_type=MARKDOWN) if current is None else \
                store.put_if_match(key, data, current.etag, content_type=MARKDOWN)
        except PreconditionFailed:  # the original writer's own PUT landed meanwhile (or another's)
            again = store.get_or_none(key)
            if again is not None and md5_hex(again.data) == w.md5:
                out.objects[w.file] = again
                return
            if not still_head(fresh=True):  # look again: a later commit may have landed meanwhile
                out.superseded.append(w.file)
                return
            raise WriteConflict(f"{w.file} changed while an unfinished change to it was being completed; "
                                "try again", retryable=True) from None
        out.objects[w.file] = StoredObject(key, data, etag, 0.0)
        out.written.append(w.file)

    if executor is not None and len(redo.writes) > 1:
        for future in [executor.submit(wrap_context(one), w) for w in redo.writes]:
            future.result()
    else:
        for w in redo.writes:
            one(w)
    deletes = redo.deletes
    if deletes and not still_head():  # only names no later commit has written again
        listed = head.get().entries  # type: ignore[union-attr]
        out.superseded.extend(f for f in deletes if f in listed)
        deletes = [f for f in deletes if f not in listed]
    if deletes:
        check()
        failures = store.delete_many([prefix + f for f in deletes])
        if failures:
            raise StorageError(f"could not remove {failures[0].key} ({failures[0].message})")
    if redo.object:
        drop_object(store, prefix, redo.object)
    if out.written or out.foreign:
        # ``running``: pods cannot exclude each other (Redis down), so the writer may simply still
        # be writing; worth a warning only when it surely stopped.
        log.log(logging.INFO if running else logging.WARNING,
                "%s: completed the commit %s (fence %d) %s: wrote %s%s", label or prefix, redo.txid, redo.fence,
                "of a writer that may still be running" if running else "that its writer left unfinished",
                ", ".join(out.written) or "nothing",
                f"; texts missing for: {', '.join(out.foreign)}" if out.foreign else "")
    return out


class _CurrentHead:
    """The place's current head as ``complete`` needs it: read on demand, once per completion (or
    again when asked ``fresh``), shared by the files completed side by side."""

    def __init__(self, load: Callable[[], HeadView] | None) -> None:
        self._load = load
        self._lock = threading.Lock()
        self._head: HeadView | None = None

    def get(self, fresh: bool = False) -> HeadView | None:
        """None when the caller gave no way to read it (the record is then taken as current)."""
        if self._load is None:
            return None
        with self._lock:
            if fresh or self._head is None:
                self._head = self._load()
            return self._head


def _load_object(store: ObjectStore, prefix: str, redo: Redo) -> Redo | None:
    assert redo.object is not None
    obj = store.get_or_none(prefix + redo.object)
    if obj is None:
        return None
    try:
        return parse_object(obj.data, redo.txid)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("redo object %s%s is damaged (%s); reindex repairs the place", prefix, redo.object, exc)
        return None


def drop_object(store: ObjectStore, prefix: str, name: str) -> None:
    """Remove a redo object (best effort: ``reindex`` removes any left over)."""
    try:
        store.delete(prefix + name)
    except StorageError as exc:
        log.info("redo object %s%s not removed (%s)", prefix, name, exc)


__all__ = ["INLINE_FILES", "INLINE_TEXT_BYTES", "Completion", "Redo", "RedoWrite", "complete", "drop_object",
           "is_object_name", "known_done", "md5_hex", "note_done", "object_name", "parse_object"]
