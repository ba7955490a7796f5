"""Per-place locks for read-modify-write of the index and manifest: fair, leased and fenced.

Why: COS has no compare-and-swap on PUT and its LIST is eventually consistent, so two pods
saving into one place at once would each write a MEMORY.md missing the other's entry. A lock
per place serialises those updates:

* ``RedisLocker`` — a **queue-ordered lease**. A waiter takes a ticket (``INCR``) and joins the
  place's queue (a sorted set scored by ticket); the head of the queue takes the lock
  (``SET token PX ttl``) when it is free, so waiters are served in arrival order and the longest
  wait is bounded by the work queued ahead, not by luck of polling. A waiter blocks on its own
  wake list (``BLPOP``): the release script pushes to the waiter then at the head of the queue
  (and a group-commit holder to each proposer it answered), so a hand-over takes one round trip;
  the block times out after ``block`` seconds to look again. A waiter that stops looking
  (crashed, paused) is dropped from the queue after ``stale`` seconds. The lease is **renewed**
  by a background thread while the holder works and **checked** (compare-and-``PEXPIRE`` in one
  script) before each write; a holder that lost it raises ``LeaseLost`` instead of writing over
  the next holder's work. The ticket doubles as a fencing number (it only grows), logged with
  the redo record. Released by compare-and-delete, so a holder whose lease expired never frees
  someone else's. Every key of one place carries the same ``{hash tag}`` (Redis Cluster).
  When Redis stops answering it degrades to the local lock with one warning and probes Redis
  again after ``retry_after`` seconds; conditional PUT, where the backend has it, still guards
  the manifest and files.
* ``LocalLocker`` — a thread lock per name plus, when given a folder, a ``flock`` file so
  several processes on one machine (the local store) are serialised too. A local lock cannot
  expire under a live holder, so its lease never fails a check.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import itertools
import logging
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from filelock import FileLock
from filelock import Timeout as FileLockTimeout

from .errors import LeaseLost, LockTimeout
from .observe import DISABLED, Telemetry
from .redis_client import REDIS_ERRORS, RedisClient

log = logging.getLogger(__name__)

#: Release: compare-and-delete, then wake the waiter now at the head of the queue (it is blocked on
#: its wake list; pushing ends the wait at once). Optionally sets the place's *done* marker
#: (``memdir/redo.py``) — or removes it when the value is empty (the holder left its last commit
#: incomplete); '-' leaves it alone. Only while the lock is still ours.
#: KEYS: lock, marker, queue. ARGV: token, marker value, marker TTL ms, wake-list prefix.
_RELEASE = """
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '' then redis.call('del', KEYS[2])
elseif ARGV[2] ~= '-' then redis.call('set', KEYS[2], ARGV[2], 'PX', ARGV[3]) end
redis.call('del', KEYS[1])
local head = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
if head then
  redis.call('RPUSH', ARGV[4] .. head, '1')
  redis.call('PEXPIRE', ARGV[4] .. head, 10000)
end
return 1
"""
#: The check before a commit: compare-and-PEXPIRE that also removes the place's done marker, so
#: from here until this holder's release says otherwise nobody trusts a copy of the head the
#: commit is about to replace (``memdir/heads.py``). KEYS lock, marker; ARGV token, ttl ms.
_BEGIN_COMMIT = """
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[2])
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0
"""
#: How long a done marker is kept (a place idle longer has its last commit's files checked again).
DONE_TTL_MS = 7 * 24 * 3600 * 1000
#: Compare-and-PEXPIRE: extend the lease only while we still hold it.
RENEW_SCRIPT = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end
"""
#: KEYS: lock, queue (zset token->ticket), seen (zset token->last poll ms), ticket counter, the
#: waiter's wake list. ARGV: token, ttl ms, stale ms, keep ms. Returns the ticket (> 0) when the
#: lock was taken, else -(1 + position in the queue).
_ENQUEUE_OR_TAKE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local stale = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now - tonumber(ARGV[3]))
for _, w in ipairs(stale) do
  if w ~= ARGV[1] then
    redis.call('ZREM', KEYS[2], w)
    redis.call('ZREM', KEYS[3], w)
  end
end
if not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  redis.call('ZADD', KEYS[2], redis.call('INCR', KEYS[4]), ARGV[1])
end
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[4])
redis.call('PEXPIRE', KEYS[4], ARGV[4])
local head = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
if head == ARGV[1] and redis.call('EXISTS', KEYS[1]) == 0 then
  local ticket = tonumber(redis.call('ZSCORE', KEYS[2], ARGV[1]))
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('DEL', KEYS[5])
  return ticket
end
return -1 - redis.call('ZRANK', KEYS[2], ARGV[1])
"""
#: As ``_ENQUEUE_OR_TAKE`` with KEYS[6], a waiter's answer list (group commit): when the holder has
#: answered, the waiter leaves the queue and 0 is returned.
_ENQUEUE_TAKE_OR_ANSWERED = """
if redis.call('LLEN', KEYS[6]) > 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  redis.call('DEL', KEYS[5])
  return 0
end
""" + _ENQUEUE_OR_TAKE
#: KEYS: queue, seen, the waiter's wake list.
_LEAVE = """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[3])
return redis.call('ZREM', KEYS[2], ARGV[1])
"""


class Lease(Protocol):
    """What a lock holder gets: ``check()`` before each write raises ``LeaseLost`` when the lock
    is no longer ours; ``fence`` is a number that grows with every holder (0 when unknown);
    ``exclusive`` is False while a shared lock has degraded to a per-process one (other pods may
    hold the same place at the same time)."""

    fence: int
    exclusive: bool

    def check(self, strict: bool = False) -> None:
        """``strict``: ask the lock's owner (Redis) even when the local deadline is far."""
        ...

    def last_done(self) -> tuple[str, str] | None:
        """(commit id, head etag) of the last commit whose writes a holder of this lock finished
        (``redo.py``), when the lock keeps a marker; None when unknown."""
        ...

    def finished(self, txid: str | None, etag: str = "") -> None:
        """This holder finished commit ``txid`` (whose head has ``etag``): say so to the next
        holder. None: its last commit is not complete — say nothing is known."""
        ...

    def begin_commit(self) -> None:
        """``check(strict=True)`` before a commit's first write; a lock keeping a done marker also
        removes it (the head is about to change)."""
        ...


class _LocalLease:
    """A local lock cannot expire under a live holder. It keeps no done marker: the next holder
    checks the previous commit's files itself (cheap on a local directory)."""

    fence = 0

    def __init__(self, exclusive: bool) -> None:
        self.exclusive = exclusive

    def check(self, strict: bool = False) -> None:
        return None

    def last_done(self) -> tuple[str, str] | None:
        return None

    def finished(self, txid: str | None, etag: str = "") -> None:
        return None

    def begin_commit(self) -> None:
        return None


LOCAL_LEASE: Lease = _LocalLease(True)
#: What ``RedisLocker`` yields while Redis is down (the in-process lock excludes only this pod).
FALLBACK_LEASE: Lease = _LocalLease(False)


class Locker(Protocol):
    def hold(self, name: str, *, ttl: float | None = None, wait: float | None = None
             ) -> contextlib.AbstractContextManager[Lease]:
        """Hold the lock ``name`` for the ``with`` block; raise LockTimeout after ``wait`` s."""
        ...


class LeaseKeeper:
    """One daemon thread that calls registered renew functions every ``interval`` seconds.

    Why one thread: a pod holds many short leases at once (one per concurrent save, one per
    running summary); a thread each would cost more than the renewals. A renew function returns
    False when the lease is gone (it is then dropped) and may raise (logged, retried next time).
    """

    def __init__(self, name: str = "hm-lease") -> None:
        self._name = name
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int]] = []
        self._jobs: dict[int, tuple[Callable[[], bool], float]] = {}
        self._ids = itertools.count(1)
        self._thread: threading.Thread | None = None
        self._stop = False

    def add(self, renew: Callable[[], bool], interval: float) -> int:
        """Start renewing; returns a handle for ``remove``."""
        job = next(self._ids)
        with self._cond:
            self._jobs[job] = (renew, interval)
            heapq.heappush(self._heap, (time.monotonic() + interval, job))
            self._stop = False
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._cond.notify()
        return job

    def remove(self, job: int) -> None:
        with self._cond:
            self._jobs.pop(job, None)

    def stop_if_idle(self, timeout: float = 2.0) -> None:
        """Stop the thread when no lease is held (``MemoryServices.close``); ``add`` restarts it."""
        with self._cond:
            if self._jobs or self._thread is None:
                return
            self._stop = True
            thread = self._thread
            self._cond.notify()
        thread.join(timeout)

    def _next(self) -> tuple[int, Callable[[], bool], float] | None:
        """Wait for the next due renewal; None when told to stop with nothing to renew."""
        with self._cond:
            while True:
                while self._heap and self._heap[0][1] not in self._jobs:
                    heapq.heappop(self._heap)
                if not self._heap:
                    if self._stop:
                        self._thread = None
                        return None
                    self._cond.wait()
                    continue
                due, job = self._heap[0]
                delay = due - time.monotonic()
                if delay <= 0:
                    heapq.heappop(self._heap)
                    renew, interval = self._jobs[job]
                    return job, renew, interval
                self._cond.wait(timeout=delay)

    def _run(self) -> None:
        while (due := self._next()) is not None:
            job, renew, interval = due
            try:
                keep = renew()
            except Exception as exc:  # Redis blip: try again next interval
                log.debug("lease renewal failed (%s); retrying", exc)
                keep = True
            with self._cond:
                if keep and job in self._jobs:
                    heapq.heappush(self._heap, (time.monotonic() + interval, job))
                else:
                    self._jobs.pop(job, None)


#: The keeper of lockers made by hand (``MemoryServices`` gives its own, stopped by ``close``).
LEASES = LeaseKeeper()


class LocalLocker:
    """Thread lock per name, plus an flock file per name when ``lock_dir`` is given."""

    def __init__(self, lock_dir: str | Path | None = None, *, ttl: float = 25.0, wait: float = 30.0,
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
    def hold(self, name: str, *, ttl: float | None = None, wait: float | None = None) -> Iterator[Lease]:
        wait = self.wait if wait is None else wait
        lock = self._thread_lock(name)
        started = time.monotonic()
        if not lock.acquire(timeout=wait):
            self.telemetry.lock_acquired("local", "timeout", time.monotonic() - started)
            raise LockTimeout(f"another writer holds {name!r}; try again in a moment")
        try:
            if self.lock_dir is None:
                self.telemetry.lock_acquired("local", "acquired", time.monotonic() - started)
                yield LOCAL_LEASE
                return
            self.lock_dir.mkdir(parents=True, exist_ok=True)
            digest = hashlib.sha1(name.encode("utf-8")).hexdigest()
            flock = FileLock(str(self.lock_dir / f"place-{digest}.lock"))
            try:
                flock.acquire(timeout=max(0.0, wait - (time.monotonic() - started)))
            except FileLockTimeout:
                self.telemetry.lock_acquired("local", "timeout", time.monotonic() - started)
                raise LockTimeout(f"another process holds {name!r}; try again in a moment") from None
            self.telemetry.lock_acquired("local", "acquired", time.monotonic() - started)
            try:
                yield LOCAL_LEASE
            finally:
                flock.release()
        finally:
            lock.release()


class RedisLease:
    """A held Redis lock: renewed by ``LEASES`` while held, checked before each write.

    ``check`` first looks at the lease's local deadline (measured from before the request that
    last set or renewed the TTL, so it never outlives the key): a process that was paused (GC,
    VM, SIGSTOP) or stuck past it finds the deadline near or gone and asks Redis
    (compare-and-``PEXPIRE``, which also renews); so does the first check of a commit
    (``strict``), which also catches a lock lost in Redis itself. If Redis cannot answer, the
    lease holds until its local deadline and not longer.
    """

    def __init__(self, locker: RedisLocker, name: str, key: str, token: str, ttl: float, fence: int,
                 started: float) -> None:
        self.locker, self.name, self.key, self.token, self.ttl = locker, name, key, token, ttl
        self.fence = fence
        self.exclusive = True
        self.lost = False
        self._deadline = started + ttl
        #: The done marker to leave with the release ("txid etag"; "" removes it; None: leave it).
        self.done: str | None = None

    def last_done(self) -> tuple[str, str] | None:
        try:
            raw = self.locker.client.get(self.locker.done_key(self.name))
        except REDIS_ERRORS:
            return None
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw or "")
        txid, _, etag = text.partition(" ")
        return (txid, etag) if txid else None

    def finished(self, txid: str | None, etag: str = "") -> None:
        self.done = "" if txid is None else f"{txid} {etag}"

    def begin_commit(self) -> None:
        """The strict check, removing the done marker in the same script. Redis not answering is
        treated as ``check`` treats it (the lease holds until its local deadline); the marker may
        then outlive the head it names, which only costs a pod trusting it one refused head PUT
        (``memdir/heads.py``: the copy is used only where the head's If-Match is enforced, and
        only by blind saves, never to decide what to write)."""
        if self.lost:
            self.check()
        sent = time.monotonic()
        try:
            ok = bool(self.locker._begin_commit(keys=[self.key, self.locker.done_key(self.name)],
                                                args=[self.token, max(1, int(self.ttl * 1000))]))
        except REDIS_ERRORS:
            self.check(strict=True)  # unreachable: holds until the local deadline, as check says
            return
        if ok:
            self._deadline = max(self._deadline, sent + self.ttl)
            return
        self.lost = True
        self.check()  # raises LeaseLost with the usual message

    def renew(self) -> bool:
        """Extend the TTL if the lock is still ours; False (and ``lost``) once it is not."""
        if self.lost:
            return False
        sent = time.monotonic()
        ok = bool(self.locker._renew(keys=[self.key], args=[self.token, max(1, int(self.ttl * 1000))]))
        if ok:
            self._deadline = max(self._deadline, sent + self.ttl)
        else:
            self.lost = True
        return ok

    def check(self, strict: bool = False) -> None:
        if not self.lost and not strict and self._deadline - time.monotonic() > self.ttl / 2:
            return  # renewed recently and not paused since: no round trip needed
        try:
            ok = self.renew()
        except REDIS_ERRORS as exc:
            ok = time.monotonic() < self._deadline
            if ok:
                log.debug("lease check of %s: Redis unreachable (%s); the lease holds for %.1fs more",
                          self.name, exc, self._deadline - time.monotonic())
            else:
                self.lost = True
        if not ok:
            self.locker.telemetry.lease_lost("place")
            raise LeaseLost(f"the lock on {self.name} expired while this write waited (held past its "
                            f"{self.ttl:g}s lease: the process or the store stalled); nothing more was "
                            "written — try again")


class RedisLocker:
    """Fair distributed lock on Redis; falls back to ``fallback`` while Redis is unreachable."""

    def __init__(self, client: RedisClient, *, prefix: str = "hm:", ttl: float = 25.0, wait: float = 30.0,
                 fallback: LocalLocker | None = None, retry_after: float = 5.0,
                 stale: float = 1.5, renew_every: float | None = None, keeper: LeaseKeeper | None = None,
                 telemetry: Telemetry = DISABLED, block: float = 0.2) -> None:
        self.telemetry = telemetry
        self.client = client
        self.retry_after = retry_after
        self._down_until = 0.0
        self.prefix = prefix
        self.ttl = ttl
        self.wait = wait
        #: A waiter silent this long (crashed, paused) loses its place in the queue.
        self.stale = stale
        #: Longest blocked wait for a wake-up (must stay below the Redis client's socket timeout).
        self.block = block
        #: None: a third of the TTL. 0: never (tests that need a lease to run out).
        self.renew_every = renew_every
        self.keeper = keeper or LEASES
        self.fallback = fallback or LocalLocker(ttl=ttl, wait=wait, telemetry=telemetry)
        self._release = client.register_script(_RELEASE)
        self._begin_commit = client.register_script(_BEGIN_COMMIT)
        self._renew = client.register_script(RENEW_SCRIPT)
        self._take = client.register_script(_ENQUEUE_OR_TAKE)
        self._leave = client.register_script(_LEAVE)
        self._take_or_answered = client.register_script(_ENQUEUE_TAKE_OR_ANSWERED)
        self._warned = False
        self._warn_lock = threading.Lock()

    def keys(self, name: str) -> list[str]:
        """lock, queue, seen, ticket — one hash tag, so one Redis Cluster slot."""
        tag = "{" + name + "}"
        return [f"{self.prefix}lock:{tag}", f"{self.prefix}lockq:{tag}", f"{self.prefix}lockseen:{tag}",
                f"{self.prefix}lockticket:{tag}"]

    def wake_prefix(self, name: str) -> str:
        """Prefix of the waiters' wake lists (``<prefix><token>``), in the lock's cluster slot."""
        return f"{self.prefix}lockwake:{{{name}}}:"

    def done_key(self, name: str) -> str:
        """The place's done marker (``memdir/redo.py``), in the lock's cluster slot."""
        return f"{self.prefix}lockdone:{{{name}}}"

    @contextlib.contextmanager
    def hold(self, name: str, *, ttl: float | None = None, wait: float | None = None) -> Iterator[Lease]:
        ttl = self.ttl if ttl is None else ttl
        wait = self.wait if wait is None else wait
        keys = self.keys(name)
        token = f"{os.getpid()}-{secrets.token_hex(12)}"  # the holder's pid shows who holds a place
        if time.monotonic() < self._down_until:  # Redis failed recently: do not pay its timeout again
            self.telemetry.lock_acquired("redis", "fallback", 0.0)
            with self.fallback.hold(name, ttl=ttl, wait=wait):
                yield FALLBACK_LEASE
            return
        started = time.monotonic()
        try:
            fence, taken_at = self._acquire(name, keys, token, ttl, wait)
        except REDIS_ERRORS as exc:  # any topology: RedisClusterException is not a RedisError
            self.telemetry.lock_acquired("redis", "fallback", time.monotonic() - started)
            self._down_until = time.monotonic() + self.retry_after
            with self._warn_lock:  # several threads fail at once: one warning
                first, self._warned = not self._warned, True
            if first:
                log.warning("Redis lock unavailable (%s); using the in-process lock, probing Redis again "
                            "every %.0fs", exc, self.retry_after)
            with self.fallback.hold(name, ttl=ttl, wait=max(0.0, wait - (time.monotonic() - started))):
                yield FALLBACK_LEASE
            return
        with self._held(name, keys, token, ttl, wait, fence, taken_at, started) as lease:
            yield lease

    @contextlib.contextmanager
    def _held(self, name: str, keys: list[str], token: str, ttl: float, wait: float, fence: int, taken_at: float,
              started: float) -> Iterator[Lease]:
        self.telemetry.lock_acquired("redis", "acquired" if fence else "timeout", time.monotonic() - started)
        if not fence:
            raise LockTimeout(f"another writer holds {name!r} for more than {wait:.0f}s; try again later")
        if self._warned:
            with self._warn_lock:
                again, self._warned = self._warned, False
            if again:
                log.warning("Redis lock available again")
        lease = RedisLease(self, name, keys[0], token, ttl, fence, taken_at)
        every = ttl / 3 if self.renew_every is None else self.renew_every
        job = self.keeper.add(lease.renew, every) if every > 0 else None
        try:
            yield lease
        finally:
            if job is not None:
                self.keeper.remove(job)
            try:
                released = self._release(keys=[keys[0], self.done_key(name), keys[1]],
                                         args=[token, "-" if lease.done is None else lease.done, DONE_TTL_MS,
                                               self.wake_prefix(name)])
                if not released and not lease.lost:
                    # Our token was gone: the lease ran out while held (and maybe another writer took it).
                    self.telemetry.lease_lost("place")
                    log.warning("the lock %s expired before its holder finished (held past its %gs lease)",
                                name, ttl)
            except REDIS_ERRORS as exc:  # the TTL frees it
                log.warning("could not release lock %s (%s); it expires in %.0fs", name, exc, ttl)

    # -- group commit: a waiter hands its change to the holder (``memdir/group.py``) ----------------
    def handoff_keys(self, name: str) -> tuple[str, str]:
        """(proposals list, prefix of the answer lists) of ``name``: the lock's hash tag."""
        tag = "{" + name + "}"
        return f"{self.prefix}gc:{tag}", f"{self.prefix}gca:{tag}:"

    @contextlib.contextmanager
    def hold_or_answer(self, name: str, propose: Callable[[str], str], *, ttl: float | None = None,
                       wait: float | None = None) -> Iterator[Lease | None]:
        """``hold``, for a writer that can hand its change to the holder: when the lock is not free
        at once, ``propose(token)`` posts the change (with the waiter's queue token, which the holder
        removes from the queue when it answers) and returns the list its answer will arrive on; the
        waiter keeps its place in the queue and yields None as soon as an answer is there (the
        holder committed it, or asks it to go on alone). Redis down: the local lock, no proposal."""
        ttl = self.ttl if ttl is None else ttl
        wait = self.wait if wait is None else wait
        if time.monotonic() < self._down_until:
            with self.hold(name, ttl=ttl, wait=wait) as lease:
                yield lease
            return
        keys = self.keys(name)
        token = f"{os.getpid()}-{secrets.token_hex(12)}"
        started = time.monotonic()
        try:
            fence, taken_at = self._acquire(name, keys, token, ttl, wait, propose)
        except REDIS_ERRORS:
            with self.hold(name, ttl=ttl, wait=max(0.0, wait - (time.monotonic() - started))) as lease:
                yield lease  # hold() notes the outage and falls back
            return
        if fence == -1:  # answered before our turn
            self.telemetry.lock_acquired("redis", "handed", time.monotonic() - started)
            yield None
            return
        with self._held(name, keys, token, ttl, wait, fence, taken_at, started) as lease:
            yield lease

    def _acquire(self, name: str, keys: list[str], token: str, ttl: float, wait: float,
                 propose: Callable[[str], str] | None = None) -> tuple[int, float]:
        """Join the queue and poll until first and the lock is free: (fence, monotonic time the
        winning request was sent), or (0, 0) after ``wait`` seconds (the queue place is left)."""
        deadline = time.monotonic() + wait
        ttl_ms, stale_ms = max(1, int(ttl * 1000)), max(100, int(self.stale * 1000))
        keep_ms = int(max(wait, ttl, self.stale) * 4000)
        wake = self.wake_prefix(name) + token
        taking = [*keys, wake]
        leaving = [keys[1], keys[2], wake]
        answer: str | None = None
        # A blocked wait must end well inside the poll that keeps our place in the queue (``stale``).
        block = max(0.01, min(self.block, self.stale / 3))
        try:
            while True:
                sent = time.monotonic()
                if answer is None:
                    got = int(self._take(keys=taking, args=[token, ttl_ms, stale_ms, keep_ms]))
                else:
                    got = int(self._take_or_answered(keys=[*taking, answer], args=[token, ttl_ms, stale_ms, keep_ms]))
                    if got == 0:
                        return -1, 0.0
                if got > 0:
                    return got, sent
                left = deadline - time.monotonic()
                if left <= 0:
                    self._leave(keys=leaving, args=[token])
                    return 0, 0.0
                if propose is not None and answer is None:
                    answer = propose(token)
                    continue  # the holder may have taken it already: look before blocking
                # Blocked on our wake list: the releasing holder pushes to the head of the queue,
                # a holder that answered our proposal pushes to us. The timeout only bounds how
                # long a holder that died without releasing (or a waiter ahead that vanished)
                # delays us before we look again.
                self.client.blpop([wake], timeout=min(block, max(0.01, left)))
        except BaseException:
            with contextlib.suppress(*REDIS_ERRORS):
                self._leave(keys=leaving, args=[token])
            raise
