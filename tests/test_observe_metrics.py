"""The dict-backed metrics (``observe/metrics.py``): they expose exactly what prometheus_client's own
objects expose for the same recordings, lose no count under concurrent threads, and spans start
once an app sets its global tracer provider after memory was built."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from harness_memory.observe import Telemetry
from harness_memory.observe.metrics import FAST_BUCKETS, Metrics, MultiProcessMetrics
from tests.helpers import ROOT


def record_the_same(m: Metrics) -> None:
    """One of every kind of recording, with values on bucket bounds, between them and past the last;
    store requests and tool calls through their ``Series`` (as ``Telemetry`` does) and directly."""
    get, read = m.series(m.store_requests, m.store_seconds, "get"), m.series(m.tool_calls, m.tool_seconds, "read_file")
    for seconds in (0.0001, 0.0005, 0.003, 0.7, 45.0):
        get.record("ok", seconds)
    get.record("not_found", 0.002)
    m.count_and_time(m.store_requests, ("get", "ok"), m.store_seconds, ("get",), 0.004)  # summed with the series
    m.count_and_time(m.store_requests, ("put", "conflict"), m.store_seconds, ("put",), 0.02)
    read.record("ok", 0.00017)
    read.record("not_found", 0.0009)
    m.series(m.tool_calls, m.tool_seconds, "list_files")  # made, never recorded: exposes nothing of its own
    m.count_and_time(m.builds, ("ok",), m.build_seconds, (), 0.004)
    m.count_and_time(m.session_summaries, ("extracted",), m.session_summary_seconds, ("extracted",), 1.5)
    m.observe(m.lock_wait, ("redis",), 0.01)
    m.inc(m.lock_acquisitions, ("redis", "acquired"))
    m.inc(m.llm_tokens, ("summary", "prompt"), 101)
    m.inc(m.llm_tokens, ("summary", "prompt"), 7)
    m.inc(m.session_messages, (), 5)
    m.set(m.auto_queue_depth, (), 3)
    m.set(m.auto_queue_depth, (), 2)


def exposed(body: bytes) -> list[tuple[str, list[str]]]:
    """Each family's header lines and its sample lines (sorted: a scrape's order carries no meaning),
    ``_created`` values masked (they are times)."""
    families: list[tuple[str, list[str]]] = []
    for line in re.sub(r"(_created(\{[^}]*\})?) \S+", r"\1 T", body.decode()).splitlines():
        if line.startswith("# HELP") or not families:
            families.append((line, []))
        else:
            families[-1][1].append(line)
    return [(head, sorted(lines)) for head, lines in families]


def test_exposition_is_what_prometheus_client_objects_expose() -> None:
    ours = Metrics(CollectorRegistry(auto_describe=True))
    theirs = MultiProcessMetrics(CollectorRegistry(auto_describe=True))  # prometheus_client objects, in memory here
    assert type(ours) is Metrics and ours.registry is ours.exposition_registry()
    record_the_same(ours)
    record_the_same(theirs)
    for encode in (generate_latest, generate_openmetrics):
        assert exposed(encode(ours.registry)) == exposed(encode(theirs.registry))
    assert ours.registry.get_sample_value("harness_memory_store_request_seconds_bucket",
                                          {"op": "get", "le": str(FAST_BUCKETS[0])}) == 2  # 0.0001 and 0.0005 (≤)
    assert ours.registry.get_sample_value("harness_memory_store_request_seconds_count", {"op": "get"}) == 7
    assert ours.registry.get_sample_value("harness_memory_store_requests_total", {"op": "get", "outcome": "ok"}) == 6
    assert ours.registry.get_sample_value("harness_memory_llm_tokens_total",
                                          {"purpose": "summary", "kind": "prompt"}) == 108


def test_no_count_is_lost_under_concurrent_threads() -> None:
    """Threads in step on the same label sets: each set's series is made by one of them and counted
    by all, none lost and none counted twice when the scrape adds the series up (the lock guards the
    increments where ``+=`` is not atomic: free-threaded builds, or a call inside the update)."""
    t = Telemetry(tracing=False)
    assert t.metrics is not None
    threads, per_thread = 8, 2000
    start = threading.Barrier(threads)

    def work() -> None:
        start.wait()
        for i in range(per_thread):
            with t.store_request(f"op{i}"):
                pass
            t.lock_acquired("local", "acquired", 0.0)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter allows
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        sys.setswitchinterval(old)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in t.metrics.registry.collect() for s in family.samples}
    for i in range(per_thread):
        assert samples[("harness_memory_store_requests_total", (("op", f"op{i}"), ("outcome", "ok")))] == threads
        assert samples[("harness_memory_store_request_seconds_count", (("op", f"op{i}"),))] == threads
    assert samples[("harness_memory_lock_acquisitions_total", (("backend", "local"), ("outcome", "acquired")))] \
        == threads * per_thread


def test_spans_start_when_the_app_sets_its_tracer_provider_later() -> None:
    """The global provider's cheap 'not set' check must not keep memory out of traces once it is set."""
    script = textwrap.dedent("""
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
        from harness_memory.observe import Telemetry

        t = Telemetry()
        with t.store_request("get"):
            pass
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        with t.store_request("put"):
            pass
        gets = t.metrics.registry.get_sample_value("harness_memory_store_requests_total",
                                                   {"op": "get", "outcome": "ok"})
        print([s.name for s in exporter.get_finished_spans()], gets)
    """)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "PROMETHEUS_"))}
    result = subprocess.run([sys.executable, "-c", script], env={**env, "PYTHONPATH": str(ROOT)},
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "['memory.store.put'] 1.0"
