"""The two-day story, end to end with real agno Agents, the scripted model server and both
backends: day 1 a conversation is learned after the (shortened) debounce; day 2 a new agent for
the same user gets the facts and today's date in its system prompt; another user gets none."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import time
from collections.abc import Callable

import pytest
from agno.agent import Agent
from agno.db.in_memory import InMemoryDb
from agno.models.openai.like import OpenAILike

from harness_memory.auto import Category, attach_auto_memory, auto_memory_for
from harness_memory.config import MemoryConfig
from harness_memory.memdir import parse_memory
from harness_memory.services import MemoryServices
from harness_memory.tokens import count_tokens
from tests.fakellm import Answer, RecordedRequest, ScriptedLLM, text, tool_calls

os.environ.setdefault("AGNO_TELEMETRY", "false")

EXTRACTION = {
    "user": {"workContext": {"summary": "Frontend engineer working in TypeScript.", "shouldUpdate": True},
             "personalContext": {"summary": "Wants reports written in Chinese.", "shouldUpdate": True}},
    "newFacts": [
        {"content": "Is a frontend engineer", "category": "context", "confidence": 0.95},
        {"content": "Works in TypeScript", "category": "knowledge", "confidence": 0.9},
        {"content": "Wants reports written in Chinese", "category": "preference", "confidence": 1.5},
        {"content": "Might try Svelte some day", "category": "goal", "confidence": 0.5},
    ],
    "factsToRemove": ["fact-00000000"],
}
PREFIX = "memory/users/u1/projects/default/memory/"


def team_calendar(group: str) -> str:
    """Look up a group's calendar."""
    return f"CALENDAR-TOOL-RESULT for {group}: release on Friday"


def is_extraction(req: RecordedRequest) -> bool:
    return (req.body or {}).get("response_format") == {"type": "json_object"}


def wait_until(cond: Callable[[], bool], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def agent_for(server: ScriptedLLM, pod: MemoryServices, user: str, session: str) -> Agent:
    """What build_agent does: the caller's agent, then the block and the hook attached."""
    agent = Agent(model=OpenAILike(id="fake-model", base_url=server.base_url, api_key="k"), telemetry=False,
                  user_id=user, session_id=session, db=InMemoryDb(), add_history_to_context=True,
                  tools=[team_calendar], instructions="AGENT-INSTRUCTIONS-MARKER",
                  additional_context="CALLER-CONTEXT")
    attach_auto_memory(agent, pod, user, "default")
    attach_auto_memory(agent, pod, user, "default")  # idempotent: one block, one hook
    assert len(agent.post_hooks or []) == 1
    assert str(agent.additional_context).count("<system-reminder>") <= 1
    assert str(agent.additional_context).startswith("CALLER-CONTEXT")
    return agent


@pytest.mark.parametrize("backend, redis", [("local", False), ("cos", True)], ids=["local", "cos+redis"])
def test_two_days(backend: str, redis: bool, make_config: Callable[..., MemoryConfig],
                  llm_server: ScriptedLLM) -> None:
    cfg = make_config(backend=backend, redis=redis,
                      model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      auto={"debounce_seconds": 0.2, "max_wait_seconds": 5, "max_injection_tokens": 2000})

    def answer(req: RecordedRequest) -> Answer:
        if is_extraction(req):
            return text("好的，分析结果如下：\n```json\n" + json.dumps(EXTRACTION) + "\n```", 900, 120)
        if req.messages[-1]["role"] == "user" and "calendar" in req.last_user_text():
            return tool_calls([("team_calendar", {"group": "web"})])
        return text("Noted — TypeScript, reports in Chinese.")

    llm_server.set_handler(answer)

    # -- day 1 ------------------------------------------------------------------------------------
    pod1 = MemoryServices.from_config(cfg)
    auto1 = auto_memory_for(pod1)
    assert auto_memory_for(pod1) is auto1
    agent = agent_for(llm_server, pod1, "u1", "day1")
    agent.run("I'm a frontend engineer, I work in TypeScript, and please write reports in Chinese.")
    agent.run("When is the web team's release? Check the calendar.")
    assert wait_until(lambda: any(is_extraction(r) for r in llm_server.chat_requests))
    assert wait_until(lambda: len(auto1.results) == 1)  # the worker thread fired after the debounce
    assert any(m["role"] == "tool" and "CALENDAR-TOOL-RESULT" in m["content"]  # the tool really ran
               for r in llm_server.chat_requests for m in r.messages)
    [extraction] = [r for r in llm_server.chat_requests if is_extraction(r)]
    prompt = extraction.messages[-1]["content"]
    assert "User: I'm a frontend engineer, I work in TypeScript, and please write reports in Chinese." in prompt
    assert "User: When is the web team's release? Check the calendar." in prompt
    assert "Assistant: Noted — TypeScript, reports in Chinese." in prompt
    for noise in ("CALENDAR-TOOL-RESULT", "team_calendar", "AGENT-INSTRUCTIONS-MARKER"):
        assert noise not in prompt
    assert all(m["role"] in ("system", "user") for m in extraction.messages)

    store = pod1.store
    files = sorted(i.key.removeprefix(PREFIX) for i in store.list(PREFIX))
    fact_files = [f for f in files if f.startswith("fact-")]
    assert {"MEMORY.md", ".manifest.json", "profile.md", ".auto-state.json"} <= set(files)
    stored = {m.description: m for m in (parse_memory(store.get(PREFIX + f).data.decode()) for f in fact_files)}
    assert set(stored) == {"Is a frontend engineer", "Works in TypeScript", "Wants reports written in Chinese"}
    assert stored["Wants reports written in Chinese"].extra["confidence"] == 1.0  # 1.5 clamped
    assert stored["Is a frontend engineer"].extra["category"] == "context"
    assert all(m.extra["source"] == "auto:day1" for m in stored.values())
    index = store.get(PREFIX + "MEMORY.md").data.decode()
    assert all(f in index for f in fact_files)
    auto1.close()
    pod1.close()

    # -- day 2: another pod, a new agent for the same user, and another user --------------------------
    pod2 = MemoryServices.from_config(cfg)
    auto2 = auto_memory_for(pod2)
    before = len(llm_server.chat_requests)
    llm_server.set_handler(lambda req: text("好的，这是 Vue 技术报告。") if not is_extraction(req)
                           else text('{"newFacts": []}'))
    agent_for(llm_server, pod2, "u1", "day2").run("写一份 Vue 相关技术报告")
    [day2] = llm_server.chat_requests[before:]
    system = day2.messages[0]
    assert system["role"] == "system"
    block = re.search(r"<system-reminder>.*?</system-reminder>", system["content"], re.DOTALL)
    assert block is not None
    today = dt.date.today()
    assert f"<current_date>{today.isoformat()}, {today.strftime('%A')}</current_date>" in block.group(0)
    for fact in ("Is a frontend engineer", "Works in TypeScript", "Wants reports written in Chinese",
                 "Work context: Frontend engineer working in TypeScript."):
        assert fact in block.group(0)
    assert "Svelte" not in system["content"]
    assert count_tokens(block.group(0)) <= cfg.auto.max_injection_tokens
    assert day2.messages[-1] == {"role": "user", "content": "写一份 Vue 相关技术报告"}  # not in the user turn

    before = len(llm_server.chat_requests)
    agent_for(llm_server, pod2, "u2", "other").run("写一份 Vue 相关技术报告")
    other_system = llm_server.chat_requests[before].messages[0]["content"]
    assert "<system-reminder>" not in other_system
    for leaked in ("frontend engineer", "TypeScript", "Chinese"):
        assert leaked not in other_system

    # the day-2 update sends the day-2 conversation, never the injected block
    assert auto2.flush(10)
    day2_extractions = [r for r in llm_server.chat_requests[before - 1 :] if is_extraction(r)]
    assert day2_extractions
    for req in day2_extractions:
        sent = req.messages[-1]["content"]
        assert "<system-reminder>" not in sent and "写一份 Vue 相关技术报告" in sent
    facts = auto2.list_facts("u1")
    assert len(facts) == 3 and facts[0].category is Category.PREFERENCE  # nothing lost or duplicated
    auto2.close()
    pod2.close()


def test_two_conversations_correction_paraphrase_and_expiry(make_config: Callable[..., MemoryConfig],
                                                            llm_server: ScriptedLLM) -> None:
    """Issue #14's acceptance story through ``build_agent``: day 1 a time-bound fact, a correction and
    a paraphrased restatement of it; day 2, a new session: the correction shown with "(avoid: …)",
    the trip that has passed neither shown nor kept. The model's merge of the restatement into the
    correction is refused whole (issue #31: a correction is never merged away), so the correction
    keeps its own words and what it says to avoid."""
    from harness_memory import build_agent
    from harness_memory.auto.prompt import SYSTEM_PROMPT as AUTO_PROMPT
    from harness_memory.services import services_for

    cfg = make_config(backend="cos", redis=True, auto={"debounce_seconds": 3600},
                      model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"})
    day = [dt.date(2026, 3, 2)]  # a Monday
    auto = services_for(cfg).auto_memory(today=lambda: day[0])
    replies = {"How do I add lodash?": "Run `npm install lodash`.", "不对": "好的，改用 pnpm：`pnpm add lodash`。"}

    def model(req: RecordedRequest) -> Answer:
        if not str(req.messages[0]["content"]).startswith(AUTO_PROMPT[:60]):  # an agent turn
            last = req.last_user_text()
            return text(next((r for k, r in replies.items() if k in last), "Sure."))
        prompt = str(req.messages[-1]["content"])
        today = dt.date.fromisoformat(re.search(r"Today is (\d{4}-\d{2}-\d{2})", prompt).group(1))  # type: ignore[union-attr]
        convo = prompt.split("<conversation>")[1].split("</conversation>")[0]
        memory = json.loads(prompt.split("<current_memory>")[1].split("</current_memory>")[0])
        facts: list[dict[str, object]] = []
        if "Tokyo" in convo:
            facts.append({"content": "Flies to Tokyo for a conference", "category": "context", "confidence": 0.9,
                          "expires": (today + dt.timedelta(days=6)).isoformat(),
                          "evidence": "I'm flying to Tokyo next week"})
        if "别用 npm" in convo:
            facts.append({"content": "Use pnpm, not npm, to install dependencies", "category": "correction",
                          "confidence": 0.95, "sourceError": "Ran npm install",
                          "evidence": "别用 npm，用 pnpm 安装依赖"})
        if "every install goes through pnpm" in convo:  # a competent model sees the stored fact and merges
            [pnpm] = [f["id"] for f in memory["facts"] if "pnpm" in f["content"]]
            facts.append({"content": "Always install dependencies with pnpm, never npm", "category": "preference",
                          "confidence": 0.9, "evidence": "every install goes through pnpm", "merges": [pnpm]})
        return text(json.dumps({"newFacts": facts}, ensure_ascii=False))

    llm_server.set_handler(model)
    for message in ("I'm flying to Tokyo next week for a conference.", "How do I add lodash?",
                    "不对，别用 npm，用 pnpm 安装依赖。"):
        build_agent("u1", session_id="day1", config=cfg, model=OpenAILike(id="fake-model", base_url=llm_server.base_url,
                                                                          api_key="k")).run(message)
    assert auto.flush(10)
    build_agent("u1", session_id="day1", config=cfg).run("Just so it sticks: every install goes through pnpm, always.")
    assert auto.flush(10)
    facts = {f.content: f for f in auto.list_facts("u1")}
    assert set(facts) == {"Flies to Tokyo for a conference", "Use pnpm, not npm, to install dependencies"}
    kept = facts["Use pnpm, not npm, to install dependencies"]
    assert kept.category is Category.CORRECTION and kept.source_error == "Ran npm install"
    assert auto.rejections["merge_correction"] == 1
    assert facts["Flies to Tokyo for a conference"].expires == "2026-03-08"

    # -- day 2: a new session, eighteen days later ------------------------------------------------------
    day[0] = dt.date(2026, 3, 20)
    before = len(llm_server.chat_requests)
    build_agent("u1", session_id="day2", config=cfg).run("Set up the new project for me.")
    system = str(llm_server.chat_requests[before].messages[0]["content"])
    block = re.search(r"<system-reminder>.*?</system-reminder>", system, re.DOTALL)
    assert block is not None
    lines = [line for line in block.group(0).splitlines() if "pnpm" in line]
    assert lines == ["- Use pnpm, not npm, to install dependencies (avoid: Ran npm install)"]
    assert "Tokyo" not in system and "<current_date>2026-03-20, Friday</current_date>" in block.group(0)
    assert auto.flush(10)  # the day-2 update reviews the place: the trip is gone from the store too
    assert set(f.content for f in auto.list_facts("u1")) == {"Use pnpm, not npm, to install dependencies"}
    tokyo = facts["Flies to Tokyo for a conference"]
    assert not auto.places.user_auto_dir("u1").store.exists(PREFIX + tokyo.file)
