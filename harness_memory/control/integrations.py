"""The control plane's calls into session memory, auto memory and snapshots — one seam.

Why one module: the HTTP routes and the CLI show the same views (session debug, snapshot
status) and must degrade the same way; keeping every call into those packages here makes the
routes thin and the dependency on their APIs visible in one place. The packages are imported
on first use (agno-free, but not needed by most commands). Nothing here knows about HTTP.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Literal

from ..layout import validate_id

if TYPE_CHECKING:
    from ..auto.model import Fact
    from ..auto.service import AutoMemory
    from ..services import MemoryServices
    from ..session.manager import SessionMemoryManager

log = logging.getLogger(__name__)
RECENT_MESSAGES = 20


# -- session memory --------------------------------------------------------------------------
def session_manager(services: MemoryServices) -> SessionMemoryManager:
    return services.session_manager()


async def inject_summary(services: MemoryServices, session_id: str, message: str, *, new_session: bool
                         ) -> tuple[str, bool]:
    """(message to send, whether a summary was put in front). Never raises: memory degrades."""
    if new_session or not services.config.session.enabled:
        return message, False
    try:
        from ..session import inject_summary_for_session

        injected = await inject_summary_for_session(session_manager(services), session_id, message)
    except Exception as exc:
        log.warning("session summary for %s not injected (%s)", session_id, exc)
        return message, False
    return injected, injected != message


def session_debug(services: MemoryServices, session_id: str, *, messages: bool = False) -> dict[str, Any]:
    """Buffer length and tokens, state and its hash, lock, cached and stored summary of a session."""
    validate_id(session_id, "session id")
    info = session_manager(services).session_info_sync(session_id)
    state = info.state.as_dict() if info.state is not None else None
    state_json = json.dumps(state, sort_keys=True, default=str) if state is not None else None
    out: dict[str, Any] = {
        "session_id": info.session_id,
        "mode": info.mode,
        "buffer_messages": len(info.buffered) if state is None else state.get("length", len(info.buffered)),
        "buffer_tokens": state.get("tokens") if state else 0,
        "state": state or {},
        "state_hash": hashlib.sha256(state_json.encode()).hexdigest()[:16] if state_json else None,
        "lock_held": info.lock_held,
        "lock_ttl_ms": info.lock_ttl_ms,
        "lock_holder": info.lock_holder,
        "extraction_due": info.due,
        "cached_summary": info.cached_summary,
        "cached_version": info.cached_version,
        "stored_summary": info.stored_summary,
        "stored_version": info.stored_version,
    }
    if messages:
        out["messages"] = [asdict(m) for m in info.buffered[-RECENT_MESSAGES:]]
    return out


# -- auto memory -----------------------------------------------------------------------------
def auto_memory(services: MemoryServices) -> AutoMemory:
    return services.auto_memory()


def fact_dict(fact: Fact) -> dict[str, Any]:
    return {"id": fact.id, "content": fact.content, "category": str(fact.category.value),
            "confidence": fact.confidence, "source": fact.source, "source_error": fact.source_error,
            "created": fact.created or None, "updated": fact.updated or None,
            "confirmed": fact.confirmed or None, "confirmations": fact.confirmations,
            "expires": fact.expires or None}


def auto_place_label(services: MemoryServices, user_id: str | None) -> str:
    """The auto-memory directory of a user (None: the shared one), as the CLI names places."""
    from .places import place_path

    mdir = services.shared_auto_dir() if user_id is None else services.user_auto_dir(user_id)
    return place_path(mdir.place)


def clear_facts(services: MemoryServices, user_id: str | None) -> dict[str, Any]:
    """Delete every auto-memory fact of a user (None: the shared place) but keep the profile."""
    deleted = auto_memory(services).clear_facts(user_id, shared=user_id is None)
    return {"place": auto_place_label(services, user_id), "deleted": deleted}


# -- snapshots -------------------------------------------------------------------------------
SnapshotAction = Literal["replace", "mark-synced"]


def snapshot_status(services: MemoryServices, user_id: str, agent_type: str) -> dict[str, Any]:
    from ..snapshot import snapshot_state

    status = snapshot_state(services, None, agent_type, user_id)
    return {"user_id": user_id, **status.to_dict()}


def snapshot_action(services: MemoryServices, user_id: str, agent_type: str, action: SnapshotAction
                    ) -> dict[str, Any]:
    from ..snapshot import mark_snapshot_synced, replace_from_snapshot

    act = replace_from_snapshot if action == "replace" else mark_snapshot_synced
    status = act(services, None, agent_type, user_id)
    return {"user_id": user_id, "action": action, **status.to_dict()}
