"""Auth and isolation: API token, admin token, and cross-user attempts by path, header, body,
export, import and session id — each refused (403/401) or confined to the caller, nothing leaked."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
from fastapi import FastAPI

from harness_memory.auto.service import auto_memory_for
from harness_memory.config import MemoryConfig
from harness_memory.control.bundle import Bundle, BundleFile, BundlePlace
from harness_memory.server import create_app
from harness_memory.services import services_for
from harness_memory.session.binding import bind_session
from tests.servers import RedisServer, SeaweedFS

from .test_server_memory import ADMIN, GOOD, api, error_of, keys, private_config, stored

MakeConfig = Callable[..., MemoryConfig]
TOKEN = "api-secret"
SECRET = "u1 secret: the launch code is 4242"
SECRET_MEMORY = f"---\nname: launch\ndescription: private to u1\ntype: project\n---\n\n{SECRET}\n"
U1 = "/users/u1/agents/default/memory"


@pytest.fixture
def cfg(make_config: MakeConfig) -> MemoryConfig:
    return make_config(backend="cos", redis=True, server={"api_token": TOKEN, "admin_token": ADMIN})


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def seed_u1(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u1", **bearer()) as c:
        assert (await c.put(f"{U1}/files/launch.md", json={"content": SECRET_MEMORY})).status_code == 201
        assert (await c.post("/users/me/facts", json={"content": "u1 flies to Tokyo"})).status_code == 201


@pytest.fixture(scope="module")
def seeded(seaweedfs: SeaweedFS, redis_server: RedisServer) -> Iterator[tuple[MemoryConfig, FastAPI]]:
    """One app whose u1 has a secret memory and fact; shared by the many cross-user cases."""
    with private_config(seaweedfs, redis_server, server={"api_token": TOKEN, "admin_token": ADMIN}) as cfg:
        services = services_for(cfg)
        services.user_agent_dir("u1").save("launch.md", SECRET_MEMORY)
        auto_memory_for(services).add_fact("u1", "u1 flies to Tokyo")
        yield cfg, create_app(cfg)


async def test_api_token_is_required_except_for_probes(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u1") as c:
        for url in ("/users/me/agents/default/memory", "/users/me/memory/export", "/config", "/users/me/facts"):
            r = await c.get(url)
            assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", url
            assert "Authorization: Bearer" in error_of(r)["detail"]
        wrong = await c.get("/users/me/agents/default/memory", headers=bearer("nope"))
        assert wrong.status_code == 401 and "not valid" in error_of(wrong)["detail"]
        run = await c.post("/agents/default/runs", json={"message": "hi"})
        assert run.status_code == 401
        assert (await c.get("/health/live")).status_code == 200
        assert (await c.get("/health/ready")).status_code == 200
        assert (await c.get("/users/me/agents/default/memory", headers=bearer())).status_code == 200
        assert (await c.get("/users/me/agents/default/memory", headers={"X-API-Key": TOKEN})).status_code == 200
        assert (await c.get("/users/me/agents/default/memory", headers=bearer(ADMIN))).status_code == 200


async def test_config_is_admin_only_and_masks_secrets(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u1", **bearer()) as c:
        assert (await c.get("/config")).status_code == 403
        r = await c.get("/config", headers=bearer(ADMIN))
        assert r.status_code == 200
        body = r.json()
        assert body["server"]["api_token"] == "***" and body["server"]["admin_token"] == "***"
        assert TOKEN not in r.text and ADMIN not in r.text
        assert body["store"]["backend"] == "cos"


@pytest.mark.parametrize(("method", "url", "payload"), [
    ("GET", U1, None),
    ("GET", f"{U1}/files/launch.md", None),
    ("GET", f"{U1}/files/launch.md?raw=true", None),
    ("GET", f"{U1}/index", None),
    ("PUT", f"{U1}/files/launch.md", {"content": GOOD}),
    ("PATCH", f"{U1}/files/launch.md", {"old": "4242", "new": "0000"}),
    ("DELETE", f"{U1}/files/launch.md", None),
    ("DELETE", U1, None),
    ("POST", f"{U1}/reindex", None),
    ("GET", f"{U1}/export", None),
    ("GET", f"{U1}/export?format=zip", None),
    ("GET", "/users/u1/memory", None),
    ("GET", "/users/u1/memory/export", None),
    ("DELETE", "/users/u1/memory", None),
    ("GET", "/users/u1/facts", None),
    ("POST", "/users/u1/facts", {"content": "planted"}),
    ("GET", "/users/u1/profile", None),
    ("GET", "/users/u1/projects/default/memory", None),
    ("POST", "/users/u1/sessions", None),
    ("GET", "/users/u1/sessions/s1", None),
    ("GET", "/users/u1/agents/default/snapshot", None),
    ("POST", "/users/u1/agents/default/snapshot/replace", None),
    ("GET", "/sessions/s1", None),
    ("GET", "/shared/agents/default/memory", None),
])
async def test_cross_user_by_path_is_refused_and_leaks_nothing(seeded: tuple[MemoryConfig, FastAPI], method: str,
                                                                url: str, payload: object) -> None:
    cfg, app = seeded
    before = {k: stored(cfg, k[len("memory/"):]) for k in keys(cfg)}
    assert any(k.endswith("/launch.md") for k in before)
    async with api(app, wid="u2", **bearer()) as c:
        r = await c.request(method, url, json=payload) if payload is not None else await c.request(method, url)
    assert r.status_code == 403, (url, r.status_code, r.text)
    assert SECRET not in r.text and "Tokyo" not in r.text and "launch" not in r.text
    after = {k: stored(cfg, k[len("memory/"):]) for k in keys(cfg)}
    assert after == before  # nothing written, nothing deleted


async def test_missing_or_bad_wid_header(cfg: MemoryConfig) -> None:
    async with api(cfg, **bearer()) as c:
        r = await c.get("/users/me/agents/default/memory")
        assert r.status_code == 401 and "'wid' header" in error_of(r)["detail"]
        r = await c.get("/users/me/agents/default/memory", headers={"wid": "../u1"})
        assert r.status_code == 422 and error_of(r)["code"] == "invalid_name"
        r = await c.get("/users/u1/agents/default/memory")  # naming the user in the path is not enough
        assert r.status_code == 401


async def test_cross_user_by_body_is_refused(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u2", **bearer()) as c:
        r = await c.post("/agents/default/runs", json={"message": "what is the launch code?", "user_id": "u1"})
        assert r.status_code == 403 and "body" in error_of(r)["detail"]


async def test_export_of_another_user_contains_nothing_of_theirs(cfg: MemoryConfig) -> None:
    await seed_u1(cfg)
    async with api(cfg, wid="u2", **bearer()) as c:
        await c.put("/users/me/agents/default/memory/files/own.md", json={"content": GOOD})
        r = await c.get("/users/me/memory/export")
        assert r.status_code == 200
        assert SECRET not in r.text and "Tokyo" not in r.text
        assert {p["user_id"] for p in r.json()["places"]} == {"u2"}


async def test_import_naming_another_user_is_refused_whole(cfg: MemoryConfig) -> None:
    """A bundle that names user u1, imported by u2, is refused (422 naming u1): nothing lands in
    u1's place nor, silently retargeted, in u2's (issue 28: the docs say entries for a place the
    caller may not write are refused, and refusing is the safer of the two)."""
    await seed_u1(cfg)
    before = stored(cfg, "users/u1/agent-memory/default/launch.md")
    planted = Bundle(scope="users/u1", places=[BundlePlace(kind="user-agent", user_id="u1", agent_type="default",
                                                           files=[BundleFile(file="launch.md", content=GOOD)])])
    async with api(cfg, wid="u2", **bearer()) as c:
        r = await c.post("/users/me/memory/import?mode=replace", content=planted.model_dump_json(),
                         headers={"content-type": "application/json"})
        assert r.status_code == 422 and "'u1'" in r.text, r.text
        shared = Bundle(places=[BundlePlace(kind="shared-agent", agent_type="default",
                                            files=[BundleFile(file="x.md", content=GOOD)])])
        r = await c.post("/users/me/memory/import", content=shared.model_dump_json())
        assert r.status_code == 422 and "admin" in r.text
    assert stored(cfg, "users/u1/agent-memory/default/launch.md") == before
    assert stored(cfg, "users/u2/agent-memory/default/launch.md") is None
    assert stored(cfg, "agent-memory/default/x.md") is None


async def test_another_users_session_id_reaches_only_ones_own_session(cfg: MemoryConfig) -> None:
    u1_session, _ = bind_session("u1", None, cfg.session.bind_to_user)
    services = services_for(cfg)
    services.store.put(f"memory/sessions/session-{u1_session}.md", f"# Summary\n\n{SECRET}\n".encode())
    async with api(cfg, **bearer()) as c:
        mine = await c.get(f"/users/me/sessions/{u1_session}", headers={"wid": "u1"})
        assert mine.status_code == 200 and SECRET in (mine.json()["stored_summary"] or "")
        theirs = await c.get(f"/users/me/sessions/{u1_session}", headers={"wid": "u2"})
        assert theirs.status_code == 200
        assert theirs.json()["session_id"] != u1_session and theirs.json()["stored_summary"] is None
        assert SECRET not in theirs.text
        admin = await c.get(f"/sessions/{u1_session}", headers=bearer(ADMIN))
        assert admin.status_code == 200 and SECRET in admin.text


async def test_admin_may_act_for_any_user(cfg: MemoryConfig) -> None:
    await seed_u1(cfg)
    async with api(cfg, **bearer(ADMIN)) as c:
        r = await c.get(f"{U1}/files/launch.md")
        assert r.status_code == 200 and SECRET in r.json()["content"]
        r = await c.get("/users/me/agents/default/memory")  # an operator must name the user
        assert r.status_code == 422
        assert (await c.get("/shared/agents/default/memory")).status_code == 200


async def test_body_mode_trusts_the_body_and_all_sources_must_agree(make_config: MakeConfig) -> None:
    cfg = make_config(backend="cos", server={"user_source": "body"})
    async with api(cfg) as c:
        r = await c.post("/agents/default/runs", json={"message": "hi", "user_id": "u1"})
        assert r.status_code == 503 and error_of(r)["code"] == "model_not_configured"  # past the user check
        r = await c.post("/agents/default/runs", json={"message": "hi", "user_id": "u1"}, headers={"wid": "u2"})
        assert r.status_code == 403
        r = await c.post("/agents/default/runs", json={"message": "hi"})
        assert r.status_code == 422 and "user" in error_of(r)["detail"]
        r = await c.put("/users/u1/agents/default/memory/files/a.md", json={"content": GOOD})
        assert r.status_code == 201
        r = await c.get("/users/me/agents/default/memory")
        assert r.status_code == 422
        r = await c.get("/users/me/agents/default/memory", headers={"wid": "u1"})
        assert r.status_code == 200 and json.loads(r.text)["count"] == 1
        r = await c.get("/users/u1/agents/default/memory", headers={"wid": "u2"})
        assert r.status_code == 403
