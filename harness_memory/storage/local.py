"""Local-directory object store: the embedded default, same keys and tree as COS.

A key ``memory/users/100/agent-memory/default/a.md`` is the file
``<root>/users/100/agent-memory/default/a.md`` (the architecture's mapping, cut at the
``.harness`` root). Writes are atomic (temp file in the same directory, fsync, rename), so a
crash never leaves a half-written memory, and a failed write leaves no temp file behind.
Conditional writes are enforced with a per-key ``flock`` so they hold across processes.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import tempfile
from collections.abc import Iterator
from concurrent.futures import Executor
from pathlib import Path

from filelock import FileLock

from ..errors import AccessDenied, InvalidName, ObjectNotFound, PreconditionFailed, StorageError
from .base import ObjectInfo, ObjectStore, StoredObject, observed
from .keys import validate_key

TMP_MARK = ".hm-tmp-"
LOCK_DIR = ".locks"


class LocalStore(ObjectStore):
    supports_conditional_put = True

    def __init__(self, root: str | Path, *, key_prefix: str = "memory/", io_threads: int = 16,
                 executor: Executor | None = None) -> None:
        super().__init__(io_threads, executor)
        self.root = Path(root).expanduser().resolve()
        self.key_prefix = key_prefix
        self.root.mkdir(parents=True, exist_ok=True)

    def describe(self) -> str:
        return f"LocalStore(root={self.root})"

    # -- paths ----------------------------------------------------------------------------
    def path_for(self, key: str) -> Path:
        """The file that holds ``key`` (validated so it cannot leave the root)."""
        validate_key(key, self.key_prefix)
        rel = key[len(self.key_prefix) :]
        if rel.split("/", 1)[0] == LOCK_DIR:
            raise InvalidName(f"key {key!r} is inside the store's lock folder")
        path = self.root / rel
        # The text check stops '..'; the real-path check stops a symlinked folder inside the root.
        real_parent = Path(os.path.realpath(path.parent))
        if self.root not in path.parents or (real_parent != self.root and self.root not in real_parent.parents):
            raise AccessDenied(f"key {key!r} resolves outside the store root")
        return path

    def key_for(self, path: Path) -> str:
        return self.key_prefix + path.relative_to(self.root).as_posix()

    def _lock(self, key: str) -> FileLock:
        # 256 striped lock files: bounded litter, and a write only waits for its own stripe.
        stripe = hashlib.sha1(key.encode("utf-8")).hexdigest()[:2]
        lock_dir = self.root / LOCK_DIR
        lock_dir.mkdir(exist_ok=True)
        return FileLock(str(lock_dir / f"key-{stripe}.lock"), timeout=30)

    # -- reads ----------------------------------------------------------------------------
    @observed("get")
    def get(self, key: str) -> StoredObject:
        path = self.path_for(key)
        self.request_count += 1
        try:
            with open(path, "rb") as fh:
                data = fh.read()
                mtime = os.fstat(fh.fileno()).st_mtime
        except FileNotFoundError:
            raise ObjectNotFound(f"no object at {key}") from None
        except IsADirectoryError:
            raise ObjectNotFound(f"no object at {key} (it is a folder)") from None
        except NotADirectoryError:  # a parent is a file: like COS, the key simply does not exist
            raise ObjectNotFound(f"no object at {key}") from None
        except PermissionError as exc:
            raise AccessDenied(f"cannot read {key}: {exc.strerror}") from None
        except OSError as exc:
            raise StorageError(f"cannot read {key}: {exc.strerror}") from None
        return StoredObject(key, data, _etag(data), mtime)

    def head(self, key: str) -> ObjectInfo:
        obj = self.get(key)
        return ObjectInfo(key, len(obj.data), obj.etag, obj.last_modified)

    @observed("list")
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        if not prefix.startswith(self.key_prefix):
            return iter(())
        self.request_count += 1
        rel = prefix[len(self.key_prefix) :]
        # Walk from the deepest existing folder that contains the prefix.
        base_rel = rel.rsplit("/", 1)[0] if "/" in rel else ""
        base = self.root / base_rel if base_rel else self.root
        if not base.is_dir() or (base != self.root and self.root not in base.resolve().parents):
            return iter(())
        found: list[ObjectInfo] = []
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            if Path(dirpath) == self.root and LOCK_DIR in dirnames:
                dirnames.remove(LOCK_DIR)
            for name in filenames:
                if TMP_MARK in name:
                    continue
                path = Path(dirpath) / name
                key = self.key_for(path)
                if not key.startswith(prefix) or path.is_symlink():
                    continue
                try:
                    st = path.stat()
                    data = path.read_bytes()
                except OSError:
                    continue  # deleted while listing
                found.append(ObjectInfo(key, st.st_size, _etag(data), st.st_mtime))
        found.sort(key=lambda info: info.key)
        return iter(found)

    # -- writes ---------------------------------------------------------------------------
    @observed("put")
    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> str:
        path = self.path_for(key)
        self.request_count += 1
        with self._lock(key):
            _atomic_write(path, data, key)
        return _etag(data)

    @observed("put_if_absent")
    def put_if_absent(self, key: str, data: bytes, *, content_type: str | None = None) -> str:
        path = self.path_for(key)
        self.request_count += 1
        with self._lock(key):
            if path.exists():
                raise PreconditionFailed(f"{key} already exists")
            _atomic_write(path, data, key)
        return _etag(data)

    @observed("put_if_match")
    def put_if_match(
        self, key: str, data: bytes, etag: str, *, content_type: str | None = None
    ) -> str:
        path = self.path_for(key)
        self.request_count += 1
        with self._lock(key):
            try:
                current = _etag(path.read_bytes())
            except FileNotFoundError:
                raise PreconditionFailed(f"{key} no longer exists") from None
            if current != etag.strip('"'):
                raise PreconditionFailed(f"{key} changed since it was read")
            _atomic_write(path, data, key)
        return _etag(data)

    @observed("delete")
    def delete(self, key: str) -> None:
        path = self.path_for(key)
        self.request_count += 1
        with self._lock(key):
            try:
                path.unlink()
            except FileNotFoundError:
                return
            except IsADirectoryError:
                return
            except PermissionError as exc:
                raise AccessDenied(f"cannot delete {key}: {exc.strerror}") from None
            except OSError as exc:
                raise StorageError(f"cannot delete {key}: {exc.strerror}") from None
        _prune_empty_dirs(path.parent, self.root)


def _etag(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def _atomic_write(path: Path, data: bytes, key: str) -> None:
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name[:40]}{TMP_MARK}", dir=path.parent)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp_name, path)
        tmp_name = None
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except PermissionError as exc:
        raise AccessDenied(f"cannot write {key}: {exc.strerror}") from None
    except OSError as exc:
        reason = "disk full" if exc.errno == errno.ENOSPC else exc.strerror
        raise StorageError(f"cannot write {key}: {reason}") from None
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)


def _prune_empty_dirs(folder: Path, root: Path) -> None:
    """Remove folders left empty by a delete, so the tree matches COS (which has no folders)."""
    while folder != root and root in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent
