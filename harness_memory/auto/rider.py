"""An auto-memory extraction riding along in a session summary call.

Why: when session memory summarises a session and an extraction of the same session is pending,
two light-model calls would read the same conversation back to back. Instead the summariser
asks for a rider (``AutoMemory.summary_rider``), adds the extraction's instructions and inputs
to its own prompt (``session/combined.py``), and hands the memory half of the one answer back
to ``finish``, which applies it under auto memory's own rules (``Updater.finish``) — exactly as
if it had come from a call of its own. A failed or unusable answer sends the batch back to the
queue like a failed extraction; nothing is lost, nothing is applied twice (the watermark).

The summariser only ever sees this object's ``system``, ``user``, ``max_tokens`` and ``finish``
(a structural protocol, ``session.combined.Rider``): neither feature imports the other.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Protocol

from .updater import Prepared, UpdateResult, UpdateStatus

if TYPE_CHECKING:
    from ..config import AutoConfig
    from .queue import QueueWorker
    from .updater import Updater


class RiderOwner(Protocol):
    """What a rider uses of auto memory (``AutoMemory`` is one)."""

    config: AutoConfig
    updater: Updater
    worker: QueueWorker

    def record(self, result: UpdateResult) -> None: ...

log = logging.getLogger(__name__)


class SummaryRider:
    """One taken batch, prepared for the model; ``finish`` must be called exactly once (later
    calls are ignored)."""

    def __init__(self, auto: RiderOwner, prepared: Prepared) -> None:
        self._auto = auto
        self.prepared = prepared
        self._done = False

    @property
    def system(self) -> str:
        return self.prepared.system

    @property
    def user(self) -> str:
        return self.prepared.user

    @property
    def max_tokens(self) -> int:
        return self._auto.config.max_output_tokens

    @property
    def conversation(self) -> list[tuple[str, str]]:
        return [(m.role, m.text) for m in self.prepared.unseen]

    def user_pointing_to(self, where: str) -> str:
        return self.prepared.user_pointing_to(where)

    def finish(self, text: str | None, *, error: str = "", prompt_tokens: int = 0,
               completion_tokens: int = 0) -> None:
        """Apply the memory half of the answer (None: the call failed; the batch is retried)."""
        if self._done:
            return
        self._done = True
        batch = self.prepared.batch
        if text is None:
            log.warning("auto-memory extraction for %s riding with the session summary failed (%s); will retry",
                        batch.key, error or "no answer")
            result = UpdateResult(UpdateStatus.RETRY, batch.key, len(self.prepared.unseen),
                                  reason=error or "no answer", combined=True)
        else:
            try:
                result = self._auto.updater.finish(self.prepared, text, prompt_tokens=prompt_tokens,
                                                   completion_tokens=completion_tokens, combined=True)
            except Exception as exc:  # the store failed while applying: retry like any failed update
                log.warning("auto-memory update of %s (with the session summary) failed: %s", batch.key, exc)
                result = UpdateResult(UpdateStatus.RETRY, batch.key, len(self.prepared.unseen),
                                      reason=f"{type(exc).__name__}: {exc}", combined=True)
        self._auto.record(result)
        self._auto.worker.finish(batch, result.status is not UpdateStatus.RETRY)
