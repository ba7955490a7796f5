"""HTTP memory-file API on SeaweedFS + Redis: CRUD in every place kind, bad bodies, store failures.

Assertions look at what the server STORED (objects in SeaweedFS, the manifest, MEMORY.md), not
only at what it answered. The helpers here are shared by the other ``test_server_*`` modules.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from fastapi import FastAPI

from harness_memory.config import MemoryConfig
from harness_memory.server import create_app
from harness_memory.services import services_for
from tests.conftest import cos_test_settings
from tests.servers import RedisServer, SeaweedFS

from .test_layout import HOSTILE_FILENAMES

MakeConfig = Callable[..., MemoryConfig]
ADMIN = "admin-secret"
GOOD = "---\nname: user role\ndescription: frontend engineer\ntype: user\n---\n\nTypeScript, Vue.\n"
PREFS = "---\nname: prefs\ndescription: writes reports in Chinese\ntype: feedback\n---\n\n报告用中文。\n"
BASE = "/users/me/agents/default/memory"


@contextlib.asynccontextmanager
async def api(cfg: MemoryConfig | FastAPI, **headers: str) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the app (ASGI transport) with default headers; a config gets a fresh app."""
    app = cfg if isinstance(cfg, FastAPI) else create_app(cfg)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://memory.test", headers=headers,
                                 timeout=30) as client:
        yield client


def stored(cfg: MemoryConfig, rel: str) -> bytes | None:
    obj = services_for(cfg).store.get_or_none("memory/" + rel)
    return None if obj is None else obj.data


def keys(cfg: MemoryConfig, under: str = "") -> list[str]:
    return [i.key for i in services_for(cfg).store.list("memory/" + under)]


def error_of(resp: httpx.Response) -> dict[str, Any]:
    body = resp.json()
    assert isinstance(body.get("detail"), str) and body["detail"], body
    assert isinstance(body.get("code"), str), body
    return body


@pytest.fixture
def cfg(make_config: MakeConfig) -> MemoryConfig:
    return make_config(backend="cos", redis=True, server={"admin_token": ADMIN})


@contextlib.contextmanager
def private_config(seaweedfs: SeaweedFS, redis_server: RedisServer, **sections: dict[str, Any]
                   ) -> Iterator[MemoryConfig]:
    """A config on its own bucket and Redis key prefix, for module-scoped fixtures (``make_config``
    is per test): the many parametrized refusal tests share one app instead of building one each."""
    bucket = seaweedfs.create_bucket(f"t-mod-{uuid.uuid4().hex[:8]}")
    try:
        yield MemoryConfig.load(env={}, store=cos_test_settings(seaweedfs, bucket),
                                redis={"url": redis_server.url, "key_prefix": f"t-{bucket}:"}, **sections)
    finally:
        if seaweedfs.running():
            seaweedfs.delete_bucket(bucket)


@pytest.fixture(scope="module")
def module_cfg(seaweedfs: SeaweedFS, redis_server: RedisServer) -> Iterator[MemoryConfig]:
    with private_config(seaweedfs, redis_server, server={"admin_token": ADMIN}) as cfg:
        yield cfg


@pytest.fixture(scope="module")
def module_app(module_cfg: MemoryConfig) -> FastAPI:
    return create_app(module_cfg)


async def test_file_crud_round_trip_is_stored(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u1") as c:
        r = await c.post(f"{BASE}/files", json={"file": "user_role.md", "content": GOOD})
        assert r.status_code == 201, r.text
        assert r.json()["entry"]["description"] == "frontend engineer"
        assert stored(cfg, "users/u1/agent-memory/default/user_role.md") == GOOD.encode()
        index = stored(cfg, "users/u1/agent-memory/default/MEMORY.md")
        assert index is not None and "- [user role](user_role.md) — frontend engineer".encode() in index

        again = await c.post(f"{BASE}/files", json={"file": "user_role.md", "content": PREFS})
        assert again.status_code == 409 and error_of(again)["code"] == "conflict"
        assert stored(cfg, "users/u1/agent-memory/default/user_role.md") == GOOD.encode()

        r = await c.get(f"{BASE}/files/user_role.md")
        assert r.status_code == 200 and r.json()["content"] == GOOD and r.headers["etag"].strip('"')
        raw = await c.get(f"{BASE}/files/user_role.md", params={"raw": "true"})
        assert raw.content == GOOD.encode() and raw.headers["content-type"].startswith("text/markdown")

        r = await c.put(f"{BASE}/files/prefs.md", json={"content": PREFS})
        assert r.status_code == 201 and r.json()["created"] is True
        r = await c.put(f"{BASE}/files/prefs.md", json={"content": PREFS.replace("中文", "简体中文")})
        assert r.status_code == 200 and r.json()["created"] is False
        assert "简体中文".encode() in (stored(cfg, "users/u1/agent-memory/default/prefs.md") or b"")

        r = await c.patch(f"{BASE}/files/user_role.md", json={"old": "Vue.", "new": "Vue and React."})
        assert r.status_code == 200, r.text
        assert b"Vue and React." in (stored(cfg, "users/u1/agent-memory/default/user_role.md") or b"")

        listing = (await c.get(BASE)).json()
        assert listing["place"]["path"] == "users/u1/agent-memory/default"
        assert [f["file"] for f in listing["files"]] == ["prefs.md", "user_role.md"]
        index_view = (await c.get(f"{BASE}/index")).json()
        assert "- [prefs](prefs.md) — writes reports in Chinese" in index_view["text"]

        assert (await c.delete(f"{BASE}/files/prefs.md")).status_code == 204
        assert stored(cfg, "users/u1/agent-memory/default/prefs.md") is None
        assert b"prefs" not in (stored(cfg, "users/u1/agent-memory/default/MEMORY.md") or b"")
        gone = await c.delete(f"{BASE}/files/prefs.md")
        assert gone.status_code == 404 and "prefs.md" in error_of(gone)["detail"]
        assert (await c.get(f"{BASE}/files/prefs.md")).status_code == 404

        cleared = await c.delete(BASE, params={"purge": "true"})  # for good (the default is the trash)
        assert cleared.status_code == 200 and cleared.json()["deleted_files"] == 1
        assert cleared.json()["in_trash"] is False
        assert keys(cfg, "users/u1/") == []


async def test_nested_and_unicode_file_names(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u1") as c:
        name = "项目/笔记 1.md"
        r = await c.put(f"{BASE}/files/{quote(name)}", json={"content": GOOD})
        assert r.status_code == 201, r.text
        assert stored(cfg, f"users/u1/agent-memory/default/{name}") == GOOD.encode()
        assert (await c.get(f"{BASE}/files/{quote(name)}")).json()["content"] == GOOD


async def test_every_place_kind(cfg: MemoryConfig) -> None:
    admin = {"Authorization": f"Bearer {ADMIN}"}
    async with api(cfg, wid="u1") as c:
        assert (await c.put("/users/me/projects/proj/memory/files/a.md", json={"content": GOOD})).status_code == 201
        assert stored(cfg, "users/u1/projects/proj/memory/a.md") == GOOD.encode()
        for shared in ("/shared/agents/default/memory", "/shared/projects/default/memory"):
            denied = await c.put(f"{shared}/files/a.md", json={"content": GOOD})
            assert denied.status_code == 403 and "admin token" in error_of(denied)["detail"]
            ok = await c.put(f"{shared}/files/a.md", json={"content": GOOD}, headers=admin)
            assert ok.status_code == 201, ok.text
        assert stored(cfg, "agent-memory/default/a.md") == GOOD.encode()
        assert stored(cfg, "projects/default/memory/a.md") == GOOD.encode()
        wrong = await c.get("/shared/agents/default/memory", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 403


async def test_reindex_picks_up_hand_copied_files(cfg: MemoryConfig) -> None:
    store = services_for(cfg).store
    store.put("memory/users/u1/agent-memory/default/copied.md", PREFS.encode())
    async with api(cfg, wid="u1") as c:
        assert (await c.get(BASE)).json()["count"] == 0  # the manifest is the index of record
        r = await c.post(f"{BASE}/reindex")
        assert r.status_code == 200 and [f["file"] for f in r.json()["files"]] == ["copied.md"]
    index = stored(cfg, "users/u1/agent-memory/default/MEMORY.md") or b""
    assert "- [prefs](copied.md) — writes reports in Chinese".encode() in index


@pytest.mark.parametrize("name", HOSTILE_FILENAMES[:20])
async def test_hostile_names_in_the_path_are_refused(module_app: FastAPI, module_cfg: MemoryConfig,
                                                     name: str) -> None:
    cfg = module_cfg
    async with api(module_app, wid="u1") as c:
        r = await c.put(f"{BASE}/files/{quote(name, safe='')}", json={"content": GOOD})
        assert r.status_code in (404, 422), (name, r.status_code, r.text)
        assert r.status_code == 404 or error_of(r)["code"] in ("invalid_name", "invalid_request")
    assert keys(cfg) == []


BAD_BODIES: list[tuple[str, str, Any]] = [
    ("POST", f"{BASE}/files", {"file": "a.md"}),  # missing content
    ("POST", f"{BASE}/files", {"file": "a.md", "content": GOOD, "contnet": 1}),  # unknown field
    ("POST", f"{BASE}/files", {"file": 3, "content": GOOD}),
    ("POST", f"{BASE}/files", {"file": "a.txt", "content": GOOD}),
    ("POST", f"{BASE}/files", {"file": "MEMORY.md", "content": GOOD}),
    ("POST", f"{BASE}/files", {"file": "a.md", "content": "no frontmatter"}),
    ("POST", f"{BASE}/files", {"file": "a.md", "content": GOOD.replace("type: user", "type: diary")}),
    ("POST", f"{BASE}/files", {"file": "a.md", "content": GOOD + "x" * 70_000}),
    ("POST", f"{BASE}/files", {"file": "a.md", "content": GOOD + "\x00"}),
    ("POST", f"{BASE}/files", [1, 2]),
    ("POST", f"{BASE}/files", "not json at all"),
    ("PUT", f"{BASE}/files/a.md", {}),
    ("PUT", f"{BASE}/files/a.md", {"content": None}),
    ("PATCH", f"{BASE}/files/a.md", {"old": "", "new": "x"}),
    ("PATCH", f"{BASE}/files/a.md", {"new": "x"}),
    ("GET", "/users/bad%20id/agents/default/memory", None),
    ("GET", "/users/me/agents/..%2F..%2Fx/memory", None),
    ("POST", "/agents/default/runs", {"message": ""}),
    ("POST", "/agents/default/runs", {"message": "hi", "extra": True}),
]


@pytest.mark.parametrize(("method", "url", "body"), BAD_BODIES)
async def test_bad_requests_are_4xx_with_a_message(module_app: FastAPI, module_cfg: MemoryConfig, method: str,
                                                   url: str, body: Any) -> None:
    cfg = module_cfg
    async with api(module_app, wid="u1") as c:
        if isinstance(body, str):
            r = await c.request(method, url, content=body, headers={"content-type": "application/json"})
        else:
            r = await c.request(method, url, json=body) if body is not None else await c.request(method, url)
        assert 400 <= r.status_code < 500, (url, body, r.status_code, r.text)
        error_of(r)
    assert keys(cfg) == []


async def test_patch_errors_name_the_problem(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u1") as c:
        await c.put(f"{BASE}/files/a.md", json={"content": GOOD + "same\nsame\n"})
        r = await c.patch(f"{BASE}/files/a.md", json={"old": "same", "new": "x"})
        assert r.status_code == 422 and "occurs 2 times" in error_of(r)["detail"]
        r = await c.patch(f"{BASE}/files/a.md", json={"old": "absent", "new": "x"})
        assert r.status_code == 422 and "not found" in error_of(r)["detail"]
        r = await c.patch(f"{BASE}/files/missing.md", json={"old": "a", "new": "b"})
        assert r.status_code == 404
        r = await c.patch(f"{BASE}/files/a.md", json={"old": "same", "new": "x", "replace_all": True})
        assert r.status_code == 200
        assert b"same" not in (stored(cfg, "users/u1/agent-memory/default/a.md") or b"")


async def test_store_unreachable_is_503(make_config: MakeConfig) -> None:
    cfg = make_config(backend="cos", store={"cos_domain": "127.0.0.1:9/nothing", "cos_timeout": 1.0})
    async with api(cfg, wid="u1") as c:
        r = await c.get(BASE)
        assert r.status_code == 503, r.text
        assert error_of(r)["code"] in ("store_unavailable", "store_error")
        ready = await c.get("/health/ready")
        assert ready.status_code == 503 and ready.json()["checks"]["store"]["ok"] is False


async def test_held_lock_is_409_busy(make_config: MakeConfig) -> None:
    cfg = make_config(backend="cos", redis=True, limits={"lock_wait_seconds": 0.3})
    services = services_for(cfg)
    place = services.user_agent_dir("u1").place
    async with api(cfg, wid="u1") as c:
        with services.locker.hold(place.lock_name(), wait=1.0):
            r = await c.put(f"{BASE}/files/a.md", json={"content": GOOD})
        assert r.status_code == 409 and error_of(r)["code"] == "busy" and r.headers.get("retry-after")
        assert stored(cfg, "users/u1/agent-memory/default/a.md") is None
        assert (await c.put(f"{BASE}/files/a.md", json={"content": GOOD})).status_code == 201


async def test_unknown_route_and_method_are_json_errors(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u1") as c:
        r = await c.get("/nothing/here")
        assert r.status_code == 404 and error_of(r)["code"] == "not_found"
        r = await c.post(f"{BASE}/index")
        assert r.status_code == 405 and json.loads(r.text)["code"] == "method_not_allowed"


async def test_put_with_if_match_refuses_a_stale_version_and_creates_never_race(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u1") as c:
        assert (await c.put(f"{BASE}/files/a.md", json={"content": GOOD})).status_code == 201
        etag = (await c.get(f"{BASE}/files/a.md")).headers["etag"]
        ok = await c.put(f"{BASE}/files/a.md", json={"content": PREFS}, headers={"If-Match": etag})
        assert ok.status_code == 200, ok.text
        stale = await c.put(f"{BASE}/files/a.md", json={"content": GOOD}, headers={"If-Match": etag})
        assert stale.status_code == 412 and error_of(stale)["code"] == "precondition_failed"
        assert stored(cfg, "users/u1/agent-memory/default/a.md") == PREFS.encode()
        creates = await asyncio.gather(*(c.post(f"{BASE}/files", json={"file": "race.md", "content": GOOD})
                                         for _ in range(6)))
        assert sorted(r.status_code for r in creates) == [201] + [409] * 5
