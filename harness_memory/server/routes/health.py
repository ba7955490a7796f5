"""Liveness, readiness and the effective configuration.

Why two probes: liveness says the process answers (restart it if not); readiness says it can
do its job now (store and Redis reachable), so a load balancer stops sending traffic while the
store is down without the pod being killed. Each readiness check runs in a thread with its own
deadline (``server.ready_timeout_seconds``): a hung store answers "unavailable", not a hung
probe. Probes need no token (orchestrators do not send one) and reveal no names or secrets.
"""

import asyncio
import os
import time
from collections.abc import Awaitable
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from ...storage import LocalStore
from ..auth import Caller, require_admin
from ..deps import ServerContext
from ..schemas import Check, ErrorBody, Liveness, Readiness

PROBE_KEY = ".ready-probe"


def add_health_routes(router: APIRouter, ctx: ServerContext) -> None:
    CallerDep = Annotated[Caller, Depends(ctx.caller_dep())]

    @router.get("/health/live", tags=["health"], response_model=Liveness, summary="Liveness: the process answers")
    async def live() -> Liveness:
        return Liveness(status="ok")

    @router.get("/health/ready", tags=["health"], response_model=Readiness, responses={503: {"model": Readiness}},
                summary="Readiness: the store and Redis answer in time")
    async def ready() -> JSONResponse:
        checks = dict(await asyncio.gather(_timed("store", _check_store(ctx), ctx),
                                           _timed("redis", _check_redis(ctx), ctx)))
        ok = all(c.ok for c in checks.values())
        body = Readiness(status="ok" if ok else "unavailable", checks=checks)
        return JSONResponse(body.model_dump(), status_code=200 if ok else 503)

    @router.get("/config", tags=["health"], responses={401: {"model": ErrorBody}, 403: {"model": ErrorBody}},
                summary="The effective configuration, secrets masked")
    def config(caller: CallerDep) -> dict[str, Any]:
        if ctx.server.admin_token is not None:
            require_admin(caller, ctx.server, "the configuration")
        return ctx.config.public_dict()


async def _timed(name: str, check: Awaitable[str], ctx: ServerContext) -> tuple[str, Check]:
    started = time.monotonic()
    timeout = ctx.server.ready_timeout_seconds
    try:
        detail = await asyncio.wait_for(check, timeout)
        ok = True
    except TimeoutError:
        ok, detail = False, f"no answer within {timeout:g} s"
    except Exception as exc:  # any failure means "not ready", with its reason
        ok, detail = False, f"{type(exc).__name__}: {exc}"[:300]
    return name, Check(ok=ok, detail=detail, seconds=round(time.monotonic() - started, 4))


async def _check_store(ctx: ServerContext) -> str:
    """One GET of a key that need not exist, in the services' ``io`` pool (a hung request must
    not hold up the event loop's default executor, which shutdown waits for)."""
    store = ctx.services.store
    await store.aget_or_none(ctx.services.key_prefix + PROBE_KEY)
    if isinstance(store, LocalStore):
        if not os.access(store.root, os.W_OK):
            raise PermissionError("the local store root is not writable")
        return "local directory reachable"
    return "object store reachable"


async def _check_redis(ctx: ServerContext) -> str:
    client = ctx.services.redis
    if client is None:
        return "not configured (in-process mode)"
    await ctx.services.run_off_loop(client.ping)
    return "redis reachable"
