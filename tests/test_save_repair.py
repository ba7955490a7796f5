"""The save tool repairs what a small model got recoverably wrong, and refuses the rest (issue 30).

Seen with Qwen2.5-Coder-1.5B on llama.cpp (bench/QUALITY.md): ``description: Atlas project: code
freeze is on 2027-01-15`` refused as invalid YAML (the second ``: ``), then the model answered the
user with the file; ``user_role.md`` with name and type but no description refused, then the model
told the user to add one. Each time the missing or broken part was already said in the model's own
words. These tests generate the class: any one-line text as an unquoted value, any missing field.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness_memory.layout import Place
from harness_memory.memdir import (
    MemoryDir,
    MemoryType,
    fill_missing_fields,
    parse_memory,
    quote_plain_values,
)
from harness_memory.memdir.model import clean_line
from harness_memory.storage import LocalStore
from harness_memory.tools import MemoryTools

COLON = ("---\nname: atlas freeze\ndescription: Atlas project: code freeze is on 2027-01-15 and Priya owns the "
         "release.\ntype: project\n---\n\nCode freeze on 2027-01-15; Priya owns the release.\n")


def tools_at(tmp_path: Any) -> MemoryTools:
    return MemoryTools(MemoryDir(LocalStore(tmp_path), Place.user_agent("u", "default")))


def test_a_description_with_a_colon_is_saved_as_written(tmp_path: Any) -> None:
    tools = tools_at(tmp_path)
    answer = tools.save_file("project_release_freeze.md", COLON)
    assert answer.startswith("Created memory project_release_freeze.md (project: Atlas project: code freeze"), answer
    assert "The description held YAML signs" in answer and "it was quoted" in answer
    saved = parse_memory(tools.own.read("project_release_freeze.md").text)
    assert saved.description == "Atlas project: code freeze is on 2027-01-15 and Priya owns the release."
    assert saved.body.startswith("Code freeze on 2027-01-15")


def test_what_cannot_be_repaired_is_refused_and_the_model_is_told_to_retry(tmp_path: Any) -> None:
    tools = tools_at(tmp_path)
    broken = "---\nname: x\ndescription: fine\ntype: user\ntags: [unclosed\n---\n\nbody\n"  # not name/description
    answer = tools.save_file("user_x.md", broken)
    assert answer.startswith("Error: the frontmatter is not valid YAML")
    assert answer.endswith("Nothing was saved. Fix this and call save_file again.")
    wrong_type = COLON.replace("type: project", "type: projekt")  # a wrong type is the model's statement
    assert "type 'projekt' is not one of" in tools.save_file("project_release_freeze.md", wrong_type)
    no_prefix = "---\nname: n\ndescription: d\n---\n\nbody\n"  # a type nothing says
    assert tools.save_file("notes.md", no_prefix).startswith("Error: the frontmatter is missing type")
    assert tools.own.list_entries() == []


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=120),
       st.sampled_from(["name", "description"]))
def test_quoting_keeps_every_character_of_a_one_line_value(value: str, key: str) -> None:
    """Any one-line text written unquoted: either YAML reads it already, or the repaired file reads
    back exactly the same text (never a shortened or changed value), or it is refused."""
    value = value.strip()
    assume(value and value[0] not in "'\"|>" and "\n" not in value and "\r" not in value)
    other = "description: d" if key == "name" else "name: n"
    text = f"---\n{key}: {value}\n{other}\ntype: user\n---\n\nbody\n"
    fixed, quoted = quote_plain_values(text)
    try:
        yaml.safe_load(text.split("---\n")[1])
        assert quoted == ()  # valid YAML is never touched
        return
    except yaml.YAMLError:
        pass
    if quoted:
        assert quoted == (key,)
        assert yaml.safe_load(fixed.split("---\n")[1])[key] == value
    else:
        assert fixed == text


def test_a_missing_description_comes_from_the_first_line_of_the_memory(tmp_path: Any) -> None:
    tools = tools_at(tmp_path)
    text = "---\nname: role\ntype: user\n---\n\n## Role\n- Data engineer at Nordwind; writes Airflow DAGs.\n"
    answer = tools.save_file("user_role.md", text)
    assert 'description "Role" (from the first line of the memory)' in answer, answer
    text = "---\nname: role\ntype: user\n---\n\n- Data engineer at Nordwind; writes **Airflow** DAGs.\n"
    tools.save_file("user_role2.md", text)
    assert parse_memory(tools.own.read("user_role2.md").text).description == \
        "Data engineer at Nordwind; writes Airflow DAGs."


def test_an_empty_memory_is_refused_for_what_it_is(tmp_path: Any) -> None:
    """No text and nothing else that says what the memory holds: refused, saying the text is empty
    (it used to be called "copied from the example")."""
    tools = tools_at(tmp_path)
    text = "---\ntype: user\nname: Nordwind Logistics Data Engineer\n---"
    answer = tools.save_file("user_role.md", text)
    assert answer.startswith("Error: the frontmatter is missing description"), answer
    answer = tools.save_file("user_role.md", text.replace("---\ntype", "---\ndescription: role\ntype"))
    assert answer.startswith("Error: the memory text is empty") and "copied" not in answer
    assert answer.count("again") == 1 and tools.own.list_entries() == []


def test_a_file_without_frontmatter_gets_one_when_its_name_says_the_type(tmp_path: Any) -> None:
    tools = tools_at(tmp_path)
    answer = tools.save_file("feedback_date_format.md", "Write dates as ISO 8601 (2026-12-01), never 12/01.\n")
    assert answer.startswith("Created memory feedback_date_format.md (feedback: Write dates as ISO 8601"), answer
    saved = parse_memory(tools.own.read("feedback_date_format.md").text)
    assert saved.name == "date format" and saved.body == "Write dates as ISO 8601 (2026-12-01), never 12/01.\n"
    assert tools.save_file("dates.md", "Write dates as ISO 8601.").startswith("Error: a memory file must start")


@settings(max_examples=200, deadline=None)
@given(body=st.text(max_size=200), kind=st.sampled_from(list(MemoryType)),
       drop=st.sets(st.sampled_from(["name", "description", "type"]), min_size=1),
       extra=st.dictionaries(st.sampled_from(["tags", "owner"]), st.text(max_size=20), max_size=2))
def test_filling_keeps_what_was_written_and_fills_only_what_is_missing(body: str, kind: MemoryType, drop: set[str],
                                                                      extra: dict[str, str]) -> None:
    front = {"name": "the name", "description": "what this memory is about", "type": kind.value, **extra}
    whole = "---\n" + "\n".join(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in front.items()) \
        + "\n---\n\n" + body
    try:
        expected = parse_memory(whole)  # the file as it would be with every field written
    except Exception:
        assume(False)
    text = "---\n" + "\n".join(f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in front.items()
                                if k not in drop) + "\n---\n\n" + body
    fixed, filled = fill_missing_fields(text, f"{kind.value}_some_topic.md")
    has_text = any(ch.isalnum() or ch == "_" for ch in body)
    if "body" in filled and filled["body"].source == "the description":  # no text at all: the description is it
        assert not body.strip() and "description" not in drop
        memory = parse_memory(fixed)
        assert memory.body.strip() == "what this memory is about" and set(filled) - {"body"} <= drop
        assert memory.extra == expected.extra  # keys that could not be the text stay where they were
        assert memory.type is kind
        return
    if "body" in filled:  # no text, other keys: the keys became the text (and the name the description)
        assert not has_text and expected.extra
        memory = parse_memory(fixed)
        assert memory.extra == {} and all(f"- {k}: " in memory.body for k in expected.extra)
        assert set(filled) - {"body"} <= drop and memory.type is kind
        return
    assert set(filled) <= drop and fixed.endswith(body)
    if "description" in drop and not has_text:
        assert "description" not in filled  # nothing to take it from: refused, not invented
        return
    memory = parse_memory(fixed)
    assert memory.type is kind and memory.body == expected.body and memory.extra == expected.extra
    assert memory.name == ("some topic" if "name" in drop else "the name")
    if "description" not in drop:
        assert memory.description == "what this memory is about"
    else:
        assert memory.description and memory.description in clean_line(body.replace("**", ""))


def test_a_memory_written_as_frontmatter_keys_gets_them_as_its_text(tmp_path: Any) -> None:
    """What the 1.5B model wrote most often: the facts as extra keys, no description, no text. The
    keys become the text (moved, not copied), the name the description; the answer says so."""
    tools = tools_at(tmp_path)
    text = ("---\ntype: user\nname: Nordwind Logistics Data Engineer\nrole: Data engineer\nskills:\n"
            "- Python programming\n- Airflow DAGs development\n---")
    answer = tools.save_file("user_role.md", text)
    assert answer.startswith("Created memory user_role.md (user: Nordwind Logistics Data Engineer)"), answer
    assert "lacked description, the memory text" in answer and "(from the frontmatter keys)" in answer
    saved = parse_memory(tools.own.read("user_role.md").text)
    assert saved.extra == {}
    assert saved.body == "- role: Data engineer\n- skills: Python programming, Airflow DAGs development\n"
    nested = "---\nname: n\ntype: user\nowner:\n  team: x\n---\n"  # somebody's structure: not moved
    assert tools.save_file("user_n.md", nested).startswith("Error: the frontmatter is missing description")
