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

Multi-process servers (gunicorn / uvicorn workers): set ``PROMETHEUS_MULTIPROC_DIR`` before the
processes start (prometheus_client's own rule); every process then writes its values to files
there and ``exposition()`` answers with the sum over all processes (the queue-depth gauge uses
``livesum``: processes that exited drop out).

``prometheus_client`` is an extra (``pip install 'harness-memory[metrics]'``); without it
``make_metrics`` returns None and every recording call is skipped.
"""

from __future__ import annotations

import os
import threading
from typing import Any

#: Latency buckets (seconds) for store, lock and tool work: sub-millisecond local reads up to
#: a store timeout.
FAST_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: Latency buckets for model-bound work (summaries, extractions, light-model calls).
SLOW_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
PREFIX = "harness_memory_"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


class Metrics:
    """The metric families (prometheus_client objects) on one registry."""

    def __init__(self, registry: Any | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Any:
            return Counter(PREFIX + name, doc, labels, registry=r)

        def histogram(name: str, doc: str, labels: tuple[str, ...], buckets: tuple[float, ...]) -> Any:
            return Histogram(PREFIX + name, doc, labels, registry=r, buckets=buckets)

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
        self.auto_queue_depth = Gauge(PREFIX + "auto_queue_depth", "Auto-memory batches waiting or running.",
                                      registry=r, multiprocess_mode="livesum")
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
        self.llm_calls = counter("llm_calls", "Light-model calls by purpose and outcome.", ("purpose", "outcome"))
        self.llm_tokens = counter("llm_tokens", "Light-model tokens by purpose and kind (prompt, completion).",
                                  ("purpose", "kind"))
        self.llm_seconds = histogram("llm_call_seconds", "Light-model call latency.", ("purpose",), SLOW_BUCKETS)
        self.builds = counter("agent_builds", "Agents wired with memory (build_agent / inject_memory_tools).",
                              ("outcome",))
        self.build_seconds = histogram("agent_build_seconds", "Time to wire memory into an agent.", (),
                                       FAST_BUCKETS)
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._guard = threading.Lock()
        self._exposition: Any | None = None

    def child(self, family: Any, *labels: str) -> Any:
        """``family.labels(*labels)``, cached: label lookup takes a lock and a dict in
        prometheus_client; a hot path (every store request) pays it once per label set."""
        key = (id(family), labels)
        found = self._children.get(key)
        if found is None:
            found = family.labels(*labels) if labels else family
            with self._guard:
                self._children[key] = found
        return found

    # -- exposition ----------------------------------------------------------------------------
    def exposition_registry(self) -> Any:
        """The registry to serve: ours, or in multi-process mode one reading every process's files."""
        if not os.environ.get(MULTIPROC_ENV):
            return self.registry
        with self._guard:
            if self._exposition is None:
                from prometheus_client import CollectorRegistry, multiprocess

                merged = CollectorRegistry()
                multiprocess.MultiProcessCollector(merged)
                self._exposition = merged
            return self._exposition

    def render(self, accept: str | None = None) -> tuple[bytes, str]:
        """(body, content type) of the text exposition (OpenMetrics when the scraper asks for it)."""
        from prometheus_client import exposition

        encoder, content_type = exposition.choose_encoder(accept or "")
        return encoder(self.exposition_registry()), content_type


def make_metrics(registry: Any | None = None) -> Metrics | None:
    """The metric families, or None when prometheus_client is not installed."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return None
    return Metrics(registry)


__all__ = ["FAST_BUCKETS", "MULTIPROC_ENV", "SLOW_BUCKETS", "Metrics", "make_metrics"]
