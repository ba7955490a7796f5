"""The model layer: the agent's agno model and the light model used for memory work.

Why two paths: the agent model is whatever agno drives (tools, streaming, hooks), so it is an
agno ``OpenAILike``. Memory work (summaries, extraction, recall) needs only one-shot completions
with strict timeouts and a clear failure mode, so ``LightModel`` talks to the server through
the ``openai`` client directly and turns every failure into ``LLMError``, which callers catch
to degrade (a memory failure must never fail the user's run).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness_memory import llm_latency
from harness_memory.config import ModelConfig
from harness_memory.errors import HarnessMemoryError
from harness_memory.observe import DISABLED, Telemetry
from harness_memory.tokens import count_message_tokens, estimate_tokens

if TYPE_CHECKING:
    from openai import AsyncOpenAI

logger = logging.getLogger(__name__)

_NO_KEY = "not-provided"  # local OpenAI-compatible servers need no key, the client needs a value


class LLMError(HarnessMemoryError):
    """A light-model call failed (timeout, connection, HTTP error, empty or unusable answer)."""


class LLMTimeout(LLMError):
    """The light model did not answer within the timeout."""


@dataclass
class LLMResult:
    """One completion: the answer text (think blocks removed) and the tokens it cost."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    model: str


def _secret(value: Any) -> str | None:
    if value is None:
        return None
    return value.get_secret_value() if hasattr(value, "get_secret_value") else str(value)


_warned_features: set[str] = set()
_warned_lock = threading.Lock()


def warn_no_light_model(feature: str, consequence: str) -> None:
    """Log once per feature and process that no light model is configured, naming the settings.

    Why one helper: session memory, auto memory and recall all degrade the same way without a
    light model, and an operator should read the same sentence (and the same settings) from each.
    """
    with _warned_lock:
        if feature in _warned_features:
            return
        _warned_features.add(feature)
    logger.warning("%s: no light model configured (set HARNESS_MEMORY_LIGHT_MODEL or HARNESS_MEMORY_MODEL, "
                   "and HARNESS_MEMORY_LIGHT_BASE_URL or HARNESS_MEMORY_BASE_URL); %s", feature, consequence)


_THINK_BLOCK = re.compile(r"<think\b[^>]*>.*?</think\s*>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<think\b[^>]*>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think\s*>", re.IGNORECASE)


def strip_think(text: str) -> str:
    """Remove reasoning blocks: ``<think>…</think>``, a dangling ``…</think>`` whose opening tag
    was in the chat template, and an unclosed ``<think>…`` after an answer.

    An unclosed ``<think>`` with nothing before it is different: small models often open a
    reasoning block and write the answer straight after it without closing it. Cutting there
    would throw the answer away (and an "empty" answer is retried and lost), so only the tag is
    dropped; parsers that look for a JSON object or template headings find the answer in what
    follows."""
    text = _THINK_BLOCK.sub("", text)
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    opened = _THINK_OPEN.search(text)
    if opened is not None:
        before = text[: opened.start()]
        text = before if before.strip() else text[opened.end() :]
    return text.strip()


def answer_text(content: Any) -> str:
    """The text of a completion's message content: a string, or a list of parts.

    Lists come from servers that answer in content blocks. Adjacent plain-string chunks are
    joined with no separator (a JSON answer streamed in pieces stays valid JSON); text blocks
    (``{"type": "text", "text": …}`` or objects with ``.text``) are joined with a line break;
    other blocks (images, tool use) are skipped."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    pieces: list[str] = []
    run: list[str] = []
    for part in content:
        if isinstance(part, str):
            run.append(part)
            continue
        if run:
            pieces.append("".join(run))
            run = []
        value = part.get("text") if isinstance(part, dict) and part.get("type", "text") == "text" else (
            None if isinstance(part, dict) else getattr(part, "text", None))
        if isinstance(value, str):
            pieces.append(value)
    if run:
        pieces.append("".join(run))
    return "\n".join(pieces)


class LightModel:
    """A small OpenAI-compatible model for memory work, with counters benchmarks read.

    The sync and async clients are created once and shared (also by deep copies: AgentOS
    deep-copies agents per request). An ``AsyncOpenAI`` client's connection pool belongs to the
    event loop that used it first, so one async client is kept per running loop.
    """

    def __init__(
        self,
        model: str,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        max_retries: int = 0,
        telemetry: Telemetry = DISABLED,
        temperature: float | None = None,
    ) -> None:
        #: Records each call by purpose: latency, outcome, prompt and completion tokens.
        self.telemetry = telemetry
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        #: Sent with every call when set (``model.light_temperature``); else the server's default.
        self.temperature = temperature
        self._api_key = api_key or _NO_KEY
        self._max_retries = max_retries
        import openai  # here, not at import: a process that never calls a model (the CLI) skips ~0.6 s

        self._openai = openai
        self._client = openai.OpenAI(base_url=base_url, api_key=self._api_key, timeout=timeout,
                                     max_retries=max_retries)
        self._async_clients: dict[asyncio.AbstractEventLoop, AsyncOpenAI] = {}
        self._lock = threading.Lock()
        self._json_mode_supported = True
        self.calls = 0
        self.errors = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    @classmethod
    def from_config(cls, cfg: ModelConfig, *, telemetry: Telemetry = DISABLED) -> LightModel | None:
        """The light model from config (``light_*`` default to the agent's fields); None when no
        model id or base URL is configured — memory features then use their fallbacks."""
        model = cfg.light_model or cfg.model
        base_url = cfg.light_base_url or cfg.base_url
        if not model or not base_url:
            return None
        key = _secret(cfg.light_api_key) or _secret(cfg.api_key)
        return cls(model=model, base_url=base_url, api_key=key, timeout=cfg.light_timeout, telemetry=telemetry,
                   temperature=cfg.light_temperature)

    def __repr__(self) -> str:
        return f"LightModel(model={self.model!r}, base_url={self.base_url!r})"

    def __deepcopy__(self, memo: dict[int, Any]) -> LightModel:
        return self

    # -- calls -----------------------------------------------------------------------------
    def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        timeout: float | None = None,
        purpose: str = "other",
    ) -> LLMResult:
        """One completion; raises ``LLMError`` on any failure (callers degrade). ``purpose``
        (``summary``, ``extraction``, ``recall``, …) labels the call's metrics and span."""
        with self.telemetry.llm_call(purpose) as call, self._timed(timeout) as timing:
            timing.result = self._complete(messages, json_mode, max_tokens, timeout, call)
            return timing.result

    def _complete(self, messages: list[dict[str, Any]], json_mode: bool, max_tokens: int | None,
                  timeout: float | None, call: Any) -> LLMResult:
        use_json = json_mode and self._json_mode_supported
        try:
            response = self._client.chat.completions.create(
                **self._params(messages, use_json, max_tokens, timeout)
            )
        except self._openai.BadRequestError as exc:
            if not use_json:
                raise self._fail(exc, timeout) from exc
            logger.info("light model rejected response_format (%s); retrying without it", exc)
            try:
                response = self._client.chat.completions.create(
                    **self._params(messages, False, max_tokens, timeout)
                )
            except Exception as exc2:
                raise self._fail(exc2, timeout) from exc2
            self._json_mode_supported = False
        except Exception as exc:
            raise self._fail(exc, timeout) from exc
        return self._result(response, messages, call)

    async def acomplete(
        self,
        messages: list[dict[str, Any]],
        *,
        json_mode: bool = False,
        max_tokens: int | None = None,
        timeout: float | None = None,
        purpose: str = "other",
    ) -> LLMResult:
        """The async twin of ``complete`` (same errors, same counters)."""
        with self.telemetry.llm_call(purpose) as call, self._timed(timeout) as timing:
            timing.result = await self._acomplete(messages, json_mode, max_tokens, timeout, call)
            return timing.result

    async def _acomplete(self, messages: list[dict[str, Any]], json_mode: bool, max_tokens: int | None,
                         timeout: float | None, call: Any) -> LLMResult:
        client = self._async_client()
        use_json = json_mode and self._json_mode_supported
        try:
            response = await client.chat.completions.create(
                **self._params(messages, use_json, max_tokens, timeout)
            )
        except self._openai.BadRequestError as exc:
            if not use_json:
                raise self._fail(exc, timeout) from exc
            logger.info("light model rejected response_format (%s); retrying without it", exc)
            try:
                response = await client.chat.completions.create(
                    **self._params(messages, False, max_tokens, timeout)
                )
            except Exception as exc2:
                raise self._fail(exc2, timeout) from exc2
            self._json_mode_supported = False
        except Exception as exc:
            raise self._fail(exc, timeout) from exc
        return self._result(response, messages, call)

    def close(self) -> None:
        """Close the sync client (async clients close with their loops)."""
        self._client.close()

    # -- internals -------------------------------------------------------------------------
    @contextlib.contextmanager
    def _timed(self, timeout: float | None) -> Iterator[_Timing]:
        """Record the call's latency per model (``llm_latency``): an answer with its tokens, a
        timeout as a sample of the timeout (a lower bound); other failures say nothing of speed."""
        timing = _Timing()
        start = time.monotonic()
        try:
            yield timing
        except LLMTimeout:
            llm_latency.record(self.model, timeout or self.timeout, timed_out=True)
            raise
        if timing.result is not None:
            r = timing.result
            llm_latency.record(self.model, time.monotonic() - start, r.prompt_tokens + r.completion_tokens)

    def _async_client(self) -> AsyncOpenAI:
        loop = asyncio.get_running_loop()
        with self._lock:
            for old in [lp for lp in self._async_clients if lp.is_closed()]:
                del self._async_clients[old]
            client = self._async_clients.get(loop)
            if client is None:
                client = self._openai.AsyncOpenAI(base_url=self.base_url, api_key=self._api_key,
                                                  timeout=self.timeout, max_retries=self._max_retries)
                self._async_clients[loop] = client
            return client

    def _params(
        self, messages: list[dict[str, Any]], json_mode: bool, max_tokens: int | None,
        timeout: float | None,
    ) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
        params: dict[str, Any] = {"model": self.model, "messages": messages,
                                  "timeout": timeout or self.timeout}
        if json_mode:
            params["response_format"] = {"type": "json_object"}
        if max_tokens is not None:
            params["max_tokens"] = max_tokens
        if self.temperature is not None:
            params["temperature"] = self.temperature
        return params

    def _fail(self, exc: BaseException, timeout: float | None) -> LLMError:
        with self._lock:
            self.errors += 1
        where = f"light model {self.model!r} at {self.base_url}"
        openai = self._openai
        if isinstance(exc, openai.APITimeoutError):
            return LLMTimeout(f"{where} timed out after {timeout or self.timeout:g} s")
        if isinstance(exc, openai.APIConnectionError):
            return LLMError(f"cannot reach {where}: {exc.__cause__ or exc}")
        if isinstance(exc, openai.APIStatusError):
            return LLMError(f"{where} answered HTTP {exc.status_code}: {_status_message(exc)}")
        return LLMError(f"{where} failed: {type(exc).__name__}: {exc}")

    def _result(self, response: Any, messages: list[dict[str, Any]], call: Any = None) -> LLMResult:
        """Check the answer's shape and count its tokens (estimated when usage is missing)."""
        try:
            choices = response.choices
            content = choices[0].message.content if choices else None
        except (AttributeError, TypeError, IndexError) as exc:
            raise self._fail(ValueError(f"malformed completion: {response!r:.200}"), None) from exc
        usage = getattr(response, "usage", None)
        prompt = getattr(usage, "prompt_tokens", None)
        completion = getattr(usage, "completion_tokens", None)
        if not isinstance(prompt, int):
            prompt = count_message_tokens(messages)
        if not isinstance(completion, int):
            completion = estimate_tokens(answer_text(content))
        with self._lock:
            self.prompt_tokens += prompt
            self.completion_tokens += completion
        if call is not None:
            call.tokens(prompt, completion)
        if not choices:
            raise self._fail(ValueError("the completion has no choices"), None)
        text = strip_think(answer_text(content))
        if not text:
            raise self._fail(ValueError("the model returned an empty answer"), None)
        model = getattr(response, "model", None)
        return LLMResult(text=text, prompt_tokens=prompt, completion_tokens=completion,
                         model=model if isinstance(model, str) and model else self.model)


@dataclass
class _Timing:
    result: LLMResult | None = None


def _status_message(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])[:300]
    return str(getattr(exc, "message", exc))[:300]


# -- tolerant JSON ---------------------------------------------------------------------------
_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\n?(.*?)```", re.DOTALL)
_MAX_STARTS = 32  # bound the scan on long prose full of braces (failed starts only)
_MAX_VALUES = 16  # most top-level values looked at in one answer

Accept = Callable[[Any], bool]


@dataclass(frozen=True, slots=True)
class JsonSpan:
    """One JSON value found in a text, and where (``start``/``end`` index ``text``; -1 when the
    value came from a retried, cleaned-up copy of a fenced block)."""

    value: dict[str, Any] | list[Any]
    start: int
    end: int


def extract_json(text: str, accept: Accept | None = None) -> dict[str, Any] | list[Any] | None:
    """The JSON object or array in a model answer that ``accept`` likes (default: the first
    one), or None (fail closed).

    Every top-level value is considered, not just the first: an answer may show an example or
    echo part of the prompt (``Example: {"user": "alice"}``) before the real object, and a
    caller that knows the shape it wants passes ``accept`` to skip such decoys.
    """
    found = find_json(text, accept)
    return found.value if found is not None else None


def find_json(text: str, accept: Accept | None = None) -> JsonSpan | None:
    """Like ``extract_json``, with the position of the value (to cut it out of the text)."""
    for span in iter_json(text):
        if accept is None or accept(span.value):
            return span
    return None


def iter_json(text: str) -> Iterator[JsonSpan]:
    """Every JSON object/array in a model answer, in a useful order: the whole answer, then
    each fenced block, then each balanced ``{…}`` / ``[…]`` in the prose (string-aware, so
    braces inside strings are fine; a value's inner objects are not yielded separately). Each
    candidate is also tried with trailing commas removed. Reasoning blocks are skipped: an
    answer inside a ``<think>`` block is not the answer."""
    if not isinstance(text, str) or not text:
        return
    cleaned = strip_think(text)
    base = text.find(cleaned) if cleaned else -1
    yielded = 0
    seen: set[tuple[int, int]] = set()

    def at(start: int, end: int) -> tuple[int, int]:
        return (base + start, base + end) if base >= 0 else (-1, -1)

    whole = _loads(cleaned.strip())
    if whole is not None:
        yield JsonSpan(whole, *at(0, len(cleaned)))
        return
    for match in _FENCE.finditer(cleaned):
        value = _loads(match.group(1).strip())
        if value is not None:
            seen.add((match.start(), match.end()))
            yielded += 1
            yield JsonSpan(value, *at(match.start(), match.end()))
            if yielded >= _MAX_VALUES:
                return
    for begin, end, value in _scan_all(cleaned):
        if any(s <= begin and end <= e for s, e in seen):
            continue  # already yielded as a fenced block
        yielded += 1
        yield JsonSpan(value, *at(begin, end))
        if yielded >= _MAX_VALUES:
            return


def _loads(candidate: str) -> dict[str, Any] | list[Any] | None:
    if not candidate or candidate[0] not in "{[":
        return None
    for attempt in (candidate, _drop_trailing_commas(candidate)):
        try:
            value = json.loads(attempt)
        except ValueError:
            continue
        if isinstance(value, dict | list):
            return value
    return None


def _scan_all(text: str) -> Iterator[tuple[int, int, dict[str, Any] | list[Any]]]:
    """Each balanced top-level JSON object/array in ``text`` that parses, left to right; after a
    value the scan continues behind it, after a failed start one character further."""
    failed = 0
    pos = 0
    while failed < _MAX_STARTS:
        begin = min((i for i in (text.find("{", pos), text.find("[", pos)) if i >= 0), default=-1)
        if begin < 0:
            return
        end = _balanced_end(text, begin)
        parsed = _loads(text[begin:end]) if end is not None else None
        if parsed is not None and end is not None:
            yield begin, end, parsed
            pos = end
        else:
            failed += 1
            pos = begin + 1
def _balanced_end(text: str, begin: int) -> int | None:
    """Index just past the bracket closing ``text[begin]``, skipping string contents."""
    stack: list[str] = []
    in_string = False
    escaped = False
    for i in range(begin, len(text)):
        ch = text[i]
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if not stack or stack.pop() != ch:
                return None
            if not stack:
                return i + 1
    return None


def _drop_trailing_commas(text: str) -> str:
    """Remove commas directly before ``}`` / ``]`` outside strings (a common small-model slip)."""
    out: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "}]":
            while out and out[-1].isspace():
                out.pop()
            if out and out[-1] == ",":
                out.pop()
        out.append(ch)
    return "".join(out)
