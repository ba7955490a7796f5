"""Snapshot status of a user's agent memory, and the two answers to an available update:
replace (drop local memories, copy the snapshot) or mark-synced (keep them, dismiss)."""

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool

from ...control.integrations import snapshot_action, snapshot_status
from ...layout import validate_id
from ..deps import AgentTypePath, ServerContext
from ..schemas import ERRORS, SnapshotView

PREFIX = "/users/{user_id}/agents/{agent_type}/snapshot"


def add_snapshot_routes(router: APIRouter, ctx: ServerContext) -> None:
    opts: dict[str, Any] = {"tags": ["snapshots"], "responses": ERRORS}
    User = Annotated[str, Depends(ctx.user_dep())]

    @router.get(PREFIX, **opts, response_model=SnapshotView,
                summary="Snapshot state: none, initialize or prompt-update")
    async def status(user: User, agent_type: AgentTypePath) -> SnapshotView:
        validate_id(agent_type, "agent type")
        return SnapshotView(**await run_in_threadpool(snapshot_status, ctx.services, user, agent_type))

    @router.post(PREFIX + "/replace", **opts, response_model=SnapshotView,
                 summary="Replace the user's memories with the snapshot and mark it synced")
    async def replace(user: User, agent_type: AgentTypePath) -> SnapshotView:
        validate_id(agent_type, "agent type")
        return SnapshotView(**await run_in_threadpool(snapshot_action, ctx.services, user, agent_type, "replace"))

    @router.post(PREFIX + "/mark-synced", **opts, response_model=SnapshotView,
                 summary="Keep the user's memories and dismiss this snapshot version")
    async def mark_synced(user: User, agent_type: AgentTypePath) -> SnapshotView:
        validate_id(agent_type, "agent type")
        return SnapshotView(**await run_in_threadpool(snapshot_action, ctx.services, user, agent_type,
                                                      "mark-synced"))
