"""Consolidation, confirmation, expiry (staleness) and eviction of auto-memory facts, on a real
local store through the apply rules and the extraction path."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterator

import pytest

from harness_memory.auto import (
    ApplyContext,
    ApplyReport,
    ApplyRules,
    AutoMemory,
    AutoPlace,
    Category,
    NewFact,
    Signals,
    UpdatePlan,
    apply_plan,
)
from harness_memory.auto.doubt import Conversation
from harness_memory.auto.lifecycle import expiry_for, paraphrase_key, time_bound_days, to_evict
from harness_memory.auto.model import Fact
from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from tests.fakellm import ScriptedLLM, text

TODAY = dt.date(2026, 3, 2)  # a Monday


@pytest.fixture
def auto(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> Iterator[AutoMemory]:
    cfg = make_config(model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      auto={"debounce_seconds": 3600, "max_attempts": 1})
    services = MemoryServices.from_config(cfg)
    day = [TODAY]
    memory = services.new_auto_memory(start_worker=False, today=lambda: day[0])
    memory.day = day  # type: ignore[attr-defined]  # the test moves the calendar
    yield memory
    memory.close(1)
    services.close()


RULES = ApplyRules()


def apply(auto: AutoMemory, plan: UpdatePlan, *signals: str, user: tuple[str, ...] = (),
          rules: ApplyRules = RULES) -> ApplyReport:
    place = AutoPlace(auto.places.user_auto_dir("u1"))
    snapshot = place.read()
    ctx = ApplyContext(signals=Signals.of(*signals), conversation=Conversation.of(user, ()), today=TODAY,
                       source="auto:s1")
    with place.transaction() as txn:
        return apply_plan(plan, txn, snapshot, rules, ctx)


def facts(auto: AutoMemory) -> dict[str, Fact]:
    return {f.content: f for f in auto.list_facts("u1")}


# -- consolidation --------------------------------------------------------------------------------
def test_a_restatement_in_other_words_is_merged_without_the_model(auto: AutoMemory) -> None:
    apply(auto, UpdatePlan(new_facts=[NewFact("Prefers the Vue Composition API", Category.PREFERENCE, 0.8)]))
    report = apply(auto, UpdatePlan(new_facts=[NewFact("prefers Vue's composition API!", Category.PREFERENCE, 0.9,
                                                       evidence="I prefer Vue's composition API")]),
                   user=("I prefer Vue's composition API",))
    [only] = auto.list_facts("u1")
    assert report.refreshed == [only.id] and only.confidence == 0.9 and only.confirmations == 2
    assert paraphrase_key("Uses pnpm, not npm") != paraphrase_key("Uses npm, not pnpm")  # order matters
    assert paraphrase_key("Uses Python 3") != paraphrase_key("Uses Python 2")


def test_the_model_merges_paraphrases_keeping_confidence_and_source(auto: AutoMemory,
                                                                    llm_server: ScriptedLLM) -> None:
    apply(auto, UpdatePlan(new_facts=[NewFact("Use pnpm, not npm", Category.CORRECTION, 0.97, "ran npm install")]),
          "correction")
    apply(auto, UpdatePlan(new_facts=[NewFact("Installs packages with pnpm", Category.PREFERENCE, 0.8),
                                      NewFact("Likes pnpm workspaces", Category.PREFERENCE, 0.75)]))
    before = facts(auto)
    ids = [before[c].id for c in ("Installs packages with pnpm", "Likes pnpm workspaces")]
    llm_server.script(text(json.dumps({"newFacts": [
        {"content": "Always installs with pnpm, workspaces too", "category": "preference",
         "confidence": 0.9, "evidence": "pnpm for every install", "merges": ids},
        {"content": "Installs with pnpm and never npm", "category": "preference",  # names a correction
         "confidence": 0.9, "evidence": "pnpm for every install", "merges": [before["Use pnpm, not npm"].id]}]})))
    auto.capture("u1", "s2", [{"role": "user", "content": "Remember: pnpm for every install, workspaces too."},
                              {"role": "assistant", "content": "Got it."}])
    assert auto.flush(10)
    prompt = llm_server.chat_requests[0].messages[-1]["content"]
    assert "<possible_duplicates>" in prompt and ids[1] in prompt  # look-alikes shown for merging
    now = facts(auto)
    assert set(now) == {"Always installs with pnpm, workspaces too", "Use pnpm, not npm"}
    merged = now["Always installs with pnpm, workspaces too"]
    assert merged.id == ids[0]  # the most confident source's id, source and creation time
    assert (merged.category, merged.confidence, merged.source_error) == (Category.PREFERENCE, 0.9, None)
    assert merged.source == before["Installs packages with pnpm"].source == "auto:s1"
    assert merged.created == before["Installs packages with pnpm"].created and merged.confirmations == 3
    assert now["Use pnpm, not npm"] == before["Use pnpm, not npm"]  # a correction is never merged (#31)
    assert auto.rejections["merge_correction"] == 1


# -- confirmation ---------------------------------------------------------------------------------
def test_confirmation_needs_the_users_reinforcement(auto: AutoMemory) -> None:
    apply(auto, UpdatePlan(new_facts=[NewFact("Wants answers that start with the code", Category.PREFERENCE, 0.9)]))
    [fact] = auto.list_facts("u1")
    report = apply(auto, UpdatePlan(reinforce_ids=[fact.id]))
    assert report.confirmed == [] and report.rejected["reinforce_without_signal"] == 1
    report = apply(auto, UpdatePlan(reinforce_ids=[fact.id, "fact-nothere"]), "reinforcement")
    [again] = auto.list_facts("u1")
    assert report.confirmed == [fact.id] and again.confirmations == 2 and again.confirmed >= fact.confirmed


# -- expiry and the staleness review ----------------------------------------------------------------
@pytest.mark.parametrize("expires, days, content, expected", [
    ("2026-03-08", None, "Flies to Tokyo on Sunday", "2026-03-08"),
    ("2026-03-08T18:00:00", None, "x", "2026-03-08"),
    (None, 10, "Is on call", "2026-03-12"),
    (None, None, "Business trip to Berlin next week", "2026-03-16"),
    (None, None, "下周去上海出差", "2026-03-16"),
    (None, None, "Has a dentist appointment tomorrow", "2026-03-04"),
    (None, None, "Report due in 3 days", "2026-03-06"),
    (None, None, "Is a backend engineer", ""),
    ("soon", -4, "Lives in Lyon", ""),
])
def test_expiry(expires: str | None, days: float | None, content: str, expected: str) -> None:
    assert expiry_for(expires, days, content, TODAY) == expected
    assert time_bound_days("Works in TypeScript") == 0


def test_expired_facts_are_not_injected_and_the_review_drops_them(auto: AutoMemory) -> None:
    apply(auto, UpdatePlan(new_facts=[NewFact("Business trip to Berlin next week", Category.CONTEXT, 0.9),
                                      NewFact("Is a backend engineer", Category.CONTEXT, 0.95)]))
    trip = facts(auto)["Business trip to Berlin next week"]
    assert trip.expires == "2026-03-16"
    assert "(until 2026-03-16)" in auto.render_injection("u1")
    auto.day[0] = dt.date(2026, 3, 17)  # type: ignore[attr-defined]
    block = auto.render_injection("u1")
    assert "Berlin" not in block and "Is a backend engineer" in block
    assert "Business trip to Berlin next week" in facts(auto)  # not injected, still stored until a review
    assert auto.review("u1") == [trip.id]
    assert set(facts(auto)) == {"Is a backend engineer"}
    assert not auto.places.user_auto_dir("u1").store.exists(f"memory/users/u1/projects/default/memory/{trip.file}")


# -- eviction -------------------------------------------------------------------------------------------
def test_eviction_weighs_confidence_and_recency_and_keeps_room_for_corrections() -> None:
    now = dt.datetime(2026, 3, 2, tzinfo=dt.UTC)
    old = (now - dt.timedelta(days=400)).isoformat()
    fresh = now.isoformat()
    facts_ = [Fact(f"fact-p{i}", f"Preference {i}", Category.PREFERENCE, 0.95, confirmed=fresh, source="auto:s")
              for i in range(6)]
    facts_ += [Fact("fact-stale", "Stale but confident", Category.KNOWLEDGE, 1.0, confirmed=old, source="auto:s"),
               Fact("fact-fresh", "Fresh and fairly sure", Category.KNOWLEDGE, 0.85, confirmed=fresh, source="auto:s"),
               Fact("fact-corr", "Use pnpm, not npm", Category.CORRECTION, 0.75, confirmed=old, source="auto:s"),
               Fact("fact-manual", "Typed by a person", Category.CONTEXT, 0.1, confirmed=old, source="manual")]
    gone = set(to_evict(facts_, 9, now))
    assert "fact-corr" not in gone and "fact-manual" not in gone  # reserved room; never evicted
    assert "fact-stale" in gone and "fact-fresh" not in gone  # recency beats one more point of confidence
    assert len(facts_) - len(gone) == 9
