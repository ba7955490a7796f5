"""Agent build: wall time and object-store requests with N memories in the user's place.

Run: ``.venv/bin/python -m bench.bench_build`` (starts its own SeaweedFS).
Measures steady state (the shared place's index is cached per pod after the first build) and
reports the first, cold build's request count separately. Session and auto memory are off in
the size sweep (the build itself); one extra row per backend builds with every feature at its
default (session hooks, auto memory if ``build_agent`` wires it, snapshot check), as an app does.
The 5,000- and 10,000-memory rows use a third of the repetitions (a build takes ~40 ms and
more there). For the defaults build and the 10,000-memory build on SeaweedFS more tables split the
build into its parts (each timed on its own, so the parts need not add up exactly to the whole).

A third table is the per-memory cost of loading the manifest a build reads, at 1,000 and 10,000
memories: ``MemoryDir.load_manifest()`` timed as it is, whatever the manifest format (issue #18
changes it), so the same row measures the old whole-manifest parse and the new compact form.
"""

from __future__ import annotations

import sys

from harness_memory import build_agent
from harness_memory.config import MemoryConfig
from harness_memory.memdir import MemoryDir
from harness_memory.memdir.stored import manifest_from_bytes
from harness_memory.services import MemoryServices

from .common import config_for, p50, pct, seed, servers, table, timed

SIZES = (10, 100, 1000, 5000, 10000)
QUICK_SIZES = (10,)
DEFAULTS_SIZE = 1000
#: Sizes at which the manifest load is also timed on its own (per-memory cost).
LOAD_SIZES = (1000, 10000)
#: The size-sweep place whose build is also split into its parts (besides the defaults build).
SPLIT_SIZE = 10000


def repeat_for(n: int, repeat: int) -> int:
    """Fewer repetitions for the largest places (keeps `make bench` within its time budget)."""
    return repeat if n < 5000 else max(3, repeat // 3)


def breakdown(services: MemoryServices, repeat: int) -> list[list[object]]:
    """p50 of each part of a build of ``bench-user``'s agent (user place already seeded)."""
    own = services.user_agent_dir("bench-user")
    manifest = own.manifest()
    raw = services.store.get(own.manifest_key).data
    parts: list[tuple[str, list[float]]] = [
        ("load the user's manifest (MemoryDir.load_manifest)", timed(own.load_manifest, repeat)),
        ("… GET the user's .manifest.json", timed(lambda: services.store.get(own.manifest_key), repeat)),
    ]
    try:  # the object alone is a whole manifest in format 1 only (issue #18: a head over a base)
        manifest_from_bytes(raw)
        parts.append(("… parse it (stored.manifest_from_bytes)", timed(lambda: manifest_from_bytes(raw), repeat)))
    except Exception as exc:
        parts.append((f"… parse .manifest.json alone: not measured ({type(exc).__name__})", []))
    parts.append(("MEMORY.md text for the prompt (render + cap)", timed(lambda: own.index_text(manifest), repeat)))
    try:
        from harness_memory.auto import auto_memory_for

        auto = auto_memory_for(services)
        if auto.config.enabled:
            auto.render_injection("bench-user")
            parts.append(("auto-memory block (GET the user's auto place + render)",
                          timed(lambda: auto.render_injection("bench-user"), repeat)))
    except Exception as exc:  # the auto API moved: the breakdown goes on without it
        parts.append((f"auto-memory block: not measured ({type(exc).__name__})", []))
    return [[name, p50(times) if times else "n/a"] for name, times in parts]


def manifest_load(own: MemoryDir, backend: str, n: int, repeat: int) -> list[object]:
    """One row: p50 of ``load_manifest()`` on a place of ``n`` memories and its cost per memory.

    Why through ``load_manifest`` and not ``stored.manifest_from_bytes`` of one object: a build reads
    whatever that method reads (one whole manifest today; a head + base after issue #18), so the
    row keeps measuring what a build pays when the format changes. GET included (on the local
    store a file read)."""
    own.load_manifest()  # untimed: connections and any per-pod cache warm, as in a steady build
    times = timed(own.load_manifest, repeat)
    return [backend, n, len(times), p50(times), pct(times, 95), p50(times) * 1000 / n]


def measure(backend: str, cfg: MemoryConfig, n: int, have: int, repeat: int, defaults: bool = False,
            loads: list[list[object]] | None = None, split: bool = False
            ) -> tuple[list[object], list[list[object]]]:
    """Grow the place of ``cfg`` from ``have`` to ``n`` memories, then time builds in a fresh pod
    (new ``MemoryServices``: the first build is a process's cold one). ``split`` (SeaweedFS only):
    also time the build's parts."""
    services = MemoryServices.from_config(cfg)
    seed(services.user_agent_dir("bench-user"), n, start=have)
    if loads is not None:
        loads.append(manifest_load(services.user_agent_dir("bench-user"), backend, n, repeat))
    from harness_memory import services as services_module

    services_module._defaults[services_module._identity(cfg)] = services
    store = services.store
    store.request_count = 0
    build_agent("bench-user", config=cfg)
    cold = store.request_count
    counts: list[int] = []

    def one() -> None:
        before = store.request_count
        build_agent("bench-user", config=cfg)
        counts.append(store.request_count - before)

    times = timed(one, repeat)
    parts: list[list[object]] = []
    if split and backend == "cos":
        parts = [*breakdown(services, repeat), ["whole build_agent", p50(times)]]
    services.close()
    row = [backend, n, "defaults" if defaults else "off", len(times), p50(times), pct(times, 95), cold, max(counts)]
    return row, parts


def run(sizes: tuple[int, ...] = SIZES, repeat: int = 30, quick: bool = False) -> str:
    """The size sweep grows ONE place per backend (10 → 100 → … → 10,000: the same memories a
    fresh seed of each size would hold), so seeding costs 10,000 saves per backend, not 16,110."""
    if quick:
        sizes, repeat = QUICK_SIZES, 3
    rows = []
    splits: list[tuple[str, list[list[object]]]] = []
    loads: list[list[object]] = []
    load_sizes = sizes if quick else LOAD_SIZES
    with servers(redis=False) as (weed, _):
        for backend in ("cos", "local"):
            cfg = config_for(backend, weed, session={"enabled": False}, auto={"enabled": False})  # type: ignore[arg-type]
            have = 0
            for n in sorted(sizes):
                row, more = measure(backend, cfg, n, have, repeat_for(n, repeat),
                                    loads=loads if n in load_sizes else None, split=n == SPLIT_SIZE and not quick)
                rows.append(row)
                if more:
                    splits.append((f"{n} memories, session + auto off", more))
                have = n
            if not quick:
                full = config_for(backend, weed)  # type: ignore[arg-type]
                row, more = measure(backend, full, DEFAULTS_SIZE, 0, repeat, defaults=True, split=True)
                rows.append(row)
                if more:
                    splits.insert(0, (f"{DEFAULTS_SIZE} memories, session + auto on", more))
    out = table(["backend", "memories", "session + auto", "builds", "build p50 ms", "build p95 ms",
                 "requests (cold)", "requests (warm)"], rows)
    if loads:
        out += ("\n\nLoading the manifest a build reads (`MemoryDir.load_manifest()`, GET included; steady "
                "state):\n\n" + table(["backend", "memories", "loads", "load p50 ms", "load p95 ms",
                                        "µs per memory"], loads))
    for label, parts in splits:
        out += f"\n\nWhere the time of a build goes (SeaweedFS, {label}):\n\n" + table(["part", "p50 ms"], parts)
    return out


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--quick"]
    sizes = tuple(int(x) for x in args) or SIZES
    print(run(sizes, quick="--quick" in sys.argv[1:]))
