"""Agent build: wall time and object-store requests with N memories in the user's place.

Run: ``.venv/bin/python -m bench.bench_build`` (starts its own SeaweedFS).
Measures steady state (the shared place's index is cached per pod after the first build) and
reports the first, cold build's request count separately. Session and auto memory are off in
the size sweep (the build itself); one extra row per backend builds with every feature at its
default (session hooks, auto memory if ``build_agent`` wires it, snapshot check), as an app does.
The 5,000-memory rows use a third of the repetitions (each build takes ~50 ms there).
For the defaults build on SeaweedFS a second table splits the build into its parts (each timed
on its own, so the parts need not add up exactly to the whole).
"""

from __future__ import annotations

import sys

from harness_memory import build_agent
from harness_memory.memdir import Manifest
from harness_memory.services import MemoryServices

from .common import config_for, p50, pct, seed, servers, table, timed

SIZES = (10, 100, 1000, 5000)
QUICK_SIZES = (10,)
DEFAULTS_SIZE = 1000


def repeat_for(n: int, repeat: int) -> int:
    """Fewer repetitions for the largest place (keeps `make bench` within its time budget)."""
    return repeat if n < 5000 else max(3, repeat // 3)


def breakdown(services: MemoryServices, repeat: int) -> list[list[object]]:
    """p50 of each part of a build of ``bench-user``'s agent (user place already seeded)."""
    own = services.user_agent_dir("bench-user")
    raw = services.store.get(own.manifest_key).data
    manifest = Manifest.from_bytes(raw)
    parts: list[tuple[str, list[float]]] = [
        ("GET the user's .manifest.json", timed(lambda: services.store.get(own.manifest_key), repeat)),
        ("parse it (Manifest.from_bytes)", timed(lambda: Manifest.from_bytes(raw), repeat)),
        ("MEMORY.md text for the prompt (render + cap)", timed(lambda: own.index_text(manifest), repeat)),
    ]
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


def measure(backend: str, n: int, weed: object, repeat: int, defaults: bool = False
            ) -> tuple[list[object], list[list[object]]]:
    sections = {} if defaults else {"session": {"enabled": False}, "auto": {"enabled": False}}
    cfg = config_for(backend, weed, **sections)  # type: ignore[arg-type]
    services = MemoryServices.from_config(cfg)
    seed(services.user_agent_dir("bench-user"), n)
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
    if defaults and backend == "cos":
        parts = [*breakdown(services, repeat), ["whole build_agent", p50(times)]]
    services.close()
    row = [backend, n, "defaults" if defaults else "off", len(times), p50(times), pct(times, 95), cold, max(counts)]
    return row, parts


def run(sizes: tuple[int, ...] = SIZES, repeat: int = 30, quick: bool = False) -> str:
    if quick:
        sizes, repeat = QUICK_SIZES, 3
    rows = []
    parts: list[list[object]] = []
    with servers(redis=False) as (weed, _):
        for backend in ("cos", "local"):
            for n in sizes:
                rows.append(measure(backend, n, weed, repeat_for(n, repeat))[0])
            if not quick:
                row, more = measure(backend, DEFAULTS_SIZE, weed, repeat, defaults=True)
                rows.append(row)
                parts += more
    out = table(["backend", "memories", "session + auto", "builds", "build p50 ms", "build p95 ms",
                 "requests (cold)", "requests (warm)"], rows)
    if parts:
        out += (f"\n\nWhere the time of a build goes (SeaweedFS, {DEFAULTS_SIZE} memories, session + auto on):"
                "\n\n" + table(["part", "p50 ms"], parts))
    return out


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--quick"]
    sizes = tuple(int(x) for x in args) or SIZES
    print(run(sizes, quick="--quick" in sys.argv[1:]))
