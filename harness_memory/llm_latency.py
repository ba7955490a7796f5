"""Measured latency per model and task, so a step with a deadline is skipped when it cannot make it.

Why (issue 15): on a CPU model a recall pick takes far longer than recall's deadline
(``recall.model_timeout``), so the model was asked on every build and its answer never used:
all cost, no benefit. Every timed call records its duration (a timeout records the deadline it
hit) in an exponentially weighted moving average per (model, purpose). ``can_meet(deadline)``
says whether the expected latency fits; while it does not, the step is skipped, except for one
probe call every ``PROBE_SECONDS`` so a model that got faster (or a warmed cache) is noticed.

Per process, thread-safe, tiny; nothing is stored.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

ALPHA = 0.3  # weight of the newest sample
PROBE_SECONDS = 120.0
HEADROOM = 0.8  # expected latency must fit in this share of the deadline


@dataclass(slots=True)
class _Stat:
    ewma: float
    samples: int
    last_probe: float


class LatencyTracker:
    """EWMA latency per (model, purpose)."""

    def __init__(self, probe_seconds: float = PROBE_SECONDS) -> None:
        self.probe_seconds = probe_seconds
        self._stats: dict[tuple[str, str], _Stat] = {}
        self._lock = threading.Lock()

    def record(self, model: str, purpose: str, seconds: float) -> None:
        """One call's duration (a timed-out call: the deadline it hit, or more)."""
        now = time.monotonic()  # a real call is a probe too: the next one is due a full interval later
        with self._lock:
            stat = self._stats.get((model, purpose))
            if stat is None:
                self._stats[(model, purpose)] = _Stat(seconds, 1, now)
            else:
                stat.ewma = ALPHA * seconds + (1 - ALPHA) * stat.ewma
                stat.samples += 1
                stat.last_probe = now

    def expected(self, model: str, purpose: str) -> float | None:
        """The expected latency in seconds (None before the first call)."""
        with self._lock:
            stat = self._stats.get((model, purpose))
            return None if stat is None else stat.ewma

    def can_meet(self, model: str, purpose: str, deadline: float) -> bool:
        """True when a call is worth making: no measurement yet, the expected latency fits the
        deadline, or it is time for a probe (then the probe is counted as taken)."""
        now = time.monotonic()
        with self._lock:
            stat = self._stats.get((model, purpose))
            if stat is None or stat.ewma <= deadline * HEADROOM:
                return True
            if now - stat.last_probe >= self.probe_seconds:
                stat.last_probe = now
                return True
            return False

    def reset(self) -> None:
        with self._lock:
            self._stats.clear()


#: The process-wide tracker (models are shared per process; so is what is known of their speed).
TRACKER = LatencyTracker()

__all__ = ["ALPHA", "HEADROOM", "PROBE_SECONDS", "TRACKER", "LatencyTracker"]
