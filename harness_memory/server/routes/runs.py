"""``POST /agents/{agent_type}/runs``: one agent run for one user, with memory.

The request flow of the architecture's ``sandbox_agent_runs``: take the user id (the trusted
source per ``server.user_source``), create the session when none is given (its id comes back),
put the stored session summary in front of the message, build the agent for this request with
``build_agent`` (memory prompt, tools, hooks) and run it, optionally streaming server-sent
events. A missing model is a 503 naming the settings, checked before anything else happens;
a failed model call is a 502 with the model's message.
"""

import json
import logging
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from ...control.integrations import inject_summary
from ...layout import validate_id
from ...session.binding import bind_session
from ..auth import Caller, resolve_user
from ..deps import AgentTypePath, ServerContext
from ..errors import ApiError
from ..schemas import ErrorBody, RunRequest, RunResponse

log = logging.getLogger(__name__)

RUN_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 413, 422, 502, 503)
}
RUN_ERRORS[200] = {"content": {"text/event-stream": {"schema": {"type": "string"}}},
                   "description": "The run (JSON), or server-sent events when `stream` is true: "
                   "`session`, `content` (many), then `done` or `error`."}


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def add_run_routes(router: APIRouter, ctx: ServerContext) -> None:
    CallerDep = Annotated[Caller, Depends(ctx.caller_dep())]

    @router.post("/agents/{agent_type}/runs", response_model=RunResponse, tags=["runs"], responses=RUN_ERRORS,
                 summary="Run the agent for a user (session created when absent, summary injected)")
    async def run(agent_type: AgentTypePath, body: RunRequest, caller: CallerDep) -> Any:
        agent_type = validate_id(agent_type, "agent type")
        user = resolve_user(caller, ctx.server, body_user=body.user_id)
        model = ctx.agent_model()  # ModelNotConfigured -> 503 naming the settings
        session_id, created = bind_session(user, body.session_id, ctx.config.session.bind_to_user)
        message, injected = await inject_summary(ctx.services, session_id, body.message, new_session=created)
        from ...agent import build_agent  # agno is slow to import: only when a run is asked for

        agent = await run_in_threadpool(build_agent, user, agent_type=agent_type, session_id=session_id,
                                        query=body.message, config=ctx.config, model=model)
        base: dict[str, Any] = {"user_id": user, "agent_type": agent_type, "session_id": session_id,
                                "session_created": created, "summary_injected": injected}
        if body.stream:
            return StreamingResponse(_stream(agent, message, base), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        output = await agent.arun(message, user_id=user, session_id=session_id)
        status = _status(output)
        if status == "error":
            raise ApiError(502, f"the agent run failed: {_text(output.content) or 'no detail'}", "model_error")
        return RunResponse(run_id=output.run_id, content=_text(output.content), status=status, **base)


async def _stream(agent: Any, message: str, base: dict[str, Any]) -> AsyncIterator[str]:
    yield sse("session", base)
    parts: list[str] = []
    run_id: str | None = None
    try:
        async for event in agent.arun(message, stream=True, user_id=base["user_id"],
                                      session_id=base["session_id"]):
            kind = getattr(event, "event", "")
            run_id = getattr(event, "run_id", None) or run_id
            if kind == "RunContent" and isinstance(getattr(event, "content", None), str) and event.content:
                parts.append(event.content)
                yield sse("content", {"delta": event.content})
            elif kind == "RunError":
                yield sse("error", {"detail": f"the agent run failed: {_text(event.content) or 'no detail'}",
                                    "code": "model_error", "run_id": run_id})
                return
    except Exception as exc:
        log.warning("streamed run failed: %s", exc)
        yield sse("error", {"detail": f"the agent run failed: {exc}", "code": "run_error", "run_id": run_id})
        return
    yield sse("done", {**base, "run_id": run_id, "content": "".join(parts), "status": "completed"})


def _status(output: Any) -> str:
    status = getattr(output, "status", None)
    value = getattr(status, "value", status)
    return str(value or "completed").lower()


def _text(content: Any) -> str | None:
    if content is None or isinstance(content, str):
        return content
    try:
        return json.dumps(content, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(content)
