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
