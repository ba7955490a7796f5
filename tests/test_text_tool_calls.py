"""Tool calls written as text (issue 30): recovered strictly, through agno's real model classes.

The failure reproduced: a 1.5B model on llama-server writes its calls as text (fenced JSON, a bare
object, ``<tool_call>``, ``<tools>``); the server returns them as ``content`` and agno ran none of
55 calls, showing the raw JSON to the user. Here the scripted server answers in each shape, run,
``arun()`` and both streams go through ``LoopAwareOpenAILike``, and the test checks what ran, what
the next request carried and what the user saw.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agno.agent import Agent
from hypothesis import given, settings
from hypothesis import strategies as st

from harness_memory.agent_model import make_agent_model
from harness_memory.agent_model_text import _HeldStream
from harness_memory.config import MemoryConfig, ModelConfig
from harness_memory.text_tool_calls import recover, validate
from tests.fakellm import ScriptedLLM, text

ARGS = {"topic": "polars", "detail": "prefers Polars over pandas; 数据 in UTF-8 ✓"}
CALL = json.dumps({"name": "note", "arguments": ARGS}, ensure_ascii=False)
GOOD_SHAPES = {
    "fenced": f"```json\n{CALL}\n```",
    "fenced_with_lead": f"I'll note that.\n```json\n{CALL}\n```\n",
    "bare": CALL,
    "tool_call_tag": f"<tool_call>\n{CALL}\n</tool_call>",
    "tool_call_unclosed": f"<tool_call>\n{CALL}",
    "tools_block": f"<tools>\n{CALL}\n</tools>",
    "parameters_key": json.dumps({"name": "note", "parameters": ARGS}),
    "openai_shape": json.dumps([{"type": "function", "function": {"name": "note", "arguments": json.dumps(ARGS)}}]),
}
BAD_SHAPES = {
    "not_offered": "```json\n" + json.dumps({"name": "delete_everything", "arguments": {}}) + "\n```",
    "broken_json": '```json\n{"name": "note", "arguments": {"topic": "polars", }\n```',
    "missing_argument": "<tool_call>\n" + json.dumps({"name": "note", "arguments": {"topic": "x"}}) + "\n</tool_call>",
    "wrong_type": json.dumps({"name": "note", "arguments": {"topic": 3, "detail": "x"}}),
    "unknown_argument": json.dumps({"name": "note", "arguments": {**ARGS, "force": True}}),
    "quoted_in_explanation": f"To keep it I would call:\n```json\n{CALL}\n```\nShall I do that?",
    "introduced_as_example": f"For example, a call looks like this:\n```json\n{CALL}\n```",
    "tool_definition_echoed": "<tools>\n" + json.dumps({"type": "function", "function": {
        "name": "note", "description": "Keep a note.", "parameters": {"type": "object"}}}) + "\n</tools>",
}
MODES = ["run", "arun", "stream", "astream"]


class Notes:
    """A real tool agno runs: records every call it gets."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def note(self, topic: str, detail: str) -> str:
        """Keep a note about the user.

        Args:
            topic: One or two words.
            detail: What to keep.
        """
        self.calls.append({"topic": topic, "detail": detail})
        return f"noted {topic}"


def make_agent(server: ScriptedLLM, notes: Notes, *, recovery: bool = True) -> Agent:
    model = make_agent_model(ModelConfig(model="m", base_url=server.base_url, api_key="k", text_tool_calls=recovery))
    return Agent(model=model, tools=[notes.note], telemetry=False)


def run_agent(agent: Agent, mode: str) -> tuple[str, list[str]]:
    """(final content, every content piece shown while streaming)."""
    if mode == "run":
        out = agent.run("remember I like polars")
        return str(out.content), []
    if mode == "arun":
        out = asyncio.run(agent.arun("remember I like polars"))
        return str(out.content), []
    if mode == "stream":
        pieces = [str(ev.content) for ev in agent.run("remember I like polars", stream=True)
                  if getattr(ev, "event", "") == "RunContent" and ev.content]
        return "".join(pieces), pieces

    async def consume() -> list[str]:
        return [str(ev.content) async for ev in agent.arun("remember I like polars", stream=True)
                if getattr(ev, "event", "") == "RunContent" and ev.content]

    pieces = asyncio.run(consume())
    return "".join(pieces), pieces


def raw_call_visible(shown: str) -> bool:
    return any(mark in shown for mark in ('"arguments"', '"parameters"', "<tool_call>", "<tools>", "```"))


#: Every shape through the plain and the async streaming path (the two ends of the seam); the two
#: shapes the 1.5B model wrote most through all four (kept small: each case is a real agent run).
GOOD_CASES = sorted({(s, m) for s in GOOD_SHAPES for m in ("run", "astream")}
                    | {(s, m) for s in ("fenced_with_lead", "tool_call_tag") for m in MODES})
BAD_CASES = [(shape, MODES[i % len(MODES)]) for i, shape in enumerate(sorted(BAD_SHAPES))]


@pytest.mark.parametrize(("shape", "mode"), GOOD_CASES)
def test_a_text_call_runs_once_and_the_user_never_sees_it(llm_server: ScriptedLLM, shape: str, mode: str) -> None:
    notes = Notes()
    llm_server.script(text(GOOD_SHAPES[shape]), text("Noted: you prefer Polars."))
    shown, pieces = run_agent(make_agent(llm_server, notes), mode)
    assert notes.calls == [ARGS]  # executed once, with the arguments the model wrote
    assert "Noted: you prefer Polars." in shown and not raw_call_visible(shown), shown
    assert not any(raw_call_visible(p) for p in pieces)
    second = llm_server.chat_requests[1].messages
    asked = [m for m in second if m.get("role") == "assistant" and m.get("tool_calls")]
    assert [json.loads(c["function"]["arguments"]) for c in asked[0]["tool_calls"]] == [ARGS]
    assert asked[0]["tool_calls"][0]["function"]["name"] == "note"
    assert [m["content"] for m in second if m.get("role") == "tool"] == ["noted polars"]
    if shape == "fenced_with_lead" and mode in ("stream", "astream"):
        assert pieces[0] == "I'll not"  # the lead-in streams as it comes (8-char deltas), not at the end


@pytest.mark.parametrize(("shape", "mode"), BAD_CASES)
def test_a_bad_text_call_never_runs_and_stays_text(llm_server: ScriptedLLM, shape: str, mode: str) -> None:
    notes = Notes()
    llm_server.script(text(BAD_SHAPES[shape]))
    shown, _ = run_agent(make_agent(llm_server, notes), mode)
    assert notes.calls == []
    assert shown == BAD_SHAPES[shape]  # the answer is passed on whole, nothing lost
    assert len(llm_server.chat_requests) == 1


@pytest.mark.parametrize("mode", ["run", "stream"])
def test_recovery_off_leaves_the_text_alone(llm_server: ScriptedLLM, mode: str) -> None:
    notes = Notes()
    llm_server.script(text(GOOD_SHAPES["fenced"]))
    shown, _ = run_agent(make_agent(llm_server, notes, recovery=False), mode)
    assert notes.calls == [] and shown == GOOD_SHAPES["fenced"]


def test_a_real_tool_call_is_not_touched(llm_server: ScriptedLLM) -> None:
    from tests.fakellm import tool_calls

    notes = Notes()
    llm_server.script(tool_calls([("note", ARGS)]), text(GOOD_SHAPES["bare"]), text("done"))
    out = make_agent(llm_server, notes).run("hi")
    # the real call runs; the text call of the second answer is recovered too (both are the model's calls)
    assert notes.calls == [ARGS, ARGS] and out.content == "done"


@pytest.mark.parametrize("mode", ["run", "astream"])
def test_a_model_repeating_its_text_call_does_not_loop(llm_server: ScriptedLLM, mode: str) -> None:
    """The model writes the same call after every tool answer: it runs once more at most (the
    memory tools answer that repeat "already done"), then the run ends with no raw call shown."""
    notes = Notes()
    llm_server.set_handler(lambda req: text(GOOD_SHAPES["fenced_with_lead"]))
    shown, _ = run_agent(make_agent(llm_server, notes), mode)
    assert len(llm_server.chat_requests) == 3 and notes.calls == [ARGS, ARGS]
    assert not raw_call_visible(shown) and "I'll note that." in shown


def test_profile_local_turns_recovery_on_and_hosted_off() -> None:
    assert MemoryConfig.load(env={}, model={"model_profile": "local"}).model.text_tool_calls is True
    assert MemoryConfig.load(env={}).model.text_tool_calls is False
    off = MemoryConfig.load(env={}, model={"model_profile": "local", "text_tool_calls": False})
    assert off.model.text_tool_calls is False  # a setting given explicitly wins


def test_services_count_recovered_and_rejected_calls(make_config: Any, llm_server: ScriptedLLM) -> None:
    from harness_memory.services import MemoryServices

    cfg = make_config(model={"model": "m", "base_url": llm_server.base_url, "api_key": "k",
                             "model_profile": "local"})
    services = MemoryServices.from_config(cfg)
    try:
        model = services.agent_model()
        notes = Notes()
        agent = Agent(model=model, tools=[notes.note], telemetry=False)
        llm_server.script(text(GOOD_SHAPES["tool_call_tag"]), text("ok"), text(BAD_SHAPES["not_offered"]))
        agent.run("one")
        agent.run("two")
        assert notes.calls == [ARGS]
        stats = model.text_call_stats
        assert stats.total("recovered") == 1 and stats.rejected() == 1
        registry = services.telemetry.metrics.registry
        get = registry.get_sample_value
        assert get("harness_memory_text_tool_calls_total", {"outcome": "recovered", "kind": "tool_call"}) == 1
        assert get("harness_memory_text_tool_calls_total", {"outcome": "not_offered", "kind": "fenced"}) == 1
    finally:
        services.close()


# -- the rules, over generated data ------------------------------------------------------------
TOOLS = [{"type": "function", "function": {"name": "note", "parameters": {
    "type": "object", "properties": {"topic": {"type": "string"}, "detail": {"type": "string"}},
    "required": ["topic", "detail"]}}}]
WRAPS = [lambda c: f"```json\n{c}\n```", lambda c: c, lambda c: f"<tool_call>\n{c}\n</tool_call>",
         lambda c: f"<tools>{c}</tools>"]


@settings(max_examples=150, deadline=None)
@given(topic=st.text(), detail=st.text(), wrap=st.sampled_from(WRAPS), ascii_only=st.booleans())
def test_any_arguments_round_trip(topic: str, detail: str, wrap: Any, ascii_only: bool) -> None:
    call = json.dumps({"name": "note", "arguments": {"topic": topic, "detail": detail}}, ensure_ascii=ascii_only)
    found = recover(wrap(call), TOOLS)
    assert found.outcome == "recovered" and found.calls[0].arguments == {"topic": topic, "detail": detail}


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_prose_is_never_a_call(prose: str) -> None:
    assert recover(prose, TOOLS).calls == ()


@settings(max_examples=150, deadline=None)
@given(prose=st.text(min_size=1).filter(lambda s: s.strip() != ""), wrap=st.sampled_from(WRAPS))
def test_a_call_followed_by_prose_is_quoted_not_made(prose: str, wrap: Any) -> None:
    text_ = wrap(json.dumps({"name": "note", "arguments": {"topic": "a", "detail": "b"}})) + "\n" + prose
    found = recover(text_, TOOLS)
    if found.calls:  # only when the "prose" is itself whitespace-separated call blocks
        assert all(c.name == "note" for c in found.calls)
        assert recover(prose.strip(), TOOLS).calls
    assert found.outcome != "recovered" or recover(prose.strip(), TOOLS).outcome == "recovered"


@settings(max_examples=100, deadline=None)
@given(lead=st.sampled_from(["", "Sure.\n", "OK, saving:\n", "a {brace} line\n{ not json\n"]),
       body=st.sampled_from([*GOOD_SHAPES.values(), *BAD_SHAPES.values(), "plain answer", "a\n{\n``"]),
       cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=12))
def test_a_stream_shows_exactly_what_the_whole_answer_would(lead: str, body: str, cuts: list[int]) -> None:
    """However the text is split into deltas, the stream shows the non-call text in full and in
    order, and no piece of a recovered call."""
    full = lead + body
    held = _HeldStream(TOOLS_NOTE, [])
    shown = ""
    pos = 0
    for cut in sorted(set(cuts)):
        piece = full[pos:cut]
        pos = max(pos, cut)
        if piece:
            shown += _Delta(piece).passed(held)
    if pos < len(full):
        shown += _Delta(full[pos:]).passed(held)
    found = recover(full, TOOLS_NOTE)
    if found.outcome == "recovered":
        assert (shown + found.lead[held.shown:]).rstrip() == found.lead
    else:
        assert shown + held.release() == full


TOOLS_NOTE = [{"type": "function", "function": {"name": "note", "parameters": {
    "type": "object", "properties": {"topic": {"type": "string"}, "detail": {"type": "string"}},
    "required": ["topic", "detail"]}}}]


class _Delta:
    def __init__(self, content: str) -> None:
        self.content: str | None = content
        self.tool_calls = None

    def passed(self, held: _HeldStream) -> str:
        return held.pass_on(self).content or ""


def test_validate_names_the_field() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "tags": {"type": "array", "items":
              {"type": "string"}}, "mode": {"type": "string", "enum": ["a", "b"]}}, "required": ["n"]}
    assert validate({"n": 1, "tags": ["x"], "mode": "a"}, schema, top=True) is None
    assert "tags[1]" in (validate({"n": 1, "tags": ["x", 2]}, schema, top=True) or "")
    assert "mode" in (validate({"n": 1, "mode": "c"}, schema, top=True) or "")
    assert "n" in (validate({"n": True}, schema, top=True) or "")  # a boolean is not an integer
    assert validate({"n": 2.0, "mode": None}, schema, top=True) is None  # 2.0 is an integer; null: default


def test_profile_local_sends_a_low_temperature_to_both_models(make_config: Any, llm_server: ScriptedLLM) -> None:
    """The local profile sends 0.2 to the agent and light models (a small model's call shapes and
    JSON answers vary less; llama-server's default is 0.8); the hosted one sends none (the
    provider's default); a temperature given explicitly wins."""
    from harness_memory.services import MemoryServices

    for profile, chosen, want in (("local", None, 0.2), ("hosted", None, None), ("local", 0.7, 0.7)):
        extra = {} if chosen is None else {"temperature": chosen, "light_temperature": chosen}
        cfg = make_config(model={"model": "m", "base_url": llm_server.base_url, "api_key": "k",
                                 "model_profile": profile, **extra})
        services = MemoryServices.from_config(cfg)
        try:
            llm_server.script(text("ok"), text("{}"))
            Agent(model=services.agent_model(), telemetry=False).run("hi")
            light = services.light_model()
            assert light is not None
            light.complete([{"role": "user", "content": "x"}])
            agent_req, light_req = llm_server.chat_requests[-2:]
            assert agent_req.body.get("temperature") == want and light_req.body.get("temperature") == want, profile
        finally:
            services.close()


def test_profile_local_caps_an_agent_answer(make_config: Any, llm_server: ScriptedLLM) -> None:
    """A 1.5B model fell into a loop and wrote 4,882 tokens in 600 s until the client gave up and
    the user's run failed: the local profile caps an agent answer (1536 tokens); hosted sends no cap;
    a cap given explicitly wins."""
    from harness_memory.services import MemoryServices

    for profile, chosen, want in (("local", None, 1536), ("hosted", None, None), ("local", 4000, 4000)):
        extra = {} if chosen is None else {"max_tokens": chosen}
        cfg = make_config(model={"model": "m", "base_url": llm_server.base_url, "api_key": "k",
                                 "model_profile": profile, **extra})
        services = MemoryServices.from_config(cfg)
        try:
            llm_server.script(text("ok"))
            Agent(model=services.agent_model(), telemetry=False).run("hi")
            assert llm_server.chat_requests[-1].body.get("max_tokens") == want, profile
        finally:
            services.close()
