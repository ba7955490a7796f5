"""``POST /agents/{agent_type}/runs`` against the scripted model server, on SeaweedFS + Redis.

What is asserted is what the model server RECEIVED: the memory prompt with the user's index,
and the stored session summary put in front of the user's message at entry.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from harness_memory.config import MemoryConfig
from harness_memory.services import services_for
from harness_memory.session.binding import bind_session, session_owned_by
from tests.fakellm import Answer, RecordedRequest, ScriptedLLM, error, text

from .test_server_memory import GOOD, api, error_of

MakeConfig = Callable[..., MemoryConfig]
SUMMARY = "## Current State\nPlanning the Tokyo trip.\n\n## Task\nBook a hotel near Shibuya."
INDEX_LINE = "- [user role](user_role.md) — frontend engineer"


@pytest.fixture
def cfg(make_config: MakeConfig, llm_server: ScriptedLLM) -> MemoryConfig:
    return make_config(backend="cos", redis=True,
                       model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                       recall={"enabled": False}, auto={"enabled": False})


def answer_all(llm: ScriptedLLM, reply: str = "Shibuya it is.") -> None:
    def handler(req: RecordedRequest) -> Answer:
        return text(reply)

    llm.set_handler(handler)


def agent_requests(llm: ScriptedLLM) -> list[RecordedRequest]:
    """The agent's chat requests (system prompt carries the memory prompt), not memory-side calls."""
    return [r for r in llm.chat_requests
            if any("# Persistent Agent Memory" in str(m.get("content")) for m in r.messages)]


def system_text(req: RecordedRequest) -> str:
    return "\n".join(str(m.get("content")) for m in req.messages if m.get("role") in ("system", "developer"))


def store_summary(cfg: MemoryConfig, session_id: str, summary: str = SUMMARY) -> None:
    services_for(cfg).store.put(f"memory/sessions/session-{session_id}.md", summary.encode())


async def test_run_sends_the_memory_prompt_and_creates_the_session(cfg: MemoryConfig, llm_server: ScriptedLLM
                                                                    ) -> None:
    services_for(cfg).user_agent_dir("u1").save("user_role.md", GOOD)
    answer_all(llm_server)
    async with api(cfg, wid="u1") as c:
        r = await c.post("/agents/default/runs", json={"message": "Where should I stay?"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["content"] == "Shibuya it is." and body["status"] == "completed"
    assert body["session_created"] is True and body["summary_injected"] is False
    assert body["user_id"] == "u1" and body["agent_type"] == "default" and body["run_id"]
    assert session_owned_by("u1", body["session_id"])
    (req,) = agent_requests(llm_server)
    assert req.model == "fake-model"
    assert INDEX_LINE in system_text(req)
    assert req.last_user_text() == "Where should I stay?"


async def test_the_session_summary_is_injected_at_entry(cfg: MemoryConfig, llm_server: ScriptedLLM) -> None:
    session_id, _ = bind_session("u1", None, cfg.session.bind_to_user)
    store_summary(cfg, session_id)
    answer_all(llm_server)
    async with api(cfg, wid="u1") as c:
        r = await c.post("/agents/default/runs", json={"message": "Any cheaper option?", "session_id": session_id})
    assert r.status_code == 200, r.text
    assert r.json()["session_id"] == session_id
    assert r.json()["session_created"] is False and r.json()["summary_injected"] is True
    (req,) = agent_requests(llm_server)
    sent = req.last_user_text()
    assert sent == f"[会话历史摘要]\n{SUMMARY}\n\n---\n用户最新消息：Any cheaper option?"
    assert "# Persistent Agent Memory" in system_text(req)


async def test_another_users_session_id_gets_no_summary(cfg: MemoryConfig, llm_server: ScriptedLLM) -> None:
    u1_session, _ = bind_session("u1", None, cfg.session.bind_to_user)
    store_summary(cfg, u1_session)
    answer_all(llm_server)
    async with api(cfg, wid="u2") as c:
        r = await c.post("/agents/default/runs", json={"message": "What was I planning?", "session_id": u1_session})
    assert r.status_code == 200
    assert r.json()["session_id"] != u1_session and r.json()["summary_injected"] is False
    assert "Tokyo" not in json.dumps([q.body for q in llm_server.chat_requests], ensure_ascii=False)


async def test_a_client_chosen_session_id_is_bound_to_the_user(cfg: MemoryConfig, llm_server: ScriptedLLM
                                                               ) -> None:
    bound, _ = bind_session("u1", "chat-42", cfg.session.bind_to_user)
    assert bound.startswith("chat-42-") and bound != "chat-42"
    store_summary(cfg, bound)
    answer_all(llm_server)
    async with api(cfg, wid="u1") as c:
        first = (await c.post("/agents/default/runs", json={"message": "hi", "session_id": "chat-42"})).json()
        assert first["session_id"] == bound and first["session_created"] is False
        assert first["summary_injected"] is True
        again = (await c.post("/agents/default/runs", json={"message": "and now?", "session_id": bound})).json()
        assert again["session_id"] == bound and again["summary_injected"] is True
    assert [r.last_user_text().startswith("[会话历史摘要]") for r in agent_requests(llm_server)] == [True, True]


async def test_streaming_answers_server_sent_events(cfg: MemoryConfig, llm_server: ScriptedLLM) -> None:
    session_id, _ = bind_session("u1", None, cfg.session.bind_to_user)
    store_summary(cfg, session_id)
    answer_all(llm_server, "Streamed answer about Shibuya.")
    async with api(cfg, wid="u1") as c:
        r = await c.post("/agents/default/runs", json={"message": "go", "session_id": session_id, "stream": True})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(r.text)
    assert events[0][0] == "session" and events[0][1]["summary_injected"] is True
    assert events[-1][0] == "done"
    deltas = "".join(data["delta"] for name, data in events if name == "content")
    assert deltas == "Streamed answer about Shibuya." == events[-1][1]["content"]
    (req,) = agent_requests(llm_server)
    assert req.stream and req.last_user_text().startswith("[会话历史摘要]\n")


def parse_sse(raw: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


async def test_no_model_is_503_naming_the_setting(make_config: MakeConfig) -> None:
    cfg = make_config(backend="cos")
    async with api(cfg, wid="u1") as c:
        r = await c.post("/agents/default/runs", json={"message": "hi"})
    assert r.status_code == 503
    body = error_of(r)
    assert body["code"] == "model_not_configured" and "HARNESS_MEMORY_MODEL" in body["detail"]


async def test_a_failing_model_is_502_with_its_message(cfg: MemoryConfig, llm_server: ScriptedLLM) -> None:
    llm_server.set_handler(lambda req: error(500, "the model is on fire"))
    async with api(cfg, wid="u1") as c:
        r = await c.post("/agents/default/runs", json={"message": "hi"})
        assert r.status_code == 502 and "the model is on fire" in error_of(r)["detail"]
        streamed = await c.post("/agents/default/runs", json={"message": "hi", "stream": True})
    events = parse_sse(streamed.text)
    assert events[0][0] == "session" and events[-1][0] == "error"
    assert "the model is on fire" in events[-1][1]["detail"]


async def test_bad_agent_type_and_session_id(cfg: MemoryConfig, llm_server: ScriptedLLM) -> None:
    answer_all(llm_server)
    async with api(cfg, wid="u1") as c:
        r = await c.post("/agents/..bad/runs", json={"message": "hi"})
        assert r.status_code == 422 and error_of(r)["code"] == "invalid_name"
        r = await c.post("/agents/default/runs", json={"message": "hi", "session_id": "../../x"})
        assert r.status_code == 422 and "session id" in error_of(r)["detail"]
    assert llm_server.chat_requests == []
