"""Pending updates kept across a restart: what the exit flush could not process is stored, not
dropped, and queued again at the next start.

Why in the store, and where: the batches hold the user's own words, so each user's batches go into
that user's auto place (``.auto-state.json``, key ``pending``) — exported and cleared with the
user's memory, never readable from another user's place. Only the user ids that have something
waiting are listed in the shared auto place (``.auto-pending.json``) so the next start finds them
without listing every user. Both writes are locked transactions of memdir; a resumed batch goes
through the watermarks, so a message that was already learned is never sent twice.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from .model import Batch, CapturedMessage, QueueKey, Signals
from .store import AutoPlace

log = logging.getLogger(__name__)

INDEX_FILE = ".auto-pending.json"
#: Most batches kept per user (the newest): a pod that cannot reach its model for days must not
#: grow the state file without bound.
MAX_PENDING_PER_USER = 20


def batch_json(batch: Batch) -> dict[str, Any]:
    return {"agent_type": batch.key.agent_type, "session_id": batch.key.session_id,
            "signals": sorted(batch.signals.names), "excerpts": [list(e) for e in batch.signals.excerpts],
            "carried": batch.carried,
            "messages": [{"role": m.role, "text": m.text, "key": m.key, "at": m.created_at, "tokens": m.tokens}
                         for m in batch.messages]}


def batch_from_json(user_id: str, data: object, now: float) -> Batch | None:
    """The batch, or None when ``data`` is not one (a damaged entry is skipped, never raised)."""
    try:
        assert isinstance(data, dict)
        key = QueueKey(user_id, str(data["agent_type"]), str(data["session_id"]))
        messages = [CapturedMessage(str(m["role"]), str(m["text"]), str(m["key"]), float(m.get("at", 0.0)),
                                    int(m.get("tokens", 0))) for m in data["messages"]]
        signals = Signals(frozenset(str(n) for n in data.get("signals", [])),
                          tuple((str(a), str(b)) for a, b in data.get("excerpts", [])))
    except (AssertionError, KeyError, TypeError, ValueError, AttributeError):
        return None
    if not messages:
        return None
    return Batch(key, messages, signals, first_at=now, last_at=now, carried=bool(data.get("carried", False)))


def save_pending(batches: list[Batch], user_place: Callable[[str], AutoPlace], index: AutoPlace) -> int:
    """Store ``batches`` in their users' places and list the users in ``index``; returns how many
    batches were stored (a user whose place cannot be written keeps nothing, and is logged)."""
    by_user: dict[str, list[Batch]] = {}
    for batch in batches:
        by_user.setdefault(batch.key.user_id, []).append(batch)
    stored: list[str] = []
    count = 0
    for user, items in by_user.items():
        try:
            with user_place(user).transaction() as txn:
                marks = txn.watermarks
                marks.pending = [*marks.pending, *(batch_json(b) for b in items)][-MAX_PENDING_PER_USER:]
            result = txn.place_txn.committed
            if result is not None and result.state_failures:
                raise OSError(f"state file not written: {result.state_failures}")
            stored.append(user)
            count += len(items)
        except Exception as exc:
            log.warning("auto memory: %d pending update(s) of user %s could not be kept (%s)", len(items), user, exc)
    if stored:
        try:
            with index.dir.transaction() as ptxn:
                users = _read_index(index) | set(stored)
                ptxn.put_state(INDEX_FILE, json.dumps({"version": 1, "users": sorted(users)}).encode())
        except Exception as exc:  # the batches are in the users' places; only the pointer is missing
            log.warning("auto memory: could not list users with pending updates (%s)", exc)
    return count


def take_pending(user_place: Callable[[str], AutoPlace], index: AutoPlace) -> list[Batch]:
    """The stored pending batches of every listed user, removed from the store (each user's place
    in its own transaction, then the list) — the caller queues them again."""
    users = _read_index(index)
    if not users:
        return []
    out: list[Batch] = []
    done: set[str] = set()
    now = time.monotonic()
    for user in sorted(users):
        try:
            with user_place(user).transaction() as txn:
                marks = txn.watermarks
                raw, marks.pending = marks.pending, []
            out += [b for b in (batch_from_json(user, item, now) for item in raw) if b is not None]
            done.add(user)
        except Exception as exc:
            log.warning("auto memory: pending updates of user %s not resumed (%s); kept for later", user, exc)
    try:
        with index.dir.transaction() as ptxn:
            left = _read_index(index) - done
            if left:
                ptxn.put_state(INDEX_FILE, json.dumps({"version": 1, "users": sorted(left)}).encode())
            else:
                ptxn.delete_state(INDEX_FILE)
    except Exception as exc:
        log.warning("auto memory: list of users with pending updates not updated (%s)", exc)
    return out


def _read_index(index: AutoPlace) -> set[str]:
    obj = index.dir.store.get_or_none(index.dir.place.prefix + INDEX_FILE)
    if obj is None:
        return set()
    try:
        users = json.loads(obj.data.decode("utf-8")).get("users", [])
        return {u for u in users if isinstance(u, str) and u}
    except (ValueError, AttributeError):
        log.warning("auto memory: %s unreadable; ignored", INDEX_FILE)
        return set()
