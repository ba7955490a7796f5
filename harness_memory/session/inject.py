"""Request entry: put the session summary in front of the user's latest message.

The format is fixed by the architecture (and other services parse it)::

    [会话历史摘要]
    {summary}

    ---
    用户最新消息：{message}

``strip_session_summary`` is its inverse; the post-hook uses it so the summary that was sent
with a message is never buffered (and summarised) again.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .manager import SessionMemoryManager

log = logging.getLogger(__name__)

SUMMARY_HEADER = "[会话历史摘要]"
MESSAGE_MARKER = "\n\n---\n用户最新消息："


def inject_session_summary(message: str, summary: str | None) -> str:
    """``message`` with ``summary`` in front (exact format above); unchanged without a summary."""
    if summary is None or not summary.strip():
        return message
    return f"{SUMMARY_HEADER}\n{summary}{MESSAGE_MARKER}{message}"


def strip_session_summary(text: str) -> str:
    """The user's message inside an injected text (the text itself when it is not injected)."""
    if not text.startswith(SUMMARY_HEADER + "\n"):
        return text
    cut = text.find(MESSAGE_MARKER, len(SUMMARY_HEADER))
    if cut < 0:
        return ""  # a summary block without a message: nothing of the user's to keep
    return text[cut + len(MESSAGE_MARKER) :]


async def inject_summary_for_session(manager: SessionMemoryManager, session_id: str | None,
                                     message: str) -> str:
    """``message`` with the session's summary in front, or unchanged (no session, no summary,
    invalid session id, store down — memory never fails the request)."""
    if not session_id:
        return message
    try:
        summary = await manager.get_summary(session_id)
    except Exception as exc:  # get_summary degrades itself; this is a last guard
        log.warning("session summary for %s unavailable (%s); sending the message alone", session_id, exc)
        return message
    return inject_session_summary(message, summary)


def inject_summary_for_session_sync(manager: SessionMemoryManager, session_id: str | None,
                                    message: str) -> str:
    """The blocking twin of ``inject_summary_for_session`` (for sync request handlers)."""
    if not session_id:
        return message
    try:
        summary = manager.get_summary_sync(session_id)
    except Exception as exc:
        log.warning("session summary for %s unavailable (%s); sending the message alone", session_id, exc)
        return message
    return inject_session_summary(message, summary)
