"""OpenTelemetry spans with the SDK's in-memory exporter: a build and a run make nested spans
(build → store requests; the caller's span → tool call → store requests), under ``run()`` and
``arun()`` alike; a failing store request marks its span as an error."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from harness_memory import build_agent
from harness_memory.config import MemoryConfig
from harness_memory.observe import Telemetry
from harness_memory.services import MemoryServices
from tests.fakellm import RecordedRequest, ScriptedLLM, text, tool_calls

MEMORY = "---\nname: role\ndescription: the user's role\ntype: user\n---\n\nFrontend engineer.\n"


@pytest.fixture
def traced() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def children(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def one(spans: list[ReadableSpan], name: str) -> ReadableSpan:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_build_and_tool_call_spans_nest_under_the_callers_span(
        mode: str, make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM,
        traced: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = traced
    cfg = make_config(backend="cos", redis=True, session={"enabled": False}, auto={"enabled": False},
                      model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"})

    def answer(req: RecordedRequest):  # type: ignore[no-untyped-def]
        if req.messages[-1].get("role") == "tool":
            return text("Saved.")
        return tool_calls([("save_file", {"file_name": "role.md", "content": MEMORY})])

    llm_server.set_handler(answer)
    services = MemoryServices.from_config(cfg, telemetry=Telemetry(tracer_provider=provider))
    tracer = provider.get_tracer("the-app")
    try:
        with tracer.start_as_current_span("app.request"):
            agent = build_agent("u-trace", services=services, session_id="s1")
            if mode == "run":
                agent.run("remember my role")
            else:
                asyncio.run(agent.arun("remember my role"))
    finally:
        services.close()
    spans = list(exporter.get_finished_spans())
    root = one(spans, "app.request")
    build = one(spans, "memory.build")
    tool = one(spans, "memory.tool.save_file")
    assert build.parent is not None and build.parent.span_id == root.context.span_id
    assert tool.parent is not None and tool.parent.span_id == root.context.span_id
    assert all(s.context.trace_id == root.context.trace_id for s in spans)
    # The build read the manifest (and the shared index); the save read, wrote and committed.
    build_ops = {s.attributes["harness_memory.op"] for s in children(spans, build)}
    assert "get" in build_ops and all(s.name.startswith("memory.store.") for s in children(spans, build))
    tool_ops = [s.attributes["harness_memory.op"] for s in children(spans, tool)]
    assert "put" in tool_ops or "put_if_absent" in tool_ops or "put_if_match" in tool_ops
    assert tool.attributes["harness_memory.outcome"] == "ok"
    assert tool.attributes["harness_memory.place"].startswith("users/u-")  # hashed user
    assert not any("u-trace" in str(v) for s in spans for v in (s.attributes or {}).values())


def test_a_failed_store_request_is_an_error_span(make_config: Callable[..., MemoryConfig],
                                                 traced: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, exporter = traced
    cfg = make_config(backend="cos", store={"cos_domain": "127.0.0.1:9/nowhere", "cos_timeout": 1.0})
    services = MemoryServices.from_config(cfg, telemetry=Telemetry(tracer_provider=provider))
    try:
        answer = services.memory_tools("u1").read_file("x.md")
    finally:
        services.close()
    assert answer.startswith("Error: the memory store is unreachable")
    spans = list(exporter.get_finished_spans())
    tool = one(spans, "memory.tool.read_file")
    store = [s for s in children(spans, tool) if s.name == "memory.store.get"]
    assert store and store[0].status.status_code is StatusCode.ERROR
    assert store[0].attributes["harness_memory.outcome"] == "unavailable"
    assert tool.status.status_code is StatusCode.ERROR and tool.attributes["harness_memory.outcome"] == "unavailable"
