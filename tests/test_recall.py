"""Relevant recall: model selection (checked against what the scripted server received), the lexical
fallback over a labelled Chinese/English set, context rendering caps, surfaced tracking, and the
recalled text reaching a real agno Agent's prompt (build time and per-run pre-hook)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from agno.agent import Agent
from redis.backoff import NoBackoff
from redis.retry import Retry

from harness_memory.agent_model import make_agent_model
from harness_memory.config import MemoryConfig, RecallConfig
from harness_memory.layout import Place
from harness_memory.llm import LightModel
from harness_memory.memdir import Manifest, ManifestEntry, MemoryDir
from harness_memory.recall import (
    SurfacedTracker,
    find_relevant_memories,
    make_recall_pre_hook,
    recall_for_query,
    tokenize,
)
from harness_memory.recall.context import load_recalled_context, staleness_note
from harness_memory.recall.lexical import lexical_rank
from harness_memory.recall.service import surfaced_tracker
from harness_memory.services import MemoryServices
from harness_memory.storage import LocalStore
from tests.fakellm import ScriptedLLM, delay, error, raw, text

DATA = json.loads((Path(__file__).parent / "data" / "recall_set.json").read_text(encoding="utf-8"))
DAY = 86_400.0
ISO = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def memory(name: str, description: str, body: str, kind: str = "user") -> str:
    return f"---\nname: {name}\ndescription: {description}\ntype: {kind}\n---\n\n{body}\n"


SEED = {
    "user_role.md": memory("User role", "The user is a backend engineer on payments", "Go, Postgres. BODY-ROLE"),
    "feedback_tests.md": memory("Real DB in tests", "Integration tests hit a real database, never mocks",
                                "Mocks hid a broken migration. BODY-TESTS", "feedback"),
    "project_freeze.md": memory("Release freeze", "Merge freeze for the mobile release starts 2026-12-03",
                                "Only critical fixes. BODY-FREEZE", "project"),
    "reference_dash.md": memory("Latency dashboard", "Grafana board for API latency",
                                "grafana.internal/d/api. BODY-DASH", "reference"),
    "部署流程.md": memory("部署流程", "生产环境部署流程：预发验证、灰度、全量", "先灰度 10%。BODY-DEPLOY", "project"),
    "user_tz.md": memory("Time zone", "The user works in Asia/Shanghai", "10:00-19:00. BODY-TZ"),
    "feedback_style.md": memory("Python style", "Type hints everywhere and ruff clean", "BODY-STYLE", "feedback"),
}


def seed(memdir: MemoryDir, items: dict[str, str] = SEED) -> Manifest:
    for file, content in items.items():
        memdir.save(file, content)
    return memdir.manifest()


def model_config(llm_server: ScriptedLLM, **recall: Any) -> dict[str, Any]:
    recall.setdefault("confident_margin", None)  # these tests are about the model's pick: always ask
    return {"model": {"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
            "recall": recall}


@pytest.fixture
def own(local_store: LocalStore) -> MemoryDir:
    return MemoryDir(local_store, Place.user_agent("u1", "default"))


@pytest.fixture
def light(llm_server: ScriptedLLM) -> Iterator[LightModel]:
    model = LightModel("fake-model", llm_server.base_url, "k", timeout=10)
    yield model
    model.close()


# -- tokenisation and the labelled set -----------------------------------------------------------
def test_tokenize_mixed_text() -> None:
    tokens = tokenize("生产环境的部署流程：先跑 PyTest，再发布到 K8s 集群！Deployments, user_role.md")
    assert {"生产", "环境", "部署", "流程", "pytest", "k8s", "集群", "deployment", "user", "role"} <= set(tokens)
    assert not {"的", "：", "，", "！", "md", ""} & set(tokens)
    assert tokenize("ＡＰＩ　Ｌａｔｅｎｃｙ") == ["api", "latency"]  # full-width folded
    assert tokenize("") == [] and tokenize("？！。") == []


def _entries(with_time: float = 1_700_000_000.0) -> list[ManifestEntry]:
    return [ManifestEntry(file=m["file"], name=m["name"], description=m["description"], type=m["type"],
                          updated_at=with_time) for m in DATA["memories"]]


def test_labelled_set_is_big_and_bilingual() -> None:
    langs = [q["lang"] for q in DATA["queries"]]
    assert len(langs) >= 20 and langs.count("zh") >= 8 and langs.count("en") >= 8
    files = {m["file"] for m in DATA["memories"]}
    assert all(q["expected"] in files for q in DATA["queries"])


@pytest.mark.parametrize("case", DATA["queries"], ids=lambda c: c["query"][:30])
def test_lexical_recall_ranks_expected_file_in_top_5(case: dict[str, str]) -> None:
    manifest = Manifest(entries={e.file: e for e in _entries()})
    top = find_relevant_memories(case["query"], manifest, model=None)
    assert case["expected"] in top, (case["query"], top)
    assert len(top) <= 5
    with_bodies = find_relevant_memories(case["query"], manifest,
                                         bodies={m["file"]: m["body"] for m in DATA["memories"]})
    assert case["expected"] in with_bodies


def test_lexical_returns_nothing_for_unrelated_query_and_respects_surfaced() -> None:
    entries = _entries()
    assert lexical_rank("zxqv wombat", entries) == []
    manifest = Manifest(entries={e.file: e for e in entries})
    first = find_relevant_memories("Which dashboard shows API latency?", manifest)
    assert first[0] == "reference_grafana_latency.md"
    again = find_relevant_memories("Which dashboard shows API latency?", manifest, already_surfaced=first)
    assert not set(first) & set(again)


# -- model selection --------------------------------------------------------------------------------
def test_model_request_carries_manifest_lines_and_query_but_no_bodies(
        own: MemoryDir, light: LightModel, llm_server: ScriptedLLM) -> None:
    manifest = seed(own)
    llm_server.script(text(json.dumps({"files": ["feedback_tests.md", "invented_file.md", "user_role.md",
                                                 "../other_user/secret.md", "部署流程.md", "user_tz.md",
                                                 "reference_dash.md", "feedback_style.md"]})))
    picked = find_relevant_memories("Should integration tests mock the database?", manifest, model=light)
    assert picked == ["feedback_tests.md", "user_role.md", "部署流程.md", "user_tz.md", "reference_dash.md"]

    (req,) = llm_server.chat_requests
    assert req.model == "fake-model" and req.body["response_format"] == {"type": "json_object"}
    sent = "\n".join(m["content"] for m in req.messages)
    assert "Should integration tests mock the database?" in sent
    assert "AT MOST 5" in req.messages[0]["content"]
    for file, entry in manifest.entries.items():
        assert re.search(rf"- \[{entry.type}\] {re.escape(file)} \({ISO}\) — {re.escape(entry.description)}", sent)
    assert "BODY-" not in sent  # bodies never leave the store for ranking


def test_model_answer_shapes_and_slips_are_tolerated(own: MemoryDir, light: LightModel,
                                                     llm_server: ScriptedLLM) -> None:
    manifest = seed(own)
    llm_server.script(
        raw('Sure! ```json\n{"selected_memories": ["user_role", "./USER_TZ.md", "user_role.md",]}\n```'),
        text('["reference_dash.md"]'),
        text(json.dumps({"files": [{"file": "feedback_style.md"}]})),
    )
    assert find_relevant_memories("q1", manifest, model=light) == ["user_role.md", "user_tz.md"]
    assert find_relevant_memories("q2", manifest, model=light) == ["reference_dash.md"]
    assert find_relevant_memories("q3", manifest, model=light) == ["feedback_style.md"]


def test_a_well_formed_empty_answer_is_respected(own: MemoryDir, light: LightModel,
                                                 llm_server: ScriptedLLM) -> None:
    manifest = seed(own)
    llm_server.script(text('{"files": []}'))
    assert find_relevant_memories("what is the Grafana latency dashboard?", manifest, model=light) == []


@pytest.mark.parametrize("answer", [
    text("I think the dashboard one is relevant."),           # no JSON
    text('{"files": ["made_up.md", "also_made_up.md"]}'),    # only invented names
    text('{"answer": "reference_dash.md"}'),                  # no list
    error(500, "upstream exploded"),                          # HTTP error
    delay(3.0, text('{"files": ["user_role.md"]}')),          # slower than the timeout
], ids=["prose", "invented", "no-list", "http-500", "timeout"])
def test_bad_answers_fall_back_to_lexical(own: MemoryDir, light: LightModel, llm_server: ScriptedLLM,
                                          answer: Any) -> None:
    manifest = seed(own)
    llm_server.script(answer)
    picked = find_relevant_memories("Grafana dashboard for API latency", manifest, model=light, timeout=0.5)
    assert picked and picked[0] == "reference_dash.md"
    assert len(llm_server.chat_requests) == 1


def test_surfaced_files_are_neither_shown_nor_returned(own: MemoryDir, light: LightModel,
                                                       llm_server: ScriptedLLM) -> None:
    manifest = seed(own)
    llm_server.script(text('{"files": ["user_role.md", "user_tz.md"]}'))
    picked = find_relevant_memories("who am I", manifest, model=light, already_surfaced={"user_role.md"})
    assert picked == ["user_tz.md"]
    sent = llm_server.chat_requests[0].messages[1]["content"]
    assert "user_role.md" not in sent and "user_tz.md" in sent


def test_large_manifest_is_prefiltered(light: LightModel, llm_server: ScriptedLLM) -> None:
    entries = {f"note_{i:04d}.md": ManifestEntry(f"note_{i:04d}.md", f"n{i}", f"routine note number {i}",
                                                 "project", updated_at=1_700_000_000 + i) for i in range(500)}
    entries["kafka_lag.md"] = ManifestEntry("kafka_lag.md", "Kafka lag", "How to read consumer lag in Kafka",
                                            "reference", updated_at=1_600_000_000)
    llm_server.script(text('{"files": ["kafka_lag.md"]}'))
    picked = find_relevant_memories("kafka consumer lag", Manifest(entries=entries), model=light,
                                    max_candidates=50)
    assert picked == ["kafka_lag.md"]
    sent = llm_server.chat_requests[0].messages[1]["content"]
    assert sent.count("\n- [") == 50 and "kafka_lag.md" in sent and "note_0499.md" in sent


# -- rendering ---------------------------------------------------------------------------------------
def test_staleness_note() -> None:
    assert staleness_note(3600) is None and staleness_note(0.99 * DAY) is None
    assert staleness_note(1.5 * DAY) == "This memory is 1 day old; verify before relying on it."
    assert staleness_note(12 * DAY + 5) == "This memory is 12 days old; verify before relying on it."
    assert staleness_note(3 * DAY, stale_after_days=7) is None


def test_load_recalled_context_caps_and_staleness(own: MemoryDir) -> None:
    seed(own)
    long_body = "\n".join(f"line {i} " + "x" * 30 for i in range(400))
    own.save("long.md", memory("Long", "A very long memory", long_body))
    now = own.read("user_role.md").last_modified + 3 * DAY + 60
    block = load_recalled_context(own, ["user_role.md", "long.md", "missing.md"],
                                  config=RecallConfig(), now=now)
    assert block.startswith("# Recalled memories")
    assert "## user_role.md — User role (user, modified " in block and "BODY-ROLE" in block
    assert block.count("This memory is 3 days old; verify before relying on it.") == 2
    assert "missing.md" not in block
    section = block[block.index("## long.md"):]
    assert len(section.encode()) <= 4096 + 8
    assert "line 0 " in section and "line 399" not in section
    shown = re.search(r"cut at (\d+) of 400 lines; read_file\(\"long.md\", offset=(\d+)\)", section)
    assert shown and int(shown.group(2)) == int(shown.group(1)) + 6  # frontmatter (5) + blank line

    fresh = load_recalled_context(own, ["user_role.md"], config=RecallConfig(),
                                  now=own.read("user_role.md").last_modified + 60)
    assert "days old" not in fresh and "day old" not in fresh

    lines_cap = load_recalled_context(own, ["long.md"], config=RecallConfig(file_max_lines=10), now=now)
    assert "line 9 " in lines_cap and "line 10 " not in lines_cap and "cut at 10 of 400 lines" in lines_cap


def test_total_cap_leaves_files_out_visibly(own: MemoryDir) -> None:
    big = "\n".join("y" * 60 for _ in range(200))
    files = {f"big_{i}.md": memory(f"Big {i}", f"big memory {i}", big) for i in range(5)}
    seed(own, files)
    cfg = RecallConfig(total_max_bytes=9000)
    block = load_recalled_context(own, list(files), config=cfg)
    assert len(block.encode()) <= 9000
    assert "## big_0.md" in block and "## big_1.md" in block
    left_out = block[block.index("left out for space:"):]
    assert "big_4.md" in left_out
    assert all((f"## {f}" in block) != (f in left_out) for f in files)  # each file: shown or named
    assert load_recalled_context(own, [], config=cfg) == ""
    assert load_recalled_context(own, ["nope.md"], config=cfg) == ""


# -- surfaced tracking --------------------------------------------------------------------------------
def test_in_process_tracker_is_bounded_and_scoped() -> None:
    tracker = SurfacedTracker(None, max_sessions=3, ttl_seconds=3600)
    tracker.mark("s1", ["a.md"], user_id="u1")
    tracker.mark("s1", ["b.md"], user_id="u1")
    assert tracker.surfaced("s1", user_id="u1") == {"a.md", "b.md"}
    assert tracker.surfaced("s1", user_id="u2") == frozenset()  # another user's session of the same id
    assert tracker.surfaced("s1", user_id="u1", agent_type="coder") == frozenset()
    for i in range(2, 6):
        tracker.mark(f"s{i}", ["c.md"], user_id="u1")
    assert tracker.local_session_count() == 3
    assert tracker.surfaced("s1", user_id="u1") == frozenset()  # least recently used, dropped
    tracker.forget("s5", user_id="u1")
    assert tracker.surfaced("s5", user_id="u1") == frozenset()


def test_redis_tracker_key_ttl_and_outage(services: Callable[..., MemoryServices]) -> None:
    svc = services("local", redis=True, session={"ttl_seconds": 600})
    tracker = surfaced_tracker(svc)
    assert surfaced_tracker(svc) is tracker
    tracker.mark("sess-1", ["user_role.md", "shared/team.md"], user_id="u1")
    key = f"{svc.config.redis.key_prefix}recall:surfaced:u1:default:sess-1"
    assert svc.redis is not None
    assert {m.decode() for m in svc.redis.smembers(key)} == {"user_role.md", "shared/team.md"}
    assert 0 < svc.redis.ttl(key) <= 600
    # a second pod (its own services, same Redis) sees what the first surfaced
    other = services("local", redis=True, session={"ttl_seconds": 600})
    assert surfaced_tracker(other).surfaced("sess-1", user_id="u1") == {"user_role.md", "shared/team.md"}

    unreachable = redis.Redis(host="127.0.0.1", port=9, socket_timeout=0.5, socket_connect_timeout=0.5,
                              retry=Retry(NoBackoff(), 0))
    dead = SurfacedTracker(unreachable, retry_after_seconds=60)
    dead.mark("s", ["x.md"], user_id="u")  # Redis unreachable: remembered in-process, no exception
    assert dead.surfaced("s", user_id="u") == {"x.md"}


# -- recall for a user, end to end ----------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["local", "cos"])
def test_recall_for_query_own_and_shared_with_session_tracking(
        services: Callable[..., MemoryServices], llm_server: ScriptedLLM, backend: str) -> None:
    svc = services(backend, redis=backend == "cos", **model_config(llm_server))
    own = svc.user_agent_dir("u1")
    manifest = seed(own)
    svc.shared_agent_dir().save("team_oncall.md", memory("On-call", "Who is on call this week", "BODY-ONCALL",
                                                         "reference"))
    llm_server.script(text('{"files": ["shared/team_oncall.md", "user_role.md", "ghost.md"]}'),
                      text('{"files": ["user_role.md", "user_tz.md"]}'))
    block = recall_for_query(svc, "u1", "default", "who is on call, and what do I work on?",
                             session_id="s-1", manifest=manifest)
    assert "## shared/team_oncall.md — On-call" in block and "BODY-ONCALL" in block
    assert "## user_role.md — User role" in block and "BODY-ROLE" in block and "ghost" not in block
    first = llm_server.chat_requests[0].messages[1]["content"]
    assert "shared/team_oncall.md" in first and "user_role.md" in first

    again = recall_for_query(svc, "u1", "default", "what do I work on and when?", session_id="s-1")
    assert "BODY-TZ" in again and "BODY-ROLE" not in again  # already surfaced in this session
    second = llm_server.chat_requests[1].messages[1]["content"]
    assert "user_role.md" not in second and "shared/team_oncall.md" not in second

    # script exhausted: the server answers HTTP 500 and the lexical ranking takes over
    other_session = recall_for_query(svc, "u1", "default", "api latency dashboard", session_id="s-2")
    assert "## reference_dash.md" in other_session and "BODY-DASH" in other_session


def test_recall_without_model_chinese_query_and_config_switches(services: Callable[..., MemoryServices],
                                                                llm_server: ScriptedLLM) -> None:
    svc = services("local", recall={"use_model": False})
    seed(svc.user_agent_dir("u1"))
    block = recall_for_query(svc, "u1", "default", "生产环境怎么部署？")
    assert "## 部署流程.md" in block and "BODY-DEPLOY" in block
    assert recall_for_query(svc, "u1", "default", "   ") == ""

    off = services("local", **model_config(llm_server, enabled=False))
    assert recall_for_query(off, "u1", "default", "生产环境怎么部署？") == ""
    two = services("local", **model_config(llm_server, max_files=2))
    llm_server.script(text('{"files": ["user_role.md", "user_tz.md", "部署流程.md"]}'))
    block = recall_for_query(two, "u1", "default", "tell me everything")
    assert block.count("\n## ") == 2 and "AT MOST 2" in llm_server.chat_requests[0].messages[0]["content"]


def test_recall_never_raises(tmp_path: Path) -> None:
    cfg = MemoryConfig.load(env={}, store={"backend": "cos", "cos_bucket": "b", "cos_domain": "127.0.0.1:9/b",
                                           "cos_scheme": "http", "cos_anonymous": True, "cos_timeout": 1.0,
                                           "cos_retries": 0})
    svc = MemoryServices.from_config(cfg)
    try:
        assert recall_for_query(svc, "u1", "default", "anything", session_id="s") == ""
        assert recall_for_query(svc, "../evil", "default", "anything") == ""
    finally:
        svc.close()


# -- the recalled text reaches a real agno Agent ------------------------------------------------------------
def test_recalled_block_reaches_the_agent_system_prompt(services: Callable[..., MemoryServices],
                                                        llm_server: ScriptedLLM) -> None:
    svc = services("local", **model_config(llm_server))
    manifest = seed(svc.user_agent_dir("u1"))
    llm_server.script(text('{"files": ["feedback_tests.md"]}'), text("Use the real database."))
    block = recall_for_query(svc, "u1", "default", "should I mock the DB?", manifest=manifest)
    agent = Agent(model=make_agent_model(svc.config.model), telemetry=False, additional_context=block)
    out = agent.run("should I mock the DB?")
    assert out.content == "Use the real database."
    recall_req, agent_req = llm_server.chat_requests
    # the model sees the first words of each body beside its description (the search index's snippet)
    assert "begins: Mocks hid a broken migration. BODY-TESTS" in recall_req.messages[1]["content"]
    system = agent_req.messages[0]
    assert system["role"] == "system"
    assert "# Recalled memories" in system["content"]
    assert "Mocks hid a broken migration. BODY-TESTS" in system["content"]
    assert agent_req.last_user_text() == "should I mock the DB?"


@pytest.mark.parametrize("mode", ["run", "arun"])
async def test_pre_hook_recalls_per_run(services: Callable[..., MemoryServices], llm_server: ScriptedLLM,
                                        mode: str) -> None:
    svc = services("local", **model_config(llm_server))
    seed(svc.user_agent_dir("u1"))
    llm_server.script(text('{"files": ["project_freeze.md"]}'), text("Freeze starts 2026-12-03."),
                      text('{"files": ["project_freeze.md", "user_tz.md"]}'), text("Asia/Shanghai."))
    agent = Agent(model=make_agent_model(svc.config.model), telemetry=False,
                  pre_hooks=[make_recall_pre_hook(svc)])

    async def go(message: str) -> Any:
        if mode == "arun":
            return await agent.arun(message, user_id="u1", session_id="sess-9")
        return agent.run(message, user_id="u1", session_id="sess-9")

    first = await go("when is the merge freeze?")
    assert first.content == "Freeze starts 2026-12-03."
    recall_req, agent_req = llm_server.chat_requests[:2]
    assert "when is the merge freeze?" in recall_req.messages[1]["content"]
    user_text = agent_req.last_user_text()
    assert user_text.startswith("<recalled-memories>\n# Recalled memories")
    assert "BODY-FREEZE" in user_text and user_text.endswith("</recalled-memories>\n\nwhen is the merge freeze?")

    await go("and what time zone am I in?")
    recall2, agent2 = llm_server.chat_requests[2:4]
    assert "project_freeze.md" not in recall2.messages[1]["content"]  # surfaced in this session already
    assert "BODY-TZ" in agent2.last_user_text() and "BODY-FREEZE" not in agent2.last_user_text()


def test_pre_hook_skips_the_query_recalled_at_build_time(services: Callable[..., MemoryServices],
                                                         llm_server: ScriptedLLM) -> None:
    svc = services("local", **model_config(llm_server))
    seed(svc.user_agent_dir("u1"))
    llm_server.script(text("ok"))
    agent = Agent(model=make_agent_model(svc.config.model), telemetry=False, user_id="u1",
                  pre_hooks=[make_recall_pre_hook(svc, skip_first_query="hello there")])
    agent.run("hello there")
    (only,) = llm_server.chat_requests
    assert only.last_user_text() == "hello there"


def test_a_handful_of_memories_needs_no_model_call(services: Callable[..., MemoryServices],
                                                   llm_server: ScriptedLLM) -> None:
    svc = services(model={"model": "fake-model", "base_url": llm_server.base_url},
                   recall={"model_above": 5, "confident_margin": None})
    mine = svc.user_agent_dir("u1", "default")
    note = "---\nname: {n}\ndescription: {d}\ntype: project\n---\n\n{b}\n"
    mine.save_many([("deploy.md", note.format(n="deploy", d="how to deploy to staging", b="make deploy")),
                    ("style.md", note.format(n="style", d="python style rules", b="ruff"))])
    block = recall_for_query(svc, "u1", "default", "how do I deploy to staging?")
    assert "make deploy" in block and "ruff" not in block
    assert llm_server.chat_requests == []  # two candidates: lexical, no model call
    mine.save_many([(f"n{i}.md", note.format(n=f"n{i}", d=f"note {i} about staging", b=f"body {i}"))
                    for i in range(6)])
    llm_server.script(text('{"files": ["deploy.md"]}'))
    assert "make deploy" in recall_for_query(svc, "u1", "default", "how do I deploy to staging?")
    assert len(llm_server.chat_requests) == 1  # eight candidates: the model chooses
