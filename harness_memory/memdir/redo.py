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
  missing. A redo is idempotent: a file already holding the new bytes is left alone.

The texts ride inline in the head while they are small (``INLINE_TEXT_BYTES``: one save, or a
group commit of a few); a bigger batch (an import, a snapshot) first PUTs them as
``.redo.<txid>.json`` (a new key nothing reads until the head names it) and the head lists the
files without their texts. That object is removed once the commit's files have all landed.

Places written by an earlier release may hold a ``.intent.json`` undo record; a head of that
release (manifest version < 3) makes the next transaction resolve it once (``intent.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import PreconditionFailed, StorageError
from ..observe import wrap_context

if TYPE_CHECKING:
    from ..storage.base import ObjectStore, StoredObject

log = logging.getLogger(__name__)

#: Texts up to this many bytes (together) ride in the head; more go to ``.redo.<txid>.json``.
INLINE_TEXT_BYTES = 16 * 1024
MARKDOWN = "text/markdown; charset=utf-8"
JSON = "application/json"


def md5_hex(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def object_name(txid: str) -> str:
    """The object (inside the place) holding the texts of a big commit."""
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
    #: file -> new text; empty when the texts are kept in ``object`` and not loaded.
    texts: dict[str, str] = field(default_factory=dict, repr=False)
    #: The object holding the texts (``object_name``), or None when they are inline.
    object: str | None = None

    @property
    def text_bytes(self) -> int:
        return sum(len(t.encode("utf-8")) for t in self.texts.values())

    def to_json(self, *, inline: bool) -> dict[str, Any]:
        """The head's ``redo`` member; ``inline``: with the texts (else they are in ``object``)."""
        rows: list[dict[str, Any]] = []
        for w in self.writes:
            row: dict[str, Any] = {"file": w.file, "md5": w.md5, "prior": w.prior}
            if inline:
                row["text"] = self.texts[w.file]
            rows.append(row)
        out: dict[str, Any] = {"txid": self.txid, "fence": self.fence, "at": self.at, "writes": rows,
                               "deletes": list(self.deletes)}
        if not inline and self.object:
            out["object"] = self.object
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Redo:
        writes, texts = [], {}
        for row in raw.get("writes") or []:
            file = str(row["file"])
            writes.append(RedoWrite(file, str(row["md5"]), None if row.get("prior") is None else str(row["prior"])))
            if row.get("text") is not None:
                texts[file] = str(row["text"])
        obj = raw.get("object")
        return cls(str(raw["txid"]), int(raw.get("fence", 0)), float(raw.get("at", 0.0)), writes,
                   [str(f) for f in raw.get("deletes") or []], texts, None if obj is None else str(obj))

    def texts_to_bytes(self) -> bytes:
        return json.dumps({"txid": self.txid, "texts": self.texts}, ensure_ascii=False,
                          separators=(",", ":")).encode("utf-8")


def parse_texts(data: bytes, txid: str) -> dict[str, str]:
    payload = json.loads(data.decode("utf-8"))
    if str(payload.get("txid")) != txid:
        raise ValueError(f"redo object of {payload.get('txid')} is not {txid}'s")
    return {str(k): str(v) for k, v in payload["texts"].items()}


# -- which commits are known complete ---------------------------------------------------------
#: (store, place prefix) -> the last txid this pod knows to be complete there.
_done: OrderedDict[tuple[int, str], str] = OrderedDict()
_done_lock = threading.Lock()
_DONE_PLACES = 4096


def note_done(store: ObjectStore, prefix: str, txid: str) -> None:
    key = (id(store), prefix)
    with _done_lock:
        _done[key] = txid
        _done.move_to_end(key)
        while len(_done) > _DONE_PLACES:
            _done.popitem(last=False)


def known_done(store: ObjectStore, prefix: str, txid: str) -> bool:
    with _done_lock:
        return _done.get((id(store), prefix)) == txid


# -- completing a redo -------------------------------------------------------------------------
@dataclass(slots=True)
class Completion:
    """What completing a redo did: the objects its files now hold (for the caller's reads), the
    files it had to write, and files it could not (their texts were gone; logged)."""

    objects: dict[str, StoredObject] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)


def complete(store: ObjectStore, prefix: str, redo: Redo, *, executor: Executor | None = None,
             check: Callable[[], None] = lambda: None, label: str = "") -> Completion:
    """Finish ``redo`` (its head is the place's current one, so what it says is the truth): every
    file it writes holds its new bytes, every file it removes is gone. A file already holding them
    is left alone; any other content is replaced (conditional on the version just read, so a late
    PUT of the original writer — the same bytes — cannot interleave). ``check`` runs before each
    write (the caller's lease). Raises StorageError when the store fails (the head keeps the
    record: the next writer tries again)."""
    from ..storage.base import StoredObject

    texts = redo.texts
    if redo.writes and any(w.file not in texts for w in redo.writes):
        texts = _load_texts(store, prefix, redo)
    out = Completion()

    def one(w: RedoWrite) -> None:
        key = prefix + w.file
        current = store.get_or_none(key)
        if current is not None and md5_hex(current.data) == w.md5:
            out.objects[w.file] = current
            return
        text = texts.get(w.file) if texts is not None else None
        if text is None:  # the texts are gone (the writer removes them once all its files landed)
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
            raise
        out.objects[w.file] = StoredObject(key, data, etag, 0.0)
        out.written.append(w.file)

    if executor is not None and len(redo.writes) > 1:
        for future in [executor.submit(wrap_context(one), w) for w in redo.writes]:
            future.result()
    else:
        for w in redo.writes:
            one(w)
    if redo.deletes:
        check()
        failures = store.delete_many([prefix + f for f in redo.deletes])
        if failures:
            raise StorageError(f"could not remove {failures[0].key} ({failures[0].message})")
    if redo.object:
        drop_object(store, prefix, redo.object)
    if out.written or out.foreign:
        log.warning("%s: completed the commit %s (fence %d) that its writer left unfinished: wrote %s%s",
                    label or prefix, redo.txid, redo.fence, ", ".join(out.written) or "nothing",
                    f"; texts missing for: {', '.join(out.foreign)}" if out.foreign else "")
    return out


def _load_texts(store: ObjectStore, prefix: str, redo: Redo) -> dict[str, str] | None:
    if not redo.object:
        return None
    obj = store.get_or_none(prefix + redo.object)
    if obj is None:
        return None
    try:
        return parse_texts(obj.data, redo.txid)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("redo object %s%s is damaged (%s)", prefix, redo.object, exc)
        return None


def drop_object(store: ObjectStore, prefix: str, name: str) -> None:
    """Remove a redo object (best effort: ``reindex`` removes any left over)."""
    try:
        store.delete(prefix + name)
    except StorageError as exc:
        log.info("redo object %s%s not removed (%s)", prefix, name, exc)


__all__ = ["INLINE_TEXT_BYTES", "Completion", "Redo", "RedoWrite", "complete", "drop_object", "is_object_name",
           "known_done", "md5_hex", "note_done", "object_name", "parse_texts"]
