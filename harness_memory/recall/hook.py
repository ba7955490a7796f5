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
* A plain function hook is sent to the background under AgentOS's background-hooks mode (too late
  to matter) and would block the event loop under ``arun()``. A ``BaseGuardrail`` always runs
  inline, before the model, in both modes, and agno calls ``check`` under ``run()`` and
  ``async_check`` under ``arun()`` — so the hook is a guardrail that never rejects anything;
  ``async_check`` does the blocking work in a worker thread.

Caveats (documented for users): agno fixes the hook flavour on an Agent's first run, so an Agent
first used with ``arun()`` and later with ``run()`` skips this hook (agno warns); the recalled
block becomes part of the stored user message, so with history on it is replayed in later runs
(which is also why files surfaced once in a session are not surfaced again). Put this hook first
in ``pre_hooks`` so the query it sees is the user's own text.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agno.guardrails.base import BaseGuardrail
from agno.models.message import Message
from agno.run.agent import RunInput
from agno.run.base import RunContext
from agno.run.team import TeamRunInput

from ..services import MemoryServices
from .service import recall_for_query

log = logging.getLogger(__name__)

OPEN_TAG = "<recalled-memories>"
CLOSE_TAG = "</recalled-memories>"


def _query_of(run_input: RunInput | TeamRunInput) -> str | None:
    content = run_input.input_content
    if isinstance(content, str):
        return content
    if isinstance(content, Message) and isinstance(content.content, str):
        return content.content
    return None


def wrap_block(block: str, message: str) -> str:
    """The user message with the recalled block in front, clearly fenced off from the user's words."""
    return f"{OPEN_TAG}\n{block.rstrip()}\n{CLOSE_TAG}\n\n{message}"


class RecallPreHook(BaseGuardrail):
    """Recalls memories for each run's input and prepends them to the user message.

    Built by ``make_recall_pre_hook``. Stateless apart from the shared services, so AgentOS's
    per-request deep copies share it.
    """

    def __init__(self, services: MemoryServices, *, agent_type: str = "default", user_id: str | None = None,
                 skip_first_query: str | None = None) -> None:
        self.services = services
        self.agent_type = agent_type
        self.user_id = user_id
        self._skip = skip_first_query.strip() if skip_first_query else None

    def __deepcopy__(self, memo: dict[int, object]) -> RecallPreHook:
        return self

    def __repr__(self) -> str:
        return f"RecallPreHook(agent_type={self.agent_type!r}, user_id={self.user_id!r})"

    def _plan(self, run_input: RunInput | TeamRunInput, run_context: RunContext | None, agent: Any
              ) -> tuple[str, str, str | None] | None:
        """(user_id, query, session_id) for this run, or None when there is nothing to do."""
        query = _query_of(run_input)
        if not query or not query.strip() or OPEN_TAG in query:
            return None
        if self._skip is not None and query.strip() == self._skip:
            self._skip = None  # recalled at build time already
            return None
        user_id = (run_context.user_id if run_context else None) or self.user_id or getattr(agent, "user_id", None)
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

    def check(self, run_input: RunInput | TeamRunInput, run_context: RunContext | None = None,
              agent: Any = None) -> None:
        """agno calls this under ``run()``."""
        try:
            plan = self._plan(run_input, run_context, agent)
            if plan is not None:
                user_id, query, session_id = plan
                self._apply(run_input, recall_for_query(self.services, user_id, self.agent_type, query,
                                                        session_id=session_id))
        except Exception:  # never fail the run
            log.exception("recall pre-hook failed; the run continues without recalled memories")

    async def async_check(self, run_input: RunInput | TeamRunInput, run_context: RunContext | None = None,
                          agent: Any = None) -> None:
        """agno awaits this under ``arun()``; the store and model calls run in a worker thread."""
        try:
            plan = self._plan(run_input, run_context, agent)
            if plan is not None:
                user_id, query, session_id = plan
                block = await asyncio.to_thread(recall_for_query, self.services, user_id, self.agent_type,
                                                query, session_id)
                self._apply(run_input, block)
        except Exception:  # never fail the run
            log.exception("recall pre-hook failed; the run continues without recalled memories")


def make_recall_pre_hook(
    services: MemoryServices,
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
