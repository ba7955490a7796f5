"""Session memory: a hot buffer shared by pods, one-pod-at-a-time summaries, request injection.

Wiring: ``attach_session_hooks(agent, services.session_manager())`` (``build_agent`` does it);
at a request entry of your own, ``await inject_summary_for_session(manager, session_id, message)``.
The hook names are imported lazily (they import agno).
"""

from typing import TYPE_CHECKING, Any

from .inject import (
    SUMMARY_HEADER,
    inject_session_summary,
    inject_summary_for_session,
    inject_summary_for_session_sync,
    strip_session_summary,
)
from .manager import SessionMemoryManager, session_manager_for
from .records import BufferedMessage, ExtractionResult, ExtractStatus, SessionInfo, SessionState

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

#: What users and the layers above use; the parts (buffer, cache, summary format, records of the
#: store) are imported from their modules.
__all__ = [
    "SUMMARY_HEADER",
    "BufferedMessage",
    "ExtractStatus",
    "ExtractionResult",
    "SessionBufferHook",
    "SessionInfo",
    "SessionMemoryManager",
    "SessionState",
    "SessionSummaryHook",
    "attach_session_hook",
    "attach_session_hooks",
    "inject_session_summary",
    "inject_summary_for_session",
    "inject_summary_for_session_sync",
    "make_session_post_hook",
    "make_session_summary_pre_hook",
    "session_manager_for",
    "strip_session_summary",
]
