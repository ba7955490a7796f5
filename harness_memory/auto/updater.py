"""Updater: ONE light-model call per batch — current auto memory + the unseen conversation in,
a JSON update out — then the rules of ``apply`` under the place lock.

Why one call with the whole memory in it: the model must see what is already known to avoid
restating it, to decide what is outdated (``factsToRemove``) and to merge profile summaries.
Why fail closed: a small model sometimes answers prose, truncated JSON or the wrong shape; an
answer that is not a JSON object of the expected shape changes NOTHING (not even the
watermark, so the batch is retried up to ``auto.max_attempts``). Inside a well-shaped answer,
an individual item that is invalid (unknown category, no content, non-numeric confidence) is
dropped on its own; the other items still apply.

The watermark (``store.Watermarks``): per session, the keys of messages already sent to the
extractor, so a re-delivered run or a retried batch never sends a message twice.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..config import AutoMemoryConfig
from ..llm import LightModel, LLMError, extract_json, warn_no_light_model
from ..tokens import count_tokens, truncate_to_tokens
from .apply import ApplyReport, ApplyRules, NewFact, UpdatePlan, apply_plan
from .model import Batch, CapturedMessage, Category, ProfileKey, QueueKey, Signals
from .store import AutoPlace, AutoView

log = logging.getLogger(__name__)

USER_MESSAGE_TOKENS = 1500
#: Token caps tried in turn for each assistant reply when the conversation is over budget (0 = left out).
ASSISTANT_CAPS = (600, 120, 40, 0)

SYSTEM_PROMPT = """You maintain a long-term memory about one user of an AI assistant. From the \
user's conversations you keep a short profile and a list of specific facts that will help the \
assistant serve this user in FUTURE conversations (so the user never has to repeat themselves). \
You answer with one JSON object and nothing else."""

INSTRUCTIONS = """Update the memory from the new conversation.

1. Profile sections. Set "shouldUpdate": true only for a section the conversation adds to or \
changes; then "summary" is the complete new text of that section (1-3 sentences, merging what is \
still true from the current summary). Leave other sections with "shouldUpdate": false.
   - workContext: role, company/team, tech stack, current projects.
   - personalContext: languages, communication style and preferences, interests.
   - topOfMind: what the user is focused on right now (current tasks, deadlines).
   - recentMonths: what the user has been doing over the last months.
   - earlierContext: older history that still matters.
   - longTermBackground: stable background (education, career, long-held expertise).
2. newFacts: specific, durable facts, one per item, self-contained (readable without this \
conversation), in the language the user used. Do NOT repeat a fact already in memory (even \
reworded) unless the user confirmed it again — then repeat it with a higher confidence.
   - category: preference | knowledge | context | behavior | goal | correction
   - confidence: 0.9-1.0 stated explicitly ("I am a frontend engineer"); 0.7-0.8 strongly \
implied; 0.5-0.6 a weak guess. Facts below {threshold} are discarded, so do not bother with guesses.
   - correction: when the user says the assistant got something wrong, record the RIGHT way as a \
"correction" fact (confidence >= 0.95) and put the wrong approach in "sourceError".
3. factsToRemove: ids (from the current memory) of facts the conversation shows are wrong or \
no longer true. Only ids that appear in the current memory.
4. Never store: secrets (passwords, keys, tokens), one-off details of the current task, files the \
user uploaded or any path such as /mnt/user-data/... (they are gone after this session), or \
anything about the assistant itself. Convert relative dates to absolute ones (today is {today}).

Answer with exactly this JSON shape:
{{"user": {{"workContext": {{"summary": "...", "shouldUpdate": true}}, "personalContext": {{"summary": "", \
"shouldUpdate": false}}, "topOfMind": {{"summary": "", "shouldUpdate": false}}}},
 "history": {{"recentMonths": {{"summary": "", "shouldUpdate": false}}, "earlierContext": {{"summary": "", \
"shouldUpdate": false}}, "longTermBackground": {{"summary": "", "shouldUpdate": false}}}},
 "newFacts": [{{"content": "...", "category": "preference", "confidence": 0.9}}, {{"content": "...", \
"category": "correction", "confidence": 0.95, "sourceError": "what the assistant did wrong"}}],
 "factsToRemove": ["fact-..."]}}"""


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


# -- the answer ---------------------------------------------------------------------------------
class _Section(BaseModel):
    model_config = ConfigDict(extra="ignore")
    summary: str | None = None
    shouldUpdate: bool = False


class _Answer(BaseModel):
    """Top-level shape; a wrong type here rejects the whole answer (fail closed)."""

    model_config = ConfigDict(extra="ignore")
    user: dict[str, Any] | None = None
    history: dict[str, Any] | None = None
    newFacts: list[Any] | None = None
    factsToRemove: list[Any] | None = None


_ALIASES = {"new_facts": "newFacts", "facts": "newFacts", "facts_to_remove": "factsToRemove",
            "remove": "factsToRemove", "profile": "user"}


def parse_answer(text: str) -> UpdatePlan | None:
    """The validated plan in a model answer, or None when it is unusable (change nothing)."""
    data = extract_json(text)
    if not isinstance(data, dict):
        return None
    data = {_ALIASES.get(k, k): v for k, v in data.items()}
    # Only the documented top-level keys count. This also guards against ``extract_json``
    # returning an INNER object of a truncated answer (a section or a fact item has none of them).
    if not {"user", "history", "newFacts", "factsToRemove"} & data.keys():
        return None
    try:
        answer = _Answer.model_validate(data)
    except ValidationError:
        return None
    plan = UpdatePlan()
    sections: dict[str, Any] = {**(answer.history or {}), **(answer.user or {})}
    for key in ProfileKey:
        raw = sections.get(key.value)
        if raw is None:
            continue
        try:
            section = _Section.model_validate(raw)
        except ValidationError:
            plan.invalid_items += 1
            continue
        if section.shouldUpdate and section.summary and section.summary.strip():
            plan.profile[key] = section.summary.strip()
    for item in answer.newFacts or []:
        fact = _parse_fact(item)
        if fact is None:
            plan.invalid_items += 1
        else:
            plan.new_facts.append(fact)
    for item in answer.factsToRemove or []:
        fid = item.get("id") if isinstance(item, dict) else item
        if isinstance(fid, str) and fid.strip():
            plan.remove_ids.append(fid.strip())
        else:
            plan.invalid_items += 1
    return plan


def _parse_fact(item: object) -> NewFact | None:
    if not isinstance(item, dict):
        return None
    content = item.get("content")
    category = Category.parse(item.get("category"))
    if not isinstance(content, str) or not content.strip() or category is None:
        return None
    raw_conf = item.get("confidence")
    confidence: float | None = None
    if raw_conf is not None:
        if isinstance(raw_conf, bool) or not isinstance(raw_conf, int | float | str):
            return None
        try:
            confidence = float(raw_conf)
        except ValueError:
            return None
        if not math.isfinite(confidence):
            return None
    error = item.get("sourceError", item.get("source_error"))
    return NewFact(content.strip(), category, confidence, error.strip() if isinstance(error, str) else None)


# -- the prompt ---------------------------------------------------------------------------------
def memory_json(view: AutoView) -> str:
    facts = sorted(view.facts.values(), key=lambda f: (-f.confidence, f.id))
    data = {
        "profile": view.profile.to_json(),
        "facts": [{"id": f.id, "category": f.category.value, "confidence": round(f.confidence, 2),
                   "content": f.content, **({"sourceError": f.source_error} if f.source_error else {})}
                  for f in facts],
    }
    return json.dumps(data, ensure_ascii=False, indent=1)


def format_conversation(messages: list[CapturedMessage], max_tokens: int) -> str:
    """``User: …`` / ``Assistant: …`` lines within ``max_tokens``.

    Facts come from the user's words, so the assistant's replies give way first: each message
    is bounded, then replies are cut to ``ASSISTANT_CAPS`` in turn, then left out; only then are
    the oldest user messages dropped (the queue makes a batch due before that should happen)."""
    def render(assistant_cap: int) -> list[str]:
        lines = []
        for m in messages:
            cap = USER_MESSAGE_TOKENS if m.role == "user" else assistant_cap
            if cap <= 0:
                continue
            # a token is rarely longer than 8 characters: cut first so counting stays cheap
            text = truncate_to_tokens(m.text[: cap * 8], cap)
            if len(text) < len(m.text):
                text += " …"
            lines.append(("User: " if m.role == "user" else "Assistant: ") + text)
        return lines

    for cap in ASSISTANT_CAPS:
        lines = render(cap)
        total = count_tokens("\n\n".join(lines))
        if total <= max_tokens:
            break
    notes = ["(the assistant's replies are left out)"] if cap <= 0 and any(
        m.role == "assistant" for m in messages) else []
    limit = max_tokens - (count_tokens(notes[0]) + 2 if notes else 0)
    if total > limit:
        limit -= count_tokens("(… 1000 earlier user messages omitted)") + 2
    dropped = 0
    while total > limit and len(lines) > 1:
        total -= count_tokens(lines.pop(0)) + 1
        dropped += 1
    while True:  # the estimate above is per line; settle on the exact count of the whole text
        head = notes + ([f"(… {dropped} earlier user messages omitted)"] if dropped else [])
        out = "\n\n".join(head + lines)
        if count_tokens(out) <= max_tokens or len(lines) <= 1:
            return out
        lines.pop(0)
        dropped += 1


def build_messages(view: AutoView, messages: list[CapturedMessage], signals: Signals, *, threshold: float,
                   today: dt.date, max_conversation_tokens: int) -> list[dict[str, str]]:
    notes = []
    if signals.correction:
        hints = "; ".join(f"«{h}»" for h in signals.correction_hints) or "see the conversation"
        notes.append("The user CORRECTED the assistant in this conversation (" + hints + "). Record the "
                     "right way as a correction fact with confidence >= 0.95 and the mistake in sourceError.")
    if signals.reinforcement:
        notes.append("The user CONFIRMED an approach the assistant took. Record it (or repeat the existing "
                     "fact) as a preference or behavior with high confidence.")
    body = "\n\n".join([
        "<current_memory>\n" + memory_json(view) + "\n</current_memory>",
        "<conversation>\n" + format_conversation(messages, max_conversation_tokens) + "\n</conversation>",
        *notes,
        INSTRUCTIONS.format(threshold=threshold, today=today.isoformat()),
    ])
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": body}]


# -- the updater ----------------------------------------------------------------------------------
class Updater:
    """Runs one batch against one place. Stateless apart from its settings."""

    def __init__(self, model: Callable[[], LightModel | None], config: AutoMemoryConfig, *,
                 today: Callable[[], dt.date] = dt.date.today) -> None:
        self._model = model
        self.config = config
        self._today = today

    def run(self, place: AutoPlace, batch: Batch) -> UpdateResult:
        cfg = self.config
        wm_id = batch.key.watermark_id
        snapshot = place.read()
        seen = place.read_watermarks().seen(wm_id)
        unseen = [m for m in batch.messages if m.key not in seen]
        if not any(m.role == "user" for m in unseen):
            return UpdateResult(UpdateStatus.SKIPPED, batch.key, reason="no new user messages")
        model = self._model()
        if model is None:
            warn_no_light_model("auto memory", "conversations are not learned from")
            return UpdateResult(UpdateStatus.SKIPPED, batch.key, reason="no model")
        messages = build_messages(snapshot, unseen, batch.signals, threshold=cfg.fact_confidence_threshold,
                                  today=self._today(), max_conversation_tokens=cfg.max_conversation_tokens)
        try:
            answer = model.complete(messages, json_mode=True, max_tokens=cfg.max_output_tokens,
                                    purpose="extraction")
        except LLMError as exc:
            log.warning("auto-memory extraction for %s failed (%s); will retry", batch.key, exc)
            return UpdateResult(UpdateStatus.RETRY, batch.key, len(unseen), reason=str(exc))
        plan = parse_answer(answer.text)
        if plan is None:
            log.warning("auto-memory extraction for %s: unusable answer (%d chars), nothing changed",
                        batch.key, len(answer.text))
            log.debug("unusable extraction answer: %.200r", answer.text)
            return UpdateResult(UpdateStatus.RETRY, batch.key, len(unseen), reason="unusable answer",
                                prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens)
        rules = ApplyRules(threshold=cfg.fact_confidence_threshold, max_facts=cfg.max_facts)
        with place.transaction() as txn:
            report = apply_plan(plan, txn, snapshot, rules, source=f"auto:{batch.key.session_id}",
                                correction_signal=batch.signals.correction)
            txn.watermarks.mark(wm_id, [m.key for m in unseen], time.time())
        log.info("auto memory %s: +%d facts, %d refreshed, %d removed, %d trimmed, profile %s",
                 batch.key, len(report.added), len(report.refreshed), len(report.removed), len(report.trimmed),
                 [k.value for k in report.profile_updated])
        return UpdateResult(UpdateStatus.APPLIED, batch.key, len(unseen), report,
                            prompt_tokens=answer.prompt_tokens, completion_tokens=answer.completion_tokens)
