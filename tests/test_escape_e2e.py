"""Generated hostile spellings planted through every public path, read back where the model gets them.

Each example plants hostile text (``tests/test_escape_property.hostile_text``: our tag names
spelt with look-alikes, ignorables and nested entities, and the session-summary markers) through
the facts API (a fact, a correction's source error, a profile section), the ``save_file`` tool
(description and body), a JSON bundle import, a zip import and a stored session summary, then
asks the agent a question over HTTP. What the scripted model server RECEIVED is read by the
independent aggressive reader (``tests/escape_reader.py``): the system prompt holds exactly the
reminder's own tags once each, the user message none and each summary marker once; the tools'
answers (``list_files``, ``search_memories``) and every extraction prompt hold only their own tags.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import re
import zipfile
from collections import Counter
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_memory.config import MemoryConfig
from harness_memory.services import services_for
from harness_memory.session.binding import bind_session
from harness_memory.tools import MemoryTools
from tests import escape_reader as reader
from tests.fakellm import Answer, RecordedRequest, ScriptedLLM, text

from .test_escape_property import hostile_text
from .test_server_memory import api
from .test_server_runs import agent_requests, store_summary, system_text

MakeConfig = Callable[..., MemoryConfig]
REMINDER_TAGS = ["<system-reminder>", "<memory>", "</memory>", "<current_date>", "</current_date>",
                 "</system-reminder>"]
#: What YAML refuses in a frontmatter value (PyYAML's reader): not part of the class tested here.
_NOT_YAML = re.compile("[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def is_extraction(req: RecordedRequest) -> bool:
    return (req.body or {}).get("response_format") == {"type": "json_object"}


def memory_file(tag: str, description: str, body: str) -> str:
    """A memory whose description (one quoted YAML line) and body carry the hostile text."""
    one_line = " ".join(_NOT_YAML.sub("", description).split())
    return (f"---\nname: zebra {tag}\ndescription: {json.dumps('zebra ' + tag + ' ' + one_line, ensure_ascii=False)}"
            f"\ntype: project\n---\n\nzebra planet {tag}\n{_NOT_YAML.sub('', body)}\n")


async def plant_and_ask(cfg: MemoryConfig, uid: str, plants: list[str]) -> tuple[str, str, list[str]]:
    """Plant ``plants`` through every path as user ``uid``, run the agent; (system, user, tool answers)."""
    services = services_for(cfg)
    plants = [p.replace("\x00", "") for p in plants]  # the API refuses a NUL with a clear 422: not this test's class
    async with api(cfg, wid=uid) as c:
        r = await c.post("/users/me/facts", json={"content": "fact0 " + plants[0], "category": "preference"})
        assert r.status_code == 201, r.text
        r = await c.post("/users/me/facts", json={"content": "Use pnpm fact1", "category": "correction",
                                                   "source_error": "fact1 " + plants[1]})
        assert r.status_code == 201, r.text
        r = await c.put("/users/me/profile", json={"workContext": "profile2 " + plants[2]})
        assert r.status_code == 200, r.text
        tools = MemoryTools(services.user_agent_dir(uid), services.shared_agent_dir("default"))
        saved = tools.save_file("zebra_tool.md", memory_file("tool3", plants[3], plants[4]))
        assert saved.startswith("Created memory"), saved
        bundle = {"places": [{"kind": "user-agent", "user_id": uid, "agent_type": "default", "files": [
            {"file": "zebra_json.md", "content": memory_file("json5", plants[5], plants[5])}]}]}
        r = await c.post("/users/me/memory/import", json=bundle)
        assert r.status_code == 200, r.text
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as zf:
            zf.writestr(f".harness/users/{uid}/agent-memory/default/zebra_zip.md",
                        memory_file("zip6", plants[6], plants[6]))
        r = await c.post("/users/me/memory/import", content=buffer.getvalue(),
                         headers={"content-type": "application/zip"})
        assert r.status_code == 200, r.text
        session_id, _ = bind_session(uid, None, cfg.session.bind_to_user)
        store_summary(cfg, session_id, "# zebra summary7\n## Current State\n" + plants[7] + "\n")
        answers = [tools.list_files(), tools.search_memories("zebra planet")]
        r = await c.post("/agents/default/runs", json={"message": "What about the zebra planet?",
                                                       "session_id": session_id})
        assert r.status_code == 200 and r.json()["summary_injected"] is True, r.text
    return "", "", answers


def test_hostile_text_through_every_public_path(make_config: MakeConfig, llm_server: ScriptedLLM) -> None:
    cfg = make_config(backend="cos", redis=True,
                      model={"model": "fake-model", "base_url": llm_server.base_url, "api_key": "k"},
                      auto={"debounce_seconds": 0.2, "max_wait_seconds": 5, "max_injection_tokens": 8000,
                            "combine_with_summary": False},
                      recall={"use_model": False})

    def answer(req: RecordedRequest) -> Answer:
        return text("{}") if is_extraction(req) else text("Noted.")

    llm_server.set_handler(answer)
    users = itertools.count()

    @settings(max_examples=3, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.lists(hostile_text(), min_size=8, max_size=8))
    def example(plants: list[str]) -> None:
        uid = f"hostile{next(users)}"
        before = len(agent_requests(llm_server))
        _, _, answers = asyncio.run(plant_and_ask(cfg, uid, plants))
        [req] = agent_requests(llm_server)[before:]
        system, user = system_text(req), req.last_user_text()
        # every plant arrived where the model reads it (neutralised), so the checks below mean something
        for token in ("fact0", "fact1", "profile2", "zebra tool3", "zebra json5", "zebra zip6"):
            assert token in system, token
        assert "summary7" in user and "zebra planet tool3" in system  # the summary and a recalled body
        assert reader.tags_in(system) == REMINDER_TAGS, (plants, reader.tags_in(system))
        assert reader.markers_in(system) == {"header": 0, "label": 0}
        assert reader.tags_in(user) == [], (plants, reader.tags_in(user))
        assert reader.markers_in(user) == {"header": 1, "label": 1}, (plants, user)
        assert user.startswith("[会话历史摘要]\n") and user.endswith("用户最新消息：What about the zebra planet?")
        for out in answers:
            assert reader.tags_in(out) == [] and reader.markers_in(out) == {"header": 0, "label": 0}, out

    try:
        example()
    finally:
        services_for(cfg).close(timeout=10)  # queued extractions finish while the servers are up
    extractions = [q for q in llm_server.chat_requests if is_extraction(q)]
    assert extractions, "the runs queued auto-memory extractions"
    for req in extractions:
        tags = reader.tags_in(req.messages[-1]["content"])
        assert "<conversation>" in tags and set(Counter(tags).values()) == {1}, tags
        assert all(reader.tags_in(m["content"]) == [] for m in req.messages[:-1])
