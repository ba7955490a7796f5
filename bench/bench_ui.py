"""The ``/ui`` page: time until the memory list is on screen, with N memories in the place.

Run: ``.venv/bin/python -m bench.bench_ui`` (starts its own SeaweedFS; needs Debian's chromium).
Each load is a fresh browser context (no cache) behind a simulated gateway (the ``wid`` header
on every request); "load" is ``performance.now()`` when the page marks its view ready: from
navigation start through the HTML, the modules, ``GET /whoami``, ``GET`` the place's listing
(one manifest read) and rendering the first page of 50 rows. The page pages on the client: the
listing of 1,000 entries is one JSON answer; only 50 rows are put in the DOM.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import sys
import time
import urllib.request
from collections.abc import Iterator

from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices, services_for
from tests.servers import free_ports
from tests.ui_browser import chromium

from .common import config_for, p50, pct, servers, table

SIZES = (100, 1000, 5000)
QUICK_SIZES = (100,)
TYPES = ("user", "feedback", "project", "reference")


def seed(services: MemoryServices, user: str, n: int) -> None:
    mdir = services.user_agent_dir(user)
    for start in range(0, n, 1000):
        mdir.save_many([(f"m{i:05d}.md", f"---\nname: memory {i} 记忆 🧠\ndescription: remembered fact {i} about "
                         f"the user and the project\ntype: {TYPES[i % 4]}\n---\n\nBody of memory {i}.\n")
                        for i in range(start, min(n, start + 1000))])


def _serve(config: MemoryConfig, port: int) -> None:
    import uvicorn

    from harness_memory.server import create_app

    uvicorn.run(create_app(config), host="127.0.0.1", port=port, log_level="warning")


@contextlib.contextmanager
def served(config: MemoryConfig) -> Iterator[str]:
    """The control plane in its own process (as deployed: the browser's driver does not share its GIL)."""
    port = free_ports(1)[0]
    proc = multiprocessing.get_context("spawn").Process(target=_serve, args=(config, port), daemon=True)
    proc.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/health/live", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or not proc.is_alive():
                    raise RuntimeError("the control plane did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.join(10)


def measure(browser: object, url: str, user: str, repeat: int) -> tuple[list[float], list[float], int, int]:
    """(page load ms, listing GET ms, rows rendered, count shown) over ``repeat`` cold loads."""
    loads: list[float] = []
    lists: list[float] = []
    rows = shown = 0
    for _ in range(repeat):
        context = browser.new_context(extra_http_headers={"wid": user})  # type: ignore[attr-defined]
        page = context.new_page()
        page.goto(url + "/ui/")
        page.wait_for_selector("#view[data-ready='memories']", timeout=30_000)
        loads.append(page.evaluate("performance.now()"))
        entry = page.evaluate("performance.getEntriesByType('resource').filter(e => "
                              "e.name.includes('/agents/default/memory?')).map(e => e.duration)[0] || 0")
        lists.append(float(entry))
        rows = page.locator("article.memory").count()
        shown = int(page.inner_text("#memory-count").split("·")[1].split()[0])
        context.close()
    return loads, lists, rows, shown


def run(quick: bool = False) -> str:
    sizes = QUICK_SIZES if quick else SIZES
    repeat = 1 if quick else 7
    out: list[list[object]] = []
    with servers(redis=False) as (weed, _), chromium() as browser:
        for n in sizes:
            cfg = config_for("cos", weed, session={"enabled": False}, auto={"enabled": False})
            t0 = time.perf_counter()
            seed(services_for(cfg), "bench-user", n)
            seeded = time.perf_counter() - t0
            with served(cfg) as url:
                measure(browser, url, "bench-user", 1)  # warm the server (imports, first manifest read)
                loads, lists, rows, shown = measure(browser, url, "bench-user", repeat)
                out.append([n, p50(loads), pct(loads, 95), min(loads), p50(lists), rows, shown, f"{seeded:.1f}"])
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return (table(["memories", "page load p50 ms", "page load p95 ms", "page load min ms", "listing GET p50 ms",
                   "rows in DOM", "count shown", "seed s"], out)
            + f"\n\nHeadless Chromium, {repeat} cold loads per size (fresh browser context each, after one "
            "warm-up load), SeaweedFS store; the control plane in its own process; all on this machine. Load "
            f"average at the end (1/5/15 min): {load} on {os.cpu_count()} cores — other work on the machine slows "
            "every step (the page, the server and the store share the cores); 'min' is the least contended load.")


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv))
