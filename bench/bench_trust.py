"""Trustworthy writes (issue 12): fair lock waits, a storm with stalls, a Redis outage, hostile frontmatter.

Run: ``.venv/bin/python -m bench.bench_trust`` (starts its own SeaweedFS and redis-server on
127.0.0.1; ``--quick`` for a short run). Every storm is ``tests/trust_storm.py``: 8 OS processes
write ONE place on COS (SeaweedFS, conditional PUT on) + Redis, alternating new-file saves and
chunk-replace appends to one shared ledger, and every reported outcome is checked against what
readers see afterwards.

* **fair waits** — no faults, production lease settings: the place-lock wait of every operation
  (p50 / p99 / max), measured in the workers around ``locker.hold``;
* **chaos** — short lease (3 s) and store timeout (1 s, no retries); a chaos thread SIGSTOPs the
  current lock holder (its pid is in the lock token) for lease + 0.5 s, and SIGSTOPs SeaweedFS for
  timeout x attempts + 0.5 s a few times. Reported-done operations lost and reported-failed
  operations that changed something must both be 0;
* **Redis outage** — redis-server killed for 5 s mid-storm and restarted empty: failed saves / all;
* **lost answers** (issue 28) — the workers reach SeaweedFS through an HTTP proxy that delivers
  every write and loses (or delays past the timeout) the answer of a share of them: applied twice,
  reported failed yet applied, and lost must all be 0;
* **hostile frontmatter** — parse-or-refuse time of the worst inputs under 64 KB, and the largest
  manifest entry they can produce.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from harness_memory.errors import MemoryFormatError
from harness_memory.memdir import ManifestEntry, parse_memory
from tests.servers import RedisServer, SeaweedFS
from tests.trust_storm import StormReport
from tests.trust_storm import run as storm

from .common import config_for, p50, pct, scratch_dir, servers, table

WORKERS = 8


def _waits_row(name: str, report: StormReport, seconds: float) -> list[object]:
    waits = [w * 1000 for w in report.waits()]
    done = report.count("done")
    held = [(op["seconds"] - op["wait"]) * 1000 for op in report.ops if op["outcome"] == "done"]
    return [name, WORKERS, len(report.ops), f"{done / seconds:.1f}", f"{p50(held):.0f}", f"{p50(waits):.0f}",
            f"{pct(waits, 99):.0f}",
            f"{max(waits, default=0):.0f}", report.count("failed"), report.count("unknown"), report.holder_stops,
            report.store_pauses, report.redis_outages, len(report.lost), len(report.leaked),
            f"{100 * report.count('failed') / max(1, len(report.ops)):.2f}%"]


HEADERS = ["storm", "processes", "operations", "done/s", "operation p50 ms (without the wait)",
           "lock wait p50 ms", "lock wait p99 ms", "lock wait max ms",
           "failed", "unknown", "holders stopped", "store pauses", "Redis outages", "lost (done, not readable)",
           "leaked (failed, yet changed)", "failed %"]

HOSTILE: dict[str, str] = {
    "billion laughs (460 B)": "---\nname: x\ndescription: y\ntype: user\na: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n"
    + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    + "---\nbody\n",
    "!!set tag": "---\nname: x\ndescription: y\ntype: user\ntags: !!set {a, b}\n---\nbody\n",
    "60 KB of keys": "---\nname: x\ndescription: y\ntype: user\n"
    + "".join(f"k{i:05d}: value number {i}\n" for i in range(2600)) + "---\nbody\n",
    "60 KB flow list": "---\nname: x\ndescription: y\ntype: user\ntags: ["
    + ", ".join(f"t{i}" for i in range(9000)) + "]\n---\nbody\n",
    "deep nesting": "---\nname: x\ndescription: y\ntype: user\nd: " + "[" * 5000 + "]" * 5000 + "\n---\nbody\n",
    "60 KB description": "---\nname: x\ndescription: " + "word " * 12000 + "\ntype: user\n---\nbody\n",
}


def hostile_rows() -> list[list[object]]:
    rows = []
    for name, text in HOSTILE.items():
        size = len(text.encode())
        t0 = time.perf_counter()
        try:
            memory = parse_memory(text)
            outcome = "saved"
            entry = len(str(ManifestEntry.from_memory("x.md", memory, size).to_dict()))
        except MemoryFormatError as exc:
            outcome, entry = "refused: " + str(exc).split(";")[0].split(".")[0][:60], 0
        ms = (time.perf_counter() - t0) * 1000
        rows.append([name, f"{size / 1024:.1f}", outcome, f"{ms:.1f}", entry])
    return rows


def run(quick: bool = False) -> str:
    seconds = 4.0 if quick else 20.0
    chaos_seconds = 6.0 if quick else 60.0
    rows: list[list[object]] = []
    tmp = Path(scratch_dir("hm-bench-trust-"))
    with servers(redis=True) as (weed, red):
        cfg = config_for("cos", weed, red)
        report = storm(cfg, _sub(tmp, "fair"), workers=WORKERS, seconds=seconds, stop_holders=False, store_pauses=0)
        rows.append(_waits_row("fair waits (no faults, defaults)", report, seconds))
        cfg = config_for("cos", weed, red, limits={"lock_ttl_seconds": 3.0, "lock_wait_seconds": 30.0},
                         store={"cos_timeout": 1.0, "cos_retries": 0})
        report = storm(cfg, _sub(tmp, "chaos"), workers=WORKERS, seconds=chaos_seconds, store_pid=weed.pid,
                       stop_holders=True, store_pauses=1 if quick else 3)
        rows.append(_waits_row("chaos (SIGSTOP holders, store paused)", report, chaos_seconds))
        rows.append(_outage_row(tmp, seconds, weed))
        drop_rows = [_drops_row(tmp, weed, red, rate, 6.0 if quick else 45.0) for rate in (0.05, 0.15)]
    return "\n\n".join([
        f"### Storms — {WORKERS} processes writing one place (COS on SeaweedFS + Redis)",
        table(HEADERS, rows),
        "Lock wait: time from asking for the place lock to holding it, per operation reported done; the "
        "queue serves writers in arrival order, so with 8 busy writers it is about 7 x the operation time "
        "(which grows with the machine's load: see the load average of this run). "
        "*unknown* = the store died mid-commit and the tool said the change may or may not have taken "
        "effect (its head, carrying the redo record, may have landed: then the next writer completes it); it is "
        "neither lost nor leaked.",
        f"### Lost answers — {WORKERS} processes through an HTTP proxy that delivers each write and loses its answer",
        table(DROP_HEADERS, drop_rows),
        "Issue 28. Create-only saves and chunk-replace appends to one ledger; the proxy (`tests/httpfaults.py`) "
        "delivers every PUT/DELETE to SeaweedFS, then drops the answer of the given share of them and holds back "
        "half as many past `cos_timeout` (1 s, `cos_retries` 1), so the store's retries meet their own first "
        "attempts. *applied twice*: a ledger line found more than once; *false failed*: reported failed yet "
        "readable; *lost*: reported done, not readable.",
        "### Hostile frontmatter (parse or refuse, one call)",
        table(["input", "KB", "outcome", "ms", "manifest entry bytes"], hostile_rows()),
    ])


DROP_HEADERS = ["answers lost", "operations", "done", "failed", "unknown", "answers dropped", "answers delayed",
                "applied twice", "false failed", "lost", "operation p50 ms"]


def _drops_row(tmp: Path, weed: SeaweedFS, red: RedisServer, rate: float, seconds: float) -> list[object]:
    cfg = config_for("cos", weed, red, limits={"lock_ttl_seconds": 4.0, "lock_wait_seconds": 30.0},
                     store={"cos_timeout": 1.0, "cos_retries": 1})
    report = storm(cfg, _sub(tmp, f"drops-{rate}"), workers=WORKERS, seconds=seconds, stop_holders=False,
                   store_pauses=0, drops=rate, create_only=True)
    held = [(op["seconds"] - op["wait"]) * 1000 for op in report.ops if op["outcome"] == "done"]
    return [f"{rate:.0%} + {rate / 2:.1%} late", len(report.ops), report.count("done"), report.count("failed"),
            report.count("unknown"), report.dropped_answers, report.delayed_answers, len(report.doubled),
            len(report.leaked), len(report.lost), f"{p50(held):.0f}"]


def _outage_row(tmp: Path, seconds: float, weed: SeaweedFS) -> list[object]:
    """A private redis-server (this one is killed), default Redis settings."""
    red = RedisServer(base_dir=_sub(tmp, "redis")).start()
    try:
        cfg = config_for("cos", weed, red)
        report = storm(cfg, _sub(tmp, "outage"), workers=WORKERS, seconds=max(seconds, 12.0),
                       stop_holders=False, store_pauses=0, redis_outage=(red, 3.0, 5.0))
        return _waits_row("Redis down 5 s mid-storm", report, max(seconds, 12.0))
    finally:
        red.close()


def _sub(tmp: Path, name: str) -> Path:
    path = tmp / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def main(argv: list[str]) -> Any:
    print(run(quick="--quick" in argv))


if __name__ == "__main__":
    main(sys.argv[1:])
