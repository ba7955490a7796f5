"""Placeholder-proof prompts: the agent is shown a concrete example, and ``save_file`` refuses
text copied from any of our examples or templates with a message the model can act on.

The failure reproduced: a 1.5B model saved the prompt's frontmatter template
(``description: one line saying what this memory holds``) in 3 of 5 saves, so the next session's
MEMORY.md said nothing. Here the scripted model does the same through ``build_agent``.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness_memory import build_agent
from harness_memory.auto.doubt import Conversation
from harness_memory.auto.prompt import EXAMPLE_CONVERSATION, PLACEHOLDERS, example_texts
from harness_memory.config import MemoryConfig
from harness_memory.examples import (
    EXAMPLE_BODY,
    EXAMPLE_DESCRIPTION,
    FRONTMATTER_EXAMPLE,
    MIN_FRAGMENT_CHARS,
    bare_placeholder,
    copied_example,
    normalize_text,
    registry,
)
from harness_memory.services import services_for
from harness_memory.session.summary import SummaryRejected, parse_summary, render_summary, summary_system_prompt
from tests.fakellm import ScriptedLLM, text, tool_calls

OLD_TEMPLATE = ("---\nname: user_role\ndescription: one line saying what this memory holds\ntype: user\n---\n\n"
                "The memory itself, in markdown.\n")
GOOD = ("---\nname: user_role\ndescription: Data engineer at Nordwind; writes Airflow DAGs in Python\n"
        "type: user\n---\n\nData engineer at Nordwind Logistics; writes Airflow DAGs in Python.\n")


@pytest.fixture
def cfg(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> MemoryConfig:
    return make_config(model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                       session={"enabled": False}, auto={"enabled": False}, recall={"enabled": False})


def tool_results(server: ScriptedLLM) -> list[str]:
    """The tool results the model saw, in order (the last request carries the whole run)."""
    return [str(m.get("content")) for m in server.chat_requests[-1].messages if m.get("role") == "tool"]


@pytest.mark.parametrize("content, refused", [
    (OLD_TEMPLATE, "one line saying what this memory holds"),  # the template of the first prompt
    (FRONTMATTER_EXAMPLE, EXAMPLE_DESCRIPTION),  # today's example, copied whole
    (GOOD.replace("Data engineer at Nordwind; writes Airflow DAGs in Python", EXAMPLE_DESCRIPTION.upper() + " !"),
     EXAMPLE_DESCRIPTION),  # other case and punctuation: still a copy
    (GOOD.replace("Data engineer at Nordwind Logistics; writes Airflow DAGs in Python.", EXAMPLE_BODY),
     "The body"),  # a real description over the example's body
    (GOOD.replace("Data engineer at Nordwind; writes Airflow DAGs in Python", "I run a bakery in Lyon"),
     "bakery"),  # the extraction prompt's example is in the same registry
])
def test_save_file_refuses_copied_examples_then_accepts_a_real_memory(
        cfg: MemoryConfig, llm_server: ScriptedLLM, content: str, refused: str) -> None:
    llm_server.script(tool_calls([("save_file", {"file_name": "user_role.md", "content": content})]),
                      tool_calls([("save_file", {"file_name": "user_role.md", "content": GOOD})]),
                      text("Saved."))
    build_agent("u1", config=cfg).run("I'm a data engineer at Nordwind Logistics, I write Airflow DAGs. "
                                      "Remember this.")
    first, second = tool_results(llm_server)
    assert first.startswith("Error:") and "copied from the example" in first and "Nothing was saved" in first
    assert refused.casefold() in first.casefold() or (refused == "The body" and "the body" in first)
    assert "save_file again" in first  # the model is told what to do next
    assert second.startswith("Created memory user_role.md")
    own = services_for(cfg).user_agent_dir("u1")
    assert [(e.file, e.description) for e in own.list_entries()] == [
        ("user_role.md", "Data engineer at Nordwind; writes Airflow DAGs in Python")]


def test_replace_chunk_refuses_an_example_as_new_text(cfg: MemoryConfig, llm_server: ScriptedLLM) -> None:
    services_for(cfg).user_agent_dir("u1").save("user_role.md", GOOD)
    llm_server.script(tool_calls([("replace_file_chunk", {"file_name": "user_role.md", "old_chunk": "Airflow",
                                                          "new_chunk": "one line saying what this memory holds"})]),
                      text("ok"))
    build_agent("u1", config=cfg).run("update it")
    (result,) = tool_results(llm_server)
    assert result.startswith("Error:") and "Nothing was changed" in result
    assert services_for(cfg).user_agent_dir("u1").read("user_role.md").text == GOOD


def test_prompt_shows_a_concrete_example_introduced_as_one(cfg: MemoryConfig, llm_server: ScriptedLLM) -> None:
    llm_server.script(text("hi"))
    build_agent("u1", config=cfg).run("hello")
    system = "\n".join(str(m.get("content")) for m in llm_server.chat_requests[0].messages
                       if m.get("role") in ("system", "developer"))
    assert FRONTMATTER_EXAMPLE in system and "made-up user" in system and "refused" in system
    assert "one line saying what this memory holds" not in system  # the old template is gone
    assert "The memory itself, in markdown" not in system


def test_the_format_holds_the_extraction_examples_as_data() -> None:
    """``examples.EXTRACTION_EXAMPLES`` is a copy of the prompt's example texts (the format below
    must not import the prompt): editing one without the other fails here."""
    from harness_memory.examples import EXTRACTION_EXAMPLES

    assert set(example_texts()) == set(EXTRACTION_EXAMPLES)


def test_one_registry_covers_every_example_and_real_text_passes() -> None:
    for example in [EXAMPLE_DESCRIPTION, EXAMPLE_BODY, *example_texts(),
                    "what the assistant did wrong", "I am a frontend engineer"]:
        assert copied_example(example) is not None, example
        assert copied_example(f"  {example.upper()}!! ") is not None, example
    assert copied_example(EXAMPLE_CONVERSATION.split(".")[0].removeprefix("User: ")) is not None
    assert copied_example("<one line description>") is not None and copied_example("TODO") is not None
    for real in ["Data engineer at Nordwind; writes Airflow DAGs", "偏好用中文写周报", "Runs the Lyon office's payroll",
                 "user_role"]:
        assert copied_example(real) is None, real


# -- issue #30: every example we send a model, and pieces of them ------------------------------------
def _quoted(text: str) -> list[str]:
    """The quoted multi-word texts (examples) in a tool description or a template."""
    return [q for q in re.findall(r'"([^"\n]{3,200})"', text) if " " in q.strip()]


def _strings(data: object) -> list[str]:
    """Every string in a JSON value (the tool schemas as sent: descriptions of tools and parameters)."""
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        return [s for v in data.values() for s in _strings(v)]
    if isinstance(data, list):
        return [s for v in data for s in _strings(v)]
    return []


def test_every_example_in_the_tool_descriptions_sent_is_refused(cfg: MemoryConfig, llm_server: ScriptedLLM) -> None:
    llm_server.script(text("hi"))
    build_agent("u1", config=cfg).run("hello")
    examples = [q for description in _strings(llm_server.chat_requests[0].tools) for q in _quoted(description)]
    assert "staging database password rotation" in examples  # search_memories' example, as the model saw it
    for example in examples:
        assert copied_example(example) is not None, example
        assert copied_example(f"Remember: {example}.") is not None, example


def test_the_summary_template_title_is_never_a_summary_title() -> None:
    template = summary_system_prompt(4000)
    title_line = next(line for line in template.splitlines() if line.startswith("# "))
    assert copied_example(title_line) is not None and copied_example(title_line.lstrip("# ")) is not None
    copy = "\n".join(line for line in template.splitlines() if line.startswith("#") or line.startswith("<"))
    with pytest.raises(SummaryRejected):  # the whole template handed back: every section is a placeholder
        parse_summary(copy)
    answer = title_line + "\n## Current State\n- tests pass\n## Task\n- fix the build\n## Worklog\n- ran make"
    doc = parse_summary(answer)
    assert doc.title == "" and doc.sections["state"] == "- tests pass"
    assert render_summary(doc, 4000).startswith("# Session summary\n")


@pytest.mark.parametrize("piece", [
    "Keeps the accounts in LibreOffice Calc.",  # the clause of the worked example's profile summary
    "keeps the accounts in libreoffice calc",
    "database password rotation",  # a piece of search_memories' example
    "Their warehouse is BigQuery",  # a sentence of the memory-file example's body
])
def test_pieces_of_examples_are_copies_too(piece: str) -> None:
    assert copied_example(piece) is not None
    assert PLACEHOLDERS.copied(piece, Conversation.of(["I run a shop."], []))  # the auto-memory check agrees
    assert not PLACEHOLDERS.copied(piece, Conversation.of([f"Note: {piece}"], []))  # unless the user said it


@given(st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1, max_size=40))
def test_the_copy_check_never_raises_and_short_texts_need_a_whole_match(words: str) -> None:
    hit = copied_example(words)
    if hit is not None and len(normalize_text(words)) < MIN_FRAGMENT_CHARS:
        assert hit in registry()._norm or bare_placeholder(words) or any(  # type: ignore[attr-defined]
            len(e) >= 12 and e in normalize_text(words) for e in registry()._norm)  # type: ignore[attr-defined]


def test_a_tool_error_message_echoed_back_is_no_memory(cfg: MemoryConfig, llm_server: ScriptedLLM) -> None:
    """A weak model answered with the tool's error message; saved as a memory it would tell the
    next session nothing (the error of the first save is the second save's description)."""
    llm_server.script(tool_calls([("save_file", {"file_name": "user_role.md", "content": OLD_TEMPLATE})]), text("x"))
    build_agent("u1", config=cfg).run("I'm a data engineer. Remember this.")
    (error,) = tool_results(llm_server)
    assert copied_example(error) is not None and copied_example(" ".join(error.split()[:12])) is not None
    echo = GOOD.replace("Data engineer at Nordwind; writes Airflow DAGs in Python", " ".join(error.split()[:14]))
    llm_server.script(tool_calls([("save_file", {"file_name": "user_role.md", "content": echo})]), text("x"))
    build_agent("u1", config=cfg).run("Remember it.")
    (again,) = tool_results(llm_server)
    assert again.startswith("Error:") and services_for(cfg).user_agent_dir("u1").list_entries() == []
    assert PLACEHOLDERS.copied("Nothing was saved. Write the description as one line", Conversation.of(["hi"], []))
