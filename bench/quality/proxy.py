"""A recording proxy in front of the model server: every call's purpose, latency, tokens and answer.

Why a proxy and not hooks in our code: the harness must see what the MODEL did (its raw answer,
its tool calls, how long it took, whether our client gave up waiting) independently of what our
code made of it — a harness that only reads our own counters could not tell a model failure
from a failure we hid. Both the agent model and the light model are pointed at the proxy; it
forwards each request unchanged to the real server (127.0.0.1 only in tests) and records it.

A call is classified by its prompt: tools offered -> ``agent``; the session summary, extraction
and recall system prompts -> ``summary``, ``extraction``, ``recall``; else ``other``. When our
client times out, the proxy still waits for the server's answer and then fails to write it back:
that call is recorded with ``client_gave_up`` (the model was too slow for its timeout).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import select
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from harness_memory.auto.prompt import SYSTEM_PROMPT as EXTRACTION_PROMPT
from harness_memory.recall.select import SYSTEM_PROMPT as RECALL_PROMPT
from harness_memory.session.summary import PROMPT_MARKER as SUMMARY_MARKER

UPSTREAM_TIMEOUT = 3600.0  # the proxy waits for the server as long as it takes; clients time out


@dataclass
class Call:
    """One model call as the proxy saw it."""

    purpose: str
    model: str
    started: float
    seconds: float = 0.0
    status: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    content: str = ""
    tool_calls: list[str] = field(default_factory=list)
    client_gave_up: bool = False
    error: str = ""


def classify(body: Any) -> str:
    """The purpose of a chat request, from what it sends."""
    if not isinstance(body, dict):
        return "other"
    if body.get("tools"):
        return "agent"
    system = "\n".join(str(m.get("content")) for m in body.get("messages", [])
                       if isinstance(m, dict) and m.get("role") in ("system", "developer"))
    if SUMMARY_MARKER in system:
        return "summary"
    if EXTRACTION_PROMPT[:60] in system:
        return "extraction"
    if RECALL_PROMPT[:40] in system:
        return "recall"
    return "other"


class RecordingProxy:
    """An HTTP proxy on a free 127.0.0.1 port that forwards to ``upstream`` and records ``calls``."""

    def __init__(self, upstream_base_url: str) -> None:
        parts = urlsplit(upstream_base_url)
        self.upstream_origin = f"{parts.scheme}://{parts.netloc}"
        self.upstream_path = parts.path.rstrip("/")
        self.calls: list[Call] = []
        self._lock = threading.Condition()
        self._in_flight = 0
        self._httpd: ThreadingHTTPServer | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}{self.upstream_path}"

    def start(self) -> RecordingProxy:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True, name="quality-proxy").start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def begin(self) -> None:
        with self._lock:
            self._in_flight += 1

    def record(self, call: Call | None) -> None:
        """A forwarded call ended (``None``: not a chat call); wakes ``wait_idle``."""
        with self._lock:
            self._in_flight -= 1
            if call is not None:
                self.calls.append(call)
            self._lock.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no call is in flight — one our client gave up on is still running on the
        server, and is recorded when the server answers."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True

    def snapshot(self) -> list[Call]:
        with self._lock:
            return list(self.calls)


def _parse_answer(call: Call, data: bytes) -> None:
    try:
        payload = json.loads(data)
    except ValueError:
        call.error = "answer is not JSON"
        return
    usage = payload.get("usage") or {}
    call.prompt_tokens = int(usage.get("prompt_tokens") or 0)
    call.completion_tokens = int(usage.get("completion_tokens") or 0)
    choices = payload.get("choices") or []
    message = (choices[0] or {}).get("message") or {} if choices else {}
    content = message.get("content")
    call.content = content if isinstance(content, str) else ""
    call.tool_calls = [str((c.get("function") or {}).get("name")) for c in message.get("tool_calls") or []]


def _client_closed(conn: socket.socket) -> bool:
    """Whether the client closed its side while the server was thinking (its timeout fired)."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _exchange(proxy: RecordingProxy, method: str, path: str, raw: bytes | None, headers: dict[str, str],
              client: socket.socket, call: Call) -> tuple[int, bytes, str]:
    """Send the request upstream and wait for the answer, watching the client: when our client
    gives up (its timeout), the upstream connection is closed too, as the client's own would have
    been — llama.cpp's server then cancels the generation instead of finishing it for nobody (with
    one slot, every later call would wait behind it)."""
    parts = urlsplit(proxy.upstream_origin)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=UPSTREAM_TIMEOUT)
    box: dict[str, Any] = {}

    def fetch() -> None:
        try:
            conn.request(method, path, body=raw, headers=headers)
            resp = conn.getresponse()
            box["answer"] = (resp.status, resp.read(), resp.getheader("Content-Type", ""))
        except (OSError, http.client.HTTPException) as exc:
            box["error"] = exc

    worker = threading.Thread(target=fetch, daemon=True, name="quality-proxy-upstream")
    worker.start()
    while worker.is_alive():
        worker.join(0.25)
        if worker.is_alive() and _client_closed(client):
            call.client_gave_up = True
            with contextlib.suppress(OSError):
                if conn.sock is not None:
                    conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()
            worker.join(5)
            return 499, b"", ""
    conn.close()
    if "answer" in box:
        return box["answer"]  # type: ignore[no-any-return]
    call.error = f"upstream: {box.get('error')}"
    return 502, json.dumps({"error": {"message": call.error}}).encode(), "application/json"


def _handler(proxy: RecordingProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _forward(self, method: str) -> None:
            proxy.begin()
            try:
                self._relay(method)
            except BaseException:
                proxy.record(None)
                raise

        def _relay(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else None
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = None
            is_chat = self.path.rstrip("/").endswith("/chat/completions")
            call = Call(classify(body), str((body or {}).get("model", "")) if isinstance(body, dict) else "",
                        time.time())
            headers = {k: v for k, v in self.headers.items()
                       if k.lower() in ("content-type", "authorization", "accept")}
            start = time.monotonic()
            status, data, ctype = _exchange(proxy, method, self.path, raw, headers, self.connection, call)
            call.seconds = time.monotonic() - start
            call.status = status
            if call.client_gave_up:  # nobody to answer; the server was told to stop (connection closed)
                self.close_connection = True
                proxy.record(call if is_chat else None)
                return
            if is_chat and status == 200:
                _parse_answer(call, data)
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype or "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
            except OSError:
                call.client_gave_up = True
            proxy.record(call if is_chat else None)

        def do_POST(self) -> None:
            self._forward("POST")

        def do_GET(self) -> None:
            self._forward("GET")

    return Handler
