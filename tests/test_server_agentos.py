"""The memory router mounted into an agno AgentOS app (``examples/agentos_mount.py``).

Checks that the router keeps its paths, auth and error answers inside a host app it does not
own, and that AgentOS's own run endpoint builds a memory agent per request (the prompt the
model server received carries the user's MEMORY.md).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from examples.agentos_mount import MEMORY_PREFIX, build_app
from harness_memory.config import MemoryConfig
from tests.fakellm import ScriptedLLM, text

from .test_server_memory import GOOD, api, error_of, stored

MakeConfig = Callable[..., MemoryConfig]


async def test_router_in_agentos(make_config: MakeConfig, llm_server: ScriptedLLM, tmp_path: Path) -> None:
    cfg = make_config(backend="cos", redis=True, server={"api_token": "tok"},
                      model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      recall={"enabled": False}, auto={"enabled": False},
                      agent={"snapshots_dir": str(tmp_path / "none")})
    app = build_app(cfg, db_file=tmp_path / "os.db")
    llm_server.set_handler(lambda req: text("Noted."))
    base = f"{MEMORY_PREFIX}/users/me/agents/default/memory"
    async with api(app, wid="u1") as c:
        assert (await c.get("/health")).status_code == 200  # AgentOS's own route is still there
        assert (await c.get(f"{MEMORY_PREFIX}/health/live")).status_code == 200
        denied = await c.put(f"{base}/files/user_role.md", json={"content": GOOD})
        assert denied.status_code == 401 and error_of(denied)["code"] == "unauthorized"
        ok = await c.put(f"{base}/files/user_role.md", json={"content": GOOD}, headers={"X-API-Key": "tok"})
        assert ok.status_code == 201, ok.text
        assert stored(cfg, "users/u1/agent-memory/default/user_role.md") == GOOD.encode()
        bad = await c.put(f"{base}/files/..%2Fx.md", json={"content": GOOD}, headers={"X-API-Key": "tok"})
        assert bad.status_code == 422 and error_of(bad)["code"] == "invalid_name"
        typo = await c.put(f"{base}/files/x.md", json={"contnt": GOOD}, headers={"X-API-Key": "tok"})
        assert typo.status_code == 422 and "body.content: Field required" in error_of(typo)["detail"]

        page = await c.get(f"{MEMORY_PREFIX}/ui/")  # the memory page, mounted beside the router
        assert page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
        assert f'src="{MEMORY_PREFIX}/ui/app.js"'.encode() in page.content  # AgentOS strips the slash: absolute
        assert (await c.get(f"{MEMORY_PREFIX}/ui/api.js")).headers["content-type"].startswith("text/javascript")
        foreign = {"Origin": "http://evil.test", "X-API-Key": "tok", "X-Harness-Memory": "ui"}
        refused = await c.delete(f"{base}/files/user_role.md", headers=foreign)
        assert refused.status_code == 403 and error_of(refused)["code"] == "cross_site"
        assert stored(cfg, "users/u1/agent-memory/default/user_role.md") == GOOD.encode()

        run = await c.post("/agents/assistant/runs", data={"message": "What do I use?", "user_id": "u1",
                                                           "stream": "false"}, headers={"Origin": "http://evil.test"})
        assert run.status_code == 200, run.text
        assert run.json()["content"] == "Noted."
    (request,) = llm_server.chat_requests
    system = "\n".join(str(m["content"]) for m in request.messages if m["role"] in ("system", "developer"))
    assert "- [user role](user_role.md) — frontend engineer" in system
