"""The agent's agno model classes: one shared per process, safe across event loops.

Why: ``build_agent`` runs once per request. A new model object per build means a new OpenAI
client and a new connection for every request (30-60 ms here before the first token), so the
configured model is built once per ``MemoryServices`` and shared — agno keeps no per-run state
on it and copies what it needs per run. agno caches the model's async client, which belongs to
the event loop that created it; ``LoopAwareOpenAILike`` makes a new one when a run comes from
another loop (scripts calling ``asyncio.run`` per turn), so sharing never breaks ``arun()``.

Timeouts: a request that timed out is NOT retried. The model was still writing a long answer;
asking again costs the same time again (a 1.5B CPU model's first turn took 113 s: 60 s, a
timeout, then the retry) and the user waits twice. Connection failures and 429/5xx are still
retried once. Every call's latency and tokens go to ``llm_latency`` (per model id).

Text tool calls: with ``model.text_tool_calls`` (on by default for ``model_profile: local``) a call
a small model wrote as text becomes a real tool call (``agent_model_text`` / ``text_tool_calls``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import httpx2
import openai
from agno.models.base import Model
from agno.models.openai.like import OpenAILike

from . import llm_latency
from .agent_model_text import TextCallStats, TextToolCalls
from .config import ModelConfig
from .errors import ModelNotConfigured

_NO_KEY = "not-provided"  # local OpenAI-compatible servers need no key, the client needs a value


class _NoTimeoutRetry(httpx2.HTTPTransport):
    """Turns a timeout into ``openai.APITimeoutError`` inside the transport: the SDK retries
    httpx timeouts but passes its own errors through, so a timed-out request is not sent again."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return super().handle_request(request)
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=request) from exc


class _AsyncNoTimeoutRetry(httpx2.AsyncHTTPTransport):
    """The async twin of ``_NoTimeoutRetry``."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        try:
            return await super().handle_async_request(request)
        except httpx2.TimeoutException as exc:
            raise openai.APITimeoutError(request=request) from exc


def _timed_out(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, openai.APITimeoutError | httpx2.TimeoutException):
            return True
        seen = seen.__cause__
    return False


def _tokens(response: Any) -> int:
    """Total tokens of agno's ``ModelResponse`` (``response_usage``) or a raw completion (``usage``)."""
    usage = getattr(response, "response_usage", None) or getattr(response, "usage", None)
    total = getattr(usage, "total_tokens", 0)
    return total if isinstance(total, int) else 0


class LoopAwareOpenAILike(TextToolCalls, OpenAILike):
    """``OpenAILike`` whose cached async client follows the running event loop, whose timed-out
    requests are not retried, whose calls are timed per model (``llm_latency``) and, when
    ``text_tool_calls`` is on, whose tool calls written as text are recovered (``TextToolCalls``)."""

    def get_client(self) -> Any:
        if self.client is None or self.client.is_closed():
            self.client = openai.OpenAI(**self._get_client_params(),
                                        http_client=openai.DefaultHttpxClient(transport=_NoTimeoutRetry()))
        return self.client

    def get_async_client(self) -> Any:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self.async_client is not None and getattr(self, "_hm_loop", None) is not loop:
            self.async_client = None  # made on another (maybe closed) loop: make a fresh one
        if self.async_client is None or self.async_client.is_closed():
            self.async_client = openai.AsyncOpenAI(
                **self._get_client_params(),
                http_client=openai.DefaultAsyncHttpxClient(transport=_AsyncNoTimeoutRetry()))
        self._hm_loop = loop
        return self.async_client

    def invoke(self, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            response = super().invoke(*args, **kwargs)
        except Exception as exc:
            self._record_failure(exc)
            raise
        llm_latency.record(self.id, time.monotonic() - start, _tokens(response))
        return response

    async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
        start = time.monotonic()
        try:
            response = await super().ainvoke(*args, **kwargs)
        except Exception as exc:
            self._record_failure(exc)
            raise
        llm_latency.record(self.id, time.monotonic() - start, _tokens(response))
        return response

    def _record_failure(self, exc: BaseException) -> None:
        if _timed_out(exc) and isinstance(self.timeout, int | float):
            llm_latency.record(self.id, float(self.timeout), timed_out=True)


class UnconfiguredModel(Model):
    """Stands in when no model is configured: the run fails with a message naming the setting.

    Why not fail in build_agent: importing and building must work without credentials (tests,
    the CLI, the control plane's memory endpoints); only running the model needs them.
    """

    def __init__(self, message: str) -> None:
        super().__init__(id="unconfigured", name="unconfigured", provider="harness-memory")
        self.message = message

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise ModelNotConfigured(self.message)

    invoke = ainvoke = invoke_stream = ainvoke_stream = _fail
    _parse_provider_response = _parse_provider_response_delta = _fail


def make_agent_model(cfg: ModelConfig, *,
                     on_text_call: Callable[[str, str], None] | None = None) -> LoopAwareOpenAILike:
    """The agent's agno model (``OpenAILike``: it sends the system prompt with role ``system``).

    ``on_text_call(outcome, kind)`` is told of every call-shaped text (recovered or left as text):
    the services pass their metrics; the model's ``text_call_stats`` counts them too.

    Raises ``ModelNotConfigured`` when the model id or base URL is missing — at call time, never
    at import, so the control plane runs without a model.
    """
    if not cfg.model or not cfg.base_url:
        raise ModelNotConfigured(
            "no agent model configured: set HARNESS_MEMORY_MODEL and HARNESS_MEMORY_BASE_URL "
            "(and HARNESS_MEMORY_API_KEY)"
        )
    key = cfg.api_key.get_secret_value() if cfg.api_key is not None else None
    model = LoopAwareOpenAILike(
        id=cfg.model,
        base_url=cfg.base_url,
        api_key=key or _NO_KEY,
        timeout=cfg.model_timeout,
        max_retries=1,
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
    )
    model.text_tool_calls = cfg.text_tool_calls
    model.text_call_stats = TextCallStats(on_text_call)
    return model
