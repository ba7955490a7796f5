"""MemoryTools on both backends: round trips, hostile input, isolation, async twins."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from harness_memory.layout import Place
from harness_memory.memdir import MemoryDir
from harness_memory.storage.base import ObjectStore
from harness_memory.tools import SEARCH_TOOL_NAME, TOOL_NAMES, MemoryTools

from .test_layout import HOSTILE_FILENAMES

GOOD = "---\nname: user role\ndescription: frontend engineer\ntype: user\n---\n\nTypeScript, Vue.\n"


@pytest.fixture
def tools(store: ObjectStore) -> MemoryTools:
    own = MemoryDir(store, Place.user_agent("100", "default"))
    shared = MemoryDir(store, Place.shared_agent("default"))
    return MemoryTools(own, shared)


def all_keys(store: ObjectStore) -> list[str]:
    return [info.key for info in store.list("memory/")]


def test_every_tool_round_trips(tools: MemoryTools, store: ObjectStore) -> None:
    assert tools.save_file("user_role.md", GOOD).startswith("Created memory user_role.md")
    assert tools.read_file("user_role.md") == GOOD.rstrip("\n")
    listing = tools.list_files()
    assert "- user_role.md (user) — frontend engineer" in listing
    assert tools.replace_file_chunk("user_role.md", "Vue.", "Vue and React.").startswith("Updated")
    assert "Vue and React." in tools.read_file("user_role.md")
    stored = store.get("memory/users/100/agent-memory/default/user_role.md").data.decode()
    assert "Vue and React." in stored
    index = store.get("memory/users/100/agent-memory/default/MEMORY.md").data.decode()
    assert "- [user role](user_role.md) — frontend engineer" in index
    assert tools.delete_file("user_role.md").startswith("Deleted")
    assert "no memory file named" in tools.read_file("user_role.md")
    assert "nothing to delete" in tools.delete_file("user_role.md")
    assert "(none yet)" in tools.list_files()


def test_read_file_pages(tools: MemoryTools) -> None:
    body = "\n".join(f"line {i}" for i in range(500))
    tools.save_file("long.md", GOOD + body)
    first = tools.read_file("long.md")
    assert "call read_file with offset=200" in first and "line 192\n" in first and "line 193" not in first
    second = tools.read_file("long.md", offset=200, limit=10)
    assert second.startswith("line 193") and "[lines 201-210 of 507" in second
    assert "has only 507 lines" in tools.read_file("long.md", offset=9999)


def test_hostile_names_rejected_and_nothing_outside(tools: MemoryTools, store: ObjectStore) -> None:
    before = set(all_keys(store))
    for name in HOSTILE_FILENAMES:
        for result in (tools.save_file(name, GOOD), tools.read_file(name), tools.delete_file(name),
                       tools.replace_file_chunk(name, "a", "b")):
            assert result.startswith("Error:"), (name, result)
    assert set(all_keys(store)) == before
    for key in all_keys(store):
        assert key.startswith("memory/users/100/agent-memory/default/")


def test_non_string_arguments_are_errors_not_crashes(tools: MemoryTools) -> None:
    assert tools.save_file(None, GOOD).startswith("Error:")  # type: ignore[arg-type]
    assert tools.save_file("a.md", None).startswith("Error:")  # type: ignore[arg-type]
    assert tools.read_file("a.md", offset="x").startswith("Error:")  # type: ignore[arg-type]


def test_bad_content_is_explained(tools: MemoryTools) -> None:
    assert "must start with YAML frontmatter" in tools.save_file("a.md", "hello")
    assert "limit is 65536 bytes" in tools.save_file("a.md", GOOD + "x" * 70_000)
    assert "not one of" in tools.save_file("a.md", GOOD.replace("type: user", "type: secret"))
    assert "kept for you" in tools.save_file("MEMORY.md", GOOD)


def test_users_are_isolated(store: ObjectStore) -> None:
    alice = MemoryTools(MemoryDir(store, Place.user_agent("alice")))
    bob = MemoryTools(MemoryDir(store, Place.user_agent("bob")))
    alice.save_file("secret.md", GOOD.replace("frontend engineer", "alice secret"))
    assert "no memory file named" in bob.read_file("secret.md")
    assert "alice secret" not in bob.list_files()
    assert bob.read_file("../alice/secret.md").startswith("Error:")
    assert bob.read_file("../../alice/agent-memory/default/secret.md").startswith("Error:")


def test_shared_memory_read_only_unless_allowed(store: ObjectStore) -> None:
    shared = MemoryDir(store, Place.shared_agent("default"))
    shared.save("team.md", GOOD.replace("frontend engineer", "team conventions"))
    ro = MemoryTools(MemoryDir(store, Place.user_agent("u1")), shared)
    assert "team conventions" in ro.list_files() and "shared/team.md" in ro.list_files()
    assert "TypeScript" in ro.read_file("shared/team.md")
    assert "read-only" in ro.save_file("shared/x.md", GOOD)
    assert "read-only" in ro.delete_file("shared/team.md")
    assert "reserved" in ro.save_file("shared", GOOD)
    rw = MemoryTools(MemoryDir(store, Place.user_agent("u1")), shared, shared_writable=True)
    assert rw.save_file("shared/x.md", GOOD).startswith("Created")
    assert store.exists("memory/agent-memory/default/x.md")


def test_async_twins(tools: MemoryTools) -> None:
    async def go() -> list[str]:
        return [
            await tools.asave_file("a.md", GOOD),
            await tools.aread_file("a.md"),
            await tools.alist_files(),
            await tools.areplace_file_chunk("a.md", "Vue", "Svelte"),
            await tools.adelete_file("a.md"),
        ]

    out = asyncio.run(go())
    assert out[0].startswith("Created") and "TypeScript" in out[1] and "a.md" in out[2]
    assert out[3].startswith("Updated") and out[4].startswith("Deleted")


def test_agno_sees_six_sync_and_six_async_tools(tools: MemoryTools) -> None:
    assert tuple(tools.functions) == (*TOOL_NAMES, SEARCH_TOOL_NAME)
    assert tuple(tools.async_functions) == (*TOOL_NAMES, SEARCH_TOOL_NAME)
    plain = MemoryTools(tools.own, tools.shared, search=False)  # recall.search_tool=false: the five only
    assert tuple(plain.functions) == TOOL_NAMES == tuple(plain.async_functions)
    save = tools.functions["save_file"]
    save.process_entrypoint()
    assert set(save.parameters["properties"]) == {"file_name", "content"}
    assert "frontmatter" in save.parameters["properties"]["content"].get("description", "")
    assert tools.async_functions["save_file"].entrypoint.__doc__ == tools.functions["save_file"].entrypoint.__doc__


def test_deepcopy_shares_clients(tools: MemoryTools) -> None:
    import copy

    assert copy.deepcopy(tools) is tools


def test_store_outage_mid_writes_gives_clear_errors_and_a_whole_index(seaweedfs: Any, cos_bucket: str) -> None:
    """The object store goes away while saves are running; afterwards the index is whole."""
    import threading

    from harness_memory.memdir import parse_index, parse_memory
    from harness_memory.storage import CosStore
    from tests.conftest import cos_test_settings
    from tests.tcpproxy import TcpProxy

    proxy = TcpProxy(seaweedfs.s3_port).start()
    settings = cos_test_settings(seaweedfs, cos_bucket)
    settings["cos_domain"] = f"127.0.0.1:{proxy.port}/{cos_bucket}"
    settings["cos_timeout"] = 2.0
    store = CosStore(**settings)
    tools = MemoryTools(MemoryDir(store, Place.user_agent("u1")))
    outcomes: list[tuple[str, str]] = []
    started = threading.Event()

    def writer(w: int) -> None:
        for i in range(40):
            name = f"w{w}_{i:02d}.md"
            outcomes.append((name, tools.save_file(name, GOOD.replace("user role", f"m{w}-{i}"))))
            if i == 3:
                started.set()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    started.wait(20)
    proxy.cut()
    for t in threads:
        t.join(60)
    results = [r for _, r in outcomes]
    errors = [r for r in results if r.startswith("Error:")]
    assert errors and all("unreachable" in e or "failed" in e for e in errors), errors[:3]
    assert all(r.startswith(("Created", "Error:")) for r in results)
    assert tools.list_files().startswith("Error: the memory store is unreachable")

    proxy.restore()
    memdir = MemoryDir(store, Place.user_agent("u1"))
    manifest = memdir.manifest()
    index = [f for _, f, _ in parse_index(store.get(memdir.index_key).data.decode())]
    created = {name for name, r in outcomes if r.startswith("Created")}
    assert created and created <= set(manifest.entries)  # every save reported as done is in the index
    for file in manifest.entries:  # and every index entry is a whole, parseable file
        parse_memory(memdir.read(file).text)
    assert set(index) <= set(manifest.entries)
    store.close()
    proxy.cut()
