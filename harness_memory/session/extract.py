"""One summarisation of one session, start to finish, by at most one worker in all pods.

Steps (the lock is held throughout and always released):

1. ``SET lock <random token> NX PX lock_ttl`` — not acquired → ``BUSY`` (no waiting: the holder
   will do the work; a crashed holder's lock expires after ``session.lock_ttl_seconds``).
2. Read the state and the messages after the last summary; re-check the thresholds under the
   lock (a request that lost a race sees them consumed → ``NOT_DUE``, no model call).
3. Read the stored summary (the store is the truth, not this pod's cache).
4. One light-model call: template + previous summary + ONLY the new messages (oldest first, up
   to ``extract_max_input_tokens``; the rest waits for the next round).
5. Parse and bound the answer; garbage, empty or timed-out answers stop here.
6. Check we still hold the lock, then write ``memory/sessions/session-<id>.md`` — conditionally
   on the etag read in step 3 where the backend enforces it (a second guard besides the lock).
7. Cache it in this pod's LRU; commit the buffer (keep the last ``keep_messages`` summarised
   messages plus everything newer; recount the pending tokens) — atomically, and only if the
   lock is still ours.
8. Release the lock by compare-and-delete.

Any failure in steps 2-6 leaves the stored summary as it was and every buffered message in the
buffer, records the error in the state (the debug view shows it) and backs off automatic retries
(``failure_backoff_seconds``, doubling up to 16x).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

from ..config import SessionConfig
from ..errors import ObjectNotFound, PreconditionFailed, StorageError
from ..layout import session_summary_key
from ..llm import LLMError, LLMResult
from ..locks import LEASES, LeaseKeeper
from ..observe import DISABLED, Telemetry
from ..storage import ObjectStore
from .buffer import SessionBuffer
from .cache import CachedSummary, SummaryCache
from .combined import RiderSource, take_ride
from .records import (
    BufferedMessage,
    CommitOutcome,
    ExtractionResult,
    ExtractStatus,
    PendingBatch,
    SessionState,
)
from .summary import (
    StoredSummary,
    SummaryDoc,
    SummaryRejected,
    parse_stored,
    parse_summary,
    render_summary,
    retry_request,
    serialize_stored,
    summary_messages,
    utc_now,
)

log = logging.getLogger(__name__)
#: This process, as named in lock tokens (``host:pid``).
POD_ID = f"{socket.gethostname()}:{os.getpid()}"


class SummaryModel(Protocol):
    """What a summary needs from a model (``LightModel`` fits)."""

    def complete(self, messages: list[dict[str, Any]], *, json_mode: bool = False,
                 max_tokens: int | None = None, timeout: float | None = None,
                 purpose: str = "other") -> LLMResult: ...


def extraction_due(state: SessionState | None, cfg: SessionConfig, now: float) -> bool:
    """The threshold rule.

    * Nothing pending, or backing off after a failure → no.
    * No summary yet → when the pending tokens reach ``first_threshold_tokens`` (10,000).
    * Otherwise → when ``update_threshold_tokens`` (5,000) new tokens arrived AND either
      ``min_tool_calls`` (3) tool calls happened since the last summary or the last run made
      none (a natural pause: the agent is not in the middle of a tool loop).
    """
    if state is None or state.tokens <= 0 or state.pending <= 0:
        return False
    if state.retry_at and now < state.retry_at:
        return False
    if not state.has_summary:
        return state.tokens >= cfg.first_threshold_tokens
    return state.tokens >= cfg.update_threshold_tokens and (
        state.tool_calls >= cfg.min_tool_calls or state.last_turn_tool_calls == 0
    )


class Summariser:
    def __init__(self, store: ObjectStore, buffer: SessionBuffer, cache: SummaryCache, cfg: SessionConfig,
                 *, key_prefix: str, clock: Callable[[], float] = time.time,
                 telemetry: Telemetry = DISABLED, leases: LeaseKeeper | None = None) -> None:
        self.store = store
        self.buffer = buffer
        self.cache = cache
        self.cfg = cfg
        self.key_prefix = key_prefix
        self.clock = clock
        self.model_calls = 0
        self.failures = 0
        self.telemetry = telemetry
        #: Renews the summary lock while the model works (the composition root's keeper).
        self.leases = leases or LEASES

    def key(self, session_id: str) -> str:
        return session_summary_key(session_id, self.key_prefix)

    def load_stored(self, session_id: str) -> StoredSummary | None:
        """The stored summary; raises StorageError when the store fails."""
        try:
            obj = self.store.get(self.key(session_id))
        except ObjectNotFound:
            return None
        return parse_stored(session_id, obj.data, obj.etag)

    def extract(self, session_id: str, model: SummaryModel, *, force: bool = False,
                riders: RiderSource | None = None) -> ExtractionResult:
        """``riders``: where a second job for the same call may come from (``combined.py``)."""
        token = f"{POD_ID}/{secrets.token_hex(8)}"  # who holds it shows in the debug view
        ttl_ms = int(self.cfg.lock_ttl_seconds * 1000)
        if not self.buffer.acquire(session_id, token, ttl_ms):
            return ExtractionResult(ExtractStatus.BUSY, session_id)
        # The lease: renewed while the model works, so a slow but successful summary is stored
        # (the same keeper as the place locks). A crashed pod stops renewing; its lock expires.
        lease = self.leases.add(lambda: self.buffer.renew(session_id, token, ttl_ms), ttl_ms / 3000)
        try:
            return self._locked(session_id, model, token, force, riders)
        finally:
            self.leases.remove(lease)
            try:
                self.buffer.release(session_id, token)
            except Exception as exc:  # the TTL frees it
                log.warning("could not release the summary lock of session %s (%s); it expires in %ds",
                            session_id, exc, self.cfg.lock_ttl_seconds)

    def _locked(self, session_id: str, model: SummaryModel, token: str, force: bool,
                riders: RiderSource | None = None) -> ExtractionResult:
        batch = self.buffer.pending(session_id)
        if batch is None or not batch.messages:
            return ExtractionResult(ExtractStatus.NOTHING_NEW if force else ExtractStatus.NOT_DUE, session_id)
        if not force and not extraction_due(batch.state, self.cfg, self.clock()):
            return ExtractionResult(ExtractStatus.NOT_DUE, session_id)
        if batch.dropped:
            log.warning("session %s: %d unsummarised message(s) were cut by the buffer cap (%d) before a "
                        "summary could include them", session_id, batch.dropped, self.cfg.buffer_max_messages)
        chosen = self._select(batch.messages)
        try:
            previous = self.load_stored(session_id)
        except StorageError as exc:
            return self._failed(session_id, batch, f"cannot read the stored summary: {exc}")
        try:
            prev_doc: SummaryDoc | None = parse_summary(previous.text) if previous else None
        except SummaryRejected:
            prev_doc = None  # a hand-edited summary: the model still sees its text
        prompt = summary_messages(previous.text if previous else None, chosen, self.cfg.summary_max_chars)
        ride = take_ride(riders, session_id)  # a pending extraction of this session rides along
        max_tokens = max(256, self.cfg.summary_max_chars // 2) + (ride.max_tokens if ride else 0)
        self.model_calls += 1
        try:
            answer = model.complete(ride.messages(prompt, chosen) if ride else prompt, max_tokens=max_tokens,
                                    purpose="summary+extraction" if ride else "summary")
            text = ride.split(answer) if ride else answer.text
            doc = self._parsed_or_asked_again(text, prompt, model, max_tokens - (ride.max_tokens if ride else 0)
                                              ).merged_over(prev_doc)
        except (LLMError, SummaryRejected) as exc:
            return self._failed(session_id, batch, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a custom model object failing in its own way
            return self._failed(session_id, batch, f"the model failed: {type(exc).__name__}: {exc}")
        finally:
            if ride is not None:
                ride.close("the summary call failed")
        text = render_summary(doc, self.cfg.summary_max_chars)
        version = (previous.version if previous else 0) + 1
        covered = batch.start + len(chosen)
        stored = StoredSummary(session_id, text, version, utc_now(), covered)
        try:
            if not self.buffer.holds(session_id, token):
                self.telemetry.lease_lost("session")
                return self._failed(session_id, batch, "the summary lock was lost before the summary was "
                                    "stored (this pod stalled past session.lock_ttl_seconds, or Redis lost it)")
            self._write(session_id, stored, previous)
        except PreconditionFailed:
            return self._failed(session_id, batch, "the stored summary changed meanwhile (another writer)")
        except StorageError as exc:
            return self._failed(session_id, batch, f"cannot store the summary: {exc}")
        self.cache.put(session_id, CachedSummary(text, version, self.clock()))
        outcome = self.buffer.commit(session_id, token=token, epoch=batch.state.epoch, summarized=covered,
                                     keep=self.cfg.keep_messages, version=version, ttl=self.cfg.ttl_seconds)
        if outcome is not CommitOutcome.DONE:
            log.warning("session %s: summary v%d stored but the buffer was not advanced (%s); its messages "
                        "may be summarised again", session_id, version, outcome.value)
        log.info("session %s: summary v%d stored (%d new message(s), %d chars)", session_id, version,
                 len(chosen), len(text))
        return ExtractionResult(ExtractStatus.EXTRACTED, session_id, summary=text, version=version,
                                messages_sent=len(chosen), messages_left=len(batch.messages) - len(chosen))

    def _select(self, messages: list[BufferedMessage]) -> list[BufferedMessage]:
        """Oldest first, within ``extract_max_input_tokens`` (always at least one message)."""
        chosen: list[BufferedMessage] = []
        used = 0
        for msg in messages:
            if chosen and used + msg.tokens > self.cfg.extract_max_input_tokens:
                break
            chosen.append(msg)
            used += msg.tokens
        return chosen

    def _write(self, session_id: str, stored: StoredSummary, previous: StoredSummary | None) -> None:
        key, data = self.key(session_id), serialize_stored(stored)
        if previous is None:
            self.store.put_if_absent(key, data, content_type="text/markdown; charset=utf-8")
        elif previous.etag:
            self.store.put_if_match(key, data, previous.etag, content_type="text/markdown; charset=utf-8")
        else:
            self.store.put(key, data, content_type="text/markdown; charset=utf-8")

    def _parsed_or_asked_again(self, text: str, prompt: list[dict[str, str]], model: SummaryModel,
                               max_tokens: int) -> SummaryDoc:
        """The summary in ``text``; an answer the template check rejects is asked for again at
        once, told why (``session.summary_retries``).

        Why: a small model often writes a fair summary under its own headings ("## Tools",
        "**Task**:") — waiting for the failure back-off would leave the session unsummarised for
        minutes and then, most often, get the same shape. One more call with the reason is cheap,
        and is only ever made for a rejected answer (a model error is not retried here)."""
        for attempt in range(self.cfg.summary_retries + 1):
            try:
                return parse_summary(text)
            except SummaryRejected as exc:
                if attempt == self.cfg.summary_retries:
                    raise
                log.info("summary answer rejected (%s); asking once more", exc.reason)
                self.model_calls += 1
                again = [*prompt, {"role": "assistant", "content": text},
                         {"role": "user", "content": retry_request(exc.reason)}]
                text = model.complete(again, max_tokens=max_tokens, purpose="summary").text
        raise AssertionError("unreachable")  # the loop returns or raises

    def _failed(self, session_id: str, batch: PendingBatch, reason: str) -> ExtractionResult:
        self.failures += 1
        backoff = self.cfg.failure_backoff_seconds * 2 ** min(batch.state.failures, 4)
        try:
            self.buffer.record_failure(session_id, error=reason, retry_at=self.clock() + backoff,
                                       ttl=self.cfg.ttl_seconds)
        except Exception as exc:
            log.debug("could not record the failure of session %s: %s", session_id, exc)
        log.warning("session %s: summary not updated (%s); the stored summary and all %d buffered "
                    "message(s) are kept; next automatic attempt in %.0fs", session_id, reason,
                    len(batch.messages), backoff)
        return ExtractionResult(ExtractStatus.FAILED, session_id, messages_left=len(batch.messages),
                                error=reason)
