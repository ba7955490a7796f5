"""The embeddings endpoint as recall uses it: a query with a short deadline, memories in batches
with a long one, batch sizes that follow the server's speed.

Why two timeouts: a query waits on its vector while the user waits (seconds at most), while a
background batch of 64 chunks against a CPU-served model can take a minute and nobody waits on
it. One shared 5 s timeout made the first batch time out, the tier mark itself down, and recall
fall back to words for every query. Why adaptive: the right batch size depends on the server;
a batch that times out is split in half and retried (down to one text), a batch that answered
in under a quarter of its deadline lets the next one grow back (up to ``batch_size``). Only a
failure that is not about size (refused connection, an HTTP error, one text timing out) is the
endpoint's failure.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

import numpy as np

from .vectors import normalise

if TYPE_CHECKING:
    from ..config import EmbedConfig

log = logging.getLogger(__name__)


class EmbedClient:
    """One OpenAI-compatible ``/v1/embeddings`` endpoint (thread-safe)."""

    def __init__(self, config: EmbedConfig) -> None:
        from openai import OpenAI

        assert config.model and config.base_url
        self.model = config.model
        self.query_timeout = config.timeout
        self.batch_timeout = config.batch_timeout
        self.max_batch = config.batch_size
        self.batch = config.batch_size  # the current (adapted) batch size
        key = config.api_key.get_secret_value() if config.api_key else "none"
        self._client = OpenAI(base_url=config.base_url, api_key=key, timeout=config.timeout, max_retries=0)
        self._lock = threading.Lock()
        self.calls = 0  # requests made (benchmarks and tests read it)
        self.splits = 0  # batches split in half after a timeout

    def _request(self, texts: list[str], timeout: float) -> np.ndarray:
        with self._lock:
            self.calls += 1
        response = self._client.with_options(timeout=timeout).embeddings.create(
            model=self.model, input=[t or " " for t in texts])
        data = sorted(response.data, key=lambda d: d.index)
        if len(data) != len(texts):
            raise ValueError(f"the endpoint answered {len(data)} vectors for {len(texts)} texts")
        return normalise(np.asarray([d.embedding for d in data], dtype=np.float32))

    def query(self, text: str) -> np.ndarray:
        """The normalised vector of one query (``timeout``: the user is waiting)."""
        return self._request([text], self.query_timeout)[0]

    def documents(self, texts: list[str]) -> np.ndarray:
        """Normalised vectors of ``texts`` in adaptive batches (``batch_timeout`` each). Raises when
        the endpoint fails for a reason other than a batch's size."""
        from openai import APITimeoutError

        out: list[np.ndarray] = []
        start = 0
        while start < len(texts):
            size = max(1, min(self.batch, len(texts) - start))
            began = time.monotonic()
            try:
                out.append(self._request(texts[start: start + size], self.batch_timeout))
            except APITimeoutError:
                if size == 1:
                    raise  # one text did not fit the deadline: the endpoint is the problem
                with self._lock:
                    self.batch = max(1, size // 2)
                    self.splits += 1
                log.info("embeddings: a batch of %d timed out after %.0f s; trying batches of %d",
                         size, self.batch_timeout, self.batch)
                continue
            start += size
            if time.monotonic() - began < self.batch_timeout / 4 and size == self.batch:
                with self._lock:
                    self.batch = min(self.max_batch, self.batch * 2)
        if not out:
            return np.zeros((0, 0), np.float32)
        return np.concatenate(out)

    def close(self) -> None:
        self._client.close()


__all__ = ["EmbedClient"]
