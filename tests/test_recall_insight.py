"""When each memory was last recalled, and why a session got what it got (``recall/insight.py``),
through recall itself, the sessions and file-listing API, Redis and the in-process fallback.

Checked where it lands: the Redis keys (with their TTLs), the store (unchanged by the record),
and what the endpoints answer for the owner and for another user.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry

from harness_memory.config import MemoryConfig
from harness_memory.recall import recall_for_query
from harness_memory.recall.insight import LAST_RECALLED_TTL, Candidate, RecallDecision, RecallInsight
from harness_memory.recall.surfaced import SurfacedTracker
from harness_memory.services import MemoryServices, services_for
from harness_memory.session.binding import bind_session
from tests.fakellm import ScriptedLLM, text

from .test_recall import SEED, model_config, seed
from .test_server_memory import ADMIN, BASE, api


@pytest.fixture
def redis_services(services: Callable[..., MemoryServices]) -> MemoryServices:
    """One Redis-backed services for every example of a property test."""
    return services("local", redis=True)


def store_state(svc: MemoryServices) -> dict[str, str]:
    return {i.key: i.etag for i in svc.store.list(svc.key_prefix)}


def test_recall_records_when_and_why_in_redis_never_in_the_store(
        services: Callable[..., MemoryServices], llm_server: ScriptedLLM) -> None:
    svc = services("cos", redis=True, session={"ttl_seconds": 600}, **model_config(llm_server, model_above=0))
    manifest = seed(svc.user_agent_dir("u1"))
    llm_server.script(text('{"files": ["feedback_tests.md"]}'),
                      text('{"files": ["user_role.md", "ghost.md"]}'))
    recall_for_query(svc, "u1", "default", "should integration tests mock the database?", session_id="warm",
                     manifest=manifest)  # loads the search index (and whatever a first recall writes)
    before = store_state(svc)
    started = time.time()
    block = recall_for_query(svc, "u1", "default", "what is the user's role, backend engineer on payments?",
                             session_id="s-1", manifest=manifest)
    assert "BODY-ROLE" in block
    assert store_state(svc) == before  # the record cost no store write

    prefix = svc.config.redis.key_prefix
    assert svc.redis is not None
    last = {k.decode(): float(v) for k, v in svc.redis.hgetall(f"{prefix}recall:last:u1:default").items()}
    assert set(last) == {"feedback_tests.md", "user_role.md"}
    assert started <= last["user_role.md"] <= time.time()
    assert 0 < svc.redis.ttl(f"{prefix}recall:last:u1:default") <= LAST_RECALLED_TTL
    assert 0 < svc.redis.ttl(f"{prefix}recall:why:u1:default:s-1") <= 600

    # a second pod on the same Redis sees both records
    other = services("cos", redis=True, session={"ttl_seconds": 600})
    insight = other.surfaced_tracker().insight
    assert insight.last_recalled("u1") == last
    why = insight.decision("s-1", user_id="u1")
    assert why is not None
    assert (why.path, why.model_asked, why.model_picked) == ("model", True, ("user_role.md",))
    assert why.recalled == ("user_role.md",) and why.chosen == ("user_role.md",)
    assert why.query.startswith("what is the user's role")
    ranked = {c.file: c for c in why.candidates}
    assert ranked and ranked["user_role.md"].lexical and ranked["user_role.md"].lexical > 0
    assert all(c.semantic is None and c.fused is None for c in why.candidates)  # no semantic tier here
    # the candidates are the ranking the model was shown: the files in its request
    shown = llm_server.chat_requests[1].messages[1]["content"]
    assert all(c.file in shown for c in why.candidates)
    assert insight.decision("s-2", user_id="u1") is None and insight.decision("s-1", user_id="u2") is None

    svc.surfaced_tracker().forget("s-1", user_id="u1")  # clearing the session drops its decision
    assert other.surfaced_tracker().insight.decision("s-1", user_id="u1") is None


def test_without_redis_the_pod_remembers_and_a_dead_redis_falls_back(
        services: Callable[..., MemoryServices]) -> None:
    svc = services("local", recall={"use_model": False})
    seed(svc.user_agent_dir("u1"))
    assert "BODY-DEPLOY" in recall_for_query(svc, "u1", "default", "生产环境怎么部署？", session_id="s")
    insight = svc.surfaced_tracker().insight
    assert "部署流程.md" in insight.last_recalled("u1")
    why = insight.decision("s", user_id="u1")
    assert why is not None and why.path == "lexical" and not why.model_asked and why.model_picked is None
    assert why.candidates[0].file == "部署流程.md" and why.recalled[0] == "部署流程.md"
    # nothing matched: the decision says so, and nothing is marked recalled
    recall_for_query(svc, "u1", "default", "zzzz qqqq", session_id="s")
    empty = insight.decision("s", user_id="u1")
    assert empty is not None and empty.recalled == () and empty.candidates == ()

    unreachable = redis.Redis(host="127.0.0.1", port=9, socket_timeout=0.5, socket_connect_timeout=0.5,
                              retry=Retry(NoBackoff(), 0))
    dead = RecallInsight(unreachable, retry_after_seconds=60)
    decision = RecallDecision(at=1.0, query="q", path="lexical", model_asked=False, model_picked=None,
                              chosen=("x.md",), recalled=("x.md",), surfaced_before=0)
    dead.record("u", "default", ["x.md"], session_id="s", decision=decision, at=5.0)  # no exception
    assert dead.last_recalled("u") == {"x.md": 5.0} and dead.decision("s", user_id="u") == decision
    tracker = SurfacedTracker(unreachable, retry_after_seconds=60)  # marking and recording in one go
    tracker.mark("s", ["x.md"], user_id="u", decision=decision)
    assert tracker.surfaced("s", user_id="u") == {"x.md"} and tracker.insight.decision("s", user_id="u") == decision
    assert set(tracker.insight.last_recalled("u", "default", ["x.md", "y.md"])) == {"x.md"}


NAMES = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40)
SCORES = st.none() | st.floats(min_value=-10, max_value=1000, allow_nan=False).map(lambda x: round(x, 4))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(st.characters(blacklist_categories=("Cs",)), max_size=300),
       files=st.lists(NAMES, max_size=5, unique=True),
       rows=st.lists(st.tuples(NAMES, SCORES, SCORES, SCORES), max_size=6))
def test_any_unicode_decision_survives_redis(redis_services: MemoryServices, query: str,
                                             files: list[str], rows: list[tuple[Any, ...]]) -> None:
    insight = redis_services.surfaced_tracker().insight
    decision = RecallDecision(at=1.5, query=query, path="model", model_asked=True, model_picked=tuple(files),
                              chosen=tuple(files), recalled=tuple(files), surfaced_before=2,
                              candidates=tuple(Candidate(*r) for r in rows))
    insight.record("ü1", "default", files, session_id="séance", decision=decision, at=2.0)
    assert insight.decision("séance", user_id="ü1") == decision
    assert {f: 2.0 for f in files}.items() <= insight.last_recalled("ü1").items()


async def test_the_api_shows_last_recalled_and_why_to_the_owner_only(make_config: Callable[..., MemoryConfig]) -> None:
    cfg = make_config(backend="cos", redis=True, server={"admin_token": ADMIN}, recall={"use_model": False})
    svc = services_for(cfg)
    seed(svc.user_agent_dir("u1"))
    seed(svc.user_agent_dir("u2"))
    bound, _ = bind_session("u1", "chat-1", cfg.session.bind_to_user)
    assert "BODY-DASH" in recall_for_query(svc, "u1", "default", "grafana api latency dashboard", session_id=bound)
    async with api(cfg, wid="u1") as c:
        listing = (await c.get(BASE)).json()
        last = {f["file"]: f["last_recalled"] for f in listing["files"]}
        assert last["reference_dash.md"] and abs(last["reference_dash.md"] - time.time()) < 600
        assert all(v is None for f, v in last.items() if f != "reference_dash.md")
        assert set(last) == set(SEED)
        form = (await c.get(f"{BASE}/fields/reference_dash.md")).json()
        assert form["last_recalled"] == last["reference_dash.md"]
        assert (await c.get(f"{BASE}/fields/user_tz.md")).json()["last_recalled"] is None

        why = (await c.get("/users/me/sessions/chat-1/why")).json()
        assert why["recorded"] is True and why["session_id"] == "chat-1"
        assert why["query"] == "grafana api latency dashboard" and why["recalled"][0] == "reference_dash.md"
        assert why["path"] in {"lexical", "confident"} and why["model_asked"] is False
        assert why["candidates"][0]["file"] == "reference_dash.md" and why["candidates"][0]["lexical"] > 0
        assert (await c.get("/users/me/sessions/chat-2/why")).json()["recorded"] is False
        assert (await c.get("/users/u2/sessions/chat-1/why")).status_code == 403
    async with api(cfg, wid="u2") as c:  # the same session id names u2's own (empty) session
        assert (await c.get("/users/me/sessions/chat-1/why")).json()["recorded"] is False
        listing = (await c.get("/users/me/agents/default/memory")).json()
        assert all(f["last_recalled"] is None for f in listing["files"])
    async with api(cfg, authorization=f"Bearer {ADMIN}") as c:  # shared places have no per-user record
        listing = (await c.get("/shared/agents/default/memory")).json()
        assert all(f["last_recalled"] is None for f in listing["files"])


async def test_a_run_through_the_server_is_explained(make_config: Callable[..., MemoryConfig],
                                                     llm_server: ScriptedLLM) -> None:
    """The whole path: a run's recall (agent build) is what ``/why`` and the listing then show."""
    cfg = make_config(backend="local", model={"model": "fake-model", "base_url": llm_server.base_url,
                                              "api_key": "k"}, auto={"enabled": False},
                      recall={"use_model": False})
    llm_server.script(text("Postgres, as decided."))
    async with api(cfg, wid="u1") as c:
        for file, content in SEED.items():
            assert (await c.post(f"{BASE}/files", json={"file": file, "content": content})).status_code == 201
        assert (await c.get("/users/me/sessions/chat-3/why")).json()["recorded"] is False
        r = await c.post("/agents/default/runs", json={"message": "should integration tests mock the database?",
                                                       "session_id": "chat-3"})
        assert r.status_code == 200, r.text
        why = (await c.get("/users/me/sessions/chat-3/why")).json()
        assert why["recorded"] is True and why["recalled"][0] == "feedback_tests.md", why
        assert why["query"] == "should integration tests mock the database?"
        recalled = (await c.get("/users/me/sessions/chat-3/recalled")).json()["files"]
        assert set(why["recalled"]) == set(recalled)  # the two views of the session agree
        listing = {f["file"]: f["last_recalled"] for f in (await c.get(BASE)).json()["files"]}
        assert {f for f, at in listing.items() if at} == set(recalled)
    services_for(cfg).close(timeout=10)
