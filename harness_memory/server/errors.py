"""Mapping library errors to HTTP answers: a clear 4xx/5xx with a message, never a bare 500.

Why a route class as well as app handlers: ``memory_router`` is mounted into apps we do not
own (an agno AgentOS app has its own catch-all handler), so the router carries its own
mapping (``MemoryRoute`` wraps every endpoint) and does not depend on the host app's
exception handlers. ``install_error_handlers`` adds the same mapping (and the JSON error
shape for HTTPException and validation errors) to an app for everything else.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException

from ..config import ConfigError
from ..errors import (
    AccessDenied,
    HarnessMemoryError,
    InvalidName,
    LockTimeout,
    MemoryFormatError,
    ModelNotConfigured,
    ObjectNotFound,
    OutcomeUnknown,
    PreconditionFailed,
    StorageError,
    StorageUnavailable,
)
from ..llm import LLMError
from ..snapshot import SnapshotError

log = logging.getLogger(__name__)

# (status, code, extra headers) by exception type; the first match in order wins.
_MAPPING: list[tuple[type[BaseException], int, str, dict[str, str]]] = [
    (InvalidName, 422, "invalid_name", {}),
    (MemoryFormatError, 422, "invalid_memory", {}),
    (ObjectNotFound, 404, "not_found", {}),
    (PreconditionFailed, 409, "conflict", {}),
    (LockTimeout, 409, "busy", {"Retry-After": "2"}),
    (ModelNotConfigured, 503, "model_not_configured", {}),
    (SnapshotError, 409, "snapshot_unavailable", {}),
    (OutcomeUnknown, 503, "outcome_unknown", {"Retry-After": "5"}),
    (StorageUnavailable, 503, "store_unavailable", {"Retry-After": "5"}),
    (AccessDenied, 502, "store_refused", {}),
    (StorageError, 503, "store_error", {"Retry-After": "5"}),
    (LLMError, 502, "model_error", {}),
    (ConfigError, 503, "config_error", {}),
    (HarnessMemoryError, 400, "bad_request", {}),
]


class ApiError(HTTPException):
    """An HTTPException with a stable ``code`` (and optional list of problems)."""

    def __init__(self, status: int, detail: str, code: str, *, headers: dict[str, str] | None = None,
                 problems: list[str] | None = None) -> None:
        super().__init__(status_code=status, detail=detail, headers=headers)
        self.code = code
        self.problems = problems


def error_body(detail: str, code: str, problems: list[str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"detail": detail, "code": code}
    if problems:
        body["problems"] = problems
    return body


def response_for(exc: BaseException) -> JSONResponse:
    """The JSON answer for any exception (unknown ones become a logged, generic 500)."""
    if isinstance(exc, ApiError):
        return JSONResponse(error_body(str(exc.detail), exc.code, exc.problems), exc.status_code,
                            headers=exc.headers)
    if isinstance(exc, HTTPException):
        return JSONResponse(error_body(str(exc.detail), _code_for_status(exc.status_code)), exc.status_code,
                            headers=exc.headers)
    for etype, status, code, headers in _MAPPING:
        if isinstance(exc, etype):
            if status >= 500:
                log.warning("request failed: %s: %s", type(exc).__name__, exc)
            return JSONResponse(error_body(str(exc), code, getattr(exc, "problems", None)), status,
                                headers=headers or None)
    log.exception("unexpected error in the memory API", exc_info=exc)
    return JSONResponse(error_body("internal error; the server log has the details", "internal"), 500)


def _code_for_status(status: int) -> str:
    return {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found", 405: "method_not_allowed",
            409: "conflict", 413: "too_large", 415: "unsupported_media_type", 422: "invalid_request",
            503: "unavailable"}.get(status, "error")


class MemoryRoute(APIRoute):
    """An APIRoute whose handler answers library errors itself (see module docstring)."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except (RequestValidationError, HTTPException) as exc:
                if isinstance(exc, RequestValidationError):
                    return validation_response(exc)
                return response_for(exc)
            except Exception as exc:
                return response_for(exc)

        return guarded


def validation_response(exc: RequestValidationError) -> JSONResponse:
    """422 naming each bad field (``body.content: Field required``)."""
    problems = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ()))
        problems.append(f"{loc}: {err.get('msg', 'invalid')}")
    detail = "invalid request: " + "; ".join(problems[:5]) if problems else "invalid request"
    return JSONResponse(error_body(detail, "invalid_request", problems or None), 422)


def install_error_handlers(app: FastAPI) -> None:
    """Give ``app`` the same error answers as the memory routes (JSON ``{detail, code}``)."""

    async def on_error(request: Request, exc: Exception) -> Response:
        return response_for(exc)

    async def on_validation(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        return validation_response(exc)

    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(HTTPException, on_error)
    app.add_exception_handler(HarnessMemoryError, on_error)
    app.add_exception_handler(Exception, on_error)
