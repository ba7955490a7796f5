"""The storage layer: keys and bytes on COS or a local directory, chosen once from config.

Why a factory here: layers above must not know which backend answers; they get an
``ObjectStore`` from ``make_store(cfg)`` at the edge and pass it down.
"""

from __future__ import annotations

from concurrent.futures import Executor

from ..config import ConfigError, StoreConfig
from .base import DeleteFailure, ObjectInfo, ObjectStore, StoredObject
from .cos import CosStore
from .local import LocalStore

__all__ = [
    "CosStore",
    "DeleteFailure",
    "LocalStore",
    "ObjectInfo",
    "ObjectStore",
    "StoredObject",
    "make_store",
]


def make_store(cfg: StoreConfig, *, executor: Executor | None = None) -> ObjectStore:
    """``CosStore`` when the effective backend is ``cos``, else ``LocalStore`` at ``local_root``.

    Raises ConfigError (naming the env var) when COS is chosen but its bucket, region/domain or
    credentials are missing, so a misconfigured pod fails at start, not on its first write.
    """
    if cfg.effective_backend == "cos":
        if not cfg.cos_bucket and not cfg.cos_domain:
            raise ConfigError(
                "backend is cos but no bucket is set: set HARNESS_MEMORY_COS_BUCKET (or HARNESS_MEMORY_BACKEND=local)"
            )
        return CosStore(cfg, executor=executor)
    return LocalStore(cfg.local_root, key_prefix=cfg.key_prefix, io_threads=cfg.io_threads, executor=executor)
