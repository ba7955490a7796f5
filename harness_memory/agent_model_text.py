"""The agno seam of text tool-call recovery (``text_tool_calls`` holds the rules).

Why a mixin over agno's OpenAI model classes: agno builds its tool loop on ``invoke`` /
``ainvoke`` (a whole ``ModelResponse``) and ``invoke_stream`` / ``ainvoke_stream`` (deltas). Both
receive the ``tools`` offered in that request, so a call is recovered only for a tool that request
offered, and its result is an ordinary ``tool_calls`` entry that agno executes like any other.

Streaming: text is shown as it comes until a line starts that may open a call block (```` ``` ````,
``<tool_call>``, ``<tools>``, ``{``, ``[``); from there it is held until the answer ends. Then a
recovered call becomes a tool-call delta and the held call text is never shown; anything else is
released as text. So an answer that is a call shows the user no raw JSON, and an ordinary answer
loses nothing (only text after such a line arrives at the end instead of word by word).
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from agno.models.response import ModelResponse
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall, ChoiceDeltaToolCallFunction

from .text_tool_calls import Recovery, hold_from, recover

log = logging.getLogger(__name__)
_TOOLS_POSITION = 3  # invoke(messages, assistant_message, response_format, tools, ...)
#: A text call identical to one made this often already in the run is not run again: the model is
#: looping (the tools answered "already done" and it wrote the same call once more).
MAX_REPEATS = 2


class TextCallStats:
    """Counts of text calls per (outcome, kind) for one model object, and the telemetry hook.

    Shared by copies of the model (agno and AgentOS deep-copy models): ``__deepcopy__`` is itself."""

    def __init__(self, record: Callable[[str, str], None] | None = None) -> None:
        self._lock = threading.Lock()
        self.counts: Counter[tuple[str, str]] = Counter()
        self._record = record

    def __deepcopy__(self, memo: dict[int, Any]) -> TextCallStats:
        return self

    def add(self, outcome: str, kind: str, amount: int = 1) -> None:
        with self._lock:
            self.counts[(outcome, kind)] += amount
        if self._record is not None:
            try:
                self._record(outcome, kind)
            except Exception:  # metrics never break a run
                log.debug("text tool-call metric failed", exc_info=True)

    def total(self, outcome: str | None = None) -> int:
        """Calls recovered (``outcome="recovered"``), or every call-shaped text seen (None)."""
        with self._lock:
            return sum(n for (o, _), n in self.counts.items() if outcome is None or o == outcome)

    def rejected(self) -> int:
        return self.total() - self.total("recovered")


class TextToolCalls:
    """Mixin for agno's ``OpenAIChat`` / ``OpenAILike``: answers whose text is a tool call become
    real tool calls when ``text_tool_calls`` is on (``model.text_tool_calls`` in the config)."""

    text_tool_calls: bool = False
    text_call_stats: TextCallStats | None = None

    def invoke(self, *args: Any, **kwargs: Any) -> Any:
        response = super().invoke(*args, **kwargs)  # type: ignore[misc]
        return self._recover_whole(response, args, kwargs)

    async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
        response = await super().ainvoke(*args, **kwargs)  # type: ignore[misc]
        return self._recover_whole(response, args, kwargs)

    def invoke_stream(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        stream = super().invoke_stream(*args, **kwargs)  # type: ignore[misc]
        tools = self._tools_if_on(args, kwargs)
        if tools is None:
            yield from stream
            return
        held = _HeldStream(tools, _messages(args, kwargs))
        for delta in stream:
            yield held.pass_on(delta)
        yield from self._finish(held)

    async def ainvoke_stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        stream = super().ainvoke_stream(*args, **kwargs)  # type: ignore[misc]
        tools = self._tools_if_on(args, kwargs)
        if tools is None:
            async for delta in stream:
                yield delta
            return
        held = _HeldStream(tools, _messages(args, kwargs))
        async for delta in stream:
            yield held.pass_on(delta)
        for last in self._finish(held):
            yield last

    # -- helpers ------------------------------------------------------------------------------
    def _tools_if_on(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[dict[str, Any]] | None:
        """The tools offered in this request when recovery applies to it, else None (off, no tools,
        or a structured-output request, whose JSON answer is data, never a call)."""
        if not self.text_tool_calls:
            return None
        tools = kwargs.get("tools", args[_TOOLS_POSITION] if len(args) > _TOOLS_POSITION else None)
        response_format = kwargs.get("response_format", args[2] if len(args) > 2 else None)
        if not tools or response_format is not None:
            return None
        return list(tools)

    def _recover_whole(self, response: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        tools = self._tools_if_on(args, kwargs)
        if tools is None or getattr(response, "tool_calls", None) or not isinstance(response.content, str):
            return response
        found = self._judge(_unless_looping(recover(response.content, tools), _messages(args, kwargs)))
        if found.outcome in ("recovered", "repeated"):
            response.tool_calls = [_call_dict(c.name, c.arguments) for c in found.calls]
            response.content = found.lead or None
        return response

    def _finish(self, held: _HeldStream) -> Iterator[ModelResponse]:
        """The end of a stream: a recovered call as a tool-call delta, or the held text."""
        if held.real_calls:
            rest = held.release()
            if rest:
                yield ModelResponse(content=rest)
            return
        found = self._judge(_unless_looping(recover(held.text, held.tools), held.messages))
        if found.outcome not in ("recovered", "repeated"):
            rest = held.release()
            if rest:
                yield ModelResponse(content=rest)
            return
        unshown_lead = found.lead[held.shown:]
        if unshown_lead.strip():
            yield ModelResponse(content=unshown_lead)
        if not found.calls:
            return
        yield ModelResponse(tool_calls=[  # type: ignore[arg-type]
            ChoiceDeltaToolCall(index=i, id=_call_id(), type="function",
                                function=ChoiceDeltaToolCallFunction(name=c.name, arguments=_dump(c.arguments)))
            for i, c in enumerate(found.calls)])

    def _judge(self, found: Recovery) -> Recovery:
        """Count and log what the text held (no argument text is logged: it may be the user's)."""
        if found.outcome == "none":
            return found
        stats = self.text_call_stats
        if stats is not None:
            stats.add(found.outcome, found.kind, len(found.calls) or 1)
        if found.outcome == "recovered":
            log.info("recovered %d tool call(s) written as text (%s): %s", len(found.calls), found.kind,
                     ", ".join(c.name for c in found.calls))
        else:
            log.info("text that looks like a tool call (%s) not run: %s (%s)", found.kind, found.outcome,
                     found.detail)
        return found


class _HeldStream:
    """A stream's text: what was shown, and what is held back because a call may start there."""

    def __init__(self, tools: list[dict[str, Any]], messages: list[Any]) -> None:
        self.tools = tools
        self.messages = messages
        self.text = ""
        self.shown = 0
        self.real_calls = False

    def pass_on(self, delta: Any) -> Any:
        """The delta with only the text that can be shown now (the rest is held)."""
        if getattr(delta, "tool_calls", None):
            self.real_calls = True  # the server parsed a call itself: nothing to recover
        piece = getattr(delta, "content", None)
        if isinstance(piece, str):
            self.text += piece
            cut = self.text.__len__() if self.real_calls else hold_from(self.text, self.shown)
            delta.content = self.text[self.shown:cut] or None
            self.shown = max(self.shown, cut)
        return delta

    def release(self) -> str:
        rest = self.text[self.shown:]
        self.shown = len(self.text)
        return rest


def _messages(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    messages = kwargs.get("messages", args[0] if args else None)
    return list(messages) if isinstance(messages, list) else []


def _made(messages: list[Any]) -> Counter[str]:
    """How often each (tool, arguments) was called by the assistant in this run's messages."""
    made: Counter[str] = Counter()
    for message in messages:
        if getattr(message, "from_history", False) or getattr(message, "role", None) != "assistant":
            continue
        for call in getattr(message, "tool_calls", None) or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict):
                continue
            try:
                args = json.loads(fn.get("arguments") or "{}")
            except (TypeError, ValueError):
                continue
            made[_call_key(str(fn.get("name")), args)] += 1
    return made


def _call_key(name: str, arguments: Any) -> str:
    return name + "\x00" + json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)


def _unless_looping(found: Recovery, messages: list[Any]) -> Recovery:
    """``found`` with the calls this run already made ``MAX_REPEATS`` times left out: a model that
    keeps writing a call it was told is done would loop for ever. When nothing is left the outcome
    is ``repeated``: the call text is still not shown (it is a call, not an answer), the lead stays."""
    if found.outcome != "recovered":
        return found
    made = _made(messages)
    fresh = tuple(c for c in found.calls if made[_call_key(c.name, c.arguments)] < MAX_REPEATS)
    if fresh == found.calls:
        return found
    if fresh:
        return Recovery("recovered", found.kind, fresh, found.lead)
    return Recovery("repeated", found.kind, (), found.lead, detail="the run already made this call")


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def _dump(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)


def _call_dict(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tool call as agno's non-streaming parse gives it (``ChatCompletionMessageToolCall.model_dump()``)."""
    return {"id": _call_id(), "type": "function", "function": {"name": name, "arguments": _dump(arguments)}}


__all__ = ["TextCallStats", "TextToolCalls"]
