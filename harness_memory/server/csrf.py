"""Refuse cross-site writes from browsers (CSRF), leaving API clients as they were.

Why this shape: the API authenticates with headers (token, ``wid``), which a foreign page cannot
make a browser send — unless a gateway adds them to every request from the person's browser,
cookie-based. Then a form on another site could POST into the person's memory. So a write
(POST/PUT/PATCH/DELETE) that a browser marks as coming from elsewhere (``Sec-Fetch-Site:
cross-site|same-site``, or an ``Origin`` that is not this host) is refused, and a browser write
must also carry the custom header ``X-Harness-Memory`` (a foreign page can only add it through a
CORS preflight, which this server never grants). Programs (curl, SDKs) send neither ``Origin``
nor ``Sec-Fetch-*`` and are unaffected. JSON bodies are accepted only as ``application/json``
(FastAPI) and imports only as JSON or zip (``routes/transfer``), which no HTML form can send.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

UI_HEADER = "x-harness-memory"
UNSAFE = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def cross_site_reason(method: str, headers: dict[str, str]) -> str | None:
    """Why a request is a refused cross-site write, or None when it may go on."""
    if method.upper() not in UNSAFE:
        return None
    site = headers.get("sec-fetch-site")
    origin = headers.get("origin")
    if site is None and origin is None:
        return None  # not a browser
    if site in ("cross-site", "same-site"):
        return f"a {site} write from a browser is refused"
    if origin is not None:
        host = headers.get("x-forwarded-host") or headers.get("host") or ""
        if origin == "null" or urlsplit(origin).netloc.lower() != host.split(",")[0].strip().lower():
            return "a write from another origin is refused"
    if UI_HEADER not in headers:
        return f"a write from a browser must carry the '{UI_HEADER}' header (the /ui page sends it)"
    return None


class CrossSiteGuard:
    """ASGI middleware applying ``cross_site_reason`` to the HTTP requests below ``prefix`` (403 with
    the reason). In a host app (AgentOS) give the memory router's prefix: the host's own API may be
    meant for cross-origin callers (AgentOS's control panel calls it with CORS)."""

    def __init__(self, app: ASGIApp, prefix: str = "") -> None:
        self.app = app
        self.prefix = prefix.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if scope["type"] == "http" and (not self.prefix or path == self.prefix or path.startswith(self.prefix + "/")):
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
            reason = cross_site_reason(scope["method"], headers)
            if reason is not None:
                body = json.dumps({"detail": reason, "code": "cross_site"}).encode()
                await send({"type": "http.response.start", "status": 403,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


__all__ = ["UI_HEADER", "CrossSiteGuard", "cross_site_reason"]
