"""``PlaceTxn``: the one way memory files are written — several files plus a manifest change in one
commit, under one place lock.

Every writer goes through it: the tools' save / replace / delete, ``save_many``, snapshot apply,
auto-memory updates, bundle imports and ``reindex``. So there is exactly one place where the
order of writes and the manifest commit are decided, and the reliability rules (leases, the
redo record, conditional writes) are enforced once.

A transaction, inside ``MemoryDir.transaction()`` (which holds the place lock):

1. reads the manifest head (and its etag) once — and first completes the redo record of the
   commit that wrote that head, when it is not known to be complete (``redo.py``);
2. lets the caller read files (``read``; cached), stage writes (``write``, with an optional
   create-only / if-match expectation), deletions (``delete``), manifest changes (``mutate``:
   meta, created times) and state files (``put_state``: ``.snapshot-synced.json``,
   ``.auto-state.json``);
3. on ``commit``: reads the version of each listed file it writes that it has not read (their
   etags are the write conditions), checks expectations, the place's file limit and
   file-vs-folder names; PUTs the manifest head carrying the redo record (conditional on the
   version read; **the commit point**); then, side by side, PUTs the files (each conditional on
   the version it replaces where the backend enforces it), MEMORY.md and the search index, and
   removes the deleted files' objects; then writes the state files.

The place lock is a lease: ``lease.check()`` runs before the head and before the file writes, so
a holder that stalled past its lease stops before writing over the next holder's work
(``LeaseLost``). If the head PUT fails, nothing was written and the error is raised: readers see
the place as before. An unclear answer to it (a timeout, a 412 that may answer a retry of a
landed first attempt) is settled by reading the head: the commit's txid there (as the head's
commit or one of its ``recent`` ones) means it landed — done, never redone (``MemoryDir._put_head``;
docs/consistency.md). If the head PUT's outcome cannot be read back, or a file PUT fails after the
head landed, ``OutcomeUnknown`` is raised: the change is recorded in the head, and the next
writer (or ``reindex``) completes it from there. Objects are deleted only after the manifest no
longer lists them, so a failed commit never loses a file.
"""

from __future__ import annotations

import dataclasses
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
from ..storage.base import DeleteFailure, ObjectStore, StoredObject
from . import heads
from . import redo as redos
from .index import RECENT_TXIDS, Manifest, ManifestEntry
from .model import MemoryFile
from .port import announce_state
from .redo import Redo, RedoWrite, md5_hex

if TYPE_CHECKING:
    from .port import PlaceDir

log = logging.getLogger(__name__)

#: A file PUT refused after its head landed is looked at again this many times (another pod kept
#: writing it while the pods could not exclude each other) before the outcome is called unknown.
_PUT_FILE_ATTEMPTS = 3
#: ``write(..., expect=ABSENT)``: create only.
ABSENT = "absent"
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
    #: Why MEMORY.md was not rewritten by this commit (None: it was, or the caller renders it).
    index_warning: str | None = None


@dataclass(slots=True)
class _Write:
    file: str
    memory: MemoryFile
    text: str
    data: bytes
    expect: str | None
    created_at: float | None


#: Objects kept aside beside the memories (``.trash/…json``, ``.history/…/…json``: ``memdir/trash.py``).
_ASIDE_NAME = re.compile(r"^\.[a-z]+/[A-Za-z0-9_-]{1,64}(/[A-Za-z0-9_-]{1,64})?\.json$")
#: State objects kept beside the memories (``.snapshot-synced.json``, ``.auto-state.json``, …).
_STATE_NAME = re.compile(r"^\.[A-Za-z0-9][A-Za-z0-9_-]{0,63}\.json$")


def is_state_file(name: str) -> bool:
    """A dot-named JSON file at the top of a place, other than the manifest (which is rebuilt)."""
    return bool(_STATE_NAME.fullmatch(name)) and name not in (MANIFEST_FILE, INTENT_FILE)


class PlaceTxn:
    """Staged changes to one place; only ``MemoryDir.transaction()`` makes one (lock held)."""

    def __init__(self, memdir: PlaceDir, manifest: Manifest, etag: str | None, lease: Lease = LOCAL_LEASE) -> None:
        self.dir = memdir
        self.manifest = manifest
        self.etag = etag
        #: The version of the manifest this transaction started from (the commit changes ``manifest``).
        self._started_version = manifest.updated_at
        #: The place lock's lease, checked before every write.
        self.lease = lease
        self.txid = secrets.token_hex(8)
        self._reads: dict[str, StoredObject | None] = {}
        #: Files the caller read (``read``/``prefetch``): a write of one of them is derived from
        #: what was read, so it cannot simply be re-aimed at a newer version (``_refresh``).
        self._caller_read: set[str] = set()
        self._writes: dict[str, _Write] = {}
        self._deletes: list[str] = []
        self._raw_deletes: list[str] = []
        self._mutations: list[Callable[[Manifest], object]] = []
        self._state: dict[str, bytes] = {}
        self._state_deletes: set[str] = set()
        self._aside: dict[str, bytes] = {}
        #: Housekeeping run once the commit has landed (pruning old versions; never fails it).
        self._after: list[Callable[[], object]] = []
        self._clear_entries = False
        self._compact = False
        self._results: list[SaveResult] = []
        self._redo: Redo | None = None
        #: file -> the etag it has now, known without reading it (``heads.py``: this pod wrote or
        #: read it under the head this transaction started from).
        self.known_etags: dict[str, str] = {}
        #: file -> its bytes at the etag ``known_etags`` holds (small files this pod wrote or read).
        self.known_texts: dict[str, bytes] = {}
        #: file -> the version each written file replaces (None: absent), at commit.
        self._priors: dict[str, str | None] = {}
        #: A commit was tried and failed: the transaction is over.
        self.aborted = False
        #: Leave MEMORY.md and the search index to the caller (group commit renders them once
        #: after several commits).
        self.defer_views = False
        self.committed: TxnResult | None = None

    # -- reading ---------------------------------------------------------------------------
    def read(self, file: str) -> StoredObject | None:
        """The file's current object (None when absent), read once per transaction."""
        file = validate_filename(file)
        self._caller_read.add(file)
        if file not in self._reads:
            self._reads[file] = self.dir.store.get_or_none(self.dir.place.key(file))
        return self._reads[file]

    def replaced_data(self, file: str) -> bytes | None:
        """The bytes of ``file`` a write of it would replace (None: absent) — what this transaction
        read, else what the pod knows of it under this very head (``heads.py``: no GET), else a
        read. Either way the write is then derived from that version: should the head change under
        the commit, a changed file makes it redo from a fresh read (``_refresh``)."""
        file = validate_filename(file)
        if file not in self._reads and file in self.known_texts and file in self.known_etags:
            self._caller_read.add(file)
            return self.known_texts[file]
        obj = self.read(file)
        return None if obj is None else obj.data

    def seed_reads(self, found: Mapping[str, StoredObject | None]) -> None:
        """Files already read under this lock (``MemoryDir.transaction(prefetch=...)``)."""
        self._reads.update(found)

    def prefetch(self, files: list[str]) -> None:
        """Read several files at once (concurrently with the place's executor)."""
        self._caller_read.update(validate_filename(f) for f in files)
        self._fetch(files)

    def _fetch(self, files: list[str], *, again: bool = False) -> None:
        todo = list(dict.fromkeys(validate_filename(f) for f in files))
        if not again:
            todo = [f for f in todo if f not in self._reads]
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
        self._writes[file] = _Write(file, memory, content, content.encode("utf-8"), expect, created_at)
        if file in self._deletes:
            self._deletes.remove(file)

    def written_memories(self) -> dict[str, MemoryFile]:
        """The memory files this transaction wrote (for a caller that updates the views itself)."""
        return {w.file: w.memory for w in self._writes.values()}

    def committing(self) -> list[str]:
        """The files this commit writes (for a ``mutate`` that looks at their new entries)."""
        return list(self._writes)

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

    def put_aside(self, name: str, data: bytes) -> None:
        """Stage an object kept aside (a trash batch, an old version: ``memdir/trash.py``), written
        BEFORE the manifest head: what a commit removes or overwrites is safe before it goes. A
        commit whose head certainly failed removes it again (best effort)."""
        if not _ASIDE_NAME.fullmatch(name):
            raise MemoryFormatError(f"{name!r} is not a kept-aside object name (.<folder>/<id>.json)")
        self._aside[name] = data

    def after_commit(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` once this transaction has committed (best effort: a failure is logged)."""
        self._after.append(fn)

    @property
    def staged(self) -> bool:
        return bool(self._writes or self._deletes or self._mutations or self._state or self._state_deletes
                    or self._clear_entries or self._compact or self._aside)

    # -- commit ----------------------------------------------------------------------------
    def commit(self) -> TxnResult:
        """Apply everything staged (see the module docstring). Idempotent per transaction."""
        if self.committed is not None:
            return self.committed
        if self.aborted:
            raise WriteConflict("this transaction failed already; start a new one")
        try:
            out = self._commit()
        except BaseException:
            self.aborted = True
            raise
        for fn in self._after:
            try:
                fn()
            except Exception as exc:  # housekeeping: the commit stands
                log.warning("%s: housekeeping after commit %s failed (%s)", self.dir.place.label, self.txid, exc)
        return out

    def _commit(self) -> TxnResult:
        d = self.dir
        writes = list(self._writes.values())
        self._read_priors(writes)
        self._check(self.manifest, writes)
        self._plan(self.manifest, writes)
        self._begin()  # once per commit: is the lock still ours in Redis itself?
        self._put_aside()
        try:
            manifest = d.commit_manifest(
                self._apply, start=(self.manifest, self.etag), lease=self.lease, compact=self._compact,
                changes=None if self._mutations or self._clear_entries
                else ([w.file for w in writes], list(self._deletes)),
                refresh=self._refresh, txid=self.txid)
        except BaseException as exc:
            try:
                manifest = self._head_outcome(exc)
            except OutcomeUnknown:
                raise
            except BaseException:
                self._drop_aside()
                raise
        out = TxnResult(saved=list(self._results), manifest=manifest)
        if manifest.txn != self.txid:
            # Our head landed, its answer was lost, and a later commit landed on top before we read
            # it back: that commit's writer completed ours first (every transaction completes the
            # head it starts from), so nothing is left to write — and writing now would put our
            # older text over the later change.
            log.warning("%s: commit %s landed and a later one (%s) completed it", self.dir.place.label,
                        self.txid, manifest.txn)
            self._write_state(out)
            self.committed = out
            return out
        self._after_head(out, writes)
        self.committed = out
        return out

    def _begin(self) -> None:
        """The strict lease check before the first write (it also withdraws the lock's done
        marker: the head is about to change)."""
        begin = getattr(self.lease, "begin_commit", None)
        if begin is not None:
            begin()
        else:
            self.lease.check(strict=True)

    def _put_aside(self) -> None:
        """The kept-aside objects, before the head (a failure here fails the commit: nothing written)."""
        if not self._aside:
            return
        self.lease.check()
        for name, data in self._aside.items():
            self.dir.store.put(self.dir.place.prefix + name, data, content_type="application/json")

    def _drop_aside(self) -> None:
        if self._aside:
            _delete_all(self.dir.store, [self.dir.place.prefix + n for n in self._aside])

    def _read_priors(self, writes: list[_Write], manifest: Manifest | None = None) -> None:
        """The version each written file replaces (its etag is the write's condition). A name the
        manifest does not list is taken as absent without a GET: it is created write-if-absent,
        and an unlisted object found there after all (not a memory) is replaced then. A listed file
        whose etag this pod knows (``known_etags``) is not read either, unless the write has an
        expectation to check against what is really there."""
        listed = (manifest or self.manifest).entries
        fetch = []
        for w in writes:
            if w.file in self._reads:
                continue
            if w.file not in listed:
                self._reads[w.file] = None
            elif w.expect is None and w.file in self.known_etags:
                continue
            else:
                fetch.append(w.file)
        self._fetch(fetch)
        for w in writes:
            if w.file in self._reads:
                obj = self._reads[w.file]
                self._priors[w.file] = obj.etag if obj is not None else None
            else:
                self._priors[w.file] = self.known_etags[w.file]

    def _plan(self, manifest: Manifest, writes: list[_Write]) -> None:
        """The entries and the redo record of this commit, from the reads as they are now."""
        now = time.time()
        results: list[SaveResult] = []
        for w in writes:
            prior = manifest.entries.get(w.file)
            created = w.created_at if w.created_at is not None else (prior.created_at if prior else None)
            entry = ManifestEntry.from_memory(w.file, w.memory, len(w.data), created_at=created, now=now)
            results.append(SaveResult(w.file, self._priors.get(w.file) is None, entry))
        self._results = results
        gone = [f for f in self._deletes if f not in self._writes]
        self._redo = None
        if writes or gone or self._raw_deletes:
            rows = [RedoWrite(w.file, md5_hex(w.data), self._priors.get(w.file)) for w in writes]
            self._redo = Redo(self.txid, self.lease.fence, now, rows, gone, {w.file: w.text for w in writes})

    def _apply(self, m: Manifest) -> None:
        if m.txn and m.txn != self.txid:  # the commits before ours, for a writer reading back late
            m.recent = [m.txn, *(t for t in m.recent if t not in (m.txn, self.txid))][:RECENT_TXIDS]
        m.txn = self.txid  # read back after an unclear head PUT: did it land?
        m.redo = self._redo
        if self._clear_entries:
            m.entries.clear()
        for file in self._deletes:
            m.entries.pop(file, None)
        for r in self._results:
            m.entries[r.file] = r.entry
        for fn in self._mutations:
            fn(m)

    def _refresh(self, manifest: Manifest) -> None:
        """The head changed under us (another pod wrote while the pods could not exclude each
        other, e.g. Redis down): before trying again on ``manifest``, complete its commit, read
        the written files again and check the expectations anew. A write derived from a file
        the caller read that has changed since is refused (``WriteConflict``, retryable): the
        operation must be redone from the new text."""
        self.dir.complete_pending(manifest, self.lease)
        writes = list(self._writes.values())
        before = {w.file: self._priors.get(w.file) for w in writes}
        self.known_etags, self.known_texts = {}, {}
        for w in writes:  # read again: the pod's knowledge was of the head that is gone
            self._reads.pop(w.file, None)
        self._read_priors(writes, manifest)
        for w in writes:
            if w.file in self._caller_read and before[w.file] != self._priors.get(w.file):
                raise WriteConflict(f"{w.file} changed since it was read; read it again",
                                    retryable=self._still_held())
        self._check(manifest, writes)
        self._plan(manifest, writes)

    def _head_outcome(self, exc: BaseException) -> Manifest:
        """The head PUT failed: nothing of this commit was written, so ``exc`` is raised — unless
        the head landed after all (read back: it carries our txid; the commit goes on) or that
        cannot be known (the PUT may still land, or the head cannot be read): ``OutcomeUnknown``.
        A refusal (condition, lease, content) is certain: nothing landed."""
        if isinstance(exc, PreconditionFailed | LeaseLost | MemoryFormatError) or not isinstance(exc, StorageError):
            raise exc
        maybe = isinstance(exc, StorageUnavailable) and exc.maybe_applied
        try:
            current, _ = self.dir.load_manifest()
        except StorageError:
            if maybe:
                raise self._unknown(exc) from exc
            raise exc from None
        if current.holds_commit(self.txid):
            log.warning("%s: the index write reported %s but had been stored", self.dir.place.label, exc)
            return current
        if maybe:  # a stalled store may still apply it later
            raise self._unknown(exc) from exc
        raise exc

    def _unknown(self, exc: BaseException) -> OutcomeUnknown:
        return OutcomeUnknown(
            f"the memory store failed in the middle of this change ({exc}); it may or may not have taken "
            "effect. The next change to this memory (or a reindex) finishes it if it was recorded; read "
            "the file back before relying on it")

    def _check(self, manifest: Manifest, writes: list[_Write]) -> None:
        for w in writes:
            previous = self._reads.get(w.file)
            if w.expect == ABSENT and previous is not None:
                raise PreconditionFailed(f"{w.file} already exists")
            if w.expect not in (None, ABSENT) and (previous is None or previous.etag != str(w.expect).strip('"')):
                raise PreconditionFailed(f"{w.file} changed since it was read (or was deleted); read it again")
        entries = {} if self._clear_entries else manifest.entries
        deletes = set(self._deletes)
        new_names = [w.file for w in writes]
        _check_file_vs_folder(manifest, entries, deletes, new_names)
        staged = set(new_names)
        total = len(entries) - sum(1 for f in deletes if f in entries and f not in staged) \
            + sum(1 for f in staged if f not in entries)
        new = [w.file for w in writes if w.file not in manifest.entries and self._reads.get(w.file) is None]
        limit = self.dir.limits.max_files_per_place
        if new and total > limit:
            kept = total - len([f for f in staged if f not in entries])
            if kept >= limit:
                raise MemoryFormatError(f"this memory directory already holds {kept} files (the limit); "
                                        "delete or merge old memories first")
            raise MemoryFormatError(f"this batch would bring the place to {total} files; the limit is {limit}")

    def _still_held(self) -> bool:
        """Whether our lease still holds (a write conflict is then another pod writing without the
        lock, e.g. while Redis is down, and redoing the operation is right; a holder that lost its
        lease must stop instead)."""
        try:
            self.lease.check(strict=True)
        except LeaseLost:
            return False
        return True

    # -- after the head --------------------------------------------------------------------
    def _after_head(self, out: TxnResult, writes: list[_Write]) -> None:
        """The head landed: PUT the files, MEMORY.md and the search index side by side, remove
        the deleted files' objects; then the state files. A file that could not be written
        leaves the commit incomplete: ``OutcomeUnknown`` (the next writer completes it)."""
        d = self.dir
        manifest = out.manifest
        store, place = d.store, d.place
        pool = d.executor
        written = {w.file for w in writes}
        gone = [f for f in self._deletes if f not in written]
        keys = [place.key(f) for f in gone] + self._raw_deletes
        jobs: list[Callable[[], object]] = [lambda w=w: self._put_file(w, manifest) for w in writes]  # type: ignore[misc]
        views = not self.defer_views and (writes or gone or self._raw_deletes or self._compact
                                          or self._clear_entries or self._mutations)
        if views:
            jobs.append(lambda: d.put_index(manifest))
            search = self._search_after(writes)
            jobs.append(lambda: search(manifest))
        if keys:
            jobs.append(lambda: _delete_all(store, keys))
        if pool is not None and len(jobs) > 1:
            futures = [pool.submit(wrap_context(job)) for job in jobs]
            results: list[object] = []
            for future in futures:
                try:
                    results.append(future.result())
                except BaseException as exc:  # collected: every job has finished before we judge
                    results.append(exc)
        else:
            results = []
            for job in jobs:
                try:
                    results.append(job())
                except BaseException as exc:
                    results.append(exc)
        failed = [(w, r) for w, r in zip(writes, results, strict=False) if isinstance(r, BaseException)]
        deleting = 1 if keys else 0
        if keys:
            failures = results[-1]
            assert isinstance(failures, list)
            failed_keys = {f.key for f in failures}
            out.deleted = [f for f in gone if place.key(f) not in failed_keys]
            for failure in failures:
                log.warning("%s could not be removed from %s after its index entry was (%s); the next "
                            "writer removes it", failure.key, place.label, failure.message)
                out.delete_failures.append(failure.key)
        for r in results[len(writes):len(results) - deleting]:
            if isinstance(r, BaseException):  # views never raise; anything else is a bug to see
                log.warning("%s: updating MEMORY.md or the search index failed (%s)", place.label, r)
        if views:
            index = results[len(writes)]
            if isinstance(index, BaseException | str):
                out.index_warning = str(index)
                out.saved = [dataclasses.replace(r, index_warning=out.index_warning) for r in out.saved]
        if failed:
            first = failed[0][1]
            log.warning("%s: %d file(s) of commit %s not written after its index (%s); the next writer "
                        "completes them", place.label, len(failed), self.txid, first)
            self._unfinished()
            raise self._unknown(first)
        if out.delete_failures:  # recorded in the head's redo: the next holder removes them
            self._unfinished()
        else:
            etags = {w.file: r for w, r in zip(writes, results, strict=False) if isinstance(r, str) and r}
            self._finished(manifest, etags, gone)
        self._write_state(out)

    def _write_state(self, out: TxnResult) -> None:
        """The state files, after the commit (best effort: failures are listed in ``out``)."""
        store, place = self.dir.store, self.dir.place
        ours = out.manifest.head_etag is not None and out.manifest.txn == self.txid
        for name, data in self._state.items():
            try:
                store.put(place.prefix + name, data, content_type="application/json")
            except StorageError as exc:
                log.warning("%s of %s not written (%s)", name, place.label, exc)
                out.state_failures.append(name)
                continue
            if ours:  # the state at our head, for this pod's next reader (``versions.py``)
                announce_state(self.dir, out.manifest, name, data)
        for name in sorted(self._state_deletes):
            try:
                store.delete(place.prefix + name)
            except StorageError as exc:
                log.warning("%s of %s not removed (%s)", name, place.label, exc)
                out.state_failures.append(name)

    def _finished(self, manifest: Manifest, etags: dict[str, str], gone: list[str]) -> None:
        """Every write of this commit landed: remember it (this pod), tell the next holder (the
        lock's done marker) and drop the redo texts' object."""
        store, prefix = self.dir.store, self.dir.place.prefix
        if self._redo is not None:
            redos.note_done(store, prefix, self.txid)
            if self._redo.object:
                redos.drop_object(store, prefix, self._redo.object)
        if manifest.head_etag is None:
            return
        known = {f: o.etag for f, o in self._reads.items() if o is not None and f not in etags}
        texts = {f: o.data for f, o in self._reads.items() if o is not None and f not in etags}
        texts.update((w.file, w.data) for w in self._writes.values() if w.file in etags)
        heads.remember(store, prefix, manifest, manifest.head_etag, {**known, **etags}, self.etag, gone, texts)
        finished = getattr(self.lease, "finished", None)
        if finished is not None:
            finished(self.txid, manifest.head_etag)

    def _unfinished(self) -> None:
        heads.forget(self.dir.store, self.dir.place.prefix)
        finished = getattr(self.lease, "finished", None)
        if finished is not None:
            finished(None)

    def _put_file(self, w: _Write, manifest: Manifest) -> str:
        """PUT one file of the committed head, conditional on the version it replaces (create-only
        when it was absent): where the backend enforces it, a stalled ex-holder's late write is
        refused. Refused here means someone wrote the file after our read: if it holds our bytes
        (the next holder completed our commit) or a later commit replaced our head, that is fine;
        otherwise ours is written over it, as the head — the truth — says."""
        store, key = self.dir.store, self.dir.place.key(w.file)
        prior = self._priors.get(w.file)
        self.lease.check()
        try:
            if prior is None:
                return store.put_if_absent(key, w.data, content_type=MARKDOWN)
            return store.put_if_match(key, w.data, prior, content_type=MARKDOWN)
        except PreconditionFailed:
            pass
        except StorageUnavailable as exc:  # an unclear answer: look at what is there, as after a refusal
            if not exc.maybe_applied or not store.supports_conditional_put:
                raise
        ours = md5_hex(w.data)
        for attempt in range(1, _PUT_FILE_ATTEMPTS + 1):
            current = store.get_or_none(key)
            if current is not None and md5_hex(current.data) == ours:
                return current.etag
            head, _ = self.dir.load_manifest()
            if head.txn != manifest.txn:
                log.info("%s: %s was written over by a later commit before its own write", self.dir.place.label,
                         w.file)
                return ""
            self.lease.check(strict=True)
            try:
                if current is None:
                    return store.put_if_absent(key, w.data, content_type=MARKDOWN)
                return store.put_if_match(key, w.data, current.etag, content_type=MARKDOWN)
            except PreconditionFailed:  # written again meanwhile (pods not excluding each other): look again
                if attempt == _PUT_FILE_ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    def _search_after(self, writes: list[_Write]) -> Callable[[Manifest], None]:
        """COMMIT LISTENERS (search index first): one announcement with the manifest the commit
        wrote (``MemoryDir.announce`` never raises). ``since``: the manifest version this transaction
        started from, while the commit is its first try (a retried one re-read the manifest: no
        shortcut then)."""
        written = {w.file: w.memory for w in writes}
        deletes, cleared, started = list(self._deletes), self._clear_entries, self._started_version

        def run(manifest: Manifest) -> None:
            first = self.manifest is manifest  # not re-read after a conflict: ``since`` holds
            self.dir.announce(manifest, written, deletes, cleared, started if first else None)

        return run


def _delete_all(store: ObjectStore, keys: list[str]) -> list[DeleteFailure]:
    """``delete_many`` that reports a store failure as a failure of every key (never raises)."""
    try:
        return store.delete_many(keys)
    except Exception as exc:
        return [DeleteFailure(k, str(exc)) for k in keys]


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
