"""The house keeps its shape (docs/architecture.md): no import cycle between modules, counting every
import — module level, inside functions and under ``TYPE_CHECKING`` — and nothing below the
composition root imports it. The layers themselves are the import-linter contract in
``pyproject.toml`` (``make test`` runs ``lint-imports``); this test adds what a layers contract
cannot see: cycles between modules of one layer or one package.

Also: caches belong to an object with a lifetime. A store that is closed and replaced by a new one
in the same process — even one that gets the old one's ``id()`` — never sees the old one's heads,
bases, done markers or search indexes.
"""

from __future__ import annotations

import ast
import gc
import re
from collections import defaultdict
from pathlib import Path

import pytest

PKG = "harness_memory"
ROOT = Path(__file__).resolve().parent.parent
#: The front ends and the agent assembly: the only modules that may import the root.
ABOVE_ROOT = re.compile(rf"^{PKG}\.(agent|agentos|cli|server|control)(\.|$)")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / PKG).rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = path
    return out


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, every import statement in its AST counted."""

    def known(target: str) -> str | None:
        while target and target not in mods:
            target = target.rsplit(".", 1)[0] if "." in target else ""
        return target or None

    edges: dict[str, set[str]] = defaultdict(set)
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == PKG]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = ".".join(parts[: len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
                elif (node.module or "").split(".")[0] == PKG:
                    base = node.module or ""
                else:
                    continue
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for target in targets:
                found = known(target)
                if found and found != mod:
                    edges[mod].add(found)
    # the root package's lazy public API (``__getattr__`` + TYPE_CHECKING re-exports) is no layer
    edges.pop(PKG, None)
    for targets in edges.values():
        targets.discard(PKG)
    return edges


def _cycles(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (iterative Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.append(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_cycle_finder_finds_a_lazy_and_a_type_only_cycle() -> None:
    """The checker itself: a cycle closed by an import inside a function or under TYPE_CHECKING counts."""
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(["a", "b", "c", "d"], edges) == [["a", "b", "c"]]
    assert _cycles(["a", "b"], {"a": {"b"}}) == []


def test_the_import_reader_counts_lazy_and_type_checking_imports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                                  ) -> None:
    pkg = tmp_path / PKG
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .sub import high\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "high.py").write_text("def f():\n    from ..low import x\n    import harness_memory.sub\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    mods = _modules()
    edges = _imports(mods)
    assert edges[f"{PKG}.low"] == {f"{PKG}.sub.high"}
    assert edges[f"{PKG}.sub.high"] == {f"{PKG}.low", f"{PKG}.sub"}
    assert _cycles(sorted(mods), edges) == [[f"{PKG}.low", f"{PKG}.sub.high"]]


def test_no_import_cycle_between_modules_counting_every_import() -> None:
    mods = _modules()
    cycles = _cycles(sorted(mods), _imports(mods))
    assert cycles == [], f"import cycles (lazy and TYPE_CHECKING imports counted): {cycles}"


def test_nothing_below_the_composition_root_imports_it() -> None:
    edges = _imports(_modules())
    root = f"{PKG}.services"
    below = sorted(m for m, targets in edges.items() if root in targets and m != root and not ABOVE_ROOT.match(m))
    assert below == []


def test_no_cache_is_keyed_by_the_id_of_an_object() -> None:
    """``id()`` is reused once its object is collected: a cache keyed by it hands a new object an
    old one's entry."""
    keyed = [f"{path.relative_to(ROOT)}:{n}" for path in _modules().values()
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if re.search(r"\[\(?id\(\w+\)|\(id\(\w+\),", line)]
    assert keyed == []


def test_a_new_store_sees_nothing_of_a_closed_one(tmp_path: Path) -> None:
    """Build services, write, close; build again on a new directory in the same process: the new
    store starts cold (no head, base, done marker or search index of the old one), whatever id it
    gets, and its memory holds only what was written to it."""
    from harness_memory.config import MemoryConfig
    from harness_memory.memdir import heads, redo, stored
    from harness_memory.search import place as search_place
    from harness_memory.services import MemoryServices

    def services(where: Path) -> MemoryServices:
        return MemoryServices.from_config(MemoryConfig.model_validate(
            {"store": {"backend": "local", "local_root": str(where)}}))

    first = services(tmp_path / "one")
    own = first.user_agent_dir("u1")
    own.save("old.md", "---\nname: old\ndescription: from the first store\ntype: user\n---\n\nzebrafish\n")
    prefix = own.place.prefix
    assert heads._heads.of(first.store).get(prefix) is not None  # the pod's copy of its head
    assert search_place._cache.of(first.store).get(prefix) is not None  # and of its search index
    first.close()
    del own, first
    gc.collect()

    second = services(tmp_path / "two")
    try:
        assert heads._heads.of(second.store) == {}
        assert search_place._cache.of(second.store) == {}
        assert stored._bases_of(second.store).held == {}
        assert redo._done.of(second.store) == {}
        fresh = second.user_agent_dir("u1")
        assert fresh.list_entries() == []
        assert fresh.index_text().text == ""
    finally:
        second.close()
