"""The ``/ui`` memory page in a real Chromium against a live server on SeaweedFS + Redis.

What a person does on the page is checked where it lands: the memory file and MEMORY.md in the
store, the facts in the auto place. "Behind a gateway" is what Playwright's extra HTTP headers
do: every request of the browser carries the ``wid`` (and the API token) the gateway would add.
Screenshots of the main pages go to ``tests.ui_browser.ARTIFACTS``.
"""

from __future__ import annotations

import functools
import http.server
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness_memory import build_agent
from harness_memory.tools import MemoryTools
from tests.fakellm import ScriptedLLM, text, tool_calls
from tests.servers import RedisServer, SeaweedFS
from tests.test_snapshot import write_snapshot
from tests.ui_browser import LiveServer, chromium, live_server, screenshot

from .test_server_memory import private_config

TOKEN = "api-secret"
ADMIN = "admin-secret"
AGENT_MEMORY = ("---\nname: 用户角色 🧑‍💻\ndescription: 前端工程师，报告用中文 ✅\ntype: user\n---\n\n"
                "## Stack\n- **TypeScript** and Vue\n- reports in `Chinese`\n")
XSS = "<img src=x onerror=alert(1)>"
PLACE = "users/{user}/agent-memory/default/"
WAIT = 15_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture(scope="module")
def live(seaweedfs: SeaweedFS, redis_server: RedisServer, llm: ScriptedLLM,
         tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server for the module (a server per test costs seconds); ``server`` empties it per test."""
    snaps = tmp_path_factory.mktemp("snaps")
    with private_config(seaweedfs, redis_server, server={"api_token": TOKEN, "admin_token": ADMIN},
                        model={"model": "fake-model", "base_url": llm.base_url, "api_key": "k"},
                        agent={"snapshots_dir": str(snaps)}, auto={"enabled": False}) as cfg, live_server(cfg) as srv:
        yield srv


@pytest.fixture
def server(live: LiveServer, llm: ScriptedLLM) -> Iterator[LiveServer]:
    """The module's server with an empty store, an empty Redis prefix and the first snapshot version."""
    store = live.services.store
    failed = store.delete_many([info.key for info in store.list(live.services.key_prefix)])
    assert not failed and not list(store.list(live.services.key_prefix))
    redis = live.services.redis
    if redis is not None:
        stale = list(redis.scan_iter(match=live.services.config.redis.key_prefix + "*"))
        if stale:
            redis.delete(*stale)
    write_snapshot(live.services.config.agent.snapshots_dir, "2026-11-01T00:00:00Z", {
        "feedback_dates.md": "---\nname: Dates\ndescription: use absolute dates\ntype: feedback\n---\n\n"
                             "Write 2026-12-01.\n"})
    llm.clear()
    yield live


def stored(srv: LiveServer, user: str, file: str) -> str | None:
    obj = srv.services.store.get_or_none("memory/" + PLACE.format(user=user) + file)
    return None if obj is None else obj.data.decode("utf-8")


def gateway_page(browser: Any, srv: LiveServer, user: str, *, token: str = TOKEN) -> Any:
    """A page whose every request carries what a gateway adds: the user's ``wid`` and the token."""
    context = new_context(browser, extra_http_headers={"wid": user, "Authorization": f"Bearer {token}"})
    page = context.new_page()
    page.dialogs = []  # type: ignore[attr-defined]
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    page.goto(srv.url + "/ui/")
    return page


_OPEN: list[Any] = []


def new_context(browser: Any, **options: Any) -> Any:
    """A browser context closed when the test ends (``close_contexts``)."""
    context = browser.new_context(**options)
    _OPEN.append(context)
    return context


@pytest.fixture(autouse=True)
def close_contexts() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def ready(page: Any, view: str = "memories") -> None:
    page.wait_for_selector(f"#view[data-ready='{view}']", timeout=WAIT)


def agent_saves(srv: LiveServer, llm: ScriptedLLM, user: str, file: str, content: str) -> Any:
    """The scripted model calls save_file through build_agent; returns the run output."""
    llm.script(tool_calls([("save_file", {"file_name": file, "content": content})]), text("Noted."))
    out = build_agent(user, services=srv.services, session_id="chat-1").run("I'm a frontend engineer")
    assert "Created memory " + file in json.dumps(llm.chat_requests[-1].messages, ensure_ascii=False)
    return out


def test_agent_memory_shows_and_an_edit_lands_in_the_store(browser: Any, server: LiveServer,
                                                           llm: ScriptedLLM) -> None:
    agent_saves(server, llm, "u1", "user_role.md", AGENT_MEMORY)
    server.services.user_agent_dir("u1").save_many([  # neighbours, for a realistic screenshot
        ("feedback_reports.md", "---\nname: 周报格式\ndescription: 周报用中文，先写结论 📝\ntype: feedback\n"
         "---\n\n结论先行。\n"),
        ("reference_wiki.md", "---\nname: team wiki\ndescription: where the design docs live\ntype: reference\n---\n\n"
         "https://wiki.internal/design\n")])
    page = gateway_page(browser, server, "u1")
    ready(page)
    # By type, the most recently changed first (feedback_dates.md is the snapshot the build copied in).
    assert [page.locator("article.memory").nth(i).get_attribute("data-file") for i in range(4)] == [
        "user_role.md", "feedback_reports.md", "feedback_dates.md", "reference_wiki.md"]
    row = page.locator("article.memory[data-file='user_role.md']")
    assert row.locator(".memory-name").inner_text() == "用户角色 🧑‍💻"
    assert row.locator(".memory-desc").inner_text() == "前端工程师，报告用中文 ✅"
    assert page.inner_text("#who-user") == "u1"
    screenshot(page, "ui-memories")

    row.locator(".memory-name").click()
    ready(page, "memory")  # the read view first
    assert page.locator("#read-body strong").inner_text() == "TypeScript"  # rendered markdown
    page.click("#edit")
    ready(page, "edit")
    assert page.input_value("#f-description") == "前端工程师，报告用中文 ✅"
    assert page.locator("#f-preview strong").inner_text() == "TypeScript"  # markdown preview
    screenshot(page, "ui-edit")
    page.fill("#f-description", "frontend engineer: Vue 3 # not a comment")
    page.fill("#f-body", "Moved from React to **Vue 3** in 2026.")
    page.click("#save")
    ready(page, "memory")
    assert page.inner_text("#read-desc") == "frontend engineer: Vue 3 # not a comment"
    page.click("#back")
    ready(page)

    saved = stored(server, "u1", "user_role.md")
    assert saved is not None and "Vue 3** in 2026." in saved
    from harness_memory.memdir import parse_memory

    memory = parse_memory(saved)
    assert (memory.name, memory.description, memory.type.value) == (
        "用户角色 🧑‍💻", "frontend engineer: Vue 3 # not a comment", "user")
    index = stored(server, "u1", "MEMORY.md")
    assert index is not None and "frontend engineer: Vue 3 # not a comment" in index and "前端工程师" not in index
    assert page.locator("article.memory[data-file='user_role.md'] .memory-desc").inner_text() == (
        "frontend engineer: Vue 3 # not a comment")
    page.click("#show-index")  # MEMORY.md as the model reads it, from the page
    page.wait_for_selector("#index-text:has-text('Vue 3 # not a comment')", timeout=WAIT)
    assert "](user_role.md)" in page.inner_text("#index-text")


@pytest.mark.parametrize(("field", "value", "says"), [
    ("description", "", "Write one line saying what this memory holds"),
    ("type", "opinion", "Choose a type: user, feedback, project, reference.")])
def test_an_invalid_edit_says_what_to_do_on_its_field_and_changes_nothing(
        browser: Any, server: LiveServer, field: str, value: str, says: str) -> None:
    mdir = server.services.user_agent_dir("u1")
    mdir.save("user_role.md", AGENT_MEMORY)
    before_file, before_index = stored(server, "u1", "user_role.md"), stored(server, "u1", "MEMORY.md")
    page = gateway_page(browser, server, "u1")
    page.goto(server.url + "/ui/#/edit/user_role.md")
    ready(page, "edit")
    if field == "type":
        # A type the form does not offer (as a hand-edited page or an old client would send).
        page.eval_on_selector("#f-type", "(s, v) => { s.append(new Option(v, v)); s.value = v; }", value)
    else:
        page.fill(f"#f-{field}", value)
    page.click("#save")
    page.wait_for_selector(f"#err-{field}:not(:empty)", timeout=WAIT)
    shown = page.inner_text(f"#err-{field}")
    assert says in shown and "Expected" not in shown and "BigQuery" not in shown  # for a person, not the model
    assert page.get_attribute(f"#f-{field}", "aria-invalid") == "true"
    assert page.evaluate("document.activeElement.id") == f"f-{field}"
    assert page.inner_text("#form-error") == ""

    # The agent's save_file tool still gets its own, model-facing message for the same content.
    form = {"name": "用户角色 🧑‍💻", "description": "前端工程师，报告用中文 ✅", "type": "user", field: value}
    from harness_memory.memdir.model import compose_memory

    content = compose_memory(form["name"], form["description"], form["type"], "—")  # no words to fill a field from
    tool_answer = MemoryTools(server.services.user_agent_dir("u1")).save_file("other.md", content)
    assert tool_answer.startswith("Error: ") and says not in tool_answer
    assert stored(server, "u1", "user_role.md") == before_file
    assert stored(server, "u1", "MEMORY.md") == before_index
    assert stored(server, "u1", "other.md") is None


def test_a_file_the_form_cannot_read_is_fixed_as_text(browser: Any, server: LiveServer) -> None:
    broken = "---\nname: notes\ndescription: missing its type\n---\n\nKeep.\n"
    server.services.store.put("memory/" + PLACE.format(user="u1") + "notes.md", broken.encode())  # by hand
    page = gateway_page(browser, server, "u1")
    page.goto(server.url + "/ui/#/memory/notes.md")
    ready(page, "memory")
    assert "the frontmatter is missing type" in page.inner_text("#form-error")
    assert page.input_value("#f-raw") == broken
    page.fill("#f-raw", broken.replace("---\n\n", "type: project\n---\n\n"))
    page.click("#save")
    ready(page)
    fixed = stored(server, "u1", "notes.md")
    assert fixed is not None and "type: project" in fixed
    assert "- [notes](notes.md) — missing its type" in (stored(server, "u1", "MEMORY.md") or "")


def test_delete_and_forget_everything(browser: Any, server: LiveServer) -> None:
    mdir = server.services.user_agent_dir("u1")
    mdir.save("user_role.md", AGENT_MEMORY)
    mdir.save("feedback_tone.md", "---\nname: tone\ndescription: short answers\ntype: feedback\n---\n\nBe brief.\n")
    server.services.auto_memory().add_fact("u1", "business trip to Shanghai next week", "context", 1.0)
    server.services.user_agent_dir("u2").save("keep.md", AGENT_MEMORY)
    page = gateway_page(browser, server, "u1")
    page.goto(server.url + "/ui/#/memory/feedback_tone.md")
    ready(page, "memory")
    page.click("#delete")
    page.click("#confirm-go")  # into the trash: a plain yes (no word to type)
    ready(page)
    assert stored(server, "u1", "feedback_tone.md") is None
    assert "feedback_tone.md" not in (stored(server, "u1", "MEMORY.md") or "")
    assert page.locator("article.memory").count() == 1

    page.goto(server.url + "/ui/#/facts")
    ready(page, "facts")
    assert page.inner_text(".fact-text") == "business trip to Shanghai next week"
    page.goto(server.url + "/ui/#/transfer")
    ready(page, "transfer")
    page.click("#forget")
    assert page.is_disabled("#confirm-go")  # nothing happens without typing the word
    page.fill("#confirm-input", "forget")
    page.click("#confirm-go")
    page.wait_for_selector("#transfer-result:has-text('Forgot')", timeout=WAIT)
    assert "in the trash for 30 days" in page.inner_text("#transfer-result")
    assert stored(server, "u1", "user_role.md") is None
    assert server.services.auto_memory().list_facts("u1") == []
    assert stored(server, "u2", "keep.md") == AGENT_MEMORY  # another user's memory is untouched
    # Forgotten into the trash: both come back from the trash page.
    page.goto(server.url + "/ui/#/trash")
    ready(page, "trash")
    for source, before in (("memories", 2), ("facts", 1)):  # memories: the forget, then the earlier delete
        items = f"section.trash[data-source='{source}'] .trash-item"
        assert page.locator(items).count() == before
        assert "by you, on this page" in page.locator(items).first.inner_text()  # the forget, newest first
        page.locator(items).first.locator(".trash-restore").click()
        page.wait_for_selector(f"{items}:nth-child({before})", state="detached", timeout=WAIT)  # one fewer
    assert stored(server, "u1", "user_role.md") == AGENT_MEMORY
    assert [f.content for f in server.services.auto_memory().list_facts("u1")] == [
        "business trip to Shanghai next week"]
    # "Delete for good" leaves nothing, the trash included.
    page.goto(server.url + "/ui/#/transfer")
    ready(page, "transfer")
    page.click("#forget-purge")
    page.fill("#confirm-input", "delete for good")
    page.click("#confirm-go")
    page.wait_for_selector("#transfer-result:has-text('for good')", timeout=WAIT)
    assert not list(server.services.store.list("memory/users/u1/"))


def test_another_users_browser_cannot_reach_their_memory(browser: Any, server: LiveServer) -> None:
    server.services.user_agent_dir("u1").save("secret.md", AGENT_MEMORY.replace("前端工程师", "SECRET-u1"))
    server.services.auto_memory().add_fact("u1", "SECRET-u1 fact", "context", 1.0)
    page = gateway_page(browser, server, "u2")
    ready(page)
    assert page.locator("article.memory").count() == 0
    # The page ignores a planted "view this user" choice: only operators may view another user.
    page.evaluate("sessionStorage.setItem('hm.viewUser', 'u1')")
    for hash_ in ("#/memories", "#/memory/secret.md", "#/facts", "#/operator", "#/shared/secret.md"):
        page.goto(server.url + "/ui/" + hash_)
        page.wait_for_selector("#view[data-ready]", timeout=WAIT)
        assert "SECRET-u1" not in page.content()
    # Every URL that names u1, fetched by u2's browser (the gateway adds wid: u2): refused.
    urls = ["users/u1/agents/default/memory", "users/u1/agents/default/memory/files/secret.md",
            "users/u1/agents/default/memory/fields/secret.md", "users/u1/agents/default/memory/index",
            "users/u1/agents/default/memory/export", "users/u1/memory", "users/u1/memory/export?format=zip",
            "users/u1/facts", "users/u1/profile", "users/u1/projects/default/memory",
            "users/u1/agents/default/snapshot", "places", "sessions/chat-1",
            "shared/agents/default/memory", "users/u1/agents/default/memory/files/secret.md?raw=true"]
    answers = page.evaluate("""async (urls) => Promise.all(urls.map(async (u) => {
        const r = await fetch(new URL(u, location.origin + '/'));
        return [u, r.status, await r.text()]; }))""", urls)
    for url, status, body in answers:
        assert status == 403, (url, status, body)
        assert "SECRET-u1" not in body
    # Direct navigation too (the browser sends the gateway's headers).
    page.goto(server.url + "/users/u1/agents/default/memory/files/secret.md?raw=true")
    assert "SECRET-u1" not in page.content()
    # And writes: u2's page cannot change u1's memory.
    status = page.evaluate("""async () => (await fetch('/users/u1/agents/default/memory/files/secret.md',
        {method: 'DELETE', headers: {'X-Harness-Memory': 'ui'}})).status""")
    assert status == 403
    assert stored(server, "u1", "secret.md") is not None


def test_dev_login_form_and_token(browser: Any, server: LiveServer) -> None:
    server.services.user_agent_dir("u1").save("user_role.md", AGENT_MEMORY)
    page = new_context(browser).new_page()
    page.goto(server.url + "/ui")  # the page without the trailing slash works too
    page.wait_for_selector("#login:not([hidden])", timeout=WAIT)
    page.fill("#login-token", "wrong")
    page.fill("#login-user", "u1")
    page.click("#login-submit")
    page.wait_for_selector("#login-error:not(:empty)", timeout=WAIT)
    assert "not valid" in page.inner_text("#login-error")
    page.fill("#login-token", TOKEN)
    page.click("#login-submit")
    ready(page)
    assert page.locator("article.memory").count() == 1
    cookies = page.context.cookies()
    assert cookies == []  # credentials live in sessionStorage, not cookies
    assert page.evaluate("sessionStorage.getItem('hm.token')") == TOKEN


def test_hostile_memory_text_renders_as_text(browser: Any, server: LiveServer) -> None:
    hostile = (f"---\nname: '<script>alert(2)</script>'\ndescription: '{XSS}'\ntype: user\n---\n\n"
               f"{XSS}\n\n[click](javascript:alert(3)) <b onmouseover=alert(4)>bold</b>\n"
               "```\n<svg onload=alert(5)>\n```\n")
    server.services.user_agent_dir("u1").save("xss.md", hostile)
    server.services.auto_memory().add_fact("u1", XSS + " likes tea", "preference", 0.9)
    page = gateway_page(browser, server, "u1")
    ready(page)
    assert page.locator(".memory-desc").inner_text() == XSS
    assert page.locator(".memory-name").inner_text() == "<script>alert(2)</script>"
    page.click(".memory-name")
    ready(page, "memory")
    assert XSS in page.inner_text("#read-body")
    assert page.locator("#read-body a").count() == 0  # the javascript: link stays text
    page.goto(server.url + "/ui/#/memories")
    ready(page)
    screenshot(page, "ui-hostile")
    page.goto(server.url + "/ui/#/facts")
    ready(page, "facts")
    assert page.inner_text(".fact-text") == XSS + " likes tea"
    page.wait_for_timeout(300)  # give any injected handler (there must be none) a moment to fire
    assert page.dialogs == []
    assert page.locator("#view img, #view svg, #view script, #view b[onmouseover]").count() == 0
    resp = page.request.get(server.url + "/ui/")
    csp = resp.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "frame-ancestors 'none'" in csp
    html = resp.text()
    assert '<script type="module" src="/ui/app.js"></script>' in html
    assert re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html) is None  # no inline script
    assert re.search(r"\son[a-z]+=", html) is None  # no inline handlers


def test_export_then_import_restores_the_same_memories(browser: Any, server: LiveServer, tmp_path: Path) -> None:
    mdir = server.services.user_agent_dir("u1")
    mdir.save("user_role.md", AGENT_MEMORY)
    mdir.save("project/roadmap.md", "---\nname: 路线图\ndescription: Q1 search\ntype: project\n---\n\n搜索 🔍\n")
    server.services.auto_memory().add_fact("u1", "prefers tea", "preference", 1.0)
    before = {i.key: server.services.store.get(i.key).data for i in server.services.store.list("memory/users/u1/")
              if i.key.endswith(".md") and not i.key.endswith("MEMORY.md")}
    assert len(before) == 3
    page = gateway_page(browser, server, "u1")
    page.goto(server.url + "/ui/#/transfer")
    ready(page, "transfer")
    files = {}
    for fmt in ("json", "zip"):
        with page.expect_download() as download:
            page.click(f"#export-{fmt}")
        files[fmt] = tmp_path / f"export.{fmt}"
        download.value.save_as(files[fmt])
    screenshot(page, "ui-transfer")
    bundle = json.loads(files["json"].read_text(encoding="utf-8"))
    assert any("路线图" in json.dumps(p, ensure_ascii=False) for p in bundle["places"])

    for fmt in ("json", "zip"):
        server.services.user_agent_dir("u1").clear()
        server.services.auto_memory().clear_facts("u1")
        page.set_input_files("#import-file", str(files[fmt]))
        page.select_option("#import-mode", "replace")
        page.click("#import-go")
        page.wait_for_selector("#confirm-box", timeout=WAIT)  # a replacing import shows its dry run first
        assert "created" in page.inner_text("#confirm-box") and stored(server, "u1", "user_role.md") is None
        page.click("#confirm-go")
        page.wait_for_selector("#transfer-result:not(:empty)", timeout=WAIT)
        after = {k: server.services.store.get(k).data for k in before}
        assert after == before, fmt
        page.goto(server.url + "/ui/#/memories")
        ready(page)
        assert {page.locator(".memory").nth(i).get_attribute("data-file") for i in range(2)} == {
            "user_role.md", "project/roadmap.md"}
        page.goto(server.url + "/ui/#/transfer")
        ready(page, "transfer")


def test_facts_profile_and_corrections(browser: Any, server: LiveServer) -> None:
    auto = server.services.auto_memory()
    auto.add_fact("u1", "works at ACME", "knowledge", 0.8)
    auto.add_fact("u1", "lives in Beijing, not Shanghai", "correction", 0.95, source_error="lives in Shanghai")
    page = gateway_page(browser, server, "u1")
    page.goto(server.url + "/ui/#/facts")
    ready(page, "facts")
    correction = page.locator("article.fact.correction")
    assert correction.count() == 1 and "No longer: lives in Shanghai" in correction.inner_text()
    assert "sure" in correction.locator(".fact-meta").inner_text()  # confidence in words
    assert correction.locator(".badge").count() == 1  # one badge: "Correction"
    acme = page.locator("article.fact:not(.correction)")
    assert "fairly sure" in acme.inner_text() and "added or corrected by you" in acme.inner_text()
    assert "%" not in acme.locator(".fact-meta").inner_text()
    screenshot(page, "ui-facts")
    acme.locator(".fact-edit").click()
    page.fill("#edit-fact-content", "works at ACME Robotics 机器人")
    page.click("#edit-fact-save")
    page.wait_for_selector("#toast.shown:has-text('Fact saved')", timeout=WAIT)
    facts = {f.content: f for f in auto.list_facts("u1")}
    assert "works at ACME Robotics 机器人" in facts and facts["works at ACME Robotics 机器人"].source == "manual"
    page.locator("article.fact.correction .fact-delete").click()
    page.wait_for_selector("article.fact.correction", state="detached", timeout=WAIT)
    assert [f.content for f in auto.list_facts("u1")] == ["works at ACME Robotics 机器人"]
    page.fill("#p-workContext", "前端工程师 at ACME")
    page.click("#profile-form button[type=submit]")
    page.wait_for_selector("#toast.shown:has-text('Profile saved')", timeout=WAIT)
    assert "前端工程师 at ACME" in auto.get_profile("u1").to_json().get("workContext", "")


def test_operator_view(browser: Any, server: LiveServer, llm: ScriptedLLM) -> None:
    out = agent_saves(server, llm, "u1", "user_role.md", AGENT_MEMORY)  # the build copies the snapshot in
    write_snapshot(server.services.config.agent.snapshots_dir, "2026-11-20T00:00:00Z", {  # a newer version
        "feedback_dates.md": "---\nname: Dates\ndescription: absolute dates\ntype: feedback\n---\n\nISO.\n"})
    server.services.shared_agent_dir().save("team.md", "---\nname: team wiki\ndescription: where docs live\n"
                                            "type: reference\n---\n\nwiki.internal\n")
    page = gateway_page(browser, server, "ops", token=ADMIN)
    page.goto(server.url + "/ui/#/operator")
    ready(page, "operator")
    row = page.locator("#places tr[data-path='users/u1/agent-memory/default']")
    cells = row.locator("td").all_inner_texts()
    assert cells[2] == "u1" and int(cells[3]) == len(server.services.user_agent_dir("u1").list_entries())
    assert "team wiki" in page.inner_text("#shared-memory")
    assert "harness_memory_tool_calls_total" in page.inner_text("#metrics")
    page.fill("#session-id", out.session_id)
    page.click("#session-id + button")
    page.wait_for_selector("#session-out dl", timeout=WAIT)
    assert "Buffered messages" in page.inner_text("#session-out")
    assert "I'm a frontend engineer" in page.inner_text("#session-out .messages")
    row.locator(".snapshot-status").click()
    page.wait_for_selector("#snapshot-state", timeout=WAIT)
    state = page.inner_text("#snapshot-state")
    screenshot(page, "ui-operator")
    assert state == "prompt-update"
    page.click("#snapshot-mark")
    page.wait_for_selector("#snapshot-state:has-text('none')", timeout=WAIT)
    assert stored(server, "u1", ".snapshot-synced.json") is not None
    assert stored(server, "u1", "user_role.md") == AGENT_MEMORY  # mark-synced keeps the user's memory
    # The operator opens u1's memory.
    row.locator("button", has_text="Open").click()
    ready(page)
    assert page.inner_text("#who-user") == "u1"
    assert page.locator("article.memory[data-file='user_role.md']").count() == 1


class QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_a_foreign_page_cannot_write_through_the_gateway(browser: Any, server: LiveServer, tmp_path: Path) -> None:
    """CSRF: the gateway adds u1's credentials to every request of u1's browser, also to a form
    another site makes it submit. Snapshot replace (no body) would drop u1's memories."""
    server.services.user_agent_dir("u1").save("user_role.md", AGENT_MEMORY)
    victim = server.url.replace("127.0.0.1", "localhost")  # another site than the attacker's 127.0.0.1
    (tmp_path / "prize.html").write_text(
        f'<form id="f" method="POST" action="{victim}/users/me/agents/default/snapshot/replace">'
        f'<button id="go">win a prize</button></form>'
        f'<form id="g" method="POST" enctype="text/plain" action="{victim}/users/me/facts">'
        '<input name=\'{"content": "planted", "x": "\' value=\'"}\'><button id="go2">more</button></form>',
        encoding="utf-8")
    handler = functools.partial(QuietFiles, directory=str(tmp_path))
    attacker = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=attacker.serve_forever, daemon=True).start()
    try:
        context = new_context(browser, extra_http_headers={"wid": "u1", "Authorization": f"Bearer {TOKEN}"})
        page = context.new_page()
        for button in ("#go", "#go2"):
            page.goto(f"http://127.0.0.1:{attacker.server_address[1]}/prize.html")
            with page.expect_navigation():
                page.click(button)
            assert '"code": "cross_site"' in page.content()
    finally:
        attacker.shutdown()
        attacker.server_close()
    assert stored(server, "u1", "user_role.md") == AGENT_MEMORY
    assert stored(server, "u1", "feedback_dates.md") is None  # the snapshot was not copied in
    assert server.services.auto_memory().list_facts("u1") == []


def test_a_large_place_is_paged_and_filtered(browser: Any, server: LiveServer) -> None:
    types = ("user", "feedback", "project", "reference")
    server.services.user_agent_dir("u1").save_many([
        (f"m{i:03d}.md", f"---\nname: memory {i}\ndescription: fact {i}\ntype: {types[i % 4]}\n---\n\nx\n")
        for i in range(120)])
    server.services.user_agent_dir("u1", "coder").save("style.md", "---\nname: code style\ndescription: tabs, "
                                                          "not spaces\ntype: feedback\n---\n\nTabs.\n")
    page = gateway_page(browser, server, "u1")
    ready(page)
    assert page.locator("article.memory").count() == 50
    assert page.inner_text("#page-info") == "1–50 of 120" and "120 memories" in page.inner_text("#memory-count")
    page.click("#page-next")
    page.wait_for_selector("#page-info:has-text('51–100 of 120')", timeout=WAIT)
    page.click(".chip[data-type='reference']")
    page.wait_for_selector("#page-info:has-text('1–30 of 30')", timeout=WAIT)
    page.fill("#memory-filter", "fact 11")
    page.wait_for_selector("#page-info:has-text('1–4 of 4')", timeout=WAIT)  # references (i % 4 == 3) only
    files = {page.locator("article.memory").nth(i).get_attribute("data-file") for i in range(4)}
    assert files == {"m011.md", "m111.md", "m115.md", "m119.md"}
    # Another agent's memory of the same user, picked from the places the user has.
    page.click("#agent-button")
    page.select_option("#agent-type", "coder")
    page.wait_for_selector("article.memory[data-file='style.md']", timeout=WAIT)
    assert page.locator("article.memory").count() == 1
