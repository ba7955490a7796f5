"""harness-memory: durable, multi-user, multi-pod memory for Agno agents.

``from harness_memory import build_agent`` is all most apps need. Names are imported lazily so
that ``import harness_memory`` stays cheap (agno is only loaded when an agent is built).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .version import __version__

_EXPORTS: dict[str, str] = {
    "build_agent": "harness_memory.agent",
    "inject_memory_tools": "harness_memory.agent",
    "load_agent_memory_prompt": "harness_memory.prompt",
    "MemoryConfig": "harness_memory.config",
    "MemoryServices": "harness_memory.services",
    "services_for": "harness_memory.services",
    "MemoryTools": "harness_memory.tools",
    "MemoryDir": "harness_memory.memdir",
    "Place": "harness_memory.layout",
    "SessionMemoryManager": "harness_memory.session",
    "inject_session_summary": "harness_memory.session",
    "find_relevant_memories": "harness_memory.recall",
}

__all__ = [  # noqa: RUF022 - grouped like _EXPORTS
    "__version__",
    "build_agent",
    "inject_memory_tools",
    "load_agent_memory_prompt",
    "MemoryConfig",
    "MemoryServices",
    "services_for",
    "MemoryTools",
    "MemoryDir",
    "Place",
    "SessionMemoryManager",
    "inject_session_summary",
    "find_relevant_memories",
]

if TYPE_CHECKING:
    from .agent import build_agent, inject_memory_tools
    from .config import MemoryConfig
    from .layout import Place
    from .memdir import MemoryDir
    from .prompt import load_agent_memory_prompt
    from .recall import find_relevant_memories
    from .services import MemoryServices, services_for
    from .session import SessionMemoryManager, inject_session_summary
    from .tools import MemoryTools


assert set(__all__) == {"__version__", *_EXPORTS}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'harness_memory' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
