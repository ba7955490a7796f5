"""The fixed text format of a session summary put in front of the user's latest message.

The format is fixed by the architecture (and other services parse it)::

    [会话历史摘要]
    {summary}

    ---
    用户最新消息：{message}

``strip_session_summary`` is its inverse; the post-hook uses it so the summary that was sent
with a message is never buffered (and summarised) again. Pure text functions, no I/O: the
buffer's message conversion and the request-entry injection both use them.
"""

from __future__ import annotations

from ..escape import MESSAGE_LABEL, SUMMARY_HEADER, block

MESSAGE_MARKER = "\n\n---\n" + MESSAGE_LABEL


def inject_session_summary(message: str, summary: str | None) -> str:
    """``message`` with ``summary`` in front (exact format above); unchanged without a summary.

    The summary is memory text (a model wrote it from the conversation): ``escape.block`` keeps
    it from holding our tags or either marker, so ``strip_session_summary`` always finds the
    user's message. Its surrounding blank lines are dropped: exactly one ``\n`` before the
    summary and the marker's ``\n\n`` after it."""
    if summary is None or not summary.strip():
        return message
    return f"{SUMMARY_HEADER}\n{block(summary).strip()}{MESSAGE_MARKER}{message}"


def strip_session_summary(text: str) -> str:
    """The user's message inside an injected text (the text itself when it is not injected)."""
    if not text.startswith(SUMMARY_HEADER + "\n"):
        return text
    cut = text.find(MESSAGE_MARKER, len(SUMMARY_HEADER))
    if cut < 0:
        return ""  # a summary block without a message: nothing of the user's to keep
    return text[cut + len(MESSAGE_MARKER) :]


__all__ = ["MESSAGE_MARKER", "SUMMARY_HEADER", "inject_session_summary", "strip_session_summary"]
