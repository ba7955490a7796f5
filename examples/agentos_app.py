"""AgentOS serving a memory agent for many users: one agent built per request.

    HARNESS_MEMORY_MODEL=... HARNESS_MEMORY_BASE_URL=... python examples/agentos_app.py
    curl -X POST http://127.0.0.1:7777/agents/assistant/runs \
         -F message="I'm a frontend engineer" -F user_id=alice -F stream=false
"""

from __future__ import annotations

import os

from agno.db.sqlite import SqliteDb
from agno.os import AgentOS

from harness_memory.agentos import memory_agent_factory

db = SqliteDb(db_file=os.environ.get("AGENTOS_DB", "tmp/agentos.db"))
agent_os = AgentOS(
    id="harness-memory-demo",
    agents=[memory_agent_factory("assistant", db, add_history_to_context=True)],
    telemetry=False,
)
app = agent_os.get_app()

if __name__ == "__main__":
    agent_os.serve(app="agentos_app:app", host="127.0.0.1", port=int(os.environ.get("PORT", "7777")))
