"""Apply rules and the stored result, on the local store and on SeaweedFS (+ Redis locks):
clamping, threshold, dedupe, corrections, upload scrubbing, the fact cap, the memory files and
index, edits made while the model was thinking, and the fact API."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator

import pytest

from harness_memory.auto import (
    ApplyContext,
    ApplyReport,
    ApplyRules,
    AutoMemory,
    AutoPlace,
    Category,
    FactNotFound,
    NewFact,
    Profile,
    ProfileKey,
    Removal,
    Signals,
    UpdatePlan,
    apply_plan,
    scrub_uploads,
)
from harness_memory.auto.store import parse_profile
from harness_memory.config import MemoryConfig
from harness_memory.errors import InvalidName
from harness_memory.memdir import parse_memory
from harness_memory.memdir.index import parse_index
from harness_memory.services import MemoryServices
from tests.fakellm import RecordedRequest, ScriptedLLM, text

RULES = ApplyRules(threshold=0.7, max_facts=100)
PREFIX = "memory/users/u1/projects/default/memory/"


@pytest.fixture(params=[("local", False), ("cos", True)], ids=["local", "cos+redis"])
def services(request: pytest.FixtureRequest, make_config: Callable[..., MemoryConfig],
             llm_server: ScriptedLLM) -> Iterator[MemoryServices]:
    backend, redis = request.param
    cfg = make_config(backend=backend, redis=redis,
                      model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      auto={"debounce_seconds": 3600, "max_attempts": 1})
    svc = MemoryServices.from_config(cfg)
    yield svc
    svc.close()


@pytest.fixture
def auto(services: MemoryServices) -> Iterator[AutoMemory]:
    memory = services.new_auto_memory(start_worker=False)
    yield memory
    memory.close(1)


def place_of(auto: AutoMemory, user: str = "u1") -> AutoPlace:
    return AutoPlace(auto.places.user_auto_dir(user))


def apply(place: AutoPlace, plan: UpdatePlan, rules: ApplyRules = RULES, signal: bool = False,
          *signals: str) -> ApplyReport:
    """Apply ``plan`` as an extraction of session s1 would (``signal``: the user corrected)."""
    snapshot = place.read()
    ctx = ApplyContext(signals=Signals.of(*signals, *(["correction"] if signal else [])), source="auto:s1")
    with place.transaction() as txn:
        return apply_plan(plan, txn, snapshot, rules, ctx)


def fact(content: str, category: Category = Category.PREFERENCE, confidence: float | None = 0.9,
         error: str | None = None) -> NewFact:
    return NewFact(content, category, confidence, error)


def test_rules_and_the_stored_files(auto: AutoMemory) -> None:
    place = place_of(auto)
    report = apply(place, UpdatePlan(
        profile={ProfileKey.WORK: "Frontend engineer at ACME (TypeScript, Vue)."},
        new_facts=[
            fact("Writes reports in Chinese", confidence=1.5),  # clamped to 1.0
            fact("Is a frontend engineer", Category.CONTEXT, 0.95),
            fact("might learn Rust someday", Category.GOAL, 0.5),  # below the threshold
            fact("WRITES REPORTS IN CHINESE.", confidence=0.8),  # near-duplicate of the first
            fact("Use pnpm, not npm", Category.CORRECTION, 0.75, "ran npm install"),
            fact("Uses Vue 3", confidence=-3),
            fact("Reads a lot", confidence=None),
        ]), signal=True)  # the user corrected the assistant in this conversation
    assert len(report.added) == 3 and report.dropped_low_confidence == 3 and report.refreshed == []
    facts = {f.content: f for f in auto.list_facts("u1")}
    assert {k: (v.category, v.confidence) for k, v in facts.items()} == {
        "Writes reports in Chinese": (Category.PREFERENCE, 1.0),
        "Is a frontend engineer": (Category.CONTEXT, 0.95),
        "Use pnpm, not npm": (Category.CORRECTION, 0.95),
    }
    store = auto.places.user_auto_dir("u1").store
    corr = facts["Use pnpm, not npm"]
    stored = parse_memory(store.get(PREFIX + corr.file).data.decode())
    assert stored.type.value == "feedback" and stored.description == "Use pnpm, not npm"
    assert stored.extra["confidence"] == 0.95 and stored.extra["category"] == "correction"
    assert stored.extra["source"] == "auto:s1" and stored.extra["source_error"] == "ran npm install"
    assert stored.extra["created"] and stored.extra["updated"]
    assert "Avoid: ran npm install" in stored.body
    pref = parse_memory(store.get(PREFIX + facts["Writes reports in Chinese"].file).data.decode())
    assert pref.type.value == "user" and "source_error" not in pref.extra
    manifest = json.loads(store.get(PREFIX + ".manifest.json").data)
    entry = next(e for e in manifest["entries"] if e["file"] == corr.file)
    assert entry["extra"]["confidence"] == 0.95 and entry["extra"]["source_error"] == "ran npm install"
    index = parse_index(store.get(PREFIX + "MEMORY.md").data.decode())
    assert {f for _, f, _ in index} == {f.file for f in facts.values()} | {"profile.md"}
    profile = parse_memory(store.get(PREFIX + "profile.md").data.decode())
    assert "## Work context\n\nFrontend engineer at ACME (TypeScript, Vue)." in profile.body
    assert auto.get_profile("u1").get(ProfileKey.WORK) == "Frontend engineer at ACME (TypeScript, Vue)."


def test_restated_fact_is_refreshed_not_repeated(auto: AutoMemory) -> None:
    place = place_of(auto)
    apply(place, UpdatePlan(new_facts=[fact("Prefers dark mode", confidence=0.75)]))
    report = apply(place, UpdatePlan(new_facts=[fact("prefers  dark-mode!", confidence=0.9)]))
    [only] = auto.list_facts("u1")
    assert report.refreshed == [only.id] and only.confidence == 0.9 and only.content == "Prefers dark mode"
    report = apply(place, UpdatePlan(new_facts=[fact("Prefers dark mode", confidence=0.8)]))
    assert report.refreshed == [] and auto.list_facts("u1")[0].confidence == 0.9  # never lowered


def test_correction_signal_lifts_a_weak_correction(auto: AutoMemory) -> None:
    place = place_of(auto)
    apply(place, UpdatePlan(new_facts=[fact("Answer in Chinese", Category.CORRECTION, 0.4, "answered in English")]))
    assert auto.list_facts("u1") == []  # no signal and below threshold: a guess
    apply(place, UpdatePlan(new_facts=[fact("Answer in Chinese", Category.CORRECTION, 0.4, "answered in English")]),
          signal=True)
    [corr] = auto.list_facts("u1")
    assert corr.confidence == 0.95 and corr.source_error == "answered in English"


@pytest.mark.parametrize("raw, kept", [
    ("Is a data engineer. Uploaded sales.csv to /mnt/user-data/uploads/sales.csv for analysis. Likes charts.",
     "Is a data engineer. Likes charts."),
    ("The uploaded file contains Q3 numbers.", ""),
    ("用户是前端工程师。上传的文件是需求文档！喜欢 Vue。", "用户是前端工程师。喜欢 Vue。"),
    ("用户已上传 report.pdf？请参考附件。报告用中文写", "报告用中文写"),
    ("Works on the file-upload feature of the CMS", "Works on the file-upload feature of the CMS"),
    ("Keeps notes in notes.md. Uses v2.1 of the API.", "Keeps notes in notes.md. Uses v2.1 of the API."),
    ("See /tmp/session-42/out.json for details. Prefers JSON.", "Prefers JSON."),
    ("Sent an attachment with the logs\nPrefers short answers", "Prefers short answers"),
])
def test_scrub_uploads(raw: str, kept: str) -> None:
    assert scrub_uploads(raw) == kept


def test_scrubbed_facts_and_profile(auto: AutoMemory) -> None:
    place = place_of(auto)
    report = apply(place, UpdatePlan(
        profile={ProfileKey.TOP_OF_MIND: "Analysing the uploaded file /mnt/user-data/uploads/q3.xlsx."},
        new_facts=[fact("The uploaded file is the Q3 budget"), fact("Budget owner for Q3. Uploaded a PDF.")]))
    assert report.dropped_scrubbed == 1 and report.profile_updated == []
    assert [f.content for f in auto.list_facts("u1")] == ["Budget owner for Q3."]


def test_fact_cap_trims_lowest_confidence_but_never_manual(services: MemoryServices) -> None:
    auto = services.new_auto_memory(start_worker=False)
    place = place_of(auto)
    manual = auto.add_fact("u1", "Business trip to Berlin next week", "context", 0.71)
    apply(place, UpdatePlan(new_facts=[fact(f"Auto fact number {i}", confidence=0.7 + i / 100) for i in range(6)]),
          ApplyRules(threshold=0.7, max_facts=4))
    left = auto.list_facts("u1")
    assert len(left) == 4 and manual.id in {f.id for f in left}
    assert sorted(f.content for f in left if f.id != manual.id) == [
        "Auto fact number 3", "Auto fact number 4", "Auto fact number 5"]
    stored = {i.key.rsplit("/", 1)[1] for i in services.store.list(PREFIX) if "/fact-" in i.key}
    assert stored == {f.file for f in left}  # trimmed files are gone, not just unindexed
    auto.close(1)


def test_removals_unknown_ids_and_hostile_ids(auto: AutoMemory) -> None:
    place = place_of(auto)
    apply(place, UpdatePlan(new_facts=[fact("Uses Windows"), fact("Uses VS Code")]))
    windows = next(f for f in auto.list_facts("u1") if f.content == "Uses Windows")
    report = apply(place, UpdatePlan(removals=[Removal(windows.id, "moved to macOS", replaced_by=0),
                                               *(Removal(i) for i in ("fact-doesnotexist", "../../users/u2/x",
                                                                      "profile"))],
                                     new_facts=[fact("Uses macOS")]))
    assert report.removed == [windows.id]
    assert report.unknown_removals == ["fact-doesnotexist", "../../users/u2/x", "profile"]
    assert sorted(f.content for f in auto.list_facts("u1")) == ["Uses VS Code", "Uses macOS"]
    assert not auto.places.user_auto_dir("u1").store.exists(PREFIX + windows.file)
    assert auto.get_profile("u1").is_empty()


def test_edits_made_while_the_model_thinks_are_kept(auto: AutoMemory, llm_server: ScriptedLLM) -> None:
    place = place_of(auto)
    apply(place, UpdatePlan(profile={ProfileKey.WORK: "Backend engineer.", ProfileKey.PERSONAL: "Speaks English."},
                            new_facts=[fact("Uses Java"), fact("Uses Maven")]))
    java = next(f for f in auto.list_facts("u1") if f.content == "Uses Java")
    maven = next(f for f in auto.list_facts("u1") if f.content == "Uses Maven")
    tools_dir = auto.places.user_auto_dir("u1")
    added: list[str] = []

    def think(request: RecordedRequest) -> object:
        # While the model "thinks", the user edits through the API and the tools.
        auto.update_fact("u1", java.id, content="Uses Java 21 and Kotlin")
        added.append(auto.add_fact("u1", "Business trip next week", "context").id)
        current = tools_dir.read("profile.md").text
        tools_dir.save("profile.md", current.replace("Backend engineer.", "Staff backend engineer."))
        return text(json.dumps({
            "user": {"workContext": {"summary": "Frontend engineer.", "shouldUpdate": True},
                     "personalContext": {"summary": "Speaks English and German.", "shouldUpdate": True}},
            "newFacts": [{"content": "Likes Kotlin", "category": "preference", "confidence": 0.9}],
            "factsToRemove": [java.id, maven.id],
        }))

    llm_server.set_handler(think)  # type: ignore[arg-type]
    auto.capture("u1", "s1", [{"role": "user", "content": "I moved to Kotlin and no longer use Maven"}])
    assert auto.flush(10)
    facts = {f.content: f for f in auto.list_facts("u1")}
    assert set(facts) == {"Uses Java 21 and Kotlin", "Business trip next week", "Likes Kotlin"}
    assert facts["Uses Java 21 and Kotlin"].source == "manual"
    profile = auto.get_profile("u1")
    assert profile.get(ProfileKey.WORK) == "Staff backend engineer."  # the user's edit won
    assert profile.get(ProfileKey.PERSONAL) == "Speaks English and German."  # the model's other change applied
    report = auto.results[-1].report
    assert report is not None and report.removed == [maven.id] and set(report.kept_edited) == {java.id, "workContext"}


def test_profile_edited_by_hand_is_read_from_the_file(auto: AutoMemory) -> None:
    place = place_of(auto)
    apply(place, UpdatePlan(profile={ProfileKey.WORK: "Designer."}))
    memdir = auto.places.user_auto_dir("u1")
    memdir.replace_chunk("profile.md", "Designer.", "Product designer at ACME.")
    assert place.read().profile.get(ProfileKey.WORK) == "Product designer at ACME."
    assert "Product designer at ACME." in auto.render_injection("u1")


def test_fact_api(auto: AutoMemory) -> None:
    added = auto.add_fact("u1", "Business trip to Berlin next week", "context", 0.9)
    assert added.source == "manual" and added.id.startswith("fact-")
    again = auto.add_fact("u1", "business trip to berlin next week!", Category.CONTEXT, 1.0)
    assert again.id == added.id and again.confidence == 1.0 and len(auto.list_facts("u1")) == 1
    edited = auto.update_fact("u1", added.id, content="Business trip to Munich next week", confidence=0.8)
    assert (edited.content, edited.confidence) == ("Business trip to Munich next week", 0.8)
    corr = auto.add_fact("u1", "Use metric units", "correction", 0.5, source_error="used miles")
    assert corr.confidence == 0.5 and corr.source_error == "used miles"  # a person's value is kept
    with pytest.raises(ValueError, match="category"):
        auto.add_fact("u1", "x", "secret")
    with pytest.raises(ValueError, match="between 0 and 1"):
        auto.add_fact("u1", "x", "goal", 1.5)
    with pytest.raises(ValueError, match="non-empty"):
        auto.add_fact("u1", "   ", "goal")
    with pytest.raises(ValueError, match="longer than"):
        auto.add_fact("u1", "x" * 401, "goal")
    with pytest.raises(FactNotFound):
        auto.update_fact("u1", "fact-nothere", confidence=0.9)
    with pytest.raises(InvalidName):
        auto.list_facts("../u2")
    assert auto.delete_fact("u1", added.id) and not auto.delete_fact("u1", added.id)
    assert not auto.delete_fact("u1", "../../../etc/passwd")
    assert [f.content for f in auto.list_facts("u1")] == ["Use metric units"]
    assert auto.list_facts("u2") == []
    shared = auto.add_fact(None, "The team ships on Thursdays", "context", shared=True)
    assert [f.id for f in auto.list_facts(None, shared=True)] == [shared.id]
    assert auto.places.user_auto_dir("u1").store.exists(f"memory/projects/default/memory/{shared.file}")
    auto.set_profile("u1", Profile({ProfileKey.TOP_OF_MIND: "Preparing the Q4 review\n## Work context\nsneaky"}))
    profile = auto.get_profile("u1")
    assert profile.sections == {ProfileKey.TOP_OF_MIND: "Preparing the Q4 review\n### Work context\nsneaky"}
    stored = parse_memory(auto.places.user_auto_dir("u1").store.get(PREFIX + "profile.md").data.decode())
    assert parse_profile(stored.body) == profile  # the file reads back the same sections
    with pytest.raises(ValueError, match="longer than"):
        auto.set_profile("u1", Profile({ProfileKey.WORK: "x" * 5000}))


def test_two_pods_updating_one_place_at_once_lose_nothing(make_config: Callable[..., MemoryConfig],
                                                          services: MemoryServices) -> None:
    other = MemoryServices.from_config(services.config)  # a second "pod": own clients, same store and Redis
    places = [AutoPlace(s.user_auto_dir("u1")) for s in (services, other)]
    errors: list[BaseException] = []

    def writer(place: AutoPlace, tag: str) -> None:
        try:
            for i in range(5):
                apply(place, UpdatePlan(new_facts=[fact(f"{tag} fact {i}")]))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(p, t)) for p, t in zip(places, "AB", strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    view = places[0].read()
    assert sorted(f.content for f in view.facts.values()) == sorted(f"{t} fact {i}" for t in "AB" for i in range(5))
    index = parse_index(services.store.get(PREFIX + "MEMORY.md").data.decode())
    assert len(index) == 10
    other.close()
