"""Small helpers shared by tests: spawning other OS processes, auto-memory pods."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from harness_memory.auto import AutoMemory
from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from harness_memory.storage import make_store
from tests.faults import FaultyStore

ROOT = Path(__file__).resolve().parent.parent


def write_config(cfg: MemoryConfig, path: Path) -> Path:
    """Dump a test config (no secrets in tests) to YAML for a child process."""
    path.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_none=True)), encoding="utf-8")
    return path


def child_env(config_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARNESS_MEMORY_")}
    env.update(HARNESS_MEMORY_CONFIG=str(config_path), AGNO_TELEMETRY="false", PYTHONPATH=str(ROOT), **extra)
    return env


def spawn(module: str, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@contextlib.contextmanager
def auto_pods(make_config: Callable[..., MemoryConfig], base_url: str,
              light_timeout: float) -> Iterator[Callable[..., AutoMemory]]:
    """A factory of auto-memory pods against the scripted model at ``base_url`` (no worker thread:
    tests drive batches themselves); every pod and its services are closed at the end."""
    made: list[tuple[AutoMemory, MemoryServices]] = []

    def factory(**auto: object) -> AutoMemory:
        cfg = make_config(model={"model": "fake-model", "base_url": base_url, "api_key": "k",
                                 "light_timeout": light_timeout},
                          auto={"debounce_seconds": 3600, "max_attempts": 1, **auto})
        services = MemoryServices.from_config(cfg)
        memory = services.new_auto_memory(start_worker=False)
        made.append((memory, services))
        return memory

    try:
        yield factory
    finally:
        for memory, services in made:
            memory.close(1)
            services.close()


@contextlib.contextmanager
def faulty_pods() -> Iterator[Callable[[MemoryConfig], tuple[MemoryServices, FaultyStore]]]:
    """A factory of "pods": services on ``cfg`` whose store is a ``FaultyStore`` around the real
    one (faults can be injected per pod); every pod is closed at the end."""
    made: list[MemoryServices] = []

    def make(cfg: MemoryConfig) -> tuple[MemoryServices, FaultyStore]:
        store = FaultyStore(make_store(cfg.store))
        services = MemoryServices.from_config(cfg, store=store)
        made.append(services)
        return services, store

    try:
        yield make
    finally:
        for services in made:
            services.close()
