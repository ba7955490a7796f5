"""Shared fixtures: real SeaweedFS and Redis servers, stores, and per-test configs.

Why these shapes:
- Servers are session-scoped (start once, ~1.5 s for SeaweedFS) and started lazily: a test that
  never asks for COS or Redis never starts them.
- Isolation comes from naming, not restarts: each test gets a fresh bucket (deleted afterwards,
  which also frees its SeaweedFS volume) and a unique Redis key prefix.
- Nothing reads the machine's own Redis (6379) or the caller's HARNESS_MEMORY_* environment.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import pytest

os.environ["AGNO_TELEMETRY"] = "false"  # before any test imports agno

from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from harness_memory.storage import CosStore, LocalStore, ObjectStore
from tests.redis_topologies import topology_settings
from tests.servers import RedisServer, SeaweedFS

pytest_plugins = ["tests.fakellm_fixtures", "tests.redis_topology_fixtures"]

MakeConfig = Callable[..., MemoryConfig]


def _unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def seaweedfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedFS]:
    """One SeaweedFS (S3/COS endpoint) for the whole session; use a fresh bucket per test."""
    server = SeaweedFS(base_dir=tmp_path_factory.mktemp("seaweedfs")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One redis-server for the session on a free port; isolate tests by key prefix.
    A test that kills or restarts it must leave it running (call ``restart()``)."""
    server = RedisServer(base_dir=tmp_path_factory.mktemp("redis")).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def cos_bucket(seaweedfs: SeaweedFS) -> Iterator[str]:
    """A fresh, empty bucket on the session SeaweedFS, deleted (with its objects) afterwards."""
    name = seaweedfs.create_bucket(_unique("t-"))
    try:
        yield name
    finally:
        if seaweedfs.running():
            seaweedfs.delete_bucket(name)


def cos_test_settings(seaweedfs: SeaweedFS, bucket: str) -> dict[str, Any]:
    """StoreConfig fields for a CosStore on a local SeaweedFS bucket: path-style, anonymous,
    fast failure (5 s timeout, no retries), conditional PUT enforced."""
    return {
        "backend": "cos",
        "cos_bucket": bucket,
        "cos_domain": seaweedfs.domain_for(bucket),
        "cos_scheme": "http",
        "cos_anonymous": True,
        "cos_timeout": 5.0,
        "cos_retries": 0,
        "cos_conditional_put": "on",
        "cos_pool_size": 32,
    }


@pytest.fixture
def cos_store(seaweedfs: SeaweedFS, cos_bucket: str) -> Iterator[CosStore]:
    """A CosStore on a fresh SeaweedFS bucket; closed after the test."""
    store = CosStore(**cos_test_settings(seaweedfs, cos_bucket))
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def local_store(tmp_path: Path) -> Iterator[LocalStore]:
    """A LocalStore rooted at ``tmp_path/.harness``."""
    store = LocalStore(tmp_path / ".harness")
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(params=["local", "cos"])
def store(request: pytest.FixtureRequest) -> ObjectStore:
    """Each backend in turn (ids ``local`` and ``cos``): the shared store contract."""
    return request.getfixturevalue(f"{request.param}_store")


@pytest.fixture
def make_config(request: pytest.FixtureRequest, tmp_path: Path) -> MakeConfig:
    """Factory: ``make_config(backend="local"|"cos", redis=False|True|TOPOLOGY, **section_overrides)``.

    Every config made in one test shares that test's local root, bucket and Redis key prefix
    (so two "pods" built from two configs see each other) and differs from every other test.
    Section overrides are dicts merged into that section (``limits={"max_file_bytes": 1000}``).
    ``redis=True`` is the plain ``redis_server``; a name (``"tls"``, ``"sentinel"``, ``"cluster"``)
    is that session topology from ``tests.redis_topology_fixtures``.
    The process environment and YAML are ignored, so the machine's settings never leak in.
    """
    state: dict[str, Any] = {}

    def bucket() -> str:
        if "bucket" not in state:
            state["bucket"] = request.getfixturevalue("cos_bucket")
        return str(state["bucket"])

    def factory(
        backend: Literal["local", "cos"] = "local", redis: bool | str = False, **sections: dict[str, Any]
    ) -> MemoryConfig:
        if backend == "cos":
            server: SeaweedFS = request.getfixturevalue("seaweedfs")
            store: dict[str, Any] = cos_test_settings(server, bucket())
        elif backend == "local":
            store = {"backend": "local", "local_root": str(tmp_path / ".harness")}
        else:
            raise ValueError(f"backend must be 'local' or 'cos', not {backend!r}")
        # No snapshot unless a test asks for one (the repo's own snapshots/ would seed every place).
        data: dict[str, dict[str, Any]] = {"store": store,
                                           "agent": {"snapshots_dir": str(tmp_path / "no-snapshots")}}
        if redis:
            settings = topology_settings(request, "standalone" if redis is True else str(redis))
            prefix = state.setdefault("redis_prefix", _unique("t-") + ":")
            data["redis"] = {**settings, "key_prefix": prefix, "socket_timeout": 2.0}
        for section, values in sections.items():
            data.setdefault(section, {}).update(values)
        return MemoryConfig.load(env={}, **data)

    return factory


@pytest.fixture
def services(make_config: MakeConfig) -> Iterator[Callable[..., MemoryServices]]:
    """Build services for a test (``services("cos", redis=True, recall={...})``), all closed after
    it. A test module may define its own ``services`` fixture of another shape."""
    made: list[MemoryServices] = []

    def factory(backend: str = "local", **sections: Any) -> MemoryServices:
        svc = MemoryServices.from_config(make_config(backend, **sections))
        made.append(svc)
        return svc

    yield factory
    for svc in made:
        svc.close()
