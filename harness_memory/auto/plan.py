"""The shapes between the model's answer and the apply rules: a validated plan, the rules, the
context the apply step checks against, and the report of what happened (and what was refused).

Why a report that counts refusals: the apply step overrules the model often and on purpose
(placeholders, assistant-only facts, corrections without a correction in the user's words,
removals without a reason); each refusal is logged with its reason and counted — per update in
``ApplyReport.rejected`` and per process in ``AutoMemory.rejections`` — so an operator, a test or
the quality harness can see how much the model was doubted and why.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
from collections import Counter
from dataclasses import dataclass, field

from .doubt import Conversation, Placeholders
from .model import Category, ProfileKey, Signals
from .signals import SignalPatterns, default_patterns

log = logging.getLogger(__name__)

CORRECTION_MIN_CONFIDENCE = 0.95
#: Most stored facts one merge may fold together; a merge naming more is refused whole.
MAX_MERGE_SOURCES = 8

_UPLOAD_MENTION = re.compile(
    r"/mnt/(?:user-data|data)\b\S*|(?<![\w/])/tmp/\S+|/workspace/\S+|\bsandbox:/\S+"
    r"|\b(?:the|this|that|an?|your|my|his|her|their)\s+(?:newly\s+)?uploaded\b"
    r"|\b(?:user|users|i|you|they|he|she|we)\s+(?:just\s+|had\s+|has\s+|have\s+)?uploaded\b"
    r"|\bupload(?:ed|ing|s)?\s+(?:[\w'-]+\s+){0,3}?(?:files?|documents?|pdfs?|images?|pictures?|photos?"
    r"|spreadsheets?|csvs?|screenshots?|attachments?)\b"
    r"|\b(?:attached|provided)\s+(?:files?|documents?|pdfs?|images?|spreadsheets?)\b|\battachments?\b"
    r"|<(?:uploaded_files|current_uploads)>"
    r"|上传的|上传了|已上传|所上传|上传(?:一个|一份|几个|多个)?(?:文件|文档|图片|表格|附件|截图|PDF|pdf)|附件",
    re.IGNORECASE,
)
_SENTENCE = re.compile(r"[^。！？!?\n]*?(?:[。！？!?]+[”\"』」)]*|\.(?=\s|$)|\n|$)", re.DOTALL)


def scrub_uploads(text: str) -> str:
    """``text`` without the sentences that mention uploads or session-scoped paths.

    Sentences end at ``.`` followed by a space or the end (so ``a.pdf`` does not split), at
    ``!``/``?``, at the Chinese ``。！？`` and at line breaks.
    """
    if not _UPLOAD_MENTION.search(text):
        return text.strip()
    kept = [s for s in _SENTENCE.findall(text) if s.strip() and not _UPLOAD_MENTION.search(s)]
    return "".join(kept).strip()


@dataclass(frozen=True, slots=True)
class NewFact:
    """A fact proposed by the model, validated in shape (not yet by the rules)."""

    content: str
    category: Category
    confidence: float | None
    source_error: str | None = None
    #: The user's words the model says the fact comes from.
    evidence: str | None = None
    #: The model's scope label ("user", or "task"/"session"/… = keep it out of user memory).
    scope: str | None = None
    #: The last day it holds (as the model gave it) and/or a lifetime in days.
    expires: str | None = None
    valid_days: float | None = None
    #: Ids of current facts this one restates or combines (they are merged into it).
    merges: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Removal:
    """A proposed removal: the fact, why, and the new fact (index in ``new_facts``) replacing it."""

    id: str
    reason: str = ""
    replaced_by: int | None = None


@dataclass(slots=True)
class UpdatePlan:
    """A validated model answer."""

    profile: dict[ProfileKey, str] = field(default_factory=dict)
    new_facts: list[NewFact] = field(default_factory=list)
    removals: list[Removal] = field(default_factory=list)
    reinforce_ids: list[str] = field(default_factory=list)
    #: Items the validator dropped (missing content, non-numeric confidence, ...), for logs and tests.
    invalid_items: int = 0
    #: Of those, items of ``newFacts`` (an update whose additions are broken applies no removal).
    invalid_facts: int = 0

    @property
    def remove_ids(self) -> list[str]:
        return [r.id for r in self.removals]


@dataclass(frozen=True, slots=True)
class ApplyRules:
    threshold: float = 0.7
    max_facts: int = 100
    #: Most removals one update may make (more are refused, replaced ones first kept).
    max_removals: int = 3


@dataclass(frozen=True)
class ApplyContext:
    """What the apply step checks a plan against: the signals and words of the conversation the
    model saw, today's date and the patterns in force. ``ApplyContext()`` = no conversation
    (evidence is not checked) and no signals (no correction, no removal without replacement)."""

    signals: Signals = field(default_factory=Signals)
    conversation: Conversation = field(default_factory=Conversation)
    today: dt.date = field(default_factory=dt.date.today)
    patterns: SignalPatterns = field(default_factory=default_patterns)
    placeholders: Placeholders | None = None
    #: Where new facts come from (their ``source``: ``auto:<session>``).
    source: str = "auto"


@dataclass(frozen=True, slots=True)
class MergeRefusal:
    """A merge the apply step refused whole: the merged text, the ids it named and why."""

    content: str
    ids: tuple[str, ...]
    reason: str


@dataclass(slots=True)
class ApplyReport:
    added: list[str] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    confirmed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    expired: list[str] = field(default_factory=list)
    trimmed: list[str] = field(default_factory=list)
    profile_updated: list[ProfileKey] = field(default_factory=list)
    unknown_removals: list[str] = field(default_factory=list)
    kept_edited: list[str] = field(default_factory=list)
    #: New facts that named stored facts to merge (``merged`` holds those applied).
    merges_proposed: int = 0
    #: Merges refused whole (every source kept as it was, the merged text not stored).
    merges_refused: list[MergeRefusal] = field(default_factory=list)
    #: Changes the rules refused, by reason (see ``reject``).
    rejected: Counter[str] = field(default_factory=Counter)
    #: Where the update came from, for the log lines of ``reject``.
    where: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.added or self.refreshed or self.merged or self.confirmed or self.removed or self.expired
                    or self.trimmed or self.profile_updated)

    @property
    def dropped_low_confidence(self) -> int:
        return self.rejected["low_confidence"]

    @property
    def dropped_scrubbed(self) -> int:
        return self.rejected["upload"]

    def reject(self, reason: str, what: str) -> None:
        """Count and log one refused change (``what``: the text or id concerned)."""
        self.rejected[reason] += 1
        log.info("auto memory%s: refused %s (%s)", f" {self.where}" if self.where else "", _short(what), reason)


def _short(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return repr(flat if len(flat) <= limit else flat[: limit - 1] + "…")
