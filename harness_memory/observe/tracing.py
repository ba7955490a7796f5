"""OpenTelemetry spans for memory work, when ``opentelemetry-api`` is installed.

Why the global tracer provider by default: an agno / AgentOS app configures its provider (and
exporter) once; memory spans must land in the same traces, as children of the request's span,
without any setting of ours. A test (or an app with several providers) passes its own.

Why a lazy import: ``opentelemetry-api`` is optional (``[otel]`` extra). ``import harness_memory``
never imports it; ``make_tracer`` imports it when ``MemoryServices`` builds its ``Telemetry`` and
returns None when it is absent — every span call is then skipped.

Context across threads: spans nest through ``contextvars``. Memory work that moves to a pool
thread (tool calls under ``arun()``, hooks, fan-out reads) is submitted with
``contextvars.copy_context()`` (``wrap_context``), so its spans stay children of the caller's.
"""

from __future__ import annotations

import contextvars
import os
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
TRACER_NAME = "harness_memory"


class Tracer:
    """A thin wrapper over an OpenTelemetry tracer (only what memory work needs)."""

    def __init__(self, tracer: Any, status: Any, status_code: Any,
                 global_provider: Callable[[], Any] | None = None, noop_types: tuple[type, ...] = (),
                 unset: Callable[[], bool] | None = None) -> None:
        self._tracer = tracer
        self._status = status
        self._error = status_code.ERROR
        self._global_provider = global_provider
        self._noop_types = noop_types
        self._unset = unset
        self._on = global_provider is None

    def enabled(self) -> bool:
        """False while the global provider is the API's no-op one (no SDK configured): a span would
        record nothing, and skipping it saves most of its cost. Checked per span, so a provider
        the app sets later is used from then on.

        Why ``unset`` and ``_on``: ``get_tracer_provider()`` looks the provider's environment
        variable up on every call while none is set (~1–2 µs, per store request); ``unset`` reads
        the API's module global instead, and a real global provider, once set, is set for good
        (the API sets it once), so the answer is then kept."""
        if self._on:
            return True
        if self._unset is not None and self._unset():
            return False
        self._on = not isinstance(self._global_provider(), self._noop_types)  # type: ignore[misc]
        return self._on

    def start(self, name: str, attributes: dict[str, Any]) -> tuple[Any, Any]:
        """Open a span as the current one; returns (context manager, span)."""
        cm = self._tracer.start_as_current_span(name, attributes=attributes, record_exception=False,
                                                set_status_on_exception=False)
        return cm, cm.__enter__()

    def finish(self, cm: Any, span: Any, outcome: str, error: BaseException | None, failed: bool) -> None:
        try:
            span.set_attribute("harness_memory.outcome", outcome)
            if failed:
                if error is not None:
                    span.record_exception(error)
                self._set_error(span, outcome)
        finally:
            cm.__exit__(None, None, None)

    def _set_error(self, span: Any, outcome: str) -> None:
        span.set_status(self._status(self._error, outcome))


def make_tracer(provider: Any | None = None) -> Tracer | None:
    """A tracer on ``provider`` (default: the global one, also when it is set later), or None
    when opentelemetry-api is not installed."""
    try:
        from opentelemetry import trace
        from opentelemetry.trace import NoOpTracerProvider, ProxyTracerProvider, Status, StatusCode
    except ImportError:
        return None
    from ..version import __version__

    if provider is not None:
        return Tracer(provider.get_tracer(TRACER_NAME, __version__), Status, StatusCode)
    unset = None
    if hasattr(trace, "_TRACER_PROVIDER") and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ:
        # No provider set in code yet and none named by the environment: the API's own test,
        # without its per-call environment lookup (a private global; without it, the full check).
        def unset() -> bool:
            return trace._TRACER_PROVIDER is None

    return Tracer(trace.get_tracer(TRACER_NAME, __version__), Status, StatusCode, trace.get_tracer_provider,
                  (ProxyTracerProvider, NoOpTracerProvider), unset)


def wrap_context(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` bound to a copy of the caller's context (current span included), for a pool thread."""
    ctx = contextvars.copy_context()
    return lambda *args, **kwargs: ctx.run(fn, *args, **kwargs)


__all__ = ["TRACER_NAME", "Tracer", "make_tracer", "wrap_context"]
