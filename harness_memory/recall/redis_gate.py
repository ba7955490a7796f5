"""Whether to try Redis now: recall's small per-session records skip it for a while after a failure.

Why shared: the surfaced-file sets and the recall insight live side by side in the same Redis; one
outage is one warning and one retry clock for both, and neither may ever raise into recall.
"""

from __future__ import annotations

import logging
import time

from ..redis_client import RedisClient

log = logging.getLogger(__name__)


class RedisGate:
    """The client while Redis is believed up; None for ``retry_after_seconds`` after a failure."""

    def __init__(self, client: RedisClient | None, retry_after_seconds: float = 30.0) -> None:
        self.client = client
        self.retry_after_seconds = retry_after_seconds
        self._down_until = 0.0

    def get(self) -> RedisClient | None:
        if self.client is None or time.monotonic() < self._down_until:
            return None
        return self.client

    def failed(self, exc: Exception, what: str) -> None:
        """Note a failure (logged once per outage) and stop trying for ``retry_after_seconds``."""
        if self._down_until == 0.0 or time.monotonic() >= self._down_until:
            log.warning("recall: Redis unavailable for %s (%s); using this pod's memory for %.0f s",
                        what, exc, self.retry_after_seconds)
        self._down_until = time.monotonic() + self.retry_after_seconds


__all__ = ["RedisGate"]
