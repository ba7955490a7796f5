"""An answer that says something was saved while no memory write of the turn succeeded (issue 30).

Seen with Qwen2.5-Coder-1.5B on llama.cpp: "好的，我已经记住了。", "Done.", "Sure, I've saved your
information in `user_role.md`." with no call at all — a false statement, and the memory lost. In
the small-model mode (``model.text_tool_calls``) the model is asked once more, told nothing was
saved; a call it then makes runs like any other, and the user never sees the unbacked claim.
Through agno's real model classes and a scripted OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agno.agent import Agent
from agno.models.message import Message

from harness_memory import save_ask
from harness_memory.agent_model import make_agent_model
from harness_memory.agent_model_text import NUDGE, unbacked, unbacked_claim
from harness_memory.config import ModelConfig
from harness_memory.services import MemoryServices
from tests.fakellm import ScriptedLLM, text, tool_calls

GOOD = "---\nname: polars\ndescription: prefers Polars over pandas\ntype: user\n---\n\nUses Polars.\n"
SAVE_TEXT = json.dumps({"name": "save_file", "arguments": {"file_name": "user_polars.md", "content": GOOD}})


@pytest.fixture
def services(make_config: Any, llm_server: ScriptedLLM) -> Any:
    made = MemoryServices.from_config(make_config(model={"model": "m", "base_url": llm_server.base_url,
                                                          "api_key": "k"}))
    yield made
    made.close()


def agent(services: MemoryServices, server: ScriptedLLM, *, local: bool = True) -> Agent:
    model = make_agent_model(ModelConfig(model="m", base_url=server.base_url, api_key="k", text_tool_calls=local))
    return Agent(model=model, tools=[services.memory_tools("u1", "default")], user_id="u1", telemetry=False)


def last_user(server: ScriptedLLM, request: int) -> str:
    return [m["content"] for m in server.chat_requests[request].messages if m.get("role") == "user"][-1]


@pytest.mark.parametrize("mode", ["run", "arun"])
@pytest.mark.parametrize("claim", ["好的，我已经记住了。", "Done.",
                                   "Sure, I've saved your information in `user_polars.md`.",
                                   "Got it — I'll remember that you prefer Polars."])
def test_an_unbacked_claim_is_asked_again_and_the_call_runs(services: MemoryServices, llm_server: ScriptedLLM,
                                                           claim: str, mode: str) -> None:
    llm_server.script(text(claim), text(SAVE_TEXT), text("Saved: you prefer Polars."))
    a = agent(services, llm_server)
    out = a.run("I prefer polars") if mode == "run" else asyncio.run(a.arun("I prefer polars"))
    assert out.content == "Saved: you prefer Polars."
    assert len(llm_server.chat_requests) == 3 and last_user(llm_server, 1) == NUDGE
    assert services.user_agent_dir("u1").read("user_polars.md").text == GOOD
    assert claim not in str(out.content)
    stats = a.model.text_call_stats  # type: ignore[union-attr]
    assert stats.claims == {"nudged": 1, "called": 1}
    assert all(m.content != NUDGE for m in out.messages or []), "the nudge is not kept in the session"


def test_asked_once_per_turn_and_a_plain_answer_replaces_the_claim(services: MemoryServices,
                                                                  llm_server: ScriptedLLM) -> None:
    llm_server.script(text("I've saved it."), text("Polars it is."))
    out = agent(services, llm_server).run("I prefer polars")
    assert out.content == "Polars it is." and len(llm_server.chat_requests) == 2
    llm_server.script(text("I've saved it."), text("I've saved it, really."))
    out = agent(services, llm_server).run("I prefer polars")
    assert out.content == "I've saved it, really." and len(llm_server.chat_requests) == 4  # not a third time


@pytest.mark.parametrize("answer", ["Polars is a DataFrame library written in Rust.", "I remember you like pandas.",
                                    "The file was saved by your editor at 10:00."])
def test_answers_that_claim_no_save_are_left_alone(services: MemoryServices, llm_server: ScriptedLLM,
                                                   answer: str) -> None:
    llm_server.script(text(answer))
    assert agent(services, llm_server).run("tell me about polars").content == answer
    assert len(llm_server.chat_requests) == 1


def test_a_claim_backed_by_a_write_of_this_turn_is_not_questioned(services: MemoryServices,
                                                                  llm_server: ScriptedLLM) -> None:
    llm_server.script(tool_calls([("save_file", {"file_name": "user_polars.md", "content": GOOD})]),
                      text("I've saved that."))
    assert agent(services, llm_server).run("I prefer polars").content == "I've saved that."
    assert len(llm_server.chat_requests) == 2


def test_a_claim_after_a_failed_save_is_questioned(services: MemoryServices, llm_server: ScriptedLLM) -> None:
    bad = ("save_file", {"file_name": "polars.md", "content": "no frontmatter"})
    llm_server.script(tool_calls([bad]), text("I've saved that."), text("I could not save it, sorry."))
    out = agent(services, llm_server).run("I prefer polars")
    assert out.content == "I could not save it, sorry." and last_user(llm_server, 2) == NUDGE


def test_hosted_models_are_never_asked_again(services: MemoryServices, llm_server: ScriptedLLM) -> None:
    llm_server.script(text("Done."))
    assert agent(services, llm_server, local=False).run("I prefer polars").content == "Done."
    assert len(llm_server.chat_requests) == 1


def test_the_claim_rule_over_a_history() -> None:
    """A claim is judged against the writes after the user's LAST message, not earlier turns."""
    earlier = [Message(role="user", content="remember polars"),
               Message(role="tool", tool_name="save_file", content="Created memory user_polars.md (user: x)."),
               Message(role="assistant", content="Saved."), Message(role="user", content="and I use vim")]
    assert unbacked_claim("Noted.", earlier)
    assert not unbacked_claim("Noted.", [*earlier, Message(role="tool", tool_name="save_file",
                                                            content="Created memory user_vim.md (user: vim).")])
    assert not unbacked_claim("Noted.", [*earlier, Message(role="tool", tool_name="save_file",
                                                            content="Already done: save_file user_vim.md …")])
    assert unbacked_claim("Noted.", [*earlier, Message(role="tool", tool_name="read_file", content="…")])


def test_a_model_that_keeps_claiming_after_the_nudge_is_not_asked_again(services: MemoryServices,
                                                                        llm_server: ScriptedLLM) -> None:
    """The nudge is not kept in the run's messages, so the turn's later calls (after a tool ran)
    cannot see it: the turn itself is remembered as asked. A model that answers the nudge with a
    failing save and then claims again ends the turn instead of looping."""
    bad = ("save_file", {"file_name": "notes.md", "content": "no frontmatter"})
    llm_server.script(text("Done."), tool_calls([bad]), text("Done."))
    out = agent(services, llm_server).run("I prefer polars, remember it")
    assert out.content == "Done." and len(llm_server.chat_requests) == 3


# -- the user asked to remember, and nothing was saved ------------------------------------------------
MEMORY = {"type": "user", "name": "Prefers Polars", "description": "Uses Polars for dataframes, not pandas",
          "text": "Always use Polars for dataframes; never pandas."}


@pytest.mark.parametrize("mode", ["run", "arun"])
@pytest.mark.parametrize(("said", "first"), [
    ("I use Polars, not pandas. Please remember that.", "Sure, Polars it is."),
    ("请记住：我用 polars。", "好的，我已经记住了。"),  # a claim too: the request decides how to ask
    ("Don't forget: I use polars.", "Understood. Here is the Polars code."),
])
def test_a_remember_request_with_no_save_asks_for_the_memory_as_data(services: MemoryServices,
                                                                     llm_server: ScriptedLLM, said: str, first: str,
                                                                     mode: str) -> None:
    """The 1.5B model answered "…remember that" in words and saved nothing, and answered a second
    request in words with more words (bench/QUALITY.md): the memory is asked for under a JSON
    schema the server enforces, and runs as an ordinary save_file call."""
    llm_server.script(text(first), text(json.dumps(MEMORY)), text("Saved: you prefer Polars."))
    a = agent(services, llm_server)
    out = a.run(said) if mode == "run" else asyncio.run(a.arun(said))
    assert out.content == "Saved: you prefer Polars." and len(llm_server.chat_requests) == 3
    ask = llm_server.chat_requests[1].body
    assert ask["response_format"] == save_ask.RESPONSE_FORMAT and not ask.get("tools") and "tool_choice" not in ask
    assert ask["max_tokens"] == save_ask.MAX_TOKENS and ask["model"] == "m"
    assert last_user(llm_server, 1) == save_ask.ask(said)  # the user's own message quoted in it
    assert llm_server.chat_requests[1].messages[-2] == {"role": "assistant", "content": first}
    stored = services.user_agent_dir("u1").read("user_prefers_polars.md").text
    assert stored == ("---\nname: Prefers Polars\ndescription: Uses Polars for dataframes, not pandas\ntype: user\n"
                      "---\n\nAlways use Polars for dataframes; never pandas.\n")
    tool_results = [m for m in out.messages or [] if m.role == "tool"]
    assert len(tool_results) == 1 and "user_prefers_polars.md" in str(tool_results[0].content)
    assert first not in str(out.content) and a.model.text_call_stats.claims == {  # type: ignore[union-attr]
        "nudged": 1, "called": 1}
    assert not any(save_ask.is_ask(m.content) for m in out.messages or []), "the ask is not kept in the session"


@pytest.mark.parametrize("answer", [
    "Sure, I will remember that you use Polars.",  # prose: a server that ignores response_format
    '{"type": "user", "name": "Polars"',  # cut off
    json.dumps({**MEMORY, "type": "preference"}),  # not one of the four types
    json.dumps({**MEMORY, "text": "   "}),  # a field empty
    json.dumps({k: v for k, v in MEMORY.items() if k != "description"}),  # a field missing
    json.dumps([MEMORY]),
])
def test_an_answer_that_is_not_a_memory_saves_nothing_and_keeps_the_first_answer(
        services: MemoryServices, llm_server: ScriptedLLM, answer: str) -> None:
    llm_server.script(text("Sure, Polars it is."), text(answer))
    out = agent(services, llm_server).run("I use polars. Remember that.")
    assert out.content == "Sure, Polars it is." and len(llm_server.chat_requests) == 2
    assert services.user_agent_dir("u1").list_entries() == []


@pytest.mark.parametrize("memory", [
    {**MEMORY, "text": "..."},  # a placeholder
    {"type": "user", "name": "A few words", "description": "One line",
     "text": "The memory, in my words"},  # the ask's own words handed back
])
def test_a_memory_the_tools_refuse_is_never_stored(services: MemoryServices, llm_server: ScriptedLLM,
                                                   memory: dict[str, str]) -> None:
    """What the structured answer holds goes through every check of save_file: the tool refuses,
    the model sees why, and the user gets its next answer."""
    llm_server.script(text("Sure, Polars it is."), text(json.dumps(memory)), text("I could not save that."))
    out = agent(services, llm_server).run("I use polars. Remember that.")
    assert out.content == "I could not save that." and services.user_agent_dir("u1").list_entries() == []
    [result] = [m for m in out.messages or [] if m.role == "tool"]
    assert "Nothing was saved" in str(result.content)


@pytest.mark.parametrize(("type_", "name", "expected"), [
    ("user", "Prefers Polars", "user_prefers_polars.md"),
    ("feedback", "团队只用 GitLab CI", "feedback_团队只用_gitlab_ci.md"),
    ("project", "  ", "project_note.md"),
    ("reference", "Grafana: on-call dashboard (p99) / latency!", "reference_grafana_on_call_dashboard_p99_latency.md"),
    ("user", "a" * 60, "user_note.md"),
    ("project", "Atlas code freeze starts March 3 for the whole payments team",
     "project_atlas_code_freeze_starts_march_3_for_the.md"),
])
def test_the_file_name_comes_from_the_type_and_the_name(type_: str, name: str, expected: str) -> None:
    assert save_ask.file_name(type_, name) == expected


def test_a_remember_request_answered_in_words_again_keeps_the_first_answer(services: MemoryServices,
                                                                          llm_server: ScriptedLLM) -> None:
    llm_server.script(text("Sure, Polars it is."), text("As I said, Polars."))
    out = agent(services, llm_server).run("I use polars. Remember that.")
    assert out.content == "Sure, Polars it is." and len(llm_server.chat_requests) == 2


@pytest.mark.parametrize("said", ["Do you remember what I use?", "I don't remember the flag, which is it?",
                                  "How do I remember a closure's value in Python?"])
def test_no_remember_request_no_second_ask(services: MemoryServices, llm_server: ScriptedLLM, said: str) -> None:
    llm_server.script(text("Polars."))
    assert agent(services, llm_server).run(said).content == "Polars."
    assert len(llm_server.chat_requests) == 1


def test_a_remember_request_of_an_earlier_turn_is_not_asked_about_again() -> None:
    earlier = [Message(role="user", content="remember: I use polars"),
               Message(role="tool", tool_name="save_file", content="Created memory user_polars.md (user: x)."),
               Message(role="assistant", content="Saved."), Message(role="user", content="what is 2+2?")]
    assert unbacked("4", earlier) is None
    assert unbacked("4", earlier[:1]) == "asked"
    wrapped = "<session-summary>\nremember the build flags\n</session-summary>\n\nwhat is 2+2?"
    assert unbacked("4", [Message(role="user", content=wrapped)]) is None  # our own injected text is not the user's


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_a_failing_second_ask_keeps_the_first_answer(services: MemoryServices, llm_server: ScriptedLLM,
                                                     mode: str) -> None:
    """The second ask is memory work: a model error there never fails the user's run."""
    from tests.fakellm import error

    llm_server.script(text("Sure, Polars it is."), *[error(400, "bad request")] * 3)
    a, said = agent(services, llm_server), "I use polars. Remember that."
    out = a.run(said) if mode == "run" else asyncio.run(a.arun(said))
    assert out.content == "Sure, Polars it is."


def test_every_field_phrase_of_the_ask_is_a_known_example() -> None:
    """The copy check covers every text we send a model: each phrase the ask uses to describe a
    field is refused as a memory unless the user said it."""

    from harness_memory.examples import copied_example

    for words in save_ask.FIELD_WORDS:
        assert copied_example(words), words
        assert words in save_ask.ask("I use polars. Remember that.")


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_a_claim_is_never_shown_bare_when_the_memory_did_not_come(services: MemoryServices,
                                                                   llm_server: ScriptedLLM, mode: str) -> None:
    """The user asked to remember, the answer claims a save, the structured ask brings no memory:
    asked in words, the model's honest answer replaces the claim; if that fails too, the claim is
    followed by what is true — nothing of the answer is cut."""
    from harness_memory.agent_model_text import CLAIM_WITHDRAWN
    from tests.fakellm import error

    said = "I use polars. Remember that."
    llm_server.script(text("好的，我已经记住了。"), text("not json"), text("I could not save it."))
    a = agent(services, llm_server)
    out = a.run(said) if mode == "run" else asyncio.run(a.arun(said))
    assert out.content == "I could not save it." and len(llm_server.chat_requests) == 3
    assert save_ask.is_ask(last_user(llm_server, 1)) and last_user(llm_server, 2) == NUDGE
    assert a.model.text_call_stats.claims == {"nudged": 2, "answered": 2}  # type: ignore[union-attr]

    llm_server.clear()
    llm_server.script(text("Here is the Polars code. I've saved your preference."), *[error(400, "bad")] * 6)
    a = agent(services, llm_server)
    out = a.run(said) if mode == "run" else asyncio.run(a.arun(said))
    assert out.content == f"Here is the Polars code. I've saved your preference.\n\n{CLAIM_WITHDRAWN}"
    assert services.user_agent_dir("u1").list_entries() == []


def streamed(a: Agent, said: str, mode: str) -> str:
    """Every content piece the user saw, joined (``stream`` or ``astream``)."""
    if mode == "stream":
        return "".join(str(ev.content) for ev in a.run(said, stream=True)
                       if getattr(ev, "event", "") == "RunContent" and ev.content)

    async def consume() -> str:
        return "".join([str(ev.content) async for ev in a.arun(said, stream=True)
                        if getattr(ev, "event", "") == "RunContent" and ev.content])

    return asyncio.run(consume())


@pytest.mark.parametrize("mode", ["stream", "astream"])
def test_a_streamed_remember_request_with_no_save_asks_for_the_memory(services: MemoryServices,
                                                                      llm_server: ScriptedLLM, mode: str) -> None:
    """While streaming the first answer is already on screen; the memory is still asked for, and
    its save_file call runs after it, then the model answers again."""
    llm_server.script(text("Sure, Polars it is."), text(json.dumps(MEMORY)), text(" Saved: you prefer Polars."))
    a = agent(services, llm_server)
    shown = streamed(a, "I use Polars, not pandas. Please remember that.", mode)
    assert shown == "Sure, Polars it is. Saved: you prefer Polars."
    assert len(llm_server.chat_requests) == 3
    assert last_user(llm_server, 1) == save_ask.ask("I use Polars, not pandas. Please remember that.")
    assert llm_server.chat_requests[1].body["response_format"] == save_ask.RESPONSE_FORMAT
    assert services.user_agent_dir("u1").read("user_prefers_polars.md").text.endswith(
        "Always use Polars for dataframes; never pandas.\n")
    assert a.model.text_call_stats.claims == {"nudged": 1, "called": 1}  # type: ignore[union-attr]


@pytest.mark.parametrize("mode", ["stream", "astream"])
@pytest.mark.parametrize(("said", "first", "requests"), [
    ("I use polars. Remember that.", "好的，我已经记住了。", 2),  # asked: the memory did not come
    ("I prefer polars", "Got it, I've saved that.", 1),  # a bare claim: on screen, nothing to ask
])
def test_a_streamed_claim_is_followed_by_what_is_true(services: MemoryServices, llm_server: ScriptedLLM,
                                                      said: str, first: str, requests: int, mode: str) -> None:
    from harness_memory.agent_model_text import CLAIM_WITHDRAWN

    llm_server.script(text(first), text("not a memory"))
    shown = streamed(agent(services, llm_server), said, mode)
    assert shown == f"{first}\n\n{CLAIM_WITHDRAWN}" and len(llm_server.chat_requests) == requests
    assert services.user_agent_dir("u1").list_entries() == []


@pytest.mark.parametrize("mode", ["stream", "astream"])
def test_a_streamed_answer_that_saved_is_left_alone(services: MemoryServices, llm_server: ScriptedLLM,
                                                    mode: str) -> None:
    llm_server.script(text(SAVE_TEXT), text("Saved."))
    shown = streamed(agent(services, llm_server), "I prefer polars. Remember that.", mode)
    assert shown == "Saved." and len(llm_server.chat_requests) == 2
