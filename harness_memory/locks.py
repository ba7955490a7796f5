"""Per-place locks for read-modify-write of the index and manifest.

Why: COS has no compare-and-swap on PUT and its LIST is eventually consistent, so two pods
saving into one place at once would each write a MEMORY.md missing the other's entry. A lock
per place serialises those updates:

* ``RedisLocker`` — ``SET key token NX PX ttl``; released by a compare-and-delete script so a
  holder whose lock expired never frees someone else's. A crashed holder's lock expires after
  the TTL. When Redis stops answering, it degrades to the local lock with one warning (and
  conditional PUT, where the backend has it, still guards the manifest).
* ``LocalLocker`` — a thread lock per name plus, when given a folder, a ``flock`` file so
  several processes on one machine (the local store) are serialised too.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from filelock import FileLock
from filelock import Timeout as FileLockTimeout

from .errors import LockTimeout
from .observe import DISABLED, Telemetry
from .redis_client import REDIS_ERRORS, RedisClient

log = logging.getLogger(__name__)

_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end
"""


class Locker(Protocol):
    def hold(self, name: str, *, ttl: float | None = None, wait: float | None = None
             ) -> contextlib.AbstractContextManager[None]:
        """Hold the lock ``name`` for the ``with`` block; raise LockTimeout after ``wait`` s."""
        ...


class LocalLocker:
    """Thread lock per name, plus an flock file per name when ``lock_dir`` is given."""

    def __init__(self, lock_dir: str | Path | None = None, *, ttl: float = 15.0, wait: float = 20.0,
                 telemetry: Telemetry = DISABLED) -> None:
        self.telemetry = telemetry
        self.lock_dir = Path(lock_dir) if lock_dir else None
        self.ttl = ttl
        self.wait = wait
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def _thread_lock(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    @contextlib.contextmanager
    def hold(self, name: str, *, ttl: float | None = None, wait: float | None = None) -> Iterator[None]:
        wait = self.wait if wait is None else wait
        lock = self._thread_lock(name)
        started = time.monotonic()
        if not lock.acquire(timeout=wait):
            self.telemetry.lock_acquired("local", "timeout", time.monotonic() - started)
            raise LockTimeout(f"another writer holds {name!r}; try again in a moment")
        try:
            if self.lock_dir is None:
                self.telemetry.lock_acquired("local", "acquired", time.monotonic() - started)
                yield
                return
            self.lock_dir.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha1(name.encode("utf-8")).hexdigest()
            flock = FileLock(str(self.lock_dir / f"place-{digest}.lock"))
            try:
                flock.acquire(timeout=wait)
            except FileLockTimeout:
                self.telemetry.lock_acquired("local", "timeout", time.monotonic() - started)
                raise LockTimeout(f"another process holds {name!r}; try again in a moment") from None
            self.telemetry.lock_acquired("local", "acquired", time.monotonic() - started)
            try:
                yield
            finally:
                flock.release()
        finally:
            lock.release()


class RedisLocker:
    """Distributed lock on one Redis; falls back to ``fallback`` while Redis is unreachable."""

    def __init__(self, client: RedisClient, *, prefix: str = "hm:", ttl: float = 15.0, wait: float = 20.0,
                 fallback: LocalLocker | None = None, retry_after: float = 30.0,
                 telemetry: Telemetry = DISABLED) -> None:
        self.telemetry = telemetry
        self.client = client
        self.retry_after = retry_after
        self._down_until = 0.0
        self.prefix = prefix
        self.ttl = ttl
        self.wait = wait
        self.fallback = fallback or LocalLocker(ttl=ttl, wait=wait, telemetry=telemetry)
        self._release = client.register_script(_RELEASE)
        self._warned = False

    def _key(self, name: str) -> str:
        return f"{self.prefix}lock:{name}"

    @contextlib.contextmanager
    def hold(self, name: str, *, ttl: float | None = None, wait: float | None = None) -> Iterator[None]:
        ttl = self.ttl if ttl is None else ttl
        wait = self.wait if wait is None else wait
        key = self._key(name)
        token = secrets.token_hex(16)
        if time.monotonic() < self._down_until:  # Redis failed recently: do not pay its timeout again
            self.telemetry.lock_acquired("redis", "fallback", 0.0)
            with self.fallback.hold(name, ttl=ttl, wait=wait):
                yield
            return
        started = time.monotonic()
        try:
            acquired = self._acquire(key, token, ttl, wait)
        except REDIS_ERRORS as exc:  # any topology: RedisClusterException is not a RedisError
            self.telemetry.lock_acquired("redis", "fallback", time.monotonic() - started)
            self._down_until = time.monotonic() + self.retry_after
            if not self._warned:
                log.warning("Redis lock unavailable (%s); using the in-process lock for %.0fs before retrying",
                            exc, self.retry_after)
                self._warned = True
            with self.fallback.hold(name, ttl=ttl, wait=wait):
                yield
            return
        self.telemetry.lock_acquired("redis", "acquired" if acquired else "timeout", time.monotonic() - started)
        if not acquired:
            raise LockTimeout(f"another writer holds {name!r} for more than {wait:.0f}s; try again later")
        self._warned = False
        try:
            yield
        finally:
            try:
                if not self._release(keys=[key], args=[token]):
                    # Our token was gone: the lock expired while held (and maybe another writer took it).
                    self.telemetry.lease_lost("place")
                    log.warning("the lock %s expired before its holder finished (held past its %gs TTL)",
                                name, ttl)
            except REDIS_ERRORS as exc:  # the TTL frees it
                log.warning("could not release lock %s (%s); it expires in %.0fs", name, exc, ttl)

    def _acquire(self, key: str, token: str, ttl: float, wait: float) -> bool:
        deadline = time.monotonic() + wait
        pause = 0.002
        while True:
            if self.client.set(key, token, nx=True, px=max(1, int(ttl * 1000))):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause + secrets.randbelow(1000) / 1_000_000)
            pause = min(pause * 2, 0.05)
