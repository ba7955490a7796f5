"""Throw-away Redis topologies on 127.0.0.1 for tests and benches: TLS, Sentinel and Cluster.

Why real topologies: the cluster client refuses cross-slot commands before sending them, Sentinel
failover surfaces as new error types and silently lost writes, and TLS is a different connection
class — none of that shows against a single plain redis-server.

Shapes (all from Debian's ``redis-server``; ``redis-server CONF --sentinel`` is a sentinel, so the
``redis-sentinel`` package is not needed; ``openssl`` makes the TLS certificates):

* ``TLSRedis`` — one server that speaks only TLS and requires a client certificate (so the CA,
  certificate and key settings must all reach the connection);
* ``SentinelRedis`` — 1 master + 1 replica + 3 sentinels (quorum 2, master down after 1 s);
* ``ClusterRedis`` — 3 masters, slots split evenly, built with CLUSTER ADDSLOTSRANGE / MEET
  (no ``redis-cli --cluster create`` polling), each node's bus on its own free port.

Every process comes from ``tests.servers.ServerProcess``: its own session, a log file, killed
when the test process dies (PR_SET_PDEATHSIG) and by an atexit backstop. Readiness checks the
answering server's PID, so a port taken by someone else never passes for ours. Nothing persists
(``--save "" --appendonly no``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from harness_memory.config import RedisConfig
from harness_memory.redis_client import RedisClient, make_redis
from tests.servers import HOST, RedisServer, ServerProcess, ServerStartError, free_ports

if TYPE_CHECKING:
    import pytest

START_TIMEOUT = 20.0
CLUSTER_SLOTS = 16384
MASTER_NAME = "mymaster"


def _redis_server() -> str:
    exe = shutil.which("redis-server")
    if not exe:
        raise ServerStartError("redis-server is not installed (make test installs it: apt-get install redis-server)")
    return exe


def wait_for(check: Callable[[], bool], what: str, timeout: float = START_TIMEOUT,
             procs: list[RedisNode] | None = None) -> None:
    """Poll ``check`` (exceptions count as "not yet") until true; fail fast if a process died."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        for node in procs or []:
            if not node.alive():
                raise ServerStartError(f"{node.label} exited while waiting for {what}:\n{node.log_tail()}")
        try:
            if check():
                return
        except (redis.RedisError, OSError) as exc:
            last = exc
        time.sleep(0.05)
    raise ServerStartError(f"timed out waiting for {what} (last error: {last!r})")


class RedisNode:
    """One ``redis-server`` (or sentinel) process on a chosen port."""

    def __init__(self, workdir: Path, port: int, args: list[str], *, conf: Path | None = None,
                 sentinel: bool = False, tls: dict[str, str] | None = None) -> None:
        self.port = port
        self.dir = workdir
        self.args = args
        self.conf = conf
        self.sentinel = sentinel
        self.tls = tls  # connection kwargs for a TLS node (ssl_ca_certs, ssl_certfile, ssl_keyfile)
        self.proc: ServerProcess | None = None

    @property
    def label(self) -> str:
        return f"{'sentinel' if self.sentinel else 'redis-server'} on {HOST}:{self.port}"

    def start(self) -> RedisNode:
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [_redis_server()]
        if self.conf is not None:
            argv.append(str(self.conf))
        if self.sentinel:
            argv.append("--sentinel")
        else:
            argv += ["--port", str(self.port), "--bind", HOST, "--save", "", "--appendonly", "no",
                     "--dir", str(self.dir), "--protected-mode", "yes",
                     # a replica syncs at once and shows up in CLUSTER SLOTS / sentinel within 1 s
                     "--repl-diskless-sync-delay", "0", "--repl-ping-replica-period", "1", *self.args]
        self.proc = ServerProcess(argv, log_path=self.dir / f"redis-{self.port}.log", env=_env(), cwd=self.dir)
        proc = self.proc
        wait_for(lambda: self.client(socket_timeout=0.5).info("server")["process_id"] == proc.pid,
                 f"{self.label} to answer", procs=[self])
        return self

    def client(self, **kw: Any) -> redis.Redis:
        """A plain client to this one process (never through the topology)."""
        tls = {"ssl": True, **self.tls} if self.tls else {}
        return redis.Redis(host=HOST, port=self.port, socket_timeout=kw.pop("socket_timeout", 2.0),
                           socket_connect_timeout=2.0, **tls, **kw)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def kill(self) -> None:
        """SIGKILL: the node vanishes mid-conversation."""
        if self.proc is not None:
            self.proc.kill()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(grace=2.0)

    def log_tail(self) -> str:
        return self.proc.log_tail() if self.proc is not None else "(not started)"


def _env() -> dict[str, str]:
    return dict(os.environ)


class _Topology:
    """What the tests see of any topology: a name, the RedisConfig settings, stop()."""

    name = "topology"

    def __init__(self, base_dir: Path | None = None) -> None:
        if base_dir is not None:
            Path(base_dir).mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=f"hm-{self.name}-", dir=base_dir))
        self.nodes: list[RedisNode] = []
        self.startup_seconds = 0.0

    def settings(self) -> dict[str, Any]:
        """``RedisConfig`` fields (without ``key_prefix``) that reach this topology."""
        raise NotImplementedError

    def stop(self) -> None:
        for node in reversed(self.nodes):
            with contextlib.suppress(Exception):
                node.stop()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


# -- TLS -------------------------------------------------------------------------------------
def make_certs(folder: Path) -> dict[str, str]:
    """A CA and a server certificate for 127.0.0.1 / localhost that doubles as a client certificate."""
    folder.mkdir(parents=True, exist_ok=True)
    if not shutil.which("openssl"):
        raise ServerStartError("openssl is not installed (make test installs it: apt-get install openssl)")
    ca_key, ca, key, csr, crt, ext = (folder / n for n in ("ca.key", "ca.crt", "redis.key", "redis.csr",
                                                           "redis.crt", "san.ext"))
    # AKI/SKI: Python >= 3.13 verifies strictly (VERIFY_X509_STRICT) and rejects leaves without them.
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                   "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n"
                   "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n")

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
            "-days", "30", "-subj", "/CN=hm-test-ca")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", "/CN=127.0.0.1")
    openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
            "-out", str(crt), "-days", "30", "-extfile", str(ext))
    return {"ssl_ca_certs": str(ca), "ssl_certfile": str(crt), "ssl_keyfile": str(key)}


class TLSRedis(_Topology):
    """One server listening only on TLS (``--port 0``) and requiring a client certificate."""

    name = "tls"

    def start(self) -> TLSRedis:
        t0 = time.monotonic()
        self.certs = make_certs(self.dir / "certs")
        port = free_ports(1)[0]
        tls_args = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", self.certs["ssl_certfile"],
                    "--tls-key-file", self.certs["ssl_keyfile"], "--tls-ca-cert-file", self.certs["ssl_ca_certs"],
                    "--tls-auth-clients", "yes"]
        self.node = RedisNode(self.dir / "n", port, tls_args, tls=self.certs).start()
        self.nodes = [self.node]
        self.startup_seconds = time.monotonic() - t0
        return self

    def settings(self) -> dict[str, Any]:
        return {"url": f"rediss://{HOST}:{self.node.port}/0", **self.certs}


# -- Sentinel --------------------------------------------------------------------------------
SENTINEL_CONF = """\
port {port}
bind 127.0.0.1
daemonize no
dir {dir}
logfile {dir}/sentinel.log
sentinel monitor {name} 127.0.0.1 {master_port} 2
sentinel down-after-milliseconds {name} 1000
sentinel failover-timeout {name} 5000
sentinel parallel-syncs {name} 1
"""


class SentinelRedis(_Topology):
    """1 master + 1 replica + 3 sentinels. ``failover()`` / ``kill_master()`` for failover tests."""

    name = "sentinel"

    def __init__(self, base_dir: Path | None = None, *, server_args: tuple[str, ...] = ()) -> None:
        super().__init__(base_dir)
        self.server_args = list(server_args)

    def start(self) -> SentinelRedis:
        t0 = time.monotonic()
        mport, rport, *sports = free_ports(5)
        debug = ["--enable-debug-command", "local"]
        self.master = RedisNode(self.dir / "master", mport, [*debug, *self.server_args]).start()
        self.replica = RedisNode(self.dir / "replica", rport,
                                 ["--replicaof", HOST, str(mport), *debug, *self.server_args]).start()
        self.nodes = [self.master, self.replica]
        wait_for(lambda: self.replica.client().info("replication")["master_link_status"] == "up",
                 "the replica to sync", procs=self.nodes)
        self.sentinels = []
        for port in sports:
            folder = self.dir / f"sentinel-{port}"
            folder.mkdir()
            conf = folder / "sentinel.conf"  # sentinel rewrites its file: a fresh one each
            conf.write_text(SENTINEL_CONF.format(port=port, dir=folder, name=MASTER_NAME, master_port=mport))
            self.sentinels.append(RedisNode(folder, port, [], conf=conf, sentinel=True).start())
        self.nodes += self.sentinels

        def ready() -> bool:
            for s in self.sentinels:
                m = s.client().sentinel_master(MASTER_NAME)
                if m["num-other-sentinels"] != 2 or m["num-slaves"] != 1 or "s_down" in m["flags"]:
                    return False
            return True

        wait_for(ready, "the sentinels to find each other and the replica", timeout=30, procs=self.nodes)
        self.startup_seconds = time.monotonic() - t0
        return self

    @property
    def sentinel_addresses(self) -> list[str]:
        return [f"{HOST}:{s.port}" for s in self.sentinels]

    def settings(self) -> dict[str, Any]:
        return {"url": f"redis+sentinel://{','.join(self.sentinel_addresses)}/{MASTER_NAME}/0"}

    def master_port(self) -> int:
        """The master as the sentinels see it now."""
        _, port = self.sentinels[0].client().sentinel_get_master_addr_by_name(MASTER_NAME)
        return int(port)

    def node_on(self, port: int) -> RedisNode:
        return next(n for n in (self.master, self.replica) if n.port == port)

    def failover(self, timeout: float = 15.0) -> tuple[RedisNode, RedisNode]:
        """``SENTINEL FAILOVER``: promote the replica; returns (old master, new master) once the
        sentinels name the new one. The old master is demoted only ~10 s later."""
        old = self.node_on(self.master_port())
        self.sentinels[0].client().execute_command("SENTINEL", "FAILOVER", MASTER_NAME)
        wait_for(lambda: self.master_port() != old.port, "the sentinels to name a new master", timeout)
        return old, self.node_on(self.master_port())

    def wait_demoted(self, node: RedisNode, timeout: float = 30.0) -> None:
        """Until ``node`` is a replica of the current master with a live link."""
        wait_for(lambda: node.client().info("replication").get("master_link_status") == "up",
                 f"{node.label} to become a replica", timeout)


# -- Cluster ---------------------------------------------------------------------------------
class ClusterRedis(_Topology):
    """``masters`` masters splitting the 16384 slots evenly, no replicas."""

    name = "cluster"

    def __init__(self, base_dir: Path | None = None, *, masters: int = 3, ports: list[int] | None = None) -> None:
        super().__init__(base_dir)
        self.masters = masters
        self.ports = ports  # client and bus port of each node, in pairs; default: free ones

    def start(self) -> ClusterRedis:
        t0 = time.monotonic()
        ports = self.ports or free_ports(2 * self.masters)  # one client port and one bus port per node
        for i in range(self.masters):
            port, bus = ports[2 * i], ports[2 * i + 1]
            self.nodes.append(RedisNode(self.dir / f"n{port}", port, [
                "--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-port", str(bus), "--cluster-node-timeout", "2000"]).start())
        step = CLUSTER_SLOTS // self.masters
        for i, node in enumerate(self.nodes):
            last = CLUSTER_SLOTS - 1 if i == self.masters - 1 else (i + 1) * step - 1
            node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", i * step, last)
        first = self.nodes[0].client()
        for node in self.nodes[1:]:
            first.execute_command("CLUSTER", "MEET", HOST, node.port, ports[2 * self.nodes.index(node) + 1])

        def ok() -> bool:
            for node in self.nodes:
                info = node.client().cluster("info")
                if info["cluster_state"] != "ok" or int(info["cluster_known_nodes"]) != self.masters:
                    return False
            return True

        wait_for(ok, "cluster_state:ok on every node", timeout=30, procs=self.nodes)
        self.startup_seconds = time.monotonic() - t0
        return self

    def settings(self) -> dict[str, Any]:
        return {"url": "redis+cluster://" + ",".join(f"{HOST}:{n.port}" for n in self.nodes) + "/0"}

    def node_for(self, key: str) -> RedisNode:
        """The node serving ``key``'s slot."""
        client = self.nodes[0].client()
        slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))
        for start, end, master, *_ in client.execute_command("CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return next(n for n in self.nodes if n.port == int(master[1]))
        raise LookupError(slot)


# -- as tests see them ------------------------------------------------------------------------
TOPOLOGIES = ("standalone", "tls", "sentinel", "cluster")


@dataclass(frozen=True)
class Topology:
    """One running topology as a test sees it."""

    name: str
    settings: dict[str, Any]  # RedisConfig fields, without key_prefix

    def config(self, key_prefix: str, **extra: Any) -> RedisConfig:
        return RedisConfig(**self.settings, key_prefix=key_prefix, **extra)

    def client(self, **extra: Any) -> RedisClient:
        """A client made by the one factory (``make_redis``), as the services would make it."""
        client = make_redis(self.config("unused:", socket_timeout=2.0, **extra))
        assert client is not None
        return client


def topology_settings(request: pytest.FixtureRequest, name: str) -> dict[str, Any]:
    """The RedisConfig fields reaching the session's topology ``name`` (starting it if needed)."""
    if name == "standalone":
        server: RedisServer = request.getfixturevalue("redis_server")
        return {"url": server.url}
    if name not in TOPOLOGIES:
        raise ValueError(f"unknown Redis topology {name!r} (one of {', '.join(TOPOLOGIES)})")
    return dict(request.getfixturevalue(f"redis_{name}").settings())
