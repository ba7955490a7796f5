"""Updater: ONE light-model call per batch — current auto memory + the unseen conversation in,
a JSON update out — then the rules of ``apply`` under the place lock.

Why one call with the whole memory in it: the model must see what is already known to avoid
restating it, to merge paraphrases (``merges``), to decide what is outdated (``factsToRemove``)
and to merge profile summaries. Why fail closed: a small model sometimes answers prose,
truncated JSON or the wrong shape; an answer without an update object changes NOTHING (not even
the watermark, so the batch is retried up to ``auto.max_attempts``). Inside a well-shaped
answer, an individual item that is invalid is dropped on its own (``answer.py``); the other
items still apply, under the rules of ``apply.py``.

The call is split in two halves — ``prepare`` (read the place, build the prompt) and ``finish``
(parse and apply an answer) — so the same batch can also ride along in a session summary call
(``rider.py``): one model call that returns both, each half applied under its own rules.

The watermark (``store.Watermarks``): per session, the keys of messages already sent to the
extractor, so a re-delivered run or a retried batch never sends a message twice.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from ..config import AutoMemoryConfig
from ..llm import LightModel, LLMError, warn_no_light_model
from .answer import parse_answer
from .apply import apply_plan
from .doubt import Conversation
from .history import UpdateRecord
from .model import Batch, CapturedMessage, QueueKey
from .plan import ApplyContext, ApplyReport, ApplyRules
from .prompt import PLACEHOLDERS, SYSTEM_PROMPT, build_messages, format_conversation, system_prompt, user_message
from .signals import SignalPatterns, default_patterns
from .store import AutoPlace, AutoView, now_iso

log = logging.getLogger(__name__)

__all__ = ["SYSTEM_PROMPT", "Prepared", "UpdateResult", "UpdateStatus", "Updater", "build_messages",
           "format_conversation", "parse_answer"]


class UpdateStatus(StrEnum):
    APPLIED = "applied"  # the answer was applied (possibly changing nothing)
    SKIPPED = "skipped"  # nothing new to send, or no model configured
    RETRY = "retry"  # model failed or answered unusably: nothing changed, try again later


@dataclass(slots=True)
class UpdateResult:
    """What one batch did (kept in ``AutoMemory.results`` for tests, benchmarks, debugging)."""

    status: UpdateStatus
    key: QueueKey
    sent_messages: int = 0
    report: ApplyReport | None = None
    reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    #: True when the extraction rode along in a session summary call.
    combined: bool = False


@dataclass(slots=True)
class Prepared:
    """One batch, ready for the model: what it saw and the two halves of its prompt."""

    place: AutoPlace
    batch: Batch
    snapshot: AutoView
    unseen: list[CapturedMessage]
    system: str
    user: str
    today: dt.date
    hints: list[str]

    @property
    def messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}, {"role": "user", "content": self.user}]

    def user_pointing_to(self, where: str) -> str:
        """The user message with the conversation replaced by a pointer (a combined call carries
        the same messages already)."""
        return user_message(self.snapshot, self.unseen, self.hints, today=self.today, max_conversation_tokens=0,
                            conversation_at=where)


class Updater:
    """Runs one batch against one place. Stateless apart from its settings."""

    def __init__(self, model: Callable[[], LightModel | None], config: AutoMemoryConfig, *,
                 today: Callable[[], dt.date] = dt.date.today, patterns: SignalPatterns | None = None,
                 rejected: Callable[[ApplyReport], None] | None = None) -> None:
        self._model = model
        self.config = config
        self._today = today
        self.patterns = patterns or default_patterns()
        self._rejected = rejected

    def prepare(self, place: AutoPlace, batch: Batch) -> Prepared | UpdateResult:
        """Read the place and build the prompt; an ``UpdateResult`` (SKIPPED) when there is
        nothing unseen to send."""
        snapshot = place.read()
        seen = place.read_watermarks(place.read_etag).seen(batch.key.watermark_id)
        unseen = [m for m in batch.messages if m.key not in seen]
        if not any(m.role == "user" for m in unseen):
            return UpdateResult(UpdateStatus.SKIPPED, batch.key, reason="no new user messages")
        today = self._today()
        hints = self.patterns.hints(batch.signals)
        cfg = self.config
        return Prepared(place, batch, snapshot, unseen, system_prompt(cfg.fact_confidence_threshold, today),
                        user_message(snapshot, unseen, hints, today=today,
                                     max_conversation_tokens=cfg.max_conversation_tokens), today, hints)

    def run(self, place: AutoPlace, batch: Batch) -> UpdateResult:
        """The whole update in its own model call."""
        prepared = self.prepare(place, batch)
        if isinstance(prepared, UpdateResult):
            return prepared
        model = self._model()
        if model is None:
            warn_no_light_model("auto memory", "conversations are not learned from")
            return UpdateResult(UpdateStatus.SKIPPED, batch.key, reason="no model")
        try:
            answer = model.complete(prepared.messages, json_mode=True, max_tokens=self.config.max_output_tokens,
                                    purpose="extraction")
        except LLMError as exc:
            log.warning("auto-memory extraction for %s failed (%s); will retry", batch.key, exc)
            return UpdateResult(UpdateStatus.RETRY, batch.key, len(prepared.unseen), reason=str(exc))
        return self.finish(prepared, answer.text, prompt_tokens=answer.prompt_tokens,
                           completion_tokens=answer.completion_tokens)

    def finish(self, prepared: Prepared, text: str | None, *, prompt_tokens: int = 0, completion_tokens: int = 0,
               combined: bool = False) -> UpdateResult:
        """Parse ``text`` and apply it under the place lock (RETRY, changing nothing, when it holds
        no update)."""
        batch, unseen = prepared.batch, prepared.unseen
        plan = parse_answer(text) if text else None
        if plan is None:
            log.warning("auto-memory extraction for %s: unusable answer (%d chars), nothing changed",
                        batch.key, len(text or ""))
            log.debug("unusable extraction answer: %.200r", text)
            return UpdateResult(UpdateStatus.RETRY, batch.key, len(unseen), reason="unusable answer",
                                prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, combined=combined)
        cfg = self.config
        rules = ApplyRules(threshold=cfg.fact_confidence_threshold, max_facts=cfg.max_facts,
                           max_removals=cfg.max_removals_per_update)
        ctx = ApplyContext(signals=batch.signals, today=prepared.today, patterns=self.patterns,
                           conversation=Conversation.of([m.text for m in unseen if m.role == "user"],
                                                        [m.text for m in unseen if m.role == "assistant"]),
                           placeholders=PLACEHOLDERS, source=f"auto:{batch.key.session_id}")
        report = ApplyReport(where=f"{batch.key.user_id}/{batch.key.session_id}")
        for _ in range(plan.invalid_items):
            report.reject("invalid_item", "an item of the answer")
        # what the update removes (factsToRemove, merged-away sources, expired, evicted) goes to the
        # place's trash as one item, restorable from the page like a person's delete
        with prepared.place.transaction(trash="auto") as txn:
            apply_plan(plan, txn, prepared.snapshot, rules, ctx, report)
            txn.watermarks.mark(batch.key.watermark_id, [m.key for m in unseen], time.time())
            if report.changed or report.rejected or report.merges_proposed:
                txn.watermarks.record(UpdateRecord.of(report, now_iso(), batch.key.session_id))
        log.info("auto memory %s: +%d facts, %d refreshed, %d merged, %d confirmed, %d removed, %d expired, "
                 "%d evicted, profile %s, refused %d", batch.key, len(report.added), len(report.refreshed),
                 len(report.merged), len(report.confirmed), len(report.removed), len(report.expired),
                 len(report.trimmed), [k.value for k in report.profile_updated], sum(report.rejected.values()))
        proposed = len(plan.new_facts) + len(plan.removals) + plan.invalid_items
        if proposed >= 4 and sum(report.rejected.values()) * 2 > proposed:
            log.warning("auto memory %s: most proposed changes were refused (%s); check the extraction model",
                        batch.key, dict(report.rejected))
        if self._rejected is not None and report.rejected:
            self._rejected(report)
        return UpdateResult(UpdateStatus.APPLIED, batch.key, len(unseen), report, prompt_tokens=prompt_tokens,
                            completion_tokens=completion_tokens, combined=combined)
