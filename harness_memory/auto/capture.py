"""Capture: a finished agno run reduced to what the extractor should read.

Why so much is dropped: tool calls and results are process noise that cost tokens and teach
little about the user; the system prompt and injected blocks (auto-memory reminders, session
summaries, recalled memories, upload listings) are our own text — feeding them back would make
the model "learn" what it was told, and upload paths are session-scoped and would mislead later.
What remains: the user's own words and the assistant's final replies of THIS run
(``from_history`` messages were captured by the run that produced them).

Correction and reinforcement signals are spotted here with cheap patterns (Chinese and
English) so the updater can tell the model to record a correction with high confidence.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ..tokens import content_text, estimate_tokens
from .model import CapturedMessage, Signals

MAX_CAPTURE_CHARS = 8000
_HINT_CHARS = 160

# Blocks we (or agno, or the other memory features) inject into user messages.
_INJECTED_TAGS = (
    "system-reminder", "system_reminder", "memory", "auto-memory", "auto_memory", "current_date",
    "relevant-memories", "relevant_memories", "recalled-memories", "recalled_memories", "recalled-memory",
    "uploaded_files", "uploaded-files", "uploads", "attachments", "file_uploads",
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

_CORRECTION_PATTERNS = [re.compile(p, re.IGNORECASE) for p in (
    r"不对", r"不是这样", r"错了", r"搞错", r"弄错", r"说错", r"理解错", r"有误", r"不正确",
    r"(?:别|不要|不许|禁止)(?:再)?用.{1,30}?[，,、；;\s]*(?:要|请|改)?用",
    r"不是.{1,40}?而是", r"我(?:说|要|指)的是", r"纠正", r"(?:别|不要)再",
    r"\bthat'?s not (?:right|correct|it|what i)", r"\bthat is not (?:right|correct)",
    r"\bthat'?s (?:wrong|incorrect)\b", r"\bthat is (?:wrong|incorrect)\b",
    r"\byou (?:got|have) (?:that|it|this) wrong\b", r"\byou(?:'re| are) wrong\b",
    r"\bnot what i (?:asked|meant|said|wanted)\b", r"\bincorrect\b",
    r"\b(?:don'?t|do not|never|stop) us(?:e|ing)\b.{1,60}?\b(?:use|instead)\b",
    r"\buse\b.{1,60}?\binstead\b", r"^\W*(?:no|nope)\b[\s,.!]*(?:actually|i (?:meant|said))",
    r"^\W*actually\s*[,，]", r"\bi (?:already )?(?:said|told you)\b",
)]
_REINFORCEMENT_PATTERNS = [re.compile(p, re.IGNORECASE) for p in (
    r"对[，,\s]*就(?:这样|是这样)", r"就是这样", r"没错", r"很好", r"完美", r"正是", r"太好了", r"继续保持",
    r"就这么(?:做|办|写)", r"非常好", r"好极了", r"以后都这样",
    r"\bexactly\b", r"\bperfect\b", r"\bkeep doing (?:that|this|it)\b", r"\bspot on\b",
    r"\bthat'?s (?:right|correct|it|exactly|perfect|great)\b", r"\bgreat job\b", r"\bwell done\b",
    r"\byes,? (?:like )?(?:that|this)\b", r"\blooks (?:good|great)\b", r"\blove it\b",
)]
_NEGATION_BEFORE = re.compile(r"(?:不|没|别|\bnot\s+|n't\s+|\bnever\s+)$", re.IGNORECASE)


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
            text = strip_injected(text)
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
    return any(p.search(text) for p in _CORRECTION_PATTERNS)


def detect_reinforcement(text: str) -> bool:
    """True when the user confirms an approach ("对，就这样", "exactly", "perfect, keep doing that").
    A negated phrase ("not perfect", "不太好") does not count."""
    for pattern in _REINFORCEMENT_PATTERNS:
        for match in pattern.finditer(text):
            if not _NEGATION_BEFORE.search(text[max(0, match.start() - 8) : match.start()]):
                return True
    return False


def detect_signals(messages: Iterable[CapturedMessage]) -> Signals:
    """Signals over the user messages; a message that corrects does not also reinforce."""
    correction = reinforcement = False
    hints: list[str] = []
    for msg in messages:
        if msg.role != "user":
            continue
        if detect_correction(msg.text):
            correction = True
            hints.append(" ".join(msg.text.split())[:_HINT_CHARS])
        elif detect_reinforcement(msg.text):
            reinforcement = True
    return Signals(correction, reinforcement, tuple(hints[-5:]))


def _get(msg: Any, name: str) -> Any:
    if isinstance(msg, dict):
        return msg.get(name)
    return getattr(msg, name, None)
