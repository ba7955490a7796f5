"""Run the quality scenarios against the configured agent and light models and judge the memory.

Why judged here, from the model's raw answers AND from what was stored: a harness that read only
our counters would report 0 failures for a model whose failures our doubt rules hid. So every
failure is counted twice — what the model PROPOSED (placeholder saves and facts, invented or
reversed corrections, removals of facts nobody contradicted; read from the recording proxy) and
what reached memory (the files, summary and facts in the store). The acceptance is on the
second: placeholders stored, summaries lost, wrong corrections stored and facts wrongly removed
must be 0 whatever the model proposes.

One scenario (``scenarios.py``), for a user of its own:
1. two facts the user had already (``SEED_FACTS``) are put in auto memory;
2. session 1: the user's turns through ``build_agent`` (one agno Agent with its history);
3. the session summary is made (forced) and the auto-memory extraction runs (flushed);
4. session 2: a new agent answers the scenario's question with what memory gives it; the answer
   counts as "used next session" only when it holds the fact the question asks for
   (``Scenario.answer``, never a word of the question itself); session 2's extraction is run and
   judged like session 1's (every extraction of a scenario is judged);
5. recall: a place with five distractor memories and the labelled one; recall is asked the
   question with the model step forced, and its pick is compared with the label.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agno.db.in_memory import InMemoryDb

from harness_memory import build_agent
from harness_memory.auto.model import Category
from harness_memory.auto.store import AutoPlace
from harness_memory.config import MemoryConfig
from harness_memory.examples import copied_example
from harness_memory.llm import extract_json
from harness_memory.memdir import parse_memory
from harness_memory.recall.service import recall
from harness_memory.services import MemoryServices
from harness_memory.session.binding import bind_session_id
from harness_memory.session.records import ExtractStatus

from .merges import MergeCounts, merge_counts, merge_line
from .proxy import Call, RecordingProxy
from .scenarios import DISTRACTORS, SEED_FACTS, Scenario, pick

PURPOSES = ("agent", "summary", "extraction", "recall", "other")
_NEGATION = re.compile(r"(?:\bdon'?t|\bdo not|\bnot|\bnever|\bno|\bstop|\binstead of|\brather than|\bover|\bavoid"
                       r"|\bwithout|不要用|不要|别用|别|不用|而不是|不是|禁止|不许|代替)\W*(?:use|using|用|使用)?\W*$",
                       re.IGNORECASE)


@dataclass
class ScenarioResult:
    """What one scenario showed. ``*_proposed``: what the model answered; ``*_stored``: what memory kept."""

    key: str
    lang: str
    kind: str
    remember_asked: bool
    save_calls: int = 0
    no_tool_call: bool = False
    saved_valid: bool = False  # a memory saved through the tools that holds the scenario's fact
    saves_off_fact: int = 0  # valid memories saved through the tools that do not hold it
    wrong_saves_stored: int = 0  # saved memories putting forward what the user said not to use
    invented_saves_stored: int = 0  # saved memories naming what the user never said
    description_faithful: bool = False
    placeholder_saves_proposed: int = 0
    placeholder_saves_stored: int = 0
    used_next_session: bool = False
    read_calls: int = 0
    summary_made: bool = False
    summary_lost: bool = False
    summary_facts: int = 0
    summary_facts_of: int = 0
    extraction_answers: int = 0
    extraction_parsed: int = 0
    facts_learned: int = 0
    facts_of: int = 0
    placeholder_facts_proposed: int = 0
    placeholder_facts_stored: int = 0
    corrections_proposed: int = 0
    wrong_corrections_proposed: int = 0
    wrong_corrections_stored: int = 0
    correction_right: bool | None = None
    wrong_removals_proposed: int = 0
    facts_wrongly_removed: int = 0
    merges: MergeCounts = field(default_factory=MergeCounts)
    recall_hit: bool | None = None
    #: Facts naming something (a capitalised or CamelCase word, a version) the user never said in
    #: either session: invented ("RDataFrame") or taken from the assistant's words ("Python").
    unsupported_facts_proposed: int = 0
    unsupported_facts_stored: int = 0
    #: Tool calls the agent model wrote as text: run as real calls / left as text (model.text_tool_calls).
    text_calls_recovered: int = 0
    text_calls_rejected: int = 0
    timeouts: int = 0
    errors: list[str] = field(default_factory=list)


@dataclass
class Report:
    """All scenarios of one run, and every model call the proxy saw."""

    agent_model: str
    light_model: str
    started: str
    seconds: float
    results: list[ScenarioResult]
    calls: list[Call]

    def totals(self) -> dict[str, Any]:
        """The totals the README and the acceptance read."""
        r = self.results
        remember = [x for x in r if x.remember_asked]
        return {
            "scenarios": len(r),
            "remember_asked": len(remember),
            "saved_valid": sum(x.saved_valid for x in remember),
            "no_tool_call": sum(x.no_tool_call for x in remember),
            "description_faithful": sum(x.description_faithful for x in remember),
            "saves_off_fact": sum(x.saves_off_fact for x in r),
            "wrong_saves_stored": sum(x.wrong_saves_stored for x in r),
            "invented_saves_stored": sum(x.invented_saves_stored for x in r),
            "placeholder_saves_proposed": sum(x.placeholder_saves_proposed for x in r),
            "placeholder_saves_stored": sum(x.placeholder_saves_stored for x in r),
            "used_next_session": sum(x.used_next_session for x in r),
            "read_calls": sum(x.read_calls for x in r),
            "summaries_made": sum(x.summary_made for x in r),
            "summaries_lost": sum(x.summary_lost for x in r),
            "summary_facts": f"{sum(x.summary_facts for x in r)}/{sum(x.summary_facts_of for x in r)}",
            "extraction_parsed": f"{sum(x.extraction_parsed for x in r)}/{sum(x.extraction_answers for x in r)}",
            "facts_learned": f"{sum(x.facts_learned for x in r)}/{sum(x.facts_of for x in r)}",
            "placeholder_facts_proposed": sum(x.placeholder_facts_proposed for x in r),
            "placeholder_facts_stored": sum(x.placeholder_facts_stored for x in r),
            "wrong_corrections_proposed": sum(x.wrong_corrections_proposed for x in r),
            "wrong_corrections_stored": sum(x.wrong_corrections_stored for x in r),
            "corrections_right": f"{sum(bool(x.correction_right) for x in r)}/"
                                 f"{sum(x.correction_right is not None for x in r)}",
            "wrong_removals_proposed": sum(x.wrong_removals_proposed for x in r),
            "facts_wrongly_removed": sum(x.facts_wrongly_removed for x in r),
            "recall_hits": f"{sum(bool(x.recall_hit) for x in r)}/{sum(x.recall_hit is not None for x in r)}",
            "unsupported_facts_proposed": sum(x.unsupported_facts_proposed for x in r),
            "unsupported_facts_stored": sum(x.unsupported_facts_stored for x in r),
            "text_calls_recovered": sum(x.text_calls_recovered for x in r),
            "text_calls_rejected": sum(x.text_calls_rejected for x in r),
            "timeouts": sum(x.timeouts for x in r),
        }

    def failures(self) -> dict[str, int]:
        """The counts the acceptance wants at 0 on any model (what reached memory)."""
        t = self.totals()
        return {k: int(t[k]) for k in ("placeholder_saves_stored", "wrong_saves_stored", "invented_saves_stored",
                                       "placeholder_facts_stored",
                                       "summaries_lost", "wrong_corrections_stored", "facts_wrongly_removed",
                                       "unsupported_facts_stored")}

    def call_stats(self) -> dict[str, dict[str, float]]:
        """Per purpose: calls, client timeouts, mean/max seconds, mean prompt and completion tokens."""
        out: dict[str, dict[str, float]] = {}
        for purpose in PURPOSES:
            calls = [c for c in self.calls if c.purpose == purpose]
            if not calls:
                continue
            secs = [c.seconds for c in calls]
            out[purpose] = {"calls": len(calls), "gave_up": sum(c.client_gave_up for c in calls),
                            "mean_s": statistics.fmean(secs), "p50_s": statistics.median(secs), "max_s": max(secs),
                            "prompt_tokens": statistics.fmean(c.prompt_tokens for c in calls),
                            "completion_tokens": statistics.fmean(c.completion_tokens for c in calls)}
        return out


# -- judging ------------------------------------------------------------------------------------
def _positive(text: str, word: str) -> bool:
    """Whether ``word`` occurs in ``text`` not governed by a negation ("don't use X", "instead of X")."""
    low = text.casefold()
    start = low.find(word)
    while start >= 0:
        if not _NEGATION.search(low[max(0, start - 24) : start]):
            return True
        start = low.find(word, start + 1)
    return False


def correction_is_wrong(content: str, scenario: Scenario) -> bool:
    """A correction is right only when the user corrected something and it says to use what the
    user wants and never says to use what they rejected; anything else (invented, reversed,
    unrelated) is wrong."""
    if scenario.correction is None:
        return True
    want, avoid = scenario.correction
    return not (_positive(content, want) and not _positive(content, avoid))


def _touches_correction(content: str, scenario: Scenario) -> bool:
    if scenario.correction is None:
        return False
    low = content.casefold()
    return any(w in low for w in scenario.correction)


_NAME_WORD = re.compile(r"(?<![\w.-])(?:[A-Za-z]*[A-Z][a-z0-9]*[A-Z0-9][A-Za-z0-9]*|[A-Z][a-z]{2,}|[A-Za-z]*\d[\w.]*)"
                        r"(?![\w-])")


def unsupported(content: str, user_text: str) -> list[str]:
    """The names in a fact (CamelCase or capitalised words past the first, words with digits) that the
    user never wrote: the fact did not come from the user."""
    said = user_text.casefold()
    words = [m.group(0) for m in _NAME_WORD.finditer(content) if m.start() > 0 or m.group(0).isupper()
             or any(ch.isdigit() for ch in m.group(0))]
    return [w for w in words if w.casefold().rstrip(".") not in said]


def user_words(scenario: Scenario) -> str:
    """Everything the user says in the scenario (both sessions)."""
    return "\n".join([*scenario.turns, scenario.question])


def judge_extraction(answer: str, scenario: Scenario, seed_ids: set[str]) -> dict[str, int]:
    """What one raw extraction answer proposed: parsed?, placeholder facts, corrections (wrong ones),
    removals of seed facts (which nothing in any scenario contradicts) and facts naming what the
    user never said."""
    parsed = extract_json(answer, lambda v: isinstance(v, dict))
    out = {"parsed": 0, "placeholders": 0, "corrections": 0, "wrong_corrections": 0, "wrong_removals": 0,
           "unsupported": 0}
    if not isinstance(parsed, dict):
        return out
    out["parsed"] = 1
    for item in parsed.get("newFacts") or []:
        if not isinstance(item, dict):
            continue
        content = str(item.get("content") or "")
        error = str(item.get("sourceError") or "")
        if copied_example(content) or (error and copied_example(error)):
            out["placeholders"] += 1
        out["unsupported"] += bool(unsupported(content, user_words(scenario)))
        is_correction = str(item.get("category", "")).lower() == "correction"
        if is_correction or _touches_correction(content, scenario):
            out["corrections"] += 1
            out["wrong_corrections"] += correction_is_wrong(content, scenario)
    for item in parsed.get("factsToRemove") or []:
        fid = item.get("id") if isinstance(item, dict) else item
        out["wrong_removals"] += str(fid) in seed_ids
    return out


# -- running ------------------------------------------------------------------------------------
class Harness:
    """Runs scenarios with one ``MemoryServices`` whose models go through recording proxies."""

    def __init__(self, config: MemoryConfig, *, root: Path | None = None) -> None:
        model = config.model
        agent_url = model.base_url
        light_url = model.light_base_url or model.base_url
        if not agent_url or not (model.light_model or model.model) or not model.model:
            raise SystemExit("configure the models first: HARNESS_MEMORY_MODEL and HARNESS_MEMORY_BASE_URL "
                             "(and HARNESS_MEMORY_LIGHT_MODEL / HARNESS_MEMORY_LIGHT_BASE_URL for another light model)")
        self.proxies: dict[str, RecordingProxy] = {}
        for url in {agent_url, light_url}:
            assert url is not None
            self.proxies[url] = RecordingProxy(url).start()
        self._tmp = tempfile.TemporaryDirectory(prefix="hm-quality-") if root is None else None
        root = root or Path(self._tmp.name)  # type: ignore[union-attr]
        data = config.model_dump()
        data["store"] = {"backend": "local", "local_root": str(root / ".harness")}
        data["redis"] = {}
        data["agent"]["snapshots_dir"] = str(root / "no-snapshots")
        data["model"]["base_url"] = self.proxies[agent_url].base_url
        data["model"]["light_base_url"] = self.proxies[light_url].base_url
        # Summaries and extractions are made when the harness says (one each per scenario): high
        # thresholds and a long debounce keep the hooks from starting them on their own.
        data["session"].update(enabled=True, first_threshold_tokens=10**8, update_threshold_tokens=10**8)
        data["auto"].update(enabled=True, debounce_seconds=3600.0, max_wait_seconds=7200.0, min_interval_seconds=0.0,
                            combine_with_summary=False, max_attempts=1)
        data["recall"].update(enabled=True)
        self.config = MemoryConfig.model_validate(data)
        self.services = MemoryServices.from_config(self.config)
        #: Longest wait for a call our client gave up on (the server is still working on it).
        self.settle_seconds = max(self.config.model.model_timeout, self.config.model.light_timeout) * 2 + 30

    def close(self) -> None:
        self.services.close()
        for proxy in self.proxies.values():
            proxy.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def calls(self, since: float = 0.0) -> list[Call]:
        """Every call started at or after ``since`` (wall time), oldest first."""
        return sorted((c for p in self.proxies.values() for c in p.snapshot() if c.started >= since),
                      key=lambda c: c.started)

    def settle(self) -> None:
        """Wait for calls our clients gave up on to end on the server (they are recorded then)."""
        for proxy in self.proxies.values():
            proxy.wait_idle(self.settle_seconds)

    def run(self, scenarios: list[Scenario], progress: Any = None) -> Report:
        started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        t0 = time.monotonic()
        results = []
        for scenario in scenarios:
            if progress:
                progress(f"scenario {scenario.key} …")
            results.append(self.run_one(scenario))
            if progress:
                progress(f"scenario {scenario.key}: {json.dumps(asdict(results[-1]), ensure_ascii=False)}")
        light = self.config.model.light_model or self.config.model.model or ""
        return Report(self.config.model.model or "", light, started, time.monotonic() - t0, results, self.calls())

    def run_one(self, s: Scenario) -> ScenarioResult:
        res = ScenarioResult(s.key, s.lang, s.kind, s.remember)
        user = f"eval-{s.key}"
        started = time.time()
        stats = getattr(self.services.agent_model(), "text_call_stats", None)
        before = (stats.total("recovered"), stats.rejected()) if stats is not None else (0, 0)
        seed_ids = self._seed(user)
        self._session_one(s, user, res)
        self._summarise(s, user, res)
        second = self._extract(s, user, res, seed_ids, started)
        res.facts_of = len(s.keywords)
        res.facts_learned = s.words_found("\n".join(f.content for f in self.services.auto_memory().list_facts(user)))
        self._session_two(s, user, res)
        self._extract(s, user, res, seed_ids, second)  # session 2's extraction is judged too
        self._recall(s, user, res)
        self.settle()
        res.timeouts = sum(c.client_gave_up for c in self.calls(since=started))
        if stats is not None:
            res.text_calls_recovered = stats.total("recovered") - before[0]
            res.text_calls_rejected = stats.rejected() - before[1]
        return res

    def _seed(self, user: str) -> set[str]:
        """The facts the user already had, stored as auto memory had learned them (so a model's
        removal is judged by the rules for learned facts, not the stricter ones for manual facts)."""
        auto = self.services.auto_memory()
        ids = set()
        for content in SEED_FACTS:
            fact = auto.add_fact(user, content, Category.CONTEXT, 0.9)
            with AutoPlace(self.services.user_auto_dir(user)).transaction() as txn:
                stored = txn.view.facts[fact.id]
                stored.source = "auto:seed"
                txn.put_fact(stored)
            ids.add(fact.id)
        return ids

    def _session_one(self, s: Scenario, user: str, res: ScenarioResult) -> None:
        agent = build_agent(user, session_id=f"{s.key}-1", services=self.services, query=s.turns[0],
                            db=InMemoryDb(), add_history_to_context=True)
        for turn in s.turns:
            try:
                out = agent.run(turn)
            except Exception as exc:  # a model failure is a finding, not a crash of the harness
                res.errors.append(f"session 1: {type(exc).__name__}: {exc}"[:300])
                continue
            for tool in out.tools or []:
                if tool.tool_name == "save_file":
                    res.save_calls += 1
                    if "copied from the example" in str(tool.result):
                        res.placeholder_saves_proposed += 1
            if getattr(out, "status", None) is not None and str(out.status).lower().endswith("error"):
                res.errors.append(f"session 1: run {out.status}: {str(out.content)[:200]}")
        res.no_tool_call = s.remember and res.save_calls == 0
        own = self.services.user_agent_dir(user)
        for entry in own.list_entries():
            try:
                memory = parse_memory(own.read(entry.file).text)
            except Exception as exc:
                res.errors.append(f"stored {entry.file} unreadable: {exc}")
                continue
            if copied_example(memory.description) or copied_example(memory.body):
                res.placeholder_saves_stored += 1
                continue
            whole = f"{memory.name}\n{memory.description}\n{memory.body}"
            if s.correction is not None and _touches_correction(whole, s) and correction_is_wrong(whole, s):
                res.wrong_saves_stored += 1
                continue
            said = user_words(s)  # each line judged alone: a line's first word is not taken for a name
            claims = [memory.description, *memory.body.splitlines(),
                      *(f"{k} is {v}" for k, v in memory.extra.items())]  # "owner: John Doe" is a claim
            if any(unsupported(line.strip(" -*#>\t"), said) for line in claims):
                res.invented_saves_stored += 1
                continue
            if not s.has_fact(whole):  # a save, but not of what the user asked to keep
                res.saves_off_fact += 1
                continue
            res.saved_valid = True
            if s.words_found(memory.description) > 0:  # the one line says something of the fact
                res.description_faithful = True

    def _summarise(self, s: Scenario, user: str, res: ScenarioResult) -> None:
        manager = self.services.session_manager()
        session = bind_session_id(user, f"{s.key}-1")
        manager.flush(timeout=60)  # the hooks buffer runs in the background: all of session 1 first
        result = manager.maybe_extract_sync(session, force=True)
        res.summary_made = result.status is ExtractStatus.EXTRACTED
        res.summary_lost = result.status is ExtractStatus.FAILED
        if not res.summary_made:
            res.errors.append(f"summary {result.status.value}: {result.error}"[:300])
        summary = manager.get_summary_sync(session) or ""
        res.summary_facts_of = len(s.keywords)
        res.summary_facts = s.words_found(summary) if res.summary_made else 0

    def _extract(self, s: Scenario, user: str, res: ScenarioResult, seed_ids: set[str], started: float) -> float:
        """Run what auto memory has pending, judge every extraction answer since ``started`` and what
        memory now holds; returns when this judging ended (the next call judges from there)."""
        auto = self.services.auto_memory()
        auto.flush(timeout=None)
        self.settle()
        until = time.time()
        for call in self.calls(since=started):
            if call.purpose != "extraction" or call.status != 200 or call.started >= until:
                continue
            res.extraction_answers += 1
            judged = judge_extraction(call.content, s, seed_ids)
            res.extraction_parsed += judged["parsed"]
            res.placeholder_facts_proposed += judged["placeholders"]
            res.corrections_proposed += judged["corrections"]
            res.wrong_corrections_proposed += judged["wrong_corrections"]
            res.wrong_removals_proposed += judged["wrong_removals"]
            res.unsupported_facts_proposed += judged["unsupported"]
        facts = auto.list_facts(user)
        res.unsupported_facts_stored = sum(bool(unsupported(f.content, user_words(s))) for f in facts
                                           if f.id not in seed_ids)
        res.placeholder_facts_stored = sum(1 for f in facts if copied_example(f.content)
                                           or (f.source_error and copied_example(f.source_error)))
        judged_corrections = [f for f in facts if f.category is Category.CORRECTION
                              or _touches_correction(f.content, s)]
        res.wrong_corrections_stored = sum(correction_is_wrong(f.content, s) for f in judged_corrections)
        if s.correction is not None:
            res.correction_right = any(not correction_is_wrong(f.content, s) for f in judged_corrections)
        res.facts_wrongly_removed = len(seed_ids - {f.id for f in facts})
        res.merges = merge_counts(auto.results, user)
        return until

    def _session_two(self, s: Scenario, user: str, res: ScenarioResult) -> None:
        agent = build_agent(user, session_id=f"{s.key}-2", services=self.services, query=s.question)
        try:
            out = agent.run(s.question)
        except Exception as exc:
            res.errors.append(f"session 2: {type(exc).__name__}: {exc}"[:300])
            return
        res.read_calls = sum(1 for t in out.tools or [] if t.tool_name == "read_file")
        answer = str(out.content or "")
        res.used_next_session = s.answered(answer) and (s.correction is None or not correction_is_wrong(answer, s))

    def _recall(self, s: Scenario, user: str, res: ScenarioResult) -> None:
        place_user = f"recall-{s.key}"
        own = self.services.user_agent_dir(place_user)
        own.save_many([(m.file, m.render()) for m in (*DISTRACTORS, s.recall_file)])
        cfg = self.services.config.recall
        old = (cfg.model_above, cfg.confident_margin)
        # force the model step (no "few candidates" or "confident ranking" skip): this checks the model's pick
        cfg.model_above, cfg.confident_margin = 0, None
        try:
            result = recall(self.services, place_user, "default", s.question)
        except Exception as exc:
            res.errors.append(f"recall: {type(exc).__name__}: {exc}"[:300])
            return
        finally:
            cfg.model_above, cfg.confident_margin = old
        res.recall_hit = s.recall_file.file in result.chosen


# -- the report -----------------------------------------------------------------------------------
def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


COLUMNS = (("saved_valid", "saved the fact"), ("saves_off_fact", "saves off fact / wrong / invented"),
           ("no_tool_call", "no tool call"), ("description_faithful", "desc. faithful"),
           ("placeholder_saves_proposed", "placeholder saves proposed/stored"),
           ("used_next_session", "used next session"), ("read_calls", "reads"),
           ("summary_made", "summary"), ("summary_facts", "summary facts"),
           ("extraction_parsed", "extractions parsed"), ("facts_learned", "facts learned"),
           ("placeholder_facts_proposed", "placeholder facts proposed/stored"),
           ("wrong_corrections_proposed", "wrong corrections proposed/stored"),
           ("wrong_removals_proposed", "wrong removals proposed/done"),
           ("unsupported_facts_proposed", "facts not from the user proposed/stored"),
           ("text_calls_recovered", "text calls recovered/left"), ("recall_hit", "recall pick"),
           ("timeouts", "timeouts"))


def render_markdown(report: Report, *, note: str = "") -> str:
    """The ``bench/QUALITY.md`` section of one run."""
    lines = [f"## {report.agent_model} (agent) / {report.light_model} (light) — {report.started}", ""]
    if note:
        lines += [note, ""]
    lines += ["| scenario | " + " | ".join(h for _, h in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for r in report.results:
        cells = []
        for key, _ in COLUMNS:
            if key == "placeholder_saves_proposed":
                cells.append(f"{r.placeholder_saves_proposed}/{r.placeholder_saves_stored}")
            elif key == "placeholder_facts_proposed":
                cells.append(f"{r.placeholder_facts_proposed}/{r.placeholder_facts_stored}")
            elif key == "wrong_corrections_proposed":
                cells.append(f"{r.wrong_corrections_proposed}/{r.wrong_corrections_stored}")
            elif key == "wrong_removals_proposed":
                cells.append(f"{r.wrong_removals_proposed}/{r.facts_wrongly_removed}")
            elif key == "unsupported_facts_proposed":
                cells.append(f"{r.unsupported_facts_proposed}/{r.unsupported_facts_stored}")
            elif key == "saves_off_fact":
                cells.append(f"{r.saves_off_fact}/{r.wrong_saves_stored}/{r.invented_saves_stored}")
            elif key == "text_calls_recovered":
                cells.append(f"{r.text_calls_recovered}/{r.text_calls_rejected}")
            elif key == "summary_facts":
                cells.append(f"{r.summary_facts}/{r.summary_facts_of}")
            elif key == "facts_learned":
                cells.append(f"{r.facts_learned}/{r.facts_of}")
            elif key == "extraction_parsed":
                cells.append(f"{r.extraction_parsed}/{r.extraction_answers}")
            elif key in ("saved_valid", "no_tool_call", "description_faithful") and not r.remember_asked:
                cells.append("–")
            elif key == "summary_made":
                cells.append("lost" if r.summary_lost else _cell(r.summary_made))
            else:
                cells.append(_cell(getattr(r, key)))
        lines.append(f"| {r.key} | " + " | ".join(cells) + " |")
    lines += ["", "Totals: " + ", ".join(f"{k} {v}" for k, v in report.totals().items()), "",
              merge_line((r.key, r.merges) for r in report.results), "",
              "Failures that reached memory (must be 0): "
              + ", ".join(f"{k} {v}" for k, v in report.failures().items()), "",
              "| calls by purpose | calls | client gave up | mean s | p50 s | max s | prompt tok | completion tok |",
              "|---|---|---|---|---|---|---|---|"]
    for purpose, st in report.call_stats().items():
        lines.append(f"| {purpose} | {st['calls']:.0f} | {st['gave_up']:.0f} | {st['mean_s']:.1f} | {st['p50_s']:.1f} "
                     f"| {st['max_s']:.1f} | {st['prompt_tokens']:.0f} | {st['completion_tokens']:.0f} |")
    errors = [f"- {r.key}: {e}" for r in report.results for e in r.errors]
    if errors:
        lines += ["", "Errors and notes:", *errors[:30]]
    lines.append(f"\nWall time {report.seconds:.0f} s.")
    return "\n".join(lines) + "\n"


def write_report(path: Path, section: str) -> None:
    """Put ``section`` at the top of the results in ``path`` (earlier runs stay below it)."""
    head = "# Memory quality with real models\n\n"
    marker = "<!-- results -->\n"
    text = path.read_text(encoding="utf-8") if path.exists() else head + "Written by `make eval-model`.\n\n" + marker
    if marker not in text:
        text += "\n" + marker
    before, after = text.split(marker, 1)
    path.write_text(before + marker + "\n" + section + "\n" + after.lstrip("\n"), encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.quality", description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", default=os.environ.get("EVAL_SCENARIOS"),
                        help="comma-separated scenario keys (default: all)")
    parser.add_argument("--out", default=None, help="markdown file to add the results to (e.g. bench/QUALITY.md)")
    parser.add_argument("--json", default=None, help="also write the raw results as JSON here")
    parser.add_argument("--note", default="", help="a line put under the heading (hardware, server flags)")
    parser.add_argument("--calls-json", default=None,
                        help="also write every model call the proxy saw (purpose, latency, raw answer) here")
    args = parser.parse_args(argv)
    harness = Harness(MemoryConfig.load())
    try:
        report = harness.run(pick(args.scenarios), progress=lambda m: print(m, file=sys.stderr, flush=True))
    finally:
        harness.close()
    section = render_markdown(report, note=args.note)
    print(section)
    if args.out:
        write_report(Path(args.out), section)
    if args.json:
        Path(args.json).write_text(json.dumps({"totals": report.totals(), "failures": report.failures(),
                                               "calls": report.call_stats(),
                                               "results": [asdict(r) for r in report.results]},
                                              ensure_ascii=False, indent=1), encoding="utf-8")
    if args.calls_json:
        Path(args.calls_json).write_text(json.dumps([asdict(c) for c in report.calls], ensure_ascii=False, indent=1),
                                         encoding="utf-8")
    return 1 if any(report.failures().values()) else 0
