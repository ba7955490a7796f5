"""The agno hooks of session memory: buffer each run (post), put the summary in front (pre).

Both are ``MemoryHook``s (``harness_memory/hooks.py`` says why that one shape):

* ``SessionBufferHook`` (post) does only cheap work on the user's thread — pick this run's new
  messages, convert them — and hands the rest (token counting, Redis, the summary call) to the
  manager's background threads. It never waits for Redis or the model, so it runs inline.
* ``SessionSummaryHook`` (pre) may read the summary from the store on a cache miss, so under
  ``arun()`` it runs in the manager's executor: twenty concurrent runs wait about one store
  latency, not twenty, and the event loop never blocks. It runs before agno builds the model's
  messages, so the summary reaches the model on every run of a session without the app doing
  anything. A message already wrapped (the control plane's run endpoint) is left alone.

A stream that the caller stops reading early never reaches agno's post-hooks, so such a run
is not buffered (agno's behaviour, not ours).
"""

from __future__ import annotations

from typing import Any

from ..hooks import HookCall, MemoryHook
from .format import SUMMARY_HEADER
from .inject import inject_summary_for_session_sync
from .manager import SessionMemoryManager


class SessionBufferHook(MemoryHook):
    """Post-hook: buffers this run's new messages in the background; schedules a summary when due."""

    what = "session memory hook"

    def __init__(self, manager: SessionMemoryManager) -> None:
        super().__init__(manager.executor)
        self.manager = manager

    def handle(self, call: HookCall) -> None:
        session_id = call.session_id
        messages = getattr(call.run_output, "messages", None)
        if session_id and messages:
            self.manager.submit_run(session_id, messages)


class SessionSummaryHook(MemoryHook):
    """Pre-hook: the session summary in front of the user's message (format in ``format.py``)."""

    blocking = True
    what = "session summary injection"

    def __init__(self, manager: SessionMemoryManager) -> None:
        super().__init__(manager.executor)
        self.manager = manager

    def handle(self, call: HookCall) -> None:
        session_id = HookCall(run_context=call.run_context, agent=call.agent).session_id
        run_input = call.run_input
        content = getattr(run_input, "input_content", None)
        if not session_id or not isinstance(content, str) or content.startswith(SUMMARY_HEADER):
            return
        run_input.input_content = inject_summary_for_session_sync(self.manager, session_id, content)


def make_session_post_hook(manager: SessionMemoryManager) -> SessionBufferHook:
    """A hook for ``Agent(post_hooks=[...])`` that buffers runs of ``manager``'s sessions."""
    return SessionBufferHook(manager)


def make_session_summary_pre_hook(manager: SessionMemoryManager) -> SessionSummaryHook:
    """A hook for ``Agent(pre_hooks=[...])`` that puts the session summary in front of the message."""
    return SessionSummaryHook(manager)


def attach_session_hook(agent: Any, manager: SessionMemoryManager) -> Any:
    """Add the buffering post-hook to an agent you built yourself (idempotent); returns the agent."""
    hooks = list(getattr(agent, "post_hooks", None) or [])
    if not any(isinstance(h, SessionBufferHook) and h.manager is manager for h in hooks):
        hooks.append(SessionBufferHook(manager))
        agent.post_hooks = hooks
    return agent


def attach_session_hooks(agent: Any, manager: SessionMemoryManager, *, inject_summary: bool = True) -> Any:
    """Attach the buffering post-hook and (optionally) the summary-injecting pre-hook (idempotent)."""
    attach_session_hook(agent, manager)
    if inject_summary:
        hooks = list(getattr(agent, "pre_hooks", None) or [])
        if not any(isinstance(h, SessionSummaryHook) and h.manager is manager for h in hooks):
            hooks.append(SessionSummaryHook(manager))
            agent.pre_hooks = hooks
    return agent


__all__ = ["SessionBufferHook", "SessionSummaryHook", "attach_session_hook", "attach_session_hooks",
           "make_session_post_hook", "make_session_summary_pre_hook"]
