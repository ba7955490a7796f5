"""SessionMemoryManager end to end: scripted light model, real Redis, real SeaweedFS / local store,
and two OS processes acting as pods."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from harness_memory.config import MemoryConfig, SessionConfig
from harness_memory.layout import session_summary_key
from harness_memory.services import MemoryServices
from harness_memory.session import (
    ExtractStatus,
    SessionMemoryManager,
    SessionState,
    inject_session_summary,
    inject_summary_for_session,
    inject_summary_for_session_sync,
    strip_session_summary,
)
from harness_memory.session.extract import extraction_due
from harness_memory.session.summary import (
    PROMPT_MARKER,
    SECTION_KEYS,
    SummaryDoc,
    SummaryRejected,
    parse_stored,
    parse_summary,
    render_summary,
)
from tests.fakellm import ScriptedLLM, delay, error, raw, text

from .helpers import child_env, spawn, write_config

SESSION = {"first_threshold_tokens": 100, "update_threshold_tokens": 50, "keep_messages": 2,
           "failure_backoff_seconds": 600}


def summary_md(title: str, state: str = "- working", worklog: str = "- step") -> str:
    return (f"# {title}\n\n## Current State\n{state}\n\n## Task\n- fix the build\n\n"
            f"## Key Results\n- exit code 0\n\n## Worklog\n{worklog}\n")


def turn(i: int, tag: str = "m") -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{tag}{i} user: " + "please look at build.log " * 6},
            {"role": "assistant", "content": f"{tag}{i} assistant: " + "the log says ok " * 6}]


Factory = Callable[..., SessionMemoryManager]


@pytest.fixture
def managers() -> Iterator[Callable[[MemoryConfig], SessionMemoryManager]]:
    made: list[tuple[SessionMemoryManager, MemoryServices]] = []

    def make(cfg: MemoryConfig) -> SessionMemoryManager:
        services = MemoryServices.from_config(cfg)
        manager = services.session_manager()
        made.append((manager, services))
        return manager

    yield make
    for manager, services in made:
        manager.close()
        services.close()


def model_cfg(llm: ScriptedLLM, **extra: Any) -> dict[str, Any]:
    return {"model": "fake-model", "base_url": llm.base_url, "api_key": "k", **extra}


def summary_requests(llm: ScriptedLLM) -> list[Any]:
    return [r for r in llm.chat_requests if PROMPT_MARKER in str(r.messages[0].get("content"))]


def stored_object(manager: SessionMemoryManager, sid: str) -> bytes | None:
    obj = manager.store.get_or_none(session_summary_key(sid))
    return obj.data if obj else None


# -- the summary template ----------------------------------------------------------------------
def test_summary_parse_tolerates_fences_think_and_chinese_headings() -> None:
    answer = ("<think>plan the update</think>\n```markdown\n# 修复登录错误\n\n## 当前状态\n- 正在调试\n\n"
              "## 任务\n- 修复登录\n\n## 错误与纠正\n- 用户说：不要用 X\n\n## Something Else\njunk\n```")
    doc = parse_summary(answer)
    assert doc.title == "修复登录错误"
    assert doc.sections == {"state": "- 正在调试", "task": "- 修复登录", "errors": "- 用户说：不要用 X"}


@pytest.mark.parametrize("answer", ["", "   ", "I cannot help with that.", '{"summary": "x"}',
                                    "## Task\nonly one section", "# T\n## Task\n\n## Worklog\n_none_\n## Decisions\n"])
def test_summary_garbage_is_rejected(answer: str) -> None:
    with pytest.raises(SummaryRejected):
        parse_summary(answer)


def test_summary_sections_left_out_keep_their_previous_text() -> None:
    previous = parse_summary(summary_md("Old title", worklog="- old step"))
    previous.sections["decisions"] = "- use Postgres"
    update = parse_summary("# New title\n## Current State\n- new\n## Task\n- same\n## Worklog\n- new step")
    merged = update.merged_over(previous)
    assert merged.title == "New title" and merged.sections["decisions"] == "- use Postgres"
    assert merged.sections["worklog"] == "- new step" and merged.sections["results"] == "- exit code 0"


@pytest.mark.parametrize("max_chars", [500, 2000, 12000])
def test_summary_every_section_and_the_whole_are_bounded(max_chars: int) -> None:
    lines = "\n".join(f"- line {i} " + "详细内容 " * 10 for i in range(400))
    doc = SummaryDoc("A very long title " * 30, {k: lines for k in SECTION_KEYS})
    out = render_summary(doc, max_chars)
    assert len(out) <= max_chars
    reparsed = parse_summary(out)
    assert set(reparsed.sections) == set(SECTION_KEYS)
    assert "…" in reparsed.sections["worklog"] and "…" in reparsed.sections["state"]
    if max_chars >= 2000:  # room for whole lines
        assert "line 0 " in reparsed.sections["state"]  # head kept
        assert "line 399 " in reparsed.sections["worklog"]  # the worklog keeps its newest lines


# -- thresholds --------------------------------------------------------------------------------
@pytest.mark.parametrize(("state", "due"), [
    (SessionState(total=5, tokens=99), False),
    (SessionState(total=5, tokens=100), True),  # first summary: tokens only
    (SessionState(total=5, tokens=100, tool_calls=1, last_turn_tool_calls=1), True),
    (SessionState(total=9, summarized=5, tokens=49, summary_version=1), False),
    (SessionState(total=9, summarized=5, tokens=50, summary_version=1), True),  # last turn: no tools
    (SessionState(total=9, summarized=5, tokens=60, summary_version=1, tool_calls=2, last_turn_tool_calls=1),
     False),  # mid tool loop
    (SessionState(total=9, summarized=5, tokens=60, summary_version=1, tool_calls=3, last_turn_tool_calls=2),
     True),
    (SessionState(total=5, tokens=500, retry_at=2000.0), False),  # backing off after a failure
    (SessionState(total=5, summarized=5, tokens=0), False),
])
def test_threshold_rule(state: SessionState, due: bool) -> None:
    cfg = SessionConfig(first_threshold_tokens=100, update_threshold_tokens=50, min_tool_calls=3)
    assert extraction_due(state, cfg, now=1000.0) is due


# -- extraction --------------------------------------------------------------------------------
@pytest.mark.parametrize(("backend", "use_redis"), [("local", False), ("cos", True)])
def test_extract_sends_only_new_messages_and_stores_the_summary(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM, backend: str, use_redis: bool,
) -> None:
    cfg = make_config(backend, redis=use_redis, model=model_cfg(llm_server), session=SESSION)
    mgr = managers(cfg)
    sid = "sess-" + uuid.uuid4().hex[:6]
    for i in range(3):
        mgr.collect_messages_sync(sid, turn(i))
    assert mgr.should_extract_sync(sid)
    llm_server.script(text(summary_md("Build fix", worklog="- read m0..m2")))
    first = mgr.maybe_extract_sync(sid)
    assert first.status is ExtractStatus.EXTRACTED and first.version == 1 and first.messages_sent == 6
    sent = llm_server.chat_requests[0]
    assert sent.model == "fake-model" and sent.roles() == ["system", "user"]
    assert "## Errors and Corrections" in sent.messages[0]["content"]
    prompt = sent.messages[1]["content"]
    assert "(none yet" in prompt and all(f"m{i} user" in prompt and f"m{i} assistant" in prompt for i in range(3))
    stored = parse_stored(sid, stored_object(mgr, sid) or b"")
    assert stored.version == 1 and stored.messages_summarized == 6 and stored.text == first.summary
    assert stored.text.startswith("# Build fix\n") and "## Decisions\n_none_" in stored.text
    state = mgr.buffer.state(sid)
    assert state is not None and (state.length, state.tokens, state.summarized) == (2, 0, 6)
    assert mgr.get_summary_sync(sid) == first.summary

    for i in range(3, 5):
        mgr.collect_messages_sync(sid, turn(i))
    assert mgr.should_extract_sync(sid)
    llm_server.script(text(summary_md("Build fix", worklog="- read m0..m4")))
    second = mgr.maybe_extract_sync(sid)
    assert second.status is ExtractStatus.EXTRACTED and second.version == 2 and second.messages_sent == 4
    prompt2 = llm_server.chat_requests[1].messages[1]["content"]
    assert first.summary is not None and first.summary.strip() in prompt2  # the previous summary
    assert "m3 user" in prompt2 and "m4 assistant" in prompt2
    assert all(f"m{i} " not in prompt2 for i in range(3))  # nothing already summarised is resent
    assert parse_stored(sid, stored_object(mgr, sid) or b"").version == 2
    assert mgr.get_summary_sync(sid) == second.summary


@pytest.mark.parametrize("failure", ["garbage", "empty", "timeout", "http-500"])
def test_model_failure_changes_nothing(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM, failure: str,
) -> None:
    cfg = make_config("cos", redis=True, model=model_cfg(llm_server, light_timeout=0.5), session=SESSION)
    mgr = managers(cfg)
    sid = "fail-" + uuid.uuid4().hex[:6]
    for i in range(3):
        mgr.collect_messages_sync(sid, turn(i))
    llm_server.script(text(summary_md("Version one")))
    assert mgr.maybe_extract_sync(sid).ok
    before_object = stored_object(mgr, sid)
    for i in range(3, 6):
        mgr.collect_messages_sync(sid, turn(i))
    before_state = mgr.buffer.state(sid)
    before_pending = mgr.buffer.pending(sid)
    assert before_state is not None and before_pending is not None and len(before_pending.messages) == 6
    bad = {"garbage": raw("lorem ipsum {not a summary} ### ???"), "empty": text(""),
           "timeout": delay(3.0, text(summary_md("Too late"))), "http-500": error(500, "overloaded")}[failure]
    rejected = failure == "garbage"  # an answer the template check rejects is asked for once more, at once
    llm_server.script(*([bad, bad] if rejected else [bad]))
    result = mgr.maybe_extract_sync(sid)
    assert result.status is ExtractStatus.FAILED and result.error and result.messages_left == 6
    assert len(llm_server.chat_requests) == (3 if rejected else 2)  # the model was asked
    assert stored_object(mgr, sid) == before_object  # stored summary unchanged
    after = mgr.buffer.pending(sid)
    assert after is not None and after.messages == before_pending.messages  # no message lost
    state = mgr.buffer.state(sid)
    assert state is not None and (state.tokens, state.summarized) == (before_state.tokens, before_state.summarized)
    assert state.failures == 1 and state.last_error and state.retry_at > time.time()
    assert mgr.buffer.lock_ttl_ms(sid) is None  # lock released
    assert not mgr.should_extract_sync(sid)  # backing off
    assert mgr.get_summary_sync(sid) is not None and "Version one" in mgr.get_summary_sync(sid)  # type: ignore[operator]
    # A forced retry with a good answer covers every message that waited.
    llm_server.script(text(summary_md("Version two")))
    retry = mgr.maybe_extract_sync(sid, force=True)
    assert retry.ok and retry.messages_sent == 6 and retry.version == 2


# What the 1.5B model wrote for a short session (bench/QUALITY.md, correction_en): its own bullets
# under one known heading — 2 of the template's sections.
SMALL_MODEL_SUMMARY = ("# Load CSV and Calculate Mean\n\n## Current State\n- **Tools**: Pandas, Polars\n"
                       "- **Task**: Load the CSV file and calculate the mean of the price column\n\n"
                       "## Task\n- Use Polars, not pandas\n")


@pytest.mark.parametrize("retries", [0, 1, 2])
def test_a_rejected_summary_is_asked_for_again_at_once_told_why(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM, retries: int,
) -> None:
    cfg = make_config("local", model=model_cfg(llm_server), session={**SESSION, "summary_retries": retries})
    mgr = managers(cfg)
    sid = "again-" + uuid.uuid4().hex[:6]
    for i in range(3):
        mgr.collect_messages_sync(sid, turn(i))
    if retries == 0:
        llm_server.script(text(SMALL_MODEL_SUMMARY))
    else:
        llm_server.script(*[text(SMALL_MODEL_SUMMARY)] * retries, text(summary_md("Fixed on the last ask")))
    result = mgr.maybe_extract_sync(sid)
    requests = summary_requests(llm_server)
    if retries == 0:  # no second ask: it waits for the back-off, nothing changed
        assert result.status is ExtractStatus.FAILED and "2 of the template's sections" in (result.error or "")
        assert len(requests) == 1 and mgr.get_summary_sync(sid) is None
        pending = mgr.buffer.pending(sid)
        assert pending is not None and len(pending.messages) == 6
        return
    # retries >= 1: the first ask is rejected, a later one gives a good answer
    assert len(requests) == retries + 1
    assert result.ok, result.error
    summary = mgr.get_summary_sync(sid)
    assert summary is not None and "Fixed on the last ask" in summary
    again = requests[1].messages
    assert again[:2] == requests[0].messages  # the same conversation, then its answer and why
    assert again[2] == {"role": "assistant", "content": SMALL_MODEL_SUMMARY.strip()}
    told = str(again[3]["content"])
    assert "2 of the template's sections" in told and "## Errors and Corrections" in told
    assert SMALL_MODEL_SUMMARY[:40] not in told  # the reason, not the answer echoed back
    assert mgr.model_calls == len(requests)


def test_a_summary_rejected_on_every_ask_changes_nothing(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM,
) -> None:
    cfg = make_config("cos", redis=True, model=model_cfg(llm_server), session={**SESSION, "summary_retries": 2})
    mgr = managers(cfg)
    sid = "never-" + uuid.uuid4().hex[:6]
    for i in range(3):
        mgr.collect_messages_sync(sid, turn(i))
    llm_server.script(text(SMALL_MODEL_SUMMARY), text("I cannot summarise this."), text(SMALL_MODEL_SUMMARY))
    result = mgr.maybe_extract_sync(sid)
    assert result.status is ExtractStatus.FAILED and result.messages_left == 6
    assert len(summary_requests(llm_server)) == 3 and llm_server.pending == 0
    assert stored_object(mgr, sid) is None and mgr.get_summary_sync(sid) is None
    state = mgr.buffer.state(sid)
    assert state is not None and state.failures == 1 and state.retry_at > time.time()
    assert mgr.buffer.lock_ttl_ms(sid) is None


def test_store_down_means_no_model_call_and_nothing_lost(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM,
) -> None:
    cfg = make_config("cos", redis=True, model=model_cfg(llm_server), session=SESSION,
                      store={"cos_domain": "127.0.0.1:1/nobucket", "cos_timeout": 1.0})
    mgr = managers(cfg)
    for i in range(3):
        mgr.collect_messages_sync("down", turn(i))
    result = mgr.maybe_extract_sync("down")
    assert result.status is ExtractStatus.FAILED and "stored summary" in result.error
    assert llm_server.chat_requests == []
    pending = mgr.buffer.pending("down")
    assert pending is not None and len(pending.messages) == 6
    assert mgr.get_summary_sync("down") is None  # degrades, never raises
    assert asyncio.run(inject_summary_for_session(mgr, "down", "hi")) == "hi"


def test_cached_summary_is_served_while_the_store_is_down(
    make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM,
) -> None:
    from harness_memory.session.cache import CachedSummary
    from harness_memory.storage import CosStore

    now = [1_800_000_000.0]
    cfg = make_config("local", session=SESSION)
    store = CosStore(**{**cfg.store.model_dump(), "backend": "cos", "cos_bucket": "b",
                        "cos_domain": "127.0.0.1:1/b", "cos_scheme": "http", "cos_anonymous": True,
                        "cos_timeout": 1.0, "cos_retries": 0})
    mgr = SessionMemoryManager(store, config=cfg.session, clock=lambda: now[0])
    mgr.cache.put("s", CachedSummary("# cached", 3, now[0]))
    now[0] += cfg.session.ttl_seconds + 1  # too old to trust without a version check
    assert mgr.get_summary_sync("s") == "# cached"
    mgr.close()
    store.close()


def test_summary_cache_and_cross_pod_freshness(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM,
) -> None:
    cfg = make_config("cos", redis=True, model=model_cfg(llm_server), session=SESSION)
    pod_a, pod_b = managers(cfg), managers(cfg)
    sid = "x-" + uuid.uuid4().hex[:6]
    store_b = pod_b.store
    n = store_b.request_count
    assert pod_b.get_summary_sync(sid) is None and pod_b.get_summary_sync(sid) is None
    assert store_b.request_count == n + 1  # "no summary" is cached too
    for i in range(3):
        pod_a.collect_messages_sync(sid, turn(i))
    llm_server.script(text(summary_md("First")), text(summary_md("Second")))
    assert pod_a.maybe_extract_sync(sid).ok
    assert "# First" in (pod_b.get_summary_sync(sid) or "")  # the version in Redis moved on
    n = store_b.request_count
    assert "# First" in (pod_b.get_summary_sync(sid) or "") and store_b.request_count == n
    for i in range(3, 5):
        pod_a.collect_messages_sync(sid, turn(i))
    assert pod_a.maybe_extract_sync(sid).ok
    assert "# Second" in (pod_b.get_summary_sync(sid) or "")
    assert pod_b.stats.cache_hits >= 2


def test_concurrent_extractions_in_one_pod_make_one_model_call(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM,
) -> None:
    mgr = managers(make_config("local", model=model_cfg(llm_server), session=SESSION))
    for i in range(3):
        mgr.collect_messages_sync("c", turn(i))
    llm_server.set_handler(lambda req: delay(0.3, text(summary_md("Once"))))
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(mgr.maybe_extract_sync("c"))) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(llm_server.chat_requests) == 1
    statuses = sorted(r.status.value for r in results)
    assert statuses.count("extracted") == 1 and set(statuses) <= {"extracted", "busy", "not-due"}


def test_crashed_holders_lock_blocks_until_it_expires(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM, redis_server: Any,
) -> None:
    cfg = make_config("local", redis=True, model=model_cfg(llm_server), session=SESSION)
    mgr = managers(cfg)
    for i in range(3):
        mgr.collect_messages_sync("crash", turn(i))
    client = redis.Redis.from_url(redis_server.url)
    client.set(f"{cfg.redis.key_prefix}session:{{crash}}:lock", "pod-7:4242/dead", px=200)
    assert mgr.maybe_extract_sync("crash").status is ExtractStatus.BUSY
    assert llm_server.chat_requests == []
    info = mgr.session_info_sync("crash")
    assert info.lock_held and info.mode == "redis" and info.due and info.lock_holder == "pod-7:4242"
    time.sleep(0.25)  # let Redis expire the dead pod's lock
    llm_server.script(text(summary_md("After the crash")))
    assert mgr.maybe_extract_sync("crash").ok
    client.close()


def test_input_budget_sends_oldest_first_and_keeps_the_rest(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM,
) -> None:
    mgr = managers(make_config("local", model=model_cfg(llm_server),
                               session={**SESSION, "extract_max_input_tokens": 500}))
    for i in range(10):
        mgr.collect_messages_sync("big", [{"role": "user", "content": f"b{i} " + "word " * 300}])
    llm_server.set_handler(lambda req: text(summary_md("Budget")))
    first = mgr.maybe_extract_sync("big")
    assert first.ok and 1 <= first.messages_sent < 10 and first.messages_left == 10 - first.messages_sent
    prompt = llm_server.chat_requests[0].messages[1]["content"]
    assert "b0 " in prompt and "b9 " not in prompt
    second = mgr.maybe_extract_sync("big")
    assert second.ok and f"b{first.messages_sent} " in llm_server.chat_requests[1].messages[1]["content"]


def test_one_manager_per_services(make_config: Callable[..., MemoryConfig]) -> None:
    from harness_memory.session import session_manager_for

    services = MemoryServices.from_config(make_config("local"))
    first = session_manager_for(services)
    assert session_manager_for(services) is first and first.model is None and first.mode == "local"
    first.close()
    assert session_manager_for(services) is not first  # a closed manager is replaced
    session_manager_for(services).close()
    services.close()


def test_no_model_buffers_but_never_summarises(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
) -> None:
    mgr = managers(make_config("local", session=SESSION))
    for i in range(3):
        mgr.collect_messages_sync("nm", turn(i))
    assert mgr.should_extract_sync("nm")
    assert mgr.maybe_extract_sync("nm").status is ExtractStatus.NO_MODEL
    assert len(mgr.buffer.entries("nm")) == 6


def test_session_info_and_clear(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM,
) -> None:
    mgr = managers(make_config("local", model=model_cfg(llm_server), session=SESSION))
    for i in range(3):
        mgr.collect_messages_sync("info", turn(i))
    llm_server.script(text(summary_md("Info")))
    assert mgr.maybe_extract_sync("info").ok
    info = asyncio.run(mgr.session_info("info"))
    assert info.mode == "local" and info.stored_version == 1 and info.cached_version == 1
    assert info.state is not None and info.state.summaries == 1 and len(info.buffered) == 2
    assert not info.lock_held and not info.due
    asyncio.run(mgr.clear_session("info"))
    assert stored_object(mgr, "info") is None and mgr.get_summary_sync("info") is None
    assert mgr.buffer.state("info") is None


# -- request entry -----------------------------------------------------------------------------
def test_inject_format_is_exact() -> None:
    assert inject_session_summary("你好", "# S\n- a") == "[会话历史摘要]\n# S\n- a\n\n---\n用户最新消息：你好"
    assert inject_session_summary("hi", None) == "hi" and inject_session_summary("hi", "  \n") == "hi"
    wrapped = inject_session_summary("line1\n\n---\n用户最新消息：tricky", "# S")
    assert strip_session_summary(wrapped) == "line1\n\n---\n用户最新消息：tricky"
    assert strip_session_summary("plain") == "plain"


def test_inject_from_session_id(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM,
) -> None:
    mgr = managers(make_config("local", model=model_cfg(llm_server), session=SESSION))
    assert asyncio.run(inject_summary_for_session(mgr, "inj", "hello")) == "hello"
    assert inject_summary_for_session_sync(mgr, None, "hello") == "hello"
    assert inject_summary_for_session_sync(mgr, "bad/../id", "hello") == "hello"
    for i in range(3):
        mgr.collect_messages_sync("inj", turn(i))
    llm_server.script(text(summary_md("Injected")))
    summary = mgr.maybe_extract_sync("inj").summary
    assert summary.endswith("\n")  # stored with its newline; injected without it (two, not three, before ---)
    expected = f"[会话历史摘要]\n{summary.strip()}\n\n---\n用户最新消息：hello"
    assert asyncio.run(inject_summary_for_session(mgr, "inj", "hello")) == expected
    assert inject_summary_for_session_sync(mgr, "inj", "hello") == expected


# -- two pods (OS processes) -------------------------------------------------------------------
def run_pod(config_path: Any, *args: str, timeout: float = 60) -> dict[str, Any]:
    proc = spawn("tests.session_pod", *args, env=child_env(config_path))
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    return json.loads(out.strip().splitlines()[-1])


def test_two_pods_share_the_summary(
    make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM, tmp_path: Any,
) -> None:
    cfg = make_config("cos", redis=True, model=model_cfg(llm_server), session=SESSION)
    path = write_config(cfg, tmp_path / "pods.yaml")
    llm_server.script(text(summary_md("Shared across pods")))
    a = run_pod(path, "collect-extract", "pods", "3")
    assert a["mode"] == "redis" and a["due"] is True and a["status"] == "extracted" and a["sent"] == 6
    b = run_pod(path, "get-twice", "pods")
    assert b["first"] == a["summary"] == b["second"] and "# Shared across pods" in b["first"]
    assert b["first_requests"] == 1 and b["second_requests"] == 0  # store, then this pod's cache
    assert len(llm_server.chat_requests) == 1


def test_ten_concurrent_extractions_over_two_pods_make_one_model_call(
    make_config: Callable[..., MemoryConfig], managers: Callable[[MemoryConfig], SessionMemoryManager],
    llm_server: ScriptedLLM, redis_server: Any, tmp_path: Any,
) -> None:
    cfg = make_config("cos", redis=True, model=model_cfg(llm_server), session=SESSION)
    seed = managers(cfg)
    for i in range(3):
        seed.collect_messages_sync("race", turn(i))
    path = write_config(cfg, tmp_path / "race.yaml")
    llm_server.set_handler(lambda req: delay(0.5, text(summary_md("Race winner"))))
    go = f"{cfg.redis.key_prefix}go"
    pods = [spawn("tests.session_pod", "race", "race", "5", go, env=child_env(path)) for _ in range(2)]
    client = redis.Redis.from_url(redis_server.url)
    deadline = time.monotonic() + 60
    while int(client.get(go + ":ready") or 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    client.rpush(go, "go", "go")
    statuses: list[str] = []
    for proc in pods:
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0, out
        statuses += json.loads(out.strip().splitlines()[-1])["statuses"]
    client.close()
    assert len(statuses) == 10
    assert len(llm_server.chat_requests) == 1
    assert statuses.count("extracted") == 1 and set(statuses) <= {"extracted", "busy", "not-due"}
    assert "# Race winner" in (seed.get_summary_sync("race") or "")
