"""The one Redis client factory (standalone, TLS, Sentinel, Cluster) and the errors callers degrade on.

Why one factory: the session buffer, the place locks and recall's surfaced-file tracker share
one client per process (``MemoryServices.redis``); how that client reaches Redis is a deployment
choice, made here from ``RedisConfig`` and nowhere else:

* ``redis://host:port/db``, ``rediss://…`` (TLS), ``unix:///path.sock`` — one server;
* ``redis+sentinel://[user:pass@]host:port[,host:port…]/<master>[/<db>]`` (``rediss+sentinel``
  for TLS to sentinels and servers alike), or ``redis.sentinels`` + ``redis.sentinel_master`` —
  the master the sentinels name now, rediscovered after a failover;
* ``redis+cluster://host:port[,host:port…]`` (``rediss+cluster``), or ``redis.mode: cluster``
  with a plain URL — Redis Cluster; every multi-key command and script of ours stays inside
  one ``{hash tag}``.

Every client gets short timeouts and no client-side retries: a dead server must fail the one
command fast, because every caller degrades on the first failure (in-process buffer, local
lock) and probes again after ``redis.retry_after_seconds``.

Which exceptions mean "Redis is not there": ``redis.ConnectionError`` (Sentinel's
``MasterNotFoundError`` is one), ``redis.TimeoutError``, ``OSError``, the cluster's
``CLUSTERDOWN`` / ``TRYAGAIN`` answers and the cluster client's own ``RedisClusterException``
("cannot be connected", slot not covered) — which is NOT a ``redis.RedisError``. A cross-slot
error is a bug in our keys, never an outage: ``is_unavailable`` says no to it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, TypeAlias

import redis
from redis.backoff import NoBackoff
from redis.cluster import ClusterNode, RedisCluster
from redis.commands.core import Script
from redis.connection import Encoder
from redis.exceptions import (
    ClusterDownError,
    CrossSlotTransactionError,
    RedisClusterException,
    TryAgainError,
)
from redis.retry import Retry
from redis.sentinel import Sentinel

from .config import RedisConfig
from .redis_target import DEFAULT_MASTER, RedisTarget, target_for  # the parser lives below config

log = logging.getLogger(__name__)

#: Everything a Redis call of ours may raise. ``RedisClusterException`` is not a ``RedisError``.
REDIS_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, RedisClusterException, OSError)
HEALTH_CHECK_SECONDS = 30


def is_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` means Redis cannot be reached right now (outage, failover, resharding);
    False for anything that would fail again on a healthy server (a bug: cross-slot keys,
    WRONGTYPE, a script error)."""
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError | ClusterDownError | TryAgainError):
        return True
    if isinstance(exc, CrossSlotTransactionError):
        return False
    if isinstance(exc, RedisClusterException):  # "cannot be connected", "slot not covered", …
        return "same key slot" not in str(exc) and "same slot" not in str(exc)
    return False


# -- clients ---------------------------------------------------------------------------------
def _common(cfg: RedisConfig) -> dict[str, Any]:
    # No client-side retries: redis-py's default retry turns one failed command against a dead
    # server into seconds of backoff; callers here degrade on the first failure instead.
    return {"socket_timeout": cfg.socket_timeout, "socket_connect_timeout": cfg.socket_timeout,
            "retry": Retry(NoBackoff(), 0)}


def _tls(cfg: RedisConfig) -> dict[str, Any]:
    kw: dict[str, Any] = {"ssl_cert_reqs": cfg.ssl_cert_reqs, "ssl_check_hostname": cfg.ssl_check_hostname}
    for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
        value = getattr(cfg, name)
        if value:
            kw[name] = str(value)
    return kw


class SentinelMaster(redis.Redis):
    """The client of the master the sentinels name (a ``redis.Redis`` on a sentinel-managed pool).

    Why a subclass: ``close()`` must also close the connections to the sentinels, and callers
    that care about failover can ask where the master is now."""

    sentinel: Sentinel | None = None
    master_name: str = DEFAULT_MASTER

    def master_address(self) -> tuple[str, int]:
        """Ask the sentinels; idle pooled connections to a former master are dropped."""
        host, port = self.connection_pool.get_master_address()
        return str(host), int(port)

    def still_master(self, address: tuple[str, int]) -> bool:
        """Whether the server at ``address`` is the master and stays it: the sentinels name it
        and none of them reports a failover in progress. Why every sentinel: after ``SENTINEL
        FAILOVER`` the replica is promoted ~0.3 s in, but only the sentinel leading the failover
        knows (``failover_in_progress``); the others name the old master for another second."""
        if self.master_address() != address or self.sentinel is None:
            return False
        for sentinel in self.sentinel.sentinels:
            try:
                if "failover_in_progress" in sentinel.sentinel_master(self.master_name)["flags"]:
                    return False
            except (redis.ConnectionError, redis.TimeoutError):
                continue
        return True

    def close(self) -> None:
        super().close()
        for client in self.sentinel.sentinels if self.sentinel is not None else ():
            client.close()


class LazyCluster:
    """A ``RedisCluster`` built on first use; every attribute is the real client's.

    Why: ``RedisCluster`` asks a node for the slot map in its constructor and raises when none
    answers; a pod must start (and run on its in-process fallbacks) while the cluster is down,
    exactly as with a single server, and connect once it is back. Until then every use raises
    ``redis.ConnectionError``. ``register_script`` works without connecting (the script's SHA
    only needs the encoding)."""

    def __init__(self, **kwargs: Any) -> None:
        self._kwargs = kwargs
        self._client: RedisCluster | None = None
        self._lock = threading.Lock()

    def connect(self) -> RedisCluster:
        client = self._client
        if client is not None:
            return client
        with self._lock:
            if self._client is None:
                try:
                    self._client = RedisCluster(**self._kwargs)
                except RedisClusterException as exc:  # not a RedisError: make it one callers degrade on
                    raise redis.ConnectionError(f"Redis Cluster unreachable: {exc}") from exc
            return self._client

    @property
    def connected(self) -> bool:
        return self._client is not None

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in {"_kwargs", "_client", "_lock"}:
            raise AttributeError(name)
        return getattr(self.connect(), name)

    def get_encoder(self) -> Encoder:
        kw = self._kwargs
        return Encoder(kw.get("encoding", "utf-8"), kw.get("encoding_errors", "strict"),
                       kw.get("decode_responses", False))

    def register_script(self, script: str) -> Script:
        return Script(self, script)

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


RedisClient: TypeAlias = redis.Redis | RedisCluster | LazyCluster


def make_redis(cfg: RedisConfig) -> RedisClient | None:
    """The process's Redis client for ``cfg``, or None when Redis is not configured.

    Never connects: the first command does (a dead Redis makes that command fail fast)."""
    target = target_for(cfg)
    if target is None:
        return None
    common = _common(cfg)
    creds = {k: v for k, v in (("username", target.username), ("password", target.password)) if v}
    if target.mode == "standalone":
        assert target.url is not None
        tls = _tls(cfg) if target.tls else {}
        # redis-py lets the URL's own credentials win over these keyword arguments.
        return redis.Redis.from_url(target.url, health_check_interval=HEALTH_CHECK_SECONDS, **common, **tls,
                                    **creds)
    tls = {"ssl": True, **_tls(cfg)} if target.tls else {}
    if target.mode == "sentinel":
        sentinel_creds = {k: v.get_secret_value() for k, v in (("username", cfg.sentinel_username),
                                                                ("password", cfg.sentinel_password)) if v}
        sentinel = Sentinel(list(target.hosts), sentinel_kwargs={**common, **tls, **sentinel_creds})
        client = sentinel.master_for(target.master, redis_class=SentinelMaster, db=target.db,
                                     health_check_interval=HEALTH_CHECK_SECONDS, **common, **tls, **creds)
        assert isinstance(client, SentinelMaster)
        client.sentinel, client.master_name = sentinel, target.master
        return client
    nodes = [ClusterNode(host, port) for host, port in target.hosts]
    return LazyCluster(startup_nodes=nodes, health_check_interval=HEALTH_CHECK_SECONDS, **common, **tls, **creds)


def describe(cfg: RedisConfig) -> str:
    """One line for logs and the CLI: the topology and where, without credentials."""
    target = target_for(cfg)
    if target is None:
        return "off (in-process buffer)"
    where = ",".join(f"{h}:{p}" for h, p in target.hosts) if target.hosts else _strip_credentials(target.url or "")
    extra = f" master {target.master}" if target.mode == "sentinel" else ""
    return f"{target.mode}{' TLS' if target.tls else ''} {where}{extra}"


def _strip_credentials(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    return f"{scheme}{sep}{netloc.rpartition('@')[2]}{slash}{path}"


__all__ = ["REDIS_ERRORS", "LazyCluster", "RedisClient", "RedisTarget", "SentinelMaster", "describe",
           "is_unavailable", "make_redis", "target_for"]
