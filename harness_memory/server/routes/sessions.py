"""Session memory debug: buffer length, state and its hash, lock, cached and stored summary.

A user sees only sessions bound to them (``session.binding``): the id in the path is bound to
the caller exactly as a run binds it, so naming another user's session id shows (an empty view
of) one's own. The raw view of any session id is for operators (admin token).
"""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Response, status
from fastapi import Path as PathParam
from fastapi.concurrency import run_in_threadpool

from ...control.integrations import session_debug, session_manager
from ...session.binding import bind_session
from ..auth import Caller
from ..deps import ServerContext
from ..schemas import ERRORS, NewSession, SessionDebug
from ..schemas_ui import RankedCandidate, SessionRecalled, SessionWhy

SessionPath = Annotated[str, PathParam(description="The session id.", max_length=128)]
Messages = Annotated[bool, Query(description="Include the last buffered messages.")]


def add_session_routes(router: APIRouter, ctx: ServerContext) -> None:
    opts: dict[str, Any] = {"tags": ["sessions"], "responses": ERRORS}
    User = Annotated[str, Depends(ctx.user_dep())]
    Admin = Annotated[Caller, Depends(ctx.admin_dep("the raw session view"))]

    @router.post("/users/{user_id}/sessions", **opts, response_model=NewSession, status_code=status.HTTP_201_CREATED,
                 summary="Start a session (its id is bound to the user)")
    def new_session(user: User) -> NewSession:
        session_id, _ = bind_session(user, None, ctx.config.session.bind_to_user)
        return NewSession(session_id=session_id, user_id=user)

    @router.get("/users/{user_id}/sessions/{session_id}", **opts, response_model=SessionDebug,
                summary="Session memory state of one of the user's sessions")
    async def show(user: User, session_id: SessionPath, messages: Messages = False) -> SessionDebug:
        bound, _ = bind_session(user, session_id, ctx.config.session.bind_to_user)
        info = await run_in_threadpool(session_debug, ctx.services, bound, messages=messages)
        return SessionDebug(**info)

    @router.get("/users/{user_id}/sessions/{session_id}/recalled", **opts, response_model=SessionRecalled,
                summary="The memory files recall put into one of the user's sessions")
    async def recalled(user: User, session_id: SessionPath,
                       agent_type: Annotated[str, Query(max_length=128)] = "default") -> SessionRecalled:
        bound, _ = bind_session(user, session_id, ctx.config.session.bind_to_user)
        tracker = ctx.services.surfaced_tracker()
        files = await run_in_threadpool(tracker.surfaced, bound, user_id=user, agent_type=agent_type)
        return SessionRecalled(session_id=session_id, agent_type=agent_type, files=sorted(files))

    @router.get("/users/{user_id}/sessions/{session_id}/why", **opts, response_model=SessionWhy,
                summary="Why the last recall of one of the user's sessions chose what it did")
    async def why(user: User, session_id: SessionPath,
                  agent_type: Annotated[str, Query(max_length=128)] = "default") -> SessionWhy:
        bound, _ = bind_session(user, session_id, ctx.config.session.bind_to_user)
        insight = ctx.services.surfaced_tracker().insight
        d = await run_in_threadpool(insight.decision, bound, user_id=user, agent_type=agent_type)
        if d is None:
            return SessionWhy(session_id=session_id, agent_type=agent_type, recorded=False)
        return SessionWhy(session_id=session_id, agent_type=agent_type, recorded=True, at=d.at, query=d.query,
                          path=d.path, model_asked=d.model_asked,
                          model_picked=list(d.model_picked) if d.model_picked is not None else None,
                          chosen=list(d.chosen), recalled=list(d.recalled), surfaced_before=d.surfaced_before,
                          candidates=[RankedCandidate(file=c.file, lexical=c.lexical, semantic=c.semantic,
                                                      fused=c.fused) for c in d.candidates])

    @router.delete("/users/{user_id}/sessions/{session_id}", **opts, status_code=status.HTTP_204_NO_CONTENT,
                   summary="Forget a session: its buffer, cached and stored summary")
    async def forget(user: User, session_id: SessionPath) -> Response:
        bound, _ = bind_session(user, session_id, ctx.config.session.bind_to_user)
        await session_manager(ctx.services).clear_session(bound)
        return Response(status_code=status.HTTP_204_NO_CONTENT)

    @router.get("/sessions/{session_id}", **opts, response_model=SessionDebug,
                summary="Session memory state of any session id (admin)")
    async def show_raw(_admin: Admin, session_id: SessionPath, messages: Messages = False) -> SessionDebug:
        info = await run_in_threadpool(session_debug, ctx.services, session_id, messages=messages)
        return SessionDebug(**info)
