"""The safety net over HTTP (trash, bulk delete, history), whole-memory search, people's errors on
the form's fields and fact corrections — on SeaweedFS + Redis, checked in the store.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_memory.config import MemoryConfig
from harness_memory.errors import StorageError
from harness_memory.memdir import trash as kept
from harness_memory.services import services_for

from .test_server_memory import BASE, GOOD, PREFS, api, error_of, stored

MakeConfig = Callable[..., MemoryConfig]
PLACE = "users/u1/agent-memory/default/"


@pytest.fixture
def cfg(make_config: MakeConfig) -> MemoryConfig:
    return make_config(backend="cos", redis=True)


def memory(name: str, description: str, body: str, type_: str = "project") -> str:
    return f"---\nname: {name}\ndescription: {description}\ntype: {type_}\n---\n\n{body}\n"


async def test_delete_goes_to_the_trash_and_restores_byte_identical(cfg: MemoryConfig) -> None:
    mdir = services_for(cfg).user_agent_dir("u1")
    mdir.save_many([("a.md", GOOD), ("notes/b.md", PREFS), ("c.md", memory("c", "kept", "stay"))])
    async with api(cfg, wid="u1") as c:
        one = await c.delete(f"{BASE}/files/a.md")
        assert one.status_code == 204 and one.headers["x-trash-id"]
        bulk = await c.post(f"{BASE}/delete", json={"files": ["notes/b.md", "nope.md"]})
        assert bulk.status_code == 200, bulk.text
        assert bulk.json()["deleted"] == ["notes/b.md"] and bulk.json()["missing"] == ["nope.md"]
        assert stored(cfg, PLACE + "a.md") is None and stored(cfg, PLACE + "notes/b.md") is None
        index = (stored(cfg, PLACE + "MEMORY.md") or b"").decode()
        assert "a.md" not in index and "b.md" not in index and "c.md" in index

        listed = (await c.get(f"{BASE}/trash")).json()
        assert listed["count"] == 2 and listed["keep_days"] == 30
        assert [[f["file"] for f in i["files"]] for i in listed["items"]] == [["notes/b.md"], ["a.md"]]
        item = listed["items"][1]
        assert item["files"][0]["name"] == "user role" and item["expires_at"] - item["deleted_at"] == 30 * 86400
        # The trash object is in the store, below the place, before anything else looks at it.
        raw = stored(cfg, f"{PLACE}.trash/{item['id']}.json")
        assert raw is not None and json.loads(raw)["files"][0]["content"] == GOOD

        back = await c.post(f"{BASE}/trash/{item['id']}/restore")
        assert back.status_code == 200 and back.json()["restored"] == ["a.md"]
        assert stored(cfg, PLACE + "a.md") == GOOD.encode()
        assert "a.md" in (stored(cfg, PLACE + "MEMORY.md") or b"").decode()
        assert [i["id"] for i in (await c.get(f"{BASE}/trash")).json()["items"]] == [bulk.json()["trash_id"]]
        again = await c.post(f"{BASE}/trash/{item['id']}/restore")
        assert again.status_code == 404 and "restored, purged or expired" in error_of(again)["detail"]

        purged = await c.delete(f"{BASE}/trash/{bulk.json()['trash_id']}")
        assert purged.status_code == 200 and purged.json()["purged"] == 1
        assert (await c.get(f"{BASE}/trash")).json()["count"] == 0
        # The trash is no memory: not listed, not exported.
        files = {f["file"] for f in (await c.get(BASE)).json()["files"]}
        assert files == {"a.md", "c.md"}
        bundle = (await c.get(f"{BASE}/export")).json()
        assert ".trash" not in json.dumps(bundle) and ".history" not in json.dumps(bundle)
    # Another user cannot see or restore u1's trash.
    mdir.delete("c.md")
    async with api(cfg, wid="u2") as c:
        assert (await c.get("/users/u1/agents/default/memory/trash")).status_code == 403
        assert (await c.get(f"{BASE}/trash")).json()["count"] == 0


async def test_a_failed_trash_write_deletes_nothing(cfg: MemoryConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    services = services_for(cfg)
    mdir = services.user_agent_dir("u1")
    mdir.save("a.md", GOOD)
    real_put = type(services.store).put

    def failing_put(self: object, key: str, *args: object, **kwargs: object) -> object:
        if "/.trash/" in key:
            raise StorageError("the store refused the trash object")
        return real_put(self, key, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(type(services.store), "put", failing_put)
    with pytest.raises(StorageError):
        kept.trash_files(mdir, ["a.md"], "person")
    monkeypatch.undo()
    assert stored(cfg, PLACE + "a.md") == GOOD.encode()
    assert [e.file for e in mdir.list_entries()] == ["a.md"]


async def test_expired_trash_is_not_listed_and_is_purged(make_config: MakeConfig) -> None:
    cfg = make_config(backend="cos", redis=True, limits={"trash_days": 1})
    mdir = services_for(cfg).user_agent_dir("u1")
    mdir.save_many([("a.md", GOOD), ("b.md", PREFS)])
    old = kept.TrashBatch(kept.new_id(1_000_000.0), 1_000_000.0, "person", [kept.TrashedFile("a.md", GOOD)])
    mdir.store.put(mdir.place.prefix + f".trash/{old.id}.json", old.to_bytes())
    assert kept.list_trash(mdir) == []
    kept.trash_files(mdir, ["b.md"], "person")  # a deletion purges what is past its days
    assert stored(cfg, f"{PLACE}.trash/{old.id}.json") is None
    assert [[f.file for f in b.files] for b in kept.list_trash(mdir)] == [["b.md"]]


async def test_history_keeps_each_edit_and_restores_it(make_config: MakeConfig) -> None:
    cfg = make_config(backend="cos", redis=True, limits={"history_versions": 2})
    services_for(cfg).user_agent_dir("u1").save("a.md", memory("a", "v1", "one"))
    async with api(cfg, wid="u1") as c:
        for n in (2, 3, 4):
            form = {"name": "a", "description": f"v{n}", "type": "project", "body": f"text {n}"}
            assert (await c.put(f"{BASE}/fields/a.md", json=form)).status_code == 200
        same = {"name": "a", "description": "v4", "type": "project", "body": "text 4"}
        assert (await c.put(f"{BASE}/fields/a.md", json=same)).status_code == 200  # unchanged: no version
        versions = (await c.get(f"{BASE}/history/a.md")).json()["versions"]
        assert ["v3" in v["content"] for v in versions] == [True, False]  # the newest two are kept
        assert "description: v2" in versions[1]["content"] and versions[0]["origin"] == "person"
        back = await c.post(f"{BASE}/restore-version/a.md", json={"version": versions[1]["id"]})
        assert back.status_code == 200, back.text
        assert b"description: v2" in (stored(cfg, PLACE + "a.md") or b"")
        newest = (await c.get(f"{BASE}/history/a.md")).json()["versions"][0]
        assert "description: v4" in newest["content"] and newest["origin"] == "restore"
        missing = await c.post(f"{BASE}/restore-version/a.md", json={"version": "0000000000001-ffff"})
        assert missing.status_code == 404


@pytest.mark.parametrize(("field", "value", "says"), [
    ("description", "", "Write one line saying what this memory holds"),
    ("name", "  ", "Give the memory a short name"),
    ("type", "opinion", "Choose a type: user, feedback, project, reference."),
    ("description", "x" * 501, "keep it under 500"),
])
async def test_form_errors_speak_to_people_and_name_the_field(cfg: MemoryConfig, field: str, value: str,
                                                              says: str) -> None:
    services_for(cfg).user_agent_dir("u1").save("a.md", GOOD)
    form = {"name": "a", "description": "d", "type": "user", "body": "b", field: value}
    async with api(cfg, wid="u1") as c:
        bad = await c.put(f"{BASE}/fields/a.md", json=form)
    err = error_of(bad)
    assert bad.status_code == 422 and err["code"] == f"invalid_{field}" and says in err["detail"]
    assert "Expected" not in err["detail"] and "BigQuery" not in err["detail"]
    assert stored(cfg, PLACE + "a.md") == GOOD.encode()


async def test_search_matches_every_word_anywhere_and_counts_follow_it(cfg: MemoryConfig) -> None:
    services_for(cfg).user_agent_dir("u1").save_many([
        ("db.md", memory("数据库", "迁移计划", "We use react for the admin UI.")),
        ("ui.md", memory("frontend", "react 组件", "状态管理 only", "user")),
        ("body.md", memory("misc", "nothing here", "The deployments use zanzibar and 数据库.", "reference"))])
    services_for(cfg).user_agent_dir("u1").save("old.md", memory("old", "react notes", "nothing"))  # the newest
    async with api(cfg, wid="u1") as c:
        async def files(q: str, **params: str) -> tuple[list[str], dict[str, int]]:
            out = (await c.get(BASE, params={"q": q, **params})).json()
            return [f["file"] for f in out["files"]], out["types"]

        a, types = await files("数据库 react")
        b, _ = await files("react 数据库")
        assert sorted(a) == sorted(b) == ["db.md"] and types == {"project": 1}
        assert (await files("zanzibar"))[0] == ["body.md"]  # a word found only in a body
        assert (await files("deployment"))[0] == ["body.md"]  # plural folded
        found, types = await files("react")
        assert sorted(found) == ["db.md", "old.md", "ui.md"] and types == {"project": 2, "user": 1}
        assert (await files("react", type="user"))[0] == ["ui.md"]
        assert (await files("react zanzibar"))[0] == []
        assert (await files("reac"))[0] != []  # a half-typed word narrows by name/description
        listing = (await c.get(BASE, params={"order": "updated"})).json()
        assert listing["files"][0]["file"] == "old.md" and listing["total"] == 4


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=8), min_size=1,
                      max_size=3))
def test_search_word_order_never_matters(cfg: MemoryConfig, words: list[str]) -> None:
    from harness_memory.search.match import matching

    mdir = services_for(cfg).user_agent_dir("u1")
    if not mdir.list_entries():
        mdir.save_many([(f"m{i}.md", memory(f"n{i}", " ".join(words[: i + 1]), " ".join(reversed(words))))
                        for i in range(len(words))])
    manifest = mdir.manifest()
    forward = matching(mdir, manifest, " ".join(words))
    backward = matching(mdir, manifest, " ".join(reversed(words)))
    assert forward == backward


async def test_this_is_wrong_records_a_correction_the_assistant_avoids(cfg: MemoryConfig) -> None:
    services = services_for(cfg)
    fact = services.auto_memory().add_fact("u1", "lives in Beijing", "knowledge", 0.8)
    async with api(cfg, wid="u1") as c:
        fixed = await c.post(f"/users/me/facts/{fact.id}/correct", json={"content": "lives in Shanghai"})
        assert fixed.status_code == 200, fixed.text
        out = fixed.json()
        assert (out["content"], out["category"], out["source_error"], out["source"]) == (
            "lives in Shanghai", "correction", "lives in Beijing", "manual")
        # Stored as a correction and shown to the assistant as "avoid".
        from harness_memory.auto.inject import fact_line

        stored_fact = next(f for f in services.auto_memory().list_facts("u1") if f.id == fact.id)
        assert fact_line(stored_fact) == "- lives in Shanghai (avoid: lives in Beijing)"
        # A second correction keeps the first wrong belief.
        again = (await c.post(f"/users/me/facts/{fact.id}/correct", json={"content": "lives in Hangzhou"})).json()
        assert again["source_error"] == "lives in Beijing"
        same = await c.post(f"/users/me/facts/{fact.id}/correct", json={"content": "lives in Beijing"})
        assert same.status_code == 422
        # A source_error with another category is refused, never dropped silently.
        refused = await c.post("/users/me/facts", json={"content": "likes tea", "category": "preference",
                                                        "source_error": "likes coffee"})
        assert refused.status_code == 422 and "belongs to a correction" in error_of(refused)["detail"]
        patched = await c.patch(f"/users/me/facts/{fact.id}", json={"category": "knowledge",
                                                                   "source_error": "x"})
        assert patched.status_code == 422
        # Category and expiry editable; leaving "correction" drops the wrong belief with it.
        moved = await c.patch(f"/users/me/facts/{fact.id}", json={"category": "knowledge", "expires": "2030-01-31"})
        assert moved.status_code == 200 and moved.json()["source_error"] is None
        assert moved.json()["expires"] == "2030-01-31" and moved.json()["category"] == "knowledge"
        # Deleting a fact keeps it in the auto place's trash; restoring brings it back.
        assert (await c.delete(f"/users/me/facts/{fact.id}")).status_code == 204
        trash = (await c.get("/users/me/projects/default/memory/trash")).json()
        assert [f["file"] for f in trash["items"][0]["files"]] == [f"{fact.id}.md"]
        back = await c.post(f"/users/me/projects/default/memory/trash/{trash['items'][0]['id']}/restore")
        assert back.status_code == 200
        assert [f["content"] for f in (await c.get("/users/me/facts")).json()["facts"]] == ["lives in Hangzhou"]


async def test_a_session_shows_which_memories_were_recalled_in_it(cfg: MemoryConfig) -> None:
    from harness_memory.session.binding import bind_session

    services = services_for(cfg)
    bound, _ = bind_session("u1", "chat-7", cfg.session.bind_to_user)
    services.surfaced_tracker().mark(bound, ["user_role.md", "notes/b.md"], user_id="u1")
    async with api(cfg, wid="u1") as c:
        seen = (await c.get("/users/me/sessions/chat-7/recalled")).json()
        assert seen == {"session_id": "chat-7", "agent_type": "default", "files": ["notes/b.md", "user_role.md"]}
        other = (await c.get("/users/me/sessions/chat-7/recalled", params={"agent_type": "coder"})).json()
        assert other["files"] == []
    async with api(cfg, wid="u2") as c:  # the same session id named by another user is their own (empty) one
        assert (await c.get("/users/me/sessions/chat-7/recalled")).json()["files"] == []
        assert (await c.get("/users/u1/sessions/chat-7/recalled")).status_code == 403


async def test_clearing_every_fact_is_one_restorable_trash_item(cfg: MemoryConfig) -> None:
    auto = services_for(cfg).auto_memory()
    for content in ("prefers tea", "works at ACME", "lives in Hangzhou"):
        auto.add_fact("u1", content, "knowledge", 1.0)
    async with api(cfg, wid="u1") as c:
        assert (await c.delete("/users/me/facts")).json()["deleted"] == 3
        assert (await c.get("/users/me/facts")).json()["count"] == 0
        trash = (await c.get("/users/me/projects/default/memory/trash")).json()
        assert trash["count"] == 1 and len(trash["items"][0]["files"]) == 3
        assert (await c.post(f"/users/me/projects/default/memory/trash/{trash['items'][0]['id']}/restore")
                ).status_code == 200
    assert sorted(f.content for f in auto.list_facts("u1")) == ["lives in Hangzhou", "prefers tea", "works at ACME"]


async def test_each_memory_says_who_wrote_its_current_version(cfg: MemoryConfig) -> None:
    mdir = services_for(cfg).user_agent_dir("u1")
    mdir.save("a.md", memory("a", "from a conversation", "x"))  # what the assistant's tools call
    mdir.save("b.md", memory("b", "also", "y"))
    async with api(cfg, wid="u1") as c:
        async def origin(file: str) -> str:
            return str((await c.get(f"{BASE}/fields/{file}")).json()["origin"])

        assert await origin("a.md") == "assistant"
        form = {"name": "a", "description": "edited by a person", "type": "project", "body": "x"}
        assert (await c.put(f"{BASE}/fields/a.md", json=form)).status_code == 200
        assert await origin("a.md") == "person" and await origin("b.md") == "assistant"
        mdir.save("a.md", memory("a", "the assistant again", "z"))
        assert await origin("a.md") == "assistant"  # a later tool save is the assistant's again
        bundle = (await c.get(f"{BASE}/export")).content
        await c.delete(BASE)
        imported = await c.post(f"{BASE}/import", content=bundle, headers={"content-type": "application/json"})
        assert imported.status_code == 200, imported.text
        assert await origin("a.md") == "import" and await origin("b.md") == "import"
        meta = json.loads(stored(cfg, PLACE + ".manifest.json") or b"{}").get("meta", {})
        assert len(meta.get("origins", {})) <= kept.MAX_ORIGINS


async def test_clearing_a_place_or_forgetting_a_user_goes_to_the_trash_unless_purged(cfg: MemoryConfig) -> None:
    services = services_for(cfg)
    services.user_agent_dir("u1").save_many([("a.md", GOOD), ("notes/b.md", PREFS)])
    services.auto_memory().add_fact("u1", "prefers tea", "preference", 1.0)
    facts_base = "/users/me/projects/default/memory"
    async with api(cfg, wid="u1") as c:
        cleared = (await c.delete(BASE)).json()
        assert cleared["deleted_files"] == 2 and cleared["in_trash"] is True and cleared["keep_days"] == 30
        assert (await c.get(BASE)).json()["total"] == 0 and stored(cfg, PLACE + "a.md") is None
        (item,) = (await c.get(f"{BASE}/trash")).json()["items"]
        assert item["origin"] == "api" and sorted(f["file"] for f in item["files"]) == ["a.md", "notes/b.md"]
        assert (await c.post(f"{BASE}/trash/{item['id']}/restore")).status_code == 200
        assert stored(cfg, PLACE + "a.md") == GOOD.encode() and stored(cfg, PLACE + "notes/b.md") == PREFS.encode()

        forgot = (await c.delete("/users/me/memory")).json()
        assert forgot["deleted_files"] == 3 and forgot["in_trash"] is True and len(forgot["places"]) == 2
        assert (await c.get("/users/me/facts")).json()["count"] == 0
        for base in (BASE, facts_base):
            (item,) = (await c.get(f"{base}/trash")).json()["items"]
            assert item["origin"] == "person"
            assert (await c.post(f"{base}/trash/{item['id']}/restore")).status_code == 200
        assert stored(cfg, PLACE + "a.md") == GOOD.encode()
        assert [f["content"] for f in (await c.get("/users/me/facts")).json()["facts"]] == ["prefers tea"]

        purged = (await c.delete("/users/me/memory?purge=true")).json()
        assert purged["deleted_files"] == 3 and purged["in_trash"] is False and purged["keep_days"] is None
        assert (await c.get(f"{BASE}/trash")).json()["count"] == 0
    assert stored(cfg, PLACE + ".manifest.json") is None and stored(cfg, PLACE + "MEMORY.md") is None
