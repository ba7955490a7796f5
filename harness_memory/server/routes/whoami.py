"""What the ``/ui`` page asks first: who am I, and (operators) which places exist.

``GET /whoami`` answers with the user the API would act for (401 when it would act for
nobody), so the page never has to guess a user id: behind a gateway it is the gateway's
``wid``. ``GET /places`` lists every memory directory with counts and sizes (admin; LIST,
on demand only, like ``harness-memory ls``).
"""

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool

from ...control.places import Scope, discover_places, place_path
from ..auth import Caller, resolve_user
from ..deps import ServerContext
from ..errors import ApiError
from ..schemas import ERRORS
from ..schemas_ui import AllPlaces, PlaceRow, WhoAmI

DEFAULT_AGENT_TYPE = "default"


def add_whoami_routes(router: APIRouter, ctx: ServerContext) -> None:
    CallerDep = Annotated[Caller, Depends(ctx.caller_dep())]
    Admin = Annotated[Caller, Depends(ctx.admin_dep("the list of every place"))]

    @router.get("/whoami", response_model=WhoAmI, tags=["ui"], responses=ERRORS,
                summary="The caller as the API sees it (user id, operator or not)")
    def whoami(caller: CallerDep) -> WhoAmI:
        try:
            user: str | None = resolve_user(caller, ctx.server)
        except ApiError:
            if not caller.admin:
                raise
            user = None  # an operator naming no user
        return WhoAmI(user_id=user, admin=caller.admin, user_source=ctx.server.user_source,
                      agent_type=DEFAULT_AGENT_TYPE, project=ctx.config.agent.project,
                      token_required=ctx.server.api_token is not None)

    @router.get("/places", response_model=AllPlaces, tags=["ui"], responses=ERRORS,
                summary="Every memory directory with file counts and bytes (admin; LIST)")
    async def places(_admin: Admin) -> AllPlaces:
        found = await run_in_threadpool(discover_places, ctx.services.store, Scope(), ctx.services.key_prefix)
        rows = [PlaceRow(path=place_path(f.place), kind=f.place.kind.value, files=f.files, bytes=f.bytes,
                         user_id=f.place.user_id, agent_type=f.place.agent_type, project=f.place.project)
                for f in found]
        return AllPlaces(users=len({r.user_id for r in rows if r.user_id}), places=rows)
