"""The updater: tolerant parsing that fails closed, the one request it sends, and the per-session
watermark (which survives a second "pod") — against the scripted model server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from harness_memory.auto import AutoMemory, AutoPlace, Category, ProfileKey, parse_answer
from harness_memory.auto.model import Batch, CapturedMessage, QueueKey, Signals
from harness_memory.auto.updater import UpdateStatus, format_conversation
from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from harness_memory.tokens import count_tokens
from tests.fakellm import ScriptedLLM, delay, error, raw, text
from tests.helpers import auto_pods

GOOD = {
    "user": {"workContext": {"summary": "Frontend engineer (TypeScript, Vue).", "shouldUpdate": True},
             "personalContext": {"summary": "ignored", "shouldUpdate": False}},
    "history": {"recentMonths": {"summary": "Building a Vue dashboard.", "shouldUpdate": True}},
    "newFacts": [{"content": "Writes reports in Chinese", "category": "preference", "confidence": 0.95}],
    "factsToRemove": [],
}


# -- parse_answer --------------------------------------------------------------------------------
@pytest.mark.parametrize("wrap", [
    lambda j: j,
    lambda j: f"好的，分析结果如下：\n```json\n{j}\n```\n希望有帮助。",
    lambda j: f"<think>the user said they are a frontend engineer {{not json}}</think>\n{j}",
    lambda j: f"Sure! Here you go: {j} Let me know.",
    lambda j: j.replace("]}", "],}"),  # trailing comma
])
def test_parse_tolerates_wrapping(wrap: Callable[[str], str]) -> None:
    plan = parse_answer(wrap(json.dumps(GOOD, ensure_ascii=False)))
    assert plan is not None
    assert plan.profile == {ProfileKey.WORK: "Frontend engineer (TypeScript, Vue).",
                            ProfileKey.RECENT: "Building a Vue dashboard."}
    assert [(f.content, f.category, f.confidence) for f in plan.new_facts] == [
        ("Writes reports in Chinese", Category.PREFERENCE, 0.95)]


@pytest.mark.parametrize("answer", [
    "I could not find anything worth remembering.",
    "",
    json.dumps(GOOD)[:-40],  # truncated mid-answer
    '{"user": {"workContext": {"summary": "x", "shouldUpdate": true}}, "newFacts": [{"content": "a", "categ',
    "[1, 2, 3]",
    '{"unrelated": 1}',
    '{"workContext": {"summary": "inner object of a cut answer", "shouldUpdate": true}}',
    '{"newFacts": "Writes reports in Chinese"}',
    '{"factsToRemove": "fact-1"}',
    '{"user": "frontend engineer"}',
    "null",
])
def test_unusable_answers_are_rejected(answer: str) -> None:
    assert parse_answer(answer) is None


def test_bad_items_are_dropped_one_by_one() -> None:
    plan = parse_answer(json.dumps({
        "newFacts": [
            {"content": "Uses Vim", "category": "Preferences", "confidence": "0.9"},  # forgiven spelling
            {"content": "x", "category": "secret-category", "confidence": 0.9},  # unknown: context, kept
            {"content": "", "category": "goal", "confidence": 0.9},
            {"category": "goal", "confidence": 0.9},
            {"content": "Bool confidence", "category": "goal", "confidence": True},
            {"content": "Word confidence", "category": "goal", "confidence": "high"},
            {"content": "Infinite", "category": "goal", "confidence": float("inf")},
            "just a string",
            {"content": "Use pnpm", "category": "correction", "source_error": "used npm"},
        ],
        "factsToRemove": ["fact-1", {"id": "fact-2"}, 3, None],
        "profile": {"workContext": {"summary": "sections under 'profile' are accepted", "shouldUpdate": "true"},
                    "topOfMind": {"summary": 5, "shouldUpdate": True}},
    }))
    assert plan is not None
    assert [(f.content, f.category, f.confidence, f.source_error) for f in plan.new_facts] == [
        ("Uses Vim", Category.PREFERENCE, 0.9, None), ("x", Category.CONTEXT, 0.9, None),
        ("Use pnpm", Category.CORRECTION, None, "used npm")]
    assert plan.remove_ids == ["fact-1", "fact-2"]
    assert plan.profile == {ProfileKey.WORK: "sections under 'profile' are accepted"}
    assert plan.invalid_items == 9 and plan.invalid_facts == 6


# -- the updater against the scripted server ------------------------------------------------------------
@pytest.fixture
def pod(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> Iterator[Callable[..., AutoMemory]]:
    with auto_pods(make_config, llm_server.base_url, light_timeout=2) as factory:
        yield factory


def turn(user: str, reply: str, run: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "SYSTEM-PROMPT-TEXT"}, {"role": "user", "content": user},
            {"role": "assistant", "content": reply}]


def test_request_carries_memory_and_conversation_only(pod: Callable[..., AutoMemory],
                                                      llm_server: ScriptedLLM) -> None:
    auto = pod()
    auto.add_fact("u1", "Lives in Shenzhen", "context", 0.9)
    llm_server.script(text(json.dumps(GOOD)))
    auto.capture("u1", "s1", turn("I'm a frontend engineer; reports in Chinese please", "Noted.", "r1"), run_id="r1")
    assert auto.flush(10)
    [req] = llm_server.chat_requests
    assert req.model == "fake-model" and req.body["response_format"] == {"type": "json_object"}
    assert req.body["max_tokens"] == 2000
    prompt = req.messages[-1]["content"]
    assert "User: I'm a frontend engineer; reports in Chinese please" in prompt
    assert "Assistant: Noted." in prompt
    assert "SYSTEM-PROMPT-TEXT" not in prompt
    assert "Lives in Shenzhen" in prompt and '"id": "fact-' in prompt  # current memory, with ids
    assert auto.results[-1].status is UpdateStatus.APPLIED
    assert {f.content for f in auto.list_facts("u1")} == {"Lives in Shenzhen", "Writes reports in Chinese"}


def test_correction_signal_reaches_the_prompt(pod: Callable[..., AutoMemory], llm_server: ScriptedLLM) -> None:
    auto = pod()
    llm_server.script(text(json.dumps({"newFacts": [
        {"content": "Use pnpm for installs", "category": "correction", "confidence": 0.6, "sourceError": "npm"}]})))
    auto.capture("u1", "s1", turn("不对，别用 npm 用 pnpm", "好的，改用 pnpm。", "r1"))
    assert auto.flush(10)
    prompt = llm_server.chat_requests[0].messages[-1]["content"]
    assert "CORRECTED" in prompt and "«不对，别用 npm 用 pnpm»" in prompt
    [fact] = auto.list_facts("u1")
    assert (fact.category, fact.confidence, fact.source_error) == (Category.CORRECTION, 0.95, "npm")


def test_watermark_sends_only_unseen_messages_across_pods(pod: Callable[..., AutoMemory],
                                                         llm_server: ScriptedLLM) -> None:
    pod_a, pod_b = pod(), pod()  # two processes' worth of state on one store
    llm_server.script(text(json.dumps(GOOD)), text('{"newFacts": []}'))
    first = turn("I use Vue 3", "Great.", "r1")
    pod_a.capture("u1", "s1", first, run_id="r1")
    assert pod_a.flush(10)
    # pod B gets the same run re-delivered (a retried request) plus a new run
    pod_b.capture("u1", "s1", first, run_id="r1")
    pod_b.capture("u1", "s1", turn("And Pinia for state", "OK.", "r2"), run_id="r2")
    assert pod_b.flush(10)
    assert len(llm_server.chat_requests) == 2
    second = llm_server.chat_requests[1].messages[-1]["content"]
    assert "And Pinia for state" in second and "I use Vue 3" not in second
    # the same run once more: nothing unseen, so no model call at all
    pod_b.capture("u1", "s1", first, run_id="r1")
    assert pod_b.flush(10)
    assert len(llm_server.chat_requests) == 2 and pod_b.results[-1].status is UpdateStatus.SKIPPED
    # another session of the same user has its own watermark
    pod_b.capture("u1", "s2", first, run_id="r1")
    llm_server.script(text('{"newFacts": []}'))
    assert pod_b.flush(10)
    assert len(llm_server.chat_requests) == 3


@pytest.mark.parametrize("answer", [
    raw("Sorry, I can't help with that."),
    raw(json.dumps(GOOD)[:-25]),
    error(500, "upstream overloaded"),
    delay(4, text(json.dumps(GOOD))),  # longer than light_timeout=2
])
def test_failed_extraction_changes_nothing(pod: Callable[..., AutoMemory], llm_server: ScriptedLLM,
                                          answer: object) -> None:
    auto = pod()
    auto.add_fact("u1", "Existing fact", "context", 0.9)
    place = AutoPlace(auto.places.user_auto_dir("u1"))
    store = auto.places.user_auto_dir("u1").store
    before = {i.key: store.get(i.key).data for i in store.list(place.dir.place.prefix)}
    llm_server.script(answer)  # type: ignore[arg-type]
    auto.capture("u1", "s1", turn("I am a data scientist", "Nice.", "r1"))
    assert not auto.flush(10)  # the batch was given up (max_attempts=1)
    assert auto.results[-1].status is UpdateStatus.RETRY and auto.stats.abandoned == 1
    after = {i.key: store.get(i.key).data for i in store.list(place.dir.place.prefix)}
    assert after == before  # no file, index, manifest or watermark changed
    assert not store.exists(place.state_key)


def test_failed_try_is_retried_with_the_same_messages(pod: Callable[..., AutoMemory],
                                                      llm_server: ScriptedLLM) -> None:
    auto = pod(max_attempts=2)
    llm_server.script(raw("not json"), text(json.dumps(GOOD)))
    auto.capture("u1", "s1", turn("I am a frontend engineer", "Nice.", "r1"))
    assert auto.flush(10)
    first, second = (r.messages[-1]["content"] for r in llm_server.chat_requests)
    assert "I am a frontend engineer" in first and "I am a frontend engineer" in second
    assert [f.content for f in auto.list_facts("u1")] == ["Writes reports in Chinese"]


def test_auto_model_setting_and_no_model(pod: Callable[..., AutoMemory], llm_server: ScriptedLLM,
                                         make_config: Callable[..., MemoryConfig]) -> None:
    auto = pod(model="extractor-1")
    llm_server.script(text('{"newFacts": []}'))
    auto.capture("u1", "s1", turn("hello", "hi", "r1"))
    assert auto.flush(10)
    assert llm_server.chat_requests[0].model == "extractor-1"
    services = MemoryServices.from_config(make_config())  # no model configured at all
    bare = services.new_auto_memory(start_worker=False)
    assert bare.capture("u2", "s1", turn("hello", "hi", "r1")) == 2
    assert bare.worker.pending_count() == 0  # nothing queued that could never be processed
    assert bare.flush(5) and not bare.results
    bare.close()
    services.close()


def test_conversation_is_bounded_and_user_words_win() -> None:
    long_reply = "word " * 3000
    messages = [CapturedMessage(role, f"{role} {i} " + (long_reply if role == "assistant" else "short"), f"k{i}")
                for i, role in enumerate(["user", "assistant"] * 30)]
    text_ = format_conversation(messages, max_tokens=2000)
    assert count_tokens(text_) <= 2000
    assert all(f"User: user {i} short" in text_ for i in range(0, 60, 2))  # every user message kept
    assert "Assistant: assistant 59 word" in text_ and text_.count("word") < 3000  # replies cut hard
    tight = format_conversation(messages, max_tokens=100)
    assert count_tokens(tight) <= 100
    assert "Assistant:" not in tight and "the assistant's replies are left out" in tight
    assert "User: user 58 short" in tight and "earlier user messages omitted" in tight


def test_batch_without_user_messages_is_skipped(pod: Callable[..., AutoMemory], llm_server: ScriptedLLM) -> None:
    auto = pod()
    batch = Batch(QueueKey("u1", "default", "s1"), [CapturedMessage("assistant", "Hello!", "k1")], Signals(), 0, 0)
    result = auto.updater.run(AutoPlace(auto.places.user_auto_dir("u1")), batch)
    assert result.status is UpdateStatus.SKIPPED and llm_server.chat_requests == []
