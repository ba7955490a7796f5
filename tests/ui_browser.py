"""A live control plane (uvicorn in a thread) and Debian's Chromium driven by Playwright.

Why a real server and a real browser: the page's safety (CSP, text-only rendering, CSRF header)
and its wiring to the API only show in a browser talking HTTP to the server. Chromium comes
from Debian (``make test`` installs it); Playwright drives it without downloading a browser.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn

from harness_memory.config import MemoryConfig
from harness_memory.server import create_app
from harness_memory.services import MemoryServices, services_for
from tests.servers import free_ports

CHROMIUM = os.environ.get("UI_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(os.environ.get("UI_TEST_ARTIFACTS", "/tmp/harness-memory-artifacts"))


class LiveServer:
    """``create_app(config)`` served by uvicorn on a free 127.0.0.1 port in a daemon thread."""

    def __init__(self, config: MemoryConfig) -> None:
        self.services: MemoryServices = services_for(config)
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(create_app(services=self.services), host="127.0.0.1",
                                                     port=self.port, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, name="ui-live-server", daemon=True)

    def start(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the live server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)


@contextlib.contextmanager
def live_server(config: MemoryConfig) -> Iterator[LiveServer]:
    server = LiveServer(config).start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright ``Browser``) from the system package."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


def screenshot(page: Any, name: str) -> Path:
    """Write ``<ARTIFACTS>/<name>.png`` (the run's screenshots; docs/ holds committed ones)."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
