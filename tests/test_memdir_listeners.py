"""memdir announces commits to the listeners given at construction (``memdir/port.py``): every
commit that changed memory files, in order, with what it wrote and removed; ``reindex`` tells them
it rebuilt the place. A listener that raises never fails the committed change. The composition
root gives every ``MemoryDir`` it builds the search index (and the semantic tier when configured).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_memory.config import MemoryConfig
from harness_memory.layout import Place
from harness_memory.memdir import MemoryDir
from harness_memory.search.place import SearchListener, stored_index
from harness_memory.services import MemoryServices
from harness_memory.storage import LocalStore


def mem(name: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: about {name}\ntype: user\n---\n\n{body}\n"


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[Any, ...]] = []

    def committed(self, memdir: Any, manifest: Any, written: Mapping[str, Any], removed: Sequence[str],
                  cleared: bool, since: float | None) -> None:
        self.calls.append(("committed", memdir.place.prefix, sorted(written), sorted(removed), cleared,
                           sorted(manifest.entries)))
        if self.fail:
            raise RuntimeError("listener down")

    def rebuilt(self, memdir: Any, manifest: Any, memories: Mapping[str, Any]) -> None:
        self.calls.append(("rebuilt", memdir.place.prefix, sorted(memories), sorted(manifest.entries)))


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    s = LocalStore(tmp_path / "root")
    yield s
    s.close()


def test_listeners_hear_every_commit_in_order(store: LocalStore) -> None:
    first, second = Recorder(), Recorder()
    own = MemoryDir(store, Place.user_agent("u1"), listeners=(first, second))
    own.save("a.md", mem("a", "alpha"))
    own.save_many([("b.md", mem("b", "beta")), ("c.md", mem("c", "gamma"))])
    own.delete("a.md")
    own.reindex()
    prefix = own.place.prefix
    assert first.calls == second.calls
    assert first.calls[0] == ("committed", prefix, ["a.md"], [], False, ["a.md"])
    assert first.calls[1] == ("committed", prefix, ["b.md", "c.md"], [], False, ["a.md", "b.md", "c.md"])
    assert first.calls[2] == ("committed", prefix, [], ["a.md"], False, ["b.md", "c.md"])
    assert first.calls[-1] == ("rebuilt", prefix, ["b.md", "c.md"], ["b.md", "c.md"])


def test_a_failing_listener_never_fails_the_save(store: LocalStore) -> None:
    broken, after = Recorder(fail=True), Recorder()
    own = MemoryDir(store, Place.user_agent("u1"), listeners=(broken, after))
    result = own.save("a.md", mem("a", "alpha"))
    assert result.created and "a.md" in own.manifest().entries
    assert own.read("a.md").text == mem("a", "alpha")
    assert len(after.calls) == 1  # the next listener still heard it


def test_a_bare_memdir_keeps_no_search_index_and_a_listener_does(store: LocalStore) -> None:
    bare = MemoryDir(store, Place.user_agent("bare"))
    bare.save("a.md", mem("a", "zebrafish"))
    assert stored_index(bare).docs == {}
    indexed = MemoryDir(store, Place.user_agent("indexed"), listeners=(SearchListener(),))
    indexed.save("a.md", mem("a", "zebrafish"))
    assert "zebrafish" in stored_index(indexed).docs["a.md"].terms


def test_the_root_wires_the_search_index_into_every_place(tmp_path: Path) -> None:
    cfg = MemoryConfig.model_validate({"store": {"backend": "local", "local_root": str(tmp_path)}})
    with MemoryServices.from_config(cfg) as services:
        for memdir in (services.user_agent_dir("u1"), services.shared_agent_dir(), services.user_auto_dir("u1")):
            assert [type(x) for x in memdir.listeners] == [SearchListener]
        own = services.user_agent_dir("u1")
        own.save("pets.md", mem("pets", "the zebrafish tank"))
        assert "zebrafish" in stored_index(own).docs["pets.md"].terms


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(names=st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,12}", fullmatch=True), min_size=1, max_size=6, unique=True),
       bodies=st.lists(st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=40),
                       min_size=6, max_size=6))
def test_what_listeners_hear_is_what_was_committed(store: LocalStore, names: list[str], bodies: list[str]) -> None:
    """Over generated names and Unicode bodies: each save is announced once, naming exactly the
    file it wrote, with a manifest that holds every file saved so far."""
    rec = Recorder()
    place = Place.user_agent(f"p{abs(hash(tuple(names))) % 10**8}")
    own = MemoryDir(store, place, listeners=(rec,))
    for name, body in zip(names, bodies, strict=False):
        own.save(f"{name}.md", mem(name, body.replace("---", "- - -")))
    assert [c[2] for c in rec.calls] == [[f"{n}.md"] for n in names]
    assert rec.calls[-1][5] == sorted(f"{n}.md" for n in names)
