"""Auto memory: memory-related model calls and tokens for a scripted 100-turn conversation.

Run: ``.venv/bin/python -m bench.bench_auto`` (starts a scripted OpenAI-compatible server on
127.0.0.1; the store is a temporary local directory; no network).

A real agno ``Agent`` (``OpenAILike`` → the scripted server) runs 100 turns (English and Chinese,
a few stated preferences, two corrections, a confirmation) with the session-memory and the
auto-memory post-hooks, in ``build_agent``'s order and with a session id bound to the user as
``build_agent`` binds it. Every request is classified and counted AT THE SERVER: prompt tokens =
the messages it received, completion tokens = the answer it sent (``count_message_tokens`` /
``count_tokens``, the library's measure). A session summary with the extraction riding along is
ONE request ("summary + extraction calls"); the scripted model answers both parts, and quotes the
user's words as evidence, as the extraction prompt asks.

Time is virtual for the auto-memory queue (``services.auto_memory(clock=…, start_worker=False)`` +
``run_due``), so a 100-turn conversation at a human pace (an hour or more) runs in seconds and
the debounce / max-wait / min-interval / summary-wait rules act exactly as they would in real
time. Session summaries are token-triggered (not time-triggered) and run for real in the
background. "facts learned" counts the eight facts the conversation states that ended up stored.

Paces: the gap between two user messages (reading the answer + typing). After the last turn
the user leaves: one more hour of virtual time passes, so the final extraction runs.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agno.agent import Agent
from agno.models.openai.like import OpenAILike

from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from harness_memory.session import make_session_post_hook, session_manager_for
from harness_memory.session.binding import bind_session_id
from harness_memory.session.combined import COMBINED_MARKER
from harness_memory.session.summary import PROMPT_MARKER
from harness_memory.tokens import count_message_tokens, count_tokens, tokenizer_status
from tests.fakellm import Answer, RecordedRequest, ScriptedLLM, text

from .common import extraction_conversation, p50, pct, scratch_dir, table

TURNS = 100

# Statements the scripted extractor "recognises": marker in the conversation -> (fact, category,
# confidence, source error); the marker is also the evidence it quotes, as the prompt asks.
SALIENT = {
    "I'm a frontend engineer": ("Is a frontend engineer", "context", 0.95, None),
    "TypeScript": ("Works in TypeScript", "knowledge", 0.9, None),
    "reports in Chinese": ("Wants reports written in Chinese", "preference", 0.95, None),
    "Composition API": ("Prefers the Vue Composition API", "preference", 0.9, None),
    "别用 npm": ("Use pnpm, not npm", "correction", 0.95, "ran npm install"),
    "不要写注释": ("Keep code comments short and in English", "correction", 0.95, "wrote long Chinese comments"),
    "deadline": ("Dashboard migration is due at the end of the month", "goal", 0.85, None),
    "keep doing that": ("Likes answers that start with the code", "preference", 0.85, None),
}
SPECIAL_TURNS = {
    1: "Hi! I'm a frontend engineer, I work in TypeScript, and please write reports in Chinese.",
    7: "For Vue components I prefer the Composition API with <script setup>.",
    15: "不对，别用 npm，用 pnpm 安装依赖。",
    31: "Perfect, starting with the code is exactly right — keep doing that.",
    48: "The deadline for the dashboard migration is the end of this month.",
    66: "不要写注释那么长，注释用英文，简短一点。",
}


def conversation(rng: random.Random) -> list[tuple[str, str]]:
    topics = ["router guards", "Pinia stores", "a data table", "lazy loading", "form validation", "i18n",
              "unit tests with Vitest", "a chart component", "SSR hydration", "the build config"]
    turns = []
    for i in range(1, TURNS + 1):
        topic = topics[i % len(topics)]
        if i in SPECIAL_TURNS:
            user = SPECIAL_TURNS[i]
        elif i % 3 == 0:
            user = f"第{i}个问题：{topic} 这里该怎么写？给我一个例子，并解释一下为什么这样做比较好。"
        else:
            user = (f"Question {i}: how should I implement {topic} in our Vue 3 dashboard? "
                    f"Show an example and mention pitfalls. " * rng.randint(1, 2))
        body = (f"Here is how to handle {topic}: define the logic in a composable, keep the component thin, "
                f"type the props, and test the edge cases. " * rng.randint(3, 6))
        code = "\n```ts\nexport function useThing() {\n  const state = ref(0)\n  return { state }\n}\n```"
        turns.append((user, body + code))
    return turns


@dataclass
class Tally:
    calls: int = 0
    prompt: int = 0
    completion: int = 0


@dataclass
class Server:
    """Classifies and counts every request; answers like an agent, an extractor or a summariser."""

    replies: dict[str, str]
    tallies: dict[str, Tally] = field(default_factory=lambda: {k: Tally() for k in ("agent", "auto", "session",
                                                                                    "combined")})

    def __call__(self, req: RecordedRequest) -> Answer:
        system = str(req.messages[0].get("content")) if req.messages else ""
        if system.startswith(COMBINED_MARKER):  # a summary with the extraction riding along: both parts
            kind = "combined"
            content = (f"<session_summary>\n{self._summary(req)}</session_summary>\n"
                       f"<memory_update>\n{self._extract(req)}\n</memory_update>")
        elif PROMPT_MARKER in system:
            kind, content = "session", self._summary(req)
        elif (req.body or {}).get("response_format") == {"type": "json_object"}:
            kind, content = "auto", self._extract(req)
        else:
            kind, content = "agent", self.replies.get(req.last_user_text(), "OK.")
        tally = self.tallies[kind]
        prompt, completion = count_message_tokens(req.messages), count_tokens(content)
        tally.calls += 1
        tally.prompt += prompt
        tally.completion += completion
        return text(content, prompt_tokens=prompt, completion_tokens=completion)

    @staticmethod
    def _extract(req: RecordedRequest) -> str:
        convo = extraction_conversation(str(req.messages[-1]["content"]))
        facts = [{"content": c, "category": cat, "confidence": conf, "evidence": marker,
                  **({"sourceError": e} if e else {})}
                 for marker, (c, cat, conf, e) in SALIENT.items() if marker in convo]
        topics = sorted(set(re.findall(r"implement (.+?) in our", convo)))[:3]
        answer: dict[str, Any] = {"newFacts": facts, "factsToRemove": []}
        if topics:
            answer["user"] = {"topOfMind": {"summary": "Working on " + ", ".join(topics) + " in a Vue 3 dashboard.",
                                            "shouldUpdate": True}}
        return json.dumps(answer, ensure_ascii=False)

    @staticmethod
    def _summary(req: RecordedRequest) -> str:
        users = re.findall(r"user: (.{0,60})", str(req.messages[-1].get("content")))
        lines = "\n".join(f"- {u}" for u in users[-40:]) or "- started"
        return ("# Vue dashboard session\n\n## Current State\n- answering implementation questions\n\n"
                f"## Task\n- help build the dashboard\n\n## Worklog\n{lines}\n")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


Pace = Callable[[int], float]
PACES: list[tuple[str, Pace]] = [
    ("rapid: 5 s/turn", lambda i: 5.0),
    ("steady: 20 s/turn", lambda i: 20.0),
    ("human: 45 s/turn", lambda i: 45.0),
    ("slow: 90 s/turn", lambda i: 90.0),
    ("bursts: 10 turns at 15 s, then 10 min away", lambda i: 600.0 if i % 10 == 0 else 15.0),
]


def run_scenario(name: str, pace: Pace, auto_cfg: dict[str, Any], with_session: bool) -> list[Any]:
    rng = random.Random(5)
    turns = conversation(rng)
    server_counts = Server({u: r for u, r in turns})
    llm = ScriptedLLM().start()
    llm.set_handler(server_counts)
    cfg = MemoryConfig.load(env={}, store={"backend": "local",
                                           "local_root": scratch_dir("hm-bench-auto-") + "/.harness"},
                            model={"model": "fake-model", "base_url": llm.base_url, "api_key": "k"},
                            auto=auto_cfg)
    services = MemoryServices.from_config(cfg)
    clock = Clock()
    auto = services.auto_memory(clock=clock, start_worker=False)
    hook = auto.make_post_hook("default")
    hook_ms: list[float] = []

    def timed_hook(run_output: Any = None, agent: Any = None, session: Any = None, run_context: Any = None,
                   user_id: str | None = None) -> None:
        t0 = time.perf_counter()
        hook(run_output=run_output, agent=agent, session=session, run_context=run_context, user_id=user_id)
        hook_ms.append((time.perf_counter() - t0) * 1000)

    hooks: list[Callable[..., None]] = []
    manager = None
    if with_session:  # in build_agent's order: the session hook first
        manager = session_manager_for(services)
        hooks.append(make_session_post_hook(manager))
    hooks.append(timed_hook)
    # build_agent binds the session id to its user (session.bind_to_user); so does the bench
    agent = Agent(model=OpenAILike(id="fake-model", base_url=llm.base_url, api_key="k"), telemetry=False,
                  user_id="u1", session_id=bind_session_id("u1", "bench-session"), post_hooks=hooks)
    conv_tokens = 0
    for i, (user, reply) in enumerate(turns, start=1):
        clock.now += pace(i)
        auto.run_due()
        agent.run(user)
        conv_tokens += count_message_tokens([{"role": "user", "content": user},
                                             {"role": "assistant", "content": reply}])
        if manager is not None:
            manager.wait_idle(30)
    clock.now += 3600  # the user leaves; the last batch becomes due
    auto.run_due()
    minutes = sum(pace(i) for i in range(1, TURNS + 1)) / 60
    injected = auto.render_injection("u1")
    stored = {f.content for f in auto.list_facts("u1")}
    learned = sum(1 for fact, *_ in SALIENT.values() if fact in stored)
    if manager is not None:
        manager.close()
    auto.close(1)
    services.close()
    llm.stop()
    t = server_counts.tallies
    memory = ("auto", "session", "combined")
    return [name, f"{minutes:.0f}", conv_tokens, t["auto"].calls, t["session"].calls if manager is not None else "n/a",
            t["combined"].calls if manager is not None else "n/a", sum(t[k].calls for k in memory),
            sum(t[k].prompt for k in memory), sum(t[k].completion for k in memory), len(stored),
            f"{learned}/{len(SALIENT)}", count_tokens(injected), p50(hook_ms), pct(hook_ms, 95)]


HEADERS = ["pace", "minutes", "conversation tok", "extraction calls", "summary calls",
           "summary + extraction calls", "memory calls total", "memory prompt tok", "memory completion tok",
           "facts stored", "facts learned", "injected tok", "hook p50 ms", "hook p95 ms"]


def run() -> str:
    defaults = MemoryConfig().auto
    rows = [run_scenario(name, pace, {}, with_session=True) for name, pace in PACES]
    separate = [run_scenario(name, pace, {"combine_with_summary": False}, with_session=True) for name, pace in PACES]
    deerflow = [run_scenario(name, pace, {"min_interval_seconds": 0}, with_session=False)
                for name, pace in PACES[1:4]]
    return "\n\n".join([
        f"### Auto memory — memory-related model calls for a {TURNS}-turn conversation "
        f"(defaults: debounce {defaults.debounce_seconds:g} s, max wait {defaults.max_wait_seconds:g} s, "
        f"min interval {defaults.min_interval_seconds:g} s; session thresholds "
        f"{MemoryConfig().session.first_threshold_tokens}/{MemoryConfig().session.update_threshold_tokens} tok; "
        f"tokenizer: {tokenizer_status()})",
        table(HEADERS, rows),
        "### The same with separate calls (`auto.combine_with_summary: false`)",
        table(HEADERS, separate),
        "### Without the minimum interval (debounce + max wait only, DeerFlow-like), auto memory alone",
        table(HEADERS, deerflow),
    ])


if __name__ == "__main__":
    print(run())
