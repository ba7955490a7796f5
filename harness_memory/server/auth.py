"""Who is calling, which user they are, and which sessions are theirs.

The rules (README "HTTP API"):
- ``server.api_token`` set: every call but the health probes needs ``Authorization: Bearer
  <token>`` (or ``X-API-Key: <token>`` where a host app owns ``Authorization``); the admin
  token is accepted too.
- ``server.admin_token``: the caller presenting it is an operator: it may reach the shared
  places, the raw session debug endpoint and ANY user's memory. Without it configured nobody
  reaches those (the answer names the setting).
- The user: with ``user_source: header`` the ``wid`` header is the trusted identity (set by
  your gateway); a user id in the path or body must be ``me`` or equal to it, else 403. With
  ``user_source: body`` the user named in the body or path is trusted, and every other place
  that names a user (path, body, ``wid``) must agree, else 403. A 403 looks the same whether or
  not the other user exists: nothing leaks.
- Sessions: ids are bound to their user (``session.binding``), so naming another user's
  session id only ever reaches a session of one's own.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from fastapi import Request

from ..config import ServerConfig
from ..errors import InvalidName
from ..layout import validate_id
from .errors import ApiError

WID_HEADER = "wid"
API_KEY_HEADER = "X-API-Key"
ME = "me"


@dataclass(frozen=True, slots=True)
class Caller:
    """The authenticated caller: operator or not, and the ``wid`` header as sent."""

    admin: bool
    wid: str | None


def _token_of(request: Request) -> str | None:
    auth = request.headers.get("authorization")
    if auth:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    key = request.headers.get(API_KEY_HEADER)
    return key.strip() if key and key.strip() else None


def _matches(token: str | None, secret: object) -> bool:
    if token is None or secret is None:
        return False
    expected = secret.get_secret_value() if hasattr(secret, "get_secret_value") else str(secret)
    return bool(expected) and hmac.compare_digest(token.encode("utf-8"), expected.encode("utf-8"))


def authenticate(request: Request, cfg: ServerConfig) -> Caller:
    """Check the API token (when configured) and tell an operator from a user."""
    token = _token_of(request)
    admin = _matches(token, cfg.admin_token)
    if cfg.api_token is not None and not admin and not _matches(token, cfg.api_token):
        message = ("this API needs a token: send 'Authorization: Bearer <token>' (server.api_token)"
                   if token is None else "the token is not valid for this API")
        raise ApiError(401, message, "unauthorized", headers={"WWW-Authenticate": "Bearer"})
    return Caller(admin=admin, wid=request.headers.get(WID_HEADER))


def require_admin(caller: Caller, cfg: ServerConfig, what: str = "shared memory") -> None:
    if caller.admin:
        return
    if cfg.admin_token is None:
        raise ApiError(403, f"{what} is reachable only with the admin token, and none is configured "
                       "(set HARNESS_MEMORY_SERVER_ADMIN_TOKEN)", "forbidden")
    raise ApiError(403, f"{what} needs the admin token", "forbidden")


def resolve_user(caller: Caller, cfg: ServerConfig, *, path_user: str | None = None,
                 body_user: str | None = None) -> str:
    """The user this request acts for, or a 401/403/422 saying why it may not act.

    ``path_user`` ``me`` stands for the caller's own id.
    """
    if path_user == ME:
        path_user = None
    named = [(where, value) for where, value in (("path", path_user), ("body", body_user)) if value is not None]
    if cfg.user_source == "header" and not caller.admin:
        if not caller.wid:
            raise ApiError(401, f"send the user id in the '{WID_HEADER}' header", "unauthorized")
        user = _valid(caller.wid, f"the '{WID_HEADER}' header")
        for where, value in named:
            if value != user:
                raise ApiError(403, f"the user in the {where} is not the caller; you may only reach your own "
                               "memory", "forbidden")
        return user
    # body mode: every source is trusted and all must agree. An operator in header mode acts for
    # the user it names (path/body), or for the `wid` header when it names none.
    sources = list(named)
    if caller.wid and (cfg.user_source == "body" or not named):
        sources.append(("wid header", caller.wid))
    if not sources:
        where = "the path or the body's `user_id`" if cfg.user_source == "body" else "the path"
        raise ApiError(422, f"name the user in {where}", "invalid_request")
    first_where, user = sources[0]
    for where, value in sources[1:]:
        if value != user:
            raise ApiError(403, f"the user in the {where} does not match the {first_where}", "forbidden")
    return _valid(user, f"the user id in the {first_where}")


def _valid(value: str, where: str) -> str:
    try:
        return validate_id(value, "user id")
    except InvalidName as exc:
        raise ApiError(422, f"{where}: {exc}", "invalid_name") from None


__all__ = ["Caller", "authenticate", "require_admin", "resolve_user"]
