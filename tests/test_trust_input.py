"""Hostile or odd files (issue 12, item 5): refused fast with a clear message, or skipped and
reported by ``reindex``, never able to stall or break a place. Both backends where they differ."""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Callable
from pathlib import Path

import pytest

from harness_memory.cli import main as cli_main
from harness_memory.config import MemoryConfig
from harness_memory.errors import MemoryFormatError
from harness_memory.memdir import MemoryDir, parse_memory
from harness_memory.memdir.index import MAX_ENTRY_EXTRA_BYTES
from harness_memory.services import MemoryServices
from harness_memory.storage.base import ObjectStore
from harness_memory.tools import MemoryTools

from .helpers import write_config

LAUGHS = ("---\nname: lol\ndescription: laughs\ntype: user\n"
          'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
          "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
          "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
          "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ntags: [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n---\n\nbody\n")


def mem(extra: str = "", desc: str = "a memory", name: str = "m") -> str:
    return f"---\nname: {name}\ndescription: {desc}\ntype: user\n{extra}---\n\nBody.\n"


@pytest.fixture
def place(store: ObjectStore) -> MemoryDir:
    from harness_memory.layout import Place

    return MemoryDir(store, Place.user_agent("hostile", "default", "memory/"))


@pytest.mark.parametrize(("extra", "said"), [
    ("tags: !!set {a}\n", "YAML tag"),
    ("data: !!binary aGVsbG8=\n", "YAML tag"),
    ("x: !python/object:os.system ls\n", "YAML tag"),
    ("base: &b {k: 1}\nmore:\n  <<: *b\n", "anchors or aliases"),
    ("more:\n  <<: {k: 1}\n", "merge key"),
    ("deep: " + "[" * 20 + "]" * 20 + "\n", "nested deeper"),
    ("big: " + "x" * 20_000 + "\n", "frontmatter is"),
])
def test_dangerous_frontmatter_is_refused_with_a_reason(extra: str, said: str) -> None:
    with pytest.raises(MemoryFormatError, match=said):
        parse_memory(mem(extra))


def test_billion_laughs_is_refused_and_the_place_is_untouched(place: MemoryDir) -> None:
    place.save("ok.md", mem())
    before = place.manifest()
    result = MemoryTools(place).save_file("lol.md", LAUGHS)
    assert result.startswith("Error:") and "anchors or aliases" in result
    assert place.manifest().entries.keys() == before.entries.keys()


def test_manifest_entries_stay_small(place: MemoryDir) -> None:
    tags = "[" + ", ".join(f"tag-{i:04d}" for i in range(1500)) + "]"
    place.save("tags.md", mem(f"tags: {tags}\nconfidence: 0.9\n"))
    entry = place.manifest().entries["tags.md"]
    assert "tags" not in entry.extra and entry.extra["confidence"] == 0.9  # what fits is kept
    assert len(json.dumps(entry.to_dict())) < MAX_ENTRY_EXTRA_BYTES + 1024
    assert "tag-1499" in place.read("tags.md").text  # the file itself keeps everything


def test_reindex_skips_and_reports_files_it_cannot_index(place: MemoryDir, store: ObjectStore) -> None:
    place.save("good.md", mem())
    for name, text in [("set.md", mem("tags: !!set {a}\n")), ("laughs.md", LAUGHS), ("plain.md", "no frontmatter")]:
        store.put(place.place.key(name), text.encode())
    manifest = place.reindex()  # used to crash for the whole place on !!set
    assert sorted(manifest.entries) == ["good.md"]
    assert sorted(name for name, _ in place.last_skipped) == ["laughs.md", "plain.md", "set.md"]
    assert any("YAML tag" in why for _, why in place.last_skipped)


def test_nfd_names_are_moved_to_nfc_by_reindex(place: MemoryDir, store: ObjectStore) -> None:
    nfc = "café_notes.md"
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfd != nfc
    store.put(place.place.key(nfd), mem(name="cafe").encode())  # a file copied from a Mac
    place.reindex()
    assert list(place.manifest().entries) == [nfc]
    tools = MemoryTools(place)
    assert "Body." in tools.read_file(nfd)  # the tools normalise what the model sends
    assert not store.exists(place.place.prefix + nfd)  # (key() would normalise it)
    assert tools.delete_file(nfc).startswith("Deleted")
    assert place.manifest().entries == {} and list(store.list(place.place.prefix + "caf")) == []


def test_lone_surrogate_is_a_clear_error(place: MemoryDir) -> None:
    result = MemoryTools(place).save_file("s.md", mem(desc="half an emoji \ud83d here"))
    assert result.startswith("Error:") and "unpaired surrogate" in result


def test_chunk_replace_refuses_invalid_utf8_instead_of_rewriting_it(place: MemoryDir, store: ObjectStore) -> None:
    raw = mem().encode() + b"legacy bytes: \xff\xfe end\n"
    place.save("bin.md", mem())
    store.put(place.place.key("bin.md"), raw)
    result = MemoryTools(place).replace_file_chunk("bin.md", "end", "END")
    assert result.startswith("Error:") and "not valid UTF-8" in result
    assert store.get(place.place.key("bin.md")).data == raw  # untouched, not turned into U+FFFD


def test_control_and_bidi_characters_never_reach_memory_md(place: MemoryDir, store: ObjectStore) -> None:
    place.save("x.md", mem(desc='"evil \\e[31mred\\u202egnp.exe\\u200b end"', name='"n\\u202ea"'))
    index = store.get(place.index_key).data.decode()
    assert all(ch not in index for ch in ("\x1b", "\u202e", "\u200b"))
    assert "evil [31mredgnp.exe end" in index and place.manifest().entries["x.md"].name == "na"


def test_file_and_folder_of_the_same_name_are_refused_on_both_backends(place: MemoryDir) -> None:
    tools = MemoryTools(place)
    assert tools.save_file("x.md", mem()).startswith("Created")
    said = tools.save_file("x.md/child.md", mem())
    assert said.startswith("Error:") and "inside x.md, which is a memory file" in said
    assert tools.save_file("y.md/child.md", mem()).startswith("Created")
    said = tools.save_file("y.md", mem())
    assert said.startswith("Error:") and "is a folder holding y.md/child.md" in said
    assert sorted(place.manifest().entries) == ["x.md", "y.md/child.md"]


def test_reindex_accepts_quiet_after_the_command(make_config: Callable[..., MemoryConfig], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    cfg = make_config("local")
    with MemoryServices.from_config(cfg) as svc:
        svc.user_agent_dir("q").save("a.md", mem())
    path = write_config(cfg, tmp_path / "cfg.yaml")
    assert cli_main(["--config", str(path), "reindex", "-q", "users/q"]) == 0
    assert "1 files indexed" in capsys.readouterr().out
