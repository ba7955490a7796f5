"""Recall insight on the ``/ui`` page in a real Chromium against a live server (SeaweedFS + Redis):
when a memory was last recalled (list row and read view), why a conversation got what it got,
and the link to the API reference. Shares ``test_ui_browser``'s module fixtures (one browser, one
server) by import.
"""

from __future__ import annotations

from typing import Any

from harness_memory.recall import recall_for_query
from harness_memory.session.binding import bind_session
from tests.ui_browser import LiveServer, screenshot

from . import test_ui_browser as ui
from .test_ui_browser import WAIT, gateway_page, ready
from .test_ui_safety_browser import THREE, no_sideways_scroll

browser, live, llm, server, close_contexts = ui.browser, ui.live, ui.llm, ui.server, ui.close_contexts


def test_last_recalled_and_why_a_conversation_got_it(browser: Any, server: LiveServer) -> None:
    svc = server.services
    svc.user_agent_dir("u1").save_many(THREE)
    bound, _ = bind_session("u1", "chat-5", svc.config.session.bind_to_user)
    block = recall_for_query(svc, "u1", "default", "which database, PostgreSQL <b>事务</b>?", session_id=bound)
    assert "We chose PostgreSQL" in block
    page = gateway_page(browser, server, "u1")
    ready(page)
    assert "recalled " in page.inner_text("article.memory[data-file='db.md'] .muted")
    assert "recalled" not in page.inner_text("article.memory[data-file='tone.md'] .muted")

    page.click("details.recalled summary")
    page.fill("#recalled-session", "chat-5")
    page.press("#recalled-session", "Enter")
    page.wait_for_selector("#why-ranking", timeout=WAIT)
    assert page.get_attribute("#why-path", "data-path") in {"lexical", "confident"}
    assert page.inner_text("#why-model") == "The light model was not asked."
    assert "<b>事务</b>" in page.inner_text("#why-query")  # the message is text, never markup
    assert page.locator("#why b").count() == 0
    first = page.locator("#why-ranking tbody tr").first
    assert first.get_attribute("data-file") == "db.md" and first.locator("td").last.inner_text() == "yes"
    screenshot(page, "ui-why-recalled")
    page.set_viewport_size({"width": 390, "height": 800})  # the ranking table scrolls inside itself
    no_sideways_scroll(page)
    page.set_viewport_size({"width": 1280, "height": 800})

    page.click("#recalled-files a")
    ready(page, "memory")
    assert page.inner_text("#read-recalled").startswith("Last recalled into a conversation")
    page.goto(server.url + "/ui/#/memory/tone.md")
    page.wait_for_selector("#read-name:has-text('tone')", timeout=WAIT)
    assert page.inner_text("#read-recalled") == "Not recalled into a conversation lately."

    page.click("#docs-link")  # the API reference the server serves (offline assets)
    page.wait_for_url(server.url + "/docs", timeout=WAIT)
    page.wait_for_selector("#swagger-ui", state="attached", timeout=WAIT)
