"""MemoryTools: the five tools the agent uses to keep its own memory.

Why these rules: the caller of these functions is a model. Every result is a short string it
can act on (what happened, or what to do instead); no exception ever escapes into agno's tool
loop. The toolkit is bound to one user's place when it is built, so no file name the model
invents can reach another user's memory. Names starting with ``shared/`` address the shared
agent memory, read-only unless the config lets agents write it.

Each tool is a sync function plus an async twin (agno uses only async tools under ``arun()``
and only sync ones under ``run()``); the twins run the same code in the services' ``work`` pool.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from agno.run.base import RunContext
from agno.tools import Toolkit

from .errors import (
    AccessDenied,
    InvalidName,
    LockTimeout,
    MemoryFormatError,
    ObjectNotFound,
    OutcomeUnknown,
    StorageError,
    StorageUnavailable,
)
from .escape import inline
from .examples import FRONTMATTER_EXAMPLE
from .memdir import MemoryDir, fill_missing_fields, parse_memory, quote_plain_values
from .observe import DISABLED, Telemetry, wrap_context
from .tool_checks import (
    copies_example,
    refuse_contradicting,
    refuse_copied_examples,
    refuse_ungrounded,
    short,
    user_words,
)
from .tool_guard import RepeatGuard, once_per_run

log = logging.getLogger(__name__)
SHARED_PREFIX = "shared/"
TOOL_NAMES = ("save_file", "read_file", "list_files", "delete_file", "replace_file_chunk")
SEARCH_TOOL_NAME = "search_memories"
LIST_LIMIT = 500
SEARCH_LIMIT = 10
LINES_PER_FILE = 3
LINE_CHARS = 200


def _friendly(action: str) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Turn any failure of a tool into a message for the model, and log the unexpected ones."""

    def wrap(fn: Callable[..., str]) -> Callable[..., str]:
        tool = fn.__name__

        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> str:
            try:
                tools = args[0]  # outcome from the exception
                return tools.telemetry.call("tool", tool, fn, args, kwargs, tools.own.place)
            except InvalidName as exc:
                return f"Error: {exc}."
            except MemoryFormatError as exc:  # nothing was written; a small model needs told to retry
                message = str(exc)
                if "again" in message:  # the message already says what to do
                    return f"Error: {message}"
                said = "" if "nothing was" in message.lower() else f"\nNothing was {action}."
                retry = f" Fix this and call {tool} again." if action in ("saved", "changed") else ""
                return f"Error: {message}{said}{retry}"
            except ObjectNotFound:
                name = kwargs.get("file_name", args[1] if len(args) > 1 else "")
                return f"Error: there is no memory file named {name!r}. Call list_files to see what exists."
            except LockTimeout as exc:
                return f"Error: {exc}. Nothing was changed."
            except OutcomeUnknown as exc:  # never "nothing was saved": it may have been
                return f"Error: {exc}."
            except StorageUnavailable as exc:
                return (f"Error: the memory store is unreachable right now ({exc}). Nothing was {action}; "
                        "tell the user memory is temporarily unavailable and carry on.")
            except AccessDenied as exc:
                return f"Error: the memory store refused the request ({exc}). Nothing was {action}."
            except StorageError as exc:
                return f"Error: the memory store failed ({exc}). Nothing was {action}."
            except Exception:
                log.exception("memory tool %s failed", tool)
                return f"Error: an unexpected failure in the memory tool; nothing was {action}."

        return inner

    return wrap


def _filled_note(filled: dict[str, Any]) -> str:
    """What ``fill_missing_fields`` filled in, said in the tool's answer (the model should know)."""
    if not filled:
        return ""
    labels = {"type": "type", "name": "name", "description": "description", "body": "the memory text"}
    parts = []
    for key in labels:
        if key == "type" and "type" in filled:
            parts.append(f"type: {filled['type'].value} (from the file name)")
        elif key in filled:
            value = json.dumps(inline(filled[key].value)[:80], ensure_ascii=False)
            parts.append(f"{labels[key]} {value} (from {filled[key].source})")
    return (" The file lacked " + ", ".join(labels[k] for k in labels if k in filled)
            + "; filled in: " + "; ".join(parts) + ".")


def _index_said(warning: str | None) -> str:
    """What to say about MEMORY.md after a change: only "updated" when it was."""
    if warning is None:
        return "MEMORY.md updated."
    return ("The change is saved, but MEMORY.md was not rewritten this time (the store failed); "
            "it is rewritten with the next change.")


class MemoryTools(Toolkit):
    """Agent-facing file tools over a user's memory place (and, read-only, the shared one)."""

    def __init__(self, own: MemoryDir, shared: MemoryDir | None = None, *, shared_writable: bool = False,
                 name: str = "memory_tools", executor: Executor | None = None,
                 telemetry: Telemetry = DISABLED, search: bool = True, grounded: bool = False) -> None:
        #: Refuse writes naming what nobody said in the run (``agent.grounded_saves``; ``refuse_ungrounded``).
        self.grounded = grounded
        #: Runs the async twins' blocking work (the services' ``work`` pool; None: asyncio's default).
        self.executor = executor
        #: Records every tool call (metrics by tool and outcome, a span, an event).
        self.telemetry = telemetry
        self.own = own
        self.shared = shared
        self.shared_writable = shared_writable
        #: One run makes a given call once (``tool_guard``): the 11-saves-in-one-turn loop.
        self.guard = RepeatGuard()
        tools: list[Callable[..., str]] = [self.save_file, self.read_file, self.list_files, self.delete_file,
                                           self.replace_file_chunk]
        async_tools: list[tuple[Callable[..., Any], str]] = [
            (self.asave_file, "save_file"), (self.aread_file, "read_file"), (self.alist_files, "list_files"),
            (self.adelete_file, "delete_file"), (self.areplace_file_chunk, "replace_file_chunk")]
        if search:  # recall.search_tool: false leaves the agent the five file tools only
            tools.append(self.search_memories)
            async_tools.append((self.asearch_memories, SEARCH_TOOL_NAME))
        super().__init__(name=name, tools=tools, async_tools=async_tools)

    def __deepcopy__(self, memo: dict[int, Any]) -> MemoryTools:
        # AgentOS deep-copies agents per request; the store clients and locks must be shared.
        return self

    # -- routing --------------------------------------------------------------------------
    def _route(self, file_name: str, *, write: bool) -> tuple[MemoryDir, str]:
        if isinstance(file_name, str) and file_name.startswith(SHARED_PREFIX):
            if self.shared is None:
                raise InvalidName("there is no shared memory for this agent")
            if write and not self.shared_writable:
                raise InvalidName("shared memory is read-only for agents; save to your own memory instead")
            return self.shared, file_name[len(SHARED_PREFIX):]
        if isinstance(file_name, str) and file_name.split("/", 1)[0] == SHARED_PREFIX.rstrip("/"):
            raise InvalidName("'shared' is reserved for the shared memory folder")
        return self.own, file_name

    # -- tools ----------------------------------------------------------------------------
    @once_per_run(write=True)
    @_friendly("saved")
    def save_file(self, file_name: str, content: str, run_context: RunContext | None = None) -> str:
        """Save a memory file (create it, or overwrite it completely). The MEMORY.md index is updated for you.

        Args:
            file_name: A short relative name ending in .md, e.g. "user_role.md" or "feedback_testing.md".
            content: The whole file: YAML frontmatter with name, description (one line) and type
                (user, feedback, project or reference), then the memory in markdown.

        Returns:
            What was saved, or an error message saying what to fix.
        """
        memdir, rel = self._route(file_name, write=True)
        content, quoted = quote_plain_values(content)  # description: Atlas: freeze on … -> quoted
        content, filled = fill_missing_fields(content, rel)  # project_x.md without `type:` -> type: project
        memory = parse_memory(content) if isinstance(content, str) else None
        refuse_copied_examples(memory, user_words(run_context))
        if memory is not None:
            refuse_contradicting(f"{memory.name}\n{memory.description}\n{memory.body}", run_context)
            if self.grounded:  # the name is a label ("Date Format"), not a claim: not checked
                # "owner: John Doe" is a claim too (put in a sentence: a value alone reads as a title)
                values = "\n".join(f"{k} is {v}" for k, v in memory.extra.items())
                refuse_ungrounded(f"{memory.description}\n{memory.body}\n{values}".rstrip(), run_context)
        result = memdir.save(rel, content)
        verb = "Created" if result.created else "Updated"
        note = _filled_note(filled)
        if quoted:
            were = "they were" if len(quoted) > 1 else "it was"
            note += f" The {' and '.join(quoted)} held YAML signs (':' or '#'), so {were} quoted."
        return (f"{verb} memory {file_name} ({result.entry.type}: {result.entry.description}). "
                + _index_said(result.index_warning) + note)

    @once_per_run(write=False)
    @_friendly("read")
    def read_file(self, file_name: str, offset: int = 0, limit: int = 200,
                  run_context: RunContext | None = None) -> str:
        """Read a memory file. Use it when MEMORY.md lists a memory that may matter for the task.

        Args:
            file_name: The file name as shown in MEMORY.md or list_files (e.g. "user_role.md").
            offset: First line to return (0-based), for reading long files in parts.
            limit: Most lines to return (default 200).

        Returns:
            The file's text, with a note when more lines remain.
        """
        memdir, rel = self._route(file_name, write=False)
        text = memdir.read(rel).text
        lines = text.splitlines()
        offset = max(0, int(offset))
        limit = max(1, int(limit))
        chunk = lines[offset: offset + limit]
        if offset >= len(lines) and lines:
            return f"{file_name} has only {len(lines)} lines; use a smaller offset."
        out = "\n".join(chunk)
        end = offset + len(chunk)
        if offset > 0 or end < len(lines):
            out += f"\n\n[lines {offset + 1}-{end} of {len(lines)}"
            out += f"; call read_file with offset={end} for more]" if end < len(lines) else "]"
        return out

    @once_per_run(write=False)
    @_friendly("listed")
    def list_files(self, run_context: RunContext | None = None) -> str:
        """List every memory file with its type and one-line description.

        Returns:
            One line per memory file; shared memories are listed under "shared/".
        """
        sections = []
        for label, memdir, prefix in self._places():
            entries = memdir.list_entries()
            # descriptions are memory text (a shared one may come from anyone): one line, no tag of ours
            lines = [f"- {prefix}{e.file} ({inline(e.type) or 'unknown'}) — {inline(e.description)}"
                     for e in entries[:LIST_LIMIT]]
            if len(entries) > LIST_LIMIT:
                lines.append(f"... and {len(entries) - LIST_LIMIT} more")
            sections.append(f"{label} ({len(entries)} files):\n" + ("\n".join(lines) if lines else "(none yet)"))
        return "\n\n".join(sections)

    @once_per_run(write=True)
    @_friendly("deleted")
    def delete_file(self, file_name: str, run_context: RunContext | None = None) -> str:
        """Delete a memory file that is wrong or no longer useful. Its MEMORY.md line is removed for you.

        Args:
            file_name: The file name as shown in MEMORY.md or list_files.

        Returns:
            Whether the file was deleted.
        """
        memdir, rel = self._route(file_name, write=True)
        removed = memdir.remove(rel)
        if removed is not None:  # in the place's trash: the user can restore it from the memory page
            return (f"Deleted memory {file_name} (kept in the trash for {memdir.limits.trash_days:g} days, "
                    "restorable from the memory page). " + _index_said(removed.index_warning))
        return f"There was no memory file named {file_name!r}; nothing to delete."

    @once_per_run(write=True)
    @_friendly("changed")
    def replace_file_chunk(self, file_name: str, old_chunk: str, new_chunk: str,
                           run_context: RunContext | None = None) -> str:
        """Replace one exact piece of text in a memory file, e.g. to correct or update a fact.

        Args:
            file_name: The memory file to edit.
            old_chunk: Text copied exactly from the file (read_file it first); it must occur once.
            new_chunk: The text to put in its place (may be empty to remove the chunk).

        Returns:
            What changed, or an error message saying what to fix.
        """
        memdir, rel = self._route(file_name, write=True)
        # a chunk may well be a number or a date ("2027-01-01"): only our examples and messages are refused
        if isinstance(new_chunk, str) and new_chunk.strip() \
                and copies_example(new_chunk, user_words(run_context), placeholders=False):
            raise MemoryFormatError(f"new_chunk {short(new_chunk)} is copied from the example in your "
                                    "instructions, not something this user said. Nothing was changed; write "
                                    "the new text in your own words from the conversation.")
        if isinstance(new_chunk, str):
            refuse_contradicting(new_chunk, run_context, what="new_chunk", tool="replace_file_chunk")
            if self.grounded:
                refuse_ungrounded(new_chunk, run_context, what="new_chunk", tool="replace_file_chunk")
        result = memdir.replace_chunk(rel, old_chunk, new_chunk)
        return f"Updated memory {file_name} ({result.entry.type}: {result.entry.description}). " \
            + _index_said(result.index_warning)

    @once_per_run(write=False)
    @_friendly("searched")
    def search_memories(self, query: str, limit: int = 5, run_context: RunContext | None = None) -> str:
        """Search your memories (and the shared ones) by words in their whole text, not only the
        descriptions in MEMORY.md. Use it when the index does not show where something is.

        Args:
            query: Words to look for, e.g. "staging database password rotation" (any language).
            limit: Most memory files to return (default 5, at most 10).

        Returns:
            The best-matching files, best first, each with its description and the lines that match.
        """
        if not isinstance(query, str) or not query.strip():
            return "Error: give some words to search for."
        limit = max(1, min(int(limit), SEARCH_LIMIT))
        found = search_places(self.own, self.shared, query, limit)
        if not found:
            return f"No memory matches {query!r}. list_files shows every memory."
        return "\n\n".join(found)

    # -- async twins ----------------------------------------------------------------------
    async def _in_pool(self, fn: Callable[..., str], *args: Any, run_context: RunContext | None) -> str:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.executor, wrap_context(lambda: fn(*args, run_context=run_context)))

    async def asave_file(self, file_name: str, content: str, run_context: RunContext | None = None) -> str:
        return await self._in_pool(self.save_file, file_name, content, run_context=run_context)

    async def aread_file(self, file_name: str, offset: int = 0, limit: int = 200,
                         run_context: RunContext | None = None) -> str:
        return await self._in_pool(self.read_file, file_name, offset, limit, run_context=run_context)

    async def alist_files(self, run_context: RunContext | None = None) -> str:
        return await self._in_pool(self.list_files, run_context=run_context)

    async def adelete_file(self, file_name: str, run_context: RunContext | None = None) -> str:
        return await self._in_pool(self.delete_file, file_name, run_context=run_context)

    async def areplace_file_chunk(self, file_name: str, old_chunk: str, new_chunk: str,
                                  run_context: RunContext | None = None) -> str:
        return await self._in_pool(self.replace_file_chunk, file_name, old_chunk, new_chunk, run_context=run_context)

    async def asearch_memories(self, query: str, limit: int = 5, run_context: RunContext | None = None) -> str:
        return await self._in_pool(self.search_memories, query, limit, run_context=run_context)

    def _places(self) -> list[tuple[str, MemoryDir, str]]:
        places = [("Your memories", self.own, "")]
        if self.shared is not None:
            mode = "writable" if self.shared_writable else "read-only"
            places.append((f"Shared memories ({mode})", self.shared, SHARED_PREFIX))
        return places


for _sync, _async in ((MemoryTools.save_file, MemoryTools.asave_file),
                      (MemoryTools.read_file, MemoryTools.aread_file),
                      (MemoryTools.list_files, MemoryTools.alist_files),
                      (MemoryTools.delete_file, MemoryTools.adelete_file),
                      (MemoryTools.replace_file_chunk, MemoryTools.areplace_file_chunk),
                      (MemoryTools.search_memories, MemoryTools.asearch_memories)):
    _async.__doc__ = _sync.__doc__  # the model sees the same description under arun()



def matching_lines(text: str, query: str, most: int = LINES_PER_FILE) -> list[str]:
    """The lines of ``text`` (past its frontmatter) sharing the most words with ``query``."""
    from .memdir import split_frontmatter
    from .recall.tokenize import tokenize

    try:
        body = split_frontmatter(text)[1]
    except MemoryFormatError:
        body = text
    wanted = set(tokenize(query))
    scored = []
    for number, line in enumerate(body.splitlines()):
        hits = len(wanted.intersection(tokenize(line))) if line.strip() else 0
        if hits:
            cut = line.strip() if len(line.strip()) <= LINE_CHARS else line.strip()[: LINE_CHARS - 1] + "…"
            scored.append((-hits, number, cut))
    return [cut for _, _, cut in sorted(scored)[:most]]


def search_places(own: MemoryDir, shared: MemoryDir | None, query: str, limit: int) -> list[str]:
    """One result block per matching memory: name, type, description, matching lines (the search
    index ranks; the chosen files are read, concurrently, for their lines)."""
    from .recall.context import read_files
    from .recall.ranking import PlaceRanker, places_for

    own_manifest = own.manifest()
    shared_manifest = shared.manifest() if shared is not None else None
    ranker = PlaceRanker(places_for(own, own_manifest, shared, shared_manifest))
    ranked = ranker.lexical(query, limit)
    if not ranked:
        return []
    reads = read_files(own, [r.file for r in ranked], shared, own.executor)
    out = []
    for r in ranked:
        shared_name = r.file.startswith(SHARED_PREFIX)
        manifest = shared_manifest if shared_name else own_manifest
        entry = manifest.entries.get(r.file[len(SHARED_PREFIX):] if shared_name else r.file) if manifest else None
        head = f"- {r.file}" + (f" ({entry.type or 'unknown'}) — {inline(entry.description)}" if entry else "")
        read = reads.get(r.file)
        lines = matching_lines(read.text, query) if read is not None else []
        out.append(head + "".join(f"\n    {line}" for line in lines))
    return out


__all__ = [
    "FRONTMATTER_EXAMPLE",
    "SEARCH_TOOL_NAME",
    "SHARED_PREFIX",
    "TOOL_NAMES",
    "MemoryTools",
    "matching_lines",
    "search_places",
]
