"""A scripted OpenAI-compatible chat server on 127.0.0.1 for tests.

Why a real HTTP server and not a mocked client: the house rule is that every layer is tested
against real servers, so the code under test goes through the real ``openai`` client and agno's
real ``OpenAIChat`` / ``OpenAILike`` classes, and a test can assert on what was actually SENT
(model id, messages, ``response_format``, tools) — not only on what came back.

Usage::

    server = ScriptedLLM().start()
    server.script(text("hello"), tool_calls([("save", {"x": 1})]))
    ...  # point a client at server.base_url
    assert server.requests[0].model == "m"
    server.stop()

Answers are taken from the queue first; when it is empty the handler (``set_handler``) answers;
with neither, the server replies HTTP 500 "script exhausted" so an unexpected call is noticed.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    """One scripted reply. Build it with ``text``/``tool_calls``/``error``/``raw``/``delay``."""

    content: str | None = None
    calls: tuple[tuple[str, str], ...] = ()  # (tool name, JSON arguments)
    status: int = 200
    error_message: str = ""
    prompt_tokens: int = 10
    completion_tokens: int = 5
    delay_seconds: float = 0.0
    body: str | None = None  # verbatim HTTP body (garbage tests), bypasses the OpenAI shape
    no_choices: bool = False


def text(content: str, prompt_tokens: int = 10, completion_tokens: int = 5) -> Answer:
    """An assistant message with ``content`` and the given usage."""
    return Answer(content=content, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


def tool_calls(
    calls: list[tuple[str, dict[str, Any]]], prompt_tokens: int = 10, completion_tokens: int = 5
) -> Answer:
    """An assistant message asking for tool calls ``[(name, args), ...]`` (finish_reason tool_calls)."""
    encoded = tuple((name, json.dumps(args, ensure_ascii=False)) for name, args in calls)
    return Answer(calls=encoded, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)


def error(status: int, message: str) -> Answer:
    """An HTTP error in OpenAI's ``{"error": {...}}`` shape."""
    return Answer(status=status, error_message=message)


def delay(seconds: float, answer: Answer) -> Answer:
    """``answer``, sent after sleeping ``seconds`` (for client timeout tests)."""
    return replace(answer, delay_seconds=seconds)


def raw(body_str: str) -> Answer:
    """An arbitrary, possibly garbage, string as the assistant message content."""
    return Answer(content=body_str)


def raw_body(body: str, status: int = 200) -> Answer:
    """A verbatim HTTP body (not even JSON, if you like) sent as ``application/json``."""
    return Answer(body=body, status=status)


def empty_choices() -> Answer:
    """A well-formed completion whose ``choices`` list is empty."""
    return Answer(no_choices=True)


@dataclass
class RecordedRequest:
    """What a client sent: method, path, headers (lower-cased names), parsed JSON body, time."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    timestamp: float = field(default_factory=time.time)

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, dict) else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self.body.get("messages", []) if isinstance(self.body, dict) else []

    @property
    def tools(self) -> list[dict[str, Any]]:
        return (self.body.get("tools") or []) if isinstance(self.body, dict) else []

    @property
    def stream(self) -> bool:
        return bool(isinstance(self.body, dict) and self.body.get("stream"))

    def roles(self) -> list[str]:
        return [m.get("role", "") for m in self.messages]

    def last_user_text(self) -> str:
        """The text of the last user message (string or list-of-parts content)."""
        for msg in reversed(self.messages):
            if msg.get("role") == "user":
                return _content_text(msg.get("content"))
        return ""


Handler = Callable[[RecordedRequest], Answer]


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class ScriptedLLM:
    """The server: a ThreadingHTTPServer on a free 127.0.0.1 port, run in a daemon thread."""

    def __init__(self, model_ids: tuple[str, ...] = ("fake-model",)) -> None:
        self.model_ids = model_ids
        self._lock = threading.Condition()
        self._queue: deque[Answer] = deque()
        self._requests: list[RecordedRequest] = []
        self._handler: Handler | None = None
        #: Answers ``/v1/embeddings`` when set (``set_embedder``); chat scripting is unaffected.
        self.embedder: Callable[[str], list[float]] | None = None
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ScriptedLLM:
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="fakellm", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; wakes delayed answers so no thread sleeps on after the test."""
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ScriptedLLM:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- scripting ---------------------------------------------------------------------------
    def script(self, *answers: Answer) -> None:
        """Queue answers, used in order by the next chat requests."""
        with self._lock:
            self._queue.extend(answers)

    def set_handler(self, fn: Handler | None) -> None:
        """Answer requests with ``fn(request)`` once the queue is empty."""
        with self._lock:
            self._handler = fn

    def clear(self) -> None:
        """Forget queued answers, the handler and recorded requests."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._handler = None

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every recorded request (chat and others), oldest first."""
        with self._lock:
            return list(self._requests)

    def set_embedder(self, fn: Callable[[str], list[float]] | None) -> None:
        """Serve ``POST /v1/embeddings`` with ``fn(text)`` per input (None: 404, as before)."""
        self.embedder = fn

    @property
    def embedding_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/embeddings")]

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    def wait_for_requests(self, count: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until ``count`` chat requests arrived (background-work tests); raise on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                chats = [r for r in self._requests if r.path.endswith("/chat/completions")]
                if len(chats) >= count:
                    return chats
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"expected {count} chat requests, got {len(chats)}")
                self._lock.wait(left)

    # -- used by the request handler ---------------------------------------------------------
    def _record_and_pick(self, req: RecordedRequest) -> Answer:
        with self._lock:
            self._requests.append(req)
            self._lock.notify_all()
            if self._queue:
                return self._queue.popleft()
            handler = self._handler
        if handler is not None:
            return handler(req)
        return error(500, "script exhausted")

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self._requests.append(req)
            self._lock.notify_all()


# -- wire format -------------------------------------------------------------------------------
def _completion(answer: Answer, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.content, "refusal": None}
    finish = "stop"
    if answer.calls:
        message["tool_calls"] = [
            {"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
             "function": {"name": name, "arguments": args}}
            for name, args in answer.calls
        ]
        finish = "tool_calls"
    choices = [] if answer.no_choices else [
        {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
    ]
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": _usage(answer),
    }


def _usage(answer: Answer) -> dict[str, int]:
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
    }


def _chunks(answer: Answer, model: str, include_usage: bool) -> Iterator[dict[str, Any]]:
    """The SSE chunk objects OpenAI sends for ``answer`` (content in pieces, tool-call deltas)."""
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time())

    def chunk(delta: dict[str, Any] | None, finish: str | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created,
                               "model": model, "choices": []}
        if delta is not None:
            out["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
        if include_usage:
            out["usage"] = None
        return out

    if not answer.no_choices:
        yield chunk({"role": "assistant", "content": ""})
        content = answer.content or ""
        for i in range(0, len(content), 8):
            yield chunk({"content": content[i : i + 8]})
        for index, (name, args) in enumerate(answer.calls):
            call_id = f"call_{uuid.uuid4().hex[:12]}"
            yield chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                         "function": {"name": name, "arguments": ""}}]})
            for i in range(0, len(args), 10):
                yield chunk({"tool_calls": [{"index": index, "function": {"arguments": args[i : i + 10]}}]})
        yield chunk({}, "tool_calls" if answer.calls else "stop")
    if include_usage:
        final = chunk(None)
        final["usage"] = _usage(answer)
        yield final


def _make_handler(server: ScriptedLLM) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # without it each request pays ~40 ms of delayed-ACK
        timeout = 30  # idle keep-alive connections end by themselves

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

        def _headers(self) -> dict[str, str]:
            return {k.lower(): v for k, v in self.headers.items()}

        def _send_json(self, status: int, payload: Any, raw: str | None = None) -> None:
            data = (raw if raw is not None else json.dumps(payload, ensure_ascii=False)).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            server._record(RecordedRequest("GET", self.path, self._headers(), None))
            if self.path.rstrip("/").endswith("/models"):
                data = [{"id": m, "object": "model", "created": 0, "owned_by": "fakellm"}
                        for m in server.model_ids]
                self._send_json(200, {"object": "list", "data": data})
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            payload = self.rfile.read(length).decode("utf-8", "replace")
            try:
                body: Any = json.loads(payload) if payload else None
            except json.JSONDecodeError:
                body = payload
            req = RecordedRequest("POST", self.path, self._headers(), body)
            if self.path.rstrip("/").endswith("/embeddings") and server.embedder is not None:
                server._record(req)
                texts = body.get("input") if isinstance(body, dict) else None
                texts = [texts] if isinstance(texts, str) else list(texts or [])
                data = [{"object": "embedding", "index": i, "embedding": server.embedder(t)}
                        for i, t in enumerate(texts)]
                self._send_json(200, {"object": "list", "data": data, "model": body.get("model", ""),
                                      "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)}})
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                server._record(req)
                self._send_json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                return
            answer = server._record_and_pick(req)
            if answer.delay_seconds and server._stopping.wait(answer.delay_seconds):
                self.close_connection = True  # stopping: drop the connection unanswered
                return
            try:
                self._answer(req, answer)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout tests)

        def _answer(self, req: RecordedRequest, answer: Answer) -> None:
            if answer.body is not None:
                self._send_json(answer.status, None, raw=answer.body)
                return
            if answer.status != 200:
                err = {"message": answer.error_message, "type": "invalid_request_error",
                       "param": None, "code": None}
                self._send_json(answer.status, {"error": err})
                return
            model = req.model or server.model_ids[0]
            if not req.stream:
                self._send_json(200, _completion(answer, model))
                return
            opts = req.body.get("stream_options") or {}
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            for item in _chunks(answer, model, bool(opts.get("include_usage"))):
                self.wfile.write(f"data: {json.dumps(item, ensure_ascii=False)}\n\n".encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return _Handler
