"""Memory cost: model requests and tokens spent on memory in one scripted 100-turn conversation,
harness-memory vs agno's built-in memory, counted at the SAME scripted OpenAI-compatible server.

Run: ``.venv/bin/python -m bench.bench_cost`` (``--quick`` for 8 turns). Everything runs on
127.0.0.1: a ``tests.fakellm.ScriptedLLM`` answers every request of both systems, and the
server classifies each request by what it is (its system prompt): an agent turn, a
harness-memory session summary, auto-memory extraction or recall selection, agno's memory
manager or agno's session summary. Prompt tokens are counted on what the server received
(messages + tool schemas + response-format schema), completion tokens on what it answered, with
the library's own measure (``harness_memory.tokens``), the same for both systems.

* **harness-memory** — ``build_agent`` per turn (as an app does per request) with a stable
  ``session_id``, ``query=`` the user's message, session memory and auto memory on, default
  thresholds; the user's agent-memory place holds 30 memories so recall has something to choose.
* **agno built-in** — ``Agent(db=SqliteDb(...), update_memory_on_run=True,
  enable_session_summaries=True)`` per turn with the same session id (agno 3.1 names).

Pacing (harness-memory only; agno's memory work runs on every run whatever the pace): the user
writes every 45 s (a human pace), and auto memory's timers run for real, on worker threads, but
with time scaled down 300×: 45 s/turn → 0.15 s, debounce 30 s → 0.1 s, max wait 300 s → 1 s,
minimum interval 1800 s → 6 s, summary wait 7200 s → 24 s. So the debounced queue behaves as in
production over the 75 minutes the conversation would take, while the bench takes ~20 s (a turn
that stalls for 6 s on a loaded machine counts as the user leaving: the extraction waiting for the
next session summary then runs alone). When the user leaves, the pending batch is flushed (it
would run one minimum interval later). Session summaries are token-triggered, not time-triggered.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from agno.agent import Agent
from agno.models.openai.like import OpenAILike

from harness_memory import build_agent
from harness_memory.auto.hook import AutoMemoryHook
from harness_memory.config import AutoMemoryConfig, MemoryConfig
from harness_memory.services import services_for
from harness_memory.session import session_manager_for
from harness_memory.session.binding import bind_session_id
from harness_memory.tokens import count_tokens, tokenizer_status
from tests.fakellm import ScriptedLLM

from .common import p50, scratch_dir, seed, table
from .cost_server import CostServer, Kind, Tally, conversation

TURNS = 100
QUICK_TURNS = 8
PACE_SECONDS = 45.0
TIME_SCALE = 1 / 300
AGENT_MEMORIES = 30
USER = "cost-user"
SESSION = "cost-session"

def _model(llm: ScriptedLLM) -> OpenAILike:
    return OpenAILike(id="fake-model", base_url=llm.base_url, api_key="k")


@dataclass
class RunReport:
    tallies: dict[Kind, Tally]
    seconds: float
    stored: str
    notes: list[str] = field(default_factory=list)
    turn_ms: list[float] = field(default_factory=list)


def run_harness(turns: list[tuple[str, str]], gap: float) -> RunReport:
    from harness_memory.auto import auto_memory_for

    server = CostServer(dict(turns))
    root = Path(scratch_dir("hm-bench-cost-"))
    d = AutoMemoryConfig()
    scale = gap / PACE_SECONDS
    with ScriptedLLM() as llm:
        llm.set_handler(server)
        model = _model(llm)  # one model object for the app, as an app holds it (see the notes on why)
        cfg = MemoryConfig.load(env={}, store={"backend": "local", "local_root": str(root / ".harness")},
                                model={"model": "fake-model", "base_url": llm.base_url, "api_key": "k"},
                                agent={"snapshots_dir": str(root / "no-snapshots")},
                                auto={"debounce_seconds": d.debounce_seconds * scale,
                                      "max_wait_seconds": d.max_wait_seconds * scale,
                                      "min_interval_seconds": d.min_interval_seconds * scale,
                                      "summary_wait_seconds": d.summary_wait_seconds * scale})
        services = services_for(cfg)
        seed(services.user_agent_dir(USER), AGENT_MEMORIES)
        turn_ms: list[float] = []
        t0 = time.monotonic()
        for i, (user, _) in enumerate(turns):
            time.sleep(max(0.0, t0 + i * gap - time.monotonic()))
            started = time.perf_counter()
            agent = build_agent(USER, session_id=SESSION, query=user, config=cfg, model=model)
            assert any(isinstance(h, AutoMemoryHook) for h in agent.post_hooks or []), "build_agent wires auto memory"
            agent.run(user)
            turn_ms.append((time.perf_counter() - started) * 1000)
        manager = session_manager_for(services)
        manager.wait_idle(60)
        auto = auto_memory_for(services)
        auto.flush(60)  # the user has left: the last batch runs
        seconds = time.monotonic() - t0
        facts = len(auto.list_facts(USER))
        summary = manager.get_summary_sync(bind_session_id(USER, SESSION)) or ""  # build_agent binds the id
        manager.close()
        services.close()
    notes = ["session memory and auto memory wired by build_agent"]
    if server.unmatched_agent_turns:
        notes.append(f"{server.unmatched_agent_turns} agent turns not recognised by the scripted server")
    return RunReport(server.tallies, seconds, f"{facts} facts, summary {count_tokens(summary)} tok", notes, turn_ms)


def run_agno(turns: list[tuple[str, str]], memory: bool = True) -> RunReport:
    """agno's built-in memory (``memory=False``: a plain Agent, the no-memory baseline)."""
    from agno.db.sqlite import SqliteDb

    server = CostServer(dict(turns))
    db = SqliteDb(db_file=str(Path(scratch_dir("hm-bench-agno-")) / "agno.db"))
    turn_ms: list[float] = []
    with ScriptedLLM() as llm:
        llm.set_handler(server)
        model = _model(llm)
        t0 = time.monotonic()
        for user, _ in turns:
            started = time.perf_counter()
            if memory:
                agent = Agent(model=model, db=db, user_id=USER, session_id=SESSION, update_memory_on_run=True,
                              enable_session_summaries=True, telemetry=False)
            else:
                agent = Agent(model=model, user_id=USER, session_id=SESSION, telemetry=False)
            agent.run(user)
            turn_ms.append((time.perf_counter() - started) * 1000)
        seconds = time.monotonic() - t0
        stored = "—"
        if memory:
            memories = db.get_user_memories(user_id=USER) or []
            session = agent.get_session(SESSION)
            summary = session.summary.summary if session is not None and session.summary is not None else ""
            stored = f"{len(memories)} memories, summary {count_tokens(summary)} tok"
    notes = [] if not server.unmatched_agent_turns else [f"{server.unmatched_agent_turns} agent turns unrecognised"]
    return RunReport(server.tallies, seconds, stored, notes, turn_ms)


def client_creation_ms(repeat: int = 5) -> float:
    """What a NEW ``OpenAILike`` pays at its first request: the openai client and its SSL context."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        OpenAILike(id="m", base_url="http://127.0.0.1:9/v1", api_key="k").get_client()
        times.append((time.perf_counter() - t0) * 1000)
    return p50(times)


LEARN = {"harness": (Kind.HM_SESSION, Kind.HM_AUTO, Kind.HM_COMBINED), "agno": (Kind.AGNO_SUMMARY, Kind.AGNO_MEMORY)}
HEADERS = ["system", "memory calls (summaries + extraction)", "session summaries", "extraction / memory manager",
           "summary + extraction in one call", "recall selection", "memory calls incl. recall", "memory prompt tok",
           "memory completion tok", "agent-turn prompt tok / turn", "stored at the end", "turn p50 ms"]


def _sum(report: RunReport, kinds: tuple[Kind, ...], what: str) -> int:
    return sum(getattr(report.tallies[k], what) for k in kinds)


def _row(name: str, report: RunReport, learn: tuple[Kind, ...], recall: Kind | None) -> list[object]:
    t = report.tallies
    memory = (*learn, *((recall,) if recall else ()))
    agent_tok = round(t[Kind.AGENT].prompt / max(1, t[Kind.AGENT].calls))
    if not learn:
        return [name, 0, "—", "—", "—", "—", 0, 0, 0, agent_tok, report.stored, p50(report.turn_ms)]
    return [name, _sum(report, learn, "calls"), t[learn[0]].calls, t[learn[1]].calls,
            t[learn[2]].calls if len(learn) > 2 else "—", t[recall].calls if recall else "—",
            _sum(report, memory, "calls"), _sum(report, memory, "prompt"),
            _sum(report, memory, "completion"), agent_tok, report.stored, p50(report.turn_ms)]


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}×" if b else "n/a"


def run(quick: bool = False) -> str:
    turns = conversation(QUICK_TURNS if quick else TURNS)
    gap = PACE_SECONDS * TIME_SCALE
    ours = run_harness(turns, gap)
    agno = run_agno(turns)
    plain = run_agno(turns, memory=False)
    h_learn, a_learn = LEARN["harness"], LEARN["agno"]
    ours_calls, agno_calls = _sum(ours, h_learn, "calls"), _sum(agno, a_learn, "calls")
    ours_all = ours_calls + ours.tallies[Kind.HM_RECALL].calls

    def tokens(report: RunReport, kinds: tuple[Kind, ...]) -> int:
        return _sum(report, kinds, "prompt") + _sum(report, kinds, "completion")

    ours_tok, agno_tok = tokens(ours, h_learn), tokens(agno, a_learn)
    ours_all_tok = tokens(ours, (*h_learn, Kind.HM_RECALL))

    def per_turn(report: RunReport) -> float:
        return report.tallies[Kind.AGENT].prompt / max(1, report.tallies[Kind.AGENT].calls)

    base = per_turn(plain)
    ours_total = ours_all_tok + (per_turn(ours) - base) * len(turns)
    agno_total = agno_tok + (per_turn(agno) - base) * len(turns)
    rows = [_row("harness-memory (session + auto memory, recall on)", ours, h_learn, Kind.HM_RECALL),
            _row("agno built-in (update_memory_on_run + session summaries, SQLite)", agno, a_learn, None),
            _row("plain agno Agent, no memory (baseline)", plain, (), None)]
    bullets = [
        f"**agno / harness-memory, summaries + extraction:** {_ratio(agno_calls, ours_calls)} the model calls "
        f"({agno_calls} vs {ours_calls}), {_ratio(agno_tok, ours_tok)} the tokens ({agno_tok} vs {ours_tok}).",
        f"**Including harness-memory's recall selection** (a light call per `build_agent(query=...)` while "
        f"unsurfaced memories remain; `recall.use_model=false` makes it lexical and free): "
        f"{_ratio(agno_calls, ours_all)} the calls ({agno_calls} vs {ours_all}), {_ratio(agno_tok, ours_all_tok)} "
        f"the tokens ({agno_tok} vs {ours_all_tok}).",
        f"**Context the memory adds to every agent turn** (prompt tokens over the no-memory baseline of "
        f"{base:.0f}): harness-memory +{per_turn(ours) - base:.0f} (memory prompt with the MEMORY.md index of "
        f"{AGENT_MEMORIES} memories, the 5 tool schemas, recalled files, the auto-memory block, the session "
        f"summary); agno +{per_turn(agno) - base:.0f} (its memories and session summary).",
        f"**All tokens memory costs** (memory calls + that added context over {len(turns)} turns): "
        f"harness-memory {ours_total:.0f}, agno {agno_total:.0f} — agno {_ratio(agno_total, ours_total)}. The "
        "added context is mostly a fixed prefix (prompt + tool schemas) that providers' prompt caching discounts.",
        f"**Pacing:** a user message every {PACE_SECONDS:g} s, replayed {1 / TIME_SCALE:g}× faster ({gap:.2f} s "
        f"per turn): auto memory's debounce / max wait / minimum interval are scaled the same way and run on its "
        f"real worker threads. The harness-memory run took {ours.seconds:.1f} s including the flush after the "
        f"last turn; agno's {agno.seconds:.1f} s. agno's memory manager and session summary run on every run, "
        "so pacing does not change its numbers.",
        "**Tokens:** prompt = messages + tool schemas + response-format schema as received by the server; "
        "completion = the scripted answer. agno's memory manager makes a second call after each tool call "
        "(to read the tool result); both are counted.",
        f"**Turn time** = build the agent + run it (+ hooks), against an instant model. Each system reuses one "
        f"model object: a NEW `OpenAILike` pays {client_creation_ms():.0f} ms (p50) at its first request to "
        "create its openai client (SSL context), which `build_agent` without `model=` pays on every call.",
    ]
    bullets += [f"note: {n}" for n in ours.notes + agno.notes + plain.notes]
    return "\n\n".join([
        f"### Memory cost — one scripted {len(turns)}-turn conversation, all systems on the same scripted "
        f"model server (tokenizer: {tokenizer_status()})",
        table(HEADERS, rows),
        "\n".join(f"- {b}" for b in bullets),
    ])


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv[1:]))
