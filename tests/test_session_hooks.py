"""The session post-hook inside real agno Agents (OpenAILike → scripted server): what it buffers,
that the run never waits for the summary, and that a Redis killed mid-conversation changes
nothing for the user."""

from __future__ import annotations

import asyncio
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from agno.agent import Agent
from agno.db.in_memory import InMemoryDb
from agno.models.message import Message
from agno.models.openai.like import OpenAILike
from agno.run.agent import RunOutput

from harness_memory.config import MemoryConfig
from harness_memory.layout import session_summary_key
from harness_memory.services import MemoryServices
from harness_memory.session import (
    SessionMemoryManager,
    attach_session_hook,
    inject_session_summary,
    make_session_post_hook,
    session_manager_for,
)
from harness_memory.session.summary import PROMPT_MARKER
from tests.fakellm import Answer, RecordedRequest, ScriptedLLM, text, tool_calls
from tests.servers import RedisServer

SUMMARY = ("# Weather chat\n\n## Current State\n- answering\n\n## Task\n- weather questions\n\n"
           "## Worklog\n- asked about Paris\n")


def is_summary_request(req: RecordedRequest) -> bool:
    return PROMPT_MARKER in str(req.messages[0].get("content"))


def get_weather(city: str) -> str:
    """Current weather of a city."""
    return f"sunny in {city}"


@pytest.fixture
def services_factory() -> Iterator[Callable[[MemoryConfig], MemoryServices]]:
    made: list[MemoryServices] = []

    def make(cfg: MemoryConfig) -> MemoryServices:
        made.append(MemoryServices.from_config(cfg))
        return made[-1]

    yield make
    for services in made:
        session_manager_for(services).close()
        services.close()


def make_agent(llm: ScriptedLLM, manager: SessionMemoryManager, **kwargs: Any) -> Agent:
    model = OpenAILike(id="fake-model", base_url=llm.base_url, api_key="k")
    return Agent(model=model, telemetry=False, post_hooks=[make_session_post_hook(manager)],
                 instructions="You are a weather bot.", **kwargs)


def answer_chat(reply: str = "ok") -> Callable[[RecordedRequest], Answer]:
    def handler(req: RecordedRequest) -> Answer:
        return text(SUMMARY) if is_summary_request(req) else text(f"{reply}: {req.last_user_text()[:20]}")
    return handler


def session_cfg(make_config: Callable[..., MemoryConfig], llm: ScriptedLLM, **session: Any) -> MemoryConfig:
    return make_config("local", model={"model": "fake-model", "base_url": llm.base_url, "api_key": "k"},
                       session={"first_threshold_tokens": 100000, **session})


@pytest.mark.parametrize("mode", ["run", "arun", "stream"])
def test_hook_buffers_only_this_runs_conversation(
    make_config: Callable[..., MemoryConfig], services_factory: Callable[[MemoryConfig], MemoryServices],
    llm_server: ScriptedLLM, mode: str,
) -> None:
    manager = session_manager_for(services_factory(session_cfg(make_config, llm_server)))
    agent = make_agent(llm_server, manager, tools=[get_weather], db=InMemoryDb(), add_history_to_context=True)
    sid = "hook-" + uuid.uuid4().hex[:6]
    llm_server.script(text("hello!"), tool_calls([("get_weather", {"city": "Paris"})]), text("It is sunny."))

    first, second_msg = "hi", inject_session_summary("weather in Paris?", "# Earlier\n- the user likes maps")
    if mode == "arun":  # one event loop: agno's async OpenAI client is bound to the loop it started on
        async def both() -> None:
            await agent.arun(first, session_id=sid)
            await agent.arun(second_msg, session_id=sid)

        asyncio.run(both())
    else:
        for message in (first, second_msg):
            if mode == "stream":
                list(agent.run(message, session_id=sid, stream=True))
            else:
                agent.run(message, session_id=sid)
    assert manager.flush(10)
    # The second request carried the first run as history and the injected summary...
    second = llm_server.chat_requests[1]
    assert second.roles()[:3] == ["system", "user", "assistant"] and "[会话历史摘要]" in second.last_user_text()
    # ...but the buffer holds each message once, no system prompt, and the user's own words only.
    entries = manager.buffer.entries(sid)
    assert [(e.role, e.tool_calls) for e in entries] == [
        ("user", 0), ("assistant", 0), ("user", 0), ("assistant", 1), ("tool", 0), ("assistant", 0)]
    assert [e.content for e in entries if e.role == "user"] == ["hi", "weather in Paris?"]
    assert 'get_weather({"city": "Paris"})' in entries[3].content
    assert entries[4].name == "get_weather" and entries[4].content == "sunny in Paris"
    assert entries[5].content == "It is sunny."
    assert all("weather bot" not in e.content and "Earlier" not in e.content for e in entries)
    state = manager.buffer.state(sid)
    assert state is not None and state.turns == 2 and state.tool_calls == 1 and state.tokens > 0


def test_hook_skips_injected_temporary_and_repeated_messages(
    make_config: Callable[..., MemoryConfig], services_factory: Callable[[MemoryConfig], MemoryServices],
    llm_server: ScriptedLLM,
) -> None:
    manager = session_manager_for(services_factory(session_cfg(make_config, llm_server)))
    hook = make_session_post_hook(manager)
    messages = [
        Message(role="system", content="prompt"),
        Message(role="user", content="<system-reminder>facts: likes tea</system-reminder>\n\nreal question"),
        Message(role="user", content="<system-reminder>only injected</system-reminder>"),
        Message(role="user", content="retry guidance", temporary=True),
        Message(role="user", content="old", from_history=True),
        Message(role="assistant", content="x" * 10000),
    ]
    output = RunOutput(run_id="r1", session_id="skip", messages=messages)
    hook(run_output=output)
    hook(run_output=output)  # the same run twice (hook registered twice, continue_run): once only
    assert manager.flush(10)
    entries = manager.buffer.entries("skip")
    assert [e.content for e in entries if e.role == "user"] == ["real question"]
    assert len(entries) == 2 and len(entries[1].content) <= manager.cfg.message_max_chars
    assert "chars cut" in entries[1].content


def test_run_never_waits_for_the_summary(
    make_config: Callable[..., MemoryConfig], services_factory: Callable[[MemoryConfig], MemoryServices],
    llm_server: ScriptedLLM,
) -> None:
    cfg = session_cfg(make_config, llm_server, first_threshold_tokens=30)
    services = services_factory(cfg)
    manager = session_manager_for(services)
    gate = threading.Event()

    def handler(req: RecordedRequest) -> Answer:
        if is_summary_request(req):
            gate.wait(30)  # the summary call hangs until the test lets it go
            return text(SUMMARY)
        return text("fine, thanks " * 5)

    llm_server.set_handler(handler)
    agent = make_agent(llm_server, manager)
    key = session_summary_key("bg", cfg.store.key_prefix)
    agent.run("how are you today? " * 5, session_id="bg")
    agent.run("and tomorrow? " * 5, session_id="bg")
    summary_calls = [r for r in llm_server.wait_for_requests(3, timeout=20) if is_summary_request(r)]
    # The runs returned while the summary request is still waiting at the model server.
    assert len(summary_calls) == 1 and not gate.is_set()
    assert services.store.get_or_none(key) is None
    gate.set()
    assert manager.wait_idle(20)
    stored = services.store.get_or_none(key)
    assert stored is not None and b"# Weather chat" in stored.data
    assert "how are you today?" in summary_calls[0].messages[1]["content"]


def test_redis_killed_mid_conversation(
    make_config: Callable[..., MemoryConfig], services_factory: Callable[[MemoryConfig], MemoryServices],
    llm_server: ScriptedLLM, caplog: pytest.LogCaptureFixture,
) -> None:
    llm_server.set_handler(answer_chat())
    with RedisServer() as server:
        cfg = session_cfg(make_config, llm_server, first_threshold_tokens=400)
        cfg.redis.url, cfg.redis.key_prefix, cfg.redis.retry_after_seconds = server.url, "kill:", 0.5
        manager = session_manager_for(services_factory(cfg))
        agent = make_agent(llm_server, manager)
        client = redis.Redis.from_url(server.url)
        with caplog.at_level(logging.INFO, logger="harness_memory"):
            for i in range(2):
                agent.run(f"before {i}", session_id="k")
            assert manager.flush(10) and manager.mode == "redis"
            assert client.llen("kill:session:{k}:messages") == 4
            server.kill()
            outputs = [agent.run(f"during {i}", session_id="k") for i in range(2)]
            outputs.append(asyncio.run(make_agent(llm_server, manager).arun("during 2", session_id="k")))
            assert manager.wait_idle(20)
            assert all(o.content and o.content.startswith("ok:") for o in outputs)  # runs unaffected
            assert manager.buffer.mode == "local"
            assert [e.content for e in manager.buffer.local.entries("k") if e.role == "user"] == [
                "during 0", "during 1", "during 2"]
            server.start()  # back, empty
            threading.Event().wait(0.6)  # past retry_after_seconds (waiting, not measuring)
            agent.run("after", session_id="k")
            assert manager.wait_idle(20) and manager.mode == "redis"
        warnings = [r for r in caplog.records
                    if r.levelno >= logging.WARNING and r.name.startswith("harness_memory")]
        assert len(warnings) == 1 and "Redis unavailable" in warnings[0].getMessage()
        moved = manager.buffer.entries("k")
        assert [e.content for e in moved if e.role == "user"] == ["during 0", "during 1", "during 2", "after"]
        client.close()


def test_hook_never_raises_and_attach_is_idempotent(
    make_config: Callable[..., MemoryConfig], services_factory: Callable[[MemoryConfig], MemoryServices],
    llm_server: ScriptedLLM, caplog: pytest.LogCaptureFixture,
) -> None:
    llm_server.set_handler(answer_chat())
    manager = session_manager_for(services_factory(session_cfg(make_config, llm_server)))
    agent = Agent(model=OpenAILike(id="fake-model", base_url=llm_server.base_url, api_key="k"), telemetry=False)
    attach_session_hook(agent, manager)
    attach_session_hook(agent, manager)
    assert len(agent.post_hooks or []) == 1
    with caplog.at_level(logging.WARNING, logger="harness_memory"):
        out = agent.run("hello", session_id="not/a valid id")
    assert out.content and out.content.startswith("ok:")
    assert any("session memory skipped" in r.getMessage() for r in caplog.records)
    hook = make_session_post_hook(manager)
    hook(run_output=None)  # nothing to do, nothing raised
    hook(run_output=object(), agent=None)
    assert manager.flush(5)
