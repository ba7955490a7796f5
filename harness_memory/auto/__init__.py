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

from .apply import apply_plan
from .capture import (
    capture_messages,
    capture_run,
    detect_correction,
    detect_reinforcement,
    detect_signals,
    strip_injected,
)
from .facts import FactNotFound
from .inject import render_injection_block
from .model import Batch, CapturedMessage, Category, Fact, Profile, ProfileKey, QueueKey, Signals
from .plan import ApplyContext, ApplyReport, ApplyRules, NewFact, Removal, UpdatePlan, scrub_uploads
from .queue import DebounceQueue, QueuePolicy, QueueStats, QueueWorker
from .rider import SummaryRider
from .service import AutoMemory, attach_auto_memory, auto_memory_for
from .signals import SignalPatterns, default_patterns
from .store import AutoPlace, AutoView, Watermarks
from .updater import Updater, UpdateResult, UpdateStatus, build_messages, parse_answer

__all__ = [
    "ApplyContext",
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
    "Removal",
    "SignalPatterns",
    "Signals",
    "SummaryRider",
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
    "default_patterns",
    "detect_correction",
    "detect_reinforcement",
    "detect_signals",
    "parse_answer",
    "render_injection_block",
    "scrub_uploads",
    "strip_injected",
]
