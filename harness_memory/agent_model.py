"""The agent's agno model classes: one shared per process, safe across event loops.

Why: ``build_agent`` runs once per request. A new model object per build means a new OpenAI
client and a new connection for every request (30-60 ms here before the first token), so the
configured model is built once per ``MemoryServices`` and shared — agno keeps no per-run state
on it and copies what it needs per run. agno caches the model's async client, which belongs to
the event loop that created it; ``LoopAwareOpenAILike`` makes a new one when a run comes from
another loop (scripts calling ``asyncio.run`` per turn), so sharing never breaks ``arun()``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agno.models.base import Model
from agno.models.openai.like import OpenAILike

from .config import ModelConfig
from .errors import ModelNotConfigured

_NO_KEY = "not-provided"  # local OpenAI-compatible servers need no key, the client needs a value


class LoopAwareOpenAILike(OpenAILike):
    """``OpenAILike`` whose cached async client follows the running event loop."""

    def get_async_client(self) -> Any:
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self.async_client is not None and getattr(self, "_hm_loop", None) is not loop:
            self.async_client = None  # made on another (maybe closed) loop: make a fresh one
        client = super().get_async_client()
        self._hm_loop = loop
        return client


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


def make_agent_model(cfg: ModelConfig) -> LoopAwareOpenAILike:
    """The agent's agno model (``OpenAILike``: it sends the system prompt with role ``system``).

    Raises ``ModelNotConfigured`` when the model id or base URL is missing — at call time, never
    at import, so the control plane runs without a model.
    """
    if not cfg.model or not cfg.base_url:
        raise ModelNotConfigured(
            "no agent model configured: set HARNESS_MEMORY_MODEL and HARNESS_MEMORY_BASE_URL "
            "(and HARNESS_MEMORY_API_KEY)"
        )
    key = cfg.api_key.get_secret_value() if cfg.api_key is not None else None
    return LoopAwareOpenAILike(
        id=cfg.model,
        base_url=cfg.base_url,
        api_key=key or _NO_KEY,
        timeout=cfg.model_timeout,
        max_retries=1,
    )
