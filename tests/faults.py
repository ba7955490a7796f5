"""A store wrapper for fault injection: delegate to a real store, but fail or stall chosen calls.

Why a wrapper and not a fake: the calls that pass still reach the real backend (SeaweedFS or a
local directory), so a test sees exactly what readers would see after the fault.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from harness_memory.errors import StorageUnavailable
from harness_memory.storage.base import DeleteFailure, ObjectInfo, ObjectStore, StoredObject

Match = Callable[[str, str], bool]
"""``match(op, key)``: op is get, head, put, put_if_absent, put_if_match, delete, list, delete_many."""


@dataclass
class Rule:
    match: Match
    fail: BaseException | None = None
    delay: float = 0.0
    times: int | None = None  # None: every matching call
    hits: int = 0
    after: bool = False  # fail once the call has reached the inner store (an answer lost on the way back)


@dataclass
class Calls:
    log: list[tuple[str, str]] = field(default_factory=list)
    inflight: dict[str, int] = field(default_factory=dict)
    max_inflight: dict[str, int] = field(default_factory=dict)


class FaultyStore(ObjectStore):
    """``inner`` with rules applied before each call (first matching rule wins)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(io_threads=8)
        self.inner = inner
        self.key_prefix = getattr(inner, "key_prefix", "memory/")
        self.supports_conditional_put = inner.supports_conditional_put
        self.rules: list[Rule] = []
        self.calls = Calls()
        self._lock = threading.Lock()

    # -- rules ------------------------------------------------------------------------------
    def fail(self, match: Match, exc: BaseException | None = None, *, times: int | None = None) -> Rule:
        rule = Rule(match, fail=exc or StorageUnavailable("injected fault: the store went away"), times=times)
        self.rules.append(rule)
        return rule

    def fail_after(self, match: Match, exc: BaseException | None = None, *, times: int | None = None) -> Rule:
        """The call is done by the inner store, then reported as failed (a timeout after sending)."""
        rule = Rule(match, fail=exc or StorageUnavailable("injected fault: no answer", maybe_applied=True),
                    times=times, after=True)
        self.rules.append(rule)
        return rule

    def stall(self, match: Match, seconds: float, *, times: int | None = None) -> Rule:
        rule = Rule(match, delay=seconds, times=times)
        self.rules.append(rule)
        return rule

    def clear(self) -> None:
        self.rules.clear()

    def _before(self, op: str, key: str) -> Rule | None:
        """Apply the first matching rule's delay and (unless ``after``) its failure; returns it."""
        rule = None
        with self._lock:
            self.calls.log.append((op, key))
            for candidate in self.rules:
                if (candidate.times is None or candidate.hits < candidate.times) and candidate.match(op, key):
                    candidate.hits += 1
                    rule = candidate
                    break
        if rule is None:
            return None
        if rule.delay:
            time.sleep(rule.delay)
        if rule.fail is not None and not rule.after:
            raise rule.fail
        return rule

    def _call(self, op: str, key: str, fn: Callable[[], object]) -> object:
        with self._lock:
            n = self.calls.inflight.get(op, 0) + 1
            self.calls.inflight[op] = n
            self.calls.max_inflight[op] = max(self.calls.max_inflight.get(op, 0), n)
        try:
            rule = self._before(op, key)
            result = fn()
            if rule is not None and rule.after and rule.fail is not None:
                raise rule.fail
            return result
        finally:
            with self._lock:
                self.calls.inflight[op] -= 1

    # -- ObjectStore ------------------------------------------------------------------------
    def get(self, key: str) -> StoredObject:
        return self._call("get", key, lambda: self.inner.get(key))  # type: ignore[return-value]

    def head(self, key: str) -> ObjectInfo:
        return self._call("head", key, lambda: self.inner.head(key))  # type: ignore[return-value]

    def put(self, key: str, data: bytes, *, content_type: str | None = None) -> str:
        return self._call("put", key, lambda: self.inner.put(key, data, content_type=content_type))  # type: ignore

    def put_if_absent(self, key: str, data: bytes, *, content_type: str | None = None) -> str:
        return self._call("put_if_absent", key,  # type: ignore[return-value]
                          lambda: self.inner.put_if_absent(key, data, content_type=content_type))

    def put_if_match(self, key: str, data: bytes, etag: str, *, content_type: str | None = None) -> str:
        return self._call("put_if_match", key,  # type: ignore[return-value]
                          lambda: self.inner.put_if_match(key, data, etag, content_type=content_type))

    def delete(self, key: str) -> None:
        self._call("delete", key, lambda: self.inner.delete(key))

    def list(self, prefix: str) -> Iterator[ObjectInfo]:
        return iter(self._call("list", prefix, lambda: list(self.inner.list(prefix))))  # type: ignore[arg-type]

    def delete_many(self, keys: Iterable[str]) -> list[DeleteFailure]:
        keys = list(keys)
        return self._call("delete_many", ",".join(keys),  # type: ignore[return-value]
                          lambda: self.inner.delete_many(keys))

    def close(self) -> None:
        super().close()
        self.inner.close()

    def describe(self) -> str:
        return f"FaultyStore({self.inner.describe()})"


def on(op: str | tuple[str, ...], suffix: str = "") -> Match:
    """A matcher: the call is ``op`` (or one of them) and its key ends with ``suffix``."""
    ops = (op,) if isinstance(op, str) else op
    return lambda o, k: o in ops and k.endswith(suffix)


MANIFEST_WRITE = on(("put", "put_if_absent", "put_if_match"), "/.manifest.json")

__all__ = ["MANIFEST_WRITE", "FaultyStore", "Rule", "on"]
