"""The trust storm: 8 processes write one place (new files, and chunk-replace appends to one
shared ledger) while a chaos thread SIGSTOPs the current lock holder past its lease and pauses
the store past ``cos_timeout x attempts``; afterwards every operation's report is checked
against what readers see. Used by ``tests/test_trust_storm.py`` (short) and ``bench`` (long).

The rules checked: an operation reported **done** is never lost (its file is there and indexed,
its ledger line is in the ledger, exactly once); one reported **failed** changed nothing readable (no
file, no index entry, no ledger line). ``unknown`` (the store died mid-commit; a head that landed with its
redo record is completed by the next writer) may go either way.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_memory.config import MemoryConfig
from harness_memory.locks import RedisLocker
from harness_memory.services import MemoryServices
from tests.helpers import ROOT, child_env, write_config
from tests.httpfaults import HttpFaultProxy
from tests.trust_worker import END, LEDGER, ledger_seed

USER = "storm"


@dataclass
class StormReport:
    ops: list[dict[str, Any]] = field(default_factory=list)
    holder_stops: int = 0
    store_pauses: int = 0
    redis_outages: int = 0
    #: Answers the HTTP proxy lost or held back past the timeout (``drops``), after delivering them.
    dropped_answers: int = 0
    delayed_answers: int = 0
    #: A replace whose ledger line is there more than once (applied twice).
    doubled: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # reported done, not readable
    leaked: list[str] = field(default_factory=list)  # reported failed, yet readable
    index_mismatch: list[str] = field(default_factory=list)

    def count(self, outcome: str) -> int:
        return sum(1 for op in self.ops if op["outcome"] == outcome)

    def waits(self) -> list[float]:
        return [op["wait"] for op in self.ops if op["outcome"] == "done"]


def _pause(pid: int, seconds: float) -> None:
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(seconds)
    finally:
        os.kill(pid, signal.SIGCONT)


def run(cfg: MemoryConfig, tmp: Path, *, workers: int = 8, seconds: float = 6.0, store_pid: int | None = None,
        stop_holders: bool = True, store_pauses: int = 1, redis_outage: tuple[Any, float, float] | None = None,
        seed: int = 12, drops: float = 0.0, create_only: bool = False) -> StormReport:
    """Run the storm on ``cfg`` (COS + Redis) and check every report; see the module docstring.

    ``redis_outage``: (the ``RedisServer`` of ``cfg``, seconds after the start, duration): the
    server is killed then restarted (empty) on the same port. ``drops``: the workers reach the
    store through ``HttpFaultProxy``, which delivers every request and loses the answer of that
    share of the writes (PUT, DELETE) — and holds back half as many past ``cos_timeout`` — so the
    retries meet their own first attempts. ``create_only``: the saves are create-only."""
    rnd = random.Random(seed)
    report = StormReport()
    proxy = None
    if drops:
        _, _, rest = str(cfg.store.cos_domain).partition(":")
        port, _, bucket = rest.partition("/")
        proxy = HttpFaultProxy(int(port), seed=seed).start()
        writes = ("PUT", "DELETE")
        proxy.drop(lambda method, path, headers: method in writes, rate=drops)
        proxy.delay(lambda method, path, headers: method in writes, cfg.store.cos_timeout + 0.3, rate=drops / 2)
        cfg = cfg.model_copy(update={"store": cfg.store.model_copy(update={"cos_domain": proxy.domain_for(bucket)})})
    try:
        return _run(cfg, tmp, report, rnd, workers, seconds, store_pid, stop_holders, store_pauses, redis_outage,
                    proxy, create_only)
    finally:
        if proxy is not None:
            report.dropped_answers = len(proxy.faults("drop"))
            report.delayed_answers = len(proxy.faults("delay"))
            proxy.close()


def _run(cfg: MemoryConfig, tmp: Path, report: StormReport, rnd: random.Random, workers: int, seconds: float,
         store_pid: int | None, stop_holders: bool, store_pauses: int, redis_outage: tuple[Any, float, float] | None,
         proxy: HttpFaultProxy | None, create_only: bool) -> StormReport:
    services = MemoryServices.from_config(cfg)
    mdir = services.user_agent_dir(USER)
    mdir.save(LEDGER, ledger_seed())
    assert isinstance(services.locker, RedisLocker)
    lock_key = services.locker.keys(mdir.place.lock_name())[0]
    log = tmp / "storm-ops.jsonl"
    env = child_env(write_config(cfg, tmp / "storm.yaml"))
    if create_only:
        env = {**env, "HM_STORM_CREATE_ONLY": "1"}
    procs = [subprocess.Popen([sys.executable, "-m", "tests.trust_worker", USER, str(w), str(seconds), str(log)],
                              cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True) for w in range(workers)]
    subprocess_pids = {p.pid for p in procs}
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        _start(procs)
        stop_for = cfg.limits.lock_ttl_seconds + 0.5
        pause_for = cfg.store.cos_timeout * (cfg.store.cos_retries + 1) + 0.5
        deadline = time.monotonic() + seconds
        pauses_left = store_pauses if store_pid else 0
        next_pause = time.monotonic() + seconds / 2
        outage_at = time.monotonic() + redis_outage[1] if redis_outage else None
        while time.monotonic() < deadline - 1.0:
            time.sleep(rnd.uniform(0.3, 0.8))
            if redis_outage is not None and outage_at is not None and time.monotonic() >= outage_at:
                redis_outage[0].kill()
                time.sleep(redis_outage[2])
                redis_outage[0].restart()
                report.redis_outages += 1
                outage_at = None
                continue
            if pauses_left and time.monotonic() >= next_pause:
                _pause(store_pid, pause_for)  # type: ignore[arg-type]
                report.store_pauses += 1
                pauses_left -= 1
                next_pause = time.monotonic() + seconds / max(1, store_pauses)
                continue
            if not stop_holders:
                continue
            try:
                holder = services.redis.get(lock_key) if services.redis is not None else None
            except Exception:  # Redis down (the outage run): nobody to stop
                holder = None
            pid = int(holder.decode().split("-", 1)[0]) if holder else 0
            if pid in subprocess_pids:
                _pause(pid, stop_for)
                report.holder_stops += 1
        for p in procs:
            p.wait(timeout=seconds + 120)
    finally:
        for p in procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
    report.ops = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    if proxy is not None:
        proxy.rules.clear()  # the check reads through the proxy: no faults now
    _check(mdir, report)
    services.close()
    return report


def _start(procs: list[subprocess.Popen[str]]) -> None:
    threads = [threading.Thread(target=lambda p=p: (p.stdin.write("go\n"), p.stdin.flush()))  # type: ignore[union-attr]
               for p in procs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def _check(mdir: Any, report: StormReport) -> None:
    manifest = mdir.manifest()
    ledger = mdir.read(LEDGER).text
    assert ledger.rstrip().endswith(END)
    for op in report.ops:
        if op["kind"] == "save":
            name = f"{op['op']}.md"
            readable = name in manifest.entries or mdir.store.exists(mdir.place.key(name))
        else:
            times = ledger.count(f"- {op['op']}\n")
            readable = times > 0
            if times > 1:
                report.doubled.append(op["op"])
        if op["outcome"] == "done" and not readable:
            report.lost.append(op["op"])
        elif op["outcome"] == "failed" and readable:
            report.leaked.append(op["op"])
    entry = manifest.entries[LEDGER]
    if entry.size != len(ledger.encode("utf-8")):
        report.index_mismatch.append(LEDGER)
    for op in report.ops:
        if op["kind"] == "save" and op["outcome"] == "done" and f"{op['op']}.md" not in manifest.entries:
            report.index_mismatch.append(op["op"])
