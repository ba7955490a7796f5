"""build_agent end to end: scripted model server, real agno, real SeaweedFS."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from agno.agent import Agent
from agno.tools import Toolkit
from agno.tools.file import FileTools

from harness_memory import build_agent, inject_memory_tools
from harness_memory.config import MemoryConfig
from harness_memory.services import services_for
from harness_memory.tools import TOOL_NAMES, MemoryTools
from tests.fakellm import ScriptedLLM, text, tool_calls

MEMORY = ("---\nname: user role\ndescription: user-a is a frontend engineer who writes in Chinese\n"
          "type: user\n---\n\nTypeScript and Vue. Reports in Chinese.\n")
INDEX_LINE = "- [user role](user_role.md) — user-a is a frontend engineer who writes in Chinese"


def run_agent(agent: Agent, message: str, mode: str) -> Any:
    if mode == "run":
        return agent.run(message)
    if mode == "arun":
        return asyncio.run(agent.arun(message))
    events = list(agent.run(message, stream=True))
    assert events, "stream produced no events"
    return events


def system_text(request: Any) -> str:
    return "\n".join(str(m.get("content")) for m in request.messages if m.get("role") in ("system", "developer"))


@pytest.fixture
def cfg(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> MemoryConfig:
    return make_config(backend="cos", model={"model": "fake-model", "base_url": llm_server.base_url,
                                             "api_key": "k"},
                       session={"enabled": False}, auto={"enabled": False})


@pytest.mark.parametrize("mode", ["run", "arun", "stream"])
def test_two_conversations_and_isolation(cfg: MemoryConfig, llm_server: ScriptedLLM, mode: str) -> None:
    store = services_for(cfg).store
    # Conversation 1: the model saves a memory.
    llm_server.script(tool_calls([("save_file", {"file_name": "user_role.md", "content": MEMORY})]),
                      text("Noted, I will remember that."))
    run_agent(build_agent("user-a", config=cfg), "I'm a frontend engineer; reports in Chinese please", mode)
    first, second = llm_server.chat_requests[-2:]
    assert set(TOOL_NAMES) <= {t["function"]["name"] for t in first.tools}
    tool_result = [m for m in second.messages if m.get("role") == "tool"]
    assert tool_result and "Created memory user_role.md" in str(tool_result[-1]["content"])
    stored = store.get("memory/users/user-a/agent-memory/default/user_role.md").data.decode()
    assert stored == MEMORY
    index = store.get("memory/users/user-a/agent-memory/default/MEMORY.md").data.decode()
    assert INDEX_LINE in index

    # Conversation 2: a NEW agent sees the index and reads the file.
    llm_server.clear()
    llm_server.script(tool_calls([("read_file", {"file_name": "user_role.md"})]), text("You write Vue."))
    run_agent(build_agent("user-a", config=cfg), "What do I work with?", mode)
    first, second = llm_server.chat_requests
    assert INDEX_LINE in system_text(first)
    assert "# Persistent Agent Memory" in system_text(first)
    tool_msgs = [m for m in second.messages if m.get("role") == "tool"]
    assert "TypeScript and Vue. Reports in Chinese." in str(tool_msgs[-1]["content"])

    # user-b sees nothing of user-a.
    llm_server.clear()
    llm_server.script(tool_calls([("read_file", {"file_name": "user_role.md"})]), text("I don't know."))
    run_agent(build_agent("user-b", config=cfg), "What do I work with?", mode)
    first, second = llm_server.chat_requests
    assert "frontend engineer" not in json.dumps(first.body, ensure_ascii=False)
    assert "](user_role.md)" not in system_text(first) and "(empty — no memories saved yet)" in system_text(first)
    tool_msgs = [m for m in second.messages if m.get("role") == "tool"]
    assert "no memory file named 'user_role.md'" in str(tool_msgs[-1]["content"])
    assert "TypeScript" not in json.dumps(second.body, ensure_ascii=False)


def test_prompt_appended_to_callers_context(cfg: MemoryConfig) -> None:
    agent = build_agent("u1", config=cfg, additional_context="Caller context stays.")
    assert agent.additional_context.startswith("Caller context stays.")
    assert "# Persistent Agent Memory" in agent.additional_context
    assert agent.user_id == "u1" and agent.telemetry is False


def test_agno_file_and_memory_tools_are_replaced(cfg: MemoryConfig, tmp_path: Any) -> None:
    def save_file(file_name: str, content: str) -> str:
        """A clashing tool."""
        return "theirs"

    def update_user_memory(task: str) -> str:
        """agno-style memory tool."""
        return "theirs"

    def keep_me(x: int) -> int:
        """Unrelated tool."""
        return x

    mixed = Toolkit(name="mixed", tools=[keep_me, save_file])
    agent = build_agent("u1", config=cfg, tools=[FileTools(base_dir=tmp_path), save_file, update_user_memory,
                                                 mixed], enable_agentic_memory=True)
    assert isinstance(agent.tools[0], MemoryTools)
    names = [type(t).__name__ if isinstance(t, Toolkit) else t.__name__ for t in agent.tools]
    assert "FileTools" not in names and "save_file" not in names and "update_user_memory" not in names
    assert list(mixed.functions) == ["keep_me"]
    assert agent.enable_agentic_memory is False


def test_learning_machine_user_memory_turned_off(cfg: MemoryConfig) -> None:
    from agno.learn import LearningMachine

    agent = build_agent("u1", config=cfg, learning=LearningMachine(user_profile=True, user_memory=True))
    assert agent.learning.user_profile is False and agent.learning.user_memory is False
    assert build_agent("u1", config=cfg, learning=True).learning is None


def test_warns_when_prompt_would_be_dropped(cfg: MemoryConfig, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        build_agent("u1", config=cfg, system_message="You are terse.")
        build_agent("u1", config=cfg, build_context=False)
    text_ = caplog.text
    assert "system_message" in text_ and "build_context=False" in text_


def test_inject_memory_tools_into_own_agent(cfg: MemoryConfig, llm_server: ScriptedLLM) -> None:
    services_for(cfg).user_agent_dir("u9").save("x.md", MEMORY)
    from harness_memory.agent_model import make_agent_model

    agent = Agent(model=make_agent_model(cfg.model), user_id="u9", additional_context="Mine.", telemetry=False)
    inject_memory_tools(agent, config=cfg)
    assert isinstance(agent.tools[0], MemoryTools)
    llm_server.script(text("hi"))
    agent.run("hello")
    system = system_text(llm_server.chat_requests[0])
    assert "Mine." in system and "- [user role](x.md)" in system


def test_missing_model_is_a_clear_run_error(make_config: Callable[..., MemoryConfig]) -> None:
    cfg = make_config(backend="local")
    agent = build_agent("u1", config=cfg)  # building works without a model
    out = agent.run("hello")
    assert "HARNESS_MEMORY_MODEL" in str(out.content)


def test_deepcopy_shares_memory_clients(cfg: MemoryConfig) -> None:
    agent = build_agent("u1", config=cfg)
    copied = agent.deep_copy()
    own = [t for t in copied.tools if isinstance(t, MemoryTools)]
    assert own and own[0] is agent.tools[0]
    assert own[0].own.store is services_for(cfg).store


SUMMARY_ANSWER = ("# Planning a Vue report\n\n## Current State\n- drafting the report\n\n## Task\n- a Vue report in "
                  "Chinese\n\n## Key Results\n- the user picked ECharts for the charts\n")


def test_build_agent_buffers_summarises_and_injects_the_session_summary(
        make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> None:
    from harness_memory.session import session_manager_for
    from harness_memory.session.summary import PROMPT_MARKER as PROMPT_MARKER_FOR_TESTS

    cfg = make_config(backend="cos", redis=True,
                      model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      session={"first_threshold_tokens": 60}, auto={"enabled": False})

    def answer(request: Any) -> Any:
        if PROMPT_MARKER_FOR_TESTS in json.dumps(request.messages, ensure_ascii=False):
            return text(SUMMARY_ANSWER)
        return text("Sure — ECharts works well for that report. " * 6)

    llm_server.set_handler(answer)
    agent = build_agent("u-s", session_id="sess-1", config=cfg)
    agent.run("Please help me plan a Vue report in Chinese with charts; which chart library?")
    manager = session_manager_for(services_for(cfg))
    assert manager.flush(10) and manager.wait_idle(20)
    summary_calls = [r for r in llm_server.chat_requests if PROMPT_MARKER_FOR_TESTS in json.dumps(r.messages)]
    assert len(summary_calls) == 1
    assert "which chart library" in json.dumps(summary_calls[0].messages, ensure_ascii=False)
    from harness_memory.session.binding import bind_session_id

    bound = bind_session_id("u-s", "sess-1")  # build_agent binds session ids to their user
    assert bound.startswith("sess-1-") and agent.session_id == bound
    stored = services_for(cfg).store.get(f"memory/sessions/session-{bound}.md").data.decode()
    assert "ECharts" in stored

    llm_server.clear()
    llm_server.set_handler(answer)
    build_agent("u-s", session_id="sess-1", config=cfg).run("Now the second chapter")
    user_msgs = [m for m in llm_server.chat_requests[0].messages if m["role"] == "user"]
    assert user_msgs[-1]["content"].startswith("[会话历史摘要]\n")
    assert user_msgs[-1]["content"].endswith("\n\n---\n用户最新消息：Now the second chapter")
    assert "the user picked ECharts" in user_msgs[-1]["content"]

    # Another user naming the same session id gets a session of their own: no summary.
    llm_server.clear()
    llm_server.set_handler(answer)
    build_agent("u-other", session_id="sess-1", config=cfg).run("Now the second chapter")
    other_user = [m for m in llm_server.chat_requests[0].messages if m["role"] == "user"]
    assert other_user[-1]["content"] == "Now the second chapter"


def test_dead_store_does_not_stop_build_or_run(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM,
                                               caplog: pytest.LogCaptureFixture) -> None:
    from tests.servers import SeaweedFS

    private = SeaweedFS(boot_bucket="gone").start()
    from tests.conftest import cos_test_settings

    cfg = make_config(backend="local", model={"model": "fake-model", "base_url": llm_server.base_url},
                      session={"enabled": False}, auto={"enabled": False})
    cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update=cos_test_settings(private, "gone"))})
    services_for(cfg).user_agent_dir("u1").save("a.md", MEMORY)
    private.kill()
    llm_server.script(tool_calls([("save_file", {"file_name": "b.md", "content": MEMORY})]), text("ok"))
    with caplog.at_level(logging.WARNING):
        out = build_agent("u1", config=cfg).run("remember this")
    assert out.content == "ok"
    assert "could not be read" in system_text(llm_server.chat_requests[0])
    tool_msg = [m for m in llm_server.chat_requests[1].messages if m["role"] == "tool"][-1]
    assert "memory store is unreachable" in tool_msg["content"] and "Nothing was saved" in tool_msg["content"]


def test_build_agent_initialises_snapshot_and_recalls_for_the_query(
        make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM, tmp_path: Any) -> None:
    from harness_memory.recall.context import BLOCK_TITLE

    snap = tmp_path / "snaps" / "default"
    snap.mkdir(parents=True)
    (snap / "snapshot.json").write_text('{"updatedAt": "2026-11-01T00:00:00Z"}')
    (snap / "deploy.md").write_text("---\nname: deploy steps\ndescription: how to deploy the service to staging\n"
                                    "type: project\n---\n\nRun `make deploy ENV=staging` then check /healthz.\n")
    (snap / "style.md").write_text("---\nname: code style\ndescription: python code style rules\ntype: feedback\n"
                                   "---\n\nUse ruff; 120 columns.\n")
    cfg = make_config(backend="cos", model={"model": "fake-model", "base_url": llm_server.base_url},
                      agent={"snapshots_dir": str(tmp_path / "snaps")}, recall={"use_model": False},
                      session={"enabled": False}, auto={"enabled": False})
    llm_server.script(text("Use make deploy."))
    build_agent("newbie", config=cfg, query="how do I deploy to staging?").run("how do I deploy to staging?")
    system = system_text(llm_server.chat_requests[0])
    assert "- [deploy steps](deploy.md) — how to deploy the service to staging" in system
    assert BLOCK_TITLE in system
    recalled = system.split(BLOCK_TITLE, 1)[1]
    assert "Run `make deploy ENV=staging`" in recalled
    store = services_for(cfg).store
    assert store.exists("memory/users/newbie/agent-memory/default/deploy.md")
    assert store.exists("memory/users/newbie/agent-memory/default/.snapshot-synced.json")


def test_build_agent_injects_auto_memory_and_captures_runs(make_config: Callable[..., MemoryConfig],
                                                             llm_server: ScriptedLLM) -> None:
    import datetime as dt

    from harness_memory.auto import auto_memory_for

    cfg = make_config(backend="local", model={"model": "fake-model", "base_url": llm_server.base_url},
                      session={"enabled": False}, auto={"debounce_seconds": 0.1, "max_wait_seconds": 2})
    auto = auto_memory_for(services_for(cfg))
    auto.add_fact("u-auto", "Writes reports in Chinese", "preference", 0.95)
    auto.add_fact("u-auto", "Use pnpm, not npm", "correction", 1.0, source_error="used npm")

    def answer(request: Any) -> Any:
        if (request.body or {}).get("response_format") == {"type": "json_object"}:
            return text('{"newFacts": [{"content": "Works on the billing service", "category": "context", '
                        '"confidence": 0.9}]}')
        return text("ok")

    llm_server.set_handler(answer)
    build_agent("u-auto", session_id="s1", config=cfg).run("I work on the billing service")
    system = system_text(llm_server.chat_requests[0])
    assert "Writes reports in Chinese" in system and "(avoid: used npm)" in system
    today = dt.date.today()
    assert f"<current_date>{today.isoformat()}, {today.strftime('%A')}</current_date>" in system
    assert auto.flush(10)
    assert "Works on the billing service" in [f.content for f in auto.list_facts("u-auto")]
    llm_server.clear()
    llm_server.set_handler(answer)
    build_agent("u-other", session_id="s2", config=cfg).run("hello")
    assert "Writes reports in Chinese" not in system_text(llm_server.chat_requests[0])


def test_agents_share_one_model_and_arun_survives_new_event_loops(cfg: MemoryConfig, llm_server: ScriptedLLM) -> None:
    first, second = build_agent("u1", config=cfg), build_agent("u2", config=cfg)
    assert first.model is second.model  # one client and connection pool per process
    llm_server.script(text("one"), text("two"))
    assert asyncio.run(first.arun("hi")).content == "one"
    assert asyncio.run(second.arun("hi")).content == "two"  # a new loop: a new async client, no error
