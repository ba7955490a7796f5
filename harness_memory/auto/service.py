"""``AutoMemory``: the post-hook, the background queue, injection and the fact API, per services
(the composition root builds it with what it uses and keeps the one instance).

Why one object per ``MemoryServices``: the queue and its worker threads must be shared by every
agent built in the process (an app builds one agent per request), and so must the light-model
client. ``auto_memory_for(services)`` returns that one object.

Write path: post-hook (capture, trivial turns dropped, signals detected, enqueue — microseconds)
→ debounced queue → worker thread → ``Updater`` (one model call) → ``apply`` under the place lock;
or, for a session that session memory summarises, the batch rides along in the summary call
(``summary_rider``). Read path: ``render_injection`` reads the user's and the shared auto place's
manifests and renders the reminder block.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Protocol

from .. import llm_latency
from ..errors import InvalidName
from ..layout import validate_id
from ..llm import LightModel, warn_no_light_model
from .capture import capture_messages, capture_run
from .facts import FactAPI
from .inject import INTRO, render_injection_block
from .model import (
    Batch,
    CapturedMessage,
    QueueKey,
)
from .pending import save_pending, take_pending
from .plan import ApplyReport
from .queue import QueuePolicy, QueueStats, QueueWorker
from .rider import SummaryRider
from .signals import SignalPatterns
from .store import AutoPlace, AutoView, WarmPlaces
from .updater import Updater, UpdateResult, UpdateStatus

if TYPE_CHECKING:
    from ..config import AutoConfig
    from ..hooks import HookCall
    from ..memdir import Manifest, MemoryDir
    from ..observe import Telemetry
    from .hook import AutoMemoryHook

log = logging.getLogger(__name__)

_SKIP_STATUSES = {"error", "cancelled", "ERROR", "CANCELLED"}
SHARED_VIEW_TTL = 30.0


class AutoPlaces(Protocol):
    """Where auto memory lives: the user's and the shared auto place (``MemoryServices`` is one)."""

    def user_auto_dir(self, user_id: str, project: str | None = None) -> MemoryDir: ...

    def shared_auto_dir(self, project: str | None = None) -> MemoryDir: ...


class HasAutoMemory(Protocol):
    """A composition root holding the process's one ``AutoMemory`` (``MemoryServices`` is one)."""

    def auto_memory(self) -> AutoMemory: ...


class AutoMemory(FactAPI):
    """Auto memory of one composition root. Thread-safe; cheap to call from hooks. The fact and
    profile API (``list_facts``, ``add_fact``, ``clear_facts``, …) comes from ``FactAPI``.

    Takes exactly what it uses: its config section, its ``places``, the extraction ``model``
    (a getter: built on first use), ``telemetry``, the ``executor`` its hook runs off an event
    loop in, and ``carries`` — the summary-rider policy's answer to "does this session's summary
    carry the extraction?" (``riding.SummaryRiding``; default: never)."""

    def __init__(self, config: AutoConfig, *, places: AutoPlaces, model: Callable[[], LightModel | None],
                 telemetry: Telemetry, executor: Executor, carries: Callable[[str], bool] = lambda _: False,
                 clock: Callable[[], float] = time.monotonic, start_worker: bool = True,
                 today: Callable[[], dt.date] = dt.date.today, warm: WarmPlaces | None = None) -> None:
        self.config = config
        self.places = places
        #: The pod's warm views: an extraction reads the place through them (``memdir/versions.py``).
        self.warm = warm
        self.telemetry = telemetry
        #: Runs the hook's work off an event loop (the root's ``work`` pool).
        self.executor = executor
        self._model = model
        self._carries = carries
        self._today = today
        cfg = self.config
        policy = QueuePolicy(debounce_seconds=cfg.debounce_seconds, max_wait_seconds=cfg.max_wait_seconds,
                             min_interval_seconds=cfg.min_interval_seconds,
                             queue_max=cfg.queue_max, batch_max_messages=cfg.batch_max_messages,
                             batch_max_user_tokens=cfg.max_conversation_tokens // 2,
                             max_attempts=cfg.max_attempts, retry_delay_seconds=max(cfg.debounce_seconds, 1.0),
                             summary_wait_seconds=cfg.summary_wait_seconds)
        #: The signal patterns in force (bundled, extended by ``auto.patterns_dir``).
        self.patterns = SignalPatterns.load(cfg.patterns_dir)
        self.updater = Updater(self._light_model, cfg, today=today, patterns=self.patterns,
                               rejected=self._count_rejections)
        self.worker = QueueWorker(self._process, policy, workers=cfg.workers, clock=clock,
                                  start_threads=start_worker, on_start=self.resume_pending)
        #: The last update results (tests, benchmarks, the control plane's debug view).
        self.results: deque[UpdateResult] = deque(maxlen=100)
        #: Changes the apply rules refused since start, by reason (``ApplyReport.reject``).
        self.rejections: Counter[str] = Counter()
        self._guard = threading.Lock()
        self._closed = False
        self._shared_cache: tuple[float, AutoView] | None = None
        self._metrics_seen = QueueStats()
        self._metrics_lock = threading.Lock()
        telemetry.add_refresher(self._sync_queue_metrics)

    # -- write path -----------------------------------------------------------------------------
    def make_post_hook(self, agent_type: str = "default") -> AutoMemoryHook:
        """The hook for ``Agent(post_hooks=[...])`` (``auto/hook.py``; imports agno): it only
        captures and enqueues — never waits for the store or a model — and never raises."""
        from .hook import AutoMemoryHook

        return AutoMemoryHook(self, agent_type)

    def capture(self, user_id: str, session_id: str, messages: list[Any], *, agent_type: str = "default",
                run_id: str | None = None) -> int:
        """Queue messages (agno ``Message`` objects or ``{"role", "content"}`` dicts) of one run
        for a non-agno caller; returns how many were kept. Pass the same ``run_id`` when the same
        run may be delivered again, so the watermark recognises it (default: a new id)."""
        kept = capture_messages(messages, run_id or uuid.uuid4().hex)
        self._submit(user_id, agent_type, session_id, kept)
        return len(kept)

    def flush(self, timeout: float | None = None) -> bool:
        """Run every pending update now and wait for them (scripts, tests, shutdown)."""
        return self.worker.flush(timeout)

    def run_due(self, now: float | None = None) -> int:
        """Process due updates in this thread (manual mode: ``start_worker=False``)."""
        return self.worker.run_due(now)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, timeout: float | None = None) -> None:
        """Flush (bounded by ``timeout``, by default ``shutdown_deadline()``) and stop the worker
        threads; what is still pending is kept in the store for the next start. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.worker.close(self.shutdown_deadline() if timeout is None else timeout, keep=self._keep_pending)
        self._sync_queue_metrics()
        self.telemetry.remove_refresher(self._sync_queue_metrics)

    def shutdown_deadline(self) -> float:
        """Seconds the exit flush waits, sized to the model (a 5 s flush suits a hosted model and
        drops every update of a 1.5B CPU model that takes a minute each): the pending updates,
        ``auto.workers`` at a time, at the extraction model's measured latency (``llm_latency``;
        its configured timeout before anything is measured), with a fifth more as headroom —
        never less than ``auto.shutdown_flush_seconds`` nor more than ``shutdown_flush_max_seconds``."""
        cfg = self.config
        floor = cfg.shutdown_flush_seconds
        pending = self.worker.pending_count()
        model = self._light_model()
        if not pending or model is None:
            return floor
        measured = llm_latency.estimate(model.model)
        per_call = measured.seconds if measured is not None else model.timeout
        waves = -(-pending // max(1, cfg.workers))
        return max(floor, min(cfg.shutdown_flush_max_seconds, waves * per_call * 1.2))

    def resume_pending(self) -> int:
        """Queue again the updates an earlier process kept at exit (``pending.py``); returns how
        many batches. Runs once in the first worker thread; call it yourself in manual mode."""
        batches = take_pending(lambda user: AutoPlace(self.places.user_auto_dir(user)),
                               AutoPlace(self.places.shared_auto_dir()))
        if batches:
            self.worker.restore(batches)
            log.info("auto memory: %d pending update(s) kept by an earlier process queued again", len(batches))
        return len(batches)

    def _keep_pending(self, batches: list[Batch]) -> int:
        return save_pending(batches, lambda user: AutoPlace(self.places.user_auto_dir(user)),
                            AutoPlace(self.places.shared_auto_dir()))

    def forget_user(self, user_id: str) -> int:
        """Drop the user's queued updates so a "forget everything" is not undone a moment later
        by a conversation still waiting for its debounce. Returns how many were dropped."""
        return self.worker.drop_user(user_id)

    @property
    def stats(self) -> QueueStats:
        return self.worker.stats

    # -- read path ------------------------------------------------------------------------------
    def render_injection(self, user_id: str | None,
                         read: Callable[[MemoryDir], tuple[Manifest, str | None]] | None = None) -> str:
        """The reminder block for ``user_id``'s agent ('' when nothing is stored or on error).

        Reads the user's auto place and the shared (project) auto place: one GET each. ``read``
        loads the user's manifest instead (a build's warm views, ``memdir/versions.py``)."""
        if not self.config.enabled:
            return ""
        user_view: AutoView | None = None
        shared_view: AutoView | None = None
        try:
            if user_id:
                place = AutoPlace(self.places.user_auto_dir(user_id))
                user_view = place.read() if read is None else place.view_of(read(place.dir)[0])
        except InvalidName:
            raise
        except Exception as exc:
            log.warning("auto memory of user %s unavailable (%s); not injected", user_id, exc)
        shared_view = self._shared_view()
        return render_injection_block(user_view, shared_view, max_tokens=self.config.max_injection_tokens,
                                      correction_share=self.config.correction_share, today=self._today())

    def _shared_view(self) -> AutoView | None:
        """The shared (project) auto place, cached per pod for ``SHARED_VIEW_TTL`` s.

        Why: every agent build injects it and it changes rarely (operators edit it); the cache
        saves one store request per build. This pod's own fact-API writes drop the cache.
        """
        now = time.monotonic()
        if self._shared_cache is not None and self._shared_cache[0] > now:
            return self._shared_cache[1]
        try:
            view = AutoPlace(self.places.shared_auto_dir()).read()
        except Exception as exc:
            log.warning("shared auto memory unavailable (%s); not injected", exc)
            return self._shared_cache[1] if self._shared_cache else None
        self._shared_cache = (now + SHARED_VIEW_TTL, view)
        return view

    # -- internals --------------------------------------------------------------------------------
    def _place(self, user_id: str | None, shared: bool) -> AutoPlace:
        if shared:
            self._shared_cache = None  # a fact-API call on the shared place: re-read on the next build
            return AutoPlace(self.places.shared_auto_dir())
        if not user_id:
            raise InvalidName("user id is required for a user's auto memory (or pass shared=True)")
        return AutoPlace(self.places.user_auto_dir(user_id))

    @property
    def max_facts(self) -> int:  # type: ignore[override]
        return self.config.max_facts

    def _drop_queued(self, user_id: str) -> int:
        return self.worker.drop_user(user_id)

    def _light_model(self) -> LightModel | None:
        """The extraction model: ``auto.model`` on the light model's server, else the light model."""
        return self._model()

    def capture_hook_call(self, agent_type: str, call: HookCall) -> None:
        """What the post-hook does with one finished run (skips errored and cancelled runs)."""
        run_output = call.run_output
        if not self.config.enabled or run_output is None:
            return
        status = getattr(run_output, "status", None)
        if str(getattr(status, "value", status)) in _SKIP_STATUSES:
            return
        uid = call.resolved_user_id
        sid = call.session_id or "default"
        if not uid:
            log.debug("auto memory: run without a user id is not captured")
            return
        self._submit(uid, agent_type, sid, capture_run(run_output))

    def _submit(self, user_id: str, agent_type: str, session_id: str, messages: list[CapturedMessage]) -> None:
        if not messages or not self.config.enabled:
            return
        if self._light_model() is None:
            warn_no_light_model("auto memory", "conversations are not learned from")
            return
        try:
            key = QueueKey(validate_id(user_id, "user id"), validate_id(agent_type, "agent type"),
                           validate_id(session_id, "session id"))
        except InvalidName as exc:
            log.warning("auto memory: not captured (%s)", exc)
            return
        messages = self.patterns.drop_trivial(messages)
        if not any(m.role == "user" for m in messages):
            return  # acknowledgements only ("好的", "ok"): nothing to learn, no model call
        carried = self._carries(session_id)
        self.worker.submit(key, messages, self.patterns.detect(messages), carried=carried)

    def _process(self, batch: Batch) -> bool:
        place = AutoPlace(self.places.user_auto_dir(batch.key.user_id), self.warm)
        telemetry = self.telemetry
        with telemetry.extraction(batch.key.user_id, batch.key.session_id) as op:
            result = self.updater.run(place, batch)
            op.outcome = _outcome(result)
        self.record(result)
        return result.status is not UpdateStatus.RETRY

    # -- riding along with session summaries -----------------------------------------------------
    def summary_rider(self, session_id: str, accept: Callable[[QueueKey], bool]) -> SummaryRider | None:
        """The pending extraction of ``session_id`` (of a user ``accept`` allows), prepared to ride
        along in a session summary call; None when there is none or combining is off. The caller
        must call the rider's ``finish`` (``session/combined.py`` does)."""
        cfg = self.config
        if self._closed or not cfg.enabled or not cfg.combine_with_summary or self._light_model() is None:
            return None
        batch = self.worker.take_session(session_id, accept)
        if batch is None:
            return None
        try:
            prepared = self.updater.prepare(AutoPlace(self.places.user_auto_dir(batch.key.user_id), self.warm), batch)
        except Exception as exc:  # the store failed: the batch goes back to the queue
            log.warning("auto memory: could not prepare %s for the session summary call (%s)", batch.key, exc)
            self.worker.finish(batch, False)
            return None
        if isinstance(prepared, UpdateResult):  # nothing unseen
            self.record(prepared)
            self.worker.finish(batch, True)
            return None
        return SummaryRider(self, prepared)

    def record(self, result: UpdateResult) -> None:
        """Keep an update's result (``results``) and count its fact changes (metrics)."""
        self.results.append(result)
        if result.report is not None:
            r = result.report
            refused = sum(r.rejected.values()) - r.dropped_low_confidence - r.dropped_scrubbed
            self.telemetry.auto_facts({
                "added": len(r.added), "merged": len(r.refreshed) + len(r.merged), "removed": len(r.removed),
                "expired": len(r.expired), "trimmed": len(r.trimmed),
                "dropped_low_confidence": r.dropped_low_confidence, "dropped_scrubbed": r.dropped_scrubbed,
                "rejected": refused, "merge_refused": len(r.merges_refused)})
        self._sync_queue_metrics()

    def _sync_queue_metrics(self) -> None:
        """Bring the queue metrics up to date: the depth, and the queue's counters since last time
        (read from ``QueueStats``, so the queue itself needs no telemetry). Called after each batch
        and before each exposition — not on capture, which is on the user's run."""
        if self.telemetry.metrics is None:
            return
        with self._metrics_lock:
            now = dataclasses.replace(self.worker.stats)
            seen, self._metrics_seen = self._metrics_seen, now
        delta = {f.name: getattr(now, f.name) - getattr(seen, f.name) for f in dataclasses.fields(now)}
        self.telemetry.auto_queue(self.worker.pending_count(), delta)

    def _count_rejections(self, report: ApplyReport) -> None:
        with self._guard:
            self.rejections.update(report.rejected)


def _outcome(result: UpdateResult) -> str:
    """The extraction metric's outcome: applied, skipped, unusable (answer not usable) or model_failed."""
    if result.status is UpdateStatus.RETRY:
        return "unusable" if result.reason == "unusable answer" else "model_failed"
    return result.status.value


_OLD_BLOCK = re.compile(r"\n*<system-reminder>\n" + re.escape(INTRO) + r".*?</system-reminder>\n?", re.DOTALL)


def attach_auto_memory(agent: Any, services: HasAutoMemory, user_id: str, agent_type: str = "default",
                       *, block: str | None = None) -> str:
    """Wire auto memory into an agno ``Agent``: the reminder block appended to
    ``additional_context`` and the post-hook appended to ``post_hooks``. Idempotent (a second call
    replaces the block and the hook instead of adding them twice). Returns the injected block
    ('' when nothing is stored or ``auto.enabled`` is off). Never raises for a store failure.
    ``block`` is a block the caller already rendered (``render_injection``), e.g. concurrently
    with its other reads."""
    auto = auto_memory_for(services)
    if not auto.config.enabled:
        return ""
    if block is None:
        block = auto.render_injection(user_id)
    existing = _OLD_BLOCK.sub("", agent.additional_context or "").rstrip()
    if block:
        agent.additional_context = f"{existing}\n\n{block}" if existing else block
    else:
        agent.additional_context = existing or None
    from .hook import AutoMemoryHook

    hooks = [h for h in (agent.post_hooks or []) if not isinstance(h, AutoMemoryHook)]
    agent.post_hooks = [*hooks, auto.make_post_hook(agent_type)]
    return block


def auto_memory_for(services: HasAutoMemory) -> AutoMemory:
    """The one ``AutoMemory`` of ``services`` (``services.auto_memory()``, created on first use)."""
    return services.auto_memory()
