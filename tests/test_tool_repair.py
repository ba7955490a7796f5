"""The memory tools with a weak model (issue 30): a repeated call is answered "already done", a
missing type is filled in from the file name, and errors name the field without an example to copy.

Failures reproduced: the same ``save_file`` 11 times in one turn (each "Updated memory", no answer
to the user); ``project_atlas_code_freeze.md`` saved without ``type:`` refused and never retried,
with an error showing the whole BigQuery example, which the model echoed to the user.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from agno.agent import Agent
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from harness_memory.agent_model import make_agent_model
from harness_memory.config import MemoryConfig, ModelConfig
from harness_memory.examples import EXAMPLE_BODY, EXAMPLE_DESCRIPTION, FRONTMATTER_EXAMPLE, registry
from harness_memory.layout import Place
from harness_memory.memdir import (
    MemoryDir,
    MemoryType,
    fill_missing_fields,
    fill_missing_type,
    parse_memory,
    quote_plain_values,
)
from harness_memory.observe import Telemetry
from harness_memory.services import MemoryServices
from harness_memory.storage import LocalStore
from harness_memory.tools import MemoryTools
from tests.fakellm import ScriptedLLM, text, tool_calls

NOTE = ("---\nname: atlas code freeze\ndescription: Atlas code freeze starts 2026-12-10\n---\n\n"
        "No merges to atlas main from 2026-12-10 to 2026-12-17 (release).\n")
SAID_FREEZE = "Atlas code freeze: no merges to atlas main from 2026-12-10 to 2026-12-17 (release). Remember it."
GOOD = "---\nname: polars\ndescription: prefers Polars over pandas\ntype: user\n---\n\nUses Polars.\n"


@pytest.fixture
def services(make_config: Any, llm_server: ScriptedLLM) -> Any:
    cfg: MemoryConfig = make_config(model={"model": "m", "base_url": llm_server.base_url, "api_key": "k"})
    made = MemoryServices.from_config(cfg, telemetry=Telemetry(metrics=True, tracing=False))
    yield made
    made.close()


def agent_for(services: MemoryServices, server: ScriptedLLM) -> Agent:
    model = make_agent_model(ModelConfig(model="m", base_url=server.base_url, api_key="k"))
    return Agent(model=model, tools=[services.memory_tools("u1", "default")], user_id="u1", telemetry=False)


def tool_answers(server: ScriptedLLM, request: int) -> list[str]:
    return [m["content"] for m in server.chat_requests[request].messages if m.get("role") == "tool"]


def count(services: MemoryServices, tool: str, outcome: str) -> float:
    value = services.telemetry.metrics.registry.get_sample_value(
        "harness_memory_tool_calls_total", {"tool": tool, "outcome": outcome})
    return value or 0.0


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_the_same_save_in_one_turn_runs_once(services: MemoryServices, llm_server: ScriptedLLM, mode: str) -> None:
    """One answer asking for the same save three times (arun runs them concurrently), then the
    same save again in the next turn of the same run: one save lands, the rest are refused."""
    save = ("save_file", {"file_name": "user_polars.md", "content": GOOD})
    llm_server.script(tool_calls([save, save, save]), tool_calls([save]), text("Noted."))
    agent = agent_for(services, llm_server)
    out = agent.run("I prefer polars") if mode == "run" else asyncio.run(agent.arun("I prefer polars"))
    assert out.content == "Noted."
    first, second = tool_answers(llm_server, 1), tool_answers(llm_server, 2)[-1:]
    assert sum(a.startswith("Created memory user_polars.md") for a in first) == 1
    refused = [a for a in first if not a.startswith("Created")] + second
    assert len(refused) == 3 and all(a.startswith("Already") for a in refused), refused
    assert all("save_file" in a and len(a) < 400 for a in refused)
    assert count(services, "save_file", "ok") == 1 and count(services, "save_file", "repeated") == 3
    assert services.user_agent_dir("u1").read("user_polars.md").text == GOOD


def test_a_new_run_may_make_the_same_call_and_a_write_frees_reads(services: MemoryServices,
                                                                  llm_server: ScriptedLLM) -> None:
    read = ("read_file", {"file_name": "user_polars.md"})
    services.user_agent_dir("u1").save("user_polars.md", GOOD)
    changed = GOOD.replace("Uses Polars.", "Uses Polars 1.x.")
    llm_server.script(tool_calls([read]), tool_calls([read]),
                      tool_calls([("save_file", {"file_name": "user_polars.md", "content": changed})]),
                      tool_calls([read]), text("ok"),
                      tool_calls([read]), text("again"))
    agent = agent_for(services, llm_server)
    agent.run("check")
    answers = [tool_answers(llm_server, i)[-1] for i in range(1, 5)]
    assert "Uses Polars." in answers[0] and answers[1].startswith("Already done")
    assert answers[2].startswith("Updated memory") and "Uses Polars 1.x." in answers[3]  # read again after write
    agent.run("check again")  # a new run: the same read runs
    assert "Uses Polars 1.x." in tool_answers(llm_server, 6)[-1]


def test_a_failed_call_repeated_is_told_to_change_its_arguments(services: MemoryServices,
                                                                llm_server: ScriptedLLM) -> None:
    bad = ("save_file", {"file_name": "polars.md", "content": "no frontmatter"})
    llm_server.script(tool_calls([bad]), tool_calls([bad]), text("sorry"))
    agent_for(services, llm_server).run("save it")
    assert tool_answers(llm_server, 1)[-1].startswith("Error:")
    again = tool_answers(llm_server, 2)[-1]
    assert again.startswith("Already tried") and "change them" in again


def test_direct_calls_are_not_guarded(tmp_path: Any) -> None:
    """Code calling the tools itself (no agno run) is not a looping model."""
    store = LocalStore(tmp_path)
    tools = MemoryTools(MemoryDir(store, Place.user_agent("u", "default")))
    assert tools.save_file("user_a.md", GOOD).startswith("Created")
    assert tools.save_file("user_a.md", GOOD).startswith("Updated")


# -- a missing type, and errors without examples ---------------------------------------------------
def test_a_missing_type_is_taken_from_the_file_name(tmp_path: Any) -> None:
    store = LocalStore(tmp_path)
    tools = MemoryTools(MemoryDir(store, Place.user_agent("u", "default")))
    answer = tools.save_file("project_atlas_code_freeze.md", NOTE)
    assert answer.startswith("Created memory project_atlas_code_freeze.md (project:")
    assert "lacked type; filled in: type: project (from the file name)" in answer
    saved = parse_memory(tools.own.read("project_atlas_code_freeze.md").text)
    assert saved.type is MemoryType.PROJECT and saved.body.startswith("No merges to atlas main")
    empty_type = NOTE.replace("---\n\n", "type: ''\n---\n\n", 1)
    assert "filled in: type: feedback (from the file name)" in tools.save_file("feedback_reviews.md", empty_type)


def test_without_a_prefix_the_error_names_the_field_and_shows_no_example(tmp_path: Any) -> None:
    store = LocalStore(tmp_path)
    tools = MemoryTools(MemoryDir(store, Place.user_agent("u", "default")))
    answer = tools.save_file("atlas_code_freeze.md", NOTE)
    assert answer.startswith("Error: the frontmatter is missing type")
    for example in (EXAMPLE_BODY, EXAMPLE_DESCRIPTION, FRONTMATTER_EXAMPLE, "BigQuery"):
        assert example not in answer
    assert tools.own.list_entries() == []
    wrong = NOTE.replace("---\n\n", "type: projekt\n---\n\n", 1)  # a wrong type is refused, not guessed
    assert "type 'projekt' is not one of" in tools.save_file("project_atlas.md", wrong)


@settings(max_examples=120, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["user_x.md", "notes.md", "reference_y.md"]))
def test_no_save_error_carries_an_example(content: str, name: str) -> None:
    """Whatever a model writes, a refusal never hands it text from our examples to copy back."""
    for text_ in (content, "---\n" + content, "---\n" + content + "\n---\nbody"):
        try:
            fixed, _ = fill_missing_fields(quote_plain_values(text_)[0], name)  # the save tool's repairs
            parse_memory(fixed)
        except Exception as exc:
            message = str(exc)
            assert registry().example(message) is None, message
            assert EXAMPLE_DESCRIPTION not in message and EXAMPLE_BODY not in message


@settings(max_examples=120, deadline=None)
@given(body=st.text(max_size=200), kind=st.sampled_from(list(MemoryType)),
       extra=st.dictionaries(st.sampled_from(["tags", "owner", "since"]), st.text(max_size=20), max_size=2))
def test_filling_the_type_keeps_every_other_part(body: str, kind: MemoryType, extra: dict[str, str]) -> None:
    front = {"name": "n", "description": "d", **extra}
    lines = [f"{k}: {json.dumps(v, ensure_ascii=False)}" for k, v in front.items()]
    text_ = "---\n" + "\n".join(lines) + "\n---\n\n" + body
    try:  # what the file would be with the type written by hand (YAML may refuse a generated value)
        expected = parse_memory(text_.replace("\n---\n\n", f"\ntype: {kind.value}\n---\n\n", 1))
    except Exception:
        assume(False)
    fixed, filled = fill_missing_type(text_, f"{kind.value}_thing.md")
    assert filled is kind and parse_memory(fixed) == expected
    assert fixed.endswith(body) and fill_missing_type(fixed, f"{kind.value}_thing.md") == (fixed, None)


# -- the whole story of issue 30 through build_agent and a local profile ------------------------------
@pytest.mark.parametrize("stream", [False, True])
def test_a_text_save_without_type_is_repaired_and_a_looping_model_stops(make_config: Any, llm_server: ScriptedLLM,
                                                                        stream: bool) -> None:
    """The 1.5B model's turn: a save written as ``<tool_call>`` text, its file named
    ``project_…`` but no ``type:``; then the same call again and again. One memory is stored with
    type project, the repeat is answered "already done", the run ends, the user sees no raw call."""
    from harness_memory.agent import build_agent

    cfg = make_config(model={"model": "m", "base_url": llm_server.base_url, "api_key": "k",
                             "model_profile": "local"}, auto={"enabled": False}, session={"enabled": False})
    call = json.dumps({"name": "save_file", "arguments": {"file_name": "project_atlas_code_freeze.md",
                                                          "content": NOTE}})
    llm_server.set_handler(lambda req: text(f"<tool_call>\n{call}\n</tool_call>"))
    agent = build_agent("u1", config=cfg)
    if stream:
        shown = "".join(str(ev.content) for ev in agent.run(SAID_FREEZE, stream=True)
                        if getattr(ev, "event", "") == "RunContent" and ev.content)
    else:
        shown = str(agent.run(SAID_FREEZE).content or "")
    assert "<tool_call>" not in shown and "save_file" not in shown
    answers = [tool_answers(llm_server, i)[-1] for i in (1, 2)]
    assert answers[0].startswith("Created memory project_atlas_code_freeze.md (project:")
    assert "lacked type; filled in: type: project (from the file name)" in answers[0]
    assert answers[1].startswith("Already done") and len(llm_server.chat_requests) == 3
    own = agent.tools[0].own  # type: ignore[index,union-attr]
    assert [e.file for e in own.list_entries()] == ["project_atlas_code_freeze.md"]
    assert parse_memory(own.read("project_atlas_code_freeze.md").text).type is MemoryType.PROJECT


# -- what the user said is not a copy ---------------------------------------------------------------
HINT_SAVE = ("---\nname: role\ndescription: Data analyst on BigQuery; wants BigQuery SQL, never PostgreSQL syntax\n"
             "type: user\n---\n\nData analyst on BigQuery at a logistics firm.\n")


@pytest.mark.parametrize(("said", "saved"), [
    ("I'm a data analyst and everything is on BigQuery: I want BigQuery SQL, never PostgreSQL syntax. "
     "Remember that.", True),
    ("Remember my role, please.", False),  # the user said none of it: the example's words are a copy
])
def test_a_fact_the_user_said_is_saved_even_when_an_example_says_it_too(
        services: MemoryServices, llm_server: ScriptedLLM, said: str, saved: bool) -> None:
    """Seen with the 1.5B model (role_zh): a faithful save of "我是杭州一家银行的后端工程师…" met a
    realistic example of ours and was refused as a copy. Words the user wrote in the run are the
    user's (a close paraphrase too), whatever example holds them; words nobody said are refused."""
    llm_server.script(tool_calls([("save_file", {"file_name": "user_role.md", "content": HINT_SAVE})]), text("ok"))
    agent_for(services, llm_server).run(said)
    answer = tool_answers(llm_server, 1)[-1]
    assert answer.startswith("Created memory user_role.md") is saved, answer
    assert ("user_role.md" in services.user_agent_dir("u1").manifest().entries) is saved
    if not saved:
        assert "copied from the example" in answer


@pytest.mark.parametrize(("said", "saved"), [
    ("From now on write every date as ISO 8601 (2026-12-01), never as 12/01. Remember that.", True),
    ("Remember the deadline.", False),  # a bare number nobody said is a placeholder
])
def test_a_bare_date_the_user_wrote_is_theirs(services: MemoryServices, llm_server: ScriptedLLM,
                                              said: str, saved: bool) -> None:
    """Seen with the 1.5B model: a body "2026-12-01" was refused as "copied from the example"
    (a bare number counted as a placeholder) though the user had written that very date."""
    content = "---\nname: date format\ndescription: Write dates as ISO 8601\ntype: feedback\n---\n\n2026-12-01\n"
    llm_server.script(tool_calls([("save_file", {"file_name": "feedback_dates.md", "content": content})]),
                      text("ok"))
    agent_for(services, llm_server).run(said)
    answer = tool_answers(llm_server, 1)[-1]
    assert answer.startswith("Created memory feedback_dates.md") is saved, answer
    assert "copied from the example" not in answer
    if not saved:
        assert "is a placeholder, not a memory" in answer


def test_our_own_injected_blocks_are_not_the_users_words() -> None:
    """A session summary or recalled memories put in front of the user's message are ours: an
    example that reached one of them does not become "what the user said"."""
    from agno.models.message import Message
    from agno.run import RunContext

    from harness_memory.tool_checks import copies_example, user_words

    injected = f"<session-summary>\n{EXAMPLE_DESCRIPTION}\n</session-summary>\n\nWhat did we decide?"
    ctx = RunContext(run_id="r", session_id="s", messages=[Message(role="user", content=injected)])
    assert copies_example(EXAMPLE_DESCRIPTION, user_words(ctx))
    ctx = RunContext(run_id="r", session_id="s", messages=[Message(role="user", content=EXAMPLE_DESCRIPTION)])
    assert not copies_example(EXAMPLE_DESCRIPTION, user_words(ctx))


@pytest.mark.parametrize(("said", "content", "saved"), [
    ("No, don't use pandas for this — use Polars. Remember that.",
     "---\nname: Dataframes\ndescription: Dataframe library\ntype: feedback\n---\n\nLoad CSV files with pandas.\n",
     False),
    ("No, don't use pandas for this — use Polars. Remember that.",
     "---\nname: Dataframes\ndescription: Use Polars, not pandas\ntype: feedback\n---\n\nAlways Polars for "
     "dataframes; never pandas.\n", True),
    ("不要用 Jenkins，改用 GitLab CI。请记住。",
     "---\nname: CI\ndescription: 部署用 Jenkins\ntype: feedback\n---\n\n团队用 Jenkins 部署。\n", False),
    ("不要用 Jenkins，改用 GitLab CI。请记住。",
     "---\nname: CI\ndescription: 团队只用 GitLab CI\ntype: feedback\n---\n\n用 GitLab CI 替代 Jenkins。\n", True),
    ("I use pandas at work. Remember that.",  # never rejected: nothing to contradict
     "---\nname: Work tools\ndescription: Uses pandas at work\ntype: user\n---\n\nUses pandas at work.\n", True),
])
def test_a_save_putting_forward_what_the_user_rejected_is_refused(
        services: MemoryServices, llm_server: ScriptedLLM, said: str, content: str, saved: bool) -> None:
    """The 1.5B model, corrected ("don't use pandas — use Polars"), could still save its own pandas
    code as the memory: what the tools write is read back in every later session, so a memory
    putting forward what the user just rejected is refused with the reason, and nothing is saved."""
    llm_server.script(tool_calls([("save_file", {"file_name": "feedback_tools.md", "content": content})]),
                      text("ok"))
    agent_for(services, llm_server).run(said)
    answer = tool_answers(llm_server, 1)[-1]
    assert answer.startswith("Created memory feedback_tools.md") is saved, answer
    assert ("feedback_tools.md" in services.user_agent_dir("u1").manifest().entries) is saved
    if not saved:
        assert "which the user said not to use" in answer and "Nothing was saved" in answer


def test_an_edit_putting_forward_what_the_user_rejected_changes_nothing(services: MemoryServices,
                                                                        llm_server: ScriptedLLM) -> None:
    place = services.user_agent_dir("u1")
    place.save("feedback_tools.md", "---\nname: Tools\ndescription: Dataframes\ntype: feedback\n---\n\nUse Polars.\n")
    before = place.read("feedback_tools.md").text
    llm_server.script(tool_calls([("replace_file_chunk", {"file_name": "feedback_tools.md",
                                                          "old_chunk": "Use Polars.", "new_chunk": "Use pandas."})]),
                      text("ok"))
    agent_for(services, llm_server).run("Don't use pandas, use Polars.")
    answer = tool_answers(llm_server, 1)[-1]
    assert "which the user said not to use" in answer and "Nothing was changed" in answer
    assert place.read("feedback_tools.md").text == before


@pytest.fixture
def grounded(make_config: Any, llm_server: ScriptedLLM) -> Any:
    cfg: MemoryConfig = make_config(model={"model": "m", "base_url": llm_server.base_url, "api_key": "k"},
                                    agent={"grounded_saves": True})
    made = MemoryServices.from_config(cfg)
    yield made
    made.close()


ROLE_SAID = "你好，我是杭州一家银行的后端工程师，主要用 Go 写支付服务。I review Go code. Remember that."


@pytest.mark.parametrize(("content", "refused"), [
    # what the 1.5B model saved: two languages nobody named
    ("---\nname: 后端工程师\ndescription: 后端工程师\ntype: user\n---\n\n- role: 后端工程师\n"
     "- skills: Go, Python, Java\n", ["Python", "Java"]),
    ("---\nname: Backend Engineer Role\ndescription: Backend engineer at a bank\ntype: user\n---\n\n"
     "Backend engineer at a bank; writes the payment service in Go. Reviews Go code.\n", []),
    ("---\nname: Role\ndescription: Backend engineer\ntype: user\n---\n\nWorks on Kubernetes at Alipay since 2019.\n",
     ["Kubernetes", "Alipay", "2019"]),
])
def test_a_save_naming_what_nobody_said_is_refused(grounded: MemoryServices, llm_server: ScriptedLLM,
                                                   content: str, refused: list[str]) -> None:
    llm_server.script(tool_calls([("save_file", {"file_name": "user_role.md", "content": content})]), text("ok"))
    agent_for(grounded, llm_server).run(ROLE_SAID)
    answer = tool_answers(llm_server, 1)[-1]
    if refused:
        assert f"names {', '.join(refused)}, which nobody said" in answer and "Nothing was saved" in answer
        assert grounded.user_agent_dir("u1").list_entries() == []
    else:
        assert answer.startswith("Created memory user_role.md"), answer


def test_a_name_a_tool_returned_is_grounded(grounded: MemoryServices, llm_server: ScriptedLLM) -> None:
    """What a tool answered in the run (a file read, a search) may be saved: only inventions are refused."""
    grounded.user_agent_dir("u1").save("reference_dash.md", "---\nname: dash\ndescription: Grafana board\n"
                                       "type: reference\n---\n\nLatency board: grafana.internal/d/api-latency\n")
    note = ("---\nname: oncall\ndescription: On-call checks the Grafana board\ntype: reference\n---\n\n"
            "On call, check grafana.internal/d/api-latency first.\n")
    llm_server.script(tool_calls([("read_file", {"file_name": "reference_dash.md"})]),
                      tool_calls([("save_file", {"file_name": "reference_oncall.md", "content": note})]), text("ok"))
    agent_for(grounded, llm_server).run("Where is the latency board? Keep a note for on-call.")
    assert tool_answers(llm_server, 2)[-1].startswith("Created memory reference_oncall.md")


def test_grounding_is_off_unless_asked(services: MemoryServices, llm_server: ScriptedLLM) -> None:
    content = "---\nname: Role\ndescription: Backend engineer\ntype: user\n---\n\nUses Go, Python and Java.\n"
    llm_server.script(tool_calls([("save_file", {"file_name": "user_role.md", "content": content})]), text("ok"))
    agent_for(services, llm_server).run(ROLE_SAID)
    assert tool_answers(llm_server, 1)[-1].startswith("Created memory user_role.md")


@pytest.mark.parametrize(("said", "file_name", "content", "refusal"), [
    # asked for a deploy script, the 1.5B model saved its own generic steps as a project memory
    ("帮我写一个部署脚本。", "deployment_script.md",
     "---\nname: Deployment Script\ndescription: A script to automate deployment processes.\ntype: project\n---\n"
     "# Deployment Steps\n- Pull latest code from repository\n- Run database migrations\n- Deploy application\n",
     "shares almost no words with what the user or a tool said"),
    # a frontmatter key holds a claim too: an owner and a deadline nobody named
    ("I'm planning the Q1 migration of our ledger service from MySQL 5.7 to PostgreSQL 16.", "project_migration.md",
     "---\ntype: project\nname: Q1 Ledger Migration\ndescription: Migrating the ledger service from MySQL 5.7 to "
     "PostgreSQL 16.\ndeadline: 2026-12-15\nowner: John Doe\n---\n- Plan the migration of the ledger service.\n",
     "names 2026-12-15, John, Doe, which nobody said"),
])
def test_a_memory_nobody_asked_for_or_holding_invented_claims_is_refused(
        grounded: MemoryServices, llm_server: ScriptedLLM, said: str, file_name: str, content: str,
        refusal: str) -> None:
    llm_server.script(tool_calls([("save_file", {"file_name": file_name, "content": content})]), text("ok"))
    agent_for(grounded, llm_server).run(said)
    answer = tool_answers(llm_server, 1)[-1]
    assert refusal in answer and "Nothing was saved" in answer, answer
    assert grounded.user_agent_dir("u1").list_entries() == []


def test_a_memory_written_as_its_description_alone_is_saved(grounded: MemoryServices, llm_server: ScriptedLLM) -> None:
    """The 1.5B model's feedback_en and project_en saves: name, description, type and nothing after
    the closing '---'. The description is the memory: it becomes the text, and the answer says so."""
    content = ("---\nname: SQL Snowflake Syntax\ndescription: Always write Snowflake SQL for me, never T-SQL.\n"
               "type: feedback\n---\n")
    llm_server.script(tool_calls([("save_file", {"file_name": "feedback_sql.md", "content": content})]), text("ok"))
    agent_for(grounded, llm_server).run("Always write Snowflake SQL for me, never T-SQL. Remember that.")
    answer = tool_answers(llm_server, 1)[-1]
    assert answer.startswith("Created memory feedback_sql.md") and "from the description" in answer, answer
    stored = parse_memory(grounded.user_agent_dir("u1").read("feedback_sql.md").text)
    assert stored.body.strip() == "Always write Snowflake SQL for me, never T-SQL."
