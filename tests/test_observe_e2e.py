"""Acceptance: a scripted conversation through ``build_agent`` against SeaweedFS + Redis + the
scripted model, then ``GET /metrics`` — every counter equals what the servers saw, and no label
carries a user id or memory text."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from harness_memory import build_agent
from harness_memory.config import MemoryConfig
from harness_memory.server import create_app
from harness_memory.services import MemoryServices
from harness_memory.session.summary import PROMPT_MARKER
from tests.fakellm import Answer, RecordedRequest, ScriptedLLM, text, tool_calls

USER = "alice-7f3"
MEMORY = ("---\nname: user role\ndescription: the user is a frontend engineer\ntype: user\n---\n\n"
          "SECRET-MEMORY-TEXT: works on Vue dashboards.\n")
SUMMARY = "# Chat\n\n## Current State\n- talking\n\n## Task\n- remember the role\n\n## Worklog\n- saved the role\n"
EXTRACTION = {"newFacts": [{"content": "FACT-TEXT frontend engineer", "category": "context", "confidence": 0.95},
                           {"content": "FACT-TEXT likes Vue", "category": "preference", "confidence": 0.9},
                           {"content": "FACT-TEXT maybe likes Go", "category": "goal", "confidence": 0.3}]}
TURNS = ["Remember that I am a frontend engineer.", "What do I work on?", "Which framework do I like?"]
ALLOWED_LABELS = {"op", "outcome", "tool", "purpose", "path", "backend", "lock", "kind", "change", "le", "cache"}


def kind_of(req: RecordedRequest) -> str:
    system = str(req.messages[0].get("content")) if req.messages else ""
    if PROMPT_MARKER in system:
        return "summary"
    if "long-term memory about one user" in system:
        return "extraction"
    if "You select memory files" in system:
        return "recall"
    return "agent"


def handler(req: RecordedRequest) -> Answer:
    kind = kind_of(req)
    if kind == "summary":
        return text(SUMMARY, prompt_tokens=101, completion_tokens=11)
    if kind == "extraction":
        return text(json.dumps(EXTRACTION), prompt_tokens=202, completion_tokens=22)
    if kind == "recall":
        return text('{"files": ["user_role.md"]}', prompt_tokens=303, completion_tokens=33)
    if req.messages[-1].get("role") == "tool":
        return text("Done.")
    if "Remember" in req.last_user_text():
        return tool_calls([("save_file", {"file_name": "user_role.md", "content": MEMORY})])
    return text("You are a frontend engineer.")


def samples(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(body):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: dict[Any, float], name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_after_a_scripted_conversation(make_config: Callable[..., MemoryConfig],
                                               llm_server: ScriptedLLM) -> None:
    llm_server.set_handler(handler)
    cfg = make_config(backend="cos", redis=True,
                      model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      session={"first_threshold_tokens": 1, "update_threshold_tokens": 1, "min_tool_calls": 0},
                      auto={"debounce_seconds": 0.1, "max_wait_seconds": 1, "min_interval_seconds": 0,
                            # separate calls, so each purpose is counted on its own
                            "combine_with_summary": False},
                      recall={"model_above": 0, "confident_margin": None})  # the model picks (its metrics)
    services = MemoryServices.from_config(cfg)
    try:
        for message in TURNS:
            agent = build_agent(USER, services=services, session_id="chat-1", query=message)
            agent.run(message)
        assert services.session_manager().wait_idle(30)
        assert services.auto_memory().flush(30)
        assert services.session_manager().wait_idle(30)

        async def scrape() -> httpx.Response:
            transport = httpx.ASGITransport(app=create_app(services=services))
            async with httpx.AsyncClient(transport=transport, base_url="http://memory.test") as client:
                return await client.get("/metrics")

        resp = asyncio.run(scrape())
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
        found = samples(resp.text)
        seen = [kind_of(r) for r in llm_server.chat_requests]
        n_summary, n_extraction, n_recall = seen.count("summary"), seen.count("extraction"), seen.count("recall")
        assert n_summary >= 1 and n_extraction >= 1 and n_recall == 1  # turn 3: the file was already surfaced

        # Light-model calls by purpose: exactly what the model server saw, with their tokens.
        assert value(found, "harness_memory_llm_calls_total", purpose="summary", outcome="ok") == n_summary
        assert value(found, "harness_memory_llm_tokens_total", purpose="summary", kind="prompt") == 101 * n_summary
        assert value(found, "harness_memory_llm_tokens_total", purpose="summary", kind="completion") == 11 * n_summary
        assert value(found, "harness_memory_llm_calls_total", purpose="extraction", outcome="ok") == n_extraction
        assert value(found, "harness_memory_llm_tokens_total", purpose="extraction",
                     kind="prompt") == 202 * n_extraction
        assert value(found, "harness_memory_llm_calls_total", purpose="recall", outcome="ok") == n_recall
        assert value(found, "harness_memory_llm_tokens_total", purpose="recall", kind="completion") == 33 * n_recall
        # Session memory: one collect per run; every summary the model wrote was stored.
        assert value(found, "harness_memory_session_collects_total", outcome="ok") == len(TURNS)
        assert value(found, "harness_memory_session_summaries_total", outcome="extracted") == n_summary
        assert value(found, "harness_memory_session_summary_seconds_count", outcome="extracted") == n_summary
        # Auto memory: every extraction applied; the two confident facts added once, the weak one dropped each time.
        assert value(found, "harness_memory_auto_extractions_total", outcome="applied") == n_extraction
        assert value(found, "harness_memory_auto_facts_total", change="added") == 2
        assert value(found, "harness_memory_auto_facts_total", change="dropped_low_confidence") == n_extraction
        assert value(found, "harness_memory_auto_batches_total", outcome="processed") == n_extraction
        assert value(found, "harness_memory_auto_queue_depth") == 0
        # Tools, builds, recall.
        assert value(found, "harness_memory_tool_calls_total", tool="save_file", outcome="ok") == 1
        assert value(found, "harness_memory_agent_builds_total", outcome="ok") == len(TURNS)
        # turn 1: nothing saved yet; turn 3: the only memory was surfaced in turn 2 already.
        assert value(found, "harness_memory_recalls_total", path="none", outcome="empty") == 2
        assert value(found, "harness_memory_recalls_total", path="model", outcome="hit") == 1
        # Store requests: the same number the store itself counted, each with its op and outcome.
        store_total = sum(v for (name, _), v in found.items() if name == "harness_memory_store_requests_total")
        assert store_total == services.store.request_count > 0
        assert value(found, "harness_memory_store_requests_total", op="put_if_absent", outcome="ok") >= 1
        assert value(found, "harness_memory_lock_acquisitions_total", backend="redis", outcome="acquired") >= 1

        # No user id, session id or memory text in any label; only the documented label names.
        for (name, labels), _ in found.items():
            assert name.startswith("harness_memory_")
            for label, text_value in labels:
                assert label in ALLOWED_LABELS, (name, label)
                for secret in (USER, "chat-1", "SECRET-MEMORY-TEXT", "FACT-TEXT", "frontend", "user_role"):
                    assert secret not in text_value, (name, label, text_value)
    finally:
        services.close()
