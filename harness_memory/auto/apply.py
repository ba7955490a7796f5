"""Apply: the rules that turn a validated model answer into changes of an auto-memory place.

Why the rules live apart from the model call: they are what keeps memory clean no matter what
the model says. In order:

1. **Profile** sections: scrubbed of uploads, bounded, placeholders refused, an edit a person made
   while the model was thinking wins.
2. **Review**: facts past their ``expires`` day are dropped (the periodic staleness review rides
   on every update of the place; no model call).
3. **New facts**: upload sentences scrubbed, confidence clamped to [0, 1] and thresholded, then
   doubted (``doubt.py``) — placeholders, task-scoped facts and facts only the assistant said are
   refused; a ``correction`` needs a correction signal in the user's own words (then it is raised
   to 0.95). A fact restating a stored one (same words, or the same content words in the same
   order) refreshes it: higher confidence kept, confirmation counted when the user's words carry
   it. ``merges`` folds the named facts into the highest-confidence one of them: its id,
   ``source`` and creation time stay, the highest confidence is kept, confirmations add up. A
   merge is all or nothing (``_check_merges``): one naming an unknown id, an id another merge or
   a removal of the same answer already names, more than ``MAX_MERGE_SOURCES`` ids, a fact
   changed since the model saw it, or a protected fact (a correction — each says what to avoid —
   or a fact a person entered or edited) is refused whole: every source stays as it was and the
   merged text is not stored (it restates facts that are all still there). A text that does not
   hold its sources (``_merge_loses``) is no merge: the sources stay and the text is judged as the
   new fact it is.
4. **Reinforcement**: ``factsToReinforce`` counts only with a reinforcement signal.
5. **Removals** need a reason: the new fact that replaces the old one (``replacedBy``, which must
   have been stored under another id) or a "forget" signal in the user's words; facts a person
   added need the latter. An update with broken additions applies no removal at all (its
   replacement may be the broken item), and at most ``max_removals`` are made per update.
6. **Capacity**: beyond ``max_facts`` the lowest keep score goes (``lifecycle.to_evict``).

Every refusal is counted and logged (``ApplyReport.reject``). The rules run on the state re-read
under the lock, against the snapshot the model saw: a fact changed since the snapshot is not
removed or merged away, a profile section edited since is not overwritten.
"""

from __future__ import annotations

import datetime as dt
import logging

from .doubt import (
    Evidence,
    contradicts_user,
    mistake_text,
    reversed_correction,
    says_something,
    task_scope_label,
    terms,
)
from .lifecycle import expiry_for, is_expired, paraphrase_key, to_evict
from .model import MAX_FACT_CHARS, MAX_SECTION_CHARS, MAX_SOURCE_ERROR_CHARS, Category, Fact, clean_section, one_line
from .plan import (
    CORRECTION_MIN_CONFIDENCE,
    MAX_MERGE_SOURCES,
    ApplyContext,
    ApplyReport,
    ApplyRules,
    MergeRefusal,
    NewFact,
    UpdatePlan,
    scrub_uploads,
)
from .store import AutoTxn, AutoView, new_fact_id, now_iso

log = logging.getLogger(__name__)


def apply_plan(plan: UpdatePlan, txn: AutoTxn, snapshot: AutoView, rules: ApplyRules, ctx: ApplyContext,
               report: ApplyReport | None = None) -> ApplyReport:
    """Apply ``plan`` to the state in ``txn`` (current, under the lock); ``snapshot`` is what
    the model saw."""
    report = report or ApplyReport()
    _apply_profile(plan, txn, snapshot, ctx, report)
    review_expired(txn, ctx.today, report)
    stored: dict[int, str] = {}  # index in new_facts -> id of the fact it became
    merges = _check_merges(plan, txn, snapshot, report)
    for index, proposed in enumerate(plan.new_facts):
        merging = merges.get(index, [])
        if merging is None:
            continue  # the merge was refused whole
        fact = prepare_fact(proposed, rules.threshold, ctx, report)
        if fact is None:
            if merging:  # the merged text itself was refused (its reason counted): the sources stay
                report.merges_refused.append(MergeRefusal(proposed.content, tuple(f.id for f in merging),
                                                          "merge_text_refused"))
            continue
        confirmed = ctx.conversation.evidence(fact.content, proposed.evidence) is Evidence.USER
        kept = merge_facts(txn, fact, merging, ctx, report) if merging else upsert_fact(
            txn, fact, ctx.source, report, confirmed=confirmed, today=ctx.today)
        stored[index] = kept.id
    _apply_reinforcements(plan, txn, snapshot, ctx, report)
    _apply_removals(plan, txn, snapshot, rules, ctx, stored, report)
    report.trimmed = evict(txn, rules.max_facts)
    return report


def prepare_fact(proposed: NewFact, threshold: float, ctx: ApplyContext | None, report: ApplyReport | None = None,
                 *, boost_corrections: bool = True, restates_correction: bool = False) -> NewFact | None:
    """Scrub, bound, clamp, threshold and doubt one proposed fact; None when it is refused.
    ``ctx`` None: a person's own value (no doubt, no raising of corrections, no threshold but
    ``threshold``)."""
    report = report if report is not None else ApplyReport()
    content = one_line(scrub_uploads(proposed.content), MAX_FACT_CHARS)
    if not content:
        report.reject("upload", proposed.content)
        return None
    error = one_line(scrub_uploads(proposed.source_error or ""), MAX_SOURCE_ERROR_CHARS) or None
    confidence = None if proposed.confidence is None else min(1.0, max(0.0, proposed.confidence))
    is_correction = proposed.category is Category.CORRECTION
    category = proposed.category
    if ctx is not None:
        placeholders = ctx.placeholders
        if placeholders is not None and placeholders.copied(content, ctx.conversation):
            report.reject("placeholder", content)
            return None
        if not says_something(content):
            report.reject("no_content", content)  # "Remember that": an instruction, not a fact
            return None
        if error and placeholders is not None and placeholders.copied(error, ctx.conversation):
            report.reject("placeholder_source_error", error)
            error = None
        if task_scope_label(proposed.scope) or ctx.patterns.task_scoped(content):
            report.reject("task_scope", content)
            return None
        if ctx.conversation.evidence(content, proposed.evidence) is Evidence.ASSISTANT_ONLY:
            report.reject("assistant_only", content)
            return None
        if is_correction and not ctx.signals.correction and not restates_correction:
            report.reject("correction_without_signal", content)
            return None
        if is_correction and reversed_correction(content, ctx.conversation.user):
            report.reject("correction_reversed", content)
            return None
        if contradicts_user(content, ctx.conversation.user):  # any category: "Uses pandas" after "don't use pandas"
            report.reject("contradicts_user", content)
            return None
        if is_correction:
            error = mistake_text(content, error)
            if error is None or not says_something(error):
                # a correction needs the wrong belief as well as the right one; without it the
                # fact is kept as what it is, a preference, and is not raised to 0.95
                report.reject("correction_without_mistake", content)
                is_correction, category, error = False, Category.PREFERENCE, None
        if is_correction and boost_corrections and ctx.signals.correction:
            confidence = max(confidence or 0.0, CORRECTION_MIN_CONFIDENCE)
    if confidence is None or confidence < threshold:
        report.reject("low_confidence", content)
        return None
    if ctx is not None:
        expires = expiry_for(proposed.expires, proposed.valid_days, content, ctx.today)
    else:
        expires = proposed.expires or ""
    return NewFact(content, category, confidence, error if is_correction else None,
                   proposed.evidence, proposed.scope, expires or None, None, proposed.merges)


def upsert_fact(txn: AutoTxn, fact: NewFact, source: str, report: ApplyReport, *, confirmed: bool = False,
                today: dt.date | None = None) -> Fact:
    """Add ``fact``, or refresh the stored fact it restates (same words, or the same content
    words in the same order): the higher confidence is kept, a correction stays one, and when
    the user's words carry it the confirmation is counted."""
    assert fact.confidence is not None
    existing = _restated(txn.view, fact.content)
    if existing is not None:
        before = (existing.confidence, existing.category, existing.source_error, existing.confirmations,
                  existing.expires)
        existing.confidence = max(existing.confidence, fact.confidence)
        if fact.category is Category.CORRECTION and not existing.is_manual:
            existing.category = Category.CORRECTION
        if fact.source_error and not existing.source_error:
            existing.source_error = fact.source_error
        if fact.expires and existing.expires and fact.expires > existing.expires:
            existing.expires = fact.expires  # said again with a later date: holds longer
        if confirmed:
            existing.confirmations += 1
            existing.confirmed = now_iso()
        after = (existing.confidence, existing.category, existing.source_error, existing.confirmations,
                 existing.expires)
        if after != before:
            txn.put_fact(existing)
            report.refreshed.append(existing.id)
        return existing
    new = Fact(id=new_fact_id(txn.view.facts), content=fact.content, category=fact.category,
               confidence=fact.confidence, source=source, source_error=fact.source_error,
               confirmed=now_iso(), expires=fact.expires or "")
    txn.put_fact(new)
    report.added.append(new.id)
    return new


def _restated(view: AutoView, content: str) -> Fact | None:
    norm = Fact("", content, Category.CONTEXT, 0.0).norm
    key = paraphrase_key(content)
    for existing in view.facts.values():
        if existing.norm == norm:
            return existing
    if key:
        for existing in view.facts.values():
            if paraphrase_key(existing.content) == key:
                return existing
    return None


def _check_merges(plan: UpdatePlan, txn: AutoTxn, snapshot: AutoView,
                  report: ApplyReport) -> dict[int, list[Fact] | None]:
    """The stored facts each merging new fact folds in (by its index in ``new_facts``), or None
    for a merge refused whole (see the module doc). Checked for the whole answer before anything
    is applied: a later merge or a removal can then never find a source already consumed."""
    removed = set(plan.remove_ids)
    claimed: set[str] = set()
    out: dict[int, list[Fact] | None] = {}
    for index, proposed in enumerate(plan.new_facts):
        if not proposed.merges:
            continue
        report.merges_proposed += 1
        ids = tuple(dict.fromkeys(proposed.merges))
        reason = _merge_refusal(ids, txn, snapshot, removed, claimed) or _merge_loses(proposed.content, ids, txn)
        if reason is None:
            claimed.update(ids)
            out[index] = [txn.view.facts[fid] for fid in ids]
            continue
        if reason == "merge_loses_source":
            # The text holds not its sources but something else: no merge, the sources stay, and the
            # text is judged as the new fact it is (the 1.5B model put "merges" on the user's
            # "Always want Polars for dataframes", naming a seed fact; refused whole, the user's fact
            # was lost with it).
            out[index] = []
        else:
            claimed.update(ids)
            out[index] = None
        report.merges_refused.append(MergeRefusal(proposed.content, ids, reason))
        report.reject(reason, f"{proposed.content} <- {', '.join(ids)}")
    return out


def _merge_refusal(ids: tuple[str, ...], txn: AutoTxn, snapshot: AutoView, removed: set[str],
                   claimed: set[str]) -> str | None:
    """Why a merge of ``ids`` is refused, or None when it may be applied."""
    if len(ids) > MAX_MERGE_SOURCES:
        return "merge_too_many"
    for fid in ids:
        fact, seen = txn.view.facts.get(fid), snapshot.facts.get(fid)
        if fact is None or seen is None:
            return "merge_unknown_id"
        if fid in claimed or fid in removed:
            return "merge_id_reused"
        if seen.stamp != fact.stamp:
            return "merge_edited_meanwhile"
        if fact.is_manual:
            return "merge_manual_fact"
        if fact.category is Category.CORRECTION:
            return "merge_correction"
    return None


def _merge_loses(content: str, ids: tuple[str, ...], txn: AutoTxn) -> str | None:
    """``"merge_loses_source"`` when the merged text does not hold a source: at least half of each
    source's content words (at least one) must be in it; else None.

    Why: a 1.5B model "merged" two unrelated facts ("Has a cat named Miso", "Plays chess on
    Sundays") into "Use pandas for the dataframe library" — the merge replaced the first source's
    text and removed the second, losing both (issue 30's run, bench/QUALITY.md). A merge folds
    facts that say the same thing; its text must still say what each of them said."""
    merged = terms(content)
    for fid in ids:
        fact = txn.view.facts.get(fid)
        if fact is None:
            continue
        wanted = terms(fact.content)
        if wanted and len(wanted & merged) < max(1, (len(wanted) + 1) // 2):
            return "merge_loses_source"
    return None


def merge_facts(txn: AutoTxn, fact: NewFact, sources: list[Fact], ctx: ApplyContext, report: ApplyReport) -> Fact:
    """Fold ``sources`` and the new wording into the most confident source (see the module doc)."""
    assert fact.confidence is not None
    keep = max(sources, key=lambda f: (f.confidence, f.confirmations, f.id))
    keep.content = fact.content
    keep.confidence = max([fact.confidence, *(f.confidence for f in sources)])
    if fact.category is Category.CORRECTION or any(f.category is Category.CORRECTION for f in sources):
        keep.category = Category.CORRECTION
        keep.source_error = keep.source_error or fact.source_error or next(
            (f.source_error for f in sources if f.source_error), None)
    else:
        keep.category = fact.category
        keep.source_error = None
    keep.confirmations = sum(f.confirmations for f in sources) + 1
    keep.confirmed = now_iso()
    expiries = [e for e in (fact.expires, *(f.expires for f in sources)) if e]
    keep.expires = fact.expires or (min(expiries) if expiries and all(f.expires for f in sources) else "")
    keep.created = min((f.created for f in sources if f.created), default=keep.created)
    txn.put_fact(keep)
    for other in sources:
        if other.id != keep.id:
            txn.delete_fact(other.id)
    report.merged.append(keep.id)
    return keep


def review_expired(txn: AutoTxn, today: dt.date, report: ApplyReport) -> list[str]:
    """Drop the facts past their last day (manual ones too: their expiry was stated)."""
    gone = [f.id for f in txn.view.facts.values() if is_expired(f, today)]
    for fid in gone:
        txn.delete_fact(fid)
    report.expired += gone
    if gone:
        log.info("auto memory: %d expired fact(s) dropped", len(gone))
    return gone


def evict(txn: AutoTxn, max_facts: int) -> list[str]:
    """Delete the automatic facts with the lowest keep score beyond ``max_facts``."""
    gone = to_evict(txn.view.facts.values(), max_facts, dt.datetime.now(dt.UTC))
    for fid in gone:
        txn.delete_fact(fid)
    if gone:
        log.info("auto memory over %d facts: evicted %d", max_facts, len(gone))
    return gone


def trim_facts(txn: AutoTxn, max_facts: int) -> list[str]:
    """Alias of ``evict`` (the fact API's name)."""
    return evict(txn, max_facts)


def _apply_profile(plan: UpdatePlan, txn: AutoTxn, snapshot: AutoView, ctx: ApplyContext,
                   report: ApplyReport) -> None:
    if not plan.profile:
        return
    current = txn.view.profile
    sections = dict(current.sections)
    updated = []
    for key, summary in plan.profile.items():
        text = clean_section(scrub_uploads(summary))
        text = text if len(text) <= MAX_SECTION_CHARS else text[: MAX_SECTION_CHARS - 1].rstrip() + "…"
        if not text:
            continue
        if ctx.placeholders is not None and ctx.placeholders.copied(text, ctx.conversation):
            report.reject("placeholder", text)
            continue
        if current.get(key) != snapshot.profile.get(key):
            report.kept_edited.append(key.value)
            log.info("profile section %s was edited while the model was thinking; keeping the edit", key.value)
            continue
        if sections.get(key) != text:
            sections[key] = text
            updated.append(key)
    if updated:
        report.profile_updated += updated
        txn.set_profile(type(current)(sections))


def _apply_reinforcements(plan: UpdatePlan, txn: AutoTxn, snapshot: AutoView, ctx: ApplyContext,
                          report: ApplyReport) -> None:
    for fid in dict.fromkeys(plan.reinforce_ids):
        fact = txn.view.facts.get(fid)
        if not ctx.signals.reinforcement:
            report.reject("reinforce_without_signal", fid)
        elif fact is None or fid not in snapshot.facts:
            report.reject("reinforce_unknown_id", fid)
        elif fid not in report.refreshed and fid not in report.merged:
            fact.confirmations += 1
            fact.confirmed = now_iso()
            txn.put_fact(fact)
            report.confirmed.append(fid)


def _related(old: Fact, new: Fact, ctx: ApplyContext) -> bool:
    """Whether a new fact can contradict ``old``: they share a content word, or the user's words
    touch ``old`` ("I moved from Windows to macOS"); always True without a conversation."""
    return bool(terms(old.content) & terms(new.content)) or ctx.conversation.user_mentions(old.content)


def _apply_removals(plan: UpdatePlan, txn: AutoTxn, snapshot: AutoView, rules: ApplyRules, ctx: ApplyContext,
                    stored: dict[int, str], report: ApplyReport) -> None:
    if not plan.removals:
        return
    if plan.invalid_facts:
        for removal in plan.removals:
            report.reject("removal_with_invalid_additions", removal.id)
        return
    forget = ctx.signals.has("forget")
    allowed: list[tuple[bool, str]] = []  # (replaced, id)
    for removal in dict((r.id, r) for r in plan.removals).values():
        fact = txn.view.facts.get(removal.id)
        if fact is None:
            report.unknown_removals.append(removal.id)
            continue
        seen = snapshot.facts.get(removal.id)
        if seen is None or seen.stamp != fact.stamp:
            report.kept_edited.append(removal.id)
            log.info("fact %s changed while the model was thinking; not removing it", removal.id)
            continue
        replacement = stored.get(removal.replaced_by) if removal.replaced_by is not None else None
        replaced = replacement is not None and replacement != removal.id and replacement in txn.view.facts
        if fact.is_manual and not forget:
            report.reject("removal_of_manual_fact", removal.id)
        elif replaced and not forget and not _related(fact, txn.view.facts[replacement or ""], ctx):
            # "replacedBy" names a new fact about something else, and the user never spoke of
            # the old one: no contradiction (a 0.5B model "replaced" "Has a cat named Miso" by the
            # user's job). Kept; a stale fact costs less than a lost one.
            report.reject("removal_replacement_unrelated", removal.id)
        elif not (replaced or forget):
            reason = "removal_replacement_refused" if removal.replaced_by is not None else "removal_without_reason"
            report.reject(reason, removal.id)
        else:
            allowed.append((replaced, removal.id))
    allowed.sort(key=lambda item: not item[0])  # removals with a stored replacement first
    for i, (_, fid) in enumerate(allowed):
        if i >= rules.max_removals:
            report.reject("removal_cap", fid)
        elif txn.delete_fact(fid):
            report.removed.append(fid)
    if report.unknown_removals:
        log.info("ignored removal of unknown fact ids %s", report.unknown_removals[:5])
