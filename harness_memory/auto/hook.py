"""The agno post-hook of auto memory: capture the finished run and queue it for extraction.

A ``MemoryHook`` (``harness_memory/hooks.py``): it only captures and enqueues — it never waits
for the store or a model — so it runs inline under ``run()`` and ``arun()`` alike, and nothing
raises out of it.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Protocol

from ..hooks import HookCall, MemoryHook
from ..layout import validate_id


class Capturing(Protocol):
    """What the hook uses of auto memory (``AutoMemory`` is one; a Protocol, so this module does
    not import the service that imports it)."""

    executor: Executor

    def capture_hook_call(self, agent_type: str, call: HookCall) -> None: ...


class AutoMemoryHook(MemoryHook):
    """Post-hook for ``Agent(post_hooks=[...])``: one run of ``agent_type`` into the debounced queue."""

    what = "auto-memory capture"

    def __init__(self, auto: Capturing, agent_type: str = "default") -> None:
        super().__init__(auto.executor)
        self.auto = auto
        self.agent_type = validate_id(agent_type, "agent type")

    def handle(self, call: HookCall) -> None:
        self.auto.capture_hook_call(self.agent_type, call)


__all__ = ["AutoMemoryHook"]
