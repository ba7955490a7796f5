"""Injection: the auto-memory reminder block, within a token budget.

Why a budget and this order (DeerFlow's): a user may have a hundred facts; only the most
useful fit in front of every request. The profile summaries come first (the broad picture),
then facts by confidence until ``max_injection_tokens`` is reached. The correction lines are
reserved first, before the profile or any fact: when room is short, the profile and the
least confident facts are trimmed, never a correction for them (a long profile pushed "never
use pip" out of a 200-token budget) — a correction is the one thing the agent must not get
wrong twice; they are rendered with ``(avoid: …)``. Only when the corrections alone exceed the
budget are the least confident corrections left out. ``<current_date>`` (with the weekday)
lets the model resolve "next week"; a time-bound fact shows its last day, and one past it is
not shown at all.

The block is meant for the agent's ``additional_context`` (the system prompt): the model sees
it, the user's visible messages do not contain it. Built from manifests only (one GET per
place, plus the profile file if it was edited by hand since the last update).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from ..escape import DATA_NOTE, inline
from ..tokens import count_tokens, truncate_to_tokens
from .doubt import mistake_text
from .lifecycle import is_expired
from .model import Category, Fact
from .store import AutoView

OPEN = "<system-reminder>"
CLOSE = "</system-reminder>"
INTRO = ("<memory>\nWhat earlier conversations taught about this user (auto memory). Use it quietly: do not "
         "ask again for what is known here, and if the user now says otherwise, follow the user. " + DATA_NOTE)
MEMORY_CLOSE = "</memory>"
H_PROFILE = "## User profile"
H_PROJECT_PROFILE = "## Project context (shared)"
H_CORRECTIONS = "## Corrections (do not repeat these mistakes)"
H_FACTS = "## Facts about the user (most certain first)"
H_PROJECT_FACTS = "## Project facts (shared by every user)"
_MIN_PROFILE_TAIL = 24  # tokens: a cut profile section shorter than this is not worth showing
#: ``_Item.order`` of corrections: below every profile line and fact, so ``_fit`` trims those first.
_CORRECTION_ORDER = -100_000


@dataclass(slots=True)
class _Item:
    group: str
    line: str
    tokens: int
    order: float  # lower = more important (used when trimming to the budget; corrections lowest)


def fact_line(fact: Fact) -> str:
    """One fact as injected (the one place a fact's text enters the block). Every stored string
    goes through ``escape.inline``: one line, and it can never open or close one of our tags."""
    until = f" (until {inline(fact.expires)})" if fact.expires else ""
    content = inline(fact.content)
    if fact.category is Category.CORRECTION:
        avoid = inline(mistake_text(fact.content, fact.source_error))  # never the corrected belief
        return f"- {content}" + (f" (avoid: {avoid})" if avoid else "") + until
    return f"- [{fact.category.value}, {fact.confidence:.2f}] {content}{until}"


def date_line(today: dt.date) -> str:
    """``<current_date>2026-11-30, Monday</current_date>``: the weekday lets the model resolve
    "next Friday" as well as "next week"."""
    return f"<current_date>{today.isoformat()}, {today.strftime('%A')}</current_date>"


def _ranked(facts: list[Fact]) -> list[Fact]:
    """Most confident first; among equals the most recently updated."""
    return sorted(facts, key=lambda f: (-f.confidence, -_ts(f.updated), f.id))


def _ts(iso: str) -> float:
    try:
        return dt.datetime.fromisoformat(iso).timestamp() if iso else 0.0
    except ValueError:
        return 0.0


class _Budget:
    """Tokens left; a group's heading is charged with its first line."""

    def __init__(self, avail: int) -> None:
        self.avail = avail
        self._groups: set[str] = set()

    def cost(self, group: str, line: str) -> int:
        extra = 0 if group in self._groups else count_tokens(group) + 2  # blank line + heading
        return count_tokens(line) + 1 + extra

    def take(self, group: str, tokens: int) -> None:
        self.avail -= tokens
        self._groups.add(group)


def render_injection_block(user: AutoView | None, shared: AutoView | None, *, max_tokens: int = 2000,
                           correction_share: float = 0.25, today: dt.date | None = None) -> str:
    """The ``<system-reminder>`` block, or '' when neither place holds anything (or nothing fits)."""
    today = today or dt.date.today()
    views = [(v, scope) for v, scope in ((user, "user"), (shared, "shared")) if v is not None]
    live = [[f for f in v.facts.values() if not is_expired(f, today)] for v, _ in views]  # a list per view
    if not any(facts or not v.profile.is_empty() for facts, (v, _) in zip(live, views, strict=True)):
        return ""
    frame = [OPEN, INTRO, MEMORY_CLOSE, date_line(today), CLOSE]
    budget = _Budget(max_tokens - sum(count_tokens(x) + 1 for x in frame))

    corrections: list[tuple[Fact, str]] = []
    others: list[tuple[Fact, str]] = []
    for facts, (_view, scope) in zip(live, views, strict=True):
        for fact in facts:  # a fact past its last day is never shown
            (corrections if fact.category is Category.CORRECTION else others).append((fact, scope))
    rank = {id(f): i for i, f in enumerate(_ranked([f for f, _ in corrections + others]))}
    corrections.sort(key=lambda p: rank[id(p[0])])

    chosen: list[_Item] = []
    # 1. corrections first, most confident first, from the whole budget (``correction_share`` is
    #    kept for compatibility: corrections are no longer limited to a share of it)
    for i, (fact, _scope) in enumerate(corrections):
        line = fact_line(fact)
        tokens = budget.cost(H_CORRECTIONS, line)
        if tokens > budget.avail:
            continue  # a shorter, less confident one may still fit
        chosen.append(_Item(H_CORRECTIONS, line, tokens, _CORRECTION_ORDER + i))
        budget.take(H_CORRECTIONS, tokens)
    # 2. profile summaries (the user's, then the shared place's); the last one may be cut
    full = False
    for view, scope in views:
        heading = H_PROFILE if scope == "user" else H_PROJECT_PROFILE
        for j, (key, text) in enumerate(view.profile.items()):
            line = f"- {key.title}: {inline(text)}"
            tokens = budget.cost(heading, line)
            if tokens > budget.avail:
                full = True
                room = budget.avail - (tokens - count_tokens(line)) - 1
                cut = truncate_to_tokens(line, room) if room >= _MIN_PROFILE_TAIL else ""
                if not cut:
                    break
                line = cut + "…"
                tokens = budget.cost(heading, line)
            chosen.append(_Item(heading, line, tokens, j + (0 if scope == "user" else 100)))
            budget.take(heading, tokens)
            if full:
                break
        if full:
            break
    # 3. the other facts, by confidence, until full
    rest = sorted(others, key=lambda p: rank[id(p[0])])
    for i, (fact, scope) in enumerate(rest):
        line = fact_line(fact)
        group = H_FACTS if scope == "user" else H_PROJECT_FACTS
        tokens = budget.cost(group, line)
        if tokens > budget.avail:
            break
        chosen.append(_Item(group, line, tokens, 10_000 + i))
        budget.take(group, tokens)
    return _fit(chosen, frame, max_tokens)


def _render(items: list[_Item], frame: list[str]) -> str:
    open_, intro, memory_close, date, close = frame
    parts = [open_, intro]
    for heading in (H_PROFILE, H_PROJECT_PROFILE, H_CORRECTIONS, H_FACTS, H_PROJECT_FACTS):
        lines = [it.line for it in items if it.group == heading]
        if lines:
            parts += ["", heading, *lines]
    parts += [memory_close, date, close]
    return "\n".join(parts)


def _fit(items: list[_Item], frame: list[str], max_tokens: int) -> str:
    """Render, and while the exact count is over budget drop the least important line.
    '' when not even one line fits (a budget smaller than the frame)."""
    text = _render(items, frame)
    while count_tokens(text) > max_tokens and items:
        items.remove(max(items, key=lambda it: it.order))
        text = _render(items, frame)
    return text if items else ""
