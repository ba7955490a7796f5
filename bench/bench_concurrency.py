"""Concurrency: saves per second into ONE place from 1 / 2 / 4 / 8 OS processes, and lost entries.

Run: ``.venv/bin/python -m bench.bench_concurrency`` (starts its own SeaweedFS and redis-server on
127.0.0.1; ``--quick`` for the smallest configuration).

Every process ("pod") is a ``bench.concurrency_worker`` saving its share of a fixed total through
``MemoryTools.save_file`` into the same user's place, all released at once by a start gate (so
Python start-up is not timed). Two deployments:

* **cos + Redis lock** — ``CosStore`` on SeaweedFS with conditional PUT turned OFF, as on real
  COS (which ignores If-Match): the Redis place lock alone must keep the index whole;
* **local + flock** — ``LocalStore`` with the thread + ``flock`` place lock.

Throughput = saves / (last worker's end − first worker's start). Afterwards the stored
``MEMORY.md`` and ``.manifest.json`` are read back and every attempted file is looked up in both:
an entry missing from either is LOST (must be 0). A save that answered an error (for example a
lock timeout) is reported separately — the caller was told, so it is not a silent loss.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_memory.config import MemoryConfig
from harness_memory.memdir import parse_index
from harness_memory.services import MemoryServices
from tests.helpers import ROOT, child_env, write_config

from .common import config_for, p50, pct, scratch_dir, servers, table
from .concurrency_worker import file_name

PROCESSES = (1, 2, 4, 8)
TOTAL_SAVES = 240
QUICK_PROCESSES = (2,)
QUICK_TOTAL = 6
USER = "bench-storm"
TIMEOUT = 300


@dataclass
class StormResult:
    deployment: str
    processes: int
    attempted: int
    saved: int
    seconds: float
    latencies_ms: list[float]
    lost_index: int
    lost_manifest: int
    failed: int
    #: CPU seconds the workers spent in their save loops (all processes together).
    cpu_seconds: float = 0.0
    #: CPU seconds SeaweedFS and redis-server spent meanwhile (COS deployment; 0 for local).
    server_cpu_seconds: float = 0.0

    @property
    def per_second(self) -> float:
        return self.saved / self.seconds if self.seconds > 0 else float("nan")

    def row(self, base: float) -> list[object]:
        return [self.deployment, self.processes, self.attempted, self.per_second,
                f"{self.per_second / base:.2f}×" if base else "n/a", p50(self.latencies_ms),
                pct(self.latencies_ms, 95), f"{1000 * self.cpu_seconds / max(1, self.saved):.1f}",
                f"{1000 * self.server_cpu_seconds / max(1, self.saved):.1f}" if self.server_cpu_seconds else "—",
                self.failed, self.lost_index, self.lost_manifest]


HEADERS = ["deployment", "processes", "saves", "saves/s", "vs 1 process", "save p50 ms", "save p95 ms",
           "pod CPU ms/save", "server CPU ms/save", "failed saves", "lost MEMORY.md entries", "lost manifest entries"]


def _spawn(worker: int, count: int, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "bench.concurrency_worker", USER, str(worker), str(count)],
                            cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of these processes so far (``/proc/<pid>/stat``; 0 where unreadable)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14 and 15)
    return total


def storm(cfg: MemoryConfig, deployment: str, processes: int, total: int,
          server_pids: list[int] | None = None) -> StormResult:
    tmp = Path(scratch_dir("hm-bench-storm-"))
    env = child_env(write_config(cfg, tmp / "config.yaml"))
    shares = [total // processes + (1 if w < total % processes else 0) for w in range(processes)]
    procs = [_spawn(w, n, env) for w, n in enumerate(shares)]
    try:
        for p in procs:  # wait for every worker to be set up
            assert p.stdout is not None
            line = p.stdout.readline()
            if line.strip() != "READY":
                raise RuntimeError(f"bench worker did not start: {line}{p.stdout.read()}")
        servers_before = _cpu_seconds(server_pids or [])
        for p in procs:  # open the gate
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        reports: list[dict[str, Any]] = []
        for p in procs:
            out, _ = p.communicate(timeout=TIMEOUT)
            if p.returncode != 0:
                raise RuntimeError(f"bench worker failed (exit {p.returncode}):\n{out}")
            reports.append(json.loads(out.strip().splitlines()[-1]))
        servers_cpu = _cpu_seconds(server_pids or []) - servers_before
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    attempted = {file_name(w, i) for w, n in enumerate(shares) for i in range(n)}
    services = MemoryServices.from_config(cfg)
    try:
        memdir = services.user_agent_dir(USER)
        index_files = {f for _, f, _ in parse_index(services.store.get(memdir.index_key).data.decode("utf-8"))}
        manifest_files = set(memdir.manifest().entries)
    finally:
        services.close()
    failed = {f["file"] for r in reports for f in r["failures"]}
    succeeded = attempted - failed
    return StormResult(
        deployment=deployment, processes=processes, attempted=len(attempted),
        saved=sum(int(r["saved"]) for r in reports),
        seconds=max(r["end"] for r in reports) - min(r["start"] for r in reports),
        latencies_ms=[x for r in reports for x in r["latencies_ms"]],
        lost_index=len(succeeded - index_files),
        lost_manifest=len(succeeded - manifest_files),
        failed=len(failed),
        cpu_seconds=sum(float(r.get("cpu_s", 0.0)) for r in reports),
        server_cpu_seconds=servers_cpu,
    )


def run(quick: bool = False) -> str:
    counts = QUICK_PROCESSES if quick else PROCESSES
    total = QUICK_TOTAL if quick else TOTAL_SAVES
    rows: list[list[object]] = []
    with servers(redis=True) as (weed, red):
        deployments = [
            ("cos + Redis lock", lambda: config_for("cos", weed, red, store={"cos_conditional_put": "off"}),
             [pid for pid in (weed.pid, red.pid if red is not None else None) if pid is not None]),
            ("local + flock", lambda: config_for("local"), []),
        ]
        for name, make, pids in deployments:
            results = [storm(make(), name, n, total, pids) for n in counts]
            base = results[0].per_second if results[0].processes == 1 else 0.0
            rows += [r.row(base) for r in results]
    return "\n\n".join([
        f"### Concurrency — {total} saves into one place, split over {'/'.join(map(str, counts))} processes",
        table(HEADERS, rows),
        "Lost = attempted files missing from the stored MEMORY.md / manifest, not counting saves that "
        "answered an error (those are in *failed saves*). Each process runs its saves one after another; "
        "the place lock serialises the index update across processes. *pod CPU* is the CPU time the "
        "worker processes spent in their save loops, *server CPU* what SeaweedFS and redis-server spent "
        "meanwhile, both per save: on this 2-core machine their sum bounds the saves per second "
        "(2,000 ms of CPU per second / ms per save), whatever the lock and the group commit do.",
    ])


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv[1:]))
