"""Liveness, readiness and the effective configuration.

Why two probes: liveness says the process answers (restart it if not); readiness says it can
do its job now (store and Redis reachable), so a load balancer stops sending traffic while the
store is down without the pod being killed. Each readiness check runs in a thread with its own
deadline (``server.ready_timeout_seconds``): a hung store answers "unavailable", not a hung
probe. The checks are the quick forms of ``harness-memory doctor``'s (``control.doctor``: no
writes, no model calls), so both give the same verdict in the same words. Probes need no token
(orchestrators do not send one) and reveal no names or secrets.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from ...control.doctor import ready_checks
from ..auth import Caller, require_admin
from ..deps import ServerContext
from ..schemas import Check, ErrorBody, Liveness, Readiness


def add_health_routes(router: APIRouter, ctx: ServerContext) -> None:
    CallerDep = Annotated[Caller, Depends(ctx.caller_dep())]

    @router.get("/health/live", tags=["health"], response_model=Liveness, summary="Liveness: the process answers")
    async def live() -> Liveness:
        return Liveness(status="ok")

    @router.get("/health/ready", tags=["health"], response_model=Readiness, responses={503: {"model": Readiness}},
                summary="Readiness: the store and Redis answer in time")
    async def ready() -> JSONResponse:
        report = await ready_checks(ctx.services, ctx.server.ready_timeout_seconds)
        checks = {r.name: Check(ok=r.ok, detail=r.detail, seconds=r.seconds) for r in report.results}
        body = Readiness(status="ok" if report.ok else "unavailable", checks=checks)
        return JSONResponse(body.model_dump(), status_code=200 if report.ok else 503)

    @router.get("/config", tags=["health"], responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}},
                summary="The effective configuration, secrets masked")
    def config(caller: CallerDep) -> dict[str, Any]:
        if ctx.server.admin_token is not None:
            require_admin(caller, ctx.server, "the configuration")
        return ctx.config.public_dict()
