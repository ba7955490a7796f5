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
import re
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from agno.models.response import ModelResponse
from openai.types.chat.chat_completion_chunk import ChoiceDeltaToolCall, ChoiceDeltaToolCallFunction

from . import save_ask
from .auto.signals import default_patterns
from .session.messages import content_text, strip_injected
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
        #: Unbacked save claims: ``nudged``, then ``called`` or ``answered`` (``claim``).
        self.claims: Counter[str] = Counter()
        self._nudged: dict[str, None] = {}  # user-message ids already nudged (insertion-ordered)
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

    def first_nudge(self, turn: str) -> bool:
        """True the first time a turn (its user message's id) is nudged, False after: the nudge is
        not kept in the run's messages, so the turn's later model calls cannot see it was asked."""
        with self._lock:
            if turn in self._nudged:
                return False
            self._nudged[turn] = None
            while len(self._nudged) > 4096:  # bounded: the oldest turns are long over
                self._nudged.pop(next(iter(self._nudged)))
            return True

    def claim(self, outcome: str) -> None:
        """An answer that claimed a save no write backed: ``nudged`` (asked again), then ``called``
        (the model made the call) or ``answered`` (it answered in words)."""
        with self._lock:
            self.claims[outcome] += 1
        if self._record is not None:
            try:
                self._record(f"claim_{outcome}", "claim")
            except Exception:
                log.debug("text tool-call metric failed", exc_info=True)


class TextToolCalls:
    """Mixin for agno's ``OpenAIChat`` / ``OpenAILike``: answers whose text is a tool call become
    real tool calls when ``text_tool_calls`` is on (``model.text_tool_calls`` in the config)."""

    text_tool_calls: bool = False
    text_call_stats: TextCallStats | None = None

    def invoke(self, *args: Any, **kwargs: Any) -> Any:
        response = self._recover_whole(super().invoke(*args, **kwargs), args, kwargs)  # type: ignore[misc]
        nudged = self._nudge_if_unbacked(response, args, kwargs)
        if nudged is None:
            return response
        try:
            asked = _asked_for_memory(nudged)
            again = self._ask_memory(nudged) if asked else super().invoke(*nudged[0], **nudged[1])  # type: ignore[misc]
        except Exception:  # the second ask is ours: its failure never costs the user the first answer
            log.warning("asking the model again about an unsaved memory failed", exc_info=True)
            again = None
        out, words = self._settle(again, response, nudged, args, kwargs)
        if words is None:
            return out
        try:
            again = super().invoke(*words[0], **words[1])  # type: ignore[misc]
        except Exception:
            log.warning("asking the model again about an unsaved memory failed", exc_info=True)
            again = None
        return self._settle_words(again, response, words)

    async def ainvoke(self, *args: Any, **kwargs: Any) -> Any:
        response = self._recover_whole(await super().ainvoke(*args, **kwargs), args, kwargs)  # type: ignore[misc]
        nudged = self._nudge_if_unbacked(response, args, kwargs)
        if nudged is None:
            return response
        try:
            if _asked_for_memory(nudged):
                again = await self._aask_memory(nudged)
            else:
                again = await super().ainvoke(*nudged[0], **nudged[1])  # type: ignore[misc]
        except Exception:
            log.warning("asking the model again about an unsaved memory failed", exc_info=True)
            again = None
        out, words = self._settle(again, response, nudged, args, kwargs)
        if words is None:
            return out
        try:
            again = await super().ainvoke(*words[0], **words[1])  # type: ignore[misc]
        except Exception:
            log.warning("asking the model again about an unsaved memory failed", exc_info=True)
            again = None
        return self._settle_words(again, response, words)

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
        why = self._unbacked_stream(held, args, kwargs)
        if why == "asked":
            request = _memory_request(held.text, args, kwargs)
            try:
                again = self._ask_memory(request)
            except Exception:
                log.warning("asking the model for an unsaved memory failed", exc_info=True)
                again = None
            yield from self._stream_answer(held, again)
        elif why == "claim":
            yield from self._stream_answer(held, None)

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
        why = self._unbacked_stream(held, args, kwargs)  # as in ``invoke_stream``
        again = None
        if why == "asked":
            request = _memory_request(held.text, args, kwargs)
            try:
                again = await self._aask_memory(request)
            except Exception:
                log.warning("asking the model for an unsaved memory failed", exc_info=True)
        if why is not None:
            for last in self._stream_answer(held, again):
                yield last

    # -- the structured ask ---------------------------------------------------------------------
    def _memory_params(self, request: tuple[tuple[Any, ...], dict[str, Any]]) -> dict[str, Any]:
        """The chat-completion parameters of the structured ask: this model's own (temperature…),
        the memory's JSON schema as ``response_format``, no tools, and ``save_ask.MAX_TOKENS``."""
        params = dict(self.get_request_params(response_format=save_ask.RESPONSE_FORMAT))  # type: ignore[attr-defined]
        for key in ("tools", "tool_choice", "parallel_tool_calls", "max_completion_tokens"):
            params.pop(key, None)
        params["max_tokens"] = save_ask.MAX_TOKENS
        messages = self._format_all_messages(_messages(*request), False)  # type: ignore[attr-defined]
        return {"model": self.id, "messages": messages, **params}  # type: ignore[attr-defined]

    def _ask_memory(self, request: tuple[tuple[Any, ...], dict[str, Any]]) -> ModelResponse:
        """The structured ask, made with the model's own client: it is our request, not a turn of
        agno's loop, and it needs its own token cap (a grammar bounds the shape, not the length)."""
        answer = self.get_client().chat.completions.create(**self._memory_params(request))  # type: ignore[attr-defined]
        return ModelResponse(content=answer.choices[0].message.content if answer.choices else None)

    async def _aask_memory(self, request: tuple[tuple[Any, ...], dict[str, Any]]) -> ModelResponse:
        client = self.get_async_client()  # type: ignore[attr-defined]
        answer = await client.chat.completions.create(**self._memory_params(request))
        return ModelResponse(content=answer.choices[0].message.content if answer.choices else None)

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

    def _nudge_if_unbacked(self, response: Any, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The request to make again when ``response`` tells the user something was saved or
        remembered, or the user asked to remember something, while no memory write of this turn
        succeeded (``unbacked``); else None.

        Why: a 1.5B model answered "好的，我已经记住了。" / "Done." / "I've saved your information in
        `user_role.md`." with no call at all — a false statement to the user, and the memory lost
        (issue 30). After a bare claim it is asked once more in words, told nothing was saved. When
        the user asked to remember, words were not enough (the 1.5B model answered the words with
        more words): the memory itself is asked for as data under a JSON schema (``save_ask``) and
        becomes an ordinary ``save_file`` call. Once per turn; only with ``text_tool_calls`` on (the
        small-model mode) and when the request offers ``save_file``. While streaming the answer is
        already on screen: see ``_unbacked_stream``."""
        tools = self._tools_if_on(args, kwargs)
        if tools is None or getattr(response, "tool_calls", None) or not isinstance(response.content, str):
            return None
        if SAVE_TOOL not in {_tool_name(t) for t in tools}:
            return None
        messages = _messages(args, kwargs)
        why = unbacked(response.content, messages)
        if why is None:
            return None
        stats = self.text_call_stats
        turn = _last_user_id(messages)
        if stats is None or turn is None or not stats.first_nudge(turn):  # once per user message
            return None
        stats.claim("nudged")
        log.info("%s, but no memory write of this turn succeeded: asking again",
                 "the model said it saved something" if why == "claim" else "the user asked to remember something")
        if why != "asked":
            return _words_request(response, args, kwargs)
        return _memory_request(response.content, args, kwargs)

    def _unbacked_stream(self, held: _HeldStream, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        """Why a streamed answer (already on screen) needs a memory write it does not have, as
        ``unbacked`` says, once per user message; None when the stream made or recovered a call."""
        if held.real_calls or held.called or SAVE_TOOL not in {_tool_name(t) for t in held.tools}:
            return None
        why = unbacked(held.text, held.messages)
        stats, turn = self.text_call_stats, _last_user_id(held.messages)
        if why is None or stats is None or turn is None or not stats.first_nudge(turn):
            return None
        stats.claim("nudged")
        return why

    def _stream_answer(self, held: _HeldStream, again: Any) -> Iterator[ModelResponse]:
        """After a streamed answer: the memory the structured ask brought, as a ``save_file``
        call delta (agno runs it and the model answers again); else, when the answer claimed a
        save, what is true said after it (the claim is on screen: it cannot be taken back)."""
        arguments = save_ask.save_arguments(getattr(again, "content", None)) if again is not None else None
        if self.text_call_stats is not None:
            self.text_call_stats.claim("called" if arguments is not None else "answered")
        if arguments is not None:
            held.called = True
            yield ModelResponse(tool_calls=[  # type: ignore[arg-type]
                ChoiceDeltaToolCall(index=0, id=_call_id(), type="function",
                                    function=ChoiceDeltaToolCallFunction(name=SAVE_TOOL, arguments=_dump(arguments)))])
        elif _CLAIM.search(held.text):
            yield ModelResponse(content=f"\n\n{CLAIM_WITHDRAWN}")

    def _settle(self, again: Any, response: Any, nudged: tuple[tuple[Any, ...], dict[str, Any]],
                args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, tuple[Any, ...] | None]:
        """After the first ask again: ``(answer, None)``, or ``(None, request)`` when the memory was
        asked for and did not come while the first answer claims it was saved: that claim is never
        shown as it is; asked in words (``request``), the model answers again or makes the call."""
        out = self._after_nudge(again, response, nudged[0], nudged[1])
        if out is not response or not _CLAIM.search(response.content):
            return out, None
        if not _asked_for_memory(nudged):
            return _without_claim(response), None
        return None, self._words_request(response, args, kwargs)

    def _settle_words(self, again: Any, response: Any, words: tuple[tuple[Any, ...], dict[str, Any]]) -> Any:
        """The answer after the ask in words: its call or answer, else the claim with what is true."""
        out = self._after_nudge(again, response, *words)
        return _without_claim(response) if out is response else out

    def _words_request(self, response: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                       ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The ask in words after the structured ask brought no memory and the first answer claims
        a save (counted as a second nudge)."""
        if self.text_call_stats is not None:
            self.text_call_stats.claim("nudged")
        return _words_request(response, args, kwargs)

    def _after_nudge(self, again: Any, first: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The answer to the nudge (``again``, None when that ask failed): a call (run as any other);
        else, after an unbacked claim, the new plain answer instead of the claim, and after an
        unanswered "remember" the first answer (the caller asks in words when that one claims);
        counted either way."""
        asked = save_ask.is_ask(getattr(_messages(args, kwargs)[-1], "content", None))
        if again is not None and asked:
            arguments = save_ask.save_arguments(getattr(again, "content", None))
            if arguments is not None:  # an ordinary save_file call from here: the tool's checks decide
                again.tool_calls = [_call_dict(SAVE_TOOL, arguments)]
                again.content = None
        elif again is not None:
            again = self._recover_whole(again, args, kwargs)
        called = again is not None and bool(getattr(again, "tool_calls", None))
        if self.text_call_stats is not None:
            self.text_call_stats.claim("called" if called else "answered")
        if called:
            return again
        if again is None or asked or not (isinstance(again.content, str) and again.content.strip()):
            return first
        return again

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
        held.called = True  # a call, recovered or repeated: never asked about again
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
        self.called = False  # a call was recovered from the text (or the structured ask brought one)

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


SAVE_TOOL = "save_file"
#: The memory tools whose success backs a claim that something was saved, changed or forgotten.
WRITE_TOOLS = frozenset({"save_file", "replace_file_chunk", "delete_file"})
#: What the model is told when its answer claims a save no write backed (a user turn: small models
#: follow those; it is sent once and never stored in the session).
NUDGE = ("Memory check: no memory tool succeeded after my last message, so nothing was saved. If my "
         "message holds something worth keeping, call save_file now. Otherwise answer me again, without "
         "saying that anything was saved or remembered.")
#: An answer saying something was saved or will be remembered (English and Chinese).
_CLAIM = re.compile(
    r"\bI(?:'ve| have)?\s+(?:just\s+|now\s+|also\s+)?(?:saved|stored|noted|recorded|remembered|memori[sz]ed)\b"
    r"|\bI(?:'ll| will)\s+(?:remember|note|save|store|record|keep (?:that|this|it) in mind)\b"
    r"|\b(?:has|have|is|was)\s+been\s+(?:saved|stored|noted|recorded|remembered|memori[sz]ed)\b"
    r"|\bsaved\s+(?:it|this|that|your)\b|^\W*(?:done|noted|saved|got it)\W*$"
    r"|(?:已经?|我会|会)(?:帮你|为你|给你)?(?:保存|记住|记下|记录|存储|储存|存好)|(?:记住|记下|保存|存好|记录)(?:了|啦)",
    re.IGNORECASE | re.MULTILINE)


def unbacked(text: str, messages: list[Any]) -> str | None:
    """Why the turn's answer ``text`` needs a memory write it does not have: ``"asked"`` (the
    user's message asks to remember — ``auto/patterns/remember.yaml``, the most explicit thing a
    user can say — whatever the answer claims) or ``"claim"`` (it says something was saved or will
    be remembered); None when a memory write succeeded since the user's last message, or neither
    holds."""
    last_user = max((i for i, m in enumerate(messages) if getattr(m, "role", None) == "user"), default=-1)
    if last_user < 0 or (getattr(messages[last_user], "content", None) == NUDGE
                          or save_ask.is_ask(getattr(messages[last_user], "content", None))):
        return None
    for message in messages[last_user + 1:]:
        if getattr(message, "role", None) == "tool" and getattr(message, "tool_name", None) in WRITE_TOOLS \
                and not str(getattr(message, "content", "")).startswith(("Error", "Already tried")):
            return None
    said = strip_injected(content_text(getattr(messages[last_user], "content", None)))
    remember = default_patterns().sets.get("remember")
    if remember is not None and remember.search(said):
        return "asked"
    return "claim" if _CLAIM.search(text) else None


def unbacked_claim(text: str, messages: list[Any]) -> bool:
    """Whether ``text`` claims a save that no memory write since the user's last message backs."""
    return bool(_CLAIM.search(text)) and unbacked(text, messages) is not None


def _memory_request(answer: str, args: tuple[Any, ...], kwargs: dict[str, Any]
                    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The structured ask for the memory the user asked to keep: the answer and ``save_ask.ask``
    (quoting the user's message) added, ``response_format`` set to its JSON schema (the server
    enforces it), no tools."""
    from agno.models.message import Message  # agno's own message type (the request is built from it)

    messages = _messages(args, kwargs)
    last_user = next((m for m in reversed(messages) if getattr(m, "role", None) == "user"), None)
    said = strip_injected(content_text(getattr(last_user, "content", None)))
    extra = [Message(role="assistant", content=answer), Message(role="user", content=save_ask.ask(said))]
    messages = [*messages, *extra]
    args, kwargs = _with(args, kwargs, 2, "response_format", save_ask.RESPONSE_FORMAT)
    args, kwargs = _with(args, kwargs, 3, "tools", None)
    args, kwargs = _with(args, kwargs, 4, "tool_choice", None)
    return _with(args, kwargs, 0, "messages", messages)


def _words_request(response: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                   ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The request asking again in words (``NUDGE``): the same tools, the claim and the nudge added."""
    from agno.models.message import Message

    extra = [Message(role="assistant", content=response.content), Message(role="user", content=NUDGE)]
    return _with(args, kwargs, 0, "messages", [*_messages(args, kwargs), *extra])


def _asked_for_memory(request: tuple[tuple[Any, ...], dict[str, Any]]) -> bool:
    """Whether ``request`` is the structured ask for a memory (``save_ask.is_ask``)."""
    return save_ask.is_ask(getattr(_messages(*request)[-1], "content", None))


def _without_claim(response: Any) -> Any:
    """``response`` with what is true said after its unbacked claim (no ask again brought a save
    or another answer): the answer itself may hold what the user needs, so nothing is cut."""
    response.content = f"{response.content.rstrip()}\n\n{CLAIM_WITHDRAWN}"
    return response


#: Said after an answer claiming a save when nothing was saved and no other answer came.
CLAIM_WITHDRAWN = "(Memory note: nothing was saved to memory in this turn.)"


def _with(args: tuple[Any, ...], kwargs: dict[str, Any], position: int, name: str, value: Any
          ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``invoke``'s arguments with one parameter replaced, wherever the caller passed it."""
    if name in kwargs or len(args) <= position:
        return args, {**kwargs, name: value}
    return (*args[:position], value, *args[position + 1:]), kwargs


def _last_user_id(messages: list[Any]) -> str | None:
    ids = [getattr(m, "id", None) for m in messages if getattr(m, "role", None) == "user"]
    return str(ids[-1]) if ids and ids[-1] else None


def _tool_name(tool: Any) -> str | None:
    fn = tool.get("function") if isinstance(tool, dict) else None
    return fn.get("name") if isinstance(fn, dict) else None


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


__all__ = ["NUDGE", "TextCallStats", "TextToolCalls", "unbacked", "unbacked_claim"]
