"""Load test: N pod processes × M users each, sharing one Redis and one bucket (SeaweedFS), with a
realistic mix of work, at a few sizes — throughput, latency per operation and cost per turn.

Run: ``.venv/bin/python -m bench.bench_load`` (``--quick`` for one tiny size). Everything runs on
127.0.0.1: SeaweedFS (COS protocol), one redis-server, and the scripted model server of the cost
bench (``bench.cost_server``: agent turns, session summaries, auto-memory extractions and recall
choices answered like a competent model would).

Each pod is a ``bench.load_worker`` process (see there for one user's turn). All pods start
together behind a gate. Auto memory's timers are scaled down as in the cost bench (debounce 0.1 s,
max wait 1 s, minimum interval 6 s) and session summaries are due every ~1,500 / 800 tokens, so
a short conversation does the work a long one does: the MIX, not the pace, is production's.

Reported per size: turns/s over all pods, p50 / p99 per operation, object-store requests and
bytes per turn (and the writes per place's hot objects), Redis commands per turn (the server's
``total_commands_processed``), Redis memory per active session (``used_memory`` growth / sessions
still buffered), model requests per turn by kind, and errors. Numbers from a loaded 2-core
machine are upper bounds on latency; the per-turn counts do not depend on the machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from harness_memory.config import MemoryConfig
from tests.fakellm import ScriptedLLM
from tests.helpers import ROOT, child_env, write_config

from .common import config_for, p50, pct, scratch_dir, servers, table
from .cost_server import CostServer, Kind, conversation

SIZES = ((2, 4, 16), (4, 8, 12), (8, 8, 10))  # (pods, users per pod, turns per user)
QUICK_SIZES = ((1, 2, 3),)
OPS = ("turn", "build", "run", "save", "collect", "summary", "extraction")
TIMEOUT = 900


@dataclass
class SizeResult:
    pods: int
    users: int
    turns_per_user: int
    turns: int = 0
    seconds: float = 0.0
    ops: dict[str, list[float]] = field(default_factory=dict)
    store_requests: Counter[tuple[str, str]] = field(default_factory=Counter)
    bytes_up: int = 0
    bytes_down: int = 0
    hot_writes: Counter[str] = field(default_factory=Counter)
    redis_commands: int = 0
    #: Redis round trips for place versions (one MGET per build, SETs after commits and re-announcements).
    version_trips: float = 0.0
    redis_cpu_seconds: float = 0.0
    pod_cpu_seconds: float = 0.0
    redis_by_command: Counter[str] = field(default_factory=Counter)
    redis_memory_per_session: float = 0.0
    session_key_bytes: int = 0
    redis_keys: int = 0
    model_calls: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    collect_errors: int = 0
    buffer_fallbacks: int = 0

    @property
    def sessions(self) -> int:
        return self.pods * self.users

    @property
    def per_second(self) -> float:
        return self.turns / self.seconds if self.seconds else float("nan")

    def per_turn(self, n: float) -> float:
        return n / self.turns if self.turns else float("nan")


class LoadModel(CostServer):
    """The cost bench's scripted model; every agent turn of the conversation is recognised."""


def _spawn(pod: int, users: int, turns: int, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "bench.load_worker", str(pod), str(users), str(turns)],
                            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _redis_stats(client: redis.Redis) -> tuple[int, int, Counter[str], float]:
    by_command = Counter({name.removeprefix("cmdstat_"): int(v["calls"])
                          for name, v in client.info("commandstats").items()})
    cpu = client.info("cpu")
    return (int(client.info("stats")["total_commands_processed"]), int(client.info("memory")["used_memory"]),
            by_command, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]))


def run_size(pods: int, users: int, turns: int, weed: Any, red: Any, llm: ScriptedLLM) -> SizeResult:
    result = SizeResult(pods, users, turns)
    cfg: MemoryConfig = config_for(
        "cos", weed, red,
        model={"model": "fake-model", "base_url": llm.base_url, "api_key": "k"},
        agent={"snapshots_dir": scratch_dir("hm-bench-nosnap-")},
        session={"first_threshold_tokens": 1500, "update_threshold_tokens": 800},
        auto={"debounce_seconds": 0.1, "max_wait_seconds": 1.0, "min_interval_seconds": 6.0},
    )
    env = child_env(write_config(cfg, Path(scratch_dir("hm-bench-load-")) / "config.yaml"))
    client = redis.Redis.from_url(red.url)
    procs = [_spawn(p, users, turns, env) for p in range(pods)]
    reports: list[dict[str, Any]] = []
    try:
        for p in procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if line.strip() != "READY":
                raise RuntimeError(f"load worker did not start: {line}{p.stdout.read()}")
        commands0, memory0, by_command0, redis_cpu0 = _redis_stats(client)
        calls0 = Counter({k.value: t.calls for k, t in llm_handler(llm).tallies.items()})
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            out, _ = p.communicate(timeout=TIMEOUT)
            if p.returncode != 0:
                raise RuntimeError(f"load worker failed (exit {p.returncode}):\n{out[-3000:]}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        commands1, memory1, by_command1, redis_cpu1 = _redis_stats(client)
        result.redis_commands = commands1 - commands0 - 4  # minus our own INFOs
        result.redis_by_command = by_command1 - by_command0
        result.redis_by_command["info"] -= 4
        result.redis_cpu_seconds = redis_cpu1 - redis_cpu0
        result.redis_keys = int(client.dbsize())
        sessions = [k for k in client.scan_iter(match=f"{cfg.redis.key_prefix}session:*:messages")]
        if sessions:
            result.redis_memory_per_session = (memory1 - memory0) / len(sessions)
            base = sessions[0].decode().rsplit(":", 1)[0]
            result.session_key_bytes = sum(int(client.memory_usage(f"{base}:{k}") or 0)
                                           for k in ("messages", "state"))
        calls1 = Counter({k.value: t.calls for k, t in llm_handler(llm).tallies.items()})
        result.model_calls = calls1 - calls0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        client.close()
    result.turns = sum(r["turns"] for r in reports)
    result.seconds = max(r["end"] for r in reports) - min(r["start"] for r in reports)
    result.ops = {op: [x for r in reports for x in r["ops"][op]] for op in OPS}
    for r in reports:
        for op, kind, n in r["store"]["requests"]:
            result.store_requests[(op, kind)] += n
        result.bytes_up += r["store"]["bytes_up"]
        result.bytes_down += r["store"]["bytes_down"]
        result.hot_writes.update(r["store"]["hot_writes"])
        result.errors += r["errors"]
        result.collect_errors += r["collect_errors"]
        result.pod_cpu_seconds += r["cpu_seconds"]
        result.buffer_fallbacks += r["buffer_warnings"]
        result.version_trips += r.get("version_trips", 0.0)
    return result


_HANDLERS: dict[int, LoadModel] = {}


def llm_handler(llm: ScriptedLLM) -> LoadModel:
    return _HANDLERS[id(llm)]


# -- what one Redis node carries ----------------------------------------------------------------
RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


@dataclass
class Probe:
    label: str
    per_turn: float
    rps: float = 0.0
    cpu_us: float = 0.0  # server CPU per request


def redis_ceiling(red: Any, big: SizeResult, requests: int = 20000) -> list[Probe]:
    """Replay the round trips of one turn (counted in the largest size) with ``redis-benchmark``
    (32 connections, random sessions) against the bench's redis-server: requests/s and the
    server's CPU per request (``INFO cpu``), so a node's turns/s follow from its CPU."""
    import shutil

    from harness_memory.session import BufferedMessage
    from harness_memory.session.redis_backend import COLLECT_SCRIPT

    exe = shutil.which("redis-benchmark")
    if exe is None:
        return []
    client = redis.Redis.from_url(red.url)
    collect, release = client.script_load(COLLECT_SCRIPT), client.script_load(RELEASE)
    msg = BufferedMessage("user", "please look at the build log and tell me what failed " * 8, tokens=120,
                          tool_calls=0, created_at=1.0).to_json()
    c = big.redis_by_command
    turns = max(1, big.turns)
    k = "rb:session:{__rand_int__}"
    probes = [
        (Probe("collect script (EVALSHA)", c["rpush"] / turns),
         ["EVALSHA", collect, "2", f"{k}:messages", f"{k}:state", "2000", "3600", "e", "240", "0", "1.0", msg, msg]),
        (Probe("summary version (HGET)", c["hget"] / turns), ["HGET", f"{k}:state", "summary_version"]),
        (Probe("recalled files (SMEMBERS)", c["smembers"] / turns), ["SMEMBERS", "rb:recall:{__rand_int__}"]),
        (Probe("mark recalled (SADD)", c["sadd"] / turns), ["SADD", "rb:recall:{__rand_int__}", "deploy.md"]),
        (Probe("mark recalled (EXPIRE)", c["sadd"] / turns), ["EXPIRE", "rb:recall:{__rand_int__}", "3600"]),
        (Probe("lock (SET NX PX)", c["set"] / turns), ["SET", "rb:lock:{__rand_int__}", "tok", "NX", "PX", "15000"]),
        (Probe("unlock (EVALSHA)", c["set"] / turns), ["EVALSHA", release, "1", "rb:lock:{__rand_int__}", "tok"]),
        (Probe("state (HGETALL)", c["multi"] / turns), ["HGETALL", f"{k}:state"]),
        (Probe("state (LLEN)", c["multi"] / turns), ["LLEN", f"{k}:messages"]),
        (Probe("pending (LRANGE)", c["lrange"] / turns), ["LRANGE", f"{k}:messages", "0", "-1"]),
    ]
    out = []
    for probe, args in probes:
        cpu0 = client.info("cpu")
        done = subprocess.run([exe, "-h", "127.0.0.1", "-p", str(red.port), "-c", "32", "-n", str(requests),
                               "-r", "100000", "--csv", *args], capture_output=True, text=True, timeout=300)
        cpu1 = client.info("cpu")
        rows = [line for line in done.stdout.splitlines() if line.startswith('"') and not line.startswith('"test"')]
        if not rows:
            continue
        probe.rps = float(rows[-1].rsplit('","', 7)[1])  # the test name may hold quotes
        used = sum(float(cpu1[f]) - float(cpu0[f]) for f in ("used_cpu_user", "used_cpu_sys"))
        probe.cpu_us = used / requests * 1e6
        out.append(probe)
    client.delete(*client.keys("rb:*") or ["rb:none"])
    client.close()
    return out


def ceiling_table(probes: list[Probe]) -> str:
    rows = [[p.label, f"{p.per_turn:.2f}", f"{p.rps:.0f}", f"{p.cpu_us:.1f}"] for p in probes]
    per_turn_us = sum(p.per_turn * p.cpu_us for p in probes)
    trips = sum(p.per_turn for p in probes)
    rows.append(["**one turn**", f"{trips:.2f} round trips", "", f"{per_turn_us:.1f}"])
    return "\n\n".join([
        table(["Redis request (as sent by the pods)", "per turn", "requests/s (32 connections)",
               "server CPU µs/request"], rows),
        f"One Redis core at 100 % carries ~{1e6 / per_turn_us:.0f} turns/s of this mix on this machine "
        f"(server CPU {per_turn_us:.0f} µs per turn, {trips:.1f} round trips)." if per_turn_us else "",
    ])


def size_label(r: SizeResult) -> str:
    return f"{r.pods} pods × {r.users} users"


def latency_table(results: list[SizeResult]) -> str:
    rows = []
    for r in results:
        for op in OPS:
            values = r.ops.get(op, [])
            rows.append([size_label(r), op, len(values), p50(values), pct(values, 99)])
    return table(["size", "operation", "count", "p50 ms", "p99 ms"], rows)


def summary_table(results: list[SizeResult]) -> str:
    rows = []
    for r in results:
        writes = sum(n for (op, _), n in r.store_requests.items() if op.startswith("put") or op == "delete")
        reads = sum(n for (op, _), n in r.store_requests.items() if op in ("get", "head", "list"))
        hottest = max(r.hot_writes.values(), default=0)
        rows.append([size_label(r), r.sessions, r.turns, f"{r.seconds:.1f}", r.per_second,
                     r.per_turn(reads), r.per_turn(writes), f"{r.per_turn(r.bytes_down) / 1024:.1f}",
                     f"{r.per_turn(r.bytes_up) / 1024:.1f}", r.per_turn(r.redis_commands),
                     r.per_turn(r.version_trips),
                     f"{r.redis_memory_per_session / 1024:.1f}", f"{r.session_key_bytes / 1024:.1f}",
                     f"{hottest / r.seconds:.1f}" if r.seconds else "n/a",
                     f"{r.per_turn(r.pod_cpu_seconds) * 1000:.0f}", f"{r.per_turn(r.redis_cpu_seconds) * 1e6:.0f}",
                     len(r.errors) + r.collect_errors, r.buffer_fallbacks])
    return table(["size", "sessions", "turns", "seconds", "turns/s", "store reads/turn", "store writes/turn",
                  "KiB down/turn", "KiB up/turn", "Redis commands/turn", "version round trips/turn",
                  "Redis KiB/session (used_memory)",
                  "Redis KiB/session (MEMORY USAGE)", "writes/s on the hottest object", "pod CPU ms/turn",
                  "Redis CPU µs/turn", "errors",
                  "Redis fallbacks"], rows)


def breakdown_table(results: list[SizeResult]) -> str:
    kinds = sorted({key for r in results for key in r.store_requests})
    headers = ["store request", *[size_label(r) for r in results]]
    rows = [[f"{op} {kind}", *[f"{r.per_turn(r.store_requests.get((op, kind), 0)):.2f}" for r in results]]
            for op, kind in kinds]
    for kind in Kind:
        rows.append([f"model: {kind.value}", *[f"{r.per_turn(r.model_calls.get(kind.value, 0)):.2f}"
                                               for r in results]])
    commands = sorted({c for r in results for c, n in r.redis_by_command.items() if n > 0})
    rows += [[f"Redis {c.upper()}", *[f"{r.per_turn(r.redis_by_command.get(c, 0)):.2f}" for r in results]]
             for c in commands]
    return table(headers, rows)


def run(quick: bool = False) -> str:
    sizes = QUICK_SIZES if quick else SIZES
    results: list[SizeResult] = []
    turns_needed = max(t for _, _, t in sizes)
    with servers(redis=True) as (weed, red), ScriptedLLM() as llm:
        handler = LoadModel(dict(conversation(turns_needed)))
        _HANDLERS[id(llm)] = handler
        llm.set_handler(handler)
        for pods, users, turns in sizes:
            print(f"[load] {pods} pods × {users} users × {turns} turns …", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            results.append(run_size(pods, users, turns, weed, red, llm))
            print(f"[load]   done in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
        probes = [] if quick else redis_ceiling(red, results[-1])
    errors = [e for r in results for e in r.errors[:3]]
    return "\n\n".join([
        "### Load — pods × users on one Redis and one bucket",
        summary_table(results),
        "*store reads / writes per turn* count every request (GET/HEAD/LIST, PUT/DELETE) of every pod, background "
        "work included (summaries, extractions), divided by turns. *writes/s on the hottest object*: the most "
        "writes one object (a place's manifest or MEMORY.md) took per second. *Redis KiB/session*: used_memory "
        "growth over the run / sessions buffered (what an active session costs Redis, overheads included); "
        "MEMORY USAGE: one session's two keys.",
        "### Latency per operation",
        latency_table(results),
        "*turn* = build + run (+ save on every 4th turn); *collect*, *summary* and *extraction* run in the "
        "background (the post-hook queues them), timed inside the pods.",
        "### Requests per turn, by kind",
        breakdown_table(results),
        "Redis commands include those run inside our Lua scripts (a collect script runs 12).",
        *(["### What one Redis node carries", ceiling_table(probes)] if probes else []),
        *(["Errors (first few): " + "; ".join(errors)] if errors else []),
    ])


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv[1:]))
