"""The assistant's own changes are in the safety net too: a tool save over a memory, a chunk
replace and a delete keep what they replace (history) or remove (trash) exactly like a person's
edit on the page — restorable through the real API — at the cost of the copy alone (the store
requests each tool call sends are logged and asserted). SeaweedFS + Redis.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness_memory.auto import AutoPlace
from harness_memory.config import MemoryConfig
from harness_memory.memdir import trash as kept
from harness_memory.services import MemoryServices
from harness_memory.storage import make_store
from tests.fakellm import ScriptedLLM, text
from tests.faults import FaultyStore

from .test_server_memory import BASE, api, stored

MakeConfig = Callable[..., MemoryConfig]
PLACE = "users/u1/agent-memory/default/"


def memory(description: str, body: str) -> str:
    return f"---\nname: build\ndescription: {description}\ntype: project\n---\n\n{body}\n"


V1, V2 = memory("how to build", "run make build"), memory("how to build", "run make all")


@pytest.fixture
def cfg_cos(make_config: MakeConfig) -> MemoryConfig:
    return make_config(backend="cos", redis=True)


@pytest.fixture
def pod(make_config: MakeConfig) -> Iterator[tuple[MemoryServices, FaultyStore, MemoryConfig]]:
    cfg = make_config(backend="cos", redis=True, limits={"history_versions": 3})
    store = FaultyStore(make_store(cfg.store))
    services = MemoryServices.from_config(cfg, store=store)
    yield services, store, cfg
    services.close()


async def test_what_the_assistant_overwrote_edited_or_deleted_is_restored_from_the_page(
        pod: tuple[MemoryServices, FaultyStore, MemoryConfig]) -> None:
    services, _, cfg = pod
    tools = services.memory_tools("u1")
    assert tools.save_file("build.md", V1).startswith("Created memory build.md")
    assert tools.save_file("build.md", V2).startswith("Updated memory build.md")
    assert tools.replace_file_chunk("build.md", "make all", "make all -j8").startswith("Updated memory build.md")
    said = tools.delete_file("build.md")
    assert said.startswith("Deleted memory build.md") and "kept in the trash for 30 days" in said
    assert stored(cfg, PLACE + "build.md") is None
    async with api(cfg, wid="u1") as c:
        trash = (await c.get(f"{BASE}/trash")).json()
        assert trash["count"] == 1 and trash["items"][0]["origin"] == "assistant"
        assert trash["items"][0]["files"][0]["size"] == len(V2.replace("make all", "make all -j8"))
        back = await c.post(f"{BASE}/trash/{trash['items'][0]['id']}/restore")
        assert back.status_code == 200 and back.json()["restored"] == ["build.md"]
        versions = (await c.get(f"{BASE}/history/build.md")).json()["versions"]
        # newest first: the text the chunk replace changed, then the one the second save overwrote
        assert [v["content"] for v in versions] == [V2, V1]
        assert {v["origin"] for v in versions} == {"assistant"}
        restored = await c.post(f"{BASE}/restore-version/build.md", json={"version": versions[1]["id"]})
        assert restored.status_code == 200, restored.text
    assert stored(cfg, PLACE + "build.md") == V1.encode()
    newest = kept.history(services.user_agent_dir("u1"), "build.md")[0]
    assert newest.origin == "restore" and "make all -j8" in newest.content  # the restore lost nothing either


def _sent(store: FaultyStore, call: Callable[[], str]) -> tuple[str, list[tuple[str, str]]]:
    store.calls.log.clear()
    said = call()
    return said, list(store.calls.log)


def test_the_copy_is_all_a_tool_call_pays(pod: tuple[MemoryServices, FaultyStore, MemoryConfig]) -> None:
    """A new memory sends nothing for history; an overwrite one PUT of its old text (which the pod
    holds when it wrote or read that version: ``heads.py``); a chunk replace (which reads the file
    anyway) and a delete (a GET where it sent a HEAD) one PUT each. The LIST that prunes old
    versions runs once every ``history_versions`` saves of a file by the assistant."""
    services, store, _ = pod
    tools = services.memory_tools("u1")
    prefix = services.user_agent_dir("u1").place.prefix

    def kept_aside(sent: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(op, key[len(prefix):].split("/", 1)[0]) for op, key in sent if op.startswith("put")
                and (key.startswith(prefix + ".history/") or key.startswith(prefix + ".trash/"))]

    def reads_of(sent: list[tuple[str, str]], file: str) -> list[str]:
        return [op for op, key in sent if key == prefix + file]

    said, sent = _sent(store, lambda: tools.save_file("a.md", V1))
    assert said.startswith("Created") and kept_aside(sent) == []
    said, sent = _sent(store, lambda: tools.save_file("b.md", V2))  # a new memory in a place the pod knows
    assert said.startswith("Created") and kept_aside(sent) == [] and reads_of(sent, "b.md") == ["put_if_absent"]
    assert len(sent) == 4  # head, file, MEMORY.md, search delta: as before the safety net

    said, sent = _sent(store, lambda: tools.save_file("a.md", V2))
    assert said.startswith("Updated")
    assert kept_aside(sent) == [("put", ".history")]
    assert "get" not in reads_of(sent, "a.md")  # the pod wrote the text it replaces: no GET for the copy
    assert len(sent) == 4 + 1 and not any(op == "list" for op, _ in sent)

    said, sent = _sent(store, lambda: tools.replace_file_chunk("a.md", "make all", "make world"))
    assert said.startswith("Updated") and kept_aside(sent) == [("put", ".history")]
    assert reads_of(sent, "a.md").count("get") == 1  # its own read, nothing more
    assert not any(op == "list" for op, _ in sent)

    said, sent = _sent(store, lambda: tools.save_file("a.md", V1))  # the third version: pruned now
    assert said.startswith("Updated") and ("put", ".history") in kept_aside(sent)
    assert [op for op, key in sent if op == "list"] == ["list"]

    said, sent = _sent(store, lambda: tools.delete_file("b.md"))
    assert said.startswith("Deleted") and kept_aside(sent) == [("put", ".trash")]
    assert reads_of(sent, "b.md") == ["get", "delete_many"]  # the GET that was a HEAD gives the copy its text
    assert len(sent) == 7 and not any(op == "list" for op, _ in sent)


def test_the_assistant_keeps_a_bounded_history(make_config: MakeConfig) -> None:
    cfg = make_config(backend="cos", redis=True, limits={"history_versions": 2})
    services = MemoryServices.from_config(cfg)
    try:
        tools = services.memory_tools("u1")
        for n in range(7):
            assert tools.save_file("a.md", memory("how to build", f"step {n}")).startswith(("Created", "Updated"))
        versions = kept.history(services.user_agent_dir("u1"), "a.md")
        assert 2 <= len(versions) < 4  # pruned every 2nd save: never more than twice the limit
        assert "step 5" in versions[0].content
    finally:
        services.close()


def test_saving_the_same_text_again_keeps_no_version(pod: tuple[MemoryServices, FaultyStore, MemoryConfig]
                                                      ) -> None:
    services, _, _ = pod
    mdir = services.user_agent_dir("u1")
    mdir.save("a.md", V1)
    mdir.save("a.md", V1)
    assert kept.history(mdir, "a.md") == []


# -- auto memory: what an update removes --------------------------------------------------------------
async def test_a_fact_the_model_removed_is_restored_from_the_trash(make_config: MakeConfig,
                                                                   llm_server: ScriptedLLM) -> None:
    """factsToRemove (with its replacement stored) deletes the old fact as a person's delete does:
    into the auto place's trash, one item per update, restorable through the API."""
    model = {"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"}
    cfg = make_config(backend="cos", redis=True, model=model, auto={"debounce_seconds": 3600, "max_attempts": 1})
    services = MemoryServices.from_config(cfg)
    auto = services.new_auto_memory(start_worker=False)
    try:
        old = auto.add_fact("u1", "Writes backend services in Java", "knowledge", 0.9)
        with AutoPlace(auto.places.user_auto_dir("u1")).transaction() as txn:  # learned, not a person's
            fact = txn.view.facts[old.id]
            fact.source = "auto:s0"
            txn.put_fact(fact)
        llm_server.script(text(json.dumps({
            "newFacts": [{"content": "Writes backend services in Go", "category": "knowledge", "confidence": 0.9}],
            "factsToRemove": [{"id": old.id, "reason": "moved from Java to Go", "replacedBy": 0}]})))
        auto.capture("u1", "s1", [{"role": "user", "content": "I moved from Java to Go for backend services."},
                                  {"role": "assistant", "content": "Noted."}])
        assert auto.flush(10)
        assert [f.content for f in auto.list_facts("u1")] == ["Writes backend services in Go"]
        async with api(cfg, wid="u1") as c:
            trash = (await c.get("/users/me/projects/default/memory/trash")).json()
            assert trash["count"] == 1 and trash["items"][0]["origin"] == "auto"
            assert [f["file"] for f in trash["items"][0]["files"]] == [old.id + ".md"]
            back = await c.post(f"/users/me/projects/default/memory/trash/{trash['items'][0]['id']}/restore")
            assert back.status_code == 200, back.text
        assert sorted(f.content for f in auto.list_facts("u1")) == ["Writes backend services in Go",
                                                                     "Writes backend services in Java"]
    finally:
        auto.close(1)
        services.close()


def test_an_overwrite_keeps_what_another_pod_wrote_not_what_this_pod_remembers(make_config: MakeConfig) -> None:
    """Pod A knows the text it wrote; pod B overwrites the file; A's next overwrite must keep B's
    text as the earlier version (A's copy names an older head: it reads the file)."""
    cfg = make_config(backend="cos", redis=True)
    a, b = MemoryServices.from_config(cfg), MemoryServices.from_config(cfg)
    try:
        a.memory_tools("u1").save_file("a.md", V1)
        a.memory_tools("u1").save_file("a.md", memory("how to build", "by A"))
        b.memory_tools("u1").save_file("a.md", memory("how to build", "by B"))
        assert a.memory_tools("u1").save_file("a.md", memory("how to build", "by A again")).startswith("Updated")
        versions = [v.content for v in kept.history(a.user_agent_dir("u1"), "a.md")]
        assert versions == [memory("how to build", "by B"), memory("how to build", "by A"), V1]
    finally:
        a.close()
        b.close()


async def test_a_merging_import_keeps_what_it_overwrites_as_a_version(cfg_cos: MemoryConfig) -> None:
    services = MemoryServices.from_config(cfg_cos)
    try:
        services.memory_tools("u1").save_file("build.md", V1)
        async with api(cfg_cos, wid="u1") as c:
            bundle = (await c.get(f"{BASE}/export")).json()
            services.memory_tools("u1").save_file("build.md", V2)
            merged = await c.post(f"{BASE}/import", json=bundle)
            assert merged.status_code == 200 and merged.json()["updated"] == 1, merged.text
            versions = (await c.get(f"{BASE}/history/build.md")).json()["versions"]
            assert [(v["content"], v["origin"]) for v in versions] == [(V2, "import"), (V1, "assistant")]
        assert stored(cfg_cos, PLACE + "build.md") == V1.encode()
    finally:
        services.close()


def test_saves_handed_to_the_lock_holder_keep_their_versions_too(cfg_cos: MemoryConfig) -> None:
    """Concurrent tool saves of one pod over Redis locks ride in each other's commits (group
    commit): every text replaced is in the history all the same."""
    services = MemoryServices.from_config(cfg_cos)
    try:
        tools = services.memory_tools("u1")
        for i in range(6):
            assert tools.save_file(f"f{i}.md", memory(f"file {i}", "v0")).startswith("Created")
        start = threading.Barrier(6)

        def save(i: int) -> str:
            start.wait()
            return services.memory_tools("u1").save_file(f"f{i}.md", memory(f"file {i}", "v1"))

        with ThreadPoolExecutor(6) as pool:
            said = list(pool.map(save, range(6)))
        assert all(s.startswith("Updated") for s in said), said
        mdir = services.user_agent_dir("u1")
        for i in range(6):
            assert [v.content for v in kept.history(mdir, f"f{i}.md")] == [memory(f"file {i}", "v0")]
    finally:
        services.close()


def test_a_file_too_large_to_keep_in_memory_is_read_for_its_copy(
        pod: tuple[MemoryServices, FaultyStore, MemoryConfig]) -> None:
    services, store, _ = pod
    tools = services.memory_tools("u1")
    big = memory("a long log", "line of the build log\n" * 1000)  # over heads.TEXT_FILE_BYTES
    tools.save_file("log.md", big)
    tools.save_file("other.md", V1)  # the pod's head copy is warm
    said, sent = _sent(store, lambda: tools.save_file("log.md", V2))
    assert said.startswith("Updated")
    key = services.user_agent_dir("u1").place.key("log.md")
    assert [op for op, k in sent if k == key] == ["get", "put_if_match"]  # the replaced text, read once
    assert [v.content for v in kept.history(services.user_agent_dir("u1"), "log.md")] == [big]
