"""Auto memory that reads a weak model right (issue #30's auto-memory defects), each reproduced
with what a 1.5B model answered, through the scripted server, the real capture, updater, apply
rules and store, and the injected block:

* "Remember that" kept as a 0.95 correction — a correction needs a wrong belief and a right one;
* "(avoid: No, don't use pandas … use Polars …)" — the avoided text never holds the corrected belief;
* the user's own fact refused because the model quoted the assistant's reply that repeated it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness_memory.auto import AutoMemory, Category, Fact
from harness_memory.auto.doubt import Conversation, Evidence, mistake_text, says_something
from harness_memory.auto.inject import fact_line
from harness_memory.config import MemoryConfig
from tests.fakellm import ScriptedLLM, text
from tests.helpers import auto_pods


@pytest.fixture
def auto(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> Iterator[AutoMemory]:
    with auto_pods(make_config, llm_server.base_url, light_timeout=5) as pod:
        yield pod()


def learn(auto: AutoMemory, llm: ScriptedLLM, facts: list[dict[str, Any]], *turns: tuple[str, str]) -> None:
    llm.script(text(json.dumps({"newFacts": facts}, ensure_ascii=False)))
    auto.capture("u1", "s1", [m for user, reply in turns for m in ({"role": "user", "content": user},
                                                                   {"role": "assistant", "content": reply})])
    assert auto.flush(10)


def stored(auto: AutoMemory) -> dict[str, Fact]:
    return {f.content: f for f in auto.list_facts("u1")}


# -- a correction needs a wrong belief and a right one ---------------------------------------------
def test_remember_that_is_neither_a_correction_nor_a_fact(auto: AutoMemory, llm_server: ScriptedLLM) -> None:
    learn(auto, llm_server, [
        {"content": "Remember that", "category": "correction", "confidence": 0.95, "sourceError": "Remember that",
         "evidence": "Remember that"},
        {"content": "Deploys on Fridays", "category": "correction", "confidence": 0.8,
         "evidence": "I deploy on Fridays"}],  # a right way with no wrong one: a preference, not raised
        ("No, that's wrong. Remember that I deploy on Fridays.", "Sorry, noted."))
    facts = stored(auto)
    assert set(facts) == {"Deploys on Fridays"}
    assert (facts["Deploys on Fridays"].category, facts["Deploys on Fridays"].confidence) == (Category.PREFERENCE, 0.8)
    assert auto.rejections["no_content"] == 1 and auto.rejections["correction_without_mistake"] == 1


@pytest.mark.parametrize("text_, says", [("Remember that", False), ("remember this!", False), ("请记住", False),
                                         ("别忘了。", False), ("OK, remember it", False), ("that", False),
                                         ("Remember that I use uv", True), ("记住：周五发布", True), ("Uses uv", True)])
def test_says_something(text_: str, says: bool) -> None:
    assert says_something(text_) is says


# -- the avoided text never holds the corrected belief ---------------------------------------------
def test_the_users_whole_correction_as_source_error(auto: AutoMemory, llm_server: ScriptedLLM) -> None:
    said = "No, don't use pandas for this, use Polars instead."
    learn(auto, llm_server, [{"content": "Use Polars, not pandas, for dataframes", "category": "correction",
                              "confidence": 0.95, "sourceError": said, "evidence": said}],
          ("Load the CSV and sum by month.", "Here it is with pandas: pd.read_csv(...)"), (said, "Switched to Polars."))
    [fact] = auto.list_facts("u1")
    assert fact.category is Category.CORRECTION and fact.source_error == "pandas"
    block = auto.render_injection("u1")
    assert "- Use Polars, not pandas, for dataframes (avoid: pandas)" in block


NAMES = st.sampled_from(["pandas", "Polars", "npm", "pnpm", "pip", "uv", "Go", "Rust", "Excel", "LibreOffice"])
WRONG_AS_SAID = ["No, don't use {y}, use {x}.", "That's wrong: use {x} instead of {y}", "不对，别用 {y}，用 {x}",
                 "Use {x}, not {y}", "no no, stop using {y} and use {x} from now on", "{x}, not {y}"]


@given(x=NAMES, y=NAMES, said=st.sampled_from(WRONG_AS_SAID),
       content=st.sampled_from(["Use {x}, not {y}", "Always use {x} instead of {y}", "用 {x}，不要用 {y}"]))
def test_the_avoid_text_never_says_to_use_the_right_way(x: str, y: str, said: str, content: str) -> None:
    if x.casefold() == y.casefold():
        return
    fact = Fact("fact-1", content.format(x=x, y=y), Category.CORRECTION, 0.95, source_error=said.format(x=x, y=y))
    line = fact_line(fact)
    avoid = line.split("(avoid: ", 1)[1].rstrip(")") if "(avoid: " in line else ""
    assert x.casefold() not in re.findall(r"[\w.+#-]+", avoid.casefold())  # the right way is never avoided
    assert mistake_text(fact.content, "Ran pip install") == "Ran pip install"  # a real mistake is kept as said


# -- evidence by where the fact's words come from --------------------------------------------------
def test_a_quote_of_the_assistant_does_not_throw_the_users_fact_away(auto: AutoMemory,
                                                                     llm_server: ScriptedLLM) -> None:
    user = "I write all my data scripts with Polars, never pandas."
    reply = "Understood, your data scripts will use Polars from now on."
    learn(auto, llm_server, [
        {"content": "Writes data scripts with Polars", "category": "preference", "confidence": 0.9,
         "evidence": reply},  # the model quoted the assistant
        {"content": "Prefers the RDataFrame API", "category": "preference", "confidence": 0.9,
         "evidence": "You could also try the RDataFrame API"}],  # the assistant's own idea: still refused
        (user, reply + " You could also try the RDataFrame API."))
    assert set(stored(auto)) == {"Writes data scripts with Polars"}
    assert auto.rejections["assistant_only"] == 1
    convo = Conversation.of([user], [reply])
    assert convo.evidence("Writes data scripts with Polars", reply) is Evidence.USER
    assert convo.evidence("Scripts will use Polars from now on", reply) is Evidence.USER
    assert convo.evidence("Understood everything from now", reply) is Evidence.ASSISTANT_ONLY
