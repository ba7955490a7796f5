"""Which messages of a run enter the session buffer, and in what form.

Kept: the user's messages, the assistant's answers (with a one-line note per tool call) and
tool results — the conversation itself. Skipped:

* ``system`` / ``developer`` messages (the agent's prompt, rebuilt on every run);
* messages agno replays from history (``from_history=True``) — they were buffered on their own
  run, and buffering them again would count them twice;
* messages agno sends but never stores (``temporary=True``, ``add_to_agent_memory=False``: retry
  guidance, compaction summaries);
* injected memory: the ``[会话历史摘要]`` wrapper is removed from a user message (only the
  user's own words after ``用户最新消息：`` are kept), and leading ``<system-reminder>…`` style
  blocks (``INJECTED_TAGS``) are stripped; a message that was nothing but injection is dropped.

Every kept message is cut to ``session.message_max_chars`` (head and tail kept, the cut marked):
a tool that returns a 2 MB file must not fill the buffer or the summary call.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from .format import strip_session_summary
from .records import BufferedMessage

SKIPPED_ROLES = frozenset({"system", "developer"})
#: Leading ``<tag>…</tag>`` blocks other memory features put in front of a user message.
INJECTED_TAGS: tuple[str, ...] = (
    "system-reminder", "memory", "memories", "auto-memory", "auto_memory", "relevant-memories",
    "relevant_memories", "recalled-memories", "memory-context", "session-summary", "user-profile",
    "current_date", "current-date",
)
_LEADING_BLOCK = re.compile(
    r"^\s*<(" + "|".join(re.escape(t) for t in INJECTED_TAGS) + r")\b[^>]*>.*?</\1\s*>\s*", re.DOTALL
)
TOOL_ARGS_MAX_CHARS = 300


def _get(message: Any, name: str, default: Any = None) -> Any:
    if isinstance(message, dict):
        return message.get(name, default)
    return getattr(message, name, default)


def content_text(content: Any) -> str:
    """Text of a message content: a string or a list of parts (``{"type": "text", "text": …}``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            text = part if isinstance(part, str) else _get(part, "text")
            if isinstance(text, str):
                parts.append(text)
        return "\n".join(parts)
    return str(content)


def strip_injected(text: str) -> str:
    """The user's own words: without the summary wrapper and leading injected blocks."""
    text = strip_session_summary(text)
    while True:
        match = _LEADING_BLOCK.match(text)
        if not match:
            return text
        text = text[match.end() :]


def _tool_call_lines(calls: Any) -> list[str]:
    lines = []
    for call in calls or []:
        fn = _get(call, "function") or {}
        name = _get(fn, "name") or _get(call, "name") or "tool"
        args = _get(fn, "arguments") or _get(call, "arguments") or ""
        if not isinstance(args, str):
            args = json.dumps(args, ensure_ascii=False, default=str)
        if len(args) > TOOL_ARGS_MAX_CHARS:
            args = args[:TOOL_ARGS_MAX_CHARS] + "…"
        lines.append(f"→ tool call {name}({args})")
    return lines


def cut_text(text: str, max_chars: int) -> str:
    """``text`` within ``max_chars``: two thirds head, one third tail, the cut marked."""
    if len(text) <= max_chars:
        return text
    mark = f"\n…[{len(text) - max_chars} chars cut]…\n"
    room = max(0, max_chars - len(mark))
    head = room * 2 // 3
    return text[:head] + mark + text[len(text) - (room - head) :]


def to_buffered(message: Any, *, max_chars: int, now: float) -> BufferedMessage | None:
    """One agno ``Message`` / dict / ``BufferedMessage`` as a buffer entry, or None to skip it."""
    if isinstance(message, BufferedMessage):
        if message.role in SKIPPED_ROLES:
            return None
        return message
    role = str(_get(message, "role") or "")
    if not role or role in SKIPPED_ROLES:
        return None
    if _get(message, "from_history", False) or _get(message, "temporary", False):
        return None
    if _get(message, "add_to_agent_memory", True) is False:
        return None
    text = content_text(_get(message, "content"))
    if role == "user":
        text = strip_injected(text)
    calls = _get(message, "tool_calls") or []
    lines = [text] if text.strip() else []
    lines += _tool_call_lines(calls)
    for kind in ("images", "audio", "videos", "files"):
        media = _get(message, kind)
        if media:
            lines.append(f"[{len(media)} {kind} attached]")
    body = "\n".join(lines).strip()
    if not body:
        return None
    name = (_get(message, "tool_name") or _get(message, "name")) if role == "tool" else None
    created = _get(message, "created_at")
    return BufferedMessage(role=role, content=cut_text(body, max_chars), tokens=0,
                           tool_calls=len(calls), name=str(name) if name else None,
                           created_at=float(created) if isinstance(created, int | float) else now)


def convert(messages: Iterable[Any], *, max_chars: int, now: float) -> list[BufferedMessage]:
    out = []
    for message in messages:
        entry = to_buffered(message, max_chars=max_chars, now=now)
        if entry is not None:
            out.append(entry)
    return out
