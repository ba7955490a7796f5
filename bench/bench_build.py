"""Agent build: wall time and object-store requests with N memories in the user's place.

Run: ``.venv/bin/python -m bench.bench_build`` (starts its own SeaweedFS).
Measures steady state (the shared place's index is cached per pod after the first build) and
reports the first, cold build's request count separately.
"""

from __future__ import annotations

import sys

from harness_memory import build_agent
from harness_memory.services import MemoryServices

from .common import config_for, p50, pct, seed, servers, table, timed

SIZES = (10, 100, 1000, 5000)


def measure(backend: str, n: int, weed: object, repeat: int) -> list[object]:
    cfg = config_for(backend, weed, session={"enabled": False}, auto={"enabled": False})  # type: ignore[arg-type]
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
    services.close()
    return [backend, n, p50(times), pct(times, 95), cold, max(counts)]


def run(sizes: tuple[int, ...] = SIZES, repeat: int = 30) -> str:
    rows = []
    with servers(redis=False) as (weed, _):
        for backend in ("cos", "local"):
            for n in sizes:
                rows.append(measure(backend, n, weed, repeat))
    return table(["backend", "memories", "build p50 ms", "build p95 ms", "requests (cold)", "requests (warm)"],
                 rows)


if __name__ == "__main__":
    sizes = tuple(int(x) for x in sys.argv[1:]) or SIZES
    print(run(sizes))
