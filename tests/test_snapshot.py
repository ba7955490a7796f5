"""Snapshots: the four state transitions on both backends, the actions, validation and caching.

Assertions read what was STORED (object bytes, the manifest, MEMORY.md, .snapshot-synced.json)
through the store, not only what the functions returned.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness_memory.config import MemoryConfig
from harness_memory.layout import SEARCH_DELTA_FILE, SEARCH_INDEX_FILE, SNAPSHOT_SYNC_FILE
from harness_memory.memdir import Manifest, parse_index
from harness_memory.memdir.stored import manifest_from_bytes
from harness_memory.services import MemoryServices
from harness_memory.snapshot import (
    META_KEY,
    SnapshotError,
    SnapshotState,
    apply_snapshot_on_build,
    initialize_from_snapshot,
    load_snapshot,
    mark_snapshot_synced,
    replace_from_snapshot,
    snapshot_state,
)

REPO_SNAPSHOTS = Path(__file__).resolve().parent.parent / "snapshots"
BACKENDS = ["local", "cos"]


def memory(name: str, description: str, body: str, kind: str = "feedback") -> str:
    return f"---\nname: {name}\ndescription: {description}\ntype: {kind}\n---\n\n{body}\n"


V1 = {
    "feedback_language.md": memory("Reply language", "Answer in the user's language", "中文提问用中文回答。"),
    "reference_wiki.md": memory("Team wiki", "Where the team wiki lives", "wiki.internal/team", "reference"),
    "project/roadmap.md": memory("Roadmap", "The 2027 roadmap in short", "Q1: search. Q2: mobile.", "project"),
}


def write_snapshot(root: Path, updated_at: object, files: dict[str, str], agent_type: str = "default") -> Path:
    """(Re)write a snapshot folder; bumps snapshot.json's mtime so the per-process cache notices."""
    folder = root / agent_type
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.rglob("*.md"):
        old.unlink()
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    meta = folder / "snapshot.json"
    previous = meta.stat().st_mtime_ns if meta.exists() else 0
    meta.write_text(json.dumps({"updatedAt": updated_at}), encoding="utf-8")
    bumped = max(previous + 1_000_000_000, meta.stat().st_mtime_ns)
    os.utime(meta, ns=(bumped, bumped))
    return folder


@pytest.fixture
def snaps(tmp_path: Path) -> Path:
    root = tmp_path / "snaps"
    write_snapshot(root, "2026-11-01T00:00:00Z", V1)
    return root


@pytest.fixture
def services_for(make_config: Callable[..., MemoryConfig], snaps: Path) -> Iterator[Callable[..., MemoryServices]]:
    made: list[MemoryServices] = []

    def factory(backend: str = "local", redis: bool = False) -> MemoryServices:
        svc = MemoryServices.from_config(make_config(backend, redis=redis, agent={"snapshots_dir": str(snaps)}))
        made.append(svc)
        return svc

    yield factory
    for svc in made:
        svc.close()


def stored_text(svc: MemoryServices, user: str, file: str) -> str:
    memdir = svc.user_agent_dir(user)
    return svc.store.get(memdir.place.key(file)).data.decode("utf-8")


def stored_sync(svc: MemoryServices, user: str) -> dict[str, str]:
    memdir = svc.user_agent_dir(user)
    return json.loads(svc.store.get(memdir.place.reserved_key(SNAPSHOT_SYNC_FILE)).data)


@pytest.mark.parametrize("backend", BACKENDS)
def test_four_transitions_and_update_after_initialisation(services_for: Callable[..., MemoryServices],
                                                          snaps: Path, backend: str) -> None:
    svc = services_for(backend)
    own = svc.user_agent_dir("u1")

    # none: no snapshot for this agent type
    status = snapshot_state(svc, None, "other", "u1")
    assert status.state is SnapshotState.NONE and "no snapshot" in status.reason

    # initialize: computed without writing anything ...
    status = snapshot_state(svc, None, "default", "u1")
    assert status.state is SnapshotState.INITIALIZE
    assert list(svc.store.list(own.place.prefix)) == []
    # ... and carried out by the build, updating the manifest it was given in place
    manifest = own.manifest()
    assert apply_snapshot_on_build(svc, "u1", "default", manifest) is None
    assert set(manifest.entries) == set(V1)
    for file, text in V1.items():
        assert stored_text(svc, "u1", file) == text
    stored = manifest_from_bytes(svc.store.get(own.manifest_key).data)
    assert set(stored.entries) == set(V1)
    assert stored.entries["reference_wiki.md"].description == "Where the team wiki lives"
    assert {f for _, f, _ in parse_index(svc.store.get(own.index_key).data.decode())} == set(V1)
    sync = stored_sync(svc, "u1")
    assert sync["syncedFrom"] == "2026-11-01T00:00:00Z" and sync["syncedAt"]
    assert stored.meta[META_KEY] == sync  # mirrored: a build needs no extra GET

    # none: already synced — and answered from the manifest alone
    before = svc.store.request_count
    status = snapshot_state(svc, None, "default", "u1", manifest=manifest)
    assert status.state is SnapshotState.NONE and status.reason == "already synced with the snapshot"
    assert svc.store.request_count == before
    assert apply_snapshot_on_build(svc, "u1", "default", manifest) is None

    # prompt-update: the project publishes a newer snapshot after the user was initialised
    v2 = dict(V1, **{"feedback_language.md": memory("Reply language", "Answer in the user's language",
                                                     "Always mirror the user's language.")})
    write_snapshot(snaps, "2026-12-01T08:00:00+08:00", v2)
    status = snapshot_state(svc, None, "default", "u1")
    assert status.state is SnapshotState.PROMPT_UPDATE and status.update_available
    api = status.to_dict()
    assert api["state"] == "prompt-update" and api["updateAvailable"] is True
    assert api["syncedFrom"] == "2026-11-01T00:00:00Z" and api["snapshotUpdatedAt"] == "2026-12-01T08:00:00+08:00"
    note = apply_snapshot_on_build(svc, "u1", "default", own.manifest())
    assert note is not None and "update available" in note and "2026-12-01T08:00:00+08:00" in note
    assert stored_text(svc, "u1", "feedback_language.md") == V1["feedback_language.md"]  # nothing applied

    # mark-synced dismisses this version and keeps the user's files
    done = mark_snapshot_synced(svc, None, "default", "u1")
    assert done.applied and done.state is SnapshotState.NONE
    assert stored_sync(svc, "u1")["syncedFrom"] == "2026-12-01T08:00:00+08:00"
    assert stored_text(svc, "u1", "feedback_language.md") == V1["feedback_language.md"]
    assert snapshot_state(svc, None, "default", "u1").state is SnapshotState.NONE

    # a third version, and the user has a memory of their own: replace drops it, copies the snapshot
    v3 = {"feedback_language.md": v2["feedback_language.md"],
          "feedback_new.md": memory("New rule", "A rule added in v3", "Be brief.")}
    write_snapshot(snaps, "2026-12-20T00:00:00Z", v3)
    own.save("user_mine.md", memory("Mine", "the user's own memory", "likes tea", "user"))
    assert snapshot_state(svc, None, "default", "u1").state is SnapshotState.PROMPT_UPDATE
    done = replace_from_snapshot(svc, None, "default", "u1")
    assert done.applied and "replaced 3 local memories" in done.reason
    keys = {svc.store.get(k.key).key for k in svc.store.list(own.place.prefix)}
    files = {own.place.filename_of(k) for k in keys}
    trash = {f for f in files if f.startswith(".trash/")}  # what the replace removed or overwrote: restorable
    assert files - trash == {*v3, "MEMORY.md", ".manifest.json", SNAPSHOT_SYNC_FILE, SEARCH_INDEX_FILE,
                             SEARCH_DELTA_FILE}  # no undo record: the head carries the redo record (memdir/redo.py)
    from harness_memory.memdir import trash as kept

    assert len(trash) == 1
    batch = kept.list_trash(own)[0]
    assert batch.origin == "snapshot" and "user_mine.md" in {f.file for f in batch.files}
    assert stored_text(svc, "u1", "feedback_language.md") == v3["feedback_language.md"]
    assert set(own.manifest().entries) == set(v3)
    assert stored_sync(svc, "u1")["syncedFrom"] == "2026-12-20T00:00:00Z"
    assert snapshot_state(svc, None, "default", "u1").state is SnapshotState.NONE


@pytest.mark.parametrize("backend", BACKENDS)
def test_user_with_own_memories_and_no_sync_is_offered_the_update(
        services_for: Callable[..., MemoryServices], backend: str) -> None:
    svc = services_for(backend)
    own = svc.user_agent_dir("u2")
    own.save("user_role.md", memory("Role", "The user's role", "SRE", "user"))
    status = snapshot_state(svc, None, "default", "u2")
    assert status.state is SnapshotState.PROMPT_UPDATE and status.synced_from is None
    note = apply_snapshot_on_build(svc, "u2", "default", own.manifest())
    assert note is not None and "was not created from it" in note
    assert set(own.manifest().entries) == {"user_role.md"}  # never copied over the user's memories


def test_emptied_after_sync_stays_empty_but_cleared_starts_over(services_for: Callable[..., MemoryServices]
                                                                ) -> None:
    svc = services_for("local")
    own = svc.user_agent_dir("u3")
    assert initialize_from_snapshot(svc, None, "default", "u3").applied
    for file in list(own.manifest().entries):
        own.delete(file)
    status = snapshot_state(svc, None, "default", "u3")
    assert status.state is SnapshotState.NONE  # the user deleted them on purpose: not resurrected
    own.clear()
    assert not svc.store.exists(own.place.reserved_key(SNAPSHOT_SYNC_FILE))
    assert snapshot_state(svc, None, "default", "u3").state is SnapshotState.INITIALIZE


def test_sync_file_without_manifest_mirror_is_read(services_for: Callable[..., MemoryServices]) -> None:
    """A place synced by hand (or an older version) has only .snapshot-synced.json: it still counts."""
    svc = services_for("local")
    own = svc.user_agent_dir("u4")
    own.save("user_role.md", memory("Role", "The user's role", "SRE", "user"))
    svc.store.put(own.place.reserved_key(SNAPSHOT_SYNC_FILE),
                  json.dumps({"syncedFrom": "2026-11-01T00:00:00Z", "syncedAt": "x"}).encode())
    status = snapshot_state(svc, None, "default", "u4")
    assert status.state is SnapshotState.NONE and status.synced_from == "2026-11-01T00:00:00Z"
    manifest = own.manifest()
    assert apply_snapshot_on_build(svc, "u4", "default", manifest) is None
    assert own.manifest().meta[META_KEY]["syncedFrom"] == "2026-11-01T00:00:00Z"  # mirrored once ...
    before = svc.store.request_count
    assert snapshot_state(svc, None, "default", "u4", manifest=manifest).state is SnapshotState.NONE
    assert svc.store.request_count == before  # ... so later builds need no GET


def test_bad_snapshot_files_are_reported_and_good_ones_used(services_for: Callable[..., MemoryServices],
                                                            snaps: Path) -> None:
    svc = services_for("local")
    write_snapshot(snaps, "2026-11-05T00:00:00Z", {
        "good.md": memory("Good", "A good memory", "fine"),
        "no_frontmatter.md": "just text, no frontmatter\n",
        "bad_type.md": "---\nname: x\ndescription: y\ntype: opinion\n---\nbody\n",
        "shared/sneaky.md": memory("Sneaky", "tries to write the shared place", "no"),
        "huge.md": memory("Huge", "too big", "x" * 70_000),
        "README.md": "# About this snapshot (ignored)\n",
        "MEMORY.md": "# Memory index (ignored, generated)\n",
    })
    status = snapshot_state(svc, None, "default", "u5")
    problems = {p.file: p.message for p in status.problems}
    assert set(problems) == {"no_frontmatter.md", "bad_type.md", "shared/sneaky.md", "huge.md"}
    assert "frontmatter" in problems["no_frontmatter.md"] and "opinion" in problems["bad_type.md"]
    assert "reserved" in problems["shared/sneaky.md"] and "limit" in problems["huge.md"]
    assert status.files == ("good.md",) and status.state is SnapshotState.INITIALIZE
    assert {p["file"] for p in status.to_dict()["problems"]} == set(problems)
    assert apply_snapshot_on_build(svc, "u5", "default", None) is None
    assert set(svc.user_agent_dir("u5").manifest().entries) == {"good.md"}


def test_invalid_or_missing_snapshot(services_for: Callable[..., MemoryServices], snaps: Path) -> None:
    svc = services_for("local")
    (snaps / "default" / "snapshot.json").write_text("{not json", encoding="utf-8")
    os.utime(snaps / "default" / "snapshot.json", ns=(1, 1))
    status = snapshot_state(svc, None, "default", "u6")
    assert status.state is SnapshotState.NONE and "invalid" in status.reason
    assert status.problems[0].file == "snapshot.json"
    with pytest.raises(SnapshotError, match=r"invalid snapshot\.json"):
        replace_from_snapshot(svc, None, "default", "u6")
    with pytest.raises(SnapshotError, match="no snapshot for agent type 'ghost'"):
        mark_snapshot_synced(svc, None, "ghost", "u6")
    write_snapshot(snaps, "last tuesday", V1)
    assert "ISO time" in snapshot_state(svc, None, "default", "u6").problems[0].message


def test_snapshot_folder_is_parsed_once_per_version(snaps: Path) -> None:
    first = load_snapshot(snaps, "default")
    assert first is not None and load_snapshot(snaps, "default") is first
    write_snapshot(snaps, "2026-11-02T00:00:00Z", V1)
    second = load_snapshot(snaps, "default")
    assert second is not first and second is not None and second.updated_at == "2026-11-02T00:00:00Z"
    assert load_snapshot(snaps, "nothing-here") is None


def test_shipped_default_snapshot_is_valid() -> None:
    snapshot = load_snapshot(REPO_SNAPSHOTS, "default")
    assert snapshot is not None and snapshot.updated is not None
    assert snapshot.problems == ()
    assert len(snapshot.files) >= 3
    assert all(f.memory.description for f in snapshot.files)


def test_concurrent_first_builds_copy_once(services_for: Callable[..., MemoryServices]) -> None:
    """Two pods (separate services, shared COS bucket and Redis lock) build the same new user at once."""
    pods = [services_for("cos", redis=True), services_for("cos", redis=True)]
    barrier = threading.Barrier(2)
    results = []

    def build(svc: MemoryServices) -> None:
        barrier.wait()
        results.append(initialize_from_snapshot(svc, None, "default", "u7"))

    threads = [threading.Thread(target=build, args=(svc,)) for svc in pods]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(r.applied for r in results) == [False, True]
    assert all(r.state is SnapshotState.NONE for r in results)
    assert set(pods[0].user_agent_dir("u7").manifest().entries) == set(V1)


def test_build_never_fails_when_the_store_is_down(tmp_path: Path, snaps: Path) -> None:
    cfg = MemoryConfig.load(env={}, store={"backend": "cos", "cos_bucket": "b", "cos_domain": "127.0.0.1:9/b",
                                           "cos_scheme": "http", "cos_anonymous": True, "cos_timeout": 1.0,
                                           "cos_retries": 0}, agent={"snapshots_dir": str(snaps)})
    svc = MemoryServices.from_config(cfg)
    try:
        assert apply_snapshot_on_build(svc, "u8", "default", None) is None
        assert apply_snapshot_on_build(svc, "u8", "default", Manifest()) is None
    finally:
        svc.close()
