"""Typed data of auto memory: facts, the profile, captured messages and queue batches.

Why its own module: capture, queue, updater, apply and injection all speak these types, and
none of them should depend on another's internals to share a dataclass.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from enum import StrEnum

from ..examples import normalize_text
from ..memdir import MemoryType

FACT_PREFIX = "fact-"
PROFILE_FILE = "profile.md"
#: Longest fact we store: the fact is the manifest description, whose limit is 500 characters.
MAX_FACT_CHARS = 400
MAX_SOURCE_ERROR_CHARS = 300
#: Longest profile section summary (a few sentences; the injection budget is shared).
MAX_SECTION_CHARS = 800
#: Longest profile section a person may set by hand (the API); the injection budget still applies.
MAX_MANUAL_SECTION_CHARS = 4000


class Category(StrEnum):
    PREFERENCE = "preference"
    KNOWLEDGE = "knowledge"
    CONTEXT = "context"
    BEHAVIOR = "behavior"
    GOAL = "goal"
    CORRECTION = "correction"

    @property
    def memory_type(self) -> MemoryType:
        """The memory-file type a fact of this category is stored as (see prompt.TYPES_SECTION)."""
        return _CATEGORY_TYPES[self]

    @classmethod
    def parse(cls, value: object) -> Category | None:
        """Tolerant: case, spaces and a plural ``s`` are forgiven; anything else is None."""
        if not isinstance(value, str):
            return None
        norm = value.strip().lower().replace(" ", "")
        for candidate in (norm, norm[:-1] if norm.endswith("s") else norm):
            try:
                return cls(candidate)
            except ValueError:
                continue
        return None

    @classmethod
    def coerce(cls, value: object) -> Category:
        """The category for any label a model may invent: a known one (forgiving case, spaces and
        plurals), else the nearest by meaning ("location" -> context, "skills" -> knowledge,
        "habit" -> behavior), else ``context`` — a fact is never lost for its label."""
        known = cls.parse(value)
        if known is not None:
            return known
        if isinstance(value, str):
            words = re.findall(r"[a-z]+|[\u4e00-\u9fff]+", value.casefold())
            for word in words:
                for stem in (word, word[:-1] if word.endswith("s") else word):
                    if stem in _CATEGORY_SYNONYMS:
                        return _CATEGORY_SYNONYMS[stem]
        return cls.CONTEXT


_CATEGORY_SYNONYMS: dict[str, Category] = {
    **dict.fromkeys(("like", "dislike", "taste", "style", "preferred", "favorite", "favourite", "choice",
                     "tool", "setting", "format", "偏好", "喜好", "风格"), Category.PREFERENCE),
    **dict.fromkeys(("skill", "expertise", "technology", "tech", "stack", "domain", "language", "experience",
                     "know", "learning", "技能", "知识", "技术"), Category.KNOWLEDGE),
    **dict.fromkeys(("habit", "pattern", "workflow", "routine", "communication", "practice", "process",
                     "习惯", "行为"), Category.BEHAVIOR),
    **dict.fromkeys(("plan", "objective", "aim", "target", "deadline", "milestone", "intention", "todo",
                     "目标", "计划"), Category.GOAL),
    **dict.fromkeys(("feedback", "mistake", "fix", "avoid", "纠正", "更正"), Category.CORRECTION),
}


_CATEGORY_TYPES = {
    Category.PREFERENCE: MemoryType.USER,
    Category.KNOWLEDGE: MemoryType.USER,
    Category.BEHAVIOR: MemoryType.USER,
    Category.CONTEXT: MemoryType.PROJECT,
    Category.GOAL: MemoryType.PROJECT,
    Category.CORRECTION: MemoryType.FEEDBACK,
}


class ProfileKey(StrEnum):
    """The six profile sections, in injection order (DeerFlow's user + history groups)."""

    WORK = "workContext"
    PERSONAL = "personalContext"
    TOP_OF_MIND = "topOfMind"
    RECENT = "recentMonths"
    EARLIER = "earlierContext"
    BACKGROUND = "longTermBackground"

    @property
    def title(self) -> str:
        return _SECTION_TITLES[self]

    @property
    def group(self) -> str:
        """``user`` or ``history`` — the group of the JSON answer the section sits in."""
        return "user" if self in (ProfileKey.WORK, ProfileKey.PERSONAL, ProfileKey.TOP_OF_MIND) else "history"


_SECTION_TITLES = {
    ProfileKey.WORK: "Work context",
    ProfileKey.PERSONAL: "Personal context",
    ProfileKey.TOP_OF_MIND: "Top of mind",
    ProfileKey.RECENT: "Recent months",
    ProfileKey.EARLIER: "Earlier context",
    ProfileKey.BACKGROUND: "Long-term background",
}


@dataclass(slots=True)
class Profile:
    """The user profile: one short summary per section (missing = empty)."""

    sections: dict[ProfileKey, str] = field(default_factory=dict)

    def get(self, key: ProfileKey) -> str:
        return self.sections.get(key, "")

    def items(self) -> list[tuple[ProfileKey, str]]:
        """Non-empty sections in injection order."""
        return [(k, self.sections[k]) for k in ProfileKey if self.sections.get(k, "").strip()]

    def is_empty(self) -> bool:
        return not self.items()

    def to_json(self) -> dict[str, str]:
        return {k.value: v for k, v in self.items()}

    @classmethod
    def from_json(cls, data: object) -> Profile:
        sections: dict[ProfileKey, str] = {}
        if isinstance(data, dict):
            for key in ProfileKey:
                value = data.get(key.value)
                if isinstance(value, str) and value.strip():
                    sections[key] = value.strip()
        return cls(sections)


@dataclass(slots=True)
class Fact:
    """One remembered fact. ``id`` is the memory file name without ``.md``."""

    id: str
    content: str
    category: Category
    confidence: float
    source: str = "auto"
    source_error: str | None = None
    created: str = ""
    updated: str = ""
    #: The manifest entry's ``updated_at`` when read: tells whether someone edited it since.
    stamp: float = 0.0
    #: When the user last said or confirmed it (ISO time; '' = only when created).
    confirmed: str = ""
    #: How often the user said or confirmed it (1 = once).
    confirmations: int = 1
    #: The last day it is true (ISO date) for time-bound facts ("trip next week"); '' = no expiry.
    expires: str = ""

    @property
    def file(self) -> str:
        return self.id + ".md"

    @property
    def is_manual(self) -> bool:
        """Added or edited by a person (API, tools): never trimmed away by the auto updater."""
        return self.source in ("manual", "import")

    @property
    def norm(self) -> str:
        return normalize_text(self.content)


@dataclass(frozen=True, slots=True)
class CapturedMessage:
    """A user input or final assistant reply kept from a run. ``key`` identifies it for the
    per-session watermark (stable across a re-delivery of the same run)."""

    role: str  # "user" | "assistant"
    text: str
    key: str
    created_at: float = 0.0
    #: Estimated tokens of a user message (the CJK-aware character estimate, cheap enough for the
    #: hook); 0 for assistant replies, which no queue rule looks at.
    tokens: int = 0

    @staticmethod
    def make_key(run_id: str | None, role: str, text: str, index: int) -> str:
        raw = f"{run_id or ''}\x00{index}\x00{role}\x00{text}"
        return hashlib.sha1(raw.encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True, slots=True)
class Signals:
    """What the signal patterns found in the user's words (``signals.py``). OR-ed when queue
    items merge."""

    names: frozenset[str] = frozenset()
    #: (signal, excerpt of the user message that carried it), for the prompt.
    excerpts: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of(cls, *names: str, excerpts: tuple[tuple[str, str], ...] = ()) -> Signals:
        return cls(frozenset(names), excerpts)

    def has(self, name: str) -> bool:
        return name in self.names

    @property
    def correction(self) -> bool:
        return "correction" in self.names

    @property
    def reinforcement(self) -> bool:
        return "reinforcement" in self.names

    def excerpts_of(self, name: str) -> tuple[str, ...]:
        return tuple(e for n, e in self.excerpts if n == name)

    @property
    def correction_hints(self) -> tuple[str, ...]:
        return self.excerpts_of("correction")

    def bounded(self) -> Signals:
        """At most ``MAX_EXCERPTS`` excerpts per signal (the newest)."""
        kept: list[tuple[str, str]] = []
        for name in sorted({n for n, _ in self.excerpts}):
            kept += [(name, e) for e in list(dict.fromkeys(self.excerpts_of(name)))[-MAX_EXCERPTS:]]
        return Signals(self.names, tuple(kept))

    def merge(self, other: Signals) -> Signals:
        return Signals(self.names | other.names, self.excerpts + other.excerpts).bounded()


MAX_EXCERPTS = 3


@dataclass(frozen=True, slots=True)
class QueueKey:
    user_id: str
    agent_type: str
    session_id: str

    @property
    def watermark_id(self) -> str:
        return f"{self.agent_type}/{self.session_id}"


@dataclass(slots=True)
class Batch:
    """The pending conversation of one (user, agent type, session), merged across runs."""

    key: QueueKey
    messages: list[CapturedMessage]
    signals: Signals
    first_at: float
    last_at: float
    attempts: int = 0
    not_before: float = 0.0
    #: Estimated tokens of the user messages (a batch that grows too big is extracted at once).
    user_tokens: int = 0
    #: Session memory summarises this session too: the extraction waits to ride along with a
    #: summary (one model call for both; ``queue.py``).
    carried: bool = False

    def __post_init__(self) -> None:
        self.user_tokens = sum(m.tokens for m in self.messages if m.role == "user")

    def extend(self, messages: list[CapturedMessage], signals: Signals, now: float) -> None:
        """Merge a newer capture: messages appended (duplicates by key dropped), flags OR-ed."""
        seen = {m.key for m in self.messages}
        fresh = [m for m in messages if m.key not in seen]
        self.messages.extend(fresh)
        self.user_tokens += sum(m.tokens for m in fresh if m.role == "user")
        self.signals = self.signals.merge(signals)
        self.last_at = max(self.last_at, now)



_SECTION_HEADING = re.compile(r"^##(?=\s)", re.MULTILINE)


def clean_section(text: str) -> str:
    """A profile section's text, safe inside ``profile.md``: a ``## `` line in it would read back
    as the start of another section, so it is demoted to ``### ``."""
    return _SECTION_HEADING.sub("###", text.strip())


def one_line(text: str, limit: int) -> str:
    """Collapse whitespace; cut at ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"
