"""The Persistent Agent Memory prompt: every section pinned, the index capped with a warning."""

from __future__ import annotations

import pytest

from harness_memory import load_agent_memory_prompt
from harness_memory.config import LimitsConfig
from harness_memory.layout import Place
from harness_memory.memdir import MemoryDir
from harness_memory.storage.base import ObjectStore

SECTIONS = [
    "# Persistent Agent Memory",
    "Your memory directory: `~/.harness/users/100/agent-memory/default/`",
    "## Types of memory",
    "- **user** —",
    "- **feedback** —",
    "- **project** —",
    "- **reference** —",
    "## What NOT to save",
    "## How to save memories",
    "save_file(file_name, content)",
    "type: user",
    "The MEMORY.md index is kept for you",
    "## When to save memories",
    "## Scope: USER",
    "## When to access memories",
    "read_file(file_name)",
    "## MEMORY.md",
    "### Your memories (MEMORY.md)",
    "### Shared memories",
    "Shared agent memory: `~/.harness/agent-memory/default/`",
]


def mem(i: int) -> str:
    return f"---\nname: memory {i}\ndescription: description of memory {i}\ntype: project\n---\n\nbody {i}\n"


@pytest.fixture
def dirs(local_store: ObjectStore) -> tuple[MemoryDir, MemoryDir]:
    return (MemoryDir(local_store, Place.user_agent("100")), MemoryDir(local_store, Place.shared_agent("default")))


def test_every_section_is_present_in_order(dirs: tuple[MemoryDir, MemoryDir]) -> None:
    own, shared = dirs
    prompt = load_agent_memory_prompt(own, shared)
    positions = [prompt.find(s) for s in SECTIONS]
    assert all(p >= 0 for p in positions), [s for s, p in zip(SECTIONS, positions, strict=True) if p < 0]
    headings = [prompt.find(s) for s in SECTIONS if s.startswith("#")]
    assert headings == sorted(headings)
    assert "(empty — no memories saved yet)" in prompt
    assert "read-only for you" in prompt


def test_index_lines_and_shared_are_labelled(dirs: tuple[MemoryDir, MemoryDir]) -> None:
    own, shared = dirs
    own.save("a.md", mem(1))
    shared.save("team.md", mem(2).replace("memory 2", "team rules"))
    prompt = load_agent_memory_prompt(own, shared, shared_writable=True)
    own_part, shared_part = prompt.split("### Shared memories")
    assert "- [memory 1](a.md) — description of memory 1" in own_part
    assert "- [team rules](team.md) — description of team rules" in shared_part
    assert "team rules" not in own_part
    assert "you may write it with names starting `shared/`" in prompt


@pytest.mark.parametrize(("scope", "heading"), [("user", "## Scope: USER"), ("project", "## Scope: PROJECT"),
                                                 ("local", "## Scope: LOCAL")])
def test_scope_guidance(dirs: tuple[MemoryDir, MemoryDir], scope: str, heading: str) -> None:
    prompt = load_agent_memory_prompt(dirs[0], scope=scope)  # type: ignore[arg-type]
    assert heading in prompt
    assert sum(h in prompt for h in ("## Scope: USER", "## Scope: PROJECT", "## Scope: LOCAL")) == 1
    assert "### Shared memories" not in prompt


def test_index_over_200_lines_shows_cut_warning(local_store: ObjectStore) -> None:
    own = MemoryDir(local_store, Place.user_agent("big"), limits=LimitsConfig())
    for i in range(230):
        own.save(f"m{i:03d}.md", mem(i))
    prompt = load_agent_memory_prompt(own)
    assert "WARNING: MEMORY.md is too long and was cut" in prompt
    listed = [line for line in prompt.splitlines() if line.startswith("- [memory ")]
    assert 190 <= len(listed) < 200
    assert "- [memory 229]" not in prompt


def test_index_over_25kb_shows_cut_warning(local_store: ObjectStore) -> None:
    own = MemoryDir(local_store, Place.user_agent("wide"))
    long_desc = "x" * 450
    for i in range(80):
        own.save(f"m{i:03d}.md", mem(i).replace(f"description of memory {i}", f"{i} {long_desc}"))
    prompt = load_agent_memory_prompt(own)
    assert "WARNING: MEMORY.md is too long" in prompt
    index_part = prompt.split("### Your memories (MEMORY.md)")[1]
    assert len(index_part.encode()) < 25_600 + 500


# -- the compact prompt for a small local model (issue 30) ----------------------------------------
def compact_and_full(own: MemoryDir, shared: MemoryDir) -> tuple[str, str]:
    from harness_memory.prompt import PromptParts, render_agent_memory_prompt

    parts = PromptParts(own.index_text(), shared.index_text())
    kw = {"own_label": own.place.label, "shared_label": shared.place.label}
    return render_agent_memory_prompt(parts, compact=True, **kw), render_agent_memory_prompt(parts, **kw)


def test_compact_prompt_keeps_the_rules_and_shows_nothing_to_copy(dirs: tuple[MemoryDir, MemoryDir]) -> None:
    from harness_memory.examples import FRONTMATTER_EXAMPLE, registry
    from harness_memory.text_tool_calls import recover
    from harness_memory.tokens import estimate_tokens

    own, shared = dirs
    own.save("a.md", mem(1))
    compact, full = compact_and_full(own, shared)
    for needed in ("# Persistent Agent Memory", "save_file", "replace_file_chunk", "delete_file", "read_file",
                   "- user:", "- feedback:", "- project:", "- reference:", "`name:`", "`description:`", "`type:`",
                   "asks you to remember", "secrets", "## MEMORY.md", "- [memory 1](a.md) — description of memory 1",
                   "### Shared memories", own.place.label):
        assert needed in compact, needed
    assert FRONTMATTER_EXAMPLE not in compact and registry().example(compact) is None
    assert compact.count('"arguments"') == 1  # the tool-call shape, once
    tools = [{"type": "function", "function": {"name": "save_file", "parameters": {"type": "object"}}}]
    assert recover(compact, tools).calls == ()  # the shape itself is not a call anyone could run
    assert estimate_tokens(compact) < 0.5 * estimate_tokens(full)


def test_local_profile_sends_the_compact_prompt(make_config, llm_server) -> None:  # type: ignore[no-untyped-def]
    from harness_memory.agent import build_agent
    from tests.fakellm import text

    cfg = make_config(model={"model": "m", "base_url": llm_server.base_url, "api_key": "k",
                             "model_profile": "local"}, auto={"enabled": False}, session={"enabled": False})
    assert cfg.agent.compact_prompt is True
    llm_server.script(text("hi"))
    build_agent("u1", config=cfg).run("hello")
    system = "\n".join(str(m.get("content")) for m in llm_server.chat_requests[0].messages
                       if m.get("role") in ("system", "developer"))
    assert "To call a tool, answer with only this JSON" in system and "## Types of memory" not in system
