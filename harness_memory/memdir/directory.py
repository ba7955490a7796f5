"""One memory place as a directory of memory files with its index kept in step.

Why the write path looks like this: the manifest is the index of record and is updated
read-modify-write under the place lock, with a conditional PUT (If-Match / create-only) as a
second guard where the backend enforces it. Every write — one file or many, a delete, a
snapshot, an auto-memory update, an import — is one ``PlaceTxn`` (``memdir/txn.py``): the files
are written first; if the index update then fails, the file writes are rolled back, so a failed
save leaves the place as it was. MEMORY.md is re-rendered from the manifest after every change;
if only that write fails the next change heals it, and readers use the manifest anyway.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass

from ..config import LimitsConfig
from ..errors import MemoryFormatError, ObjectNotFound, PreconditionFailed, StorageError
from ..layout import INDEX_FILE, MANIFEST_FILE, Place, validate_filename
from ..locks import LocalLocker, Locker
from ..storage.base import ObjectStore
from .index import CappedText, Manifest, ManifestEntry, cap_index, parse_index, render_index
from .model import MemoryFile, parse_memory
from .txn import ABSENT, PlaceTxn, SaveResult, TxnResult

log = logging.getLogger(__name__)
COMMIT_ATTEMPTS = 6


@dataclass(frozen=True, slots=True)
class ReadResult:
    file: str
    text: str
    etag: str
    last_modified: float


class MemoryDir:
    """Memory files of one place, bound to a store, a locker and the size limits."""

    def __init__(self, store: ObjectStore, place: Place, *, locker: Locker | None = None,
                 limits: LimitsConfig | None = None, executor: Executor | None = None) -> None:
        self.store = store
        self.place = place
        self.limits = limits or LimitsConfig()
        #: Runs a transaction's file reads and writes concurrently (the services' ``io`` pool).
        self.executor = executor
        self.locker = locker or LocalLocker(ttl=self.limits.lock_ttl_seconds, wait=self.limits.lock_wait_seconds)

    def __repr__(self) -> str:
        return f"MemoryDir({self.place.label})"

    @property
    def manifest_key(self) -> str:
        return self.place.reserved_key(MANIFEST_FILE)

    @property
    def index_key(self) -> str:
        return self.place.reserved_key(INDEX_FILE)

    # -- reading --------------------------------------------------------------------------
    def load_manifest(self) -> tuple[Manifest, str | None]:
        """The manifest and its etag (None when the place has none yet). One GET."""
        obj = self.store.get_or_none(self.manifest_key)
        if obj is None:
            return Manifest(), None
        return Manifest.from_bytes(obj.data), obj.etag

    def manifest(self) -> Manifest:
        return self.load_manifest()[0]

    def index_text(self, manifest: Manifest | None = None) -> CappedText:
        """MEMORY.md as the model should see it: rendered from the manifest, capped.

        A place without a manifest falls back to its MEMORY.md object (one more GET).
        """
        if manifest is None:
            manifest = self.manifest()
        if manifest.entries:
            text = render_index(manifest)
        else:
            obj = self.store.get_or_none(self.index_key)
            text = obj.data.decode("utf-8", errors="replace") if obj else ""
        return cap_index(text, self.limits.index_max_lines, self.limits.index_max_bytes)

    def read(self, file: str) -> ReadResult:
        file = validate_filename(file)
        obj = self.store.get(self.place.key(file))
        return ReadResult(file, obj.data.decode("utf-8", errors="replace"), obj.etag, obj.last_modified)

    def list_entries(self) -> list[ManifestEntry]:
        manifest = self.manifest()
        if manifest.entries:
            return manifest.sorted_entries()
        # No manifest: fall back to MEMORY.md lines (e.g. a hand-copied snapshot).
        obj = self.store.get_or_none(self.index_key)
        if obj is None:
            return []
        return [ManifestEntry(file=f, name=n, description=d, type="")
                for n, f, d in parse_index(obj.data.decode("utf-8", errors="replace"))]

    def memory_files(self, manifest: Manifest | None = None) -> set[str]:
        """Every memory file of the place: the index's entries plus any file LIST finds (orphans
        too). LISTs the place: for operator actions (replace, import), never an agent build."""
        files = set((manifest or self.manifest()).entries)
        for info in self.store.list(self.place.prefix):
            name = info.key[len(self.place.prefix):]
            if name != INDEX_FILE and name.endswith(".md") and not any(p.startswith(".") for p in name.split("/")):
                files.add(name)
        return files

    # -- writing --------------------------------------------------------------------------
    def check_content(self, content: str) -> MemoryFile:
        """Validate size and frontmatter before anything is written."""
        if not isinstance(content, str):
            raise MemoryFormatError("content must be text")
        size = len(content.encode("utf-8"))
        if size > self.limits.max_file_bytes:
            raise MemoryFormatError(
                f"content is {size} bytes; the limit is {self.limits.max_file_bytes} bytes. "
                "Split it into smaller memories or keep only what will matter later."
            )
        if "\x00" in content:
            raise MemoryFormatError("content contains a NUL character")
        return parse_memory(content)

    def transaction(self) -> contextlib.AbstractContextManager[PlaceTxn]:
        """Hold the place lock and yield a ``PlaceTxn`` started from the current manifest; what
        the block stages is committed when it ends without an exception (nothing otherwise)."""
        return self._transaction()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[PlaceTxn]:
        with self.locker.hold(self.place.lock_name()):
            manifest, etag = self.load_manifest()
            txn = PlaceTxn(self, manifest, etag)
            yield txn
            if txn.staged:
                txn.commit()

    def save(self, file: str, content: str, *, expect: str | None = None) -> SaveResult:
        """Write a memory file (create or overwrite) and its index entry, atomically as a unit.

        ``expect``: None writes unconditionally; ``ABSENT`` only creates (PreconditionFailed when
        the file exists); an etag only overwrites that version (PreconditionFailed when the file
        changed or is gone) — checked under the place lock, so two editors cannot both win.
        """
        file = validate_filename(file)
        self.check_content(content)  # refuse bad content before waiting for the lock
        with self.transaction() as txn:
            txn.write(file, content, expect=expect)
        return _committed(txn).saved[0]

    def save_memory(self, file: str, memory: MemoryFile) -> SaveResult:
        return self.save(file, memory.render())

    def save_many(self, items: list[tuple[str, str]]) -> list[SaveResult]:
        """Write many memory files with ONE index update (imports, snapshots, seeding).

        Everything is validated before the first write; if the index update fails, every file
        written here is rolled back, so the place is either fully updated or unchanged.
        """
        checked = [(validate_filename(f), c) for f, c in items]
        for _, content in checked:
            self.check_content(content)
        if len({f for f, _ in checked}) != len(checked):
            raise MemoryFormatError("the same file name appears twice in one batch")
        with self.transaction() as txn:
            for file, content in checked:
                txn.write(file, content)
        return _committed(txn).saved

    def replace_chunk(self, file: str, old: str, new: str, *, replace_all: bool = False) -> SaveResult:
        """Replace an exact chunk of a memory file (must match once unless ``replace_all``)."""
        file = validate_filename(file)
        if not old:
            raise MemoryFormatError("old_chunk must not be empty; use save_file to rewrite a whole file")
        with self.transaction() as txn:
            current_obj = txn.read(file)
            if current_obj is None:
                raise ObjectNotFound(f"no object at {self.place.key(file)}")
            current = current_obj.data.decode("utf-8", errors="replace")
            count = current.count(old)
            if count == 0:
                raise MemoryFormatError(
                    f"the text to replace was not found in {file}; read_file it and copy the exact text"
                )
            if count > 1 and not replace_all:
                raise MemoryFormatError(
                    f"the text to replace occurs {count} times in {file}; include more surrounding text "
                    "so it matches exactly once"
                )
            txn.write(file, current.replace(old, new))
        return _committed(txn).saved[0]

    def delete(self, file: str) -> bool:
        """Remove a memory file and its index entry; False when it did not exist."""
        file = validate_filename(file)
        with self.transaction() as txn:
            if not self.store.exists(self.place.key(file)) and file not in txn.manifest.entries:
                return False
            txn.delete(file)
        return True

    def update_meta(self, mutate: Callable[[Manifest], None]) -> Manifest:
        """Change the manifest's ``meta`` (or entries) under the place lock."""
        with self.transaction() as txn:
            txn.mutate(mutate)
        return _committed(txn).manifest

    def clear(self) -> int:
        """Delete every memory file, the manifest and MEMORY.md of this place."""
        with self.locker.hold(self.place.lock_name()):
            keys = [info.key for info in self.store.list(self.place.prefix)]
            failures = self.store.delete_many(keys)
            if failures:
                raise StorageError(f"{len(failures)} objects could not be deleted, e.g. {failures[0].key}: "
                                   f"{failures[0].message}")
            return sum(1 for k in keys if k.endswith(".md") and not k.endswith("/" + INDEX_FILE))

    def reindex(self) -> Manifest:
        """Rebuild the manifest, MEMORY.md and the search index from the files themselves (LIST; on
        demand only)."""
        from ..search.place import rebuild as rebuild_search

        with self.transaction() as txn:
            old = txn.manifest
            fresh: dict[str, ManifestEntry] = {}
            memories: dict[str, MemoryFile] = {}
            for info in self.store.list(self.place.prefix):
                rel = self.place.filename_of(info.key)
                try:
                    validate_filename(rel)
                    obj = self.store.get(info.key)
                    memory = parse_memory(obj.data.decode("utf-8", errors="replace"))
                except (MemoryFormatError, ValueError, ObjectNotFound) as exc:
                    if rel not in (INDEX_FILE,) and not rel.startswith("."):
                        log.warning("reindex %s: skipping %s (%s)", self.place.label, rel, exc)
                    continue
                prior = old.entries.get(rel)
                memories[rel] = memory
                fresh[rel] = ManifestEntry.from_memory(
                    rel, memory, len(obj.data), created_at=prior.created_at if prior else info.last_modified,
                    now=info.last_modified)
            txn.mutate(lambda m: (m.entries.clear(), m.entries.update(fresh)))
            manifest = txn.commit().manifest
            rebuild_search(self, manifest, memories)  # still under the place lock
        return manifest

    # -- internals ------------------------------------------------------------------------
    def commit_manifest(self, mutate: Callable[[Manifest], object],
                        start: tuple[Manifest, str | None] | None = None) -> Manifest:
        """Read-modify-write the manifest (conditional PUT, retried), then re-render MEMORY.md.

        Only ``PlaceTxn.commit`` calls this (it holds the place lock). ``start`` is the manifest
        (and its etag) read under that lock, saving one GET; on a conflict it is read again.
        """
        for _attempt in range(COMMIT_ATTEMPTS):
            manifest, etag = start if start is not None else self.load_manifest()
            start = None
            mutate(manifest)
            manifest.updated_at = time.time()
            payload = manifest.to_bytes()
            try:
                if etag is None:
                    self.store.put_if_absent(self.manifest_key, payload, content_type="application/json")
                else:
                    self.store.put_if_match(self.manifest_key, payload, etag, content_type="application/json")
                break
            except PreconditionFailed:
                continue  # someone wrote between our read and write: read again
        else:
            raise StorageError(f"the index of {self.place.label} kept changing under us; try again")
        try:
            self.store.put(self.index_key, render_index(manifest).encode("utf-8"),
                           content_type="text/markdown; charset=utf-8")
        except StorageError as exc:
            log.warning("MEMORY.md of %s not refreshed (%s); the manifest is current", self.place.label, exc)
        return manifest


def _committed(txn: PlaceTxn) -> TxnResult:
    assert txn.committed is not None, "the transaction staged nothing"
    return txn.committed


__all__ = ["ABSENT", "COMMIT_ATTEMPTS", "MANIFEST_FILE", "MemoryDir", "PlaceTxn", "ReadResult", "SaveResult",
           "TxnResult"]
