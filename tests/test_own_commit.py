"""Commits that recognise their own writes (issue 28, item 1), with faults at the HTTP boundary.

The store really receives and applies each request; ``HttpFaultProxy`` loses (or delays) its answer,
so the retry — the SDK's or ours — meets the version its own first attempt wrote. Every writer must
then apply its change exactly once and report what happened.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from harness_memory.config import MemoryConfig
from harness_memory.errors import PreconditionFailed
from harness_memory.memdir import ABSENT
from harness_memory.memdir import heads as heads_cache
from harness_memory.services import MemoryServices
from tests.httpfaults import HttpFaultProxy, conditional_put, once_per_path, put_to
from tests.servers import SeaweedFS

HEAD = ".manifest.json"


def note(name: str, body: str = "Body.") -> str:
    return f"---\nname: {name}\ndescription: note {name}\ntype: project\n---\n\n{body}\n"


@pytest.fixture
def proxy(seaweedfs: SeaweedFS) -> Iterator[HttpFaultProxy]:
    p = HttpFaultProxy(seaweedfs.s3_port).start()
    try:
        yield p
    finally:
        p.close()


MODES = ["own-retry", "sdk-retry", "no-retry"]
every_mode = pytest.mark.parametrize("services", MODES, indirect=True)


@pytest.fixture
def services(request: pytest.FixtureRequest, make_config: Callable[..., MemoryConfig], cos_bucket: str,
             proxy: HttpFaultProxy) -> Iterator[MemoryServices]:
    """Services on SeaweedFS through the proxy. ``own-retry``: the store retries its conditional
    PUTs itself (the default); ``sdk-retry``: the COS SDK's blind retry, as before, whose 412 the
    commit must recognise as its own by the txid in the head; ``no-retry``: the lost answer reaches
    the commit as a timeout, resolved by reading the head."""
    mode = getattr(request, "param", "own-retry")
    retries = 0 if mode == "no-retry" else 1
    cfg = make_config("cos", store={"cos_domain": proxy.domain_for(cos_bucket), "cos_retries": retries,
                                    "cos_timeout": 1.0})
    heads_cache.clear()
    svc = MemoryServices.from_config(cfg)
    if mode == "sdk-retry":
        svc.store._once = svc.store._client  # type: ignore[attr-defined]
    try:
        yield svc
    finally:
        svc.close()


def _head(svc: MemoryServices, user: str = "u1") -> dict[str, Any]:
    mdir = svc.user_agent_dir(user)
    obj = svc.store.get(mdir.manifest_key)
    return json.loads(obj.data)


@every_mode
def test_replace_whose_head_answer_is_lost_inserts_once(services: MemoryServices, proxy: HttpFaultProxy) -> None:
    """Reproduces the storm's double insert: the head PUT lands, its answer is lost, the retry gets
    412 (our own version), and the old code took its own commit for someone else's and redid it."""
    mdir = services.user_agent_dir("u1")
    mdir.save("ledger.md", note("ledger", "END"))
    rule = proxy.drop(put_to(HEAD), times=1)
    result = mdir.replace_chunk("ledger.md", "END", "- one\nEND")
    assert rule.hits == 1 and proxy.faults("drop")  # the fault did happen
    text = mdir.read("ledger.md").text
    assert text.count("- one") == 1, text
    assert result.file == "ledger.md" and not result.created
    assert mdir.manifest().entries["ledger.md"].size == len(text.encode("utf-8"))


@every_mode
def test_create_only_save_whose_head_answer_is_lost_reports_created(services: MemoryServices,
                                                                    proxy: HttpFaultProxy) -> None:
    mdir = services.user_agent_dir("u1")
    mdir.save("other.md", note("other"))  # the place exists: the head PUT is an If-Match
    proxy.drop(put_to(HEAD), times=1)
    result = mdir.save("fresh.md", note("fresh"), expect=ABSENT)
    assert result.created
    assert "fresh.md" in mdir.manifest().entries
    assert mdir.read("fresh.md").text == note("fresh")
    with pytest.raises(PreconditionFailed):  # and a real second create is still refused
        mdir.save("fresh.md", note("fresh2"), expect=ABSENT)


@every_mode
def test_first_commit_of_a_place_with_its_answer_lost(services: MemoryServices, proxy: HttpFaultProxy) -> None:
    """The very first head is created with If-None-Match: its retry meets our own head."""
    mdir = services.user_agent_dir("u2")
    proxy.drop(put_to(HEAD), times=1)
    result = mdir.save("a.md", note("a"), expect=ABSENT)
    assert result.created and list(mdir.manifest().entries) == ["a.md"]


@every_mode
def test_every_conditional_put_answer_lost_once(services: MemoryServices, proxy: HttpFaultProxy) -> None:
    """Files (If-None-Match / If-Match) and the head alike: each answer lost once, every write
    still applied exactly once and reported done."""
    mdir = services.user_agent_dir("u3")
    mdir.save("ledger.md", note("ledger", "END"))
    proxy.drop(once_per_path(conditional_put))
    mdir.replace_chunk("ledger.md", "END", "- a\nEND")
    proxy.rules.clear()
    assert len(proxy.faults("drop")) >= 2  # the head and the file
    assert mdir.read("ledger.md").text.count("- a") == 1


@pytest.mark.parametrize(("services", "action"), [("own-retry", "drop"), ("own-retry", "delay"),
                                                  ("sdk-retry", "drop"), ("no-retry", "drop")],
                         indirect=["services"])
def test_each_writer_applies_once_and_reports_truthfully(services: MemoryServices, proxy: HttpFaultProxy,
                                                         action: str) -> None:
    """save, create-only save, replace, delete, save_many, update_meta, snapshot-style state, and
    an import: the head answer of each lost (or late past the timeout) once."""
    mdir = services.user_agent_dir("u4")
    mdir.save("ledger.md", note("ledger", "END"))

    def fault() -> None:
        proxy.rules.clear()
        if action == "drop":
            proxy.drop(put_to(HEAD), times=1)
        else:
            proxy.delay(put_to(HEAD), 1.5, times=1)  # past cos_timeout 1 s: a timeout after delivery

    fault()
    assert mdir.save("s.md", note("s")).created
    fault()
    assert mdir.save("c.md", note("c"), expect=ABSENT).created
    fault()
    mdir.replace_chunk("ledger.md", "END", "- r\nEND")
    fault()
    assert mdir.delete("s.md") is True
    fault()
    saved = mdir.save_many([("m1.md", note("m1")), ("m2.md", note("m2"))])
    assert [r.created for r in saved] == [True, True]
    fault()
    mdir.update_meta(lambda m: m.meta.__setitem__("counter", m.meta.get("counter", 0) + 1))
    proxy.rules.clear()
    manifest = mdir.manifest()
    assert sorted(manifest.entries) == ["c.md", "ledger.md", "m1.md", "m2.md"]
    assert manifest.meta["counter"] == 1
    assert mdir.read("ledger.md").text.count("- r") == 1
    assert not services.store.exists(mdir.place.key("s.md"))
    assert len(proxy.faults(action)) == 6


def test_a_tool_replace_through_a_lost_answer_says_updated_once(services: MemoryServices,
                                                               proxy: HttpFaultProxy) -> None:
    from harness_memory.tools import MemoryTools

    tools = MemoryTools(services.user_agent_dir("u5"))
    assert tools.save_file("ledger.md", note("ledger", "END")).startswith("Created")
    proxy.drop(put_to(HEAD), times=1)
    said = tools.replace_file_chunk("ledger.md", "END", "- t\nEND")
    assert said.startswith("Updated memory ledger.md"), said
    assert services.user_agent_dir("u5").read("ledger.md").text.count("- t") == 1


def test_import_whose_head_answer_is_lost_imports_once(services: MemoryServices, proxy: HttpFaultProxy) -> None:
    from harness_memory.control.bundle import export_places
    from harness_memory.control.bundle_import import ImportTarget, apply_import, plan_import

    src = services.user_agent_dir("u6")
    src.save("x.md", note("x"))
    bundle = export_places([src], "user")
    src.clear()
    dst = services.user_agent_dir("u6")
    plans = plan_import(bundle, ImportTarget(place=dst.place), services.memdir, services.key_prefix)
    proxy.drop(put_to(HEAD), times=1)
    apply_import(plans, "merge")
    assert proxy.faults("drop")
    assert list(dst.manifest().entries) == ["x.md"]
    assert dst.read("x.md").text == note("x")


@pytest.mark.parametrize("cond", ["absent", "match"])
def test_store_conditional_put_whose_answer_is_lost_succeeds(make_config: Callable[..., MemoryConfig],
                                                            cos_bucket: str, proxy: HttpFaultProxy,
                                                            cond: str) -> None:
    """The store's own retry of a conditional PUT: the retry's 412 is recognised as the first
    attempt's success (the object holds exactly our bytes); a real conflict is still refused.
    Session summaries (``put_if_absent`` / ``put_if_match`` on their own key) rely on this."""
    from harness_memory.storage.cos import CosStore

    cfg = make_config("cos", store={"cos_domain": proxy.domain_for(cos_bucket), "cos_retries": 1})
    store = CosStore(cfg.store)
    try:
        key = "memory/sessions/session-x.md"
        first = store.put_if_absent(key, b"v1")
        proxy.drop(put_to("session-x.md"), times=1)
        if cond == "absent":
            store.delete(key)
            etag = store.put_if_absent(key, b"v2")
        else:
            etag = store.put_if_match(key, b"v2", first)
        assert proxy.faults("drop")
        got = store.get(key)
        assert got.data == b"v2" and got.etag == etag
        with pytest.raises(PreconditionFailed):  # a real conflict: someone else's version is there
            store.put_if_match(key, b"v3", first) if cond == "match" else store.put_if_absent(key, b"v3")
        assert store.get(key).data == b"v2"
    finally:
        store.close()


def test_own_commit_found_under_a_later_one_is_not_redone(make_config: Callable[..., MemoryConfig],
                                                          cos_bucket: str, proxy: HttpFaultProxy) -> None:
    """Our head lands, its answer is late, and meanwhile another pod (not excluded: local locks)
    commits on top of it, completing ours first. Reading back, our txid is among the head's recent
    commits: the replace is done — not redone on top of the other pod's change."""
    import threading
    import time

    ours = MemoryServices.from_config(make_config("cos", store={"cos_domain": proxy.domain_for(cos_bucket),
                                                               "cos_retries": 0, "cos_timeout": 1.0}))
    other = MemoryServices.from_config(make_config("cos"))
    try:
        mine, theirs = ours.user_agent_dir("u8"), other.user_agent_dir("u8")
        mine.save("ledger.md", note("ledger", "END"))
        proxy.delay(put_to(HEAD), 1.8, times=1)

        def later() -> None:
            time.sleep(0.4)  # our head has reached the store; its answer is held back
            theirs.replace_chunk("ledger.md", "END", "- b\nEND")

        t = threading.Thread(target=later)
        t.start()
        mine.replace_chunk("ledger.md", "END", "- a\nEND")
        t.join()
        text = theirs.read("ledger.md").text
        assert text.count("- a") == 1 and text.count("- b") == 1, text
        head = json.loads(other.store.get(theirs.manifest_key).data)
        assert head["recent"] and len(head["recent"]) <= 16
    finally:
        ours.close()
        other.close()


def test_tools_do_not_say_memory_md_updated_when_it_was_not(make_config: Callable[..., MemoryConfig],
                                                           cos_bucket: str, proxy: HttpFaultProxy) -> None:
    """Issue 28: the head landed but the PUT of MEMORY.md failed (the store answered 503 and never
    saw it): the change is saved and said so, but the tool must not claim "MEMORY.md updated."."""
    from harness_memory.tools import MemoryTools

    svc = MemoryServices.from_config(make_config("cos", store={"cos_domain": proxy.domain_for(cos_bucket),
                                                               "cos_retries": 0}))
    try:
        tools = MemoryTools(svc.user_agent_dir("u9"))
        assert tools.save_file("a.md", note("a", "END")).endswith("MEMORY.md updated.")
        index_key = svc.user_agent_dir("u9").index_key
        before = svc.store.get(index_key).data
        proxy.refuse(put_to("/MEMORY.md"))
        said = [tools.save_file("b.md", note("b")), tools.replace_file_chunk("a.md", "END", "- x\nEND"),
                tools.delete_file("b.md")]
        assert len(proxy.faults("refuse")) == 3
        for text in said:
            assert "MEMORY.md updated" not in text and "MEMORY.md was not rewritten" in text, text
        assert said[0].startswith("Created memory b.md") and said[2].startswith("Deleted memory b.md")
        assert svc.store.get(index_key).data == before  # indeed not rewritten
        mdir = svc.user_agent_dir("u9")
        assert sorted(mdir.manifest().entries) == ["a.md"] and "- x" in mdir.read("a.md").text
        proxy.rules.clear()
        assert tools.save_file("c.md", note("c")).endswith("MEMORY.md updated.")
        assert b"c.md" in svc.store.get(index_key).data
    finally:
        svc.close()


def test_snapshot_initialisation_whose_head_answer_is_lost_copies_once(services: MemoryServices,
                                                                      proxy: HttpFaultProxy,
                                                                      tmp_path: Any) -> None:
    from harness_memory.snapshot import initialize_from_snapshot
    from tests.test_snapshot import V1, write_snapshot

    root = tmp_path / "snaps"
    write_snapshot(root, "2026-11-01T00:00:00Z", V1)
    proxy.drop(put_to(HEAD), times=1)
    status = initialize_from_snapshot(services, root, "default", "u10")
    assert proxy.faults("drop")
    mdir = services.user_agent_dir("u10")
    assert sorted(mdir.manifest().entries) == sorted(V1)
    for name, text in V1.items():
        assert mdir.read(name).text == text
    assert status.state.value == "none"  # synced: nothing left to offer


@every_mode
def test_auto_memory_commit_whose_head_answer_is_lost_adds_each_fact_once(services: MemoryServices,
                                                                         proxy: HttpFaultProxy) -> None:
    from harness_memory.auto import (
        ApplyContext,
        ApplyRules,
        AutoPlace,
        Category,
        NewFact,
        ProfileKey,
        Signals,
        UpdatePlan,
        apply_plan,
    )

    place = AutoPlace(services.user_auto_dir("u11"))
    plan = UpdatePlan(profile={ProfileKey.WORK: "Frontend engineer."},
                      new_facts=[NewFact("Writes reports in Chinese", Category.PREFERENCE, 0.9, None),
                                 NewFact("Uses Vue 3", Category.CONTEXT, 0.9, None)])
    snapshot = place.read()
    proxy.drop(put_to(HEAD), times=1)
    with place.transaction() as txn:
        report = apply_plan(plan, txn, snapshot, ApplyRules(threshold=0.7, max_facts=100),
                            ApplyContext(signals=Signals.of(), source="auto:s1"))
    assert proxy.faults("drop") and len(report.added) == 2
    mdir = services.user_auto_dir("u11")
    bodies = [mdir.read(f).text for f in mdir.manifest().entries]
    assert sum("Writes reports in Chinese" in b for b in bodies) == 1
    assert sum("Uses Vue 3" in b for b in bodies) == 1


@pytest.mark.parametrize("version", [1, 2])
def test_session_summary_whose_answer_is_lost_is_stored_once_and_reported_extracted(
        make_config: Callable[..., MemoryConfig], cos_bucket: str, proxy: HttpFaultProxy, llm_server: Any,
        version: int) -> None:
    """The summary PUT (create-only for v1, If-Match for v2) lands and its answer is lost: the
    extraction is reported EXTRACTED, the buffer advances (no message is summarised twice)."""
    import uuid

    from harness_memory.session import ExtractStatus
    from tests.fakellm import text
    from tests.test_session_manager import SESSION, model_cfg, summary_md, turn

    cfg = make_config("cos", redis=True, model=model_cfg(llm_server), session=SESSION,
                      store={"cos_domain": proxy.domain_for(cos_bucket), "cos_retries": 1})
    svc = MemoryServices.from_config(cfg)
    mgr = svc.session_manager()
    try:
        sid = "sess-" + uuid.uuid4().hex[:6]
        for v in range(1, version + 1):
            for i in range(3):
                mgr.collect_messages_sync(sid, turn(10 * v + i))
            llm_server.script(text(summary_md(f"Build fix v{v}")))
            if v == version:
                proxy.drop(put_to(f"session-{sid}.md"), times=1)
            result = mgr.maybe_extract_sync(sid)
            assert result.status is ExtractStatus.EXTRACTED and result.version == v, result
        assert proxy.faults("drop")
        state = mgr.buffer.state(sid)
        assert state is not None and state.summarized == 6 * version
        assert mgr.get_summary_sync(sid) is not None and f"Build fix v{version}" in str(mgr.get_summary_sync(sid))
        assert not mgr.should_extract_sync(sid)  # nothing left to summarise again
    finally:
        mgr.close()
        svc.close()


def test_a_head_put_answered_only_by_5xx_is_settled_by_reading_the_head(
        make_config: Callable[..., MemoryConfig], cos_bucket: str, proxy: HttpFaultProxy) -> None:
    """The first head PUT lands but its answer is lost, the retry is answered 503 by a proxy: the
    store cannot say "failed" (an attempt may have landed); the commit reads the head, finds its
    own txid, and the save is reported done, applied once."""
    svc = MemoryServices.from_config(make_config("cos", store={"cos_domain": proxy.domain_for(cos_bucket),
                                                               "cos_retries": 1}))
    try:
        mdir = svc.user_agent_dir("u12")
        mdir.save("ledger.md", note("ledger", "END"))
        proxy.drop(put_to(HEAD), times=1)
        proxy.refuse(put_to(HEAD), times=1)
        result = mdir.replace_chunk("ledger.md", "END", "- z\nEND")
        assert len(proxy.faults("drop")) == 1 and len(proxy.faults("refuse")) == 1
        assert result.file == "ledger.md"
        assert mdir.read("ledger.md").text.count("- z") == 1
    finally:
        svc.close()
