"""What recall insight (``recall/insight.py``) adds to a recall: one record per recall.

Run: ``.venv/bin/python -m bench.bench_insight`` (``--quick``: fewer repetitions; starts its own
redis-server on 127.0.0.1). Times ``RecallInsight.record`` with a realistic decision (5 recalled
files, 20 ranked candidates with three scores, a 300-character query) — one pipelined round trip
to Redis (HSET + EXPIRE + SET EX), or the in-process maps — and the reads the page makes (the
last-recalled hash of a place holding N recalled files, one session's decision). Wall time, so
on a shared machine it includes the neighbours' load.
"""

from __future__ import annotations

import random
import sys

import redis

from harness_memory.recall.insight import Candidate, RecallDecision, RecallInsight
from tests.servers import RedisServer

from .common import p50, pct, table, timed

PAGE = [f"memory_{j}.md" for j in range(0, 100, 2)]


def decision(i: int) -> RecallDecision:
    files = tuple(f"memory_{i % 400 + j}.md" for j in range(5))
    return RecallDecision(at=1.0, query="部署流程 staging deploy " * 12, path="model", model_asked=True,
                          model_picked=files, chosen=files, recalled=files, surfaced_before=3,
                          candidates=tuple(Candidate(f"memory_{j}.md", 3.1, 0.42, 0.61) for j in range(20)))


def measure(insight: RecallInsight, mode: str, reps: int) -> list[list[object]]:
    rows: list[list[object]] = []
    counter = iter(range(10**9))

    def record() -> None:
        i = next(counter)
        d = decision(i)
        insight.record("u1", "default", d.recalled, session_id=f"s{i % 50}", decision=d)

    for _ in range(20):
        record()
    for what, fn in (("record (per recall)", record),
                     ("last_recalled, a page of 50 (listing)", lambda: insight.last_recalled("u1", "default", PAGE)),
                     ("last_recalled, whole place", lambda: insight.last_recalled("u1")),
                     ("decision (why view)", lambda: insight.decision("s1", user_id="u1"))):
        times = timed(fn, reps)
        rows.append([mode, what, p50(times), pct(times, 95)])
    return rows


def run(quick: bool = False) -> str:
    reps = 200 if quick else 2000
    with RedisServer() as server:
        client = redis.Redis.from_url(server.url)
        prefix = f"bi-{random.randrange(1 << 30):x}:"
        rows = measure(RecallInsight(client, key_prefix=prefix), "redis", reps)
        held = len(client.hkeys(f"{prefix}recall:last:u1:default"))
        client.close()
    rows += measure(RecallInsight(None), "in-process", reps)
    return "\n\n".join([f"### Recall insight — cost per call (ms, {reps} calls; {held} files in the place's hash)",
                        table(["mode", "call", "p50 ms", "p95 ms"], rows)])


if __name__ == "__main__":
    print(run(quick="--quick" in sys.argv[1:]))
