"""Facts and profile, session-memory debug and snapshot actions over HTTP (SeaweedFS + Redis).

Each endpoint is checked against what auto memory, the session buffer and the snapshot module
really STORED: fact files and the manifest, Redis buffer state, summaries and sync records.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from pathlib import Path

import pytest

from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices, services_for
from harness_memory.session import session_manager_for
from harness_memory.session.binding import bind_session

from .test_server_memory import ADMIN, GOOD, api, error_of, keys, stored

MakeConfig = Callable[..., MemoryConfig]
AUTO = "users/u1/projects/default/memory/"


@pytest.fixture
def cfg(make_config: MakeConfig, tmp_path: Path) -> MemoryConfig:
    return make_config(backend="cos", redis=True, server={"admin_token": ADMIN},
                       agent={"snapshots_dir": str(tmp_path / "snapshots")})


# -- facts ---------------------------------------------------------------------------------------
async def test_facts_add_edit_delete_are_stored(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u1") as c:
        r = await c.post("/users/me/facts", json={"content": "Business trip to Tokyo next week", "category": "goal"})
        assert r.status_code == 201, r.text
        fact = r.json()
        assert fact["source"] == "manual" and fact["confidence"] == 1.0 and fact["category"] == "goal"
        data = stored(cfg, f"{AUTO}{fact['id']}.md") or b""
        assert b"Business trip to Tokyo next week" in data

        listed = (await c.get("/users/me/facts")).json()
        assert listed["place"] == "users/u1/projects/default/memory" and listed["count"] == 1

        r = await c.patch(f"/users/me/facts/{fact['id']}", json={"content": "Trip moved to Osaka", "confidence": 0.8})
        assert r.status_code == 200 and r.json()["content"] == "Trip moved to Osaka"
        assert b"Osaka" in (stored(cfg, f"{AUTO}{fact['id']}.md") or b"")

        bad = await c.post("/users/me/facts", json={"content": "x", "category": "gossip"})
        assert bad.status_code == 422 and "category" in error_of(bad)["detail"]
        bad = await c.post("/users/me/facts", json={"content": "x", "confidence": 2})
        assert bad.status_code == 422
        missing = await c.patch("/users/me/facts/fact-nope", json={"content": "y"})
        assert missing.status_code == 404 and error_of(missing)["code"] == "not_found"

        assert (await c.delete(f"/users/me/facts/{fact['id']}")).status_code == 204
        assert stored(cfg, f"{AUTO}{fact['id']}.md") is None
        assert (await c.delete(f"/users/me/facts/{fact['id']}")).status_code == 404
        assert (await c.get("/users/me/facts")).json()["count"] == 0


async def test_profile_round_trip_and_shared_facts(cfg: MemoryConfig) -> None:
    async with api(cfg, wid="u1") as c:
        r = await c.put("/users/me/profile", json={"workContext": "Frontend engineer", "topOfMind": "Vue 3"})
        assert r.status_code == 200 and r.json()["workContext"] == "Frontend engineer"
        assert (await c.get("/users/me/profile")).json()["topOfMind"] == "Vue 3"
        assert b"Frontend engineer" in (stored(cfg, f"{AUTO}profile.md") or b"")
        assert (await c.put("/users/me/profile", json={"mood": "x"})).status_code == 422

        assert (await c.get("/shared/facts")).status_code == 403
        r = await c.post("/shared/facts", json={"content": "Company holiday on Friday"},
                         headers={"Authorization": f"Bearer {ADMIN}"})
        assert r.status_code == 201
        assert any(k.startswith("memory/projects/default/memory/fact-") for k in keys(cfg, "projects/"))


async def test_clear_facts_keeps_the_profile(make_config: MakeConfig) -> None:
    """The operator control: every fact of the user goes, the profile stays; queued updates of the
    user are dropped too, so a pending conversation does not refill the list."""
    from harness_memory.auto import auto_memory_for

    cfg = make_config(backend="cos", redis=True, server={"admin_token": ADMIN}, auto={"debounce_seconds": 3600},
                      model={"model": "never-called", "base_url": "http://127.0.0.1:9/v1"})
    auto = auto_memory_for(services_for(cfg))
    async with api(cfg, wid="u1") as c:
        for content in ("Business trip to Tokyo next week", "Prefers tea", "Use pnpm, not npm"):
            assert (await c.post("/users/me/facts", json={"content": content})).status_code == 201
        assert (await c.put("/users/me/profile", json={"workContext": "Frontend engineer"})).status_code == 200
        auto.capture("u1", "s1", [{"role": "user", "content": "I moved to Berlin"}])
        assert auto.worker.pending_count() == 1
        r = await c.delete("/users/me/facts")
        assert r.status_code == 200 and r.json() == {"place": "users/u1/projects/default/memory", "deleted": 3}
        assert (await c.get("/users/me/facts")).json()["count"] == 0
        assert (await c.get("/users/me/profile")).json()["workContext"] == "Frontend engineer"
        assert b"Frontend engineer" in (stored(cfg, f"{AUTO}profile.md") or b"")
        assert not [k for k in keys(cfg, AUTO) if "/fact-" in k]
        assert auto.worker.pending_count() == 0
        assert (await c.delete("/users/me/facts")).json()["deleted"] == 0
        assert (await c.delete("/shared/facts")).status_code == 403  # the shared place needs the admin token


# -- session debug -------------------------------------------------------------------------------
async def test_session_debug_shows_buffer_state_lock_and_summaries(cfg: MemoryConfig) -> None:
    services = services_for(cfg)
    session_id, _ = bind_session("u1", None, cfg.session.bind_to_user)
    manager = session_manager_for(services)
    manager.collect_messages_sync(session_id, [{"role": "user", "content": "Plan my Tokyo trip"},
                                               {"role": "assistant", "content": "Sure: hotels first."}])
    services.store.put(f"memory/sessions/session-{session_id}.md", b"## Current State\nPlanning Tokyo.\n")
    async with api(cfg, wid="u1") as c:
        view = (await c.get(f"/users/me/sessions/{session_id}", params={"messages": "true"})).json()
        assert view["session_id"] == session_id and view["mode"] == "redis"
        assert view["buffer_messages"] == 2 and view["buffer_tokens"] > 0
        assert view["state"]["total"] == 2 and view["state_hash"]
        assert [m["content"] for m in view["messages"]] == ["Plan my Tokyo trip", "Sure: hotels first."]
        assert "Planning Tokyo." in view["stored_summary"] and view["lock_held"] is False

        # A second pod (its own services and manager) sees the same Redis state: same hash.
        other = MemoryServices.from_config(cfg)
        try:
            from harness_memory.control.integrations import session_debug

            assert session_debug(other, session_id)["state_hash"] == view["state_hash"]
            token = f"other-pod:99/{secrets.token_hex(8)}"
            assert session_manager_for(other).buffer.acquire(session_id, token, 30_000)
            held = (await c.get(f"/users/me/sessions/{session_id}")).json()
            assert held["lock_held"] is True and 0 < held["lock_ttl_ms"] <= 30_000
            assert held["lock_holder"] == "other-pod:99"
            session_manager_for(other).buffer.release(session_id, token)
        finally:
            session_manager_for(other).close()
            other.close()

        assert (await c.delete(f"/users/me/sessions/{session_id}")).status_code == 204
        assert stored(cfg, f"sessions/session-{session_id}.md") is None
        cleared = (await c.get(f"/users/me/sessions/{session_id}")).json()
        assert cleared["buffer_messages"] == 0 and cleared["stored_summary"] is None

        new = await c.post("/users/me/sessions")
        assert new.status_code == 201 and new.json()["user_id"] == "u1"
        assert (await c.get(f"/sessions/{session_id}")).status_code == 403


# -- snapshots -----------------------------------------------------------------------------------
def write_snapshot(folder: Path, updated_at: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "snapshot.json").write_text(json.dumps({"updatedAt": updated_at}))
    (folder / "team_rules.md").write_text(
        f"---\nname: team rules\ndescription: how the team works\ntype: project\n---\n\n{body}\n")


async def test_snapshot_status_mark_synced_and_replace(cfg: MemoryConfig) -> None:
    write_snapshot(Path(cfg.agent.snapshots_dir) / "default", "2026-11-20T00:00:00Z", "Reviews on Tuesday.")
    services_for(cfg).user_agent_dir("u1").save("own.md", GOOD)
    base = "/users/me/agents/default/snapshot"
    async with api(cfg, wid="u1") as c:
        status = (await c.get(base)).json()
        assert status["state"] == "prompt-update" and status["files"] == ["team_rules.md"]

        marked = await c.post(f"{base}/mark-synced")
        assert marked.status_code == 200 and marked.json()["state"] == "none" and marked.json()["applied"]
        record = json.loads(stored(cfg, "users/u1/agent-memory/default/.snapshot-synced.json") or b"{}")
        assert record["syncedFrom"] == "2026-11-20T00:00:00Z"
        assert stored(cfg, "users/u1/agent-memory/default/own.md") == GOOD.encode()

        write_snapshot(Path(cfg.agent.snapshots_dir) / "default", "2026-11-25T00:00:00Z", "Reviews on Monday.")
        assert (await c.get(base)).json()["state"] == "prompt-update"
        replaced = await c.post(f"{base}/replace")
        assert replaced.status_code == 200 and replaced.json()["state"] == "none"
        assert stored(cfg, "users/u1/agent-memory/default/own.md") is None
        assert b"Reviews on Monday." in (stored(cfg, "users/u1/agent-memory/default/team_rules.md") or b"")

        none = await c.post("/users/me/agents/nosnap/snapshot/replace")
        assert none.status_code == 409 and error_of(none)["code"] == "snapshot_unavailable"
        assert (await c.get("/users/me/agents/nosnap/snapshot")).json()["state"] == "none"
