"""Session memory: a hot buffer shared by pods, one-pod-at-a-time summaries, request injection.

Wiring: ``attach_session_hooks(agent, services.session_manager())`` (``build_agent`` does it);
at a request entry of your own, ``await inject_summary_for_session(manager, session_id, message)``.
The hook names are imported lazily (they import agno).
"""

from typing import TYPE_CHECKING, Any

from .buffer import SessionBuffer
from .cache import CachedSummary, SummaryCache
from .extract import SummaryModel, extraction_due
from .inject import (
    SUMMARY_HEADER,
    inject_session_summary,
    inject_summary_for_session,
    inject_summary_for_session_sync,
    strip_session_summary,
)
from .manager import ManagerStats, SessionMemoryManager, session_manager_for
from .records import (
    BufferedMessage,
    CommitOutcome,
    ExtractionResult,
    ExtractStatus,
    PendingBatch,
    SessionInfo,
    SessionState,
)
from .summary import PROMPT_MARKER as PROMPT_MARKER_FOR_TESTS
from .summary import StoredSummary, SummaryDoc, SummaryRejected, parse_summary, render_summary

if TYPE_CHECKING:
    from .hooks import (
        SessionBufferHook,
        SessionSummaryHook,
        attach_session_hook,
        attach_session_hooks,
        make_session_post_hook,
        make_session_summary_pre_hook,
    )

_HOOK_NAMES = ("SessionBufferHook", "SessionSummaryHook", "attach_session_hook", "attach_session_hooks",
               "make_session_post_hook", "make_session_summary_pre_hook")


def __getattr__(name: str) -> Any:
    if name in _HOOK_NAMES:
        from . import hooks

        return getattr(hooks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__all__ = [
    "PROMPT_MARKER_FOR_TESTS",
    "SUMMARY_HEADER",
    "BufferedMessage",
    "CachedSummary",
    "CommitOutcome",
    "ExtractStatus",
    "ExtractionResult",
    "ManagerStats",
    "PendingBatch",
    "SessionBuffer",
    "SessionBufferHook",
    "SessionInfo",
    "SessionMemoryManager",
    "SessionState",
    "SessionSummaryHook",
    "StoredSummary",
    "SummaryCache",
    "SummaryDoc",
    "SummaryModel",
    "SummaryRejected",
    "attach_session_hook",
    "attach_session_hooks",
    "extraction_due",
    "inject_session_summary",
    "inject_summary_for_session",
    "inject_summary_for_session_sync",
    "make_session_post_hook",
    "make_session_summary_pre_hook",
    "parse_summary",
    "render_summary",
    "session_manager_for",
    "strip_session_summary",
]
