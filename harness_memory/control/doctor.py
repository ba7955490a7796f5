"""``harness-memory doctor``: can this pod do memory work right now, and if not, what to fix.

Why a runner separate from the checks: the CLI (all checks, a table or ``--json``) and the HTTP
readiness probe (the quick store and Redis checks) share it, so both give the same verdict with
the same words. Every check runs in its own thread with a deadline: a hung store or model makes
that one row say "no answer within N s" instead of hanging the command or the probe.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from .doctor_checks import (
    Finding,
    Status,
    check_agent_model,
    check_clock,
    check_config,
    check_embeddings,
    check_light_model,
    check_redis,
    check_redis_ready,
    check_store,
    check_store_ready,
    check_tiktoken,
)

if TYPE_CHECKING:
    from ..services import MemoryServices

CheckFn = Callable[["MemoryServices", float], Finding]

#: Every doctor check, in the order of the table.
CHECKS: dict[str, CheckFn] = {
    "config": check_config,
    "store": check_store,
    "clock": check_clock,
    "redis": check_redis,
    "agent model": check_agent_model,
    "light model": check_light_model,
    "embeddings": check_embeddings,
    "tiktoken": check_tiktoken,
}
#: The readiness probe's checks (cheap: no writes, no model calls).
READY_CHECKS: dict[str, CheckFn] = {"store": check_store_ready, "redis": check_redis_ready}


@dataclass
class CheckResult:
    name: str
    status: Status
    detail: str
    fix: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != "fail"


@dataclass
class DoctorReport:
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def counts(self) -> dict[str, int]:
        out = {"ok": 0, "warn": 0, "fail": 0, "skip": 0}
        for r in self.results:
            out[r.status] += 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {"ok": self.ok, "counts": self.counts(), "checks": [asdict(r) for r in self.results]}

    def table(self) -> str:
        """A plain-text table: check, status, time, detail, and a "fix:" line under problems."""
        c = self.counts()
        head = (f"harness-memory doctor: {'OK' if self.ok else 'FAILED'} — {len(self.results)} checks, "
                f"{c['fail']} failed, {c['warn']} warnings, {c['skip']} skipped")
        width = max([len(r.name) for r in self.results] + [5])
        lines = [head, "", f"{'CHECK':<{width}}  STATUS  {'TIME':>8}  DETAIL"]
        for r in self.results:
            lines.append(f"{r.name:<{width}}  {r.status.upper():<6}  {r.seconds * 1000:>6.0f}ms  {r.detail}")
            if r.fix and r.status in ("fail", "warn"):
                lines.append(f"{'':<{width}}  {'':<6}  {'':>8}  fix: {r.fix}")
        return "\n".join(lines)


def run_checks(services: MemoryServices, checks: dict[str, CheckFn] | None = None, *,
               deadline: float | None = None, only: list[str] | None = None) -> DoctorReport:
    """Run ``checks`` (default: all) concurrently, each within ``deadline`` seconds (default:
    ``observe.doctor_timeout_seconds``); results in table order."""
    checks = checks if checks is not None else CHECKS
    if only:
        unknown = [n for n in only if n not in checks]
        if unknown:
            raise ValueError(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(checks)}")
        checks = {n: fn for n, fn in checks.items() if n in only}
    limit = deadline if deadline is not None else services.config.observe.doctor_timeout_seconds
    slots: dict[str, CheckResult] = {}
    threads = []
    for name, fn in checks.items():
        thread = threading.Thread(target=_run_one, args=(services, name, fn, limit, slots),
                                  name=f"hm-doctor-{name}", daemon=True)
        thread.start()
        threads.append((name, thread, time.monotonic()))
    end = time.monotonic() + limit
    for name, thread, started in threads:
        thread.join(max(0.0, end - time.monotonic()))
        if name not in slots:
            slots[name] = CheckResult(name, "fail", f"no answer within {limit:g} s",
                                      "the service behind this check hangs; see its detail in the logs",
                                      round(time.monotonic() - started, 4))
    return DoctorReport([slots[name] for name in checks])


def _run_one(services: MemoryServices, name: str, fn: CheckFn, deadline: float,
             slots: dict[str, CheckResult]) -> None:
    started = time.monotonic()
    try:
        found = fn(services, deadline)
        result = CheckResult(name, found.status, found.detail, found.fix)
    except Exception as exc:  # a check that raises is a failed check, named
        result = CheckResult(name, "fail", f"{type(exc).__name__}: {exc}"[:400])
    result.seconds = round(time.monotonic() - started, 4)
    slots.setdefault(name, result)


async def ready_checks(services: MemoryServices, deadline: float) -> DoctorReport:
    """The readiness probe: ``READY_CHECKS`` concurrently, off the event loop (the services'
    ``work`` pool), each within ``deadline`` seconds."""

    async def one(name: str, fn: CheckFn) -> CheckResult:
        started = time.monotonic()
        try:
            found = await asyncio.wait_for(services.run_off_loop(fn, services, deadline), deadline)
            result = CheckResult(name, found.status, found.detail, found.fix)
        except TimeoutError:
            result = CheckResult(name, "fail", f"no answer within {deadline:g} s")
        except Exception as exc:  # any failure means "not ready", with its reason
            result = CheckResult(name, "fail", f"{type(exc).__name__}: {exc}"[:300])
        result.seconds = round(time.monotonic() - started, 4)
        return result

    return DoctorReport(list(await asyncio.gather(*(one(n, fn) for n, fn in READY_CHECKS.items()))))


__all__ = ["CHECKS", "READY_CHECKS", "CheckResult", "DoctorReport", "ready_checks", "run_checks"]
