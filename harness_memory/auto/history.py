"""The history of a place's automatic updates: what each extraction changed and what the rules
refused (a merge refused whole names its ids and its reason).

Why in the store, beside the watermarks (``.auto-state.json``): a refusal happens on whichever pod
ran the update, and the person looking at the facts API asks another pod later; the state file is
written in the same locked transaction as every update already, so keeping the last
``MAX_HISTORY`` records there costs no request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .plan import ApplyReport, MergeRefusal

#: Records kept per place (the newest).
MAX_HISTORY = 50
_MAX_REFUSAL_TEXT = 200


@dataclass(frozen=True, slots=True)
class UpdateRecord:
    """One automatic update of a place."""

    at: str
    session: str
    added: int = 0
    merged: int = 0
    removed: int = 0
    merges_proposed: int = 0
    #: Refused changes by reason (``ApplyReport.rejected``).
    refused: dict[str, int] = field(default_factory=dict)
    merges_refused: tuple[MergeRefusal, ...] = ()

    @classmethod
    def of(cls, report: ApplyReport, at: str, session: str) -> UpdateRecord:
        return cls(at, session, len(report.added), len(report.merged), len(report.removed), report.merges_proposed,
                   dict(sorted(report.rejected.items())),
                   tuple(MergeRefusal(r.content[:_MAX_REFUSAL_TEXT], r.ids[:16], r.reason)
                         for r in report.merges_refused))

    def to_json(self) -> dict[str, Any]:
        return {"at": self.at, "session": self.session, "added": self.added, "merged": self.merged,
                "removed": self.removed, "merges_proposed": self.merges_proposed, "refused": self.refused,
                "merges_refused": [{"content": r.content, "ids": list(r.ids), "reason": r.reason}
                                   for r in self.merges_refused]}

    @classmethod
    def from_json(cls, data: object) -> UpdateRecord | None:
        """The record, or None when ``data`` is not one (a damaged state file loses no fact)."""
        if not isinstance(data, dict):
            return None
        try:
            refusals = tuple(MergeRefusal(str(r["content"]), tuple(str(i) for i in r["ids"]), str(r["reason"]))
                             for r in data.get("merges_refused") or [])
            refused = {str(k): int(v) for k, v in (data.get("refused") or {}).items()}
            return cls(str(data["at"]), str(data.get("session", "")), int(data.get("added", 0)),
                       int(data.get("merged", 0)), int(data.get("removed", 0)), int(data.get("merges_proposed", 0)),
                       refused, refusals)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
