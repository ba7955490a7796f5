"""Capture: a finished agno run reduced to what the extractor should read.

Why so much is dropped: tool calls and results are process noise that cost tokens and teach
little about the user; the system prompt and injected blocks (auto-memory reminders, session
summaries, recalled memories, upload listings) are our own text — feeding them back would make
the model "learn" what it was told, and upload paths are session-scoped and would mislead later.
What remains: the user's own words and the assistant's final replies of THIS run
(``from_history`` messages were captured by the run that produced them).

A user message that held nothing but injected blocks (an upload-only turn: the
``<current_uploads>`` listing an upload middleware adds) is dropped together with the assistant's
reply to it — that reply only talks about the files.

The signal patterns (``signals.py``, packaged YAML) are applied to what remains; the functions
here use the bundled patterns, ``AutoMemory`` its configured ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..tokens import content_text, estimate_tokens
from .model import CapturedMessage, Signals
from .signals import default_patterns

MAX_CAPTURE_CHARS = 8000

# Blocks we (or agno, or the other memory features) inject into user messages.
_INJECTED_TAGS = (
    "system-reminder", "system_reminder", "memory", "auto-memory", "auto_memory", "current_date",
    "relevant-memories", "relevant_memories", "recalled-memories", "recalled_memories", "recalled-memory",
    "uploaded_files", "uploaded-files", "uploads", "attachments", "file_uploads", "current_uploads",
    "current-uploads",
    "memories_from_previous_interactions", "user_memories", "session_summary", "session-summary",
)
_INJECTED_BLOCK = re.compile(
    r"<(?P<tag>" + "|".join(re.escape(t) for t in _INJECTED_TAGS) + r")\b[^>]*>.*?</(?P=tag)\s*>",
    re.DOTALL | re.IGNORECASE,
)
# The session-memory entry wrapper: "[会话历史摘要]\n{summary}\n\n---\n用户最新消息：{message}".
_SUMMARY_WRAPPER = re.compile(
    r"^\s*\[(?:会话历史摘要|Session (?:history )?summary)\].*?\n-{3,}\s*\n\s*"
    r"(?:用户最新消息[：:]|User'?s? latest message:)\s*",
    re.DOTALL | re.IGNORECASE,
)


def strip_injected(text: str) -> str:
    """The user's own words: injected reminder/memory/summary/upload blocks removed."""
    text = _SUMMARY_WRAPPER.sub("", text, count=1)
    text = _INJECTED_BLOCK.sub("", text)
    return text.strip()


def capture_messages(messages: Iterable[Any], run_id: str | None = None) -> list[CapturedMessage]:
    """User inputs and final assistant replies of one run (agno ``Message`` objects or dicts).

    Skipped: ``from_history`` and ``temporary`` messages, system/developer/tool roles,
    assistant turns that call tools (intermediate), and anything left empty after stripping
    injected blocks. Long texts are cut at ``MAX_CAPTURE_CHARS``.
    """
    out: list[CapturedMessage] = []
    answering_injected = False  # the replies to a user message that was only injected blocks
    for index, msg in enumerate(messages):
        if _get(msg, "from_history") or _get(msg, "temporary"):
            continue
        role = _get(msg, "role")
        if role not in ("user", "assistant"):
            continue
        if role == "assistant" and _get(msg, "tool_calls"):
            continue
        text = content_text(_get(msg, "content"))
        if role == "user":
            stripped = strip_injected(text)
            answering_injected = bool(text.strip()) and not stripped
            text = stripped
        elif answering_injected:
            continue
        text = text.strip()
        if not text:
            continue
        if len(text) > MAX_CAPTURE_CHARS:
            text = text[:MAX_CAPTURE_CHARS] + " …[cut]"
        created = _get(msg, "created_at")
        out.append(CapturedMessage(role=role, text=text, key=CapturedMessage.make_key(run_id, role, text, index),
                                   created_at=float(created) if isinstance(created, int | float) else 0.0,
                                   tokens=estimate_tokens(text) if role == "user" else 0))
    return out


def capture_run(run_output: Any) -> list[CapturedMessage]:
    """``capture_messages`` over an agno ``RunOutput``."""
    return capture_messages(getattr(run_output, "messages", None) or [], getattr(run_output, "run_id", None))


def detect_correction(text: str) -> bool:
    """True when the user pushes back on what the assistant did ("不对", "don't use X, use Y" …)."""
    return "correction" in default_patterns().detect_text(text)


def detect_reinforcement(text: str) -> bool:
    """True when the user confirms an approach ("对，就这样", "完全正确", "exactly", "keep doing that").
    A negated phrase ("not perfect", "不太好") does not count, nor does a message that corrects."""
    return "reinforcement" in default_patterns().detect_text(text)


def detect_signals(messages: Iterable[CapturedMessage]) -> Signals:
    """Signals over the user messages (bundled patterns); a message that corrects does not also
    reinforce."""
    return default_patterns().detect(messages)


def _get(msg: Any, name: str) -> Any:
    if isinstance(msg, dict):
        return msg.get(name)
    return getattr(msg, name, None)
