"""Placeholder replaced below."""
from __future__ import annotations

from typing import Any


def semantic_tier(services: Any) -> None:
    return None
