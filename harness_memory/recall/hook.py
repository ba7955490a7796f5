"""Per-run recall as an agno pre-hook: the recalled block goes in front of the user's message.

What agno 3.1 allows (read from ``agno/agent/_hooks.py`` and ``_messages.py``):

* Pre-hooks run after the session is loaded and BEFORE the run's messages are built, with
  ``run_input`` (per run), ``run_context`` (``user_id``, ``session_id``), ``agent`` and ``session``.
  A hook may change ``run_input.input_content``; agno then builds the user message from it and
  stores it as the run's input. That is the clean per-run seam.
* The system context cannot be changed per run cleanly: ``additional_context`` is a plain string
  on the Agent object, read when the system message is built. Writing it from a hook races between
  concurrent runs of one Agent and leaks into the next run; ``instructions`` could be a callable
  but belongs to the caller. So per-run recall prepends to the user message instead.

The hook is a ``MemoryHook`` (``harness_memory/hooks.py``): inline before the model in both
``run()`` and ``arun()`` (in the services' ``work`` pool under ``arun()``), even in background-
hooks mode. Caveats (documented for users): the recalled block becomes part of the stored user
message, so with history on it is replayed in later runs (which is also why files surfaced once
in a session are not surfaced again). Put this hook first in ``pre_hooks`` so the query it sees
is the user's own text.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from agno.models.message import Message
from agno.run.agent import RunInput
from agno.run.team import TeamRunInput

from ..hooks import HookCall, MemoryHook
from .service import recall_for_query

if TYPE_CHECKING:
    from .service import RecallRoot

log = logging.getLogger(__name__)

OPEN_TAG = "<recalled-memories>"
CLOSE_TAG = "</recalled-memories>"


def _query_of(run_input: RunInput | TeamRunInput | None) -> str | None:
    content = getattr(run_input, "input_content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, Message) and isinstance(content.content, str):
        return content.content
    return None


def wrap_block(block: str, message: str) -> str:
    """The user message with the recalled block in front, clearly fenced off from the user's words."""
    return f"{OPEN_TAG}\n{block.rstrip()}\n{CLOSE_TAG}\n\n{message}"


class RecallPreHook(MemoryHook):
    """Recalls memories for each run's input and prepends them to the user message.

    Built by ``make_recall_pre_hook``. Stateless apart from the shared services and the one
    query already recalled at build time, so AgentOS's per-request deep copies share it.
    """

    blocking = True
    what = "recall pre-hook"

    def __init__(self, services: RecallRoot, *, agent_type: str = "default", user_id: str | None = None,
                 skip_first_query: str | None = None) -> None:
        super().__init__(services.work)
        self.services = services
        self.agent_type = agent_type
        self.user_id = user_id
        self._skip = skip_first_query.strip() if skip_first_query else None

    def __repr__(self) -> str:
        return f"RecallPreHook(agent_type={self.agent_type!r}, user_id={self.user_id!r})"

    def _plan(self, call: HookCall) -> tuple[str, str, str | None] | None:
        """(user_id, query, session_id) for this run, or None when there is nothing to do."""
        query = _query_of(call.run_input)
        if not query or not query.strip() or OPEN_TAG in query:
            return None
        if self._skip is not None and query.strip() == self._skip:
            self._skip = None  # recalled at build time already
            return None
        run_context = call.run_context
        user_id = (run_context.user_id if run_context else None) or self.user_id or getattr(call.agent, "user_id",
                                                                                              None)
        if not user_id:
            log.debug("recall pre-hook: no user id for this run; skipped")
            return None
        session_id = run_context.session_id if run_context else None
        return user_id, query, session_id

    def _apply(self, run_input: RunInput | TeamRunInput, block: str) -> None:
        if not block:
            return
        content = run_input.input_content
        if isinstance(content, str):
            run_input.input_content = wrap_block(block, content)
        elif isinstance(content, Message) and isinstance(content.content, str):
            run_input.input_content = content.model_copy(update={"content": wrap_block(block, content.content)})

    def handle(self, call: HookCall) -> None:
        plan = self._plan(call)
        if plan is not None:
            user_id, query, session_id = plan
            self._apply(call.run_input, recall_for_query(self.services, user_id, self.agent_type, query,
                                                         session_id=session_id))


def make_recall_pre_hook(
    services: RecallRoot,
    *,
    agent_type: str = "default",
    user_id: str | None = None,
    skip_first_query: str | None = None,
) -> RecallPreHook:
    """A pre-hook for ``Agent(pre_hooks=[...])`` that recalls memories on every run.

    The user comes from the run (``run_context.user_id``), else ``user_id``, else ``agent.user_id``,
    so one AgentOS agent can serve many users. ``skip_first_query``: the query already recalled at
    build time (``build_agent(query=...)``); the first run with exactly that input is not recalled
    twice.
    """
    return RecallPreHook(services, agent_type=agent_type, user_id=user_id, skip_first_query=skip_first_query)


__all__ = ["CLOSE_TAG", "OPEN_TAG", "RecallPreHook", "make_recall_pre_hook", "wrap_block"]
