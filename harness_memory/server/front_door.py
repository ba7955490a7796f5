"""The standalone server's first minutes: ``/`` leads to the page, ``/docs`` works offline.

Why its own assets: FastAPI's default ``/docs`` page loads Swagger UI from a CDN, so on an offline
machine (or behind a proxy that blocks CDNs) it is blank. The ``fastapi-offline`` package (in the
``server`` extra) ships Swagger UI's and ReDoc's files; they are served here from the package,
only the names it ships, and the pages point at them below the app's root path (or the prefix a
gateway announces with ``X-Forwarded-Prefix``, as for ``/ui``). Without the package the CDN pages
are served, with one warning at start.
"""

from __future__ import annotations

import logging
import re
from importlib import resources

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from .errors import ApiError

log = logging.getLogger(__name__)
ASSETS = "/docs/assets"
_MEDIA = {".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".png": "image/png"}
_PREFIX = re.compile(r"^(/[A-Za-z0-9._~-]+)*$")


def docs_assets() -> dict[str, bytes]:
    """Swagger UI's and ReDoc's files from the ``fastapi-offline`` package; {} when it is absent."""
    try:
        root = resources.files("fastapi_offline") / "static"
    except ModuleNotFoundError:
        return {}
    return {p.name: p.read_bytes() for p in root.iterdir()
            if p.is_file() and any(p.name.endswith(ext) for ext in _MEDIA)}


def _base(request: Request) -> str:
    outer = request.headers.get("x-forwarded-prefix", "").rstrip("/")
    if not _PREFIX.match(outer):
        outer = ""
    return outer or request.scope.get("root_path", "").rstrip("/")


def add_front_door(app: FastAPI, *, ui_path: str = "/ui/") -> None:
    """``GET /`` redirects to the page; ``/docs`` and ``/redoc`` with local assets. The app must be
    created with ``docs_url=None, redoc_url=None`` (these replace FastAPI's CDN pages)."""
    assets = docs_assets()
    if not assets:
        log.warning("fastapi-offline is not installed: /docs loads Swagger UI from a CDN "
                    "(pip install 'harness-memory[server]')")
    openapi = app.openapi_url or "/openapi.json"
    title = f"{app.title} — API"

    @app.get("/", include_in_schema=False)
    def root(request: Request) -> Response:
        return RedirectResponse(_base(request) + ui_path, status_code=307)

    @app.get("/docs", include_in_schema=False)
    def swagger(request: Request) -> HTMLResponse:
        base = _base(request)
        local = {"swagger_js_url": f"{base}{ASSETS}/swagger-ui-bundle.js",
                 "swagger_css_url": f"{base}{ASSETS}/swagger-ui.css",
                 "swagger_favicon_url": f"{base}{ASSETS}/favicon.png"} if assets else {}
        return get_swagger_ui_html(openapi_url=base + openapi, title=title, **local)

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        base = _base(request)
        local = {"redoc_js_url": f"{base}{ASSETS}/redoc.standalone.js",
                 "redoc_favicon_url": f"{base}{ASSETS}/favicon.png",
                 "with_google_fonts": False} if assets else {}
        return get_redoc_html(openapi_url=base + openapi, title=title, **local)

    @app.get(ASSETS + "/{name}", include_in_schema=False)
    def asset(name: str) -> Response:
        data = assets.get(name)
        if data is None:
            raise ApiError(404, f"there is no docs asset {name!r}", "not_found")
        return Response(data, media_type=_MEDIA["." + name.rsplit(".", 1)[-1]],
                        headers={"Cache-Control": "public, max-age=86400", "X-Content-Type-Options": "nosniff"})


__all__ = ["add_front_door", "docs_assets"]
