"""The summary-rider policy: whether an auto-memory extraction waits for a session summary and
rides along in its model call (one call instead of two), and the rider the summariser gets.

A policy across two features, so neither owns it: the composition root (``services.py``) makes
one ``SummaryRiding`` and hands ``carries`` to auto memory (should this extraction wait?) and
``rider`` to session memory (anything to carry in this summary?). It sees the two features only
through the small Protocols below, handed over as getters because either may be made (or made
again after a close) later than the policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..session.binding import session_owned_by

if TYPE_CHECKING:
    from ..config import MemoryConfig
    from .model import QueueKey
    from .rider import SummaryRider


class SummarisingSessions(Protocol):
    """What the policy asks of session memory (``SessionMemoryManager`` is one)."""

    @property
    def closed(self) -> bool: ...

    @property
    def model(self) -> object | None: ...

    def tracks(self, session_id: str) -> bool: ...


class PendingExtractions(Protocol):
    """What the policy asks of auto memory (``AutoMemory`` is one)."""

    @property
    def closed(self) -> bool: ...

    def summary_rider(self, session_id: str, accept: Callable[[QueueKey], bool]) -> SummaryRider | None: ...


class SummaryRiding:
    """One per composition root. ``same_model``: the extraction model is the light model (the one
    summaries use); only then can one call serve both."""

    def __init__(self, config: MemoryConfig, *, sessions: Callable[[], SummarisingSessions | None],
                 extractions: Callable[[], PendingExtractions | None], same_model: Callable[[], bool]) -> None:
        self.config = config
        self._sessions = sessions
        self._extractions = extractions
        self._same_model = same_model

    def carries(self, session_id: str) -> bool:
        """Whether an auto-memory extraction of ``session_id`` can wait for the session's next
        summary and ride along in its call: session memory of this process summarises the
        session, with the same model as the extraction, and session ids are bound to their user
        (so the session's conversation is one user's)."""
        cfg = self.config
        if not (cfg.session.enabled and cfg.session.bind_to_user and cfg.auto.combine_with_summary):
            return False
        session = self._sessions()
        if session is None or session.closed or session.model is None:
            return False
        return self._same_model() and session.tracks(session_id)

    def rider(self, session_id: str) -> SummaryRider | None:
        """For the summariser: the pending extraction of ``session_id`` to ride along in its call,
        if the session belongs to the extraction's user (see ``carries``)."""
        cfg = self.config
        if not (cfg.session.bind_to_user and cfg.auto.combine_with_summary):
            return None
        auto = self._extractions()
        if auto is None or auto.closed or not self._same_model():
            return None
        return auto.summary_rider(session_id, lambda key: session_owned_by(key.user_id, session_id))


__all__ = ["PendingExtractions", "SummarisingSessions", "SummaryRiding"]
