"""The API the ``/ui`` page added (form fields, whoami, places), its assets and the cross-site guard.

HTTP-level checks on SeaweedFS + Redis; the browser itself is in ``test_ui_browser``. Writes are
checked in the store, refusals by what stayed unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from harness_memory.config import MemoryConfig
from harness_memory.memdir import parse_memory
from harness_memory.server.csrf import cross_site_reason
from harness_memory.services import services_for

from .test_server_memory import ADMIN, BASE, api, error_of, stored

MakeConfig = Callable[..., MemoryConfig]
FILE = "users/u1/agent-memory/default/role.md"
ROLE = ("---\nname: role\ndescription: frontend engineer\ntype: user\nsource: interview\ntags: [vue, ts]\n"
        "---\n\nTypeScript.\n")
FORM = {"name": "role", "description": "frontend: Vue 3 # not a comment", "type": "user", "body": "**Vue 3**"}


@pytest.fixture
def cfg(make_config: MakeConfig) -> MemoryConfig:
    return make_config(backend="cos", redis=True, server={"admin_token": ADMIN})


async def test_fields_read_and_save_keep_extras_and_guard_concurrent_edits(cfg: MemoryConfig) -> None:
    services_for(cfg).user_agent_dir("u1").save("role.md", ROLE)
    async with api(cfg, wid="u1") as c:
        form = (await c.get(f"{BASE}/fields/role.md")).json()
        assert (form["name"], form["description"], form["type"]) == ("role", "frontend engineer", "user")
        assert form["body"] == "TypeScript.\n" and form["extra"] == {"source": "interview", "tags": ["vue", "ts"]}

        saved = await c.put(f"{BASE}/fields/role.md", json=FORM, headers={"If-Match": f'"{form["etag"]}"'})
        assert saved.status_code == 200, saved.text
        memory = parse_memory((stored(cfg, FILE) or b"").decode())
        assert memory.description == FORM["description"] and memory.body.strip() == "**Vue 3**"
        assert memory.extra == {"source": "interview", "tags": ["vue", "ts"]}  # the form's hidden keys survive
        index = (stored(cfg, "users/u1/agent-memory/default/MEMORY.md") or b"").decode()
        assert "frontend: Vue 3 # not a comment" in index

        before = stored(cfg, FILE)
        stale = await c.put(f"{BASE}/fields/role.md", json={**FORM, "body": "lost"},
                            headers={"If-Match": f'"{form["etag"]}"'})
        assert stale.status_code == 412 and "changed since you opened it" in error_of(stale)["detail"]
        assert stored(cfg, FILE) == before

        exists = await c.put(f"{BASE}/fields/role.md", json=FORM, headers={"If-None-Match": "*"})
        assert exists.status_code == 412 and "already exists" in error_of(exists)["detail"]
        created = await c.put(f"{BASE}/fields/新的.md", json=FORM, headers={"If-None-Match": "*"})
        assert created.status_code == 201 and created.json()["entry"]["description"] == FORM["description"]

        bad = await c.put(f"{BASE}/fields/role.md", json={**FORM, "type": "opinion"})
        assert bad.status_code == 422 and error_of(bad) == {  # said for a person, on the field it concerns
            "detail": "Choose a type: user, feedback, project, reference.", "code": "invalid_type"}
        assert stored(cfg, FILE) == before
        plain = await c.put(f"{BASE}/fields/role.md", json={**FORM, "body": "no If-Match"})
        assert plain.status_code == 200
        assert parse_memory((stored(cfg, FILE) or b"").decode()).extra == {"source": "interview", "tags": ["vue", "ts"]}
        missing = await c.get(f"{BASE}/fields/none.md")
        assert missing.status_code == 404


async def test_whoami_and_places(cfg: MemoryConfig) -> None:
    services_for(cfg).user_agent_dir("u1").save("role.md", ROLE)
    services_for(cfg).user_agent_dir("u2").save("role.md", ROLE)
    async with api(cfg, wid="u1") as c:
        me = (await c.get("/whoami")).json()
        assert me["user_id"] == "u1" and me["admin"] is False and me["agent_type"] == "default"
        refused = await c.get("/places")
        assert refused.status_code == 403
    async with api(cfg) as c:
        assert (await c.get("/whoami")).status_code == 401  # nobody: the page shows its login form
    async with api(cfg, authorization=f"Bearer {ADMIN}") as c:
        op = (await c.get("/whoami")).json()
        assert op["admin"] is True and op["user_id"] is None
        places = (await c.get("/places")).json()
        assert places["users"] == 2
        rows = {p["path"]: p for p in places["places"]}
        row = rows["users/u1/agent-memory/default"]
        assert row["files"] == 1 and row["user_id"] == "u1" and row["bytes"] > len(ROLE)


async def test_page_assets_and_security_headers(cfg: MemoryConfig) -> None:
    async with api(cfg) as c:
        bare = await c.get("/ui")
        page = await c.get("/ui/")
        assert bare.content == page.content and b'src="/ui/app.js"' in page.content
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        behind = await c.get("/ui/", headers={"X-Forwarded-Prefix": "/memory"})  # a gateway strips /memory
        assert b'src="/memory/ui/app.js"' in behind.content
        forged = await c.get("/ui/", headers={"X-Forwarded-Prefix": "//evil.test"})
        assert b'src="/ui/app.js"' in forged.content
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "'unsafe-inline'" not in csp and "'unsafe-eval'" not in csp
        assert page.headers["x-content-type-options"] == "nosniff"
        js = await c.get("/ui/app.js")
        assert js.headers["content-type"].startswith("text/javascript") and b"import" in js.content
        again = await c.get("/ui/app.js", headers={"If-None-Match": js.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        for name in ("../app.py", "..%2Fapp.py", "nope.js", "__init__.py"):
            assert (await c.get(f"/ui/{name}")).status_code == 404


CROSS_SITE_CASES: list[tuple[dict[str, str], bool]] = [
    ({}, False),  # a program: no browser markers
    ({"sec-fetch-site": "same-origin", "origin": "http://memory.test", "x-harness-memory": "ui"}, False),
    ({"sec-fetch-site": "cross-site", "x-harness-memory": "ui"}, True),
    ({"sec-fetch-site": "same-site", "x-harness-memory": "ui"}, True),
    ({"origin": "http://evil.test", "x-harness-memory": "ui"}, True),
    ({"origin": "null", "x-harness-memory": "ui"}, True),
    ({"sec-fetch-site": "same-origin", "origin": "http://memory.test"}, True),  # no custom header
]


async def test_cross_site_writes_are_refused(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u1") as c:
        for i, (headers, refused) in enumerate(CROSS_SITE_CASES):
            name = f"x{i}.md"
            r = await c.post(f"{BASE}/files", json={"file": name, "content": ROLE}, headers=headers)
            assert (r.status_code == 403) is refused, (headers, r.text)
            assert (stored(cfg, f"users/u1/agent-memory/default/{name}") is None) is refused, headers
            if refused:
                assert error_of(r)["code"] == "cross_site"
            reads = await c.get(BASE, headers=headers)  # reads are never refused by the guard
            assert reads.status_code == 200


def test_cross_site_reason_uses_the_forwarded_host() -> None:
    base = {"origin": "https://memory.example.com", "x-harness-memory": "ui", "sec-fetch-site": "same-origin"}
    assert cross_site_reason("PUT", {**base, "host": "10.0.0.5:8765"}) is not None
    assert cross_site_reason("PUT", {**base, "host": "10.0.0.5:8765", "x-forwarded-host": "memory.example.com"}) is None
    assert cross_site_reason("GET", {"origin": "http://evil.test", "sec-fetch-site": "cross-site"}) is None


async def test_json_bodies_need_the_json_content_type(cfg: MemoryConfig) -> None:
    """What an HTML form can send (text/plain) is not taken as a JSON body."""
    async with api(cfg, wid="u1") as c:
        r = await c.post("/users/me/facts", content=b'{"content": "planted"}', headers={"content-type": "text/plain"})
        assert r.status_code == 422
        assert (await c.get("/users/me/facts")).json()["count"] == 0


async def test_listing_filters_and_pages_on_the_server(cfg: MemoryConfig) -> None:
    types = ("user", "feedback", "project", "reference")
    mdir = services_for(cfg).user_agent_dir("u1")
    mdir.save_many([(f"m{i:03d}.md", f"---\nname: memory {i}\ndescription: fact {i} 记忆\n"
                     f"type: {types[i % 4]}\n---\n\nx\n") for i in range(30)])
    mdir.save("m005.md", "---\nname: memory 5\ndescription: fact 5 changed\ntype: feedback\n---\n\nx\n")
    async with api(cfg, wid="u1") as c:
        everything = (await c.get(BASE)).json()
        assert everything["count"] == everything["matched"] == 30 and len(everything["files"]) == 30
        assert everything["types"] == {"user": 8, "feedback": 8, "project": 7, "reference": 7}
        page = (await c.get(BASE, params={"limit": 10, "offset": 0, "order": "type"})).json()
        assert page["count"] == 10 and page["matched"] == 30
        assert [f["type"] for f in page["files"]] == ["user"] * 8 + ["feedback"] * 2
        assert page["files"][8]["file"] == "m005.md"  # the most recently changed feedback first
        last = (await c.get(BASE, params={"limit": 10, "offset": 25, "order": "type"})).json()
        assert last["count"] == 5 and all(f["type"] == "reference" for f in last["files"])
        # Every word must match, each anywhere (a word, or part of the file name, name or description).
        found = (await c.get(BASE, params={"q": "FACT 1", "type": "feedback"})).json()
        assert sorted(f["file"] for f in found["files"]) == ["m001.md", "m013.md", "m017.md", "m021.md"]
        assert found["matched"] == 4 and found["types"]["feedback"] == 4 and found["total"] == 30
        assert (await c.get(BASE, params={"q": "记忆"})).json()["matched"] == 29
        assert (await c.get(BASE, params={"limit": 0})).status_code == 422
