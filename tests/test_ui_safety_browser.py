"""The memory page people can trust, in a real Chromium against a live server (SeaweedFS + Redis):
the trash and its Undo, bulk delete, history, whole-memory search, the read view, errors on their
field, fact corrections, dialogs that trap focus, keyboard-only use and a 390 px phone.

Every flow is checked where it lands (the store, the auto place), like ``test_ui_browser``, whose
module fixtures (one browser, one server) this module shares by import.
"""

from __future__ import annotations

import json
from typing import Any

from harness_memory.auto.inject import fact_line
from tests.ui_browser import LiveServer, screenshot

from . import test_ui_browser as ui
from .test_ui_browser import WAIT, gateway_page, ready, stored

# The module fixtures of test_ui_browser (one browser, one live server per module), shared here.
browser, live, llm, server, close_contexts = ui.browser, ui.live, ui.llm, ui.server, ui.close_contexts


def memory(name: str, description: str, body: str, type_: str = "project") -> str:
    return f"---\nname: {name}\ndescription: {description}\ntype: {type_}\n---\n\n{body}\n"


THREE = [("db.md", memory("数据库选型", "PostgreSQL over MySQL", "We chose PostgreSQL for 事务.")),
         ("ui.md", memory("frontend stack", "Vue 3 and TypeScript", "The admin uses zanzibar widgets.", "user")),
         ("tone.md", memory("tone", "short answers", "Be brief.", "feedback"))]


def no_sideways_scroll(page: Any) -> None:
    width = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], width


def test_bulk_delete_goes_to_the_trash_with_undo_and_restore(browser: Any, server: LiveServer) -> None:
    server.services.user_agent_dir("u1").save_many(THREE)
    before = {f: stored(server, "u1", f) for f, _ in THREE}
    page = gateway_page(browser, server, "u1")
    ready(page)
    for file in ("db.md", "tone.md"):
        page.check(f"article.memory[data-file='{file}'] .pick")
    assert page.inner_text("#bulk-count") == "2 selected"
    page.click("#bulk-delete")
    page.wait_for_selector("#confirm-box", timeout=WAIT)
    assert page.locator(".backdrop").count() == 1 and page.get_attribute("#confirm-box", "aria-modal") == "true"
    page.click("#confirm-go")
    page.wait_for_selector("#toast.shown:has-text('Moved 2 to the trash')", timeout=WAIT)
    page.wait_for_selector("article.memory[data-file='db.md']", state="detached", timeout=WAIT)
    assert stored(server, "u1", "db.md") is None and stored(server, "u1", "tone.md") is None
    assert "db.md" not in (stored(server, "u1", "MEMORY.md") or "")
    page.click("#toast-action")  # Undo
    page.wait_for_selector("article.memory[data-file='db.md']", timeout=WAIT)
    assert {f: stored(server, "u1", f) for f, _ in THREE} == before  # byte-identical

    # Delete one from its read view, then restore it from the trash page.
    page.goto(server.url + "/ui/#/memory/ui.md")
    ready(page, "memory")
    page.click("#delete")
    page.click("#confirm-go")
    ready(page)
    assert stored(server, "u1", "ui.md") is None
    server.services.auto_memory().add_fact("u1", "prefers tea", "preference", 1.0)
    fact_id = server.services.auto_memory().list_facts("u1")[0].id
    server.services.auto_memory().delete_fact("u1", fact_id)
    page.goto(server.url + "/ui/#/trash")
    ready(page, "trash")
    memories = page.locator("section.trash[data-source='memories'] .trash-item")
    assert memories.count() == 1 and "frontend stack" in memories.inner_text()
    facts = page.locator("section.trash[data-source='facts'] .trash-item")
    assert facts.count() == 1 and "prefers tea" in facts.inner_text()
    screenshot(page, "ui-trash")
    memories.locator(".trash-restore").click()
    page.wait_for_selector("section.trash[data-source='memories'] .trash-item", state="detached", timeout=WAIT)
    assert stored(server, "u1", "ui.md") == before["ui.md"]
    facts.locator(".trash-restore").click()
    page.wait_for_selector("section.trash[data-source='facts'] .trash-item", state="detached", timeout=WAIT)
    assert [f.content for f in server.services.auto_memory().list_facts("u1")] == ["prefers tea"]


def test_history_lists_each_edit_and_restores_one(browser: Any, server: LiveServer) -> None:
    server.services.user_agent_dir("u1").save("ui.md", THREE[1][1])
    page = gateway_page(browser, server, "u1")
    for description in ("Vue 3, TypeScript and Vite", "React now"):
        page.goto(server.url + "/ui/#/edit/ui.md")
        ready(page, "edit")
        page.fill("#f-description", description)
        page.click("#save")
        page.wait_for_selector(f"#read-desc:has-text('{description}')", timeout=WAIT)
    page.click("#show-history")
    page.wait_for_selector("#history .version", timeout=WAIT)
    versions = page.locator("#history .version")
    assert versions.count() == 2
    assert page.get_attribute("#show-history", "aria-expanded") == "true"
    versions.nth(1).locator("button", has_text="Show").click()
    assert "Vue 3 and TypeScript" in versions.nth(1).locator(".version-text").inner_text()
    screenshot(page, "ui-history")
    versions.nth(1).locator(".version-restore").click()
    page.click("#confirm-go")
    page.wait_for_selector("#read-desc:has-text('Vue 3 and TypeScript')", timeout=WAIT)
    assert stored(server, "u1", "ui.md") == THREE[1][1]


def test_search_finds_words_anywhere_and_counts_follow_it(browser: Any, server: LiveServer) -> None:
    server.services.user_agent_dir("u1").save_many(THREE)
    page = gateway_page(browser, server, "u1")
    ready(page)
    page.fill("#memory-filter", "zanzibar")  # only in a body
    page.wait_for_selector("#page-info:has-text('1–1 of 1')", timeout=WAIT)
    assert page.locator("article.memory").get_attribute("data-file") == "ui.md"
    assert page.inner_text(".chip[data-type='user']") == "user (1)"
    assert page.inner_text(".chip[data-type='project']") == "project (0)"
    assert page.inner_text(".chip[data-type='']") == "all (1)"
    page.fill("#memory-filter", "事务 postgresql")  # every word, any order, Chinese segmented
    page.wait_for_selector("article.memory[data-file='db.md']", timeout=WAIT)
    assert page.locator("article.memory").count() == 1
    page.fill("#memory-filter", "postgresql zanzibar")
    page.wait_for_selector("#memory-empty", timeout=WAIT)
    page.fill("#memory-filter", "")
    page.wait_for_selector("#page-info:has-text('1–3 of 3')", timeout=WAIT)
    server.services.user_agent_dir("u1").save("new.md", memory("newest", "just saved", "x", "reference"))
    page.select_option("#memory-order", "updated")
    page.wait_for_selector("#page-info:has-text('1–4 of 4')", timeout=WAIT)
    assert page.locator("article.memory").first.get_attribute("data-file") == "new.md"
    assert page.locator(".type-head").count() == 0  # newest first: no type headings
    # Which memories recall put into a conversation, by its session id.
    from harness_memory.session.binding import bind_session

    bound, _ = bind_session("u1", "chat-9", server.services.config.session.bind_to_user)
    server.services.surfaced_tracker().mark(bound, ["db.md"], user_id="u1")
    page.click("details.recalled summary")
    page.fill("#recalled-session", "chat-9")
    page.press("#recalled-session", "Enter")
    page.wait_for_selector("#recalled-files a", timeout=WAIT)
    page.click("#recalled-files a")
    ready(page, "memory")
    assert page.inner_text("#read-name") == "数据库选型"


def test_read_view_collapses_a_long_body_and_save_stays_in_reach(browser: Any, server: LiveServer) -> None:
    body = "## Background\n\n" + "\n\n".join(f"Paragraph {i}: " + "detail " * 60 for i in range(70))
    assert len(body.encode()) > 28_000
    server.services.user_agent_dir("u1").save("long.md", memory("long notes", "a 30 KB memory", body))
    page = gateway_page(browser, server, "u1")
    page.set_viewport_size({"width": 1000, "height": 720})
    page.goto(server.url + "/ui/#/memory/long.md")
    ready(page, "memory")
    height = page.evaluate("document.documentElement.scrollHeight")
    assert height < 2000, height  # collapsed, not a 13,500 px page
    sizes = page.evaluate("""() => [
        getComputedStyle(document.querySelector('#read-body h4, #read-body h3')).fontSize,
        getComputedStyle(document.querySelector('#read-body p')).fontSize].map(parseFloat)""")
    assert sizes[0] >= sizes[1]  # a `##` heading is not smaller than the text
    screenshot(page, "ui-read")
    page.click("#read-more")
    assert page.get_attribute("#read-more", "aria-expanded") == "true"
    assert page.evaluate("document.documentElement.scrollHeight") > height
    page.goto(server.url + "/ui/#/edit/long.md")
    ready(page, "edit")
    for scroll in (0, 3000):
        page.evaluate(f"window.scrollTo(0, {scroll})")
        box = page.locator("#save").bounding_box()
        assert box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 720, (scroll, box)
    # A stale toast is cleared by the next failure.
    page.evaluate("import('/ui/dom.js').then((m) => m.toast('Saved long.md'))")
    page.fill("#f-name", "")
    page.click("#save")
    page.wait_for_selector("#err-name:not(:empty)", timeout=WAIT)
    assert not page.locator("#toast").evaluate("el => el.classList.contains('shown')")


def test_this_is_wrong_records_a_correction_and_facts_are_editable(browser: Any, server: LiveServer) -> None:
    auto = server.services.auto_memory()
    auto.add_fact("u1", "lives in Beijing", "knowledge", 0.6)
    page = gateway_page(browser, server, "u1")
    page.goto(server.url + "/ui/#/facts")
    ready(page, "facts")
    fact = page.locator("article.fact")
    assert "not sure" in fact.locator(".fact-meta").inner_text()
    assert "tokens the assistant is shown" in page.inner_text("#facts-budget")
    fact.locator(".fact-wrong").click()
    page.wait_for_selector("#correct-dialog", timeout=WAIT)
    assert page.evaluate("document.activeElement.id") == "correct-input"
    page.fill("#correct-input", "lives in Shanghai")
    screenshot(page, "ui-correct")
    page.click("#correct-go")
    page.wait_for_selector("article.fact.correction", timeout=WAIT)
    stored_fact = auto.list_facts("u1")[0]
    assert (stored_fact.content, stored_fact.category.value, stored_fact.source_error) == (
        "lives in Shanghai", "correction", "lives in Beijing")
    assert fact_line(stored_fact) == "- lives in Shanghai (avoid: lives in Beijing)"
    row = page.locator("article.fact.correction")
    assert "No longer: lives in Beijing" in row.inner_text() and row.locator(".badge").count() == 1
    # Category and expiry, edited.
    row.locator(".fact-edit").click()
    page.select_option("#edit-fact-category", "context")
    page.fill("#edit-fact-expires", "2030-06-30")
    page.click("#edit-fact-save")
    page.wait_for_selector("article.fact:not(.correction)", timeout=WAIT)
    edited = auto.list_facts("u1")[0]
    assert (edited.category.value, edited.expires, edited.source_error) == ("context", "2030-06-30", None)
    assert "until 2030-06-30" in page.inner_text("article.fact")
    # Delete, then Undo from the toast.
    page.click(".fact-delete")
    page.wait_for_selector("#toast-action", timeout=WAIT)
    assert auto.list_facts("u1") == []
    page.click("#toast-action")
    page.wait_for_selector("article.fact", timeout=WAIT)
    assert [f.content for f in auto.list_facts("u1")] == ["lives in Shanghai"]


def test_keyboard_only_dialogs_trap_focus_and_close_on_escape(browser: Any, server: LiveServer) -> None:
    server.services.user_agent_dir("u1").save_many(THREE)
    page = gateway_page(browser, server, "u1")
    ready(page)
    chips = page.locator(".chip")
    assert [chips.nth(i).get_attribute("aria-selected") for i in range(5)] == ["true", "false", "false", "false",
                                                                                "false"]
    chips.first.focus()
    page.keyboard.press("ArrowRight")  # the tabs move with the arrow keys
    page.wait_for_selector(".chip[data-type='user'][aria-selected='true']", timeout=WAIT)
    page.keyboard.press("ArrowLeft")
    page.wait_for_selector(".chip[data-type=''][aria-selected='true']", timeout=WAIT)
    # Open a memory, its editor and save, by keyboard only.
    page.locator("article.memory[data-file='tone.md'] .memory-name").focus()
    page.keyboard.press("Enter")
    ready(page, "memory")
    page.locator("#edit").focus()
    page.keyboard.press("Enter")
    ready(page, "edit")
    assert page.evaluate("document.activeElement.id") == "f-description"
    page.keyboard.press("Control+A")
    page.keyboard.type("very short answers")
    page.keyboard.press("Enter")  # submits the form
    page.wait_for_selector("#read-desc:has-text('very short answers')", timeout=WAIT)
    assert "very short answers" in (stored(server, "u1", "tone.md") or "")
    # The delete dialog: focus inside, Tab wraps, Escape closes it and focus comes back.
    page.locator("#delete").focus()
    page.keyboard.press("Enter")
    page.wait_for_selector("#confirm-box", timeout=WAIT)
    inside = "document.getElementById('confirm-box').contains(document.activeElement)"
    assert page.evaluate(inside)
    for _ in range(5):
        page.keyboard.press("Tab")
        assert page.evaluate(inside)
    page.keyboard.press("Shift+Tab")
    assert page.evaluate(inside)
    assert page.evaluate("document.getElementById('main').inert")
    page.keyboard.press("Escape")
    page.wait_for_selector("#confirm-box", state="detached", timeout=WAIT)
    assert page.evaluate("document.activeElement.id") == "delete"
    assert stored(server, "u1", "tone.md") is not None  # Escape deleted nothing
    # A click on the backdrop closes it too.
    page.click("#delete")
    page.mouse.click(5, 5)
    page.wait_for_selector("#confirm-box", state="detached", timeout=WAIT)


def test_a_390px_phone_has_no_sideways_scroll(browser: Any, server: LiveServer) -> None:
    server.services.user_agent_dir("u1").save_many([*THREE, (
        "long_name.md", memory("a-very-long-memory-name-without-any-spaces-" * 3, "描述" * 60, "x" * 400))])
    server.services.auto_memory().add_fact("u1", "lives in Beijing", "knowledge", 0.9)
    server.services.user_agent_dir("u1").delete("db.md")
    from harness_memory.memdir import trash as kept

    kept.trash_files(server.services.user_agent_dir("u1"), ["tone.md"], "person")
    page = gateway_page(browser, server, "u1")
    page.set_viewport_size({"width": 390, "height": 844})
    ready(page)
    no_sideways_scroll(page)
    screenshot(page, "ui-mobile")
    for hash_, view in (("#/memory/ui.md", "memory"), ("#/edit/ui.md", "edit"), ("#/facts", "facts"),
                        ("#/trash", "trash"), ("#/transfer", "transfer"), ("#/memory/long_name.md", "memory")):
        page.goto(server.url + "/ui/" + hash_)
        ready(page, view)
        no_sideways_scroll(page)
    page.goto(server.url + "/ui/#/facts")
    ready(page, "facts")
    page.click(".fact-wrong")
    page.wait_for_selector("#correct-dialog", timeout=WAIT)
    no_sideways_scroll(page)
    box = page.locator("#correct-dialog").bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390
    assert json.loads(page.evaluate("JSON.stringify(getComputedStyle(document.querySelector('.backdrop')).position)")) \
        == "fixed"
