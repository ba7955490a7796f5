"""The HTTP control plane: ``create_app(config)`` standalone, ``memory_router(services)`` to mount.

Paths (``{user_id}`` may be ``me``; the caller rules are in ``auth``)::

    GET    /health/live | /health/ready | /config | /metrics
    POST   /agents/{agent_type}/runs
    P = /users/{user_id}/agents/{agent_type}/memory      the user's agent memory
        /users/{user_id}/projects/{project}/memory       the user's auto memory
        /shared/agents/{agent_type}/memory               shared (admin token)
        /shared/projects/{project}/memory                shared (admin token)
    GET P · DELETE P (clear) · GET P/index · POST P/reindex · GET P/export · POST P/import
    GET|PUT|PATCH|DELETE P/files/{file} · POST P/files
    GET|DELETE /users/{user_id}/memory · GET /users/{user_id}/memory/export · POST …/import
    GET|POST /users/{user_id}/facts · PATCH|DELETE /users/{user_id}/facts/{fact_id}
    POST /users/{user_id}/sessions · GET /users/{user_id}/sessions/{session_id} · GET /sessions/{id} (admin)
    GET /users/{user_id}/sessions/{session_id}/recalled (the memory files recall put into that session)
    POST /users/{user_id}/facts/{fact_id}/correct ("This is wrong": the old belief kept as the source error)
    GET /users/{user_id}/agents/{agent_type}/snapshot · POST …/snapshot/replace · POST …/snapshot/mark-synced
    GET|PUT P/fields/{file} (a memory file as form fields) · GET /whoami · GET /places (admin)
    GET|DELETE P/trash · POST P/trash/{id}/restore · DELETE P/trash/{id} · POST P/delete (bulk)
    GET P/history/{file} · POST P/restore-version/{file}           (the safety net: ``routes/safety``)
    GET /ui/ (the memory page, ``server/ui``; standalone app only — ``ui_router()`` to mount it)
    GET / (-> /ui/) · GET /docs · GET /redoc (assets from fastapi-offline: ``front_door``; standalone only)

Why a router factory: an agno AgentOS app already owns ``/agents/{agent_id}/runs``, ``/health``
and ``/sessions``; mount ours under a prefix there (``examples/agentos_mount.py``). The router
handles its own errors (``errors.MemoryRoute``), so it behaves the same in any host app.
"""

from __future__ import annotations

from fastapi import APIRouter, FastAPI
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..config import MemoryConfig
from ..services import MemoryServices, services_for
from .csrf import CrossSiteGuard
from .deps import ServerContext
from .errors import ApiError, MemoryRoute, error_body, install_error_handlers
from .front_door import add_front_door
from .routes.embeddings import add_place_embedding_routes
from .routes.facts import add_facts_routes
from .routes.fields import add_field_routes
from .routes.files import add_place_routes
from .routes.health import add_health_routes
from .routes.metrics import add_metrics_routes
from .routes.runs import add_run_routes
from .routes.safety import add_safety_routes
from .routes.sessions import add_session_routes
from .routes.snapshots import add_snapshot_routes
from .routes.transfer import add_place_transfer_routes, add_user_routes
from .routes.whoami import add_whoami_routes
from .ui import ui_router

DESCRIPTION = """Durable memory for agno agents: run agents per request, and read, edit, export,
import and clear each user's memory. Send `wid: <user id>` (when `server.user_source` is `header`)
and, when `server.api_token` is set, `Authorization: Bearer <token>`."""


def memory_router(services: MemoryServices, *, prefix: str = "") -> APIRouter:
    """Every endpoint of the control plane, for ``app.include_router`` in any FastAPI app."""
    router = APIRouter(prefix=prefix, route_class=MemoryRoute)
    add_routes(router, ServerContext(services))
    return router


def add_routes(router: APIRouter, ctx: ServerContext) -> None:
    """Register every endpoint on ``router`` (whose ``route_class`` must be ``MemoryRoute``).

    Routes are added directly, not through nested routers: FastAPI builds each route once."""
    add_health_routes(router, ctx)
    add_metrics_routes(router, ctx)
    add_run_routes(router, ctx)
    places = (
        ("/users/{user_id}/agents/{agent_type}/memory", ctx.user_agent_dir_dep(), "agent memory"),
        ("/users/{user_id}/projects/{project}/memory", ctx.user_auto_dir_dep(), "auto memory"),
        ("/shared/agents/{agent_type}/memory", ctx.shared_agent_dir_dep(), "shared memory (admin)"),
        ("/shared/projects/{project}/memory", ctx.shared_auto_dir_dep(), "shared memory (admin)"),
    )
    for path, resolve, tag in places:
        add_place_routes(router, path, resolve, tag, recalled=ctx.last_recalled)
        add_field_routes(router, path, resolve, tag, recalled=ctx.last_recalled)
        add_place_transfer_routes(router, path, resolve, tag, ctx)
        add_safety_routes(router, path, resolve, tag)
        add_place_embedding_routes(router, path, resolve, tag, ctx)
    add_user_routes(router, ctx)
    add_facts_routes(router, ctx)
    add_session_routes(router, ctx)
    add_snapshot_routes(router, ctx)
    add_whoami_routes(router, ctx)


def create_app(config: MemoryConfig | None = None, *, services: MemoryServices | None = None) -> FastAPI:
    """The standalone app (what ``harness-memory serve`` runs)."""
    if services is None:
        services = services_for(config or MemoryConfig.load())
    app = FastAPI(title="harness-memory", version=__version__, description=DESCRIPTION, docs_url=None, redoc_url=None)
    install_error_handlers(app)
    app.add_middleware(BodyLimit, limit=services.config.server.max_request_bytes)
    app.add_middleware(CrossSiteGuard)
    app.router.route_class = MemoryRoute
    add_routes(app.router, ServerContext(services))
    app.include_router(ui_router())
    add_front_door(app)  # / -> /ui/, /docs and /redoc with Swagger UI's files from a package (offline)
    app.state.memory_services = services
    return app


class BodyLimit:
    """Refuse bodies over ``limit`` bytes with 413 (declared or streamed), before any parsing."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await _too_large(send, self.limit)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise _TooLarge(self.limit)
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _TooLarge:
            if not started:
                await _too_large(send, self.limit)


class _TooLarge(ApiError):
    """Raised from ``receive`` inside the app: an ``ApiError`` (413), so whichever handler catches it
    — a route's, FastAPI's body parsing (which re-raises HTTPExceptions), the app's — answers 413,
    not a 500 with a traceback (a chunked body has no Content-Length to refuse up front)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the body is larger than {limit} bytes (server.max_request_bytes)", "too_large")


async def _too_large(send: Send, limit: int) -> None:
    import json

    body = json.dumps(error_body(f"the body is larger than {limit} bytes (server.max_request_bytes)",
                                 "too_large")).encode()
    await send({"type": "http.response.start", "status": 413,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


__all__ = ["BodyLimit", "add_routes", "create_app", "memory_router"]
