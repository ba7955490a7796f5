"""Fact lifecycle: expiry, confirmation, paraphrases and eviction at capacity.

Why each:

* **Expiry.** "Business trip next week" is true for a week. A time-bound fact carries the last
  day it holds (``expires``): the model gives it (``expires`` date or ``validDays``), or — when a
  small model forgets — it is derived from the time words in the fact ("next week", "下个月").
  An expired fact is never injected and is dropped by the next update of its place (the
  periodic review rides on the updates; no model call is spent on it).
* **Confirmation.** Each fact records when the user last said or confirmed it and how often;
  eviction prefers what is confirmed and recent over what was said once long ago.
* **Paraphrases.** "Prefers the Vue Composition API" and "prefers Vue's composition API" are one
  fact: facts whose content words come in the same order are merged without asking anyone. Facts
  that merely share content words (a quarter of them or more) are shown to the model as possible
  duplicates in the next extraction, which may merge them (``merges``) in the same call — no
  extra model call, and the model, not a word count, decides whether they say the same thing.
* **Eviction.** At ``max_facts``, a score weighs confidence (0.6), freshness of the last
  confirmation (0.3, halving every 90 days) and how often it was confirmed (0.1); a share of the
  places is reserved for corrections so a pile of fresh preferences never pushes out "don't do X
  again". Facts a person added or edited are never evicted.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable

from .doubt import term_list, terms
from .model import Category, Fact

MAX_VALID_DAYS = 3650
FRESHNESS_HALF_LIFE_DAYS = 90.0
CORRECTION_RESERVE_SHARE = 0.10
CORRECTION_RESERVE_MAX = 10
SIMILAR = 0.25  # term overlap (Jaccard) from which two facts are shown as possible duplicates
MAX_DUPLICATE_PAIRS = 5

# Time words -> days the fact stays true (counted from the day it was said).
_TIME_BOUND: tuple[tuple[re.Pattern[str], int], ...] = tuple((re.compile(p, re.IGNORECASE), d) for p, d in (
    (r"\b(?:today|tonight|this (?:morning|afternoon|evening))\b|今天|今晚|今早|今日", 1),
    (r"\btomorrow\b|明天|明日", 2),
    (r"\bthis weekend\b|这个周末|本周末", 7),
    (r"\bthis week\b|本周|这周|这个星期|这星期", 7),
    (r"\bnext week\b|下周|下个星期|下星期|下礼拜", 14),
    (r"\b(?:this|the end of (?:the|this)) month\b|\bend of (?:the|this) month\b|本月|这个月|月底", 31),
    (r"\bnext month\b|下个月|下月", 62),
    (r"\bthis (?:quarter|season)\b|本季度|这个季度", 92),
    (r"\bnext (?:quarter|season)\b|下个季度|下季度", 184),
))
_IN_DAYS = re.compile(r"\bin (\d{1,3}) days?\b|(\d{1,3}) ?天(?:后|之后|以后|内)", re.IGNORECASE)


def expiry_for(expires: object, valid_days: object, content: str, today: dt.date) -> str:
    """The last day a new fact holds (ISO date), or '' for a lasting fact.

    ``expires``: a date the model gave (``YYYY-MM-DD``; a time part is ignored); ``valid_days``:
    a lifetime in days; otherwise the time words in ``content``. Capped at ``MAX_VALID_DAYS``."""
    latest = today + dt.timedelta(days=MAX_VALID_DAYS)
    if isinstance(expires, str) and expires.strip():
        try:
            day = dt.date.fromisoformat(expires.strip()[:10])
        except ValueError:
            day = None
        if day is not None:
            return min(day, latest).isoformat()
    if (isinstance(valid_days, int | float) and not isinstance(valid_days, bool) and math.isfinite(valid_days)
            and valid_days > 0):
        return (today + dt.timedelta(days=min(math.ceil(valid_days), MAX_VALID_DAYS))).isoformat()
    days = time_bound_days(content)
    return (today + dt.timedelta(days=days)).isoformat() if days else ""


def time_bound_days(content: str) -> int:
    """Days a fact with these time words stays true (0: none found)."""
    match = _IN_DAYS.search(content)
    if match:
        return int(match.group(1) or match.group(2)) + 1
    found = [days for pattern, days in _TIME_BOUND if pattern.search(content)]
    return max(found) if found else 0


def is_expired(fact: Fact, today: dt.date) -> bool:
    if not fact.expires:
        return False
    try:
        return dt.date.fromisoformat(fact.expires[:10]) < today
    except ValueError:
        return False


def parse_time(iso: str) -> dt.datetime | None:
    if not iso:
        return None
    try:
        value = dt.datetime.fromisoformat(iso)
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def freshness(fact: Fact, now: dt.datetime) -> float:
    """1.0 when confirmed now, halving every ``FRESHNESS_HALF_LIFE_DAYS``."""
    when = parse_time(fact.confirmed) or parse_time(fact.updated) or parse_time(fact.created)
    if when is None:
        return 0.25
    days = max(0.0, (now - when).total_seconds() / 86400)
    return 0.5 ** (days / FRESHNESS_HALF_LIFE_DAYS)


def keep_score(fact: Fact, now: dt.datetime) -> float:
    confirmations = min(1.0, math.log2(1 + max(1, fact.confirmations)) / 3)
    return 0.6 * fact.confidence + 0.3 * freshness(fact, now) + 0.1 * confirmations


def to_evict(facts: Iterable[Fact], max_facts: int, now: dt.datetime) -> list[str]:
    """Ids of the automatic facts beyond ``max_facts`` with the lowest keep score; the best
    corrections keep their reserved places first. Manual facts count but are never evicted."""
    facts = list(facts)
    manual = [f for f in facts if f.is_manual]
    auto = [f for f in facts if not f.is_manual]
    slots = max(0, max_facts - len(manual))
    if len(auto) <= slots:
        return []
    ranked = sorted(auto, key=lambda f: (-keep_score(f, now), f.id))
    reserve = min(CORRECTION_RESERVE_MAX, math.ceil(max_facts * CORRECTION_RESERVE_SHARE), slots)
    keep = [f.id for f in ranked if f.category is Category.CORRECTION][:reserve]
    for fact in ranked:
        if len(keep) >= slots:
            break
        if fact.id not in keep:
            keep.append(fact.id)
    kept = set(keep)
    return [f.id for f in ranked if f.id not in kept]


def paraphrase_key(text: str) -> str:
    """The content words of ``text`` in order (stop words, endings, case and punctuation gone):
    equal keys mean the same statement worded slightly differently. '' for fewer than 2 words."""
    seen = list(dict.fromkeys(term_list(text)))
    return " ".join(seen) if len(seen) >= 2 else ""


def similarity(a: str, b: str) -> float:
    """Jaccard overlap of the content words of two texts."""
    return _jaccard(terms(a), terms(b))


def _jaccard(ta: frozenset[str], tb: frozenset[str]) -> float:
    return len(ta & tb) / len(ta | tb) if ta and tb else 0.0


def possible_duplicates(facts: Iterable[Fact]) -> list[tuple[Fact, Fact]]:
    """Pairs of facts that look alike (for the model to merge or keep apart), most alike first."""
    items = [(f, terms(f.content)) for f in sorted(facts, key=lambda f: f.id)]
    pairs: list[tuple[float, Fact, Fact]] = []
    for i, (a, ta) in enumerate(items):
        for b, tb in items[i + 1 :]:
            score = _jaccard(ta, tb)
            if score >= SIMILAR and any(len(t) >= 3 for t in ta & tb):
                pairs.append((score, a, b))
    pairs.sort(key=lambda p: (-p[0], p[1].id, p[2].id))
    return [(a, b) for _, a, b in pairs[:MAX_DUPLICATE_PAIRS]]
