"""``GET /metrics``: the Prometheus text exposition of this process's memory work.

Why behind the API token (when one is set): the numbers name no user, but they say how busy the
service is and what fails; a Prometheus scrape config sends the token as a bearer credential.
In a multi-process server (``PROMETHEUS_MULTIPROC_DIR`` set) any worker answers with the sum of
all workers (``observe.metrics``).
"""

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response

from ..auth import Caller
from ..deps import ServerContext
from ..errors import ApiError


def add_metrics_routes(router: APIRouter, ctx: ServerContext) -> None:
    CallerDep = Annotated[Caller, Depends(ctx.caller_dep())]

    @router.get("/metrics", tags=["health"], response_class=Response,
                summary="Prometheus metrics of memory work (store, tools, locks, summaries, auto memory, recall, "
                        "light-model calls and tokens)")
    async def metrics(request: Request, _caller: CallerDep) -> Response:
        telemetry = ctx.services.telemetry
        if telemetry.metrics is None:
            raise ApiError(503, "metrics are off: install the metrics extra (pip install 'harness-memory[metrics]') "
                           "and keep observe.metrics on", "unavailable")
        body, content_type = await ctx.services.run_off_loop(telemetry.render, request.headers.get("accept"))
        return Response(content=body, media_type=content_type)
