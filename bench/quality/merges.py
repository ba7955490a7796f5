"""Merge counters of the quality harness (issue #31): per scenario, how many merges the
extraction model proposed, how many the apply rules applied and how many they refused whole, and
why. Kept apart from ``run.py`` so the other counters there can change without touching these.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from harness_memory.auto.updater import UpdateResult


@dataclass
class MergeCounts:
    proposed: int = 0
    applied: int = 0
    refused: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def cell(self) -> str:
        return f"{self.proposed}/{self.applied}/{self.refused}"


def merge_counts(results: Iterable[UpdateResult], user: str) -> MergeCounts:
    """The merges of ``user``'s applied updates among ``results`` (``AutoMemory.results``)."""
    out = MergeCounts()
    reasons: Counter[str] = Counter()
    for result in results:
        report = result.report
        if report is None or result.key.user_id != user:
            continue
        out.proposed += report.merges_proposed
        out.applied += len(report.merged)
        out.refused += len(report.merges_refused)
        reasons.update(r.reason for r in report.merges_refused)
    out.reasons = dict(sorted(reasons.items()))
    return out


def merge_line(per_scenario: Iterable[tuple[str, MergeCounts]]) -> str:
    """One line of the report: totals, refusal reasons and the scenarios that merged."""
    rows = list(per_scenario)
    total = MergeCounts()
    reasons: Counter[str] = Counter()
    for _, m in rows:
        total.proposed, total.applied, total.refused = (total.proposed + m.proposed, total.applied + m.applied,
                                                        total.refused + m.refused)
        reasons.update(m.reasons)
    where = ", ".join(f"{key} {m.cell()}" for key, m in rows if m.proposed)
    why = ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) or "none"
    return (f"Merges proposed/applied/refused: {total.cell()} (refusals: {why})"
            + (f"; by scenario: {where}" if where else "") + ".")
