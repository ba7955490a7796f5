"""Auto-memory capture: what a real agno run is reduced to, injected blocks, correction and
reinforcement signals, and the post-hook under run() and arun()."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import pytest
from agno.agent import Agent
from agno.db.in_memory import InMemoryDb
from agno.models.openai.like import OpenAILike

from harness_memory.auto import (
    AutoMemory,
    capture_messages,
    capture_run,
    detect_correction,
    detect_reinforcement,
    detect_signals,
    strip_injected,
)
from harness_memory.auto.model import QueueKey
from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from tests.fakellm import ScriptedLLM, text, tool_calls

os.environ.setdefault("AGNO_TELEMETRY", "false")

SUMMARY_WRAPPED = "[会话历史摘要]\n用户在做 Vue 项目，之前讨论了路由。\n\n---\n用户最新消息：帮我写一份 Vue 技术报告"


def lookup_weather(city: str) -> str:
    """Look up the weather of a city."""
    return f"TOOL-RESULT sunny in {city}"


@pytest.fixture
def auto(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> Iterator[AutoMemory]:
    cfg = make_config(model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      auto={"debounce_seconds": 3600})
    services = MemoryServices.from_config(cfg)
    memory = services.new_auto_memory(start_worker=False)
    yield memory
    memory.worker.queue.pending.clear()
    memory.close()
    services.close()


def _agent(server: ScriptedLLM, auto: AutoMemory, **kw: object) -> Agent:
    return Agent(model=OpenAILike(id="fake-model", base_url=server.base_url, api_key="k"), telemetry=False,
                 tools=[lookup_weather], post_hooks=[auto.make_post_hook("helper")], db=InMemoryDb(),
                 add_history_to_context=True, user_id="u1", session_id="s1",
                 additional_context="SYSTEM-CONTEXT-MARKER", **kw)  # type: ignore[arg-type]


def _pending(auto: AutoMemory) -> list[tuple[str, str]]:
    batch = auto.worker.queue.pending[QueueKey("u1", "helper", "s1")]
    return [(m.role, m.text) for m in batch.messages]


def test_real_run_keeps_user_inputs_and_final_replies(llm_server: ScriptedLLM, auto: AutoMemory) -> None:
    llm_server.script(tool_calls([("lookup_weather", {"city": "Paris"})]), text("It is sunny in Paris."),
                      text("Cloudy in Lyon."), text("You're welcome."))
    agent = _agent(llm_server, auto)
    agent.run("What's the weather in Paris?")
    assert _pending(auto) == [("user", "What's the weather in Paris?"), ("assistant", "It is sunny in Paris.")]
    agent.run("And in Lyon?")  # history on: the first turn comes back from_history and must not be taken twice
    assert _pending(auto) == [("user", "What's the weather in Paris?"), ("assistant", "It is sunny in Paris."),
                              ("user", "And in Lyon?"), ("assistant", "Cloudy in Lyon.")]
    agent.run("thanks")  # an acknowledgement: nothing to learn, nothing queued
    assert len(_pending(auto)) == 4
    everything = " ".join(t for _, t in _pending(auto))
    assert "TOOL-RESULT" not in everything and "SYSTEM-CONTEXT-MARKER" not in everything
    assert "lookup_weather" not in everything
    # the run finished with the update only queued: no extraction request reached the model server
    assert all(r.body.get("response_format") is None for r in llm_server.chat_requests)


async def test_post_hook_works_under_arun(llm_server: ScriptedLLM, auto: AutoMemory) -> None:
    llm_server.script(text("Bonjour!"))
    await _agent(llm_server, auto).arun("Say hello in French. I prefer French answers.")
    assert _pending(auto) == [("user", "Say hello in French. I prefer French answers."), ("assistant", "Bonjour!")]


def test_summary_wrapper_in_a_real_run_is_stripped(llm_server: ScriptedLLM, auto: AutoMemory) -> None:
    llm_server.script(text("好的，报告如下。"))
    _agent(llm_server, auto).run(SUMMARY_WRAPPED)
    assert _pending(auto)[0] == ("user", "帮我写一份 Vue 技术报告")
    sent = llm_server.chat_requests[-1].last_user_text()
    assert "[会话历史摘要]" in sent  # the model did see the summary; only capture drops it


def test_hook_without_user_id_or_with_junk_never_raises(auto: AutoMemory) -> None:
    hook = auto.make_post_hook("helper")
    hook(run_output=None)
    hook(run_output=object())
    hook(run_output=type("R", (), {"messages": [object(), {"role": "user", "content": 5}], "user_id": "u1",
                                   "session_id": "s1", "run_id": "r"})())
    hook(run_output=type("R", (), {"messages": [{"role": "user", "content": "hi"}], "user_id": "../evil",
                                   "session_id": "s1", "run_id": "r"})())
    assert auto.worker.pending_count() == 0


def test_errored_runs_are_not_captured(auto: AutoMemory) -> None:
    hook = auto.make_post_hook("helper")
    out = type("R", (), {"messages": [{"role": "user", "content": "I use Vim"}], "user_id": "u1",
                         "session_id": "s1", "run_id": "r", "status": "error"})()
    hook(run_output=out)
    assert auto.worker.pending_count() == 0


@pytest.mark.parametrize("raw, kept", [
    (SUMMARY_WRAPPED, "帮我写一份 Vue 技术报告"),
    ("<system-reminder>\n<memory>facts</memory>\n<current_date>2026-01-01</current_date>\n</system-reminder>\n"
     "Write the report", "Write the report"),
    ("Summarise these <uploaded_files>\n- /mnt/user-data/uploads/a.pdf\n</uploaded_files> please",
     "Summarise these  please"),
    ("<MEMORY kind='auto'>x</MEMORY>keep me", "keep me"),
    ("plain <b>text</b> stays", "plain <b>text</b> stays"),
])
def test_strip_injected(raw: str, kept: str) -> None:
    assert strip_injected(raw) == kept


def test_capture_messages_filters_roles_and_parts() -> None:
    msgs = [
        {"role": "system", "content": "you are helpful"},
        {"role": "developer", "content": "dev"},
        {"role": "user", "content": [{"type": "text", "text": "part one"}, {"type": "image_url", "image_url": {}},
                                     {"type": "text", "text": "part two"}]},
        {"role": "assistant", "content": "calling", "tool_calls": [{"id": "1"}]},
        {"role": "tool", "content": "result"},
        {"role": "user", "content": "retry guidance", "temporary": True},
        {"role": "assistant", "content": "final"},
        {"role": "assistant", "content": "x" * 9000},
        # a user message that was only injected blocks, and the reply to it: both left out
        {"role": "user", "content": "<system-reminder>only injected</system-reminder>"},
        {"role": "assistant", "content": "a reply about the injected block"},
    ]
    out = capture_messages(msgs, "run-1")
    assert [(m.role, m.text[:20]) for m in out] == [("user", "part one\npart two"), ("assistant", "final"),
                                                    ("assistant", "x" * 20)]
    assert out[-1].text.endswith("…[cut]") and len(out[-1].text) < 8100
    again = capture_messages(msgs, "run-1")
    assert [m.key for m in out] == [m.key for m in again]  # stable keys for the watermark
    assert {m.key for m in capture_messages(msgs, "run-2")}.isdisjoint(m.key for m in out)


def test_capture_run_reads_run_output() -> None:
    out = type("R", (), {"messages": [{"role": "user", "content": "hi"}], "run_id": "r1"})()
    assert [m.text for m in capture_run(out)] == ["hi"]
    assert capture_run(type("R", (), {"messages": None})()) == []


@pytest.mark.parametrize("message", [
    "不对，报告要用中文写", "错了，是 Vue 3 不是 Vue 2", "别用 npm，用 pnpm", "不要用 var，改用 const",
    "不是 React 而是 Vue", "你搞错了", "you got that wrong", "That's not right, I asked for Python",
    "that's wrong", "Don't use tabs, use spaces", "Actually, I meant the staging server",
    "No, actually it's TypeScript", "use yarn instead", "This is not what I asked for",
])
def test_corrections_detected(message: str) -> None:
    assert detect_correction(message)


@pytest.mark.parametrize("message", [
    "对，就这样", "没错，就是这样写", "完美！", "Exactly.", "perfect, keep doing that", "That's right",
    "looks good to me", "很好，继续保持",
])
def test_reinforcements_detected(message: str) -> None:
    assert detect_reinforcement(message)
    assert not detect_correction(message)


@pytest.mark.parametrize("message", [
    "Write a report about Vue", "帮我写一份技术报告", "What is the capital of France?", "It's not perfect",
    "这个方案不太好", "I use TypeScript at work",
])
def test_neutral_messages_have_no_signal(message: str) -> None:
    sig = detect_signals(capture_messages([{"role": "user", "content": message}]))
    assert not sig.correction and not sig.reinforcement


def test_signals_only_from_user_and_correction_wins() -> None:
    msgs = capture_messages([
        {"role": "assistant", "content": "That's not right, sorry"},  # the assistant's words do not count
        {"role": "user", "content": "不对，别用 npm 用 pnpm，perfect otherwise"},
        {"role": "user", "content": "exactly"},
    ])
    sig = detect_signals(msgs)
    assert sig.correction and sig.reinforcement
    assert sig.correction_hints == ("不对，别用 npm 用 pnpm，perfect otherwise",)
    only_assistant = detect_signals(capture_messages([{"role": "assistant", "content": "that's wrong"}]))
    assert not only_assistant.correction
