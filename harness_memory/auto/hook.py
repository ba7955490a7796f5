"""The agno post-hook of auto memory: capture the finished run and queue it for extraction.

A ``MemoryHook`` (``harness_memory/hooks.py``): it only captures and enqueues — it never waits
for the store or a model — so it runs inline under ``run()`` and ``arun()`` alike, and nothing
raises out of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..hooks import HookCall, MemoryHook
from ..layout import validate_id

if TYPE_CHECKING:
    from .service import AutoMemory


class AutoMemoryHook(MemoryHook):
    """Post-hook for ``Agent(post_hooks=[...])``: one run of ``agent_type`` into the debounced queue."""

    what = "auto-memory capture"

    def __init__(self, auto: AutoMemory, agent_type: str = "default") -> None:
        super().__init__(auto.services.work)
        self.auto = auto
        self.agent_type = validate_id(agent_type, "agent type")

    def handle(self, call: HookCall) -> None:
        self.auto.capture_hook_call(self.agent_type, call)


__all__ = ["AutoMemoryHook"]
