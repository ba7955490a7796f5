"""The "Persistent Agent Memory" block put into the agent's ``additional_context``.

Why it is long: the agent decides by itself what to remember, and it only does that well
when told what each memory type is for, what never to save, how a file must look, and when to
look things up. The block ends with the current MEMORY.md index (capped, with a visible cut
warning) of the user's own memory and, clearly labelled, of the shared agent memory.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .escape import block
from .examples import EXAMPLE_INTRO, FRONTMATTER_EXAMPLE
from .memdir import CappedText, MemoryDir, cap_index
from .memdir.index import render_index
from .prompt_local import compact_header

Scope = Literal["user", "project", "local"]
PROMPT_TITLE = "# Persistent Agent Memory"

TYPES_SECTION = """## Types of memory
Every memory file has a `type` in its frontmatter:
- **user** — who the user is: role, expertise, preferences, language, working style. Use it to tailor answers.
- **feedback** — guidance the user gave about how you work: corrections ("don't do X"), confirmed
  approaches ("yes, keep doing Y"). Record the rule and why; these prevent repeating mistakes.
- **project** — facts about the work that are not in the code or documents: goals, decisions and their
  reasons, deadlines, who owns what. Convert relative dates to absolute ones ("Thursday" -> "2026-12-03").
- **reference** — where to find things: dashboards, tickets, documents, channels, with what each is for."""

NOT_SAVE_SECTION = """## What NOT to save
- Anything you can read again from the code, documents, tools or this conversation's context.
- Passing details of the current task, intermediate results, or what you are about to do next.
- Secrets: passwords, API keys, tokens, private keys, personal ID numbers, card numbers.
- Guesses. Save what the user said or confirmed, not what you assume.
- Duplicates: if a memory on the topic exists, update it (replace_file_chunk) instead of adding another."""

HOW_SAVE_SECTION = f"""## How to save memories
Call `save_file(file_name, content)` with a short, descriptive file name ending in `.md`
(e.g. `user_role.md`, `feedback_report_language.md`) and the whole file as content. Every file starts with
YAML frontmatter (name, description, type), then the memory in markdown. {EXAMPLE_INTRO}

```markdown
{FRONTMATTER_EXAMPLE}
```

- `description` is one line, in your own words, saying what THIS memory holds (e.g. the user's role and
  stack) so a future you can judge relevance without opening the file.
- One topic per file; keep files short. For feedback, state the rule, then **Why:** and **How to apply:**.
- To change part of a memory use `replace_file_chunk(file_name, old_chunk, new_chunk)`; to remove a
  wrong or outdated memory use `delete_file(file_name)`.
- The MEMORY.md index is kept for you: never write MEMORY.md yourself."""

WHEN_SAVE_SECTION = """## When to save memories
- The user tells you about themselves, their role or preferences -> a `user` memory.
- The user corrects you or confirms a non-obvious approach -> a `feedback` memory, at once, so the next
  conversation does not repeat the mistake.
- You learn a decision, deadline, constraint or goal that will matter later -> a `project` memory.
- You learn where information lives outside this conversation -> a `reference` memory.
- The user asks you to remember something -> save it right away. Asked to forget something -> delete it."""

SCOPE_GUIDANCE: dict[str, str] = {
    "user": """## Scope: USER
This memory belongs to one user and follows them across every conversation and project. Save what
is true of this person (preferences, role, recurring corrections); keep project specifics brief and
say which project they belong to.""",
    "project": """## Scope: PROJECT
This memory is about one project and may be read in every conversation about it. Save facts about the
project (decisions, conventions, owners, deadlines) rather than about one person; never store personal
data of a user in project memory.""",
    "local": """## Scope: LOCAL
This memory is private to this agent on this deployment. Save working notes that help this agent do its
job here; keep anything personal about the user minimal.""",
}

SEARCH_LINE = """- Use `search_memories(query)` to find memories by words anywhere in their text (bodies included)
  when the descriptions in MEMORY.md do not show where something is."""

WHEN_ACCESS_SECTION = """## When to access memories
- MEMORY.md below lists every memory by name and description. Before answering, scan it: if a memory
  may be relevant (the user's preferences, earlier decisions, earlier corrections), open it with
  `read_file(file_name)` — long files can be read in parts with `offset` and `limit`.
- Use `list_files()` when the index was cut or you need to see every file with its type.
- Memories can be outdated. If a memory conflicts with what the user says now, trust the user and
  update or delete the memory.
- Names starting with `shared/` are shared memories of this agent type, the same for every user."""


@dataclass(frozen=True, slots=True)
class PromptParts:
    """What the prompt was built from (the caller may reuse the manifests it already read)."""

    own_index: CappedText
    shared_index: CappedText | None


def load_agent_memory_prompt(
    own: MemoryDir,
    shared: MemoryDir | None = None,
    *,
    scope: Scope = "user",
    shared_writable: bool = False,
    extra_notes: list[str] | None = None,
) -> str:
    """Build the ``# Persistent Agent Memory`` block for one user's place (one GET per place)."""
    own_index = own.index_text()
    shared_index = shared.index_text() if shared is not None else None
    return render_agent_memory_prompt(
        PromptParts(own_index, shared_index),
        own_label=own.place.label,
        shared_label=shared.place.label if shared is not None else None,
        scope=scope,
        shared_writable=shared_writable,
        extra_notes=extra_notes,
        max_lines=own.limits.index_max_lines,
        max_bytes=own.limits.index_max_bytes,
    )


def _access_section(search_tool: bool) -> str:
    """When to read memories; the search line only when the agent has ``search_memories``."""
    if not search_tool:
        return WHEN_ACCESS_SECTION
    head, _, rest = WHEN_ACCESS_SECTION.partition("\n- Memories can be outdated.")
    return f"{head}\n{SEARCH_LINE}\n- Memories can be outdated.{rest}"


def render_agent_memory_prompt(
    parts: PromptParts,
    *,
    own_label: str,
    shared_label: str | None = None,
    scope: Scope = "user",
    shared_writable: bool = False,
    extra_notes: list[str] | None = None,
    search_tool: bool = True,
    max_lines: int = 200,
    max_bytes: int = 25_600,
    compact: bool = False,
) -> str:
    """Render the block from already-loaded indexes (no I/O). ``compact``: the short text for a small
    local model (``prompt_local``; scope guidance is left out of it)."""
    if compact:
        tools = ", ".join(["save_file", "read_file", "list_files", "delete_file", "replace_file_chunk",
                           *(["search_memories"] if search_tool else [])])
        lines = compact_header(tools=tools, own_label=own_label, shared_label=shared_label,
                               shared_writable=shared_writable, search_tool=search_tool)
        for note in extra_notes or []:
            lines += [note, ""]
        return _with_index(lines, parts)
    lines = [
        PROMPT_TITLE,
        "",
        "You have a persistent, file-based memory that survives across conversations. It is yours to keep",
        "up to date with the tools save_file, read_file, list_files, delete_file and replace_file_chunk.",
        "",
        f"Your memory directory: `{own_label}` (this user's memory; only you and this user can see it).",
    ]
    if shared_label:
        mode = "you may write it with names starting `shared/`" if shared_writable else "read-only for you"
        lines.append(f"Shared agent memory: `{shared_label}` (the same for every user; {mode}).")
    lines += ["", TYPES_SECTION, "", NOT_SAVE_SECTION, "", HOW_SAVE_SECTION, "", WHEN_SAVE_SECTION, "",
              SCOPE_GUIDANCE[scope], "", _access_section(search_tool), ""]
    for note in extra_notes or []:
        lines += [note, ""]
    return _with_index(lines, parts)


def _with_index(lines: list[str], parts: PromptParts) -> str:
    """``lines`` followed by the MEMORY.md section (own index, then the shared one)."""
    lines = [*lines, "## MEMORY.md", "", "### Your memories (MEMORY.md)"]
    own_text = parts.own_index.text.strip()
    lines.append(_strip_title(own_text) or "(empty — no memories saved yet)")
    if parts.shared_index is not None:
        lines += ["", "### Shared memories (shared/MEMORY.md — read with names starting `shared/`)"]
        lines.append(_strip_title(parts.shared_index.text.strip()) or "(empty)")
    return "\n".join(lines).rstrip() + "\n"


def _strip_title(index_text: str) -> str:
    """Drop MEMORY.md's own ``# Memory index`` heading (the prompt has its own), and escape the
    lines: names and descriptions are memory text (``escape.block``: no tag of ours survives)."""
    lines = index_text.splitlines()
    while lines and (lines[0].startswith("# ") or not lines[0].strip()):
        lines.pop(0)
    return block("\n".join(lines))


def cap_for_prompt(text: str, max_lines: int, max_bytes: int) -> CappedText:
    return cap_index(text, max_lines, max_bytes)


__all__ = ["PROMPT_TITLE", "PromptParts", "load_agent_memory_prompt", "render_agent_memory_prompt",
           "render_index"]
