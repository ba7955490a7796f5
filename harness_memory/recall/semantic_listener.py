"""The semantic tier as a commit listener of memdir (``memdir/port.py``): a commit that changed
memory files schedules their embedding in the background (``SemanticTier.after_commit``); a
``reindex`` leaves the vectors alone (the next commit or query fills what they lack). The
composition root gives it to every ``MemoryDir`` it builds while the tier runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..memdir import Manifest
    from .semantic import SemanticTier


class EmbedOnCommit:
    def __init__(self, tier: SemanticTier) -> None:
        self.tier = tier

    def committed(self, memdir: Any, manifest: Manifest, written: Mapping[str, Any], removed: Sequence[str],
                  cleared: bool, since: float | None) -> None:
        if written or removed or cleared:  # schedules work in the background; never waits for it
            self.tier.after_commit(memdir)

    def rebuilt(self, memdir: Any, manifest: Manifest, memories: Mapping[str, Any]) -> None:
        return None


__all__ = ["EmbedOnCommit"]
