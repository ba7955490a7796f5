"""Serving memory agents from agno's AgentOS: one agent built per request, per user.

Why a factory: AgentOS serves many users from one process. A single Agent instance holds one
user's tools and prompt, so instead AgentOS gets an ``AgentFactory`` that calls
``build_agent(ctx.user_id, session_id=ctx.session_id, ...)`` on every request. Requests without
a user id are refused (memory is per user), and the process-wide clients are shared.
"""

from __future__ import annotations

from typing import Any

from agno.agent import Agent
from agno.agent.factory import AgentFactory

from .agent import build_agent
from .config import MemoryConfig


def memory_agent_factory(
    agent_id: str,
    db: Any,
    *,
    agent_type: str = "default",
    config: MemoryConfig | None = None,
    name: str | None = None,
    description: str | None = None,
    **agent_kwargs: Any,
) -> AgentFactory:
    """An ``AgentFactory`` for ``AgentOS(agents=[...])`` building a memory agent per request."""

    def factory(ctx: Any) -> Agent:
        if not ctx.user_id:
            raise ValueError("a user_id is required: harness-memory keeps memory per user")
        return build_agent(ctx.user_id, agent_type=agent_type, session_id=ctx.session_id, config=config,
                           id=agent_id, db=db, **agent_kwargs)

    return AgentFactory(id=agent_id, db=db, factory=factory, name=name or agent_id,
                        description=description or "Agent with persistent harness-memory")
