"""harness-memory inside an agno AgentOS app: per-user memory agents plus the memory control plane.

AgentOS (agno 3.1) takes your own FastAPI app as ``base_app`` and adds its routes to it. Mount
``memory_router`` on that app under a prefix first: AgentOS owns ``/agents/{agent_id}/runs``,
``/health`` and ``/sessions`` itself (its default ``on_route_conflict="preserve_agentos"`` would
drop ours). The agent is an ``AgentFactory`` that builds a memory agent per request for the
request's ``user_id`` (AgentOS deep-copies agents per request; our clients are shared).

Run it (a model is needed for runs; the memory API works without one)::

    HARNESS_MEMORY_MODEL=qwen2.5 HARNESS_MEMORY_BASE_URL=http://127.0.0.1:8080/v1 \\
        .venv/bin/uvicorn --factory examples.agentos_mount:build_app --port 7777

    curl -X POST localhost:7777/agents/assistant/runs -F message='I write Vue' -F user_id=u1 -F stream=false
    curl -H 'wid: u1' localhost:7777/harness-memory/users/me/agents/default/memory
    # the memory page: http://localhost:7777/harness-memory/ui/

Auth: AgentOS's own auth (``authorization=...``) owns ``Authorization``; set
``server.api_token`` and send it as ``X-API-Key`` to protect the memory routes independently.
"""

from __future__ import annotations

from pathlib import Path

from agno.db.sqlite import SqliteDb
from agno.os import AgentOS
from fastapi import FastAPI

from harness_memory.agentos import memory_agent_factory
from harness_memory.config import MemoryConfig
from harness_memory.server import memory_router
from harness_memory.server.csrf import CrossSiteGuard
from harness_memory.server.ui import ui_router
from harness_memory.services import services_for

MEMORY_PREFIX = "/harness-memory"


def build_app(config: MemoryConfig | None = None, db_file: str | Path = "tmp/agentos.db") -> FastAPI:
    """The AgentOS app: agent ``assistant`` (memory per user) + the memory API under ``/harness-memory``."""
    config = config or MemoryConfig.load()
    services = services_for(config)  # the same clients build_agent uses
    base = FastAPI(title="Agents with harness-memory")
    base.include_router(memory_router(services), prefix=MEMORY_PREFIX)
    base.include_router(ui_router(MEMORY_PREFIX + "/ui"))  # the memory page at /harness-memory/ui/
    base.add_middleware(CrossSiteGuard, prefix=MEMORY_PREFIX)  # browser writes to memory: same origin only
    Path(db_file).parent.mkdir(parents=True, exist_ok=True)
    db = SqliteDb(db_file=str(db_file))
    agent_os = AgentOS(
        agents=[memory_agent_factory("assistant", db, config=config)],
        base_app=base,
        telemetry=False,
    )
    return agent_os.get_app()
