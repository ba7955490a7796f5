"""Typed records of session memory: buffered messages, buffer state, extraction outcomes.

Why their own module: the buffer (Redis / in-process), the manager and the hook all speak
these types, and the control plane's session-debug endpoint returns them, so they must not
depend on any of those layers.

A buffered message is stored in Redis as compact JSON (``{"r","c","t","k","n","at"}``); the
short keys matter because a long session holds up to ``session.buffer_max_messages`` of them
and the extraction-commit Lua script decodes them to recount the pending tokens.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


@dataclass(frozen=True, slots=True)
class BufferedMessage:
    """One conversation message as the session buffer keeps it.

    ``tokens`` is counted once, when collected, so thresholds and the commit script never
    recount; ``tool_calls`` is the number of tool calls an assistant message asked for.
    """

    role: str
    content: str
    tokens: int = 0
    tool_calls: int = 0
    name: str | None = None  # the tool's name for a tool result
    created_at: float = 0.0

    def to_json(self) -> str:
        data: dict[str, Any] = {"r": self.role, "c": self.content, "t": self.tokens, "k": self.tool_calls,
                                "at": round(self.created_at, 3)}
        if self.name:
            data["n"] = self.name
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> BufferedMessage | None:
        """The message, or None for an entry that is not ours (logged by the caller)."""
        try:
            data = json.loads(raw)
            return cls(role=str(data["r"]), content=str(data.get("c", "")), tokens=int(data.get("t", 0)),
                       tool_calls=int(data.get("k", 0)), name=data.get("n"),
                       created_at=float(data.get("at", 0.0)))
        except (ValueError, TypeError, KeyError):
            return None


@dataclass(slots=True)
class SessionState:
    """The counters of one session's buffer (the Redis state hash, or its in-process twin).

    Positions are absolute: ``total`` messages were ever collected; message number ``i`` (from
    0) is in the buffer when ``i >= total - length``; messages before ``summarized`` are
    covered by the stored summary. Counting this way (instead of storing list indices) keeps
    the bookkeeping right when LTRIM drops old entries and when messages arrive while a summary
    is being written.
    """

    total: int = 0
    summarized: int = 0
    tokens: int = 0  # tokens of the messages not yet summarised
    tool_calls: int = 0  # tool calls among them
    last_turn_tool_calls: int = 0
    turns: int = 0
    summaries: int = 0
    summary_version: int = 0
    last_summary_at: float = 0.0
    last_collect_at: float = 0.0
    failures: int = 0
    retry_at: float = 0.0
    last_error: str = ""
    epoch: str = ""
    length: int = 0  # messages currently in the buffer (summarised tail + pending)

    @property
    def pending(self) -> int:
        """Messages collected since the last summary (some may have been cut by the buffer cap)."""
        return max(0, self.total - self.summarized)

    @property
    def has_summary(self) -> bool:
        return self.summary_version > 0 or self.summaries > 0

    @classmethod
    def from_hash(cls, raw: dict[Any, Any], length: int = 0) -> SessionState:
        """Build from HGETALL output (bytes or str keys); unknown or malformed fields are ignored."""
        values = {_text(k): _text(v) for k, v in raw.items()}
        state = cls(length=length)
        for name in ("total", "summarized", "tokens", "tool_calls", "last_turn_tool_calls", "turns",
                     "summaries", "summary_version", "failures"):
            if name in values:
                try:
                    setattr(state, name, int(float(values[name])))
                except ValueError:
                    pass
        for name in ("last_summary_at", "last_collect_at", "retry_at"):
            if name in values:
                try:
                    setattr(state, name, float(values[name]))
                except ValueError:
                    pass
        state.last_error = values.get("last_error", "")
        state.epoch = values.get("epoch", "")
        return state

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@dataclass(slots=True)
class PendingBatch:
    """What an extraction reads under the lock: the state and the unsummarised messages.

    ``start`` is the absolute position of ``messages[0]``; ``dropped`` counts unsummarised
    messages the buffer cap cut before anyone could summarise them (logged, never silent).
    """

    state: SessionState
    messages: list[BufferedMessage]
    start: int
    dropped: int = 0


class CommitOutcome(StrEnum):
    """Result of advancing the buffer after a stored summary."""

    DONE = "done"
    LOCK_LOST = "lock-lost"  # our lock expired and someone else may be summarising
    STATE_RESET = "state-reset"  # the buffer was recreated (Redis restarted or TTL expiry)


class ExtractStatus(StrEnum):
    EXTRACTED = "extracted"
    NOT_DUE = "not-due"  # thresholds not reached (or backing off after a failure)
    NOTHING_NEW = "nothing-new"
    BUSY = "busy"  # another worker (this pod or another) holds the session's lock
    NO_MODEL = "no-model"
    FAILED = "failed"


@dataclass(slots=True)
class ExtractionResult:
    """What ``maybe_extract`` did; ``error`` says why a failed attempt failed."""

    status: ExtractStatus
    session_id: str
    summary: str | None = None
    version: int = 0
    messages_sent: int = 0
    messages_left: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        return self.status is ExtractStatus.EXTRACTED


@dataclass(slots=True)
class SessionInfo:
    """Everything an operator wants to see about one session (the control plane's debug view)."""

    session_id: str
    mode: str
    state: SessionState | None
    buffered: list[BufferedMessage] = field(default_factory=list)
    lock_held: bool = False
    lock_ttl_ms: int | None = None
    lock_holder: str | None = None
    cached_summary: str | None = None
    cached_version: int | None = None
    stored_summary: str | None = None
    stored_version: int | None = None
    due: bool = False
