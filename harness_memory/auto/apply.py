"""Apply: the rules that turn a validated model answer into changes of an auto-memory place.

Why the rules live apart from the model call: they are what keeps memory clean no matter what
the model says — confidence clamped to [0, 1]; facts below the threshold dropped (a passing
"maybe I'll learn Rust" must not become a trait); near-duplicates merged (case, spaces and
punctuation ignored; a restated fact is refreshed, not repeated); corrections kept with
confidence >= 0.95 and the mistake they correct; sentences that mention uploads or
session-scoped paths removed (those files are gone next session and would send the agent
looking for them); at most ``max_facts`` kept, lowest confidence trimmed first.

And why they run on the state re-read under the lock, against the snapshot the model saw: a
person may edit or add facts (tools, HTTP API) while the model is thinking. Their edit wins —
a fact changed since the snapshot is not removed, a profile section edited since is not
overwritten — and nothing is written from the stale snapshot.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

from .model import (
    MAX_FACT_CHARS,
    MAX_SECTION_CHARS,
    MAX_SOURCE_ERROR_CHARS,
    Category,
    Fact,
    ProfileKey,
    clean_section,
    one_line,
)
from .store import AutoTxn, AutoView, new_fact_id

log = logging.getLogger(__name__)

CORRECTION_MIN_CONFIDENCE = 0.95

_UPLOAD_MENTION = re.compile(
    r"/mnt/(?:user-data|data)\b\S*|(?<![\w/])/tmp/\S+|/workspace/\S+|\bsandbox:/\S+"
    r"|\b(?:the|this|that|an?|your|my|his|her|their)\s+(?:newly\s+)?uploaded\b"
    r"|\buploaded\s+(?:a|an|the|this|that|some|two|three|several|\d+)?\s*(?:new\s+)?"
    r"(?:files?|documents?|pdfs?|images?|pictures?|photos?|spreadsheets?|csvs?|screenshots?|attachments?)"
    r"|\b(?:attached|provided)\s+(?:files?|documents?|pdfs?|images?|spreadsheets?)\b|\battachments?\b"
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


@dataclass(slots=True)
class UpdatePlan:
    """A validated model answer."""

    profile: dict[ProfileKey, str] = field(default_factory=dict)
    new_facts: list[NewFact] = field(default_factory=list)
    remove_ids: list[str] = field(default_factory=list)
    #: Items the validator dropped (bad category, missing content, ...), for logs and tests.
    invalid_items: int = 0


@dataclass(slots=True)
class ApplyReport:
    added: list[str] = field(default_factory=list)
    refreshed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    trimmed: list[str] = field(default_factory=list)
    profile_updated: list[ProfileKey] = field(default_factory=list)
    dropped_low_confidence: int = 0
    dropped_scrubbed: int = 0
    unknown_removals: list[str] = field(default_factory=list)
    kept_edited: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.refreshed or self.removed or self.trimmed or self.profile_updated)


@dataclass(frozen=True, slots=True)
class ApplyRules:
    threshold: float = 0.7
    max_facts: int = 100


def clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def apply_plan(plan: UpdatePlan, txn: AutoTxn, snapshot: AutoView, rules: ApplyRules, *, source: str,
               correction_signal: bool = False) -> ApplyReport:
    """Apply ``plan`` to the state in ``txn`` (current, under the lock); ``snapshot`` is what
    the model saw."""
    report = ApplyReport()
    _apply_profile(plan, txn, snapshot, report)
    _apply_removals(plan, txn, snapshot, report)
    for proposed in plan.new_facts:
        fact = prepare_fact(proposed, rules.threshold, correction_signal, report)
        if fact is not None:
            upsert_fact(txn, fact, source, report)
    report.trimmed = trim_facts(txn, rules.max_facts)
    return report


def prepare_fact(proposed: NewFact, threshold: float, correction_signal: bool,
                 report: ApplyReport | None = None, *, boost_corrections: bool = True) -> NewFact | None:
    """Scrub, bound, clamp and threshold one proposed fact; None when it is dropped.
    ``boost_corrections`` raises a correction to 0.95 (off for a person's explicit value)."""
    content = one_line(scrub_uploads(proposed.content), MAX_FACT_CHARS)
    if not content:
        if report is not None:
            report.dropped_scrubbed += 1
        return None
    error = one_line(scrub_uploads(proposed.source_error or ""), MAX_SOURCE_ERROR_CHARS) or None
    confidence = None if proposed.confidence is None else clamp(proposed.confidence)
    if boost_corrections and proposed.category is Category.CORRECTION and (
            correction_signal or (confidence is not None and confidence >= threshold)):
        confidence = max(confidence or 0.0, CORRECTION_MIN_CONFIDENCE)
    if confidence is None or confidence < threshold:
        if report is not None:
            report.dropped_low_confidence += 1
        return None
    return NewFact(content, proposed.category, confidence, error if proposed.category is Category.CORRECTION
                   else None)


def upsert_fact(txn: AutoTxn, fact: NewFact, source: str, report: ApplyReport) -> Fact:
    """Add ``fact``, or refresh its near-duplicate (confidence = the higher one)."""
    norm = Fact("", fact.content, fact.category, 0.0).norm
    assert fact.confidence is not None
    for existing in txn.view.facts.values():
        if existing.norm != norm:
            continue
        before = (existing.confidence, existing.category, existing.source_error)
        existing.confidence = max(existing.confidence, fact.confidence)
        if fact.category is Category.CORRECTION and not existing.is_manual:
            existing.category = Category.CORRECTION
        if fact.source_error and not existing.source_error:
            existing.source_error = fact.source_error
        if (existing.confidence, existing.category, existing.source_error) != before:
            txn.put_fact(existing)
            report.refreshed.append(existing.id)
        return existing
    new = Fact(id=new_fact_id(txn.view.facts), content=fact.content, category=fact.category,
               confidence=fact.confidence, source=source, source_error=fact.source_error)
    txn.put_fact(new)
    report.added.append(new.id)
    return new


def trim_facts(txn: AutoTxn, max_facts: int) -> list[str]:
    """Delete the lowest-confidence (then oldest) automatic facts beyond ``max_facts``.
    Facts a person added or edited are never trimmed, so they may exceed the cap."""
    facts = list(txn.view.facts.values())
    excess = len(facts) - max_facts
    if excess <= 0:
        return []
    candidates = sorted((f for f in facts if not f.is_manual), key=lambda f: (f.confidence, f.updated))
    trimmed = [f.id for f in candidates[:excess]]
    for fid in trimmed:
        txn.delete_fact(fid)
    if trimmed:
        log.info("auto memory over %d facts: trimmed %d lowest-confidence ones", max_facts, len(trimmed))
    return trimmed


def _apply_profile(plan: UpdatePlan, txn: AutoTxn, snapshot: AutoView, report: ApplyReport) -> None:
    if not plan.profile:
        return
    current = txn.view.profile
    sections = dict(current.sections)
    for key, summary in plan.profile.items():
        text = clean_section(scrub_uploads(summary))
        text = text if len(text) <= MAX_SECTION_CHARS else text[: MAX_SECTION_CHARS - 1].rstrip() + "…"
        if not text:
            continue
        if current.get(key) != snapshot.profile.get(key):
            report.kept_edited.append(key.value)
            log.info("profile section %s was edited while the model was thinking; keeping the edit", key.value)
            continue
        if sections.get(key) != text:
            sections[key] = text
            report.profile_updated.append(key)
    if report.profile_updated:
        txn.set_profile(type(current)(sections))


def _apply_removals(plan: UpdatePlan, txn: AutoTxn, snapshot: AutoView, report: ApplyReport) -> None:
    for fid in plan.remove_ids:
        fact = txn.view.facts.get(fid)
        if fact is None:
            report.unknown_removals.append(fid)
            continue
        seen = snapshot.facts.get(fid)
        if seen is None or seen.stamp != fact.stamp:
            report.kept_edited.append(fid)
            log.info("fact %s changed while the model was thinking; not removing it", fid)
            continue
        txn.delete_fact(fid)
        report.removed.append(fid)
    if report.unknown_removals:
        log.info("ignored removal of unknown fact ids %s", report.unknown_removals[:5])
