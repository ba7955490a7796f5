"""``PlaceTxn``: the one way memory files are written — several files plus a manifest change in one
commit, under one place lock.

Every writer goes through it: the tools' save / replace / delete, ``save_many``, snapshot apply,
auto-memory updates, bundle imports and ``reindex``. So there is exactly one place where the
order of writes, the rollback and the manifest commit are decided, and the reliability rules
(leases, intent records, conditional writes) are enforced once.

A transaction, inside ``MemoryDir.transaction()`` (which holds the place lock):

1. reads the manifest (and its etag) once;
2. lets the caller read files (``read``; cached, and kept as the rollback copy), stage writes
   (``write``, with an optional create-only / if-match expectation), deletions (``delete``),
   manifest changes (``mutate``: meta, created times) and state files (``put_state``:
   ``.snapshot-synced.json``, ``.auto-state.json``);
3. on ``commit``: checks expectations, the place's file limit and file-vs-folder names; writes
   the intent record (``intent.py``: what each file held before); PUTs the staged files, each
   conditional on the version read (If-Match / create-only where the backend enforces it;
   concurrently when an executor is given); commits the manifest once, stamped with the
   transaction id (``Manifest.txn``) (conditional PUT, retried with back-off within the lock-wait budget); re-renders
   MEMORY.md; then removes the deleted files' objects and writes the state files.

The place lock is a lease: ``lease.check()`` runs before the intent, the files and the manifest,
so a holder that stalled past its lease stops before writing over the next holder's work
(``LeaseLost``). If a file PUT or the manifest commit fails, every file already written is put
back as it was (or removed if it was new) and the error is raised: readers see the place as
before. If putting back fails too (the store went away), or the manifest PUT's outcome cannot be
read back, ``OutcomeUnknown`` is raised and the intent record makes the next writer finish or
undo the change. Objects are deleted only after the manifest no longer lists them, so a failed
commit never loses a file.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import (
    LeaseLost,
    MemoryFormatError,
    OutcomeUnknown,
    PreconditionFailed,
    StorageError,
    StorageUnavailable,
    WriteConflict,
)
from ..layout import INTENT_FILE, MANIFEST_FILE, validate_filename
from ..locks import LOCAL_LEASE, Lease
from ..observe import wrap_context
from ..storage.base import StoredObject
from .index import Manifest, ManifestEntry
from .intent import Intent, IntentWrite, md5_hex
from .model import MemoryFile

if TYPE_CHECKING:
    from .directory import MemoryDir

log = logging.getLogger(__name__)

#: ``write(..., expect=ABSENT)``: create only.
ABSENT = "absent"
_UNREAD = object()
MARKDOWN = "text/markdown; charset=utf-8"


@dataclass(frozen=True, slots=True)
class SaveResult:
    file: str
    created: bool
    entry: ManifestEntry
    index_warning: str | None = None


@dataclass(slots=True)
class TxnResult:
    """What one commit did: files written (in staging order), files removed, the new manifest,
    and state files that could not be written (the memory change itself is committed)."""

    saved: list[SaveResult] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    manifest: Manifest = field(default_factory=Manifest)
    state_failures: list[str] = field(default_factory=list)
    delete_failures: list[str] = field(default_factory=list)


@dataclass(slots=True)
class _Write:
    file: str
    memory: MemoryFile
    data: bytes
    expect: str | None
    created_at: float | None


#: State objects kept beside the memories (``.snapshot-synced.json``, ``.auto-state.json``, …).
_STATE_NAME = re.compile(r"^\.[A-Za-z0-9][A-Za-z0-9_-]{0,63}\.json$")


def is_state_file(name: str) -> bool:
    """A dot-named JSON file at the top of a place, other than the manifest (which is rebuilt)."""
    return bool(_STATE_NAME.fullmatch(name)) and name not in (MANIFEST_FILE, INTENT_FILE)



class PlaceTxn:
    """Staged changes to one place; only ``MemoryDir.transaction()`` makes one (lock held)."""

    def __init__(self, memdir: MemoryDir, manifest: Manifest, etag: str | None, lease: Lease = LOCAL_LEASE) -> None:
        self.dir = memdir
        self.manifest = manifest
        self.etag = etag
        #: The version of the manifest this transaction started from (the commit changes ``manifest``).
        self._started_version = manifest.updated_at
        #: The place lock's lease, checked before every write.
        self.lease = lease
        self.txid = secrets.token_hex(8)
        #: A file PUT timed out after it may have been sent: it could still land later.
        self._maybe_landed = False
        self._reads: dict[str, StoredObject | None] = {}
        self._writes: dict[str, _Write] = {}
        self._deletes: list[str] = []
        self._raw_deletes: list[str] = []
        self._mutations: list[Callable[[Manifest], object]] = []
        self._state: dict[str, bytes] = {}
        self._state_deletes: set[str] = set()
        self._clear_entries = False
        self._compact = False
        #: A commit was tried and failed (rolled back): the transaction is over.
        self.aborted = False
        #: Leave MEMORY.md and the search index to the caller (group commit renders them once
        #: after several commits).
        self.defer_views = False
        self.committed: TxnResult | None = None

    # -- reading ---------------------------------------------------------------------------
    def read(self, file: str) -> StoredObject | None:
        """The file's current object (None when absent), read once per transaction."""
        file = validate_filename(file)
        if file not in self._reads:
            self._reads[file] = self.dir.store.get_or_none(self.dir.place.key(file))
        return self._reads[file]

    def seed_reads(self, found: dict[str, StoredObject | None]) -> None:
        """Files already read under this lock (``MemoryDir.transaction(prefetch=...)``)."""
        self._reads.update(found)

    def prefetch(self, files: list[str]) -> None:
        """Read several files at once (concurrently with the place's executor)."""
        todo = [validate_filename(f) for f in files if validate_filename(f) not in self._reads]
        if not todo:
            return
        store, place = self.dir.store, self.dir.place
        if self.dir.executor is not None and len(todo) > 1:
            futures = [self.dir.executor.submit(wrap_context(store.get_or_none), place.key(f)) for f in todo]
            found = [f.result() for f in futures]
        else:
            found = [store.get_or_none(place.key(f)) for f in todo]
        self._reads.update(zip(todo, found, strict=True))

    # -- staging ---------------------------------------------------------------------------
    def write(self, file: str, content: str | MemoryFile, *, expect: str | None = None,
              created_at: float | None = None) -> None:
        """Stage a memory file. ``expect``: ``ABSENT`` (create only) or the etag the caller read
        (overwrite only that version); checked at commit. ``created_at`` restores an original
        creation time (imports); by default it is kept from the existing entry."""
        file = validate_filename(file)
        if isinstance(content, MemoryFile):
            content = content.render()
        memory = self.dir.check_content(content)  # also refuses text that cannot be UTF-8
        if file in self._writes:
            raise MemoryFormatError(f"the same file name appears twice in one batch: {file}")
        self._writes[file] = _Write(file, memory, content.encode("utf-8"), expect, created_at)
        if file in self._deletes:
            self._deletes.remove(file)

    def written_memories(self) -> dict[str, MemoryFile]:
        """The memory files this transaction wrote (for a caller that updates the views itself)."""
        return {w.file: w.memory for w in self._writes.values()}

    def has_read(self, file: str) -> bool:
        return file in self._reads

    def has_write(self, file: str) -> bool:
        return file in self._writes

    def delete(self, file: str) -> None:
        """Stage the removal of a memory file (its entry leaves the manifest; the object goes after)."""
        file = validate_filename(file)
        self._writes.pop(file, None)
        if file not in self._deletes:
            self._deletes.append(file)

    def discard_key(self, key: str) -> None:
        """Remove an object of this place by its raw key after the commit (``reindex`` moving a
        non-NFC name to its NFC form: the raw name is not a valid file name to ``delete``)."""
        if not key.startswith(self.dir.place.prefix):
            raise MemoryFormatError(f"{key} is not in {self.dir.place.label}")
        self._raw_deletes.append(key)

    def clear_entries(self) -> None:
        """The commit starts from an empty entry list (replace-style imports and snapshots)."""
        self._clear_entries = True

    def compact(self) -> None:
        """Rewrite the manifest whole in this commit (a new base for a large place, MEMORY.md
        re-rendered): ``reindex``."""
        self._compact = True

    def mutate(self, fn: Callable[[Manifest], object]) -> None:
        """Stage a manifest change (meta, created times) applied in the same commit. Replace
        entries (``dataclasses.replace``), never assign to an entry's fields: entries are shared."""
        self._mutations.append(fn)

    def put_state(self, name: str, data: bytes) -> None:
        """Stage a state file, written after the manifest commit (best effort: a failure is
        reported in ``TxnResult.state_failures``, never undoes the memory change)."""
        if not is_state_file(name):
            raise MemoryFormatError(f"{name!r} is not a state file (a dot-named .json file at the top of the place)")
        self._state[name] = data

    def delete_state(self, name: str) -> None:
        """Stage the removal of a state file (after the commit; best effort like ``put_state``)."""
        if not is_state_file(name):
            raise MemoryFormatError(f"{name!r} is not a state file")
        self._state.pop(name, None)
        self._state_deletes.add(name)

    @property
    def staged(self) -> bool:
        return bool(self._writes or self._deletes or self._mutations or self._state or self._state_deletes
                    or self._clear_entries or self._compact)

    # -- commit ----------------------------------------------------------------------------
    def commit(self) -> TxnResult:
        """Apply everything staged (see the module docstring). Idempotent per transaction."""
        if self.committed is not None:
            return self.committed
        if self.aborted:
            raise WriteConflict("this transaction failed already; start a new one")
        try:
            return self._commit()
        except BaseException:
            self.aborted = True
            raise

    def _commit(self) -> TxnResult:
        d = self.dir
        writes = list(self._writes.values())
        self.prefetch([w.file for w in writes])
        self._check(writes)
        now = time.time()
        results: list[SaveResult] = []
        for w in writes:
            prior = self.manifest.entries.get(w.file)
            created = w.created_at if w.created_at is not None else (prior.created_at if prior else None)
            entry = ManifestEntry.from_memory(w.file, w.memory, len(w.data), created_at=created, now=now)
            results.append(SaveResult(w.file, self._reads.get(w.file) is None, entry))
        written: dict[str, str | None] = {}  # file -> etag of what we wrote (None: PUT sent, no answer)
        mutate = self._apply_to(results, stamp=bool(writes))
        self.lease.check(strict=True)  # once per commit: is the lock still ours in Redis itself?
        if writes:
            self._write_intent(writes)
        try:
            self._put_files(writes, written)
            manifest = d.commit_manifest(mutate, start=(self.manifest, self.etag), lease=self.lease,
                                         compact=self._compact, views=not self.defer_views,
                                         after=None if self.defer_views else self._search_after(writes),
                                         changes=None if self._mutations or self._clear_entries
                                         else ([w.file for w in writes], list(self._deletes)))
        except BaseException as exc:
            manifest = self._recover(exc, written, bool(writes))
        out = TxnResult(saved=results, manifest=manifest)
        self._finish(out)
        self.committed = out
        return out

    def _search_after(self, writes: list[_Write]) -> Callable[[Manifest], None]:
        """SEARCH INDEX: the one call, made with the manifest the commit wrote (``after_commit``
        never raises). ``since``: the manifest version this transaction started from, while the
        commit is its first try (a retried one re-read the manifest: no shortcut then)."""
        from ..search.place import after_commit

        written = {w.file: w.memory for w in writes}
        deletes, cleared, started = list(self._deletes), self._clear_entries, self._started_version

        def run(manifest: Manifest) -> None:
            first = self.manifest is manifest
            after_commit(self.dir, manifest, written, deletes, cleared, started if first else None)

        return run

    def _write_intent(self, writes: list[_Write]) -> None:
        """The write-ahead record (``intent.py``); if it fails nothing has changed yet."""
        rows = []
        for w in writes:
            previous = self._reads.get(w.file)
            rows.append(IntentWrite(w.file, previous.data if previous is not None else None, md5_hex(w.data)))
        intent = Intent(self.txid, self.lease.fence, time.time(), rows, base=self.etag)
        self.dir.store.put(self.dir.intent_key, intent.to_bytes(), content_type="application/json")

    def _recover(self, exc: BaseException, written: dict[str, str | None], stamped: bool) -> Manifest:
        """After a failed commit: return the manifest if it did commit after all, else put the
        written files back and re-raise ``exc`` — or raise OutcomeUnknown when neither is sure.

        Unsure means: the store could not be read back, a file could not be put back, or a
        request that timed out after it may have been sent (a stalled store applies it later) —
        then the intent record stays for the next writer, and the caller is told."""
        ambiguous = stamped and not isinstance(exc, PreconditionFailed | LeaseLost | MemoryFormatError) \
            and isinstance(exc, StorageError)
        if ambiguous:  # the manifest PUT may have landed although it reported a failure
            try:
                current, _ = self.dir.load_manifest()
            except StorageError:
                raise self._unknown(exc) from exc
            if current.txn == self.txid:
                log.warning("%s: the index write reported %s but had been stored", self.dir.place.label, exc)
                return current
            if isinstance(exc, StorageUnavailable) and exc.maybe_applied and not self._maybe_landed:
                raise self._unknown(exc) from exc  # the manifest PUT itself may still land: leave it all
        if not self._rollback(written, keep_intent=self._maybe_landed) or self._maybe_landed:
            raise self._unknown(exc) from exc
        raise exc

    def _unknown(self, exc: BaseException) -> OutcomeUnknown:
        return OutcomeUnknown(
            f"the memory store failed in the middle of this change ({exc}); it may or may not have taken "
            "effect. The next change to this memory (or a reindex) finishes or undoes it; read the file "
            "back before relying on it")

    def _check(self, writes: list[_Write]) -> None:
        for w in writes:
            previous = self._reads.get(w.file)
            if w.expect == ABSENT and previous is not None:
                raise PreconditionFailed(f"{w.file} already exists")
            if w.expect not in (None, ABSENT) and (previous is None or previous.etag != str(w.expect).strip('"')):
                raise PreconditionFailed(f"{w.file} changed since it was read (or was deleted); read it again")
        entries = {} if self._clear_entries else self.manifest.entries
        deletes = set(self._deletes)
        new_names = [w.file for w in writes]
        _check_file_vs_folder(self.manifest, entries, deletes, new_names)
        staged = set(new_names)
        total = len(entries) - sum(1 for f in deletes if f in entries and f not in staged) \
            + sum(1 for f in staged if f not in entries)
        new = [w.file for w in writes if w.file not in self.manifest.entries and self._reads.get(w.file) is None]
        limit = self.dir.limits.max_files_per_place
        if new and total > limit:
            kept = total - len([f for f in staged if f not in entries])
            if kept >= limit:
                raise MemoryFormatError(f"this memory directory already holds {kept} files (the limit); "
                                        "delete or merge old memories first")
            raise MemoryFormatError(f"this batch would bring the place to {total} files; the limit is {limit}")

    def _put_files(self, writes: list[_Write], written: dict[str, str | None]) -> None:
        """PUT each file conditional on the version this transaction read (create-only when it
        was absent): where the backend enforces it, a stalled ex-holder's late write is refused."""
        store, place = self.dir.store, self.dir.place
        if not writes:
            return
        self.lease.check()

        def put(w: _Write) -> None:
            previous = self._reads.get(w.file)
            key = place.key(w.file)
            written[w.file] = None  # a PUT that fails may still have landed: the rollback checks
            try:
                if previous is None:
                    etag = store.put_if_absent(key, w.data, content_type=MARKDOWN)
                else:
                    etag = store.put_if_match(key, w.data, previous.etag, content_type=MARKDOWN)
            except PreconditionFailed as exc:
                written.pop(w.file, None)  # refused: nothing of ours landed
                raise WriteConflict(str(exc), retryable=self._still_held()) from None
            except StorageUnavailable as exc:
                self._maybe_landed = self._maybe_landed or exc.maybe_applied
                raise
            written[w.file] = etag

        if self.dir.executor is not None and len(writes) > 1:
            for future in [self.dir.executor.submit(wrap_context(put), w) for w in writes]:
                future.result()  # the first failure raises (after every PUT finished: rollback sees all)
        else:
            for w in writes:
                put(w)

    def _still_held(self) -> bool:
        """Whether our lease still holds (a write conflict is then another pod writing without the
        lock, e.g. while Redis is down, and redoing the operation is right; a holder that lost its
        lease must stop instead)."""
        try:
            self.lease.check(strict=True)
        except LeaseLost:
            return False
        return True

    def _apply_to(self, results: list[SaveResult], *, stamp: bool) -> Callable[[Manifest], None]:
        def apply(m: Manifest) -> None:
            if stamp:  # the commit point of the intent record
                m.txn = self.txid
            if self._clear_entries:
                m.entries.clear()
            for file in self._deletes:
                m.entries.pop(file, None)
            for r in results:
                m.entries[r.file] = r.entry
            for fn in self._mutations:
                fn(m)

        return apply

    def _rollback(self, written: dict[str, str | None], *, keep_intent: bool = False) -> bool:
        """Put back what each written key held before (or remove keys that were new), each only
        while it still holds what we wrote. True when every file is back (the intent record is
        then removed); False leaves the record for the next writer."""
        store, place = self.dir.store, self.dir.place
        ok = True
        for file, etag in list(written.items()):
            previous = self._reads.get(file)
            key = place.key(file)
            try:
                if etag is None or previous is None or not store.supports_conditional_put:
                    current = store.get_or_none(key)
                    if current is None or md5_hex(current.data) != md5_hex(self._writes[file].data):
                        continue  # never landed, or not ours any more (put back or replaced by a later holder)
                    etag = current.etag
                if previous is None:
                    store.delete(key)
                else:
                    store.put_if_match(key, previous.data, etag, content_type=MARKDOWN)  # plain PUT on COS
            except PreconditionFailed:
                continue  # someone else's now: not ours to put back
            except Exception as exc:  # the original error matters more; the intent record repairs
                log.warning("rollback of %s in %s failed (%s); the next writer undoes it", file, place.label, exc)
                ok = False
        lost = getattr(self.lease, "lost", False)  # then the record may be the next holder's
        if ok and written and not keep_intent and not lost:
            try:
                store.delete(self.dir.intent_key)
            except StorageError:
                pass  # undoing it again finds nothing to do
        return ok

    def _finish(self, out: TxnResult) -> None:
        store, place = self.dir.store, self.dir.place
        written = {r.file for r in out.saved}
        gone = [f for f in self._deletes if f not in written]
        keys = [place.key(f) for f in gone] + self._raw_deletes
        failures = store.delete_many(keys) if keys else []
        failed = {f.key for f in failures}
        out.deleted = [f for f in gone if place.key(f) not in failed]
        for failure in failures:
            log.warning("%s could not be removed from %s after its index entry was (%s); a later "
                        "reindex would list it again", failure.key, place.label, failure.message)
            out.delete_failures.append(failure.key)
        for name, data in self._state.items():
            try:
                store.put(place.prefix + name, data, content_type="application/json")
            except StorageError as exc:
                log.warning("%s of %s not written (%s)", name, place.label, exc)
                out.state_failures.append(name)
        for name in sorted(self._state_deletes):
            try:
                store.delete(place.prefix + name)
            except StorageError as exc:
                log.warning("%s of %s not removed (%s)", name, place.label, exc)
                out.state_failures.append(name)


def _check_file_vs_folder(manifest: Manifest, entries: Mapping[str, object], deletes: set[str],
                          new: list[str]) -> None:
    """``x.md`` and ``x.md/child.md`` cannot both exist: a local directory cannot hold them (a
    file is not a folder) and COS could, so both backends refuse it the same way, up front.
    O(names written × depth) plus a sorted lookup per name (``Manifest.first_under``), so a save
    into a 10,000-memory place does not walk every name."""
    staged = set(new)

    def exists(name: str) -> bool:
        return name in staged or (name in entries and name not in deletes)

    for file in new:
        parts = file.split("/")
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            if exists(parent):
                raise MemoryFormatError(f"{file} would put a file inside {parent}, which is a memory file; "
                                        "choose another name")
        folder = file + "/"
        clash = next((n for n in staged if n.startswith(folder)), None)
        if clash is None and entries:
            clash = manifest.first_under(folder, skip=deletes)
        if clash is not None:
            raise MemoryFormatError(f"{file} is a folder holding {clash}; choose another name")


__all__ = ["ABSENT", "PlaceTxn", "SaveResult", "TxnResult", "is_state_file"]
