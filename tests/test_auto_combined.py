"""One light-model call for a session summary and an auto-memory extraction of the same session,
each half applied under its own rules — against the scripted server, real Redis and store."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness_memory.auto import AutoMemory
from harness_memory.auto.prompt import SYSTEM_PROMPT as AUTO_PROMPT
from harness_memory.auto.updater import UpdateStatus
from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from harness_memory.session.binding import bind_session_id
from harness_memory.session.combined import COMBINED_MARKER, split_answer
from harness_memory.session.records import ExtractStatus
from harness_memory.session.summary import PROMPT_MARKER
from tests.fakellm import Answer, RecordedRequest, ScriptedLLM, raw, text

SID = bind_session_id("u1", "chat-1")
SUMMARY = ("# Dashboard build session\n\n## Current State\n- wiring the router\n\n"
           "## Task\n- build the Vue dashboard\n\n"
           "## Worklog\n- asked about routing\n")
UPDATE = {"newFacts": [{"content": "Builds dashboards in Vue 3", "category": "knowledge", "confidence": 0.9,
                        "evidence": "I build dashboards in Vue 3"}]}


def kind(req: RecordedRequest) -> str:
    system = str(req.messages[0].get("content"))
    if system.startswith(COMBINED_MARKER):
        return "combined"
    if system.startswith(AUTO_PROMPT[:60]):
        return "auto"
    return "summary" if PROMPT_MARKER in system else "agent"


def combined(summary: str = SUMMARY, update: object = UPDATE) -> Answer:
    return text(f"<session_summary>\n{summary}</session_summary>\n<memory_update>\n{json.dumps(update)}\n"
                "</memory_update>")


@pytest.fixture
def pod(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> Iterator[Callable[..., Any]]:
    made: list[MemoryServices] = []

    def factory(**auto: Any) -> tuple[MemoryServices, AutoMemory]:
        cfg = make_config(redis=True, model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                          session={"first_threshold_tokens": 60, "update_threshold_tokens": 30, "min_tool_calls": 0,
                                   "failure_backoff_seconds": 0},
                          auto={"debounce_seconds": 3600, "max_attempts": 2, **auto})
        services = MemoryServices.from_config(cfg)
        made.append(services)
        return services, services.auto_memory(start_worker=False)

    yield factory
    for services in made:
        services.close()


def talk(services: MemoryServices, auto: AutoMemory, user: str, reply: str, session: str = SID) -> None:
    """What the two post-hooks of one run do: session memory buffers it, auto memory queues it."""
    turn = [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
    services.session_manager().collect_messages_sync(session, turn)
    auto.capture("u1", session, turn)


def test_summary_and_extraction_due_together_make_one_call(pod: Callable[..., Any], llm_server: ScriptedLLM) -> None:
    services, auto = pod()
    manager = services.session_manager()
    talk(services, auto, "I build dashboards in Vue 3 and I need help with the router.", "Sure. " * 60)
    assert auto.worker.pending_count() == 1 and manager.should_extract_sync(SID)
    llm_server.script(combined())
    assert manager.maybe_extract_sync(SID).status is ExtractStatus.EXTRACTED
    [call] = llm_server.chat_requests
    assert kind(call) == "combined" and "response_format" not in call.body
    system, user = (str(m["content"]) for m in call.messages)
    assert PROMPT_MARKER in system and AUTO_PROMPT in system  # both jobs' instructions, unchanged
    assert "<previous_summary>" in user and "<current_memory>" in user
    # the extraction reads the same messages as the summary: pointed to, not repeated
    assert "The new conversation is JOB 1's new messages [1] to [2]" in user
    assert user.count("I build dashboards in Vue 3") == 1
    # each half applied under its own rules
    assert "wiring the router" in (manager.get_summary_sync(SID) or "")
    assert [f.content for f in auto.list_facts("u1")] == ["Builds dashboards in Vue 3"]
    assert auto.results[-1].status is UpdateStatus.APPLIED and auto.results[-1].combined
    assert auto.worker.pending_count() == 0
    assert auto.flush(5) and len(llm_server.chat_requests) == 1  # nothing left for a call of its own
    # only the summary due (the run was an acknowledgement: nothing for auto memory) -> a summary alone
    talk(services, auto, "thanks!", "You're welcome. " * 40)
    assert auto.worker.pending_count() == 0 and manager.should_extract_sync(SID)
    llm_server.script(text(SUMMARY))
    assert manager.maybe_extract_sync(SID).status is ExtractStatus.EXTRACTED
    assert kind(llm_server.chat_requests[-1]) == "summary"
    # only the extraction due (flushed: the user left) -> an extraction alone
    talk(services, auto, "By the way, I deploy on Fridays.", "Noted.")
    assert not manager.should_extract_sync(SID)
    llm_server.script(text('{"newFacts": []}'))
    assert auto.flush(5)
    assert [kind(r) for r in llm_server.chat_requests] == ["combined", "summary", "auto"]


def test_a_bad_memory_half_is_retried_and_the_summary_kept(pod: Callable[..., Any], llm_server: ScriptedLLM) -> None:
    services, auto = pod()
    manager = services.session_manager()
    talk(services, auto, "I build dashboards in Vue 3 and I need help with the router.", "Sure. " * 60)
    llm_server.script(text(f"<session_summary>\n{SUMMARY}</session_summary>\n<memory_update>\nI found nothing "
                           "{worth keeping\n</memory_update>"))
    assert manager.maybe_extract_sync(SID).status is ExtractStatus.EXTRACTED
    assert "wiring the router" in (manager.get_summary_sync(SID) or "")
    assert auto.results[-1].status is UpdateStatus.RETRY and auto.list_facts("u1") == []
    assert auto.worker.pending_count() == 1  # back in the queue, nothing applied
    llm_server.script(text(json.dumps(UPDATE)))
    assert auto.flush(5)
    retry = llm_server.chat_requests[-1]
    assert kind(retry) == "auto" and "I build dashboards in Vue 3" in retry.messages[-1]["content"]
    assert [f.content for f in auto.list_facts("u1")] == ["Builds dashboards in Vue 3"]


def test_a_conversation_the_summary_does_not_carry_is_sent_in_full(pod: Callable[..., Any],
                                                                  llm_server: ScriptedLLM) -> None:
    services, auto = pod()
    talk(services, auto, "I build dashboards in Vue 3 and I need help with the router.", "Sure. " * 60)
    auto.capture("u1", SID, [{"role": "user", "content": "I also keep state in Pinia."}])  # not in the buffer
    llm_server.script(combined())
    assert services.session_manager().maybe_extract_sync(SID).status is ExtractStatus.EXTRACTED
    user = str(llm_server.chat_requests[0].messages[-1]["content"])
    assert "User: I build dashboards in Vue 3" in user and "User: I also keep state in Pinia." in user
    assert "JOB 1's new messages [" not in user


def test_a_bad_summary_half_still_applies_the_memory_half(pod: Callable[..., Any], llm_server: ScriptedLLM) -> None:
    services, auto = pod()
    manager = services.session_manager()
    talk(services, auto, "I build dashboards in Vue 3 and I need help with the router.", "Sure. " * 60)
    llm_server.script(combined(summary="I could not summarise this.\n"), text("Still no summary."))
    result = manager.maybe_extract_sync(SID)
    assert result.status is ExtractStatus.FAILED and "SummaryRejected" in (result.error or "")
    first, again = llm_server.chat_requests
    # Asked again for the summary alone: the memory half was already taken from the first answer.
    assert str(first.messages[0]["content"]).startswith(COMBINED_MARKER)
    assert str(again.messages[0]["content"]).startswith(PROMPT_MARKER) and AUTO_PROMPT[:60] not in str(again.messages)
    assert manager.get_summary_sync(SID) is None
    assert [f.content for f in auto.list_facts("u1")] == ["Builds dashboards in Vue 3"]
    assert auto.results[-1].combined and auto.worker.pending_count() == 0


def test_a_failed_call_sends_the_batch_back(pod: Callable[..., Any], llm_server: ScriptedLLM) -> None:
    services, auto = pod()
    manager = services.session_manager()
    talk(services, auto, "I build dashboards in Vue 3 and I need help with the router.", "Sure. " * 60)
    llm_server.script(raw(""))  # an empty answer: the call fails as a whole
    assert manager.maybe_extract_sync(SID).status is ExtractStatus.FAILED
    assert auto.results[-1].status is UpdateStatus.RETRY and auto.worker.pending_count() == 1
    llm_server.script(combined())
    assert manager.maybe_extract_sync(SID).status is ExtractStatus.EXTRACTED  # rides along again
    assert [f.content for f in auto.list_facts("u1")] == ["Builds dashboards in Vue 3"]


def test_another_users_batch_never_rides_in_a_session(pod: Callable[..., Any], llm_server: ScriptedLLM) -> None:
    """Only a session bound to the batch's user carries it (its conversation is that user's)."""
    services, auto = pod()
    manager = services.session_manager()
    turn = [{"role": "user", "content": "I build dashboards in Vue 3 and I need help with the router."},
            {"role": "assistant", "content": "Sure. " * 60}]
    manager.collect_messages_sync(SID, turn)
    auto.capture("u2", SID, turn)  # u2 naming u1's session id
    llm_server.script(text(SUMMARY))
    assert manager.maybe_extract_sync(SID).status is ExtractStatus.EXTRACTED
    assert [kind(r) for r in llm_server.chat_requests] == ["summary"]
    assert auto.worker.pending_count() == 1


def test_combining_can_be_switched_off(pod: Callable[..., Any], llm_server: ScriptedLLM) -> None:
    services, auto = pod(combine_with_summary=False)
    talk(services, auto, "I build dashboards in Vue 3 and I need help with the router.", "Sure. " * 60)
    llm_server.script(text(SUMMARY), text(json.dumps(UPDATE)))
    assert services.session_manager().maybe_extract_sync(SID).status is ExtractStatus.EXTRACTED
    assert auto.flush(5)
    assert [kind(r) for r in llm_server.chat_requests] == ["summary", "auto"]


@pytest.mark.parametrize("answer, summary, rider", [
    ("<session_summary>\n# T\n</session_summary>\n<memory_update>\n{\"newFacts\": []}\n</memory_update>",
     "# T", '{"newFacts": []}'),
    ("<SESSION_SUMMARY># T</SESSION_SUMMARY><memory_update>{\"newFacts\": []}", "# T", '{"newFacts": []}'),
    ("# T\n## Worklog\n- a\n\n```json\n{\"newFacts\": []}\n```\n", "# T\n## Worklog\n- a", None),
    ("# T\n## Worklog\n- a\n", "# T\n## Worklog\n- a", None),
])
def test_split_answer(answer: str, summary: str, rider: str | None) -> None:
    got_summary, got_rider = split_answer(answer)
    assert got_summary == summary
    if rider is None and "```" in answer:
        assert got_rider is not None and json.loads(re.sub(r"```(json)?", "", got_rider)) == {"newFacts": []}
    else:
        assert got_rider == rider
