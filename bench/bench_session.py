"""Session memory: post-hook overhead per run, and context size with summaries vs full history.

Run: ``.venv/bin/python -m bench.bench_session`` (starts its own redis-server and a scripted
OpenAI-compatible light model on 127.0.0.1; the store is a temporary local directory).

1. **Post-hook overhead** — the agno post-hook called with real ``RunOutput`` objects (system
   prompt, 6 history messages, then user / assistant+tool call / tool result / assistant),
   in Redis mode and in-process mode:
   * *hook*: time the user's run is held by the hook (filter + convert + enqueue);
   * *hook → buffered*: hook plus the background collect (token count, RPUSH/LTRIM/EXPIRE MULTI)
     until the messages are in the buffer — what the run would wait for if it collected inline;
   * *collect_messages_sync*: the synchronous API, for reference.
2. **Context size** — a scripted 200-turn conversation (English and Chinese, a tool call every
   fourth turn) through the real hook, background summaries and default thresholds. At
   checkpoints: tokens of the full history vs the summary-injected context (the
   ``[会话历史摘要]`` message + the messages not yet summarised). The scripted model writes a
   summary that grows by one worklog line per new user message (bounded by our template), a
   pessimistic stand-in for a real model that compresses.
"""

from __future__ import annotations

import random
import re
import time
from typing import Any

from agno.models.message import Message
from agno.run.agent import RunOutput

from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from harness_memory.session import (
    SessionMemoryManager,
    inject_session_summary,
    make_session_post_hook,
    session_manager_for,
)
from harness_memory.session.summary import PROMPT_MARKER
from harness_memory.tokens import count_message_tokens, count_tokens, tokenizer_status
from tests.fakellm import Answer, RecordedRequest, ScriptedLLM, text
from tests.servers import RedisServer

from .common import p50, pct, scratch_dir, table

WARMUP = 50
RUNS = 1000
TURNS = 200
CHECKPOINTS = (10, 25, 50, 100, 150, 200)


def make_config(redis_url: str | None, llm: ScriptedLLM | None, **session: Any) -> MemoryConfig:
    data: dict[str, Any] = {
        "store": {"backend": "local", "local_root": scratch_dir("hm-bench-sess-") + "/.harness"},
        "session": session,
    }
    if redis_url:
        data["redis"] = {"url": redis_url, "key_prefix": f"bs-{random.randrange(1 << 30):x}:"}
    if llm is not None:
        data["model"] = {"model": "fake-model", "base_url": llm.base_url, "api_key": "k"}
    return MemoryConfig.load(env={}, **data)


# -- 1. hook overhead --------------------------------------------------------------------------
def run_output(i: int, session_id: str) -> RunOutput:
    history = [Message(role=r, content=f"earlier {r} message {j} " * 8, from_history=True)
               for j, r in enumerate(["user", "assistant"] * 3)]
    messages = [
        Message(role="system", content="You are a helpful agent. " * 40),
        *history,
        Message(role="user", content=f"run {i}: please check the deployment logs of service {i % 7}"),
        Message(role="assistant", content=None,
                tool_calls=[{"id": f"c{i}", "type": "function",
                             "function": {"name": "read_logs", "arguments": '{"service": "api"}'}}]),
        Message(role="tool", content="2026-11-01 12:00:01 INFO started\n" * 12, tool_name="read_logs"),
        Message(role="assistant", content=f"The logs of run {i} show a clean start; no errors. " * 3),
    ]
    return RunOutput(run_id=f"r{i}", session_id=session_id, messages=messages)


def hook_overhead(mode: str, redis_url: str | None, runs: int = RUNS, warmup: int = WARMUP) -> list[list[Any]]:
    services = MemoryServices.from_config(make_config(redis_url, None, first_threshold_tokens=10**9))
    manager = session_manager_for(services)
    hook = make_session_post_hook(manager)
    outputs = [run_output(i, f"bench-{i % 50}") for i in range(warmup + 2 * runs)]
    hook_only: list[float] = []
    end_to_end: list[float] = []
    for n, out in enumerate(outputs[: warmup + runs]):
        t0 = time.perf_counter()
        hook(run_output=out)
        t1 = time.perf_counter()
        manager.flush(10)
        t2 = time.perf_counter()
        if n >= warmup:
            hook_only.append((t1 - t0) * 1000)
            end_to_end.append((t2 - t0) * 1000)
    direct: list[float] = []
    for out in outputs[warmup + runs :]:
        t0 = time.perf_counter()
        manager.collect_messages_sync(out.session_id or "s", out.messages or [])
        direct.append((time.perf_counter() - t0) * 1000)
    assert manager.mode == mode, f"expected {mode} mode, got {manager.mode}"
    manager.close()
    services.close()
    return [[mode, name, p50(v), pct(v, 95), pct(v, 99)] for name, v in
            (("hook (run waits)", hook_only), ("hook → buffered", end_to_end),
             ("collect_messages_sync", direct))]


# -- 2. context size ---------------------------------------------------------------------------
_WORKLOG = re.compile(r"## Worklog\n(.*?)(?:\n## |\Z)", re.DOTALL)


def summariser(req: RecordedRequest) -> Answer:
    """A stand-in light model: keeps the previous worklog, adds one line per new user message."""
    prompt = str(req.messages[-1].get("content"))
    prev = prompt.split("<previous_summary>\n", 1)[1].split("\n</previous_summary>", 1)[0]
    found = _WORKLOG.search(prev)
    lines = [ln for ln in (found.group(1).splitlines() if found else []) if ln.startswith("- ")]
    for m in re.finditer(r"\] user: (.{0,70})", prompt):
        lines.append("- " + m.group(1).split("\n")[0])
    body = "\n".join(lines[-120:]) or "- started"
    return text("# Deployment debugging session\n\n## Current State\n- checking the latest logs\n\n"
                "## Task\n- find why service deploys fail\n\n## Key Results\n- api starts cleanly\n\n"
                f"## Worklog\n{body}\n")


def conversation_turn(rng: random.Random, i: int) -> list[dict[str, Any]]:
    zh = i % 3 == 0
    user = (f"第{i}轮：请帮我检查服务部署日志，看看为什么会失败。" * rng.randint(2, 4) if zh
            else f"Turn {i}: please check why the deploy of service {i % 7} failed. " * rng.randint(2, 5))
    turn: list[dict[str, Any]] = [{"role": "user", "content": user}]
    if i % 4 == 0:
        turn.append({"role": "assistant", "content": "",
                     "tool_calls": [{"function": {"name": "read_logs", "arguments": f'{{"run": {i}}}'}}]})
        turn.append({"role": "tool", "name": "read_logs",
                     "content": "2026-11-01 12:00:01 INFO step ok\n" * rng.randint(10, 30)})
    answer = (f"第{i}轮结论：日志显示配置缺失，建议补充环境变量。" * rng.randint(3, 6) if zh
              else f"Turn {i} answer: the logs show a missing setting; add it and redeploy. " * rng.randint(3, 8))
    turn.append({"role": "assistant", "content": answer})
    return turn


def context_size(redis_url: str, turns: int = TURNS) -> tuple[str, str]:
    llm = ScriptedLLM().start()
    llm.set_handler(summariser)
    services = MemoryServices.from_config(make_config(redis_url, llm))
    manager: SessionMemoryManager = session_manager_for(services)
    rng = random.Random(7)
    sid = "bench-200"
    history: list[dict[str, Any]] = []
    rows: list[list[Any]] = []
    checkpoints = CHECKPOINTS if turns == TURNS else (turns,)
    for i in range(1, turns + 1):
        turn = conversation_turn(rng, i)
        nxt = turn[0]["content"]
        if i in checkpoints:  # the context of turn i's request, before it runs
            full = count_message_tokens([*history, {"role": "user", "content": nxt}])
            summary = manager.get_summary_sync(sid)
            batch = manager.buffer.pending(sid)
            pending = batch.messages if batch else []
            injected_msg = inject_session_summary(nxt, summary)
            injected = count_message_tokens([*({"role": m.role, "content": m.content} for m in pending),
                                             {"role": "user", "content": injected_msg}])
            rows.append([i - 1, full, count_tokens(summary or ""), sum(m.tokens for m in pending), injected,
                         f"{injected / full:.0%}"])
        history.extend(turn)
        manager.submit_run(sid, turn)
        manager.wait_idle(30)
    calls = [r for r in llm.chat_requests if PROMPT_MARKER in str(r.messages[0].get("content"))]
    prompt_tokens = sum(count_message_tokens(r.messages) for r in calls)
    manager.close()
    services.close()
    llm.stop()
    sizes = table(["turns so far", "full history tok", "summary tok", "unsummarised tok",
                   "injected context tok", "injected / full"], rows)
    cost = (f"{len(calls)} summary calls over {turns} turns ({count_message_tokens(history)} tokens of "
            f"conversation); light-model prompt tokens in total: {prompt_tokens}")
    return sizes, cost


def run(quick: bool = False) -> str:
    runs, warmup, turns = (20, 5, 6) if quick else (RUNS, WARMUP, TURNS)
    with RedisServer() as server:
        overhead = hook_overhead("redis", server.url, runs, warmup) + hook_overhead("local", None, runs, warmup)
        sizes, cost = context_size(server.url, turns)
    return "\n\n".join([
        f"### Session memory — post-hook overhead per run (ms, {runs} runs; tokenizer: {tokenizer_status()})",
        table(["mode", "what", "p50 ms", "p95 ms", "p99 ms"], overhead),
        f"### Session memory — context size over a {turns}-turn conversation (default thresholds)",
        sizes,
        cost,
    ])


if __name__ == "__main__":
    import sys

    print(run(quick="--quick" in sys.argv[1:]))
