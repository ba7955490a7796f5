"""The compact "Persistent Agent Memory" prompt for a small local model (``agent.compact_prompt``,
on by default with ``model.model_profile: local``).

Why a second text: a 1.5B model on 2 CPU cores reads the prompt at 23-47 tokens/s, so the full
prompt's ~1,300 tokens cost it half a minute per turn before the first word, and it echoed the
prompt's example memory file to the user as its answer (issue 30). This one keeps the rules that
decide what is saved (when, what not, the four types, the file format, fix outdated memories) in
plain short lines, shows the tool-call shape once with nothing in it that is a value, and holds no
example memory at all: the format is described by its field names, so there is nothing to copy.
"""

from __future__ import annotations

COMPACT_RULES = """You keep notes about this user in memory files that last across conversations.

Save a memory when the user tells you about themselves or their preferences, corrects you, states a \
decision, deadline or owner, says where information lives, or asks you to remember something. Asked to \
forget something: delete its file. Do not save secrets, guesses, or things only true for this task.

To save, call save_file once. file_name: the type, an underscore, a few topic words, `.md`. content: a line \
`---`, then the lines `name:`, `description:` (one line saying what the memory holds) and `type:`, then a line \
`---`, then the memory in your own words. The type is one of:
- user: who the user is, their role, skills and preferences
- feedback: how the user wants you to work (corrections, rules)
- project: decisions, deadlines, goals and owners of their work
- reference: where information lives (links, dashboards, tickets)

A memory that is wrong or outdated: fix it with replace_file_chunk or delete_file, and trust what the user says \
now. Before answering, check the index below; read_file a memory that may matter."""

CALL_SHAPE = ('To call a tool, answer with only this JSON, filled in: {"name": <tool name>, "arguments": '
              '{<argument>: <value>, ...}}. Call each tool once, then answer the user in plain words; never '
              "show the user a tool call or a memory file.")


def compact_header(*, tools: str, own_label: str, shared_label: str | None, shared_writable: bool,
                   search_tool: bool) -> list[str]:
    """The compact prompt's lines above the MEMORY.md index."""
    lines = ["# Persistent Agent Memory", "", COMPACT_RULES]
    if search_tool:
        lines.append("search_memories finds memories by words in their text.")
    lines += ["", f"Tools: {tools}. {CALL_SHAPE}", "", f"Your memory: `{own_label}` (only this user's)."]
    if shared_label:
        mode = "write it with names starting `shared/`" if shared_writable else "read it with names starting `shared/`"
        lines.append(f"Shared memory of all users: `{shared_label}` ({mode}).")
    return [*lines, ""]


__all__ = ["CALL_SHAPE", "COMPACT_RULES", "compact_header"]
