"""The agno post-hook that feeds session memory.

Why a plain sync function: agno 3.1 filters a hook's arguments by its signature, runs a sync
hook under both ``run()`` and ``arun()``, makes ``run()`` raise on an async hook, and never
awaits a callable object's ``async __call__``. Hooks run inline, after the model/tool loop and
before the session is saved — so this one does only cheap work on the user's thread (pick this
run's new messages, convert them) and hands the rest (token counting, Redis, the summary call)
to the manager's background threads. The user's run never waits for Redis or the model, and
nothing raises out of the hook.

A stream that the caller stops reading early never reaches agno's post-hooks, so such a run
is not buffered (agno's behaviour, not ours).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .inject import SUMMARY_HEADER, inject_summary_for_session_sync
from .manager import SessionMemoryManager

log = logging.getLogger(__name__)

HOOK_MARK = "_harness_session_hook"


def _session_id(run_output: Any, run_context: Any, session: Any, agent: Any) -> str | None:
    for source in (run_output, run_context, session, agent):
        sid = getattr(source, "session_id", None)
        if isinstance(sid, str) and sid:
            return sid
    return None


def make_session_post_hook(manager: SessionMemoryManager) -> Callable[..., None]:
    """A hook for ``Agent(post_hooks=[...])``: buffers this run's new messages in the background
    and schedules a summary when the thresholds are reached."""

    def session_memory_post_hook(run_output: Any = None, agent: Any = None, session: Any = None,
                                 run_context: Any = None) -> None:
        try:
            session_id = _session_id(run_output, run_context, session, agent)
            messages = getattr(run_output, "messages", None)
            if not session_id or not messages:
                return
            manager.submit_run(session_id, messages)
        except Exception as exc:  # memory never fails the user's run
            log.warning("session memory hook failed (the run is unaffected): %s", exc)

    setattr(session_memory_post_hook, HOOK_MARK, manager)
    return session_memory_post_hook


def attach_session_hook(agent: Any, manager: SessionMemoryManager) -> Any:
    """Add the session hook to an agent you built yourself (idempotent); returns the agent."""
    hooks = list(getattr(agent, "post_hooks", None) or [])
    if not any(getattr(h, HOOK_MARK, None) is manager for h in hooks):
        hooks.append(make_session_post_hook(manager))
        agent.post_hooks = hooks
    return agent


PRE_HOOK_MARK = "_harness_session_pre_hook"


def make_session_summary_pre_hook(manager: SessionMemoryManager) -> Callable[..., None]:
    """A hook for ``Agent(pre_hooks=[...])``: puts the session summary in front of the user's message.

    Why a pre-hook: agno runs pre-hooks before it builds the model's messages, so the summary
    reaches the model on every run of a session without the app doing anything. The summary comes
    from this pod's LRU (one store GET on a miss); a failure leaves the message unchanged. A message
    already wrapped (the control plane's run endpoint) is left alone.
    """

    def session_summary_pre_hook(run_input: Any = None, run_context: Any = None, agent: Any = None) -> None:
        try:
            session_id = _session_id(None, run_context, None, agent)
            content = getattr(run_input, "input_content", None)
            if not session_id or not isinstance(content, str) or content.startswith(SUMMARY_HEADER):
                return
            run_input.input_content = inject_summary_for_session_sync(manager, session_id, content)
        except Exception as exc:  # memory never fails the user's run
            log.warning("session summary injection failed (the run is unaffected): %s", exc)

    setattr(session_summary_pre_hook, PRE_HOOK_MARK, manager)
    return session_summary_pre_hook


def attach_session_hooks(agent: Any, manager: SessionMemoryManager, *, inject_summary: bool = True) -> Any:
    """Attach the buffering post-hook and (optionally) the summary-injecting pre-hook (idempotent)."""
    attach_session_hook(agent, manager)
    if inject_summary:
        hooks = list(getattr(agent, "pre_hooks", None) or [])
        if not any(getattr(h, PRE_HOOK_MARK, None) is manager for h in hooks):
            hooks.append(make_session_summary_pre_hook(manager))
            agent.pre_hooks = hooks
    return agent
