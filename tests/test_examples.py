"""The examples run as a user would run them, against the scripted model server."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness_memory import agent as agent_module
from harness_memory.config import MemoryConfig
from harness_memory.services import services_for
from tests.fakellm import ScriptedLLM, text, tool_calls
from tests.helpers import ROOT, child_env, write_config

MEMORY = "---\nname: role\ndescription: alice is a frontend engineer\ntype: user\n---\n\nVue.\n"


def system_text(request: object) -> str:
    return "\n".join(str(m.get("content")) for m in request.messages if m.get("role") == "system")  # type: ignore[attr-defined]


@pytest.fixture
def cfg(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM) -> MemoryConfig:
    return make_config(backend="local", model={"model": "fake-model", "base_url": llm_server.base_url,
                                               "api_key": "k"},
                       session={"enabled": False}, auto={"enabled": False}, recall={"use_model": False})


def test_agno_app_remembers_across_turns(cfg: MemoryConfig, llm_server: ScriptedLLM, tmp_path: Path) -> None:
    llm_server.script(tool_calls([("save_file", {"file_name": "role.md", "content": MEMORY})]),
                      text("Got it."), text("You use Vue."))
    env = child_env(write_config(cfg, tmp_path / "c.yaml"))
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "agno_app.py"), "--user", "alice"],
                          input="I'm a frontend engineer\nWhat do I use?\n", capture_output=True, text=True,
                          env=env, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert "agent> Got it." in proc.stdout and "agent> You use Vue." in proc.stdout
    stored = services_for(cfg).store.get("memory/users/alice/agent-memory/default/role.md").data.decode()
    assert stored == MEMORY
    last = llm_server.chat_requests[-1]
    assert "- [role](role.md) — alice is a frontend engineer" in system_text(last)


def test_agentos_app_builds_an_agent_per_user(cfg: MemoryConfig, llm_server: ScriptedLLM, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    from fastapi.testclient import TestClient

    monkeypatch.setenv("HARNESS_MEMORY_CONFIG", str(write_config(cfg, tmp_path / "c.yaml")))
    monkeypatch.setenv("AGENTOS_DB", str(tmp_path / "os.db"))
    monkeypatch.setattr(agent_module, "_default_config", None)
    spec = importlib.util.spec_from_file_location("agentos_app", ROOT / "examples" / "agentos_app.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    llm_server.script(tool_calls([("save_file", {"file_name": "role.md", "content": MEMORY})]), text("Saved."),
                      text("Hello bob."), text("Hi alice."))
    with TestClient(module.app) as client:
        first = client.post("/agents/assistant/runs", data={"message": "remember me", "user_id": "alice",
                                                            "stream": "false"})
        assert first.status_code == 200, first.text
        assert first.json()["content"] == "Saved."
        bob = client.post("/agents/assistant/runs", data={"message": "hi", "user_id": "bob", "stream": "false"})
        assert bob.status_code == 200, bob.text
        alice = client.post("/agents/assistant/runs", data={"message": "hi", "user_id": "alice",
                                                            "stream": "false"})
        assert alice.status_code == 200, alice.text
    bob_req, alice_req = llm_server.chat_requests[2], llm_server.chat_requests[3]
    assert "alice is a frontend engineer" not in system_text(bob_req)
    assert "- [role](role.md) — alice is a frontend engineer" in system_text(alice_req)
