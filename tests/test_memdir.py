"""memdir: the file format, the capped index, the manifest and one place's write path."""

from __future__ import annotations

import threading

import pytest

from harness_memory.errors import MemoryFormatError, ObjectNotFound, StorageUnavailable
from harness_memory.layout import Place
from harness_memory.memdir import (
    Manifest,
    ManifestEntry,
    MemoryDir,
    MemoryFile,
    MemoryType,
    cap_index,
    parse_index,
    parse_memory,
    render_index,
    trash,
)
from harness_memory.memdir.stored import manifest_from_bytes
from harness_memory.storage.base import ObjectStore


def mem(name: str = "user role", desc: str = "the user's role", typ: str = "user", body: str = "Body.",
        extra: str = "") -> str:
    return f"---\nname: {name}\ndescription: {desc}\ntype: {typ}\n{extra}---\n\n{body}\n"


# -- file format ---------------------------------------------------------------------------
def test_parse_round_trip_keeps_unknown_keys() -> None:
    text = mem(extra="confidence: 0.9\ntags: [a, b]\ncreated: 2026-11-30\n")
    parsed = parse_memory(text)
    assert parsed.name == "user role" and parsed.type is MemoryType.USER
    assert parsed.extra == {"confidence": 0.9, "tags": ["a", "b"], "created": "2026-11-30"}
    again = parse_memory(parsed.render())
    assert again == parsed


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("no frontmatter at all", "must start with YAML frontmatter"),
        ("---\nname: a\ndescription: b\ntype: user\n", "no closing '---'"),
        ("---\nname: [unclosed\ndescription: b\ntype: user\n---\n", "not valid YAML"),
        ("---\n- a\n- b\n---\n", "must be a mapping"),
        ("---\nname: a\ntype: user\n---\n", "missing description"),
        ("---\nname: a\ndescription: b\ntype: secret\n---\n", "not one of: user, feedback, project, reference"),
        ("---\nname: ''\ndescription: b\ntype: user\n---\n", "missing name"),
        ("---\nname: a\ndescription: " + "x" * 600 + "\ntype: user\n---\n", "keep it under 500"),
    ],
)
def test_broken_frontmatter_has_clear_error(text: str, fragment: str) -> None:
    with pytest.raises(MemoryFormatError, match=fragment.replace("[", r"\[").replace("(", r"\(")):
        parse_memory(text)


def test_type_is_case_insensitive_and_description_one_line() -> None:
    parsed = parse_memory("---\nname: a\ndescription: |\n  two\n  lines\ntype: Feedback\n---\nx")
    assert parsed.type is MemoryType.FEEDBACK and parsed.description == "two lines"


# -- index -----------------------------------------------------------------------------------
def test_render_and_parse_index() -> None:
    manifest = Manifest()
    for i, (name, desc) in enumerate([("偏好", "用户喜欢中文报告"), ("b]x", "emoji 🚀 ok")]):
        manifest.entries[f"f{i} x.md"] = ManifestEntry(f"f{i} x.md", name, desc, "user")
    text = render_index(manifest)
    assert "- [偏好](f0%20x.md) — 用户喜欢中文报告" in text
    parsed = parse_index(text)
    assert parsed == [("偏好", "f0 x.md", "用户喜欢中文报告"), ("b)x", "f1 x.md", "emoji 🚀 ok")]


def test_cap_index_by_lines_and_bytes() -> None:
    text = "\n".join(f"- [m{i}](m{i}.md) — d" for i in range(250))
    capped = cap_index(text, 200, 25_600)
    assert capped.truncated and capped.total_lines == 250
    assert capped.text.count("\n- [") == 199 and "WARNING: MEMORY.md is too long" in capped.text
    big = "\n".join("- [m](m.md) — " + "x" * 500 for _ in range(100))
    capped = cap_index(big, 200, 25_600)
    assert capped.truncated and len(capped.text.encode()) < 25_600 + 400
    small = cap_index("- [a](a.md) — b", 200, 25_600)
    assert not small.truncated and "WARNING" not in small.text


def test_manifest_damaged_is_clear() -> None:
    with pytest.raises(MemoryFormatError, match="reindex"):
        manifest_from_bytes(b"{not json")


# -- a place on both backends ----------------------------------------------------------------
@pytest.fixture
def memdir(store: ObjectStore) -> MemoryDir:
    return MemoryDir(store, Place.user_agent("100", "default"))


def test_save_read_list_delete(memdir: MemoryDir, store: ObjectStore) -> None:
    first = memdir.save("user_role.md", mem())
    assert first.created
    assert memdir.read("user_role.md").text == mem()
    again = memdir.save("user_role.md", mem(desc="updated role"))
    assert not again.created and again.entry.created_at == first.entry.created_at
    index = store.get("memory/users/100/agent-memory/default/MEMORY.md").data.decode()
    assert "- [user role](user_role.md) — updated role" in index
    assert [e.file for e in memdir.list_entries()] == ["user_role.md"]
    assert memdir.delete("user_role.md") is True
    assert memdir.delete("user_role.md") is False
    assert memdir.list_entries() == []
    assert "user_role" not in store.get("memory/users/100/agent-memory/default/MEMORY.md").data.decode()
    with pytest.raises(ObjectNotFound):
        memdir.read("user_role.md")


def test_replace_chunk(memdir: MemoryDir) -> None:
    memdir.save("a.md", mem(body="likes tea. likes tea."))
    with pytest.raises(MemoryFormatError, match="occurs 2 times"):
        memdir.replace_chunk("a.md", "likes tea", "likes coffee")
    with pytest.raises(MemoryFormatError, match="not found"):
        memdir.replace_chunk("a.md", "likes juice", "x")
    memdir.replace_chunk("a.md", "description: the user's role", "description: drinks")
    assert memdir.manifest().entries["a.md"].description == "drinks"
    with pytest.raises(MemoryFormatError, match="frontmatter"):
        memdir.replace_chunk("a.md", "---\nname", "--\nname")
    assert memdir.read("a.md").text.startswith("---\nname")  # refused edit changed nothing


def test_size_limit_and_file_count_limit(store: ObjectStore) -> None:
    from harness_memory.config import LimitsConfig

    limits = LimitsConfig(max_file_bytes=1000, max_files_per_place=2)
    memdir = MemoryDir(store, Place.user_agent("u"), limits=limits)
    with pytest.raises(MemoryFormatError, match="limit is 1000 bytes"):
        memdir.save("big.md", mem(body="x" * 2000))
    memdir.save("a.md", mem())
    memdir.save("b.md", mem())
    with pytest.raises(MemoryFormatError, match="already holds 2 files"):
        memdir.save("c.md", mem())
    memdir.save("a.md", mem(desc="overwrite is fine"))
    assert not store.exists("memory/users/u/agent-memory/default/big.md")


def test_chinese_and_emoji_round_trip(memdir: MemoryDir) -> None:
    text = mem(name="用户偏好 🚀", desc="喜欢用中文写报告，前端工程师", body="## 细节\n- TypeScript 🧑‍💻\n- Vue")
    memdir.save("偏好/报告-🚀.md", text)
    assert memdir.read("偏好/报告-🚀.md").text == text
    assert memdir.manifest().entries["偏好/报告-🚀.md"].name == "用户偏好 🚀"
    assert "用户偏好 🚀" in memdir.index_text().text


def test_concurrent_threads_keep_every_entry(memdir: MemoryDir) -> None:
    def work(i: int) -> None:
        memdir.save(f"m{i:03d}.md", mem(name=f"m{i}"))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(memdir.manifest().entries) == 40
    assert len(parse_index(memdir.store.get(memdir.index_key).data.decode())) == 40


def test_reindex_rebuilds_from_files(memdir: MemoryDir, store: ObjectStore) -> None:
    memdir.save("a.md", mem(name="a"))
    store.put(memdir.place.key("b.md"), mem(name="b").encode())  # written behind our back
    store.put(memdir.place.key("broken.md"), b"no frontmatter")
    store.delete(memdir.manifest_key)
    manifest = memdir.reindex()
    assert sorted(manifest.entries) == ["a.md", "b.md"]
    assert "- [b](b.md)" in store.get(memdir.index_key).data.decode()


def test_index_text_falls_back_to_memory_md(memdir: MemoryDir, store: ObjectStore) -> None:
    store.put(memdir.index_key, b"# idx\n- [hand](hand.md) \xe2\x80\x94 written by hand\n")
    assert "written by hand" in memdir.index_text().text
    assert [e.file for e in memdir.list_entries()] == ["hand.md"]


def test_failed_index_update_rolls_back_the_file(memdir: MemoryDir, store: ObjectStore,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    memdir.save("keep.md", mem(body="original"))

    def boom(*args: object, **kwargs: object) -> str:
        raise StorageUnavailable("store went away")

    monkeypatch.setattr(store, "put_if_match", boom)
    with pytest.raises(StorageUnavailable):
        memdir.save("keep.md", mem(body="changed"))
    with pytest.raises(StorageUnavailable):
        memdir.save("new.md", mem())
    monkeypatch.undo()
    assert "original" in memdir.read("keep.md").text
    assert not store.exists(memdir.place.key("new.md"))
    assert sorted(memdir.manifest().entries) == ["keep.md"]


def test_clear(memdir: MemoryDir, store: ObjectStore) -> None:
    """``clear`` moves every memory into one trash item (restorable); ``purge=True`` removes the
    place for good, its trash and history too."""
    for i in range(3):
        memdir.save(f"{i}.md", mem())
    memdir.save("0.md", mem(name="again"))  # a history version
    store.put(memdir.place.prefix + ".snapshot-synced.json", b"{}")  # the place's state starts over
    assert memdir.clear() == 3
    assert memdir.list_entries() == [] and memdir.manifest().meta == {}
    left = {i.key[len(memdir.place.prefix):].split("/", 1)[0] for i in store.list(memdir.place.prefix)}
    assert left <= {".trash", ".history", ".manifest.json", "MEMORY.md", ".search-index.bin", ".search-delta.bin"}
    assert ".trash" in left and ".history" in left
    (batch,) = trash.list_trash(memdir)
    assert sorted(f.file for f in batch.files) == ["0.md", "1.md", "2.md"]
    assert trash.restore(memdir, batch.id) == ["0.md", "1.md", "2.md"]
    assert memdir.read("0.md").text == mem(name="again")
    assert memdir.clear(purge=True) == 3
    assert list(store.list(memdir.place.prefix)) == []


def test_memory_file_render_is_parseable() -> None:
    memory = MemoryFile("n: colon", "d # hash", MemoryType.PROJECT, "body\n", {"confidence": 0.8})
    assert parse_memory(memory.render()) == memory


def test_save_many_is_one_index_update(memdir: MemoryDir, store: ObjectStore) -> None:
    memdir.save("old.md", mem(name="old"))
    results = memdir.save_many([(f"b{i}.md", mem(name=f"b{i}")) for i in range(20)] + [("old.md", mem(name="new"))])
    assert sum(r.created for r in results) == 20
    manifest = memdir.manifest()
    assert len(manifest.entries) == 21 and manifest.entries["old.md"].name == "new"
    assert len(parse_index(store.get(memdir.index_key).data.decode())) == 21


def test_save_many_validates_everything_first(memdir: MemoryDir, store: ObjectStore) -> None:
    with pytest.raises(MemoryFormatError):
        memdir.save_many([("a.md", mem()), ("b.md", "broken")])
    with pytest.raises(MemoryFormatError, match="twice"):
        memdir.save_many([("a.md", mem()), ("a.md", mem())])
    assert list(store.list(memdir.place.prefix)) == []


def test_save_many_rolls_back_on_index_failure(memdir: MemoryDir, store: ObjectStore,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    memdir.save("keep.md", mem(body="original"))

    def boom(*args: object, **kwargs: object) -> str:
        raise StorageUnavailable("store went away")

    monkeypatch.setattr(store, "put_if_match", boom)
    with pytest.raises(StorageUnavailable):
        memdir.save_many([("keep.md", mem(body="changed")), ("new.md", mem())])
    monkeypatch.undo()
    assert "original" in memdir.read("keep.md").text
    assert not store.exists(memdir.place.key("new.md"))


def test_conditional_save(memdir: MemoryDir) -> None:
    from harness_memory.errors import PreconditionFailed
    from harness_memory.memdir.directory import ABSENT

    memdir.save("c.md", mem(body="v1"), expect=ABSENT)
    with pytest.raises(PreconditionFailed, match="already exists"):
        memdir.save("c.md", mem(body="v2"), expect=ABSENT)
    etag = memdir.read("c.md").etag
    memdir.save("c.md", mem(body="v2"), expect=etag)
    with pytest.raises(PreconditionFailed, match="changed since it was read"):
        memdir.save("c.md", mem(body="v3"), expect=etag)
    with pytest.raises(PreconditionFailed):
        memdir.save("gone.md", mem(), expect=etag)
    assert "v2" in memdir.read("c.md").text and not memdir.store.exists(memdir.place.key("gone.md"))
