"""How long each model takes: an exponentially weighted moving average per model id.

Why: a timeout sized for a hosted model (60 s agent, 30 s light, 8 s recall) is wrong by a factor
of ten for a 1.5B model on two CPU cores, and a fixed number cannot be right for both. Every
model call records its latency and tokens here (``record``); callers ask ``estimate`` before
spending time on a call that cannot finish in time (recall's model step under its deadline),
and the eval harness reports the same numbers. A timed-out call is recorded as a sample of its
timeout — a lower bound, so a model that keeps timing out looks slow, never fast.

Process-wide and thread-safe; nothing is persisted (a restart measures again, and the first
calls of a new model have no estimate: callers then use their configured timeouts).

Two views of the same measurements: ``BOOK`` per model id (every call, with tokens: timeouts of
the agent model, the eval harness's report) and ``TRACKER`` per (model, purpose) with periodic
probes (a step with a deadline — recall's pick — is skipped while its purpose's expected latency
cannot meet it, and tried again now and then so a model that got faster is noticed).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

ALPHA = 0.3  # weight of the newest sample: a few calls adapt, one outlier does not dominate


@dataclass(frozen=True, slots=True)
class LatencyEstimate:
    """The moving averages of one model: seconds per call, tokens per call, seconds per token."""

    model_id: str
    seconds: float
    tokens: float
    samples: int
    timeouts: int

    @property
    def seconds_per_token(self) -> float:
        return self.seconds / self.tokens if self.tokens > 0 else 0.0

    def predict(self, tokens: int | None = None) -> float:
        """Seconds a call of ``tokens`` total tokens should take (the average call without)."""
        if tokens is None or self.tokens <= 0:
            return self.seconds
        return self.seconds_per_token * tokens


class LatencyBook:
    """EWMA latency per model id (one book per process: ``BOOK``)."""

    def __init__(self, alpha: float = ALPHA) -> None:
        self.alpha = alpha
        self._lock = threading.Lock()
        self._data: dict[str, LatencyEstimate] = {}

    def record(self, model_id: str, seconds: float, tokens: int = 0, *, timed_out: bool = False) -> LatencyEstimate:
        """Add one call (``timed_out``: ``seconds`` is the timeout it hit, a lower bound)."""
        seconds = max(0.0, float(seconds))
        tokens_f = float(max(0, tokens))
        with self._lock:
            old = self._data.get(model_id)
            if old is None:
                new = LatencyEstimate(model_id, seconds, tokens_f, 1, int(timed_out))
            else:
                a = self.alpha
                # a timeout carries no token count: keep the token average, so seconds/token rises
                tok = old.tokens if timed_out or tokens_f <= 0 else (1 - a) * old.tokens + a * tokens_f
                new = LatencyEstimate(model_id, (1 - a) * old.seconds + a * seconds, tok, old.samples + 1,
                                      old.timeouts + int(timed_out))
            self._data[model_id] = new
            return new

    def estimate(self, model_id: str) -> LatencyEstimate | None:
        """The model's averages, or None before its first call."""
        with self._lock:
            return self._data.get(model_id)

    def all(self) -> list[LatencyEstimate]:
        with self._lock:
            return sorted(self._data.values(), key=lambda e: e.model_id)

    def reset(self) -> None:
        with self._lock:
            self._data.clear()


BOOK = LatencyBook()


def record(model_id: str, seconds: float, tokens: int = 0, *, timed_out: bool = False) -> LatencyEstimate:
    """Record one call of ``model_id`` in the process-wide book."""
    return BOOK.record(model_id, seconds, tokens, timed_out=timed_out)


def estimate(model_id: str) -> LatencyEstimate | None:
    """The process-wide estimate of ``model_id`` (None before its first call)."""
    return BOOK.estimate(model_id)


def cannot_meet(model_id: str, deadline: float, tokens: int | None = None) -> bool:
    """Whether the measured latency says a call will not finish within ``deadline`` seconds
    (False while nothing is measured: the first call is how we find out)."""
    est = estimate(model_id)
    return est is not None and est.predict(tokens) > deadline



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

__all__ = ["ALPHA", "BOOK", "HEADROOM", "PROBE_SECONDS", "TRACKER", "LatencyBook", "LatencyEstimate",
           "LatencyTracker", "cannot_meet", "estimate", "record"]
