"""Pytest plugin: the Redis topologies (TLS, Sentinel, Cluster) as lazily started session fixtures.

Why a plugin module: the topologies are started only when a test asks for one (a run of
``test_tools.py`` never starts a cluster), once per session (~2.5 s for a cluster, ~2.3 s for
Sentinel, ~1.5 s for TLS with its certificates), and tests isolate themselves by key prefix, as
with the plain ``redis_server``. A test that kills or fails over nodes starts its own topology.

``redis_topology`` runs a test once per topology (ids ``standalone``, ``tls``, ``sentinel``,
``cluster``); ``make_config(redis="cluster")`` (conftest) builds a config for one of them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.redis_topologies import TOPOLOGIES, ClusterRedis, SentinelRedis, TLSRedis, Topology, topology_settings


@pytest.fixture(scope="session")
def redis_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TLSRedis]:
    """A TLS-only redis-server that requires a client certificate."""
    topo = TLSRedis(tmp_path_factory.mktemp("redis-tls")).start()
    try:
        yield topo
    finally:
        topo.close()


@pytest.fixture(scope="session")
def redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelRedis]:
    """1 master + 1 replica + 3 sentinels. Do not fail it over: use a topology of your own."""
    topo = SentinelRedis(tmp_path_factory.mktemp("redis-sentinel")).start()
    try:
        yield topo
    finally:
        topo.close()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterRedis]:
    """A 3-master Redis Cluster. Do not kill its nodes: use a cluster of your own."""
    topo = ClusterRedis(tmp_path_factory.mktemp("redis-cluster")).start()
    try:
        yield topo
    finally:
        topo.close()


@pytest.fixture(params=TOPOLOGIES)
def redis_topology(request: pytest.FixtureRequest) -> Topology:
    """Each Redis topology in turn."""
    return Topology(request.param, topology_settings(request, request.param))
