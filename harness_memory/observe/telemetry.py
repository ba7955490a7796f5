"""``Telemetry``: the one observability object of a ``MemoryServices`` (metrics, spans, events).

Why one object passed down (not module-level metrics): the composition root decides what is on
(config ``observe.*``, installed extras, a test's private registry and tracer provider), and
every layer records through the object it was given. A layer built without one gets
``Telemetry.disabled()``, whose calls cost a method call and nothing else.

Usage at a seam is one ``with`` block (or one call)::

    with self.telemetry.store_request("get"):      # span + counter + histogram (+ event)
        ...                                         # an exception sets the outcome and is re-raised

    with telemetry.llm_call("summary") as call:
        ...; call.tokens(prompt, completion)

    return telemetry.call("store", "get", fn, args, kwargs)   # the hot wrappers: no op object

``op.outcome = "…"`` inside the block overrides the outcome (default ``ok``, or the class of the
exception that left the block: ``not_found``, ``conflict``, ``unavailable``, ``denied``,
``invalid``, ``lock_timeout``, ``timeout``, ``error``). Nothing here raises into the caller:
telemetry failing must never fail memory work.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any, TypeVar

from .logs import EventLog, hash_user, install_json_logging, redact
from .metrics import Family, Metrics, Series, make_metrics
from .tracing import Tracer, make_tracer

if TYPE_CHECKING:
    from ..config import ObserveConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Exception class name (anywhere in the MRO) -> outcome label. By name, so this low layer
#: needs no import of the layers whose errors it names.
_OUTCOMES = {
    "ObjectNotFound": "not_found", "FactNotFound": "not_found", "PreconditionFailed": "conflict",
    "StorageUnavailable": "unavailable", "AccessDenied": "denied", "InvalidName": "invalid",
    "MemoryFormatError": "invalid", "LockTimeout": "lock_timeout", "LLMTimeout": "timeout",
    "LLMError": "model_error", "StorageError": "store_error", "TimeoutError": "timeout",
}
#: Outcomes that are normal answers, not failures (a span is not marked as an error for them).
QUIET_OUTCOMES = frozenset({"ok", "not_found", "conflict", "invalid", "hit", "empty", "extracted", "busy",
                            "not_due", "nothing_new", "no_model", "applied", "skipped"})


def classify(exc: BaseException) -> str:
    """The outcome label of an exception (``error`` for anything unknown)."""
    for cls in type(exc).__mro__:
        found = _OUTCOMES.get(cls.__name__)
        if found is not None:
            return found
    return "error"


class Op:
    """One observed piece of work (returned by ``Telemetry``'s context-manager methods)."""

    __slots__ = ("_cm", "_fields", "_span", "_start", "_t", "kind", "label", "outcome", "path")

    def __init__(self, telemetry: Telemetry, kind: str, label: str, fields: dict[str, Any] | None) -> None:
        self._t = telemetry
        self.kind = kind
        self.label = label
        self._fields = fields
        self.outcome: str | None = None
        self.path: str | None = None
        self._cm: Any = None
        self._span: Any = None
        self._start = 0.0

    def __enter__(self) -> Op:
        tracer = self._t.tracer
        if tracer is not None and tracer.enabled():
            try:
                self._cm, self._span = tracer.start(_SPAN_NAMES[self.kind] + self.label,
                                                    self._t.span_attributes(self.kind, self.label, self._fields))
            except Exception as exc:  # a broken tracer must not break memory work
                log.debug("span not started: %s", exc)
                self._cm = None
        self._start = perf_counter()
        return self

    def tokens(self, prompt: int, completion: int) -> None:
        """Tokens a model call spent (light-model calls)."""
        self._t.record_tokens(self.label, prompt, completion)
        if self._span is not None:
            self._span.set_attribute("gen_ai.usage.input_tokens", prompt)
            self._span.set_attribute("gen_ai.usage.output_tokens", completion)

    def __exit__(self, et: Any, ev: BaseException | None, tb: Any) -> None:
        seconds = perf_counter() - self._start
        outcome = self.outcome or (classify(ev) if ev is not None else "ok")
        try:
            self._t.record(self, outcome, seconds)
        except Exception as exc:
            log.debug("telemetry not recorded: %s", exc)
        if self._cm is not None:
            try:
                self._t.tracer.finish(self._cm, self._span, outcome, ev,  # type: ignore[union-attr]
                                      outcome not in QUIET_OUTCOMES)
            except Exception as exc:
                log.debug("span not finished: %s", exc)


class _MetricsOp:
    """The ``Op`` of telemetry with metrics only (no spans, no events): the default with the
    ``metrics`` extra. Why a second class: it holds only what a metric needs (no fields dict, no
    span state) and records through the kind's recorder without dispatching on the kind — COS
    requests, model calls, recalls and builds come through here (the local store's requests and
    the tool calls through ``Telemetry.call``, cheaper still)."""

    __slots__ = ("_record", "_start", "_t", "label", "outcome", "path")

    def __init__(self, telemetry: Telemetry, record: Recorder, label: str) -> None:
        self._t = telemetry
        self._record = record
        self.label = label
        self.outcome: str | None = None
        self.path: str | None = None

    def __enter__(self) -> _MetricsOp:
        self._start = perf_counter()
        return self

    def tokens(self, prompt: int, completion: int) -> None:
        """Tokens a model call spent (light-model calls)."""
        self._t.record_tokens(self.label, prompt, completion)

    def __exit__(self, et: Any, ev: BaseException | None, tb: Any) -> None:
        seconds = perf_counter() - self._start
        outcome = self.outcome or (classify(ev) if ev is not None else "ok")
        try:
            self._record(self.label, self.path, outcome, seconds)
        except Exception as exc:
            log.debug("telemetry not recorded: %s", exc)


#: Records one finished op into the metrics: (label, path, outcome, seconds).
Recorder = Callable[[str, "str | None", str, float], None]


def _recorders(m: Metrics, series: Callable[[str, str], Series]) -> dict[str, Recorder]:
    """One recorder per kind of work, with its families bound (no lookup per op); ``series``
    gives the ``Series`` of a kind recorded per label (store, tool, llm)."""
    timed = m.count_and_time

    def by_label(kind: str) -> Recorder:
        def record(label: str, path: str | None, outcome: str, seconds: float) -> None:
            series(kind, label).record(outcome, seconds)
        return record

    def by_outcome(counter: Family, histogram: Family) -> Recorder:
        def record(label: str, path: str | None, outcome: str, seconds: float) -> None:
            timed(counter, (outcome,), histogram, (outcome,), seconds)
        return record

    def recall(label: str, path: str | None, outcome: str, seconds: float) -> None:
        path = path or "none"
        timed(m.recalls, (path, outcome), m.recall_seconds, (path,), seconds)

    def build(label: str, path: str | None, outcome: str, seconds: float) -> None:
        timed(m.builds, (outcome,), m.build_seconds, (), seconds)

    return {"store": by_label("store"), "tool": by_label("tool"), "llm": by_label("llm"),
            "summary": by_outcome(m.session_summaries, m.session_summary_seconds),
            "extraction": by_outcome(m.auto_extractions, m.auto_extraction_seconds),
            "recall": recall, "build": build}


class _NullOp:
    """The ``Op`` of disabled telemetry: every call does nothing."""

    __slots__ = ()
    outcome = None
    path = None

    def __enter__(self) -> _NullOp:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def __setattr__(self, name: str, value: object) -> None:
        return None

    def tokens(self, prompt: int, completion: int) -> None:
        return None


NULL_OP = _NullOp()
_SPAN_NAMES = {"store": "memory.store.", "tool": "memory.tool.", "llm": "memory.llm.", "summary": "memory.summary",
               "extraction": "memory.extraction", "recall": "memory.recall", "build": "memory.build"}
_EVENTS = {"store": ("store.request", logging.DEBUG), "tool": ("tool.call", logging.INFO),
           "llm": ("llm.call", logging.DEBUG), "summary": ("session.summary", logging.INFO),
           "extraction": ("auto.extraction", logging.INFO), "recall": ("recall", logging.INFO),
           "build": ("agent.build", logging.DEBUG)}


class Telemetry:
    """Metrics (prometheus_client), spans (OpenTelemetry) and events (JSON logs) for memory work.

    ``registry`` / ``tracer_provider``: private ones (tests, apps with several); default a new
    private registry and the global tracer provider. Parts whose package is missing are off."""

    def __init__(self, *, metrics: bool = True, tracing: bool = True, events: bool = False,
                 registry: Any | None = None, tracer_provider: Any | None = None) -> None:
        self.metrics: Metrics | None = make_metrics(registry) if metrics else None
        self.tracer: Tracer | None = make_tracer(tracer_provider) if tracing else None
        self.events: EventLog | None = EventLog() if events else None
        self.active = self.metrics is not None or self.tracer is not None or self.events is not None
        self._series: dict[str, dict[str, Series]] = {"store": {}, "tool": {}, "llm": {}}
        self._recorders = _recorders(self.metrics, self._series_for) if self.metrics is not None else {}
        #: Metrics only: ops are ``_MetricsOp`` (the cheap path) — always, or while no tracer provider
        #: is configured (spans would record nothing).
        self._lean = self.metrics is not None and self.tracer is None and self.events is None
        self._lean_untraced = self.metrics is not None and self.tracer is not None and self.events is None
        self._refreshers: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @classmethod
    def from_config(cls, cfg: ObserveConfig) -> Telemetry:
        json_logs = cfg.log_format == "json"
        if json_logs:
            install_json_logging()
        return cls(metrics=cfg.metrics, tracing=cfg.tracing, events=json_logs)

    @classmethod
    def disabled(cls) -> Telemetry:
        return cls(metrics=False, tracing=False, events=False)

    def __deepcopy__(self, memo: dict[int, object]) -> Telemetry:
        return self  # shared by every agent of the services

    # -- observed work (context managers) ---------------------------------------------------------
    def _untraced(self) -> bool:
        """No tracer provider configured (a span would record nothing): with metrics on and no events,
        the op then records metrics only (a ``_MetricsOp``), as with tracing off."""
        return not self.tracer.enabled()  # type: ignore[union-attr]

    def _series_for(self, kind: str, label: str) -> Series:
        """The ``Series`` of ``label`` for a kind recorded per label (store, tool, llm); made on first use."""
        known = self._series[kind]
        found = known.get(label)
        if found is None:
            m = self.metrics
            assert m is not None
            counter, histogram = {"store": (m.store_requests, m.store_seconds), "tool": (m.tool_calls, m.tool_seconds),
                                  "llm": (m.llm_calls, m.llm_seconds)}[kind]
            found = known.setdefault(label, m.series(counter, histogram, label))
        return found

    def _op(self, kind: str, label: str, fields: dict[str, Any] | None) -> Op | _MetricsOp | _NullOp:
        if self._lean or (self._lean_untraced and self._untraced()):
            return _MetricsOp(self, self._recorders[kind], label)
        return Op(self, kind, label, fields) if self.active else NULL_OP

    def warm_cache(self, cache: str, outcome: str) -> None:
        """A warm view served (``hit``) or read from the store (``miss``): ``memdir/versions.py``."""
        if self.metrics is not None:
            self.metrics.inc(self.metrics.warm_cache, (cache, outcome))

    def version_round_trip(self) -> None:
        """One Redis round trip for place versions (read or announce)."""
        if self.metrics is not None:
            self.metrics.inc(self.metrics.version_round_trips)

    def store_request(self, op: str) -> Op | _MetricsOp | _NullOp:
        """One object-store request (``get``, ``head``, ``put``, ``put_if_absent``, ``put_if_match``,
        ``delete``, ``delete_many``, ``list``)."""
        if self._lean or (self._lean_untraced and self._untraced()):
            return _MetricsOp(self, self._recorders["store"], op)
        return Op(self, "store", op, None) if self.active else NULL_OP

    def tool_call(self, tool: str, place: Any = None) -> Op | _MetricsOp | _NullOp:
        """One memory tool call; ``place`` (a ``Place``) goes to events and spans, user hashed."""
        if self._lean or (self._lean_untraced and self._untraced()):
            return _MetricsOp(self, self._recorders["tool"], tool)
        return self._op("tool", tool, {"place": place} if place is not None else None)

    def call(self, kind: str, label: str, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any],
             place: Any = None) -> T:
        """``fn(*args, **kwargs)`` observed as one ``store`` request or ``tool`` call ``label`` — what
        ``with store_request(label): fn(…)`` / ``with tool_call(label, place): fn(…)`` do.

        Why a call as well as the context managers: the local store's and the tools' wrappers run
        it for every request and tool call. With metrics only (the default) it records straight
        into the label's ``Series``: no op object, no ``__enter__`` / ``__exit__`` — about 1 µs
        where a metrics-only ``with`` block takes about 2 (a loop of empty calls on the bench machine)."""
        if not (self._lean or (self._lean_untraced and self._untraced())):
            if not self.active:
                return fn(*args, **kwargs)
            with self._op(kind, label, {"place": place} if place is not None else None):
                return fn(*args, **kwargs)
        series = self._series[kind].get(label) or self._series_for(kind, label)
        start = perf_counter()
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            try:
                series.record(classify(exc), perf_counter() - start)
            except Exception as failure:
                log.debug("telemetry not recorded: %s", failure)
            raise
        try:
            series.record("ok", perf_counter() - start)
        except Exception as failure:
            log.debug("telemetry not recorded: %s", failure)
        return result

    def llm_call(self, purpose: str) -> Op | _MetricsOp | _NullOp:
        """One light-model call (``summary``, ``extraction``, ``recall``, ``doctor``, ``other``)."""
        return self._op("llm", purpose, None)

    def summary(self, session_id: str) -> Op | _MetricsOp | _NullOp:
        """One session-summary attempt; set ``outcome`` to the result's status."""
        return self._op("summary", "", {"session": session_id})

    def extraction(self, user_id: str, session_id: str) -> Op | _MetricsOp | _NullOp:
        """One auto-memory batch; set ``outcome`` (applied, skipped, model_failed, unusable)."""
        return self._op("extraction", "", {"user": user_id, "session": session_id})

    def recall(self, user_id: str, session_id: str | None) -> Op | _MetricsOp | _NullOp:
        """One recall; set ``path`` and ``outcome`` (hit, empty; error from an exception)."""
        return self._op("recall", "", {"user": user_id, "session": session_id})

    def build(self, user_id: str, agent_type: str, session_id: str | None) -> Op | _MetricsOp | _NullOp:
        """Wiring memory into one agent (prompt, tools, hooks)."""
        return self._op("build", "", {"user": user_id, "agent_type": agent_type, "session": session_id})

    # -- plain events -----------------------------------------------------------------------------
    def lock_acquired(self, backend: str, outcome: str, waited: float) -> None:
        """A place-lock attempt: ``backend`` redis / local, ``outcome`` acquired / timeout / fallback."""
        m = self.metrics
        if m is not None:
            m.count_and_time(m.lock_acquisitions, (backend, outcome), m.lock_wait, (backend,), waited)
        if self.events is not None and (outcome != "acquired" or waited > 0.1):
            self.events.emit("lock.wait", backend=backend, outcome=outcome, duration_ms=round(waited * 1000, 2))

    def lease_lost(self, lock: str) -> None:
        """A lock (``place`` or ``session``) had expired when its holder finished."""
        if self.metrics is not None:
            self.metrics.inc(self.metrics.lock_leases_lost, (lock,))
        if self.events is not None:
            self.events.emit("lock.lease_lost", logging.WARNING, lock=lock, outcome="lost")

    def session_collected(self, outcome: str, messages: int) -> None:
        """One run's messages appended to the session buffer (or failed to)."""
        if self.metrics is not None:
            self.metrics.inc(self.metrics.session_collects, (outcome,))
            if outcome == "ok":
                self.metrics.inc(self.metrics.session_messages, (), messages)

    def embeddings(self, outcome: str, count: int = 1, missing: int | None = None) -> None:
        """Semantic tier work (``embedded`` / ``failed`` / ``split``) and, when given, the memories
        still lacking vectors."""
        if self.metrics is None:
            return
        if count > 0:
            self.metrics.inc(self.metrics.embeddings, (outcome,), count)
        if missing is not None:
            self.metrics.set(self.metrics.embeddings_missing, (), missing)

    def auto_queue(self, depth: int | None = None, events: dict[str, int] | None = None) -> None:
        """The auto-memory queue's depth and new queue events (``{"merged": 2, …}``)."""
        if self.metrics is None:
            return
        if depth is not None:
            self.metrics.set(self.metrics.auto_queue_depth, (), depth)
        for name, count in (events or {}).items():
            if count > 0:
                self.metrics.inc(self.metrics.auto_batches, (name,), count)

    def auto_facts(self, changes: dict[str, int]) -> None:
        """Fact changes of one applied extraction (``{"added": 2, "merged": 1, …}``)."""
        if self.metrics is None:
            return
        for change, count in changes.items():
            if count > 0:
                self.metrics.inc(self.metrics.auto_facts, (change,), count)

    def repeated_tool_call(self, tool: str) -> None:
        """A memory tool call refused as a repeat of the same call earlier in the run (``tool_guard``)."""
        if self.metrics is not None:
            self.metrics.inc(self.metrics.tool_calls, (tool, "repeated"))

    def text_tool_call(self, outcome: str, kind: str) -> None:
        """A tool call the agent model wrote as text: recovered, or left as text (and why)."""
        if self.metrics is not None:
            self.metrics.inc(self.metrics.text_tool_calls, (outcome, kind))

    # -- exposition -------------------------------------------------------------------------------
    def add_refresher(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` before every exposition (it brings gauges and counters read from state up to date)."""
        with self._lock:
            self._refreshers.append(fn)

    def remove_refresher(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if fn in self._refreshers:
                self._refreshers.remove(fn)

    def refresh(self) -> None:
        """Run the refreshers (before an exposition)."""
        with self._lock:
            refreshers = list(self._refreshers)
        for fn in refreshers:
            try:
                fn()
            except Exception as exc:
                log.debug("metrics refresher failed: %s", exc)

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """(body, content type) for ``GET /metrics``; raises RuntimeError when metrics are off."""
        if self.metrics is None:
            raise RuntimeError("metrics are off: install the metrics extra (pip install "
                               "'harness-memory[metrics]') and keep observe.metrics on")
        self.refresh()
        return self.metrics.render(accept)

    # -- recording (called by Op) -----------------------------------------------------------------
    def span_attributes(self, kind: str, label: str, fields: dict[str, Any] | None) -> dict[str, Any]:
        attrs: dict[str, Any] = {"harness_memory.kind": kind}
        if label:
            attrs["harness_memory.op"] = label
        for key, value in _public_fields(fields).items():
            attrs[f"harness_memory.{key}"] = value
        return attrs

    def record_tokens(self, purpose: str, prompt: int, completion: int) -> None:
        m = self.metrics
        if m is not None:
            m.inc(m.llm_tokens, (purpose, "prompt"), prompt)
            m.inc(m.llm_tokens, (purpose, "completion"), completion)

    def record(self, op: Op, outcome: str, seconds: float) -> None:
        kind, label = op.kind, op.label
        if self.metrics is not None:
            self._recorders[kind](label, op.path, outcome, seconds)
        if op._span is not None and op.path:
            op._span.set_attribute("harness_memory.path", op.path)
        if self.events is not None:
            event, level = _EVENTS[kind]
            fields = _public_fields(op._fields)
            if label:
                fields["op"] = label
            if op.path:
                fields["path"] = op.path
            self.events.emit(event, level, outcome=outcome, duration_ms=round(seconds * 1000, 2), **fields)


#: Telemetry that records nothing: the default of every part built without ``MemoryServices``.
DISABLED = Telemetry.disabled()


def _public_fields(fields: dict[str, Any] | None) -> dict[str, Any]:
    """Event / span fields with the user hashed and a place as its redacted directory."""
    if not fields:
        return {}
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if value is None:
            continue
        if key == "user":
            out["user"] = hash_user(value)
        elif key == "place":
            out["place"] = redact(getattr(value, "rel_dir", str(value)))
            user = getattr(value, "user_id", None)
            if user:
                out["user"] = hash_user(user)
        else:
            out[key] = value if isinstance(value, int | float | bool) else str(value)
    return out


__all__ = ["DISABLED", "NULL_OP", "QUIET_OUTCOMES", "Op", "Telemetry", "classify"]
