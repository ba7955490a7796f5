"""Observability of memory work: Prometheus metrics, OpenTelemetry spans, JSON-lines logs.

``MemoryServices`` builds one ``Telemetry`` (``services.telemetry``) from ``config.observe`` and
passes it to every layer it composes (store, locks, tools, light models, session and auto memory,
recall, agent builds). The control plane serves the metrics at ``GET /metrics``; a library user
exposes the same registry in their own app with one call::

    app.mount("/metrics", metrics_asgi_app(services))           # any ASGI app (FastAPI, AgentOS)
    register_into(prometheus_client.REGISTRY, services)          # or beside the app's own metrics

``prometheus_client`` and ``opentelemetry-api`` are optional extras (``[metrics]``, ``[otel]``);
without them the matching part is off and nothing of theirs is imported.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol, TypeVar

from .logs import EVENT_LOGGER, JsonLinesFormatter, hash_user, install_json_logging, redact
from .telemetry import DISABLED, NULL_OP, Op, Telemetry, classify
from .tracing import wrap_context

T = TypeVar("T")


class MetricsSource(Protocol):
    """What the metrics endpoints need of the services (``MemoryServices`` is one): their
    telemetry and a way off the event loop. A Protocol, so this layer never imports the root."""

    telemetry: Telemetry

    async def run_off_loop(self, fn: Callable[..., T], *args: Any) -> T: ...


ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
                   Awaitable[None]]


def metrics_asgi_app(services: MetricsSource) -> ASGIApp:
    """A tiny ASGI app answering every GET with the services' metrics (mount it at ``/metrics``)."""

    async def app(scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                  send: Callable[[Any], Awaitable[None]]) -> None:
        if scope.get("type") != "http":
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers") or []}
        try:
            body, content_type = await services.run_off_loop(services.telemetry.render, headers.get("accept"))
            status = 200
        except RuntimeError as exc:
            body, content_type, status = str(exc).encode(), "text/plain; charset=utf-8", 503
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", content_type.encode()),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return app


class _Bridge:
    """A prometheus_client collector that yields the services' metric families."""

    def __init__(self, services: MetricsSource) -> None:
        self.services = services

    def collect(self) -> Iterator[Any]:
        telemetry = self.services.telemetry
        if telemetry.metrics is None:
            return iter(())
        telemetry.refresh()
        return iter(list(telemetry.metrics.exposition_registry().collect()))


def register_into(registry: Any, services: MetricsSource) -> Any:
    """Serve the services' metrics from another registry too (e.g. ``prometheus_client.REGISTRY``,
    which ``start_http_server`` and ``make_asgi_app`` expose). Returns the collector (to unregister)."""
    bridge = _Bridge(services)
    registry.register(bridge)
    return bridge


__all__ = [
    "DISABLED",
    "EVENT_LOGGER",
    "NULL_OP",
    "JsonLinesFormatter",
    "MetricsSource",
    "Op",
    "Telemetry",
    "classify",
    "hash_user",
    "install_json_logging",
    "metrics_asgi_app",
    "redact",
    "register_into",
    "wrap_context",
]
