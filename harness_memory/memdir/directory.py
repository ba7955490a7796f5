"""One memory place as a directory of memory files with its index kept in step.

Why the write path looks like this: the manifest is the index of record and is updated
read-modify-write under the place lock, with a conditional PUT (If-Match / create-only) as a
second guard where the backend enforces it. The memory file is written first; if the index
update then fails, the file write is rolled back (best effort), so a failed save leaves the
place as it was. MEMORY.md is re-rendered from the manifest after every change; if only that
write fails the next change heals it, and readers use the manifest anyway.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..config import LimitsConfig
from ..errors import MemoryFormatError, ObjectNotFound, PreconditionFailed, StorageError
from ..layout import INDEX_FILE, MANIFEST_FILE, Place, validate_filename
from ..locks import LocalLocker, Locker
from ..storage.base import ObjectStore, StoredObject
from .index import CappedText, Manifest, ManifestEntry, cap_index, parse_index, render_index
from .model import MemoryFile, parse_memory

log = logging.getLogger(__name__)
COMMIT_ATTEMPTS = 6
#: ``MemoryDir.save(..., expect=ABSENT)``: create only.
ABSENT = "absent"


@dataclass(frozen=True, slots=True)
class SaveResult:
    file: str
    created: bool
    entry: ManifestEntry
    index_warning: str | None = None


@dataclass(frozen=True, slots=True)
class ReadResult:
    file: str
    text: str
    etag: str
    last_modified: float


class MemoryDir:
    """Memory files of one place, bound to a store, a locker and the size limits."""

    def __init__(self, store: ObjectStore, place: Place, *, locker: Locker | None = None,
                 limits: LimitsConfig | None = None) -> None:
        self.store = store
        self.place = place
        self.limits = limits or LimitsConfig()
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

    def save(self, file: str, content: str, *, expect: str | None = None) -> SaveResult:
        """Write a memory file (create or overwrite) and its index entry, atomically as a unit.

        ``expect``: None writes unconditionally; ``ABSENT`` only creates (PreconditionFailed when
        the file exists); an etag only overwrites that version (PreconditionFailed when the file
        changed or is gone) — checked under the place lock, so two editors cannot both win.
        """
        file = validate_filename(file)
        memory = self.check_content(content)
        data = content.encode("utf-8")
        with self.locker.hold(self.place.lock_name()):
            return self._write_locked(file, memory, data, expect=expect)

    def save_memory(self, file: str, memory: MemoryFile) -> SaveResult:
        return self.save(file, memory.render())

    def save_many(self, items: list[tuple[str, str]]) -> list[SaveResult]:
        """Write many memory files with ONE index update (imports, snapshots, seeding).

        Everything is validated before the first write; if the index update fails, every file
        written here is rolled back, so the place is either fully updated or unchanged.
        """
        checked = [(validate_filename(f), self.check_content(c), c.encode("utf-8")) for f, c in items]
        if len({f for f, _, _ in checked}) != len(checked):
            raise MemoryFormatError("the same file name appears twice in one batch")
        with self.locker.hold(self.place.lock_name()):
            manifest, etag = self.load_manifest()
            new_files = [f for f, _, _ in checked if f not in manifest.entries]
            if len(manifest.entries) + len(new_files) > self.limits.max_files_per_place:
                raise MemoryFormatError(
                    f"this batch would bring the place to {len(manifest.entries) + len(new_files)} files; "
                    f"the limit is {self.limits.max_files_per_place}"
                )
            previous: dict[str, bytes | None] = {}
            results: list[SaveResult] = []
            try:
                for file, memory, data in checked:
                    key = self.place.key(file)
                    prior = self.store.get_or_none(key)
                    previous[key] = prior.data if prior else None
                    self.store.put(key, data, content_type="text/markdown; charset=utf-8")
                    prior_entry = manifest.entries.get(file)
                    entry = ManifestEntry.from_memory(file, memory, len(data),
                                                      created_at=prior_entry.created_at if prior_entry else None)
                    results.append(SaveResult(file, prior is None, entry))
                self.commit_locked(lambda m: m.entries.update({r.file: r.entry for r in results}),
                                   start=(manifest, etag))
            except Exception:
                for key, data in previous.items():
                    self._rollback(key, data)
                raise
            return results

    def replace_chunk(self, file: str, old: str, new: str, *, replace_all: bool = False) -> SaveResult:
        """Replace an exact chunk of a memory file (must match once unless ``replace_all``)."""
        file = validate_filename(file)
        if not old:
            raise MemoryFormatError("old_chunk must not be empty; use save_file to rewrite a whole file")
        with self.locker.hold(self.place.lock_name()):
            current_obj = self.store.get(self.place.key(file))
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
            updated = current.replace(old, new)
            memory = self.check_content(updated)
            return self._write_locked(file, memory, updated.encode("utf-8"), previous=current_obj)

    def delete(self, file: str) -> bool:
        """Remove a memory file and its index entry; False when it did not exist."""
        file = validate_filename(file)
        key = self.place.key(file)
        with self.locker.hold(self.place.lock_name()):
            existed = self.store.exists(key)
            manifest, _ = self.load_manifest()
            if not existed and file not in manifest.entries:
                return False
            self.commit_locked(lambda m: m.entries.pop(file, None))
            self.store.delete(key)
            return True

    def update_meta(self, mutate: Callable[[Manifest], None]) -> Manifest:
        """Change the manifest's ``meta`` (or entries) under the place lock."""
        with self.locker.hold(self.place.lock_name()):
            return self.commit_locked(mutate)

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
        """Rebuild the manifest and MEMORY.md from the files themselves (LIST; on demand only)."""
        with self.locker.hold(self.place.lock_name()):
            old, _ = self.load_manifest()
            fresh = Manifest(meta=old.meta)
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
                fresh.entries[rel] = ManifestEntry.from_memory(
                    rel, memory, len(obj.data), created_at=prior.created_at if prior else info.last_modified,
                    now=info.last_modified)
            return self.commit_locked(lambda m: (m.entries.clear(), m.entries.update(fresh.entries)))

    # -- internals ------------------------------------------------------------------------
    def _write_locked(self, file: str, memory: MemoryFile, data: bytes,
                      previous: StoredObject | Literal["unread"] | None = "unread",
                      expect: str | None = None) -> SaveResult:
        """Write the file and commit its entry (the caller holds the place lock). ``previous`` is the
        file's current object when the caller already read it (saves a GET)."""
        key = self.place.key(file)
        if previous == "unread":
            previous = self.store.get_or_none(key)
        if expect == ABSENT and previous is not None:
            raise PreconditionFailed(f"{file} already exists")
        if expect not in (None, ABSENT) and (previous is None or previous.etag != str(expect).strip('"')):
            raise PreconditionFailed(f"{file} changed since it was read (or was deleted); read it again")
        manifest, etag = self.load_manifest()
        prior_entry = manifest.entries.get(file)
        if previous is None and prior_entry is None and len(manifest.entries) >= self.limits.max_files_per_place:
            raise MemoryFormatError(
                f"this memory directory already holds {len(manifest.entries)} files (the limit); "
                "delete or merge old memories first"
            )
        created_at = prior_entry.created_at if prior_entry else None
        entry = ManifestEntry.from_memory(file, memory, len(data), created_at=created_at)
        self.store.put(key, data, content_type="text/markdown; charset=utf-8")
        try:
            self.commit_locked(lambda m: m.entries.__setitem__(file, entry), start=(manifest, etag))
        except Exception:
            self._rollback(key, previous.data if previous else None)
            raise
        return SaveResult(file, previous is None, entry)

    def _rollback(self, key: str, previous: bytes | None) -> None:
        with contextlib.suppress(Exception):
            if previous is None:
                self.store.delete(key)
            else:
                self.store.put(key, previous)

    def commit_locked(self, mutate: Callable[[Manifest], object],
                start: tuple[Manifest, str | None] | None = None) -> Manifest:
        """Read-modify-write the manifest (conditional PUT, retried), then re-render MEMORY.md.

        The caller must hold the place lock. ``start`` is a manifest (and its etag) the caller
        already read under that lock, saving one GET; on a conflict it is read again.
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
