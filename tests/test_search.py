"""Body-aware search: the per-place index written by the commit, rebuilt by reindex, used by recall
and by the agent's ``search_memories`` tool; the light model skipped when the ranking is confident
or the model too slow for the deadline (checked against what the scripted server received)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness_memory import build_agent
from harness_memory.config import MemoryConfig
from harness_memory.llm_latency import LatencyTracker
from harness_memory.recall import recall
from harness_memory.recall.lexical import ScoredFile
from harness_memory.recall.select import skip_reason
from harness_memory.search import SearchIndex, clear_cache
from harness_memory.search.place import delta_key, index_key
from harness_memory.search.place import stored_index as search_stored_index
from harness_memory.services import MemoryServices, services_for
from harness_memory.tools import MemoryTools
from tests.fakellm import ScriptedLLM, delay, text, tool_calls


def memory(name: str, description: str, body: str, kind: str = "project") -> str:
    return f"---\nname: {name}\ndescription: {description}\ntype: {kind}\n---\n\n{body}\n"


NOTES = {
    "deploy.md": memory("Deploy", "How we deploy to staging", "Run make deploy.\nThen watch the canary."),
    "hobby.md": memory("Weekend", "What the user does on weekends",
                       "Hiking with friends.\nThe user keeps a zebrafish aquarium at home."),
    "style.md": memory("Style", "Python style rules", "Type hints everywhere, ruff clean."),
    "迁移.md": memory("数据库迁移", "数据库迁移的注意事项", "先在预发环境验证 Flyway 脚本，再灰度发布。"),
}


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    clear_cache()  # each test starts from the store, not from another test's pod cache
    yield
    clear_cache()


def stored_index(svc: MemoryServices, user: str = "u1") -> SearchIndex:
    return search_stored_index(svc.user_agent_dir(user))


@pytest.mark.parametrize("backend", ["local", "cos"])
def test_index_is_written_with_each_commit_and_rebuilt_by_reindex(services: Callable[..., MemoryServices],
                                                                   backend: str) -> None:
    svc = services(backend)
    own = svc.user_agent_dir("u1")
    own.save_many(list(NOTES.items()))
    index = stored_index(svc)
    manifest = own.manifest()
    assert set(index.docs) == set(NOTES)
    hobby = index.docs["hobby.md"]
    assert hobby.terms["zebrafish"] == 1 and hobby.terms["weekend"] >= 3  # body once, name weighted
    assert hobby.stamp == (manifest.entries["hobby.md"].size, manifest.entries["hobby.md"].updated_at)
    assert "迁移" in index.docs["迁移.md"].terms and "flyway" in index.docs["迁移.md"].terms

    own.replace_chunk("hobby.md", "zebrafish aquarium", "bonsai collection")
    index = stored_index(svc)
    assert "zebrafish" not in index.docs["hobby.md"].terms and "bonsai" in index.docs["hobby.md"].terms
    own.delete("style.md")
    assert set(stored_index(svc).docs) == set(NOTES) - {"style.md"}

    svc.store.delete_many([index_key(own), delta_key(own)])  # lost (or a place written before the index existed)
    own.reindex()
    rebuilt = stored_index(svc)
    assert set(rebuilt.docs) == set(NOTES) - {"style.md"} and "bonsai" in rebuilt.docs["hobby.md"].terms


def test_a_commit_fills_in_memories_the_index_lacks(services: Callable[..., MemoryServices]) -> None:
    svc = services("local")
    own = svc.user_agent_dir("u1")
    own.save_many(list(NOTES.items()))
    svc.store.delete_many([index_key(own), delta_key(own)])
    clear_cache()
    own.save("new.md", memory("New", "A new note", "Nothing special"))
    assert set(stored_index(svc).docs) == {*NOTES, "new.md"}  # read back from the files, bounded per commit


def test_recall_finds_a_memory_by_a_word_only_in_its_body(services: Callable[..., MemoryServices]) -> None:
    svc = services("local", recall={"use_model": False})
    own = svc.user_agent_dir("u1")
    own.save_many(list(NOTES.items()))
    result = recall(svc, "u1", "default", "how are my zebrafish doing?")
    assert result.files[:1] == ("hobby.md",) and "zebrafish aquarium" in result.text
    # Chinese and mixed Chinese/English queries match body words too
    assert recall(svc, "u1", "default", "Flyway 脚本怎么验证").files[:1] == ("迁移.md",)
    assert recall(svc, "u1", "default", "预发环境").files[:1] == ("迁移.md",)
    # without the index (body_search off) the body word is invisible: what the index adds
    plain = services("local", recall={"use_model": False, "body_search": False})
    assert "hobby.md" not in recall(plain, "u1", "default", "how are my zebrafish doing?").files


def test_recall_with_a_stale_index_still_sees_every_memory(services: Callable[..., MemoryServices]) -> None:
    svc = services("local", recall={"use_model": False})
    own = svc.user_agent_dir("u1")
    own.save_many(list(NOTES.items()))
    data = svc.store.get(index_key(own)).data
    own.save("pager.md", memory("Pager", "Who carries the pager this week", "Alice, then Bob."))
    svc.store.put(index_key(own), data)  # an index that missed the last commit
    clear_cache()
    assert recall(svc, "u1", "default", "who carries the pager?").files[:1] == ("pager.md",)  # by its line
    assert recall(svc, "u1", "default", "zebrafish").files[:1] == ("hobby.md",)  # the rest by their bodies


def test_recall_with_a_query_costs_at_most_one_extra_get_and_a_build_three(
        make_config: Callable[..., MemoryConfig]) -> None:
    cfg = make_config("cos", session={"enabled": False}, auto={"enabled": False}, recall={"use_model": False})
    svc = services_for(cfg)
    own = svc.user_agent_dir("u1")
    own.save_many(list(NOTES.items()))
    build_agent("u1", config=cfg)  # warms the shared view
    svc.store.request_count = 0
    build_agent("u1", config=cfg)
    assert svc.store.request_count <= 3  # no query: the index is not touched

    clear_cache()
    svc.store.request_count = 0
    manifest = own.manifest()
    before = svc.store.request_count
    result = recall(svc, "u1", "default", "zebrafish", manifest=manifest)
    assert result.files == ("hobby.md",)
    cold = svc.store.request_count - before
    assert cold == 3  # the index (whole + delta, read together: pod cache cold) + the chosen file
    before = svc.store.request_count
    recall(svc, "u1", "default", "zebrafish", manifest=manifest)
    assert svc.store.request_count - before == 1  # warm: the chosen file only


# -- the search tool ------------------------------------------------------------------------------------
def test_search_memories_tool_own_and_shared_and_path_safe(services: Callable[..., MemoryServices]) -> None:
    svc = services("local")
    svc.user_agent_dir("u1").save_many(list(NOTES.items()))
    svc.shared_agent_dir().save("oncall.md", memory("On-call", "Team on-call rules", "Escalate to the zebrafish "
                                                    "lab lead after 10 minutes.", "reference"))
    svc.user_agent_dir("u2").save("secret.md", memory("Secret", "u2's note", "zebrafish secret of user two"))
    tools = svc.memory_tools("u1")
    out = tools.search_memories("zebrafish")
    assert out.startswith("- hobby.md (project) — What the user does on weekends")
    assert "The user keeps a zebrafish aquarium at home." in out and "Hiking" not in out  # the matching line
    assert "- shared/oncall.md (reference)" in out and "secret" not in out  # another user's place: never
    assert tools.search_memories("../../u2/secret").startswith("No memory matches")
    assert tools.search_memories("   ").startswith("Error")
    assert "迁移.md" in tools.search_memories("灰度发布")


@pytest.mark.parametrize("mode", ["run", "arun"])
def test_agent_calls_search_memories(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM,
                                     mode: str) -> None:
    cfg = make_config("local", model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      session={"enabled": False}, auto={"enabled": False})
    services_for(cfg).user_agent_dir("u1").save_many(list(NOTES.items()))
    llm_server.script(tool_calls([("search_memories", {"query": "zebrafish", "limit": 3})]), text("Your fish."))
    agent = build_agent("u1", config=cfg)
    out = agent.run("what pets?") if mode == "run" else asyncio.run(agent.arun("what pets?"))
    assert out.content == "Your fish."
    first, second = llm_server.chat_requests
    assert "search_memories" in {t["function"]["name"] for t in first.tools}
    assert "search_memories(query)" in str(first.messages[0]["content"])  # the prompt says when to use it
    tool_msg = [m for m in second.messages if m["role"] == "tool"][-1]
    assert "hobby.md" in tool_msg["content"] and "zebrafish aquarium" in tool_msg["content"]


def test_search_tool_can_be_turned_off_and_wins_over_agno_tools_of_its_name(
        make_config: Callable[..., MemoryConfig]) -> None:
    from agno.tools import Toolkit

    def search_memories(query: str) -> str:
        """Someone else's tool of the same name."""
        return "theirs"

    def keep_me(x: int) -> int:
        """Unrelated tool."""
        return x

    cfg = make_config("local", session={"enabled": False}, auto={"enabled": False})
    mixed = Toolkit(name="mixed", tools=[keep_me, search_memories])
    agent = build_agent("u1", config=cfg, tools=[search_memories, mixed])
    assert isinstance(agent.tools[0], MemoryTools) and "search_memories" in agent.tools[0].functions
    assert len(agent.tools) == 2 and list(mixed.functions) == ["keep_me"]  # the clashing ones are dropped
    assert "search_memories(query)" in str(agent.additional_context)

    off = make_config("local", recall={"search_tool": False}, session={"enabled": False}, auto={"enabled": False})
    agent = build_agent("u1", config=off)
    tools = [t for t in agent.tools or [] if isinstance(t, MemoryTools)]
    assert tools and "search_memories" not in tools[0].functions
    assert "search_memories" not in str(agent.additional_context)  # the prompt does not offer it either


# -- fewer model calls --------------------------------------------------------------------------------
def test_skip_reason_margin() -> None:
    ranked = [ScoredFile(f"f{i}", s) for i, s in enumerate([10.0, 9.0, 8, 7, 6, 5, 4])]
    assert skip_reason(ranked, 5, 0.3) is None  # a close race among more than five: ask
    assert skip_reason([ScoredFile("a", 10.0), *ranked[1:]], 5, 0.05) == "confident"  # 10 vs 9 ≥ 5 %
    assert skip_reason(ranked[:5], 5, 0.3) == "confident"  # five or fewer match: all are returned anyway
    assert skip_reason([], 5, 0.3) == "confident"
    assert skip_reason(ranked[:2], 5, None) is None  # no margin configured: always ask


def test_confident_ranking_skips_the_model_and_close_one_asks(services: Callable[..., MemoryServices],
                                                              llm_server: ScriptedLLM) -> None:
    svc = services("local", model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                   recall={"model_above": 0})
    own = svc.user_agent_dir("u1")
    own.save_many([*NOTES.items()] + [(f"n{i}.md", memory(f"n{i}", f"staging note {i}", f"staging body {i}"))
                                      for i in range(6)])
    assert recall(svc, "u1", "default", "zebrafish").files == ("hobby.md",)
    assert llm_server.chat_requests == []  # one clear match: no model call
    llm_server.script(text('{"files": ["n3.md"]}'))
    assert recall(svc, "u1", "default", "staging").files == ("n3.md",)  # seven close matches: the model picks
    (req,) = llm_server.chat_requests
    assert "begins: staging body 3" in req.messages[1]["content"]  # the body's first words beside the line


def test_timeout_keeps_the_ranking_and_a_slow_model_is_then_skipped(
        services: Callable[..., MemoryServices], llm_server: ScriptedLLM) -> None:
    svc = services("local", model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                   recall={"model_above": 0, "confident_margin": None, "model_timeout": 0.5})
    own = svc.user_agent_dir("u1")
    own.save_many(list(NOTES.items()))
    llm_server.script(delay(2.0, text('{"files": ["style.md"]}')))
    assert recall(svc, "u1", "default", "zebrafish").files[:1] == ("hobby.md",)  # timeout: the ranking answers
    assert len(llm_server.chat_requests) == 1
    # the measured latency (≥ the 0.5 s deadline) cannot meet the deadline: no request at all now
    assert recall(svc, "u1", "default", "deploy to staging").files[:1] == ("deploy.md",)
    assert len(llm_server.chat_requests) == 1


def test_latency_tracker_probes_after_an_interval() -> None:
    tracker = LatencyTracker(probe_seconds=0.0)
    assert tracker.can_meet("m", "recall", 1.0)  # nothing measured yet
    tracker.record("m", "recall", 5.0)
    assert tracker.expected("m", "recall") == 5.0
    assert tracker.can_meet("m", "recall", 1.0)  # probe interval 0: a probe is always due
    slow = LatencyTracker(probe_seconds=3600)
    slow.record("m", "recall", 5.0)
    assert not slow.can_meet("m", "recall", 1.0) and slow.can_meet("m", "recall", 10.0)
    for _ in range(20):
        slow.record("m", "recall", 0.1)  # it got faster: the average follows
    assert slow.can_meet("m", "recall", 1.0)


# -- the semantic tier ----------------------------------------------------------------------------------
CONCEPTS = [{"car", "corolla", "vehicle", "drive", "garage"}, {"zebrafish", "aquarium", "pet", "fish"},
            {"deploy", "staging", "canary", "release"}, {"python", "ruff", "style", "hint"}]


def concept_vector(text: str) -> list[float]:
    """A scripted embedding: one dimension per concept (words of one meaning land together)."""
    words = {w.strip(".,?!:;*\"'").lower() for w in text.split()}
    return [float(len(words & c)) + 0.01 for c in CONCEPTS]


def embed_config(llm: ScriptedLLM, **recall: Any) -> dict[str, Any]:
    return {"embed": {"model": "fake-embed", "base_url": llm.base_url, "api_key": "k"},
            "recall": {"use_model": False, **recall}}


def test_semantic_tier_embeds_in_the_background_and_fuses(services: Callable[..., MemoryServices],
                                                         llm_server: ScriptedLLM) -> None:
    llm_server.set_embedder(concept_vector)
    svc = services("cos", **embed_config(llm_server))
    tier = svc.semantic()
    assert tier is not None
    own = svc.user_agent_dir("u1")
    own.save_many([*NOTES.items(), ("car.md", memory("Car", "The user's Corolla", "Bought in 2019, grey."))])
    tier.wait_idle()  # the save returned before the embeddings were made
    (embedded,) = [r for r in llm_server.embedding_requests]
    assert embedded.body["model"] == "fake-embed" and len(embedded.body["input"]) == 5
    stored = svc.store.get(own.place.reserved_key(".search-vectors.bin")).data
    from harness_memory.recall.semantic import Vectors

    vectors = Vectors.from_bytes(stored)
    assert set(vectors.files) == {*NOTES, "car.md"} and vectors.matrix.shape == (5, len(CONCEPTS))
    # no shared word with "car.md": found by meaning only
    result = recall(svc, "u1", "default", "when did I get my vehicle?")
    assert result.files[:1] == ("car.md",)
    assert ["when did I get my vehicle?"] in [r.body["input"] for r in llm_server.embedding_requests]
    lexical_only = services("cos", recall={"use_model": False})
    assert "car.md" not in recall(lexical_only, "u1", "default", "when did I get my vehicle?").files

    own.save("new.md", memory("Garage", "Where to park", "Level -2, spot 14."))
    tier.wait_idle()
    assert len(llm_server.embedding_requests[-1].body["input"]) == 1  # only what changed is embedded


def test_missing_vectors_are_filled_lazily_and_no_call_without_config(
        services: Callable[..., MemoryServices], llm_server: ScriptedLLM) -> None:
    plain = services("local", recall={"use_model": False})
    assert plain.semantic() is None
    plain.user_agent_dir("u1").save_many(list(NOTES.items()))
    recall(plain, "u1", "default", "zebrafish")
    assert llm_server.requests == []  # unconfigured: not a single request to any endpoint

    llm_server.set_embedder(concept_vector)
    svc = services("local", **embed_config(llm_server))
    tier = svc.semantic()
    assert tier is not None
    own = svc.user_agent_dir("u1")
    assert own.manifest().entries and svc.store.get_or_none(own.place.reserved_key(".search-vectors.bin")) is None
    # memories written before the tier existed: the first query ranks by words and schedules the fill
    assert recall(svc, "u1", "default", "my zebrafish").files[:1] == ("hobby.md",)
    tier.wait_idle()
    assert svc.store.get_or_none(own.place.reserved_key(".search-vectors.bin")) is not None
    llm_server.set_embedder(None)  # the endpoint goes away: recall keeps the lexical answer
    assert recall(svc, "u1", "default", "zebrafish at home").files[:1] == ("hobby.md",)
    asked = len(llm_server.requests)
    assert tier.down and recall(svc, "u1", "default", "zebrafish again").files[:1] == ("hobby.md",)
    assert len(llm_server.requests) == asked  # marked down: the next queries do not wait on it


def test_labelled_set_through_recall_and_the_search_index(services: Callable[..., MemoryServices]) -> None:
    import json
    from pathlib import Path

    data = json.loads((Path(__file__).parent / "data" / "recall_set.json").read_text(encoding="utf-8"))
    svc = services("local", recall={"use_model": False})
    svc.user_agent_dir("u1").save_many([(m["file"], memory(json.dumps(m["name"], ensure_ascii=False),
                                                           json.dumps(m["description"], ensure_ascii=False),
                                                           m["body"], m["type"])) for m in data["memories"]])
    missed = [q["query"] for q in data["queries"]
              if q["expected"] not in recall(svc, "u1", "default", q["query"]).chosen]
    assert missed == []  # every labelled query finds its memory in the top 5, as by the manifest lines


def test_a_failing_index_write_never_fails_the_save(local_store: Any) -> None:
    from harness_memory.layout import Place
    from harness_memory.memdir import MemoryDir
    from harness_memory.recall.ranking import PlaceRanker, places_for
    from harness_memory.search import place as search_place
    from tests.faults import FaultyStore, on

    faulty = FaultyStore(local_store)
    own = MemoryDir(faulty, Place.user_agent("u1"), listeners=(search_place.SearchListener(),))
    faulty.fail(on("put", ".search-index.bin"))
    result = own.save("hobby.md", NOTES["hobby.md"])  # the memory is committed; only the index write failed
    assert result.created and "hobby.md" in own.manifest().entries
    assert faulty.get_or_none(index_key(own)) is None
    ranker = PlaceRanker(places_for(own, own.manifest(), None, None))
    assert [s.file for s in ranker("what does the user do on weekends", 5)] == ["hobby.md"]  # by its line
    assert ranker("zebrafish", 5) == []  # the body word waits for the next write or reindex
    faulty.clear()
    own.reindex()
    assert [s.file for s in PlaceRanker(places_for(own, own.manifest(), None, None))("zebrafish", 5)] == ["hobby.md"]


def test_another_pods_write_is_seen_with_one_get(services: Callable[..., MemoryServices]) -> None:
    pod_a, pod_b = services("cos", recall={"use_model": False}), services("cos", recall={"use_model": False})
    pod_a.user_agent_dir("u1").save_many(list(NOTES.items()))
    assert recall(pod_a, "u1", "default", "zebrafish").files == ("hobby.md",)  # pod A's cache is warm
    pod_b.user_agent_dir("u1").save("walrus.md", memory("Zoo", "A trip", "We saw a walrus at the zoo."))
    manifest = pod_a.user_agent_dir("u1").manifest()
    before = pod_a.store.request_count
    assert recall(pod_a, "u1", "default", "walrus", manifest=manifest).files == ("walrus.md",)
    assert pod_a.store.request_count - before == 2  # the index (new manifest version) + the chosen file
