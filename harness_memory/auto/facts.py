"""The fact and profile API of auto memory (what the HTTP API and the CLI call).

Why its own module: these are a person's operations — add "business trip next week", correct or
delete a wrong preference, rewrite the profile, clear every fact but keep the profile — with
their own rules (a person's value is kept as given: no threshold, no raising of corrections, never
evicted), apart from the background machinery of ``service.py``. ``AutoMemory`` inherits them.
"""

from __future__ import annotations

import datetime as dt
import logging

from ..errors import HarnessMemoryError
from .apply import evict, prepare_fact, review_expired, upsert_fact
from .history import UpdateRecord
from .lifecycle import expiry_for
from .model import (
    MAX_FACT_CHARS,
    MAX_MANUAL_SECTION_CHARS,
    MAX_SOURCE_ERROR_CHARS,
    Category,
    Fact,
    Profile,
    ProfileKey,
    clean_section,
)
from .plan import ApplyReport, NewFact
from .store import AutoPlace

log = logging.getLogger(__name__)


class FactNotFound(HarnessMemoryError, LookupError):
    """No fact with that id in the place."""


class FactAPI:
    """Operations on one user's (or the shared) auto place. Subclasses provide ``_place``,
    ``_drop_queued``, ``max_facts`` and ``_today``."""

    max_facts: int = 100

    def _place(self, user_id: str | None, shared: bool) -> AutoPlace:
        raise NotImplementedError

    def _drop_queued(self, user_id: str) -> int:
        raise NotImplementedError

    def _today(self) -> dt.date:
        return dt.date.today()

    def list_facts(self, user_id: str | None, *, shared: bool = False) -> list[Fact]:
        """Facts of the user's (or the shared) auto place, most confident first."""
        view = self._place(user_id, shared).read()
        return sorted(view.facts.values(), key=lambda f: (-f.confidence, f.id))

    def history(self, user_id: str | None, *, shared: bool = False) -> list[UpdateRecord]:
        """The place's last automatic updates, oldest first: what each changed and what the rules
        refused (merges refused whole with their ids and reason)."""
        return list(self._place(user_id, shared).read_watermarks().history)

    def get_profile(self, user_id: str | None, *, shared: bool = False) -> Profile:
        return self._place(user_id, shared).read().profile

    def set_profile(self, user_id: str | None, profile: Profile, *, shared: bool = False) -> Profile:
        """Replace the profile (a person's edit: the next model update builds on it).
        Raises ValueError for a section longer than ``MAX_MANUAL_SECTION_CHARS``."""
        sections = {ProfileKey(k): clean_section(v) for k, v in profile.sections.items()
                    if isinstance(v, str) and v.strip()}
        for key, text in sections.items():
            if len(text) > MAX_MANUAL_SECTION_CHARS:
                raise ValueError(f"profile section {key.value} is longer than {MAX_MANUAL_SECTION_CHARS} characters")
        with self._place(user_id, shared).transaction() as txn:
            txn.set_profile(Profile(sections))
        return txn.view.profile

    def add_fact(self, user_id: str | None, content: str, category: str | Category = Category.CONTEXT,
                 confidence: float = 1.0, *, source_error: str | None = None, expires: str | None = None,
                 shared: bool = False) -> Fact:
        """Add a fact by hand ("business trip next week"). A near-duplicate is refreshed instead.
        ``expires``: its last day (ISO date); without one, time words ("next week") set it.
        Raises ValueError for empty/too long content, unknown category, confidence outside [0, 1]
        or a malformed date."""
        fact = checked_fact(content, category, confidence, source_error, expires, self._today())
        with self._place(user_id, shared).transaction() as txn:
            stored = upsert_fact(txn, fact, "manual", ApplyReport(), confirmed=True)
            stored.source = "manual"
            stored.expires = fact.expires or stored.expires
            txn.put_fact(stored)
            evict(txn, self.max_facts)
        return stored

    def update_fact(self, user_id: str | None, fact_id: str, *, content: str | None = None,
                    category: str | Category | None = None, confidence: float | None = None,
                    source_error: str | None = None, expires: str | None = None, shared: bool = False) -> Fact:
        """Edit a fact (only the given fields); it becomes a manual fact. Raises FactNotFound."""
        with self._place(user_id, shared).transaction() as txn:
            fact = txn.view.facts.get(fact_id)
            if fact is None:
                raise FactNotFound(f"no fact {fact_id!r}")
            new_category = category if category is not None else fact.category
            if source_error is None and Category.parse(new_category) is not Category.CORRECTION:
                source_error = ""  # no longer a correction: the wrong belief it named goes with it
            checked = checked_fact(content if content is not None else fact.content, new_category,
                                   confidence if confidence is not None else fact.confidence,
                                   source_error if source_error is not None else fact.source_error,
                                   expires if expires is not None else (fact.expires or None), None)
            fact.content, fact.category = checked.content, checked.category
            fact.confidence = checked.confidence if checked.confidence is not None else fact.confidence
            fact.source_error, fact.source = checked.source_error, "manual"
            fact.expires = checked.expires or ""
            txn.put_fact(fact)
        return fact

    def correct_fact(self, user_id: str | None, fact_id: str, content: str, *, shared: bool = False) -> Fact:
        """"This is wrong": the fact becomes a correction saying ``content``; what it said is kept as
        its source error, which the assistant is shown as "avoid". Raises FactNotFound, ValueError."""
        with self._place(user_id, shared).transaction() as txn:
            fact = txn.view.facts.get(fact_id)
            if fact is None:
                raise FactNotFound(f"no fact {fact_id!r}")
            wrong = fact.content if fact.category is not Category.CORRECTION or not fact.source_error \
                else fact.source_error
            checked = checked_fact(content, Category.CORRECTION, 1.0, wrong[:MAX_SOURCE_ERROR_CHARS], None, None)
            if checked.content.casefold() == " ".join(wrong.split()).casefold():
                raise ValueError("the correction says the same as the wrong belief; write what is true instead")
            fact.content, fact.category, fact.confidence = checked.content, Category.CORRECTION, 1.0
            fact.source_error, fact.source = checked.source_error, "manual"
            txn.put_fact(fact)
        return fact

    def delete_fact(self, user_id: str | None, fact_id: str, *, shared: bool = False) -> bool:
        """Remove a fact, keeping it in the place's trash (restorable); False when there is none."""
        with self._place(user_id, shared).transaction(trash="person") as txn:
            return txn.delete_fact(fact_id)

    def clear_facts(self, user_id: str | None, *, shared: bool = False) -> int:
        """Delete every fact of the place but keep the profile (one transaction); the user's
        queued updates are dropped too, so a conversation waiting for its debounce does not refill
        the list a moment later. The facts go to the place's trash (one item). Returns how many were deleted."""
        if not shared and user_id:
            self._drop_queued(user_id)
        with self._place(user_id, shared).transaction(trash="person") as txn:  # one trash item: one restore
            gone = [fid for fid in list(txn.view.facts) if txn.delete_fact(fid)]
        log.info("auto memory: cleared %d fact(s) of %s (profile kept)", len(gone), "shared" if shared else user_id)
        return len(gone)

    def review(self, user_id: str | None, *, shared: bool = False) -> list[str]:
        """The staleness review without a model: drop the facts past their last day and evict
        beyond capacity. Returns the ids removed. (Every extraction runs it too.)"""
        place = self._place(user_id, shared)
        if not any(f.expires for f in place.read().facts.values()):
            return []
        with place.transaction(trash="auto") as txn:  # expired or evicted: restorable from the trash
            report = ApplyReport()
            gone = review_expired(txn, self._today(), report) + evict(txn, self.max_facts)
        return gone


def checked_fact(content: object, category: object, confidence: object, source_error: object, expires: object,
                 today: dt.date | None) -> NewFact:
    """A person's fact, validated (ValueError says what is wrong). ``today`` None: ``expires``
    is kept as given (an edit), else it is derived from time words when absent."""
    if not isinstance(content, str) or not " ".join(content.split()):
        raise ValueError("content must be non-empty text")
    if len(" ".join(content.split())) > MAX_FACT_CHARS:
        raise ValueError(f"content is longer than {MAX_FACT_CHARS} characters; keep a fact to one short sentence")
    cat = category if isinstance(category, Category) else Category.parse(category)
    if cat is None:
        raise ValueError(f"category {category!r} is not one of: {', '.join(c.value for c in Category)}")
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0.0 <= confidence <= 1.0:
        raise ValueError("confidence must be a number between 0 and 1")
    if source_error is not None and (not isinstance(source_error, str) or len(source_error) > MAX_SOURCE_ERROR_CHARS):
        raise ValueError(f"source_error must be text of at most {MAX_SOURCE_ERROR_CHARS} characters")
    if source_error and cat is not Category.CORRECTION:  # would be dropped: say so instead
        raise ValueError(f"source_error (the wrong belief) belongs to a correction; send category 'correction' "
                         f"with it, or leave source_error out for a {cat.value} fact")
    if expires is not None:
        try:
            expires = dt.date.fromisoformat(str(expires)[:10]).isoformat()
        except ValueError:
            raise ValueError("expires must be a date (YYYY-MM-DD)") from None
    checked = prepare_fact(NewFact(content, cat, float(confidence), source_error or None), 0.0, None,  # type: ignore[arg-type]
                           boost_corrections=False)
    if checked is None:
        raise ValueError("content is empty once upload mentions and session paths are removed")
    if expires is None and today is not None:
        expires = expiry_for(None, None, checked.content, today) or None
    return NewFact(checked.content, checked.category, checked.confidence, checked.source_error,
                   expires=expires)  # type: ignore[arg-type]
