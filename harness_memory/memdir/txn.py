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
3. on ``commit``: checks expectations and the place's file limit, PUTs the staged files
   (concurrently when an executor is given), commits the manifest once (conditional PUT where
   the backend enforces it, retried on a conflict), re-renders MEMORY.md, then removes the deleted
   files' objects and writes the state files.

If a file PUT or the manifest commit fails, every file already written is put back as it was
(or removed if it was new) and the error is raised: readers see the place as before. Objects
are deleted only after the manifest no longer lists them, so a failed commit never loses a file.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import MemoryFormatError, PreconditionFailed, StorageError
from ..layout import MANIFEST_FILE, validate_filename
from ..storage.base import StoredObject
from .index import Manifest, ManifestEntry
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
    return bool(_STATE_NAME.fullmatch(name)) and name != MANIFEST_FILE


class PlaceTxn:
    """Staged changes to one place; only ``MemoryDir.transaction()`` makes one (lock held)."""

    def __init__(self, memdir: MemoryDir, manifest: Manifest, etag: str | None) -> None:
        self.dir = memdir
        self.manifest = manifest
        self.etag = etag
        self._reads: dict[str, StoredObject | None] = {}
        self._writes: dict[str, _Write] = {}
        self._deletes: list[str] = []
        self._mutations: list[Callable[[Manifest], object]] = []
        self._state: dict[str, bytes] = {}
        self._state_deletes: set[str] = set()
        self._clear_entries = False
        self.committed: TxnResult | None = None

    # -- reading ---------------------------------------------------------------------------
    def read(self, file: str) -> StoredObject | None:
        """The file's current object (None when absent), read once per transaction."""
        file = validate_filename(file)
        if file not in self._reads:
            self._reads[file] = self.dir.store.get_or_none(self.dir.place.key(file))
        return self._reads[file]

    def prefetch(self, files: list[str]) -> None:
        """Read several files at once (concurrently with the place's executor)."""
        todo = [validate_filename(f) for f in files if validate_filename(f) not in self._reads]
        if not todo:
            return
        store, place = self.dir.store, self.dir.place
        if self.dir.executor is not None and len(todo) > 1:
            found = list(self.dir.executor.map(lambda f: store.get_or_none(place.key(f)), todo))
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
        memory = self.dir.check_content(content)
        if file in self._writes:
            raise MemoryFormatError(f"the same file name appears twice in one batch: {file}")
        self._writes[file] = _Write(file, memory, content.encode("utf-8"), expect, created_at)
        if file in self._deletes:
            self._deletes.remove(file)

    def delete(self, file: str) -> None:
        """Stage the removal of a memory file (its entry leaves the manifest; the object goes after)."""
        file = validate_filename(file)
        self._writes.pop(file, None)
        if file not in self._deletes:
            self._deletes.append(file)

    def clear_entries(self) -> None:
        """The commit starts from an empty entry list (replace-style imports and snapshots)."""
        self._clear_entries = True

    def mutate(self, fn: Callable[[Manifest], object]) -> None:
        """Stage a manifest change (meta, created times) applied in the same commit."""
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
                    or self._clear_entries)

    # -- commit ----------------------------------------------------------------------------
    def commit(self) -> TxnResult:
        """Apply everything staged (see the module docstring). Idempotent per transaction."""
        if self.committed is not None:
            return self.committed
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
        written: list[str] = []
        try:
            self._put_files(writes, written)
            manifest = d.commit_manifest(self._apply_to(results), start=(self.manifest, self.etag))
        except BaseException:
            self._rollback(written)
            raise
        out = TxnResult(saved=results, manifest=manifest)
        from ..search.place import after_commit  # SEARCH INDEX: the one call; in step with the manifest, never raises
        after_commit(d, manifest, {w.file: w.memory for w in writes}, self._deletes, self._clear_entries)
        self._finish(out)
        self.committed = out
        return out

    def _check(self, writes: list[_Write]) -> None:
        for w in writes:
            previous = self._reads.get(w.file)
            if w.expect == ABSENT and previous is not None:
                raise PreconditionFailed(f"{w.file} already exists")
            if w.expect not in (None, ABSENT) and (previous is None or previous.etag != str(w.expect).strip('"')):
                raise PreconditionFailed(f"{w.file} changed since it was read (or was deleted); read it again")
        kept = set() if self._clear_entries else set(self.manifest.entries) - set(self._deletes)
        total = len(kept | {w.file for w in writes})
        new = [w.file for w in writes if w.file not in self.manifest.entries and self._reads.get(w.file) is None]
        limit = self.dir.limits.max_files_per_place
        if new and total > limit:
            if len(kept) >= limit:
                raise MemoryFormatError(f"this memory directory already holds {len(kept)} files (the limit); "
                                        "delete or merge old memories first")
            raise MemoryFormatError(f"this batch would bring the place to {total} files; the limit is {limit}")

    def _put_files(self, writes: list[_Write], written: list[str]) -> None:
        store, place = self.dir.store, self.dir.place

        def put(w: _Write) -> None:
            store.put(place.key(w.file), w.data, content_type=MARKDOWN)
            written.append(w.file)

        if self.dir.executor is not None and len(writes) > 1:
            for future in [self.dir.executor.submit(put, w) for w in writes]:
                future.result()  # the first failure raises (after every PUT finished: rollback sees all)
        else:
            for w in writes:
                put(w)

    def _apply_to(self, results: list[SaveResult]) -> Callable[[Manifest], None]:
        def apply(m: Manifest) -> None:
            if self._clear_entries:
                m.entries.clear()
            for file in self._deletes:
                m.entries.pop(file, None)
            for r in results:
                m.entries[r.file] = r.entry
            for fn in self._mutations:
                fn(m)

        return apply

    def _rollback(self, written: list[str]) -> None:
        """Put back what each written key held before (or remove keys that were new)."""
        store, place = self.dir.store, self.dir.place
        for file in written:
            previous = self._reads.get(file)
            try:
                if previous is None:
                    store.delete(place.key(file))
                else:
                    store.put(place.key(file), previous.data, content_type=MARKDOWN)
            except Exception as exc:  # the original error matters more; reindex repairs
                log.warning("rollback of %s in %s failed (%s)", file, place.label, exc)

    def _finish(self, out: TxnResult) -> None:
        store, place = self.dir.store, self.dir.place
        written = {r.file for r in out.saved}
        gone = [f for f in self._deletes if f not in written]
        failures = store.delete_many([place.key(f) for f in gone]) if gone else []
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


__all__ = ["ABSENT", "PlaceTxn", "SaveResult", "TxnResult", "is_state_file"]
