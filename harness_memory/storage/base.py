"""The object-store interface every layer above speaks: keys and bytes, nothing else.

Why an interface: COS (production) and a local directory (embedded default) must hold the
same tree and pass the same tests; memdir and the tools must not know which one answers.
The interface is synchronous (the COS SDK is), with ``a*`` twins that run the sync call in
a bounded thread pool so async callers never block their event loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import ObjectNotFound
from ..observe import DISABLED, Telemetry, wrap_context

T = TypeVar("T")

MAX_KEY_BYTES = 850  # COS limit on object key length


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What LIST and HEAD say about an object."""

    key: str
    size: int
    etag: str
    last_modified: float  # unix seconds


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object's bytes with the etag to use for a later conditional write."""

    key: str
    data: bytes
    etag: str
    last_modified: float


@dataclass(frozen=True, slots=True)
class DeleteFailure:
    key: str
    message: str


def observed(op: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Record each call of a store method as one request ``op`` (for backends whose methods are
    one request each, like ``LocalStore``; ``CosStore`` records in its per-request ``_call``)."""

    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def inner(self: ObjectStore, *args: Any, **kwargs: Any) -> T:
            return self.telemetry.call("store", op, fn, (self, *args), kwargs)

        return inner

    return wrap


class ObjectStore(ABC):
    """Keys are ``/``-separated strings starting with the configured prefix (``memory/``).

    ``supports_conditional_put`` says whether ``put_if_match`` / ``put_if_absent`` are enforced
    by the backend. When False, ``put_if_absent`` may still be create-only (COS forbid-overwrite)
    but ``put_if_match`` degrades to a plain put: the caller's lock is the real guard.
    """

    supports_conditional_put: bool = False
    #: Counts requests sent to the backend (benchmarks read it).
    request_count: int = 0
    #: Records each request (metrics, span, event); ``MemoryServices`` sets its own.
    telemetry: Telemetry = DISABLED

    def __init__(self, io_threads: int = 16, executor: concurrent.futures.Executor | None = None) -> None:
        """``executor`` runs the async twins (the services' ``io`` pool, which then owns it); without
        one the store makes its own pool of ``io_threads`` and shuts it down in ``close()``."""
        self._own_pool = executor is None
        self._pool: concurrent.futures.Executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=io_threads, thread_name_prefix="hm-store"
        )
        self.request_count = 0

    # -- sync API -------------------------------------------------------------------------
    @abstractmethod
    def get(self, key: str) -> StoredObject:
        """The object's bytes and etag; raises ObjectNotFound."""

    @abstractmethod
    def head(self, key: str) -> ObjectInfo:
        """Size, etag, mtime without the body; raises ObjectNotFound."""

    @abstractmethod
    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> str:
        """Write (overwrite) the object; returns its new etag."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes, *, content_type: str | None = None) -> str:
        """Create-only write; raises PreconditionFailed when the key exists."""

    @abstractmethod
    def put_if_match(
        self, key: str, data: bytes, etag: str, *, content_type: str | None = None
    ) -> str:
        """Write only if the stored etag is ``etag``; raises PreconditionFailed otherwise
        (ObjectNotFound-like absence also fails). Best effort where unsupported."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove the key; removing a missing key is not an error."""

    @abstractmethod
    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        """Every object under ``prefix``, in key order, following all pages."""

    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        """Remove many keys; returns the ones that failed (empty list = all gone)."""
        failures = []
        for key in keys:
            try:
                self.delete(key)
            except Exception as exc:  # reported per key
                failures.append(DeleteFailure(key, str(exc)))
        return failures

    def get_or_none(self, key: str) -> StoredObject | None:
        try:
            return self.get(key)
        except ObjectNotFound:
            return None

    def exists(self, key: str) -> bool:
        try:
            self.head(key)
        except ObjectNotFound:
            return False
        return True

    def close(self) -> None:
        if self._own_pool:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def describe(self) -> str:
        """A one-line, secret-free description for logs and health output."""
        return type(self).__name__

    # -- async twins ----------------------------------------------------------------------
    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, wrap_context(lambda: fn(*args, **kwargs)))

    async def aget(self, key: str) -> StoredObject:
        return await self._run(self.get, key)

    async def aget_or_none(self, key: str) -> StoredObject | None:
        return await self._run(self.get_or_none, key)

    async def ahead(self, key: str) -> ObjectInfo:
        return await self._run(self.head, key)

    async def aput(self, key: str, data: bytes, *, content_type: str | None = None) -> str:
        return await self._run(self.put, key, data, content_type=content_type)

    async def aput_if_absent(self, key: str, data: bytes) -> str:
        return await self._run(self.put_if_absent, key, data)

    async def aput_if_match(self, key: str, data: bytes, etag: str) -> str:
        return await self._run(self.put_if_match, key, data, etag)

    async def adelete(self, key: str) -> None:
        await self._run(self.delete, key)

    async def adelete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        return await self._run(self.delete_many, list(keys))

    async def alist(self, prefix: str) -> list[ObjectInfo]:
        return await self._run(lambda: list(self.list(prefix)))
