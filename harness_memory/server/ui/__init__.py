"""The ``/ui`` page: static HTML, ES modules and CSS shipped inside the package.

Why served like this: no CDN and no Node build — the files in ``static/`` are what the browser
runs. Only names listed in ``static/`` are served (no path ever reaches the file system from
the URL), each with a Content-Security-Policy that allows scripts from this origin only (no
inline script, no ``eval``) and refuses framing. The page holds no data of its own: it calls the
JSON API beside it with the same credentials as any client (``wid`` from the gateway, or the
token and user id typed into its login form, kept in ``sessionStorage``).
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..errors import ApiError

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}
#: A path prefix a gateway announces (``X-Forwarded-Prefix: /memory``) when it strips one.
FORWARDED_PREFIX = "x-forwarded-prefix"
_PREFIX_SHAPE = re.compile(r"^(/[A-Za-z0-9._~-]+)*$")
MEDIA = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}


def static_files() -> dict[str, bytes]:
    """Every asset by name (read once at router build; a few dozen KB)."""
    root = resources.files(__package__) / "static"
    return {p.name: p.read_bytes() for p in root.iterdir()
            if p.is_file() and any(p.name.endswith(ext) for ext in MEDIA)}


def ui_router(prefix: str = "/ui") -> APIRouter:
    """The page at ``{prefix}`` (with or without the trailing slash: AgentOS strips it) and its
    assets; mount it beside ``memory_router`` so that ``{prefix}/..`` is the API's root."""
    files = static_files()
    router = APIRouter(include_in_schema=False)

    def page(request: Request) -> Response:
        # Asset URLs are absolute (the same from `/ui` and `/ui/`), below the app's root path or the
        # prefix a gateway strips. A forged prefix could only point at this origin: CSP 'self'.
        outer = request.headers.get(FORWARDED_PREFIX, "").rstrip("/")
        if not _PREFIX_SHAPE.match(outer):
            outer = ""
        base = (outer or request.scope.get("root_path", "").rstrip("/")) + prefix + "/"
        html = files["index.html"].replace(b"__BASE__", base.encode())
        return Response(html, media_type=MEDIA[".html"], headers=SECURITY_HEADERS)

    router.add_api_route(prefix, page, methods=["GET"])
    router.add_api_route(prefix + "/", page, methods=["GET"])

    @router.get(prefix + "/{name}")
    def asset(name: str, request: Request) -> Response:
        if name == "index.html":
            raise ApiError(404, "there is no page asset 'index.html'; open the page itself", "not_found")
        return _asset(files, name, request.headers.get("if-none-match"))

    return router


def _asset(files: dict[str, bytes], name: str, if_none_match: str | None = None) -> Response:
    """An asset with an ETag of its bytes: a returning browser revalidates with one 304."""
    data = files.get(name)
    if data is None:
        raise ApiError(404, f"there is no page asset {name!r}", "not_found")
    etag = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'
    headers = {**SECURITY_HEADERS, "ETag": etag}
    if if_none_match is not None and etag in [t.strip() for t in if_none_match.split(",")]:
        return Response(status_code=304, headers=headers)
    return Response(data, media_type=MEDIA["." + name.rsplit(".", 1)[-1]], headers=headers)


__all__ = ["CSP", "ui_router"]
