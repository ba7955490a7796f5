"""Placeholder-proof prompts: the agent is shown a concrete example, and ``save_file`` refuses
text copied from any of our examples or templates with a message the model can act on.

The failure reproduced: a 1.5B model saved the prompt's frontmatter template
(``description: one line saying what this memory holds``) in 3 of 5 saves, so the next session's
MEMORY.md said nothing. Here the scripted model does the same through ``build_agent``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness_memory import build_agent
from harness_memory.auto.prompt import EXAMPLE_CONVERSATION, example_texts
from harness_memory.config import MemoryConfig
from harness_memory.examples import (
    DESCRIPTION_HINT,
    EXAMPLE_BODY,
    EXAMPLE_DESCRIPTION,
    FRONTMATTER_EXAMPLE,
    copied_example,
)
from harness_memory.services import services_for
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
    (GOOD.replace("Data engineer at Nordwind; writes Airflow DAGs in Python", DESCRIPTION_HINT), DESCRIPTION_HINT),
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
    for example in [EXAMPLE_DESCRIPTION, EXAMPLE_BODY, DESCRIPTION_HINT, *example_texts(),
                    "what the assistant did wrong", "I am a frontend engineer"]:
        assert copied_example(example) is not None, example
        assert copied_example(f"  {example.upper()}!! ") is not None, example
    assert copied_example(EXAMPLE_CONVERSATION.split(".")[0].removeprefix("User: ")) is not None
    assert copied_example("<one line description>") is not None and copied_example("TODO") is not None
    for real in ["Data engineer at Nordwind; writes Airflow DAGs", "偏好用中文写周报", "Runs the Lyon office's payroll",
                 "user_role"]:
        assert copied_example(real) is None, real
