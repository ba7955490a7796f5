"""Small helpers shared by tests that spawn other OS processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from harness_memory.config import MemoryConfig

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
