"""Issue #14's defects 1-10, each with the input the issue gives, against the real parts: the
scripted OpenAI-compatible server through the real ``openai`` client, a real store."""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from harness_memory.auto import (
    AutoMemory,
    AutoPlace,
    Category,
    capture_messages,
    detect_reinforcement,
    parse_answer,
    render_injection_block,
    scrub_uploads,
)
from harness_memory.auto.store import fact_from_entry
from harness_memory.auto.updater import UpdateStatus
from harness_memory.config import MemoryConfig
from harness_memory.memdir import ManifestEntry
from tests.fakellm import ScriptedLLM, error, raw, raw_body, text
from tests.helpers import auto_pods

UPDATE = {
    "user": {"workContext": {"summary": "Backend engineer who writes Go.", "shouldUpdate": True}},
    "history": {},
    "newFacts": [{"content": "Writes backend services in Go", "category": "knowledge", "confidence": 0.9,
                  "evidence": "I write backend services in Go"}],
    "factsToRemove": [],
}
USER_SAID = "I write backend services in Go, mostly gRPC."


@pytest.fixture
def pod(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> Iterator[Callable[..., AutoMemory]]:
    with auto_pods(make_config, llm_server.base_url, light_timeout=5) as factory:
        yield factory


def say(auto: AutoMemory, user: str, reply: str = "Noted.", session: str = "s1") -> None:
    auto.capture("u1", session, [{"role": "user", "content": user}, {"role": "assistant", "content": reply}])


def completion_body(content: object) -> str:
    """A chat completion whose message content is ``content`` verbatim (a list of parts here)."""
    return json.dumps({
        "id": "chatcmpl-x", "object": "chat.completion", "created": int(time.time()), "model": "fake-model",
        "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                     "message": {"role": "assistant", "content": content, "refusal": None}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    })


# -- 1. decoy JSON ------------------------------------------------------------------------------
def test_1_a_decoy_object_before_the_update_is_skipped() -> None:
    answer = 'Example object: {"user": "alice"}\nActual memory update:\n' + json.dumps(UPDATE)
    plan = parse_answer(answer)
    assert plan is not None
    assert [f.content for f in plan.new_facts] == ["Writes backend services in Go"]


def test_1_decoy_through_the_updater(pod: Callable[..., AutoMemory], llm_server: ScriptedLLM) -> None:
    auto = pod()
    llm_server.script(text('Example object: {"user": "alice"}\nActual memory update:\n' + json.dumps(UPDATE)))
    say(auto, USER_SAID)
    assert auto.flush(10)
    assert auto.results[-1].status is UpdateStatus.APPLIED
    assert [f.content for f in auto.list_facts("u1")] == ["Writes backend services in Go"]


# -- 2. unclosed think block -----------------------------------------------------------------------
def test_2_an_unclosed_think_block_does_not_swallow_the_answer(pod: Callable[..., AutoMemory],
                                                               llm_server: ScriptedLLM) -> None:
    answer = "<think>Analyze the conversation: the user writes Go services…\n" + json.dumps(UPDATE)
    assert parse_answer(answer) is not None
    auto = pod()
    llm_server.script(raw(answer))
    say(auto, USER_SAID)
    assert auto.flush(10)
    assert auto.results[-1].status is UpdateStatus.APPLIED  # not "empty answer", retried and lost
    assert [f.content for f in auto.list_facts("u1")] == ["Writes backend services in Go"]


# -- 3. list-of-blocks answers -----------------------------------------------------------------------
@pytest.mark.parametrize("content", [
    [{"type": "text", "text": json.dumps(UPDATE)}],
    [{"type": "text", "text": "Here is the update:"}, {"type": "text", "text": json.dumps(UPDATE)}],
    # a JSON answer streamed as plain string chunks: joined without a separator
    [json.dumps(UPDATE)[:17], json.dumps(UPDATE)[17:]],
], ids=["one-part", "two-parts", "string-chunks"])
def test_3_list_of_blocks_answers_are_read(pod: Callable[..., AutoMemory], llm_server: ScriptedLLM,
                                           content: list[object]) -> None:
    auto = pod()
    llm_server.script(raw_body(completion_body(content)))
    say(auto, USER_SAID)
    assert auto.flush(10)
    assert auto.results[-1].status is UpdateStatus.APPLIED
    assert [f.content for f in auto.list_facts("u1")] == ["Writes backend services in Go"]


# -- 4. a malformed replacement must not delete --------------------------------------------------------
def test_4_invalid_additions_block_the_removals(pod: Callable[..., AutoMemory], llm_server: ScriptedLLM) -> None:
    auto = pod()
    old = auto.add_fact("u1", "Writes backend services in Java", "knowledge", 0.9)
    with AutoPlace(auto.places.user_auto_dir("u1")).transaction() as txn:  # an automatic fact, not manual
        fact = txn.view.facts[old.id]
        fact.source = "auto:s0"
        txn.put_fact(fact)
    llm_server.script(text(json.dumps({
        "newFacts": [{"content": "Writes backend services in Go", "category": "knowledge", "confidence": "bad"}],
        "factsToRemove": [{"id": old.id, "reason": "the user moved from Java to Go", "replacedBy": 0}],
    })))
    # the user's words would allow a removal ("forget ..."): only the broken replacement blocks it
    say(auto, "Forget that I write Java; I write backend services in Go now.")
    assert auto.flush(10)
    assert [f.content for f in auto.list_facts("u1")] == ["Writes backend services in Java"]  # not lost
    assert auto.rejections["removal_with_invalid_additions"] == 1


def test_4_a_replacement_about_something_else_removes_nothing(pod: Callable[..., AutoMemory],
                                                               llm_server: ScriptedLLM) -> None:
    """Seen with Qwen2.5-Coder-0.5B (issue 15): a Chinese user gave their job; the model added it and
    listed an unrelated old fact in factsToRemove with replacedBy pointing at the new fact."""
    auto = pod()
    ids = {}
    for content in ("Has a cat named Miso", "Works on the payments team"):
        old = auto.add_fact("u1", content, "context", 0.9)
        with AutoPlace(auto.places.user_auto_dir("u1")).transaction() as txn:  # learned, not manual
            fact = txn.view.facts[old.id]
            fact.source = "auto:s0"
            txn.put_fact(fact)
        ids[content] = old.id
    llm_server.script(text(json.dumps({
        "newFacts": [{"content": "杭州一家银行的后端工程师，用 Go 写支付服务", "category": "context",
                      "confidence": 0.95},
                     {"content": "Works on the payments platform team", "category": "context", "confidence": 0.95}],
        "factsToRemove": [{"id": ids["Has a cat named Miso"], "reason": "outdated", "replacedBy": 0},
                          {"id": ids["Works on the payments team"], "reason": "renamed", "replacedBy": 1}],
    }, ensure_ascii=False)))
    say(auto, "你好，我是杭州一家银行的后端工程师，主要用 Go 写支付服务。我们组现在叫 payments platform team。")
    assert auto.flush(10)
    left = {f.content for f in auto.list_facts("u1")}
    assert "Has a cat named Miso" in left  # unrelated: kept
    assert "Works on the payments team" not in left  # shares words with its replacement: replaced
    assert auto.rejections["removal_replacement_unrelated"] == 1


# -- 5. uploads never reach the extractor --------------------------------------------------------------
def test_5_current_uploads_blocks_and_upload_only_turns_are_dropped() -> None:
    captured = capture_messages([
        {"role": "user", "content": "<current_uploads>\n- /mnt/user-data/uploads/q3-report.pdf (2.1 MB)\n"
                                    "</current_uploads>"},
        {"role": "assistant", "content": "I see you uploaded q3-report.pdf; it lists revenue by region."},
        {"role": "user", "content": "<current_uploads>\n- /mnt/user-data/uploads/notes.txt\n</current_uploads>\n"
                                    "Which region grew fastest?"},
        {"role": "assistant", "content": "APAC grew fastest."},
    ], "run-1")
    assert [(m.role, m.text) for m in captured] == [("user", "Which region grew fastest?"),
                                                     ("assistant", "APAC grew fastest.")]


# -- 6. upload sentences are scrubbed -------------------------------------------------------------------------
@pytest.mark.parametrize("raw_text, kept", [
    ("User uploaded a test file for verification purposes. Prefers short answers.", "Prefers short answers."),
    ("Checked the CSV parser by uploading a test file titled 'x.txt'. Likes pytest.", "Likes pytest."),
    ("User is uploading document attachments regularly. Works in Go.", "Works in Go."),
    ("Works with CSV files daily. Prefers PDF export.", "Works with CSV files daily. Prefers PDF export."),
])
def test_6_upload_sentences_are_scrubbed(raw_text: str, kept: str) -> None:
    assert scrub_uploads(raw_text) == kept


# -- 7. Chinese reinforcement ----------------------------------------------------------------------------------
@pytest.mark.parametrize("message", ["完全正确，就是这个意思", "以后都保持这样",
                                     "对，我就是喜欢简洁回答，以后都保持这样。"])
def test_7_chinese_reinforcement_is_detected(message: str) -> None:
    assert detect_reinforcement(message)


# -- 8. trivial batches cost nothing -------------------------------------------------------------------------
def test_8_a_batch_of_acknowledgements_makes_no_model_call(pod: Callable[..., AutoMemory],
                                                          llm_server: ScriptedLLM) -> None:
    auto = pod()
    for ack in ("好的", "嗯", "ok", "OK.", "thanks!"):
        say(auto, ack, "👍")
    assert auto.flush(10)
    assert llm_server.chat_requests == []


# -- 9. invented categories keep their facts --------------------------------------------------------------------
def test_9_unknown_categories_map_to_a_known_one() -> None:
    plan = parse_answer(json.dumps({"newFacts": [
        {"content": "Lives in Berlin", "category": "location", "confidence": 0.9},
        {"content": "Knows Rust well", "category": "skills", "confidence": 0.9},
        {"content": "Likes dark themes", "category": "likes", "confidence": 0.9},
        {"content": "Reviews code every morning", "category": "habit", "confidence": 0.9},
        {"content": "Ships the v2 API by March", "category": "objective", "confidence": 0.9},
        {"content": "Has a cat", "category": "pets and animals", "confidence": 0.9},
        {"content": "Numbered category", "category": 9, "confidence": 0.9},
    ]}))
    assert plan is not None
    assert [(f.content, f.category) for f in plan.new_facts] == [
        ("Lives in Berlin", Category.CONTEXT), ("Knows Rust well", Category.KNOWLEDGE),
        ("Likes dark themes", Category.PREFERENCE), ("Reviews code every morning", Category.BEHAVIOR),
        ("Ships the v2 API by March", Category.GOAL), ("Has a cat", Category.CONTEXT),
        ("Numbered category", Category.CONTEXT)]


# -- 10. infinities, flush after abandoned batches, the weekday ----------------------------------------------------
@pytest.mark.parametrize("value", [float("inf"), float("-inf"), "inf", "-Infinity"])
def test_10_an_infinite_stored_confidence_reads_as_the_default(value: object) -> None:
    entry = ManifestEntry(file="fact-0badc0de.md", name="auto preference fact", description="Uses Vim",
                          type="user", size=10, created_at=0.0, updated_at=0.0,
                          extra={"confidence": value, "category": "preference", "source": "auto:s1"})
    fact = fact_from_entry(entry)
    assert fact is not None and fact.confidence == 0.5


def test_10_flush_says_false_when_batches_were_abandoned(pod: Callable[..., AutoMemory],
                                                         llm_server: ScriptedLLM) -> None:
    auto = pod(max_attempts=2)
    llm_server.set_handler(lambda req: error(500, "upstream down"))
    say(auto, USER_SAID)
    assert auto.flush(10) is False
    assert auto.stats.abandoned == 1 and auto.worker.pending_count() == 0
    say(auto, "I also write some Python.", session=f"s-{uuid.uuid4().hex[:6]}")
    llm_server.set_handler(lambda req: text('{"newFacts": []}'))
    assert auto.flush(10) is True  # a later flush that abandons nothing is fine again


def test_10_current_date_carries_the_weekday(pod: Callable[..., AutoMemory]) -> None:
    auto = pod()
    auto.add_fact("u1", "Writes backend services in Go", "knowledge", 0.9)
    block = render_injection_block(AutoPlace(auto.places.user_auto_dir("u1")).read(), None,
                                   today=dt.date(2026, 11, 30))
    assert "<current_date>2026-11-30, Monday</current_date>" in block
