"""``SessionMemoryManager``: the session-memory API of one pod.

Long conversations must not overflow the model's context, and any pod must be able to serve the
next request of a session. So, per the architecture: every run's new messages go to a hot buffer
(Redis, shared by all pods; in-process without Redis — see ``buffer``); past a token threshold
ONE worker in all pods (Redis lock) asks the light model to update the markdown summary
(``extract``), stores it at ``memory/sessions/session-<id>.md`` and caches it in its pod's LRU;
``get_summary`` serves the LRU, else the store. The request entry puts the summary in front of
the user's message (``inject``); the post-hook (``hooks``) feeds the buffer in the background.

The API is async (as in the architecture), with ``*_sync`` twins. The async methods run the
blocking work (Redis, store, model) in a small thread pool of this manager, so they can be
awaited from any event loop. Nothing here raises into a user's run: failures are logged and
reported in the returned values.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from ..config import RedisConfig, SessionConfig
from ..errors import StorageError
from ..layout import validate_id
from ..llm import warn_no_light_model
from ..locks import LeaseKeeper
from ..observe import DISABLED, Telemetry
from ..redis_client import RedisClient
from ..storage import ObjectStore
from ..tokens import MESSAGE_OVERHEAD_TOKENS, count_tokens
from .buffer import SessionBuffer
from .cache import CachedSummary, SummaryCache
from .combined import RiderSource
from .extract import Summariser, SummaryModel, extraction_due
from .messages import convert
from .records import BufferedMessage, ExtractionResult, ExtractStatus, SessionInfo, SessionState
from .summary import cut_lines
from .worker import BackgroundWorker

log = logging.getLogger(__name__)
T = TypeVar("T")
BACKGROUND_ROUNDS = 4  # summaries in a row for one session when a backlog exceeds one call
SEEN_IDS_MAX = 50_000


@dataclass
class ManagerStats:
    runs: int = 0
    messages: int = 0
    inline_collects: int = 0
    collect_errors: int = 0
    cache_hits: int = 0
    store_reads: int = 0


class SessionMemoryManager:
    """Session memory for one pod: buffer, summaries, cache and background work.

    ``store`` holds the summaries; ``redis_client`` (None = in-process mode) the buffer;
    ``model`` is the light model (None = messages are buffered but never summarised, warned
    once). Build one per process with ``session_manager_for(services)``.
    """

    def __init__(
        self,
        store: ObjectStore,
        *,
        config: SessionConfig | None = None,
        redis_client: RedisClient | None = None,
        redis_config: RedisConfig | None = None,
        model: SummaryModel | None = None,
        key_prefix: str = "memory/",
        clock: Callable[[], float] = time.time,
        executor: Executor | None = None,
        telemetry: Telemetry = DISABLED,
        riders: RiderSource | None = None,
        leases: LeaseKeeper | None = None,
    ) -> None:
        self.cfg = config or SessionConfig()
        self.telemetry = telemetry
        rcfg = redis_config or RedisConfig()
        self.store = store
        self.model = model
        self.clock = clock
        self.buffer = SessionBuffer(redis_client, key_prefix=rcfg.key_prefix,
                                    retry_after_seconds=rcfg.retry_after_seconds, clock=clock,
                                    wait_replicas=rcfg.wait_replicas, wait_timeout_ms=rcfg.wait_timeout_ms)
        self.cache = SummaryCache(self.cfg.lru_size)
        self.summariser = Summariser(store, self.buffer, self.cache, self.cfg, key_prefix=key_prefix,
                                     clock=clock, telemetry=telemetry, leases=leases)
        self.stats = ManagerStats()
        #: Where a job riding along in a summary call comes from (auto memory; ``combined.py``).
        self.riders = riders
        self._tracked: OrderedDict[str, None] = OrderedDict()
        self._worker = BackgroundWorker(self._collect_and_schedule, self._background_extract,
                                        queue_max=self.cfg.queue_max, workers=self.cfg.extract_workers)
        #: Runs the async API's blocking work; the services' ``work`` pool (owned there) or our own.
        self._io: Executor | None = executor
        self._own_io = executor is None
        self._guard = threading.Lock()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._warned_ids: set[str] = set()
        self.closed = False

    @property
    def mode(self) -> str:
        """``"redis"`` or ``"local"`` (probing Redis if a probe is due)."""
        return self.buffer.mode

    @property
    def model_calls(self) -> int:
        return self.summariser.model_calls

    # -- hook entry (non-blocking) ------------------------------------------------------------
    def submit_run(self, session_id: str, messages: Sequence[Any]) -> int:
        """Hand one run's messages to the background collector; returns how many were kept.

        Runs on the user's thread, so it only filters and converts (no I/O, no token counting).
        Messages already submitted (same agno message id) are skipped, so a hook registered twice
        or a continued run never buffers a message twice."""
        if self.closed or not self._valid(session_id):
            return 0
        self._track(session_id)
        fresh = [m for m in messages if self._first_sight(m)]
        entries = convert(fresh, max_chars=self.cfg.message_max_chars, now=self.clock())
        if not entries:
            return 0
        if not self._worker.submit_run(session_id, entries):
            self.stats.inline_collects += 1  # queue full: slow this run rather than lose messages
            self._collect_and_schedule(session_id, entries)
        return len(entries)

    def _first_sight(self, message: Any) -> bool:
        mid = message.get("id") if isinstance(message, dict) else getattr(message, "id", None)
        if not isinstance(mid, str) or not mid:
            return True
        with self._guard:
            if mid in self._seen:
                return False
            self._seen[mid] = None
            if len(self._seen) > SEEN_IDS_MAX:
                self._seen.popitem(last=False)
        return True

    def tracks(self, session_id: str) -> bool:
        """Whether this pod's hook fed ``session_id`` recently (no I/O): its summaries will come
        from here, so other work on the session may wait for them (``combined.py``)."""
        with self._guard:
            return session_id in self._tracked

    def _track(self, session_id: str) -> None:
        with self._guard:
            self._tracked[session_id] = None
            self._tracked.move_to_end(session_id)
            if len(self._tracked) > SEEN_IDS_MAX // 5:
                self._tracked.popitem(last=False)

    def _valid(self, session_id: str) -> bool:
        try:
            validate_id(session_id, "session id")
        except ValueError as exc:
            if session_id not in self._warned_ids and len(self._warned_ids) < 100:
                self._warned_ids.add(session_id)
                log.warning("session memory skipped: %s", exc)
            return False
        return True

    def _with_tokens(self, entries: list[BufferedMessage]) -> list[BufferedMessage]:
        return [m if m.tokens else replace(m, tokens=MESSAGE_OVERHEAD_TOKENS + count_tokens(m.content))
                for m in entries]

    def _collect_and_schedule(self, session_id: str, entries: list[BufferedMessage]) -> None:
        try:
            state = self._collect(session_id, entries)
        except Exception as exc:
            self.stats.collect_errors += 1
            self.telemetry.session_collected("failed", len(entries))
            log.warning("session memory: could not buffer %d message(s) of session %s: %s",
                        len(entries), session_id, exc)
            return
        if extraction_due(state, self.cfg, self.clock()) and self._model_ready():
            self._worker.schedule_extraction(session_id)

    def _collect(self, session_id: str, entries: list[BufferedMessage]) -> SessionState:
        entries = self._with_tokens(entries)
        state = self.buffer.collect(session_id, entries, cap=self.cfg.buffer_max_messages,
                                    ttl=self.cfg.ttl_seconds)
        self.stats.runs += 1
        self.stats.messages += len(entries)
        self.telemetry.session_collected("ok", len(entries))
        return state

    def _model_ready(self) -> bool:
        if self.model is not None:
            return True
        warn_no_light_model("session memory", "messages are buffered but not summarised")
        return False

    def _background_extract(self, session_id: str) -> None:
        for _ in range(BACKGROUND_ROUNDS):
            result = self.maybe_extract_sync(session_id)
            if result.status is not ExtractStatus.EXTRACTED:
                return
            # Runs collected while the model was writing were not scheduled (this session was
            # in flight): look again, they may already be past the threshold.
            if not extraction_due(self.buffer.state(session_id), self.cfg, self.clock()):
                return

    # -- sync API -----------------------------------------------------------------------------
    def collect_messages_sync(self, session_id: str, messages: Sequence[Any]) -> SessionState | None:
        """Append messages (agno ``Message``, dicts with role/content, or ``BufferedMessage``) to
        the session's buffer now; same filtering as the hook. Returns the session's counters
        (None for an unknown session when nothing was kept)."""
        validate_id(session_id, "session id")
        self._track(session_id)
        entries = convert(messages, max_chars=self.cfg.message_max_chars, now=self.clock())
        if not entries:
            return self.buffer.state(session_id)
        return self._collect(session_id, entries)

    def should_extract_sync(self, session_id: str) -> bool:
        """Whether the thresholds say a summary is due (see ``extraction_due``)."""
        validate_id(session_id, "session id")
        return extraction_due(self.buffer.state(session_id), self.cfg, self.clock())

    def maybe_extract_sync(self, session_id: str, model: SummaryModel | None = None, *,
                           force: bool = False) -> ExtractionResult:
        """Summarise if due (``force``: if anything is new) and nobody else is doing it."""
        validate_id(session_id, "session id")
        use = model or self.model
        if use is None:
            self._model_ready()
            return ExtractionResult(ExtractStatus.NO_MODEL, session_id, error="no light model configured")
        with self.telemetry.summary(session_id) as op:
            try:  # a job rides along only in calls of the model it was prepared for
                result = self.summariser.extract(session_id, use, force=force,
                                                 riders=self.riders if use is self.model else None)
            except Exception as exc:  # a Redis bug / unexpected error: report, never raise
                log.warning("session %s: summary attempt failed unexpectedly: %s", session_id, exc)
                result = ExtractionResult(ExtractStatus.FAILED, session_id, error=f"{type(exc).__name__}: {exc}")
            op.outcome = result.status.value.replace("-", "_")
            return result

    def get_summary_sync(self, session_id: str) -> str | None:
        """The session's summary: this pod's cache when it is current, else the object store.

        Never raises for a store or Redis failure: the cached summary (even if stale) or None."""
        validate_id(session_id, "session id")
        now = self.clock()
        entry = self.cache.get(session_id)
        if entry is not None:
            try:
                known = self.buffer.summary_version(session_id)
            except Exception:
                known = None
            if entry.fresh(known, now, self.cfg.ttl_seconds):
                self.stats.cache_hits += 1
                return entry.text
        self.stats.store_reads += 1
        try:
            stored = self.summariser.load_stored(session_id)
        except StorageError as exc:
            log.warning("session %s: summary unavailable (%s)%s", session_id, exc,
                        "; serving the cached one" if entry else "")
            return entry.text if entry else None
        text = cut_lines(stored.text, self.cfg.summary_max_chars, keep_tail=False) if stored else None
        self.cache.put(session_id, CachedSummary(text, stored.version if stored else 0, now))
        return text

    def session_info_sync(self, session_id: str) -> SessionInfo:
        """Buffer, counters, lock and summaries of one session (the control plane's debug view)."""
        validate_id(session_id, "session id")
        state = self.buffer.state(session_id)
        entry = self.cache.get(session_id)
        info = SessionInfo(session_id, self.buffer.mode, state, self.buffer.entries(session_id),
                           cached_summary=entry.text if entry else None,
                           cached_version=entry.version if entry else None,
                           due=extraction_due(state, self.cfg, self.clock()))
        ttl = self.buffer.lock_ttl_ms(session_id)
        info.lock_held, info.lock_ttl_ms = ttl is not None, ttl
        info.lock_holder = self.buffer.lock_holder(session_id) if ttl is not None else None
        try:
            stored = self.summariser.load_stored(session_id)
        except StorageError as exc:
            log.warning("session %s: stored summary unavailable (%s)", session_id, exc)
            stored = None
        if stored is not None:
            info.stored_summary, info.stored_version = stored.text, stored.version
        return info

    def clear_session_sync(self, session_id: str) -> None:
        """Forget a session: its buffer, this pod's cached summary and the stored summary."""
        validate_id(session_id, "session id")
        self.buffer.clear(session_id)
        self.cache.drop(session_id)
        self.store.delete(self.summariser.key(session_id))

    # -- async API ----------------------------------------------------------------------------
    @property
    def executor(self) -> Executor:
        """Where the async API (and the summary pre-hook under ``arun()``) runs blocking work."""
        if self._io is None:
            with self._guard:
                if self._io is None:
                    self._io = ThreadPoolExecutor(8, thread_name_prefix="hm-session-io")
        return self._io

    async def _off_loop(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    async def collect_messages(self, session_id: str, messages: Sequence[Any]) -> SessionState | None:
        return await self._off_loop(self.collect_messages_sync, session_id, list(messages))

    async def should_extract(self, session_id: str) -> bool:
        return await self._off_loop(self.should_extract_sync, session_id)

    async def maybe_extract(self, session_id: str, model: SummaryModel | None = None, *,
                            force: bool = False) -> ExtractionResult:
        return await self._off_loop(self.maybe_extract_sync, session_id, model, force=force)

    async def get_summary(self, session_id: str) -> str | None:
        return await self._off_loop(self.get_summary_sync, session_id)

    async def session_info(self, session_id: str) -> SessionInfo:
        return await self._off_loop(self.session_info_sync, session_id)

    async def clear_session(self, session_id: str) -> None:
        await self._off_loop(self.clear_session_sync, session_id)

    # -- lifecycle ----------------------------------------------------------------------------
    def flush(self, timeout: float | None = 10.0) -> bool:
        """Wait until every submitted run is in the buffer (not for summaries); False on timeout."""
        return self._worker.flush(timeout)

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        """Wait until submitted runs are buffered and the summaries they triggered are done."""
        return self._worker.wait_idle(timeout)

    def close(self, timeout: float = 10.0) -> bool:
        """Drain background work (up to ``timeout``) and stop its threads. Idempotent."""
        if self.closed:
            return True
        self.closed = True
        idle = self._worker.close(timeout)
        if self._io is not None and self._own_io:
            self._io.shutdown(wait=True, cancel_futures=True)
        return idle


class HasSessionMemory(Protocol):
    """A composition root holding the process's one manager (``MemoryServices`` is one)."""

    def session_manager(self) -> SessionMemoryManager: ...


def session_manager_for(services: HasSessionMemory) -> SessionMemoryManager:
    """The one manager of ``services`` (``services.session_manager()``, built on first use)."""
    return services.session_manager()
