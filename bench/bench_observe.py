"""Observability cost: what metrics and spans add to the post-run hooks and to a tool call.

Run: ``.venv/bin/python -m bench.bench_observe`` (``--quick`` for the smallest configuration; the
store is a temporary local directory, so store latency does not hide the overhead).

Telemetry settings side by side, each with its own ``MemoryServices``:

* **off** — ``Telemetry.disabled()`` (what a process without the extras gets);
* **off (control)** — the same again: its difference to *off* is the noise floor of the run;
* **metrics** — Prometheus counters and histograms (the default with the ``metrics`` extra);
* **metrics + spans (no SDK)** — plus OpenTelemetry API spans on the global provider with no SDK
  configured: non-recording spans (an app with ``opentelemetry-api`` but no tracing set up);
* **metrics + spans (SDK)** — plus a real SDK ``TracerProvider`` with a ``BatchSpanProcessor``
  (spans recorded and exported in the background, as a traced production app runs).

Measured per setting, interleaved in rounds so machine noise hits all settings alike:

1. **post-run hooks** — the session-memory and auto-memory post-hooks of ``build_agent`` called
   with a real ``RunOutput`` (what the user's run waits for; the background collect is not in it);
2. **read_file** and **save_file** tool calls through ``MemoryTools`` on a place of 100 memories;
3. one recorded store request (an empty ``with telemetry.store_request("get")``), for scale.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from agno.models.message import Message
from agno.run.agent import RunOutput

from harness_memory.config import MemoryConfig
from harness_memory.observe import Telemetry
from harness_memory.services import MemoryServices
from harness_memory.session import make_session_post_hook

from .common import memory_text, p50, scratch_dir, seed, table

SETTINGS = ("off", "off (control)", "metrics", "metrics + spans (no SDK)", "metrics + spans (SDK)")
USER = "bench-user"


def _telemetry(setting: str) -> tuple[Telemetry, Any]:
    if setting.startswith("off"):
        return Telemetry.disabled(), None
    if setting == "metrics":
        return Telemetry(tracing=False), None
    if setting == "metrics + spans (no SDK)":
        return Telemetry(), None
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
    return Telemetry(tracer_provider=provider), provider


def _config(root: str) -> MemoryConfig:
    # A light model is configured (auto memory captures only then) but never called: thresholds
    # and the debounce keep summaries and extractions from running during the bench.
    return MemoryConfig.load(env={}, store={"backend": "local", "local_root": root},
                             model={"model": "m", "base_url": "http://127.0.0.1:9/v1"},
                             session={"first_threshold_tokens": 10**9},
                             auto={"debounce_seconds": 3600, "max_wait_seconds": 3600,
                                   "shutdown_flush_seconds": 0})


def run_output(i: int) -> RunOutput:
    messages = [
        Message(role="system", content="You are a helpful agent. " * 40),
        Message(role="user", content=f"run {i}: please check the deployment logs of service {i % 7}"),
        Message(role="assistant", content=None,
                tool_calls=[{"id": f"c{i}", "type": "function",
                             "function": {"name": "read_logs", "arguments": '{"service": "api"}'}}]),
        Message(role="tool", content="2026-11-01 12:00:01 INFO started\n" * 12, tool_name="read_logs"),
        Message(role="assistant", content=f"The logs of run {i} show a clean start; no errors. " * 3),
    ]
    return RunOutput(run_id=f"r{i}", session_id=f"bench-{i % 50}", user_id=USER, messages=messages)


class Subject:
    """One telemetry setting: its services, hooks and tools."""

    def __init__(self, setting: str, memories: int) -> None:
        self.setting = setting
        self.telemetry, self.provider = _telemetry(setting)
        self.services = MemoryServices.from_config(_config(scratch_dir("hm-bench-obs-") + "/.harness"),
                                                   telemetry=self.telemetry)
        self.manager = self.services.session_manager()
        self.hooks = [make_session_post_hook(self.manager), self.services.auto_memory().make_post_hook()]
        own = self.services.user_agent_dir(USER)
        seed(own, memories)
        self.tools = self.services.memory_tools(USER)
        self.times: dict[str, list[float]] = {"post-run hooks": [], "read_file": [], "save_file": [],
                                              "store request record": []}
        self.n = 0

    def post_hooks(self) -> None:
        out = run_output(self.n)
        self.n += 1
        t0 = time.perf_counter()
        for hook in self.hooks:
            hook(run_output=out)
        self.times["post-run hooks"].append((time.perf_counter() - t0) * 1000)

    def tool(self, name: str, call: Callable[[], str], ok: str) -> None:
        t0 = time.perf_counter()
        answer = call()
        self.times[name].append((time.perf_counter() - t0) * 1000)
        if not answer.startswith(ok):
            raise RuntimeError(f"tool answered an error during the bench: {answer[:200]}")

    def record(self, k: int) -> None:
        store_request = self.telemetry.store_request
        t0 = time.perf_counter()
        for _ in range(k):
            with store_request("get"):
                pass
        self.times["store request record"].append((time.perf_counter() - t0) / k * 1000)

    def close(self) -> None:
        self.manager.flush(30)
        self.services.auto_memory().forget_user(USER)  # queued captures are never extracted
        self.services.close()
        if self.provider is not None:
            self.provider.shutdown()


def run(quick: bool = False) -> str:
    rounds, per_round, memories = (4, 10, 10) if quick else (40, 50, 100)
    subjects = [Subject(s, memories) for s in SETTINGS]
    try:
        for r in range(rounds):
            # The same work for every setting, interleaved; the order rotates each round so no setting
            # always runs right after another's garbage or background work.
            for s in subjects[r % len(subjects):] + subjects[: r % len(subjects)]:
                for _ in range(per_round):
                    s.post_hooks()
                s.manager.flush(30)
                for i in range(per_round):
                    s.tool("read_file", lambda s=s, i=i: s.tools.read_file(f"m{i % memories:05d}.md"), "---")
                for i in range(max(2, per_round // 5)):
                    s.tool("save_file", lambda s=s, i=i, r=r: s.tools.save_file(
                        f"obs_{i:03d}.md", memory_text(300_000 + r * 1000 + i)), ("Created", "Updated"))
                s.record(200)
        rows = []
        base = subjects[0].times
        for what in ("post-run hooks", "read_file", "save_file", "store request record"):
            off = p50(base[what])
            for s in subjects:
                value = p50(s.times[what])
                same = s is subjects[0] or what == "store request record"
                added = "—" if same else f"{(value - off) / off * 100:+.1f} %"
                rows.append([what, s.setting, len(s.times[what]), f"{value:.4f}", added])
    finally:
        for s in subjects:
            s.close()
    note = ("p50 over interleaved rounds (order rotating) on a local store (a temporary directory: no network "
            "latency to hide the overhead). `post-run hooks` is the session + auto-memory post-hooks of "
            "`build_agent` (what the run waits for; they record nothing themselves — the background collect and "
            "the batches do); `store request record` is the cost of one empty recorded store request (ms). "
            "'added' is the p50 difference to `off`; `off (control)` is a second, identical `off` setting, so "
            "its 'added' is this run's noise floor.")
    return "\n\n".join([f"### Metrics and tracing overhead ({'quick' if quick else 'full'})",
                        table(["operation", "telemetry", "calls", "p50 ms", "added vs off"], rows), note])


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv[1:]))
