"""The control plane: an HTTP API (FastAPI) and the helpers the CLI shares with it.

Why lazy exports: ``harness_memory.control.bundle`` and ``.places`` are used by the CLI, which
must run where the ``server`` extra (FastAPI, uvicorn) is not installed; importing this
package must therefore not import FastAPI. ``create_app`` and ``memory_router`` load it on
first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "create_app": "harness_memory.server.app",
    "memory_router": "harness_memory.server.app",
    "install_error_handlers": "harness_memory.server.errors",
}

__all__ = ["create_app", "install_error_handlers", "memory_router"]

if TYPE_CHECKING:
    from .app import create_app, memory_router
    from .errors import install_error_handlers


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'harness_memory.server' has no attribute {name!r}")
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name in ("fastapi", "starlette", "uvicorn"):
            raise ModuleNotFoundError(
                f"the HTTP server needs {exc.name}: pip install 'harness-memory[server]'"
            ) from exc
        raise
    globals()[name] = value
    return value
