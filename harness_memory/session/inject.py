"""Request entry: put the session's summary in front of the user's latest message.

The text format lives in ``format.py``; this module fetches the summary through the manager
(its pod cache, else the store) and never lets a memory failure reach the request.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .format import MESSAGE_MARKER, SUMMARY_HEADER, inject_session_summary, strip_session_summary

if TYPE_CHECKING:
    from .manager import SessionMemoryManager

log = logging.getLogger(__name__)


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


__all__ = ["MESSAGE_MARKER", "SUMMARY_HEADER", "inject_session_summary", "inject_summary_for_session",
           "inject_summary_for_session_sync", "strip_session_summary"]
