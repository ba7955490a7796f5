"""Injection: the reminder block within its token budget, order, reserved corrections, date,
user + shared places, and the number of objects it reads."""

from __future__ import annotations

import datetime as dt
import random
import re
from collections.abc import Callable, Iterator

import pytest

from harness_memory.auto import AutoMemory, AutoView, Category, Fact, Profile, ProfileKey, render_injection_block
from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from harness_memory.tokens import count_tokens

TODAY = dt.date(2026, 11, 5)
CATS = [c for c in Category if c is not Category.CORRECTION]


def mixed_facts(n: int, seed: int = 7) -> dict[str, Fact]:
    rnd = random.Random(seed)
    facts = {}
    for i in range(n):
        corr = i % 10 == 0
        conf = round(rnd.uniform(0.7, 1.0), 3)
        facts[f"fact-{i:04d}"] = Fact(
            id=f"fact-{i:04d}", confidence=conf,
            content=(f"Correction {i}: always run the linter before committing module {i}" if corr
                     else f"Fact {i}: the user works with component library number {i} and likes it"),
            category=Category.CORRECTION if corr else CATS[i % len(CATS)],
            source_error=f"committed module {i} without linting" if corr else None)
    return facts


def profile() -> Profile:
    return Profile({ProfileKey.WORK: "Frontend engineer at ACME, TypeScript and Vue.",
                    ProfileKey.PERSONAL: "Writes reports in Chinese; prefers concise answers.",
                    ProfileKey.RECENT: "Migrating a dashboard from Vue 2 to Vue 3."})


def confidences(block: str) -> list[float]:
    return [float(x) for x in re.findall(r"^- \[\w+, ([0-9.]+)\]", block, re.MULTILINE)]


def test_two_hundred_facts_fit_the_budget_in_order_with_corrections() -> None:
    facts = mixed_facts(200)
    block = render_injection_block(AutoView(facts, profile()), None, max_tokens=2000, correction_share=0.25,
                                   today=TODAY)
    assert count_tokens(block) <= 2000
    assert block.startswith("<system-reminder>") and block.endswith("</system-reminder>")
    assert "<current_date>2026-11-05, Thursday</current_date>" in block
    # profile first, then corrections, then facts by confidence
    assert block.index("Work context: Frontend engineer") < block.index("## Corrections") < block.index("## Facts")
    shown = confidences(block)
    assert len(shown) > 10 and shown == sorted(shown, reverse=True)
    best = sorted((f for f in facts.values() if f.category is not Category.CORRECTION),
                  key=lambda f: -f.confidence)
    assert f"{best[0].content}" in block  # the most confident facts are in
    assert best[-1].content not in block  # the least confident are the ones left out
    corr_lines = [ln for ln in block.splitlines() if ln.startswith("- Correction")]
    assert len(corr_lines) >= 5 and all("(avoid: committed module" in ln for ln in corr_lines)


def test_corrections_keep_their_share_against_many_confident_facts() -> None:
    facts = mixed_facts(200)
    for f in facts.values():
        f.confidence = 0.95 if f.category is Category.CORRECTION else 1.0
    block = render_injection_block(AutoView(facts), None, max_tokens=600, correction_share=0.3, today=TODAY)
    assert count_tokens(block) <= 600
    corr_tokens = sum(count_tokens(ln) for ln in block.splitlines() if ln.startswith("- Correction"))
    assert corr_tokens > 0.15 * 600
    none = render_injection_block(AutoView(facts), None, max_tokens=600, correction_share=0.0, today=TODAY)
    assert none == block  # issue #31: corrections come first whatever the share says


@pytest.mark.parametrize("budget", [50, 150, 400, 2000])  # 150: the frame (with DATA_NOTE) + one line
def test_any_budget_is_respected(budget: int) -> None:
    long_profile = Profile({k: "word " * 300 for k in ProfileKey})
    block = render_injection_block(AutoView(mixed_facts(50), long_profile), AutoView(mixed_facts(20, seed=3)),
                                   max_tokens=budget, today=TODAY)
    assert count_tokens(block) <= budget
    if budget < 100:
        assert block == ""  # smaller than the frame: nothing rather than over budget
    else:  # corrections first (issue #31), then the profile when there is room
        assert "<current_date>2026-11-05, Thursday</current_date>" in block and "- Correction " in block
        assert ("- Work context: word" in block) is (budget >= 400)


def test_empty_memory_renders_nothing() -> None:
    assert render_injection_block(AutoView(), AutoView(), today=TODAY) == ""
    assert render_injection_block(None, None, today=TODAY) == ""


@pytest.fixture
def auto(make_config: Callable[..., MemoryConfig]) -> Iterator[AutoMemory]:
    services = MemoryServices.from_config(make_config(backend="cos", auto={"max_injection_tokens": 800}))
    memory = services.new_auto_memory(start_worker=False, today=lambda: TODAY)
    yield memory
    memory.close(1)
    services.close()


def test_user_and_shared_places_are_injected_reading_only_manifests(auto: AutoMemory) -> None:
    assert auto.render_injection("u1") == ""
    auto.add_fact("u1", "Prefers Vue over React", "preference", 0.95)
    auto.add_fact("u1", "Use pnpm", "correction", 0.97, source_error="used npm")
    auto.set_profile("u1", Profile({ProfileKey.WORK: "Frontend engineer."}))
    auto.add_fact(None, "The team ships on Thursdays", "context", 0.9, shared=True)
    store = auto.places.user_auto_dir("u1").store
    before = store.request_count
    block = auto.render_injection("u1")
    assert store.request_count - before == 2  # one GET per place: the manifests
    assert "- Work context: Frontend engineer." in block
    assert "- Use pnpm (avoid: used npm)" in block
    assert "- [preference, 0.95] Prefers Vue over React" in block
    assert block.index("## Facts about the user") < block.index("## Project facts (shared by every user)")
    assert "The team ships on Thursdays" in block
    other = auto.render_injection("u2")
    assert "The team ships on Thursdays" in other and "Vue" not in other and "pnpm" not in other
    assert count_tokens(block) <= 800


def test_disabled_or_broken_store_injects_nothing(make_config: Callable[..., MemoryConfig]) -> None:
    services = MemoryServices.from_config(make_config(auto={"enabled": False}))
    memory = services.new_auto_memory(start_worker=False)
    memory.add_fact("u1", "Prefers Vue", "preference", 0.95)
    assert memory.render_injection("u1") == ""
    memory.close(1)
    services.close()
    live = MemoryServices.from_config(make_config())
    working = live.new_auto_memory(start_worker=False)
    live.store.put("memory/users/u1/projects/default/memory/.manifest.json", b"{not json")
    assert working.render_injection("u1") == ""  # damaged manifest: logged, nothing injected, no raise
    working.close(1)
    live.close()
