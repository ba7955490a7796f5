"""Prometheus metrics of memory work: one typed set of families per ``Telemetry``, or none.

Why a class with pre-declared families (not metrics created where they are used): every name,
help text and label set is in one place, so an operator reads this file to learn what exists, and
a test can assert that no label can carry a user id or memory text — labels are ``op``,
``outcome``, ``tool``, ``purpose``, ``path``, ``backend``, ``lock``, ``kind``, ``change`` with
finite values chosen by our code, never by a user or a model.

Why a private ``CollectorRegistry`` per ``Telemetry`` (not prometheus_client's global one): two
``MemoryServices`` in one process (tests, two configs) would otherwise collide on registration.
``/metrics`` serves it; a library user exposes it with ``observe.metrics_asgi_app(services)`` or
``observe.register_into(prometheus_client.REGISTRY, services)``.

Why values in plain dicts (not prometheus_client's ``Counter`` / ``Histogram`` objects): every
store request and tool call records a counter and a histogram on the caller's thread. Through
prometheus_client that is ~4–5 µs (a ``labels()`` lookup, a lock per value, a bucket loop, the
exemplar checks) — over 5 % of a local ``read_file``, which records two of them. Here one lock
guards a dict per family: a record is a dict lookup, a ``bisect`` for the bucket and a few
additions, under 1 µs. A custom collector (``_Collector``) turns the dicts into the same families
and samples prometheus_client would expose (``_total`` / ``_created``, cumulative ``_bucket``,
``_count``, ``_sum``) when the registry is scraped.

Multi-process servers (gunicorn / uvicorn workers): set ``PROMETHEUS_MULTIPROC_DIR`` before the
processes start (prometheus_client's own rule); every process then writes its values to files
there and ``exposition()`` answers with the sum over all processes (the queue-depth gauge uses
``livesum``: processes that exited drop out). In that mode the values must be in
prometheus_client's memory-mapped files, so ``MultiProcessMetrics`` records through its objects
(the slower path; a scrape in another process cannot read our dicts).

``prometheus_client`` is an extra (``pip install 'harness-memory[metrics]'``); without it
``make_metrics`` returns None and every recording call is skipped.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator
from typing import Any

#: Latency buckets (seconds) for store, lock and tool work: sub-millisecond local reads up to
#: a store timeout.
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Latency buckets for model-bound work (summaries, extractions, light-model calls).
SLOW_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
PREFIX = "harness_memory_"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

Labels = tuple[str, ...]


class Family:
    """One metric family: its declaration and (single-process mode) its values.

    ``values`` maps a label-value tuple to a float (counter, gauge) or, for a histogram, to a row
    ``[count in bucket 0, …, count in +Inf, sum]`` (counts per bucket, not cumulative: a record
    adds to one cell). ``created`` is when each label set was first seen (the ``_created`` sample).
    Both are only touched under the owning ``Metrics``' lock."""

    __slots__ = ("buckets", "created", "doc", "labelnames", "mode", "name", "typ", "values")

    def __init__(self, typ: str, name: str, doc: str, labelnames: Labels, buckets: tuple[float, ...] = (),
                 mode: str = "") -> None:
        self.typ = typ
        self.name = PREFIX + name
        self.doc = doc
        self.labelnames = labelnames
        self.buckets = buckets
        self.mode = mode  # a gauge's multiprocess_mode
        self.values: dict[Labels, Any] = {}
        self.created: dict[Labels, float] = {}

    def new(self, labels: Labels) -> Any:
        """A fresh value for ``labels`` (caller holds the lock)."""
        value: Any = [0.0] * (len(self.buckets) + 2) if self.typ == "histogram" else 0.0
        self.values[labels] = value
        self.created[labels] = time.time()
        return value


class Metrics:
    """The metric families on one registry, recorded into plain dicts (see the module docstring)."""

    def __init__(self, registry: Any | None = None) -> None:
        from prometheus_client import CollectorRegistry

        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.families: list[Family] = []

        def counter(name: str, doc: str, labels: Labels = ()) -> Family:
            return self._declare(Family("counter", name, doc, labels))

        def histogram(name: str, doc: str, labels: Labels, buckets: tuple[float, ...]) -> Family:
            return self._declare(Family("histogram", name, doc, labels, buckets))

        self.store_requests = counter("store_requests", "Object-store requests by operation and outcome.",
                                      ("op", "outcome"))
        self.store_seconds = histogram("store_request_seconds", "Object-store request latency.", ("op",),
                                       FAST_BUCKETS)
        self.tool_calls = counter("tool_calls", "Memory tool calls by tool and outcome.", ("tool", "outcome"))
        self.tool_seconds = histogram("tool_call_seconds", "Memory tool call latency.", ("tool",), FAST_BUCKETS)
        self.lock_acquisitions = counter("lock_acquisitions", "Place-lock acquisitions by backend and outcome "
                                         "(acquired, timeout, fallback = Redis down, in-process lock used).",
                                         ("backend", "outcome"))
        self.lock_wait = histogram("lock_wait_seconds", "Time spent waiting for a place lock.", ("backend",),
                                   FAST_BUCKETS)
        self.lock_leases_lost = counter("lock_leases_lost", "Locks found expired (taken over or gone) when "
                                        "their holder finished: place locks and session-summary locks.",
                                        ("lock",))
        self.session_collects = counter("session_collects", "Runs appended to the session buffer by outcome.",
                                        ("outcome",))
        self.session_messages = counter("session_messages", "Messages appended to the session buffer.")
        self.session_summaries = counter("session_summaries", "Session summary attempts by outcome (extracted = "
                                         "a summary was made; busy / not_due / nothing_new / no_model = skipped; "
                                         "failed).", ("outcome",))
        self.session_summary_seconds = histogram("session_summary_seconds", "Session summary attempt latency.",
                                                 ("outcome",), SLOW_BUCKETS)
        self.auto_queue_depth = self._declare(Family("gauge", "auto_queue_depth",
                                                     "Auto-memory batches waiting or running.", (), mode="livesum"))
        self.auto_batches = counter("auto_batches", "Auto-memory queue events by outcome (submitted, merged, "
                                    "expedited, dropped, processed, failed, retried, abandoned).", ("outcome",))
        self.auto_extractions = counter("auto_extractions", "Auto-memory extractions by outcome (applied, "
                                        "skipped, model_failed, unusable).", ("outcome",))
        self.auto_extraction_seconds = histogram("auto_extraction_seconds", "Auto-memory extraction latency "
                                                 "(model call and apply).", ("outcome",), SLOW_BUCKETS)
        self.auto_facts = counter("auto_facts", "Auto-memory fact changes (added, merged, removed, trimmed, "
                                  "dropped_low_confidence, dropped_scrubbed).", ("change",))
        self.recalls = counter("recalls", "Recall attempts by path (model, lexical, fallback = the model failed "
                               "and lexical ranking answered, none) and outcome (hit, empty, error).",
                               ("path", "outcome"))
        self.recall_seconds = histogram("recall_seconds", "Recall latency (choose and read).", ("path",),
                                        FAST_BUCKETS)
        self.embeddings = counter("embeddings", "Semantic tier background work by outcome (embedded = memories "
                                  "given vectors, failed = rounds that failed and are retried, split = batches "
                                  "halved after a timeout).", ("outcome",))
        self.embeddings_missing = self._declare(Family("gauge", "embeddings_missing", "Memories this pod last "
                                                       "found without current vectors (summed over the places it "
                                                       "filled; 0 = complete).", (), mode="livesum"))
        self.llm_calls = counter("llm_calls", "Light-model calls by purpose and outcome.", ("purpose", "outcome"))
        self.llm_tokens = counter("llm_tokens", "Light-model tokens by purpose and kind (prompt, completion).",
                                  ("purpose", "kind"))
        self.llm_seconds = histogram("llm_call_seconds", "Light-model call latency.", ("purpose",), SLOW_BUCKETS)
        self.text_tool_calls = counter("text_tool_calls", "Tool calls the agent model wrote as text (model."
                                       "text_tool_calls) by outcome (recovered = run as a real call; left as text: "
                                       "quoted, bad_json, not_offered, bad_arguments; repeated = the run already "
                                       "made it twice, not run again) and kind (fenced, bare, "
                                       "tool_call, tools).", ("outcome", "kind"))
        self.warm_cache = counter("warm_cache", "Warm views served (hit) or read from the store (miss), by cache "
                                  "(manifest, body, shared_body: bodies shared through Redis, state: state files "
                                  "by head); memdir/versions.py.", ("cache", "outcome"))
        self.version_round_trips = counter("version_round_trips", "Redis round trips reading or announcing "
                                           "place versions or sharing bodies (memdir/versions.py).")
        self.builds = counter("agent_builds", "Agents wired with memory (build_agent / inject_memory_tools).",
                              ("outcome",))
        self.build_seconds = histogram("agent_build_seconds", "Time to wire memory into an agent.", (),
                                       FAST_BUCKETS)
        self._lock = threading.Lock()
        self._exposition: Any | None = None
        self._series: list[Series] = []
        self._start()

    def _declare(self, family: Family) -> Family:
        self.families.append(family)
        return family

    def _start(self) -> None:
        """Make the families visible on the registry."""
        for family in self.families:
            if not family.labelnames:  # like prometheus_client: an unlabelled family is 0 from the start
                family.new(())
        self.registry.register(_Collector(self))

    # -- recording (the hot path: called on the caller's thread for every observed piece of work) ----
    def inc(self, family: Family, labels: Labels = (), amount: float = 1.0) -> None:
        """Add ``amount`` to a counter."""
        values = family.values
        with self._lock:
            if labels in values:
                values[labels] += amount
            else:
                family.new(labels)
                values[labels] = amount

    def observe(self, family: Family, labels: Labels, value: float) -> None:
        """One observation into a histogram."""
        with self._lock:
            row = family.values.get(labels)
            if row is None:
                row = family.new(labels)
            row[bisect_left(family.buckets, value)] += 1.0
            row[-1] += value

    def count_and_time(self, counter: Family, counter_labels: Labels, histogram: Family, histogram_labels: Labels,
                       seconds: float) -> None:
        """One finished piece of work: ``counter`` + 1 and ``seconds`` into ``histogram``, one lock."""
        values = counter.values
        with self._lock:
            if counter_labels in values:
                values[counter_labels] += 1.0
            else:
                counter.new(counter_labels)
                values[counter_labels] = 1.0
            row = histogram.values.get(histogram_labels)
            if row is None:
                row = histogram.new(histogram_labels)
            row[bisect_left(histogram.buckets, seconds)] += 1.0
            row[-1] += seconds

    def set(self, family: Family, labels: Labels, value: float) -> None:
        """Set a gauge."""
        with self._lock:
            family.values[labels] = float(value)

    def series(self, counter: Family, histogram: Family, label: str) -> Series:
        """The recorder of one label's work (e.g. store requests ``get``): ``counter`` by label and
        outcome, ``histogram`` by label. Callers keep it and call ``record`` per piece of work."""
        found = Series(self, counter, histogram, label)
        with self._lock:
            self._series.append(found)
        return found

    def snapshot(self) -> list[tuple[Family, dict[Labels, Any], dict[Labels, float]]]:
        """A consistent copy of every family's values (for a scrape): the family's own, plus what
        its ``Series`` hold (summed where both have a label set)."""
        with self._lock:
            out = {id(f): (f, {k: (list(v) if isinstance(v, list) else v) for k, v in f.values.items()},
                           dict(f.created)) for f in self.families}
            for series in self._series:
                series.add_to(out[id(series.counter)][1:], out[id(series.histogram)][1:])
        return list(out.values())

    # -- exposition ----------------------------------------------------------------------------
    def exposition_registry(self) -> Any:
        """The registry to serve: ours, or in multi-process mode one reading every process's files."""
        return self.registry

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """(body, content type) of the text exposition (OpenMetrics when the scraper asks for it)."""
        from prometheus_client import exposition

        encoder, content_type = exposition.choose_encoder(accept or "")
        return encoder(self.exposition_registry()), content_type


class Series:
    """One label of a counter + histogram pair (store requests by ``op``, tool calls by ``tool``),
    recorded on the caller's thread for every request and call — so its own slots hold the
    values (a scrape adds them to the families): ``record`` is one lock, an ``ok`` count, one
    bucket count (the first bucket without a search: most local work fits) and the sum. Fewer
    objects touched per record is what makes it cheap inside a real request, where the caches
    hold the request's data, not ours."""

    __slots__ = ("buckets", "counter", "created", "first", "histogram", "label", "lock", "low", "ok", "ok_created",
                 "others", "others_created", "rest", "total")

    def __init__(self, metrics: Metrics, counter: Family, histogram: Family, label: str) -> None:
        self.lock = metrics._lock
        self.counter, self.histogram, self.label = counter, histogram, label
        self.buckets = histogram.buckets
        self.low = histogram.buckets[0]
        self.ok = 0
        self.ok_created = 0.0
        self.others: dict[str, int] = {}
        self.others_created: dict[str, float] = {}
        self.first = 0  # observations in the first bucket
        self.rest = [0] * (len(self.buckets) + 1)  # per bucket (index 0 unused), +Inf last
        self.total = 0.0
        self.created = time.time()

    def record(self, outcome: str, seconds: float) -> None:
        with self.lock:
            if outcome == "ok":
                if self.ok:
                    self.ok += 1
                else:
                    self.ok = 1
                    self.ok_created = time.time()
            elif outcome in self.others:
                self.others[outcome] += 1
            else:
                self.others[outcome] = 1
                self.others_created[outcome] = time.time()
            if seconds <= self.low:
                self.first += 1
            else:
                self.rest[bisect_left(self.buckets, seconds)] += 1
            self.total += seconds

    def add_to(self, counter: tuple[dict[Labels, Any], dict[Labels, float]],
               histogram: tuple[dict[Labels, Any], dict[Labels, float]]) -> None:
        """Add this series' values to snapshots of its families' (values, created) (lock held).
        Nothing before the first record (prometheus_client shows a label set from its first use)."""
        if not (self.ok or self.others):
            return
        values, created = counter
        outcomes = ([("ok", self.ok, self.ok_created)] if self.ok else []) + [
            (name, count, self.others_created[name]) for name, count in self.others.items()]
        for outcome, count, since in outcomes:
            key = (self.label, outcome)
            values[key] = values.get(key, 0.0) + count
            created[key] = min(created.get(key, since), since)
        values, created = histogram
        key = (self.label,)
        row = values.setdefault(key, [0.0] * (len(self.buckets) + 2))
        row[0] += self.first
        for i in range(1, len(self.rest)):
            row[i] += self.rest[i]
        row[-1] += self.total
        created[key] = min(created.get(key, self.created), self.created)


class _PromSeries:
    """``Series`` through prometheus_client's objects (multi-process mode)."""

    __slots__ = ("_counter", "_histogram", "_label", "_metrics")

    def __init__(self, metrics: MultiProcessMetrics, counter: Family, histogram: Family, label: str) -> None:
        self._metrics, self._counter, self._histogram, self._label = metrics, counter, histogram, label

    def record(self, outcome: str, seconds: float) -> None:
        self._metrics.count_and_time(self._counter, (self._label, outcome), self._histogram, (self._label,), seconds)


class _Collector:
    """Exposes a ``Metrics``' dicts as prometheus_client metric families (what ``Counter`` and
    ``Histogram`` would have exposed: same names, samples, label order and ``_created`` rule)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Any]:
        from prometheus_client.metrics_core import Metric

        return [Metric(f.name, f.doc, f.typ) for f in self.metrics.families]

    def collect(self) -> Iterator[Any]:
        from prometheus_client import metrics as prometheus_metrics
        from prometheus_client.metrics_core import Metric
        from prometheus_client.utils import floatToGoString

        created_samples = getattr(prometheus_metrics, "_use_created", True)
        for family, values, created in self.metrics.snapshot():
            metric = Metric(family.name, family.doc, family.typ)
            name, names = family.name, family.labelnames
            for labels, value in values.items():
                base = dict(zip(names, labels, strict=True))
                if family.typ == "counter":
                    metric.add_sample(name + "_total", base, value)
                elif family.typ == "gauge":
                    metric.add_sample(name, base, value)
                    continue
                else:
                    acc = 0.0
                    for bound, count in zip((*family.buckets, float("inf")), value, strict=False):
                        acc += count
                        metric.add_sample(name + "_bucket", {**base, "le": floatToGoString(bound)}, acc)
                    metric.add_sample(name + "_count", base, acc)
                    metric.add_sample(name + "_sum", base, value[-1])
                if created_samples:
                    metric.add_sample(name + "_created", base, created[labels])
            yield metric


class MultiProcessMetrics(Metrics):
    """``PROMETHEUS_MULTIPROC_DIR`` is set: the same families and calls, recorded through
    prometheus_client's objects (their values live in files every process's scrape reads)."""

    def _start(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self._objects: dict[str, Any] = {}  # by family name (unique in a registry)
        self._children: dict[tuple[str, Labels], Any] = {}
        for f in self.families:
            name = f.name
            if f.typ == "counter":
                obj = Counter(name, f.doc, f.labelnames, registry=self.registry)
            elif f.typ == "histogram":
                obj = Histogram(name, f.doc, f.labelnames, registry=self.registry, buckets=f.buckets)
            else:
                obj = Gauge(name, f.doc, f.labelnames, registry=self.registry, multiprocess_mode=f.mode)
            self._objects[f.name] = obj

    def child(self, family: Family, labels: Labels) -> Any:
        """``family.labels(*labels)``, cached (label lookup takes a lock and a dict in prometheus_client)."""
        key = (family.name, labels)
        found = self._children.get(key)
        if found is None:
            obj = self._objects[family.name]
            found = obj.labels(*labels) if labels else obj
            with self._lock:
                self._children[key] = found
        return found

    def inc(self, family: Family, labels: Labels = (), amount: float = 1.0) -> None:
        self.child(family, labels).inc(amount)

    def observe(self, family: Family, labels: Labels, value: float) -> None:
        self.child(family, labels).observe(value)

    def count_and_time(self, counter: Family, counter_labels: Labels, histogram: Family, histogram_labels: Labels,
                       seconds: float) -> None:
        self.child(counter, counter_labels).inc()
        self.child(histogram, histogram_labels).observe(seconds)

    def set(self, family: Family, labels: Labels, value: float) -> None:
        self.child(family, labels).set(value)

    def series(self, counter: Family, histogram: Family, label: str) -> Series:
        return _PromSeries(self, counter, histogram, label)  # type: ignore[return-value]

    def exposition_registry(self) -> Any:
        with self._lock:
            if self._exposition is None:
                from prometheus_client import CollectorRegistry, multiprocess

                merged = CollectorRegistry()
                multiprocess.MultiProcessCollector(merged)
                self._exposition = merged
            return self._exposition


def make_metrics(registry: Any | None = None) -> Metrics | None:
    """The metric families (multi-process ones when ``PROMETHEUS_MULTIPROC_DIR`` is set), or None
    when prometheus_client is not installed."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return None
    return MultiProcessMetrics(registry) if os.environ.get(MULTIPROC_ENV) else Metrics(registry)


__all__ = ["FAST_BUCKETS", "MULTIPROC_ENV", "SLOW_BUCKETS", "Family", "Metrics", "MultiProcessMetrics", "Series",
           "make_metrics"]
