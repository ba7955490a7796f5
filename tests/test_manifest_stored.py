"""The manifest's stored form (``memdir/stored.py``): an inline head for small places, a head with
the changes since an immutable base for large ones, compaction, and what readers and ``reindex``
do with it — on SeaweedFS with Redis and on a local directory. Thresholds are lowered so a place
of a few dozen memories exercises every form."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from harness_memory.config import MemoryConfig
from harness_memory.errors import MemoryFormatError
from harness_memory.memdir import MemoryDir, parse_index, stored
from harness_memory.search import place as search_place
from harness_memory.search.index import SearchIndex
from harness_memory.search.place import clear_cache as clear_search_cache
from harness_memory.search.place import stored_index
from harness_memory.services import MemoryServices
from tests.faults import FaultyStore
from tests.helpers import faulty_pods

Pods = Callable[..., tuple[MemoryServices, FaultyStore]]


def doc(i: int, desc: str = "") -> str:
    return (f"---\nname: note {i}\ndescription: {desc or f'what note {i} says about the deploy'}\n"
            f"type: project\n---\n\nBody {i}: the zebra{i} rollout waits for the canary.\n")


@pytest.fixture(autouse=True)
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stored, "INLINE_MAX_BYTES", 2048)
    monkeypatch.setattr(stored, "DELTA_MAX_ENTRIES", 6)


@pytest.fixture(params=["cos", "local"])
def pods(request: pytest.FixtureRequest, make_config: Callable[..., MemoryConfig]) -> Iterator[Pods]:
    """Pods over one store (cos: SeaweedFS + Redis; local: one directory), each its own caches."""
    with faulty_pods() as make:
        yield lambda: make(make_config(request.param, redis=request.param == "cos"))


def head_of(store: FaultyStore, memdir: MemoryDir) -> dict[str, object]:
    return json.loads(store.get(memdir.manifest_key).data)


def index_bytes(store: FaultyStore, memdir: MemoryDir) -> int:
    """The head's size without its redo record (the commit's own texts, ``redo.py``)."""
    head = head_of(store, memdir)
    head.pop("redo", None)
    return len(json.dumps(head, ensure_ascii=False, separators=(",", ":")))


def bases_in(store: FaultyStore, memdir: MemoryDir) -> list[str]:
    prefix = memdir.place.prefix
    return sorted(i.key[len(prefix):] for i in store.list(prefix) if stored.is_base_name(i.key[len(prefix):]))


def index_files(store: FaultyStore, memdir: MemoryDir) -> list[str]:
    return [f for _, f, _ in parse_index(store.get(memdir.index_key).data.decode())]


def test_small_place_is_inline_and_a_large_one_stands_on_a_base(pods: Pods) -> None:
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save("n00.md", doc(0))
    head = head_of(store, mdir)
    assert isinstance(head["entries"], list) and head["version"] == 3 and not bases_in(store, mdir)

    for i in range(1, 20):  # past INLINE_MAX_BYTES: the first compaction writes a base
        mdir.save(f"n{i:02d}.md", doc(i))
    head = head_of(store, mdir)
    assert isinstance(head["entries"], dict)  # an earlier release reading it fails loudly, not silently
    base = head["base"]
    assert isinstance(base, dict) and stored.base_name(str(base["gen"])) in bases_in(store, mdir)
    assert len(bases_in(store, mdir)) <= 2  # the current base and the one before it
    assert len(head["entries"]["changed"]) <= stored.DELTA_MAX_ENTRIES  # type: ignore[index]
    expected = [f"n{i:02d}.md" for i in range(20)]
    assert sorted(mdir.manifest().entries) == expected
    assert index_files(store, mdir) == expected  # MEMORY.md is current after every commit

    other, _ = pods()  # another pod, cold caches: reads the head and the base
    assert sorted(other.user_agent_dir("u").manifest().entries) == expected


def test_a_save_writes_only_the_changes_since_the_base(pods: Pods) -> None:
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save_many([(f"n{i:03d}.md", doc(i)) for i in range(120)])
    before = index_bytes(store, mdir)
    sizes = []
    for i in range(stored.DELTA_MAX_ENTRIES):
        mdir.save(f"n{i:03d}.md", doc(i, f"changed {i}"))
        sizes.append(index_bytes(store, mdir))
        assert len(head_of(store, mdir)["redo"]["writes"]) == 1  # type: ignore[index]  # this save's text only
    base = store.get(mdir.place.prefix + stored.base_name(str(head_of(store, mdir)["base"]["gen"])))  # type: ignore[index]
    assert len(base.data) > 10 * max(sizes)  # the head carries the changes, not the place
    assert before < 1000 and sizes == sorted(sizes)  # grows with the changes only
    manifest = mdir.manifest()
    assert manifest.entries["n003.md"].description == "changed 3" and len(manifest.entries) == 120


def test_compaction_keeps_every_entry_and_retires_old_bases(pods: Pods) -> None:
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save_many([(f"n{i:02d}.md", doc(i)) for i in range(40)])
    gens = []
    for round_ in range(3):
        for i in range(stored.DELTA_MAX_ENTRIES + 1):
            mdir.save(f"r{round_}_{i}.md", doc(100 * round_ + i))
        gens.append(head_of(store, mdir)["base"]["gen"])  # type: ignore[index]
    mdir.delete("n05.md")
    assert len(set(gens)) == 3  # a new base per compaction ...
    assert len(bases_in(store, mdir)) <= 2  # ... and at most the current and the previous one kept
    expected = sorted({f"n{i:02d}.md" for i in range(40)} - {"n05.md"}
                      | {f"r{r}_{i}.md" for r in range(3) for i in range(stored.DELTA_MAX_ENTRIES + 1)})
    stored.clear_cache()
    assert sorted(mdir.manifest().entries) == expected
    assert index_files(store, mdir) == expected
    capped = mdir.index_text()
    assert capped.text.splitlines()[2:4] == ["- [note 0](n00.md) — what note 0 says about the deploy",
                                             "- [note 1](n01.md) — what note 1 says about the deploy"]
    assert capped.total_lines == len(expected) + 2


def test_a_reader_whose_base_was_retired_reads_the_head_again(pods: Pods) -> None:
    svc, _ = pods()
    reader, _ = pods()
    mdir, rdir = svc.user_agent_dir("u"), reader.user_agent_dir("u")
    mdir.save_many([(f"n{i:02d}.md", doc(i)) for i in range(40)])
    assert len(rdir.manifest().entries) == 40
    for i in range(3 * (stored.DELTA_MAX_ENTRIES + 1)):  # three compactions: the reader's base is gone
        mdir.save(f"x{i:02d}.md", doc(i))
    assert len(rdir.manifest().entries) == 40 + 3 * (stored.DELTA_MAX_ENTRIES + 1)


def test_a_missing_base_is_reported_and_reindex_rebuilds(pods: Pods) -> None:
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save_many([(f"n{i:02d}.md", doc(i)) for i in range(40)])
    for name in bases_in(store, mdir):
        store.delete(mdir.place.prefix + name)
    stored.clear_cache()
    with pytest.raises(MemoryFormatError, match="reindex"):
        mdir.manifest()
    rebuilt = mdir.reindex()
    assert sorted(rebuilt.entries) == [f"n{i:02d}.md" for i in range(40)]
    assert len(bases_in(store, mdir)) == 1 and mdir.save("after.md", doc(99)).created


def test_reindex_removes_bases_no_head_names(pods: Pods) -> None:
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save_many([(f"n{i:02d}.md", doc(i)) for i in range(40)])
    store.put(mdir.place.prefix + stored.base_name("0123456789abcdef"), b'{"gen":"0123456789abcdef","rows":[]}')
    mdir.reindex()
    gen = head_of(store, mdir)["base"]["gen"]  # type: ignore[index]
    assert stored.base_name(str(gen)) in bases_in(store, mdir)
    assert stored.base_name("0123456789abcdef") not in bases_in(store, mdir)


def test_search_delta_stays_in_step_and_folds_into_the_whole_index(pods: Pods,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(search_place, "DELTA_MAX_DOCS", 3)
    svc, store = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save_many([(f"n{i:02d}.md", doc(i)) for i in range(10)])
    whole = SearchIndex.from_bytes(store.get(search_place.index_key(mdir)).data)
    mdir.save("n03.md", doc(3).replace("zebra3", "okapi3"))
    mdir.delete("n04.md")
    delta = SearchIndex.from_bytes(store.get(search_place.delta_key(mdir)).data)
    assert set(delta.docs) == {"n03.md"} and delta.removed == ["n04.md"] and delta.base == whole.gen
    clear_search_cache()
    index = stored_index(mdir)
    assert "okapi3" in index.docs["n03.md"].terms and "zebra3" not in index.docs["n03.md"].terms
    assert "n04.md" not in index.docs and len(index.docs) == 9

    for i in range(3):  # past DELTA_MAX_DOCS: a new whole index, an empty delta
        mdir.save(f"m{i}.md", doc(50 + i))
    folded = SearchIndex.from_bytes(store.get(search_place.index_key(mdir)).data)
    delta = SearchIndex.from_bytes(store.get(search_place.delta_key(mdir)).data)
    assert folded.gen != whole.gen and len(delta.docs) <= 3 and delta.base == folded.gen
    clear_search_cache()
    assert len(stored_index(mdir).docs) == 12 and "okapi3" in stored_index(mdir).docs["n03.md"].terms


def test_entries_are_replaced_not_changed_in_place(pods: Pods) -> None:
    """A pod's parsed base is shared by every manifest it loads: a commit must not change it."""
    svc, _ = pods()
    mdir = svc.user_agent_dir("u")
    mdir.save_many([(f"n{i:02d}.md", doc(i)) for i in range(40)])
    first = mdir.manifest()
    kept = first.entries["n01.md"]
    mdir.save("n01.md", doc(1, "new description"))
    assert kept.description == "what note 1 says about the deploy"
    assert mdir.manifest().entries["n01.md"].description == "new description"
