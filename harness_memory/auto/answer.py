"""Reading the extractor's answer: find the update among whatever the model wrote, validate it.

Why so tolerant about where, and so strict about what: small models wrap the JSON in prose,
fences or reasoning, sometimes show an example object first (``Example: {"user": "alice"}``) —
so every JSON object in the answer is considered and the first one with the update's shape
wins. But an answer without such an object changes NOTHING (fail closed), and inside it each item
is validated on its own: a bad item is dropped and counted, the others apply. An invented
category is mapped to the nearest known one (``Category.coerce``) rather than losing the fact.
"""

from __future__ import annotations

import math
from typing import Any

from ..llm import extract_json
from .model import Category, ProfileKey
from .plan import NewFact, Removal, UpdatePlan

_ALIASES = {"new_facts": "newFacts", "facts": "newFacts", "facts_to_remove": "factsToRemove",
            "remove": "factsToRemove", "profile": "user", "facts_to_reinforce": "factsToReinforce",
            "reinforce": "factsToReinforce"}
_TOP = ("user", "history", "newFacts", "factsToRemove", "factsToReinforce")
_LISTS = ("newFacts", "factsToRemove", "factsToReinforce")
#: Ids of one ``merges`` list kept from the answer: far above the apply step's cap
#: (``plan.MAX_MERGE_SOURCES``), so a list over the cap is seen as one and refused whole there,
#: never quietly cut to the cap here (10 facts became 3 that way).
_MAX_PARSED_MERGES = 64


def _normalised(data: object) -> dict[str, Any] | None:
    if not isinstance(data, dict):
        return None
    return {_ALIASES.get(k, k) if isinstance(k, str) else k: v for k, v in data.items()}


def looks_like_update(data: object) -> bool:
    """The update's shape: at least one known top-level key, each known key of the right type
    (sections are objects, fact lists are lists). ``{"user": "alice"}`` is not an update."""
    norm = _normalised(data)
    if norm is None or not any(k in norm for k in _TOP):
        return False
    for key in ("user", "history"):
        if key in norm and norm[key] is not None and not isinstance(norm[key], dict):
            return False
    return all(norm.get(key) is None or isinstance(norm[key], list) for key in _LISTS)


def parse_answer(text: str) -> UpdatePlan | None:
    """The validated plan in a model answer, or None when it holds no update (change nothing)."""
    data = _normalised(extract_json(text, looks_like_update))
    if data is None:
        return None
    plan = UpdatePlan()
    sections: dict[str, Any] = {**(data.get("history") or {}), **(data.get("user") or {})}
    for key in ProfileKey:
        raw = sections.get(key.value)
        if raw is None:
            continue
        summary = _section(raw)
        if summary is None:
            plan.invalid_items += 1
        elif summary:
            plan.profile[key] = summary
    for item in data.get("newFacts") or []:
        fact = parse_fact(item)
        if fact is None:
            plan.invalid_items += 1
            plan.invalid_facts += 1
        else:
            plan.new_facts.append(fact)
    for item in data.get("factsToRemove") or []:
        removal = _removal(item)
        if removal is None:
            plan.invalid_items += 1
        else:
            plan.removals.append(removal)
    for item in data.get("factsToReinforce") or []:
        fid = _fact_id(item.get("id") if isinstance(item, dict) else item)
        if fid is None:
            plan.invalid_items += 1
        else:
            plan.reinforce_ids.append(fid)
    return plan


def _section(raw: object) -> str | None:
    """The new summary of a profile section ('' = no update), or None when malformed."""
    if not isinstance(raw, dict):
        return None
    update = raw.get("shouldUpdate", False)
    if isinstance(update, str):
        update = update.strip().lower() in ("true", "yes", "1")
    elif not isinstance(update, bool | int):
        return None
    summary = raw.get("summary")
    if summary is not None and not isinstance(summary, str):
        return None
    return summary.strip() if update and summary and summary.strip() else ""


def parse_fact(item: object) -> NewFact | None:
    """One ``newFacts`` item, or None when it is unusable (no content, unreadable confidence)."""
    if not isinstance(item, dict):
        return None
    content = item.get("content")
    if not isinstance(content, str) or not content.strip():
        return None
    confidence = _number(item.get("confidence"))
    if confidence is False:
        return None
    error = item.get("sourceError", item.get("source_error"))
    evidence = item.get("evidence", item.get("quote"))
    scope = item.get("scope")
    expires = item.get("expires", item.get("expiresAt", item.get("validUntil")))
    days = _number(item.get("validDays", item.get("expected_valid_days")))
    merges = item.get("merges", item.get("mergesWith", []))
    merge_ids = tuple(fid for fid in (_fact_id(m) for m in (merges if isinstance(merges, list) else [merges]))
                      if fid)[:_MAX_PARSED_MERGES]
    return NewFact(content.strip(), Category.coerce(item.get("category")), confidence if confidence is not None
                   else None, _text(error), _text(evidence), _text(scope), _text(expires),
                   days if isinstance(days, float) else None, merge_ids)


def _number(value: object) -> float | bool | None:
    """A finite number, None when absent, False when present but unusable."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return False
    try:
        number = float(value)
    except ValueError:
        return False
    return number if math.isfinite(number) else False


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _fact_id(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _removal(item: object) -> Removal | None:
    if isinstance(item, str):
        fid = _fact_id(item)
        return Removal(fid) if fid else None
    if not isinstance(item, dict):
        return None
    fid = _fact_id(item.get("id"))
    if fid is None:
        return None
    index = item.get("replacedBy", item.get("replacementFactIndex", item.get("replaced_by")))
    if isinstance(index, str) and index.strip().isdigit():
        index = int(index.strip())
    valid = isinstance(index, int) and not isinstance(index, bool) and index >= 0
    return Removal(fid, _text(item.get("reason")) or "", index if valid else None)  # type: ignore[arg-type]
