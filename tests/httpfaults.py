"""An HTTP proxy on 127.0.0.1 in front of SeaweedFS that delivers a request and then loses or delays
its answer, so the client's own retry (the COS SDK's, or ours) runs against a store that did the
work.

Why HTTP and not a Python seam: a fault injected in ``FaultyStore`` raises where we chose to raise;
here the request really reaches the store, the SDK really sees a dropped connection or a timeout and
really retries, and what the retry meets (a 412: the first attempt's version is there) is the
store's own answer. That is the path that made a chunk replace insert its text twice.

A rule matches a request by method and path (``match(method, path, headers)``); ``drop`` forwards
the request, reads the store's whole answer and closes the client's connection without a byte of
it; ``delay`` forwards it and holds the answer back ``seconds`` (past the client's timeout it is a
timeout after delivery). ``times`` bounds how often a rule fires; ``rate`` fires it at random.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Match = Callable[[str, str, dict[str, str]], bool]


@dataclass
class Rule:
    match: Match
    action: str  # "drop" | "delay" | "refuse"
    seconds: float = 0.0
    times: int | None = None
    rate: float = 1.0
    hits: int = 0


@dataclass
class Seen:
    """One request the proxy forwarded: method, path, the store's status, and the fault applied."""

    method: str
    path: str
    status: int
    fault: str = ""
    headers: dict[str, str] = field(default_factory=dict)


class HttpFaultProxy:
    """``HttpFaultProxy(target_port).start()``; ``.port`` is where clients connect."""

    def __init__(self, target_port: int, host: str = "127.0.0.1", seed: int = 7) -> None:
        self.host, self.target_port = host, target_port
        self.rules: list[Rule] = []
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._rnd = random.Random(seed)
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                return

            def _any(self) -> None:
                proxy._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self._server = ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]

    def start(self) -> HttpFaultProxy:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def domain_for(self, bucket: str) -> str:
        return f"{self.host}:{self.port}/{bucket}"

    # -- rules ---------------------------------------------------------------------------------
    def drop(self, match: Match, *, times: int | None = None, rate: float = 1.0) -> Rule:
        """Deliver matching requests, lose their answers (the connection closes unanswered)."""
        rule = Rule(match, "drop", times=times, rate=rate)
        self.rules.append(rule)
        return rule

    def delay(self, match: Match, seconds: float, *, times: int | None = None, rate: float = 1.0) -> Rule:
        """Deliver matching requests, answer ``seconds`` later."""
        rule = Rule(match, "delay", seconds=seconds, times=times, rate=rate)
        self.rules.append(rule)
        return rule

    def refuse(self, match: Match, *, status: int = 503, times: int | None = None, rate: float = 1.0) -> Rule:
        """Answer matching requests with ``status`` without delivering them (the store never sees them)."""
        rule = Rule(match, "refuse", seconds=float(status), times=times, rate=rate)
        self.rules.append(rule)
        return rule

    def faults(self, kind: str = "") -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.fault and (not kind or s.fault == kind)]

    def _pick(self, method: str, path: str, headers: dict[str, str]) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.times is not None and rule.hits >= rule.times:
                    continue
                if not rule.match(method, path, headers):
                    continue
                if rule.rate < 1.0 and self._rnd.random() >= rule.rate:
                    continue
                rule.hits += 1
                return rule
        return None

    # -- forwarding ----------------------------------------------------------------------------
    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        method, path = h.command, h.path
        headers = {k: v for k, v in h.headers.items()}
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        rule = self._pick(method, path, headers)
        if rule is not None and rule.action == "refuse":
            with self._lock:
                self.seen.append(Seen(method, path, int(rule.seconds), "refuse", headers))
            h.send_response_only(int(rule.seconds))
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        upstream = http.client.HTTPConnection(self.host, self.target_port, timeout=60)
        try:
            forward = {k: v for k, v in headers.items() if k.lower() not in ("connection", "keep-alive")}
            upstream.request(method, path, body=body if method not in ("GET", "HEAD") or body else None,
                             headers=forward)
            resp = upstream.getresponse()
            data = resp.read()
            status, reason, out = resp.status, resp.reason, resp.getheaders()
        finally:
            upstream.close()
        with self._lock:
            self.seen.append(Seen(method, path, status, rule.action if rule else "", headers))
        if rule is not None and rule.action == "drop":
            h.close_connection = True
            return  # the store did it; the client never hears
        if rule is not None and rule.action == "delay":
            time.sleep(rule.seconds)
        try:
            h.send_response_only(status, reason)
            for k, v in out:
                if k.lower() in ("transfer-encoding", "connection", "content-length", "keep-alive"):
                    continue
                h.send_header(k, v)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            if method != "HEAD":
                h.wfile.write(data)
            h.wfile.flush()
        except OSError:  # the client gave up (a delay past its timeout)
            h.close_connection = True


def put_to(suffix: str) -> Match:
    """Matches PUTs of keys ending with ``suffix`` (``.manifest.json``: the head)."""
    return lambda method, path, headers: method == "PUT" and path.split("?", 1)[0].endswith(suffix)


def conditional_put(method: str, path: str, headers: dict[str, str]) -> bool:
    """A PUT carrying If-Match or If-None-Match (the writes whose retry meets its own first try)."""
    low = {k.lower() for k in headers}
    return method == "PUT" and bool(low & {"if-match", "if-none-match"})


def once_per_path(match: Match) -> Match:
    """``match``, but true only the first time for each path (every object's first write)."""
    seen: set[str] = set()
    lock = threading.Lock()

    def first(method: str, path: str, headers: dict[str, str]) -> bool:
        if not match(method, path, headers):
            return False
        with lock:
            if path in seen:
                return False
            seen.add(path)
            return True

    return first


def any_put(method: str, path: str, headers: dict[str, str]) -> bool:
    return method == "PUT"
