"""``MemoryHook``: the one shape of every agno hook harness-memory adds to an agent.

Why a ``BaseGuardrail``: it is the only hook shape agno 3.1 runs correctly under both ``run()``
and ``arun()``. agno normalises a guardrail to its ``check`` method under ``run()`` and to its
``async_check`` coroutine under ``arun()`` (``agno.utils.hooks.normalize_pre_hooks`` /
``normalize_post_hooks``), and runs guardrails inline even in AgentOS's background-hooks mode. A
plain function cannot be both: a sync one blocks the event loop under ``arun()``, an async one
makes ``run()`` raise, and a callable object with ``async __call__`` is never awaited.

So every memory hook subclasses ``MemoryHook`` and implements ``handle`` (which may block when
``blocking`` is True). Under ``arun()`` a blocking hook runs ``handle`` in an executor (the
services' ``work`` pool), so no memory hook ever blocks the event loop; a non-blocking hook (one
that only hands work to a background queue) runs inline. Nothing raises out of a hook: a memory
failure is logged and the user's run goes on. Hooks are shared, never copied (AgentOS deep-copies
agents per request).

Caveat (agno's, documented for users): agno fixes the hook flavour on an Agent's first run, so
an Agent first used with ``arun()`` and later with ``run()`` skips guardrail hooks (agno warns).
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, ClassVar

from agno.guardrails.base import BaseGuardrail

from .observe import wrap_context

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class HookCall:
    """What agno passed to one hook call (pre-hooks get ``run_input``, post-hooks ``run_output``)."""

    run_input: Any = None
    run_output: Any = None
    run_context: Any = None
    agent: Any = None
    session: Any = None
    user_id: str | None = None

    @property
    def session_id(self) -> str | None:
        for source in (self.run_output, self.run_context, self.session, self.agent):
            sid = getattr(source, "session_id", None)
            if isinstance(sid, str) and sid:
                return sid
        return None

    @property
    def resolved_user_id(self) -> str | None:
        for value in (getattr(self.run_output, "user_id", None), self.user_id,
                      getattr(self.run_context, "user_id", None), getattr(self.agent, "user_id", None)):
            if isinstance(value, str) and value:
                return value
        return None


class MemoryHook(BaseGuardrail):
    """Base of every harness-memory hook. Subclasses set ``blocking`` and implement ``handle``."""

    #: True when ``handle`` may wait for the store, Redis or a model (then it runs off the loop).
    blocking: ClassVar[bool] = False
    #: What the hook is, for log lines.
    what: ClassVar[str] = "memory hook"

    def __init__(self, executor: Executor | None = None) -> None:
        self.executor = executor

    def handle(self, call: HookCall) -> None:
        raise NotImplementedError

    def __deepcopy__(self, memo: dict[int, object]) -> MemoryHook:
        return self  # holds shared services, never per-run state

    def _run(self, call: HookCall) -> None:
        try:
            self.handle(call)
        except Exception as exc:  # memory never fails the user's run
            log.warning("%s failed (the run is unaffected): %s: %s", self.what, type(exc).__name__, exc)

    def check(self, run_input: Any = None, run_output: Any = None, run_context: Any = None, agent: Any = None,
              session: Any = None, user_id: str | None = None) -> None:
        """agno calls this under ``run()``."""
        self._run(HookCall(run_input, run_output, run_context, agent, session, user_id))

    async def async_check(self, run_input: Any = None, run_output: Any = None, run_context: Any = None,
                          agent: Any = None, session: Any = None, user_id: str | None = None) -> None:
        """agno awaits this under ``arun()``: blocking work goes to the executor, never the loop."""
        call = HookCall(run_input, run_output, run_context, agent, session, user_id)
        if not self.blocking:
            self._run(call)
            return
        try:
            await asyncio.get_running_loop().run_in_executor(self.executor, wrap_context(self._run), call)
        except RuntimeError as exc:  # the executor was shut down (process exiting)
            log.warning("%s skipped: %s", self.what, exc)

    def __call__(self, **kwargs: Any) -> None:
        """Call the hook like a function (tests, non-agno callers); same as ``check``."""
        self.check(**kwargs)


__all__ = ["HookCall", "MemoryHook"]
