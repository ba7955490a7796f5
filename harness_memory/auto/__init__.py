"""Auto memory: debounced background extraction of facts, corrections and a user profile from
finished runs, stored as memory files in the auto-memory places and injected, within a token
budget, into every agent's system prompt.

Typical use (``build_agent`` does this when ``auto.enabled``)::

    attach_auto_memory(agent, services, user_id, agent_type)

which is, by hand::

    auto = auto_memory_for(services)
    agent = Agent(..., post_hooks=[auto.make_post_hook(agent_type)],
                  additional_context=auto.render_injection(user_id))
"""

from .apply import ApplyReport, ApplyRules, NewFact, UpdatePlan, apply_plan, scrub_uploads
from .capture import (
    capture_messages,
    capture_run,
    detect_correction,
    detect_reinforcement,
    detect_signals,
    strip_injected,
)
from .inject import render_injection_block
from .model import Batch, CapturedMessage, Category, Fact, Profile, ProfileKey, QueueKey, Signals
from .queue import DebounceQueue, QueuePolicy, QueueStats, QueueWorker
from .service import AutoMemory, FactNotFound, attach_auto_memory, auto_memory_for
from .store import AutoPlace, AutoView, Watermarks
from .updater import Updater, UpdateResult, UpdateStatus, build_messages, parse_answer

__all__ = [
    "ApplyReport",
    "ApplyRules",
    "AutoMemory",
    "AutoPlace",
    "AutoView",
    "Batch",
    "CapturedMessage",
    "Category",
    "DebounceQueue",
    "Fact",
    "FactNotFound",
    "NewFact",
    "Profile",
    "ProfileKey",
    "QueueKey",
    "QueuePolicy",
    "QueueStats",
    "QueueWorker",
    "Signals",
    "UpdatePlan",
    "UpdateResult",
    "UpdateStatus",
    "Updater",
    "Watermarks",
    "apply_plan",
    "attach_auto_memory",
    "auto_memory_for",
    "build_messages",
    "capture_messages",
    "capture_run",
    "detect_correction",
    "detect_reinforcement",
    "detect_signals",
    "parse_answer",
    "render_injection_block",
    "scrub_uploads",
    "strip_injected",
]
