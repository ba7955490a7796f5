"""One light-model call for a session summary and a second job riding along with it.

Why: when a session's summary is due and an auto-memory extraction of the same session is
pending, both would read the same conversation in two calls back to back. The summariser asks a
rider source (``MemoryServices.summary_rider``) for a rider; with one, the call carries both jobs
— each with its own instructions and inputs, unchanged — and the answer has two tagged parts:

    <session_summary>
    # title ... (the summary template)
    </session_summary>
    <memory_update>
    {... the rider's JSON ...}
    </memory_update>

The summary part goes through the summary's own parser and rules; the other part is handed to
the rider, which applies it under its own rules. When the rider's conversation is part of the
summary's new messages (the usual case), its inputs point to them instead of repeating them, so
the one call costs little more than the summary alone. Either part may fail alone. Without a rider the
summary call is exactly what it was. The rider is a structural protocol: this module knows
nothing of auto memory.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..llm import LLMResult, iter_json
from .records import BufferedMessage

log = logging.getLogger(__name__)

COMBINED_MARKER = "You do two jobs for one conversation in a single answer"
_SUMMARY = re.compile(r"<session_summary>(.*?)(?:</session_summary>|$)", re.DOTALL | re.IGNORECASE)
_RIDER_OPEN = re.compile(r"<memory_update>", re.IGNORECASE)
_RIDER_CLOSE = re.compile(r"</memory_update>", re.IGNORECASE)
_PROBE_CHARS = 300  # a message is recognised by its first characters (the buffer may cut long ones)


class Rider(Protocol):
    """A second job for a summary call (``auto.rider.SummaryRider``)."""

    @property
    def system(self) -> str: ...

    @property
    def user(self) -> str: ...

    @property
    def max_tokens(self) -> int: ...

    @property
    def conversation(self) -> Sequence[tuple[str, str]]:
        """(role, text) of the messages the second job reads."""
        ...

    def user_pointing_to(self, where: str) -> str:
        """``user`` with the conversation replaced by a pointer to ``where`` the call carries it."""
        ...

    def finish(self, text: str | None, *, error: str = "", prompt_tokens: int = 0,
               completion_tokens: int = 0) -> None: ...


RiderSource = Callable[[str], Rider | None]


class Ride:
    """A rider taken for one summary call. ``close`` makes sure it is finished exactly once."""

    def __init__(self, rider: Rider) -> None:
        self.rider = rider
        self._done = False

    @property
    def max_tokens(self) -> int:
        return self.rider.max_tokens

    def messages(self, summary_prompt: list[dict[str, Any]], new_messages: Sequence[BufferedMessage] = ()
                 ) -> list[dict[str, Any]]:
        """The summary call's messages with the rider's job added. When every message the rider
        reads is among the summary's ``new_messages`` (in order), the rider's inputs point to
        them instead of repeating the conversation."""
        span = shared_span(self.rider.conversation, new_messages)
        rider_user = self.rider.user if span is None else self.rider.user_pointing_to(
            f"JOB 1's new messages [{span[0]}] to [{span[1]}]")
        system = "\n\n".join([
            f"{COMBINED_MARKER}: JOB 1 updates the session summary, JOB 2 updates the user's long-term "
            "memory. Do each job exactly as its own instructions say; they do not change each other.",
            "# JOB 1: the session summary\n" + str(summary_prompt[0]["content"]),
            "# JOB 2: the long-term memory update\n" + self.rider.system,
            "# Answer format\nFirst the complete summary of JOB 1 between <session_summary> and "
            "</session_summary>, then the JSON object of JOB 2 between <memory_update> and </memory_update>. "
            "Nothing else.",
        ])
        user = "\n\n".join([
            "# Inputs of JOB 1\n" + str(summary_prompt[-1]["content"]),
            "# Inputs of JOB 2\n" + rider_user,
            "Write both parts now: <session_summary>…</session_summary> then <memory_update>…</memory_update>.",
        ])
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def split(self, answer: LLMResult) -> str:
        """The summary part of ``answer``; the other part goes to the rider (now)."""
        summary, rider_part = split_answer(answer.text)
        self._finish(rider_part, "the answer has no memory update part" if rider_part is None else "",
                     answer.prompt_tokens, answer.completion_tokens)
        return summary

    def close(self, error: str) -> None:
        self._finish(None, error, 0, 0)

    def _finish(self, text: str | None, error: str, prompt_tokens: int, completion_tokens: int) -> None:
        if self._done:
            return
        self._done = True
        try:
            self.rider.finish(text, error=error, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        except Exception:  # the rider's failure must not fail the summary
            log.exception("the job riding along with the session summary failed")


def shared_span(conversation: Sequence[tuple[str, str]], new_messages: Sequence[BufferedMessage]
                ) -> tuple[int, int] | None:
    """The 1-based numbers (as ``format_messages`` numbers them) of the first and last of
    ``new_messages`` holding the rider's messages, all found in order; None otherwise."""
    if not conversation or not new_messages:
        return None
    found: list[int] = []
    start = 0
    for role, text in conversation:
        probe = " ".join(text.split())[:_PROBE_CHARS]
        index = next((i for i in range(start, len(new_messages)) if new_messages[i].role == role
                      and probe in " ".join(new_messages[i].content.split())), None)
        if index is None:
            return None
        found.append(index)
        start = index + 1
    return found[0] + 1, found[-1] + 1


def take_ride(source: RiderSource | None, session_id: str) -> Ride | None:
    """A ride for ``session_id`` when the source has one (never raises)."""
    if source is None:
        return None
    try:
        rider = source(session_id)
    except Exception as exc:
        log.warning("session %s: no job rides along with the summary (%s)", session_id, exc)
        return None
    return Ride(rider) if rider is not None else None


def split_answer(text: str) -> tuple[str, str | None]:
    """(summary part, rider part or None) of a combined answer.

    Tagged parts are used when present; otherwise (a model that dropped the tags) the last JSON
    object in the answer is the rider's part and is cut out of the summary, with its fence."""
    opened = _RIDER_OPEN.search(text)
    if opened is not None:
        closed = _RIDER_CLOSE.search(text, opened.end())
        rider = text[opened.end() : closed.start() if closed else len(text)].strip()
        rest = text[: opened.start()] + (text[closed.end() :] if closed else "")
    else:
        spans = [(v.start, v.end) for v in iter_json(text) if isinstance(v.value, dict) and v.start >= 0]
        if spans:
            start, end = spans[-1]  # a fenced block's span includes its fence
            rider, rest = text[start:end], text[:start] + text[end:]
        else:
            rider, rest = None, text
    summary = _SUMMARY.search(rest)
    return (summary.group(1) if summary else rest).strip(), (rider or None)
