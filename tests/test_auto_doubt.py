"""Auto memory that doubts the model (issue #15): scripted answers that imitate what a small model
did in real runs — copied placeholders, invented and reversed corrections, removals of correct
facts, the assistant's words as user facts, task-scoped facts — are refused, counted and logged."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness_memory.auto import AutoMemory, Category
from harness_memory.auto.doubt import contradicts_user
from harness_memory.auto.prompt import PLACEHOLDERS, example_answer, system_prompt
from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from tests.fakellm import ScriptedLLM, text


@pytest.fixture
def auto(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> Iterator[AutoMemory]:
    cfg = make_config(model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      auto={"debounce_seconds": 3600, "max_attempts": 1})
    services = MemoryServices.from_config(cfg)
    memory = services.new_auto_memory(start_worker=False)
    yield memory
    memory.close(1)
    services.close()


def learn(auto: AutoMemory, llm: ScriptedLLM, answer: dict[str, Any], *turns: tuple[str, str]) -> None:
    """One extraction: the conversation ``turns`` (user, assistant) and the model's ``answer``."""
    llm.script(text(json.dumps(answer, ensure_ascii=False)))
    messages = [m for user, reply in turns for m in ({"role": "user", "content": user},
                                                     {"role": "assistant", "content": reply})]
    auto.capture("u1", "s1", messages)
    assert auto.flush(10)


def contents(auto: AutoMemory) -> list[str]:
    return sorted(f.content for f in auto.list_facts("u1"))


def test_the_prompt_example_is_concrete_and_marked_as_an_example() -> None:
    prompt = system_prompt(0.7, __import__("datetime").date(2026, 3, 2))
    assert "EXAMPLE — a made-up user" in prompt and "Never copy its text" in prompt
    assert '"..."' not in prompt and "what the assistant did wrong" not in prompt
    assert "I am a frontend engineer" not in prompt
    for fact in example_answer(__import__("datetime").date(2026, 3, 2))["newFacts"]:
        assert PLACEHOLDERS.copied(fact["content"]) and PLACEHOLDERS.copied(fact["evidence"])


def test_placeholders_never_become_memories(auto: AutoMemory, llm_server: ScriptedLLM,
                                            caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "harness_memory.auto")
    example = example_answer(__import__("datetime").date.today())
    learn(auto, llm_server, {
        "user": {"workContext": {"summary": example["user"]["workContext"]["summary"], "shouldUpdate": True},
                 "personalContext": {"summary": "Prefers short answers in English.", "shouldUpdate": True}},
        "newFacts": [
            {"content": "I am a frontend engineer", "category": "context", "confidence": 0.95},  # the old example
            {"content": "Uses Rust for CLI tools", "category": "correction", "confidence": 0.95,
             "sourceError": "what the assistant did wrong"},
            *example["newFacts"],  # the current example, copied whole
            {"content": "...", "category": "preference", "confidence": 0.9},
            {"content": "<the fact>", "category": "preference", "confidence": 0.9},
            {"content": "Is a data scientist", "category": "context", "confidence": 0.95,
             "evidence": "I'm a data scientist"},
        ]}, ("I'm a data scientist. Short answers in English, please.", "OK, here is a Go CLI."),
        ("No, actually: use Rust for CLI tools, not Go.", "Rewritten in Rust."))
    assert contents(auto) == ["Is a data scientist", "Uses Rust for CLI tools"]
    [rust] = [f for f in auto.list_facts("u1") if f.content == "Uses Rust for CLI tools"]
    # the placeholder source dropped; with no wrong belief left it is no correction (issue #30)
    assert rust.category is Category.PREFERENCE and rust.source_error is None
    assert auto.rejections["correction_without_mistake"] == 1
    profile = auto.get_profile("u1")
    assert "workContext" not in profile.to_json() and profile.to_json()["personalContext"].startswith("Prefers")
    assert auto.rejections["placeholder"] == 7 and auto.rejections["placeholder_source_error"] == 1
    assert "refused 'I am a frontend engineer' (placeholder)" in caplog.text


def test_an_example_text_the_user_really_said_is_kept(auto: AutoMemory, llm_server: ScriptedLLM) -> None:
    learn(auto, llm_server, {"newFacts": [{"content": "I am a frontend engineer", "category": "context",
                                           "confidence": 0.95, "evidence": "I am a frontend engineer"}]},
          ("Hi, I am a frontend engineer at a bank.", "Welcome!"))
    assert contents(auto) == ["I am a frontend engineer"]


def test_a_correction_needs_the_users_correction(auto: AutoMemory, llm_server: ScriptedLLM) -> None:
    # invented: the user corrected nothing
    learn(auto, llm_server, {"newFacts": [{"content": "Use pandas instead of Polars", "category": "correction",
                                           "confidence": 0.95, "sourceError": "used Polars"}]},
          ("Load the CSV with Polars and show the first rows.", "Here are the first rows."))
    # reversed: the user said the opposite
    learn(auto, llm_server, {"newFacts": [{"content": "Use pandas instead of Polars", "category": "correction",
                                           "confidence": 0.95, "sourceError": "used Polars",
                                           "evidence": "don't use pandas for this, use Polars"}]},
          ("No, don't use pandas for this, use Polars.", "Switched to Polars."))
    assert contents(auto) == []
    assert auto.rejections["correction_without_signal"] == 1 and auto.rejections["correction_reversed"] == 1
    # the right way round, with the user's correction: kept, raised to 0.95
    learn(auto, llm_server, {"newFacts": [{"content": "Use Polars, not pandas, for dataframes",
                                           "category": "correction", "confidence": 0.8,
                                           "sourceError": "used pandas"}]},
          ("That's wrong, don't use pandas, use Polars.", "Switched to Polars."))
    [fact] = auto.list_facts("u1")
    assert (fact.category, fact.confidence, fact.source_error) == (Category.CORRECTION, 0.95, "used pandas")


def test_removals_need_a_reason_and_are_capped(auto: AutoMemory, llm_server: ScriptedLLM) -> None:
    for i, lang in enumerate(["Go", "Rust", "Python", "Kotlin", "Swift"]):
        auto.add_fact("u1", f"Writes {lang} at work", "knowledge", 0.9)
        auto.update_fact("u1", auto.list_facts("u1")[i].id)  # (a person's facts first; made automatic below)
    from harness_memory.auto import AutoPlace

    with AutoPlace(auto.places.user_auto_dir("u1")).transaction() as txn:
        for fact in list(txn.view.facts.values()):
            fact.source = "auto:s0"
            txn.put_fact(fact)
    ids = {f.content: f.id for f in auto.list_facts("u1")}
    # the model drops facts the conversation never touched: refused
    learn(auto, llm_server, {"newFacts": [], "factsToRemove": [ids["Writes Go at work"], ids["Writes Rust at work"]]},
          ("What's a good name for a cat?", "Miso."))
    assert len(auto.list_facts("u1")) == 5 and auto.rejections["removal_without_reason"] == 2
    # a replacement that was refused (low confidence) does not delete either
    learn(auto, llm_server, {"newFacts": [{"content": "Writes Zig at work", "category": "knowledge",
                                           "confidence": 0.3}],
                             "factsToRemove": [{"id": ids["Writes Go at work"], "reason": "zig", "replacedBy": 0}]},
          ("I write Zig at work now.", "Nice."))
    assert "Writes Go at work" in contents(auto) and auto.rejections["removal_replacement_refused"] == 1
    # the user asks to forget everything: at most max_removals_per_update (3) go in one update
    learn(auto, llm_server, {"newFacts": [], "factsToRemove": [{"id": i, "reason": "asked"} for i in ids.values()]},
          ("Forget what I said about the languages I use at work.", "Done."))
    assert len(auto.list_facts("u1")) == 2 and auto.rejections["removal_cap"] == 2


def test_facts_only_the_assistant_said_are_not_user_facts(auto: AutoMemory, llm_server: ScriptedLLM) -> None:
    learn(auto, llm_server, {"newFacts": [
        {"content": "Uses Docker Compose for local development", "category": "preference", "confidence": 0.9,
         "evidence": "You should use Docker Compose for local development"},
        {"content": "Runs Kubernetes clusters on bare metal hardware", "category": "context", "confidence": 0.9},
        {"content": "Works on a payments API", "category": "context", "confidence": 0.9,
         "evidence": "I work on a payments API"},
    ]}, ("I work on a payments API. How do I run it locally?",
         "You should use Docker Compose for local development. Many teams also run Kubernetes clusters on "
         "bare metal hardware."))
    assert contents(auto) == ["Works on a payments API"]
    assert auto.rejections["assistant_only"] == 2


def test_task_scoped_facts_stay_out_of_user_memory(auto: AutoMemory, llm_server: ScriptedLLM) -> None:
    learn(auto, llm_server, {"newFacts": [
        {"content": "This repo uses Poetry for packaging", "category": "context", "confidence": 0.9},
        {"content": "The file the user uploaded holds Q3 numbers", "category": "context", "confidence": 0.9},
        {"content": "这个项目用 pnpm workspace", "category": "context", "confidence": 0.9},
        {"content": "Is fixing a flaky login test", "category": "goal", "confidence": 0.9, "scope": "task"},
        {"content": "Packages Python projects with Poetry", "category": "preference", "confidence": 0.9},
    ]}, ("This repo uses Poetry; I package all my Python projects with Poetry. 这个项目用 pnpm workspace。"
         " The login test is flaky.", "OK."))
    assert contents(auto) == ["Packages Python projects with Poetry"]
    assert auto.rejections["task_scope"] == 3 and auto.rejections["upload"] == 1


# -- a fact that puts forward what the user has just rejected (issue #30, correction_en) ----------
_NAMES = st.from_regex(r"[A-Z][a-z]{2,8}|[a-z]{3,9}|[A-Z]{2,5}", fullmatch=True)
_USER_SAYS_NO = ("No, don't use {bad} for this — use {good}. Remember that.", "Stop using {bad}; use {good} instead.",
                 "Never use {bad}. Use {good}.", "Use {good}, not {bad}.", "Please use {good} instead of {bad}.",
                 "不要用 {bad}，改用 {good}。请记住。", "别用 {bad}，用 {good}。", "以后不许用 {bad}，改用 {good}。")
_PUTS_FORWARD = ("Uses {bad} to load CSV files", "Computes the mean with {bad}", "Prefers {bad} for dataframes",
                 "Use {bad} for the dataframe library", "Always use {bad}", "The team deploys with {bad}",
                 "部署使用 {bad}", "喜欢用 {bad} 处理数据", "Loads data with {bad}.read_csv")
_NAMES_TO_AVOID = ("Prefers {good} over {bad}", "Use {good} instead of {bad}", "Never use {bad}; use {good}",
                   "Always use {good} for dataframes, not {bad} or NumPy", "Switched from {bad} to {good}",
                   "{bad} is replaced by {good}", "{good}, not {bad}", "Does not want {bad}",
                   "User rejects {bad}", "Uses {good} rather than {bad}", "团队用 {good} 替代 {bad}",
                   "{bad} 换成 {good}", "只用 {good}，不用 {bad}", "不要用 {bad} 和 Travis，用 {good}",
                   "Wants {good}, never {bad}")


@settings(max_examples=200, deadline=None)
@given(_NAMES, _NAMES, st.sampled_from(_USER_SAYS_NO), st.sampled_from(_PUTS_FORWARD),
       st.sampled_from(_NAMES_TO_AVOID))
def test_a_fact_putting_forward_what_the_user_rejected_is_found(
        bad: str, good: str, said: str, forward: str, avoid: str) -> None:
    assume(bad.casefold() != good.casefold() and bad.casefold() not in good.casefold()
           and good.casefold() not in bad.casefold() and bad.casefold() not in _STOPWORDS)
    user = ["Load this CSV and give me the mean.", said.format(bad=bad, good=good)]
    assert contradicts_user(forward.format(bad=bad, good=good), user) == {bad.casefold()}
    assert contradicts_user(avoid.format(bad=bad, good=good), user) == set()
    assert contradicts_user(f"Prefers {good} for dataframes", user) == set()
    # the user said both at some point ("use X" later): no longer rejected, nothing is found
    assert contradicts_user(forward.format(bad=bad, good=good), [*user, f"OK, actually use {bad} again."]) == set()


_STOPWORDS = frozenset({"not", "use", "and", "the", "for", "never", "stop", "instead", "over", "than", "from", "with",
                        "using", "only", "always", "don", "this", "data", "csv", "load", "mean", "give", "please",
                        "remember", "that", "rather", "team", "travis", "numpy", "wants", "user", "rejects", "does",
                        "want", "uses", "prefers", "computes", "deploys", "loads", "read", "switched", "replaced",
                        "files", "library", "dataframe", "dataframes", "again", "actually"})


def test_a_plain_fact_contradicting_the_users_correction_is_refused(auto: AutoMemory, llm_server: ScriptedLLM
                                                                    ) -> None:
    """What the 1.5B model proposed beside the assistant's pandas code: not labelled a correction,
    most of its words the user's — refused whatever its category; the right fact is kept."""
    learn(auto, llm_server, {"newFacts": [
        {"content": "Uses pandas to load the CSV and compute the mean of the price column", "category": "knowledge",
         "confidence": 0.9, "evidence": "Load this CSV and give me the mean of the price column."},
        {"content": "Prefers pandas for dataframes", "category": "preference", "confidence": 0.9},
        {"content": "Always use Polars for dataframes, not pandas", "category": "correction", "confidence": 0.9,
         "sourceError": "used pandas", "evidence": "I always want Polars for dataframes"}]},
        ("Load this CSV and give me the mean of the price column.",
         "import pandas as pd\ndf = pd.read_csv('data.csv')\nprint(df['price'].mean())"),
        ("No, don't use pandas for this — use Polars. I always want Polars for dataframes. Remember that.",
         "import polars as pl\nprint(pl.read_csv('data.csv')['price'].mean())"))
    assert contents(auto) == ["Always use Polars for dataframes, not pandas"]
    assert auto.rejections["contradicts_user"] == 2
