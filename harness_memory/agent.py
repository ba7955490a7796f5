"""build_agent(user_id): an agno Agent with persistent memory, and the pieces to do it by hand.

Why this shape: people call ``build_agent`` once per request in their agno app, so it must be
cheap (one GET per place for the index; the shared place's index is cached briefly per pod)
and it must never fight agno: our five tools win over agno's own file tools and user-memory
tools of the same names (agno keeps the first tool of a name and silently drops the rest),
the memory prompt is appended to ``additional_context`` (never replacing the caller's), and
a caller setting that would drop the prompt is warned about.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from agno.agent import Agent
from agno.models.base import Model
from agno.tools import Toolkit
from agno.tools.function import Function

from .auto import attach_auto_memory
from .config import MemoryConfig
from .memdir import CappedText, Manifest, MemoryDir
from .prompt import PromptParts, render_agent_memory_prompt
from .recall import make_recall_pre_hook, recall_for_query
from .services import MemoryServices, services_for
from .session.binding import bind_session_id
from .session.hooks import attach_session_hooks
from .snapshot import apply_snapshot_on_build
from .tools import SEARCH_TOOL_NAME, TOOL_NAMES, MemoryTools

log = logging.getLogger(__name__)

#: agno tools that would shadow or duplicate ours (agno's own file and user-memory tools).
REPLACED_TOOL_NAMES = frozenset(TOOL_NAMES) | {SEARCH_TOOL_NAME, "update_user_memory", "update_profile"}
_FILE_TOOLKIT_CLASSES = ("FileTools", "LocalFileSystemTools")
UNAVAILABLE_INDEX = ("> The memory store could not be read when this conversation started; the tools may work "
                     "later. Do not tell the user their memories are gone.")

_default_config: MemoryConfig | None = None


def default_config() -> MemoryConfig:
    """The process config from the environment / ``$HARNESS_MEMORY_CONFIG``, loaded once."""
    global _default_config
    if _default_config is None:
        _default_config = MemoryConfig.load()
    return _default_config


def build_agent(
    user_id: str,
    *,
    agent_type: str = "default",
    model: Model | None = None,
    session_id: str | None = None,
    query: str | None = None,
    config: MemoryConfig | None = None,
    services: MemoryServices | None = None,
    tools: Sequence[Any] | None = None,
    **agent_kwargs: Any,
) -> Agent:
    """An agno ``Agent`` for ``user_id`` with persistent memory wired in.

    ``model`` defaults to the configured agent model (``HARNESS_MEMORY_MODEL`` …); with none
    configured the agent is still built and its first run reports which setting is missing.
    ``query`` (the user's message, when known) turns on relevant recall. ``services`` are the
    long-lived parts to use (default: the process-wide ones for ``config``). Any other keyword goes
    to ``Agent`` unchanged, except that memory-related settings that would conflict are adjusted
    (with a warning) and our hooks are appended to the caller's ``pre_hooks`` / ``post_hooks``.
    """
    if services is None:
        services = services_for(config or default_config())
    cfg = services.config
    if session_id is not None and cfg.session.bind_to_user:
        # Session summaries are stored by session id: bind it to the user, so two users who pick
        # the same id ("chat-1") never see each other's summary. Idempotent for bound ids.
        session_id = bind_session_id(user_id, session_id)
    if model is None:
        model = services.agent_model()
    agent_kwargs.setdefault("telemetry", False)
    agent = Agent(
        model=model,
        user_id=user_id,
        session_id=session_id,
        tools=_filter_tools(list(tools or [])),
        **_adjust_memory_kwargs(agent_kwargs),
    )
    return _wire(agent, services, user_id, agent_type, query=query)


def inject_memory_tools(
    agent: Agent,
    *,
    user_id: str | None = None,
    agent_type: str = "default",
    config: MemoryConfig | None = None,
    services: MemoryServices | None = None,
    query: str | None = None,
) -> Agent:
    """Give an Agent you built yourself everything ``build_agent`` adds.

    Removes agno's file tools and user-memory tools (and anything named like ours), puts
    ``MemoryTools`` first, appends the memory prompt to ``additional_context``, turns agno's own
    user memory / profile learning off and attaches the session and auto-memory hooks.
    Returns the same agent.
    """
    uid = user_id or agent.user_id
    if not uid:
        raise ValueError("inject_memory_tools needs a user_id (argument or agent.user_id)")
    if agent.user_id is None:
        agent.user_id = uid
    if services is None:
        services = services_for(config or default_config())
    cfg = services.config
    if agent.session_id is not None and cfg.session.bind_to_user:
        agent.session_id = bind_session_id(uid, agent.session_id)
    for key, value in _adjust_memory_kwargs({"enable_agentic_memory": agent.enable_agentic_memory,
                                             "learning": agent.learning}).items():
        setattr(agent, key, value)
    return _wire(agent, services, uid, agent_type, query=query)


def _wire(agent: Agent, services: MemoryServices, user_id: str, agent_type: str, *, query: str | None) -> Agent:
    """Tools, prompt and hooks for one user's agent (shared by build_agent and inject_memory_tools),
    observed as one ``memory.build`` span (the store reads it makes are its children)."""
    with services.telemetry.build(user_id, agent_type, agent.session_id):
        return _wire_parts(agent, services, user_id, agent_type, query=query)


def _wire_parts(agent: Agent, services: MemoryServices, user_id: str, agent_type: str, *,
                query: str | None) -> Agent:
    cfg = services.config
    own = services.user_agent_dir(user_id, agent_type)
    shared = services.shared_agent_dir(agent_type)
    # One Redis round trip for the versions of the places this build reads (``memdir/versions.py``):
    # while they hold, the pod's cached manifests and recalled bodies serve without a store read.
    dirs = [own, shared, *([services.user_auto_dir(user_id)] if cfg.auto.enabled else [])]
    versions = services.warm.versions(dirs)
    services.shared_views.check(shared, versions)  # the shared view: never older than announced

    def read_manifest(memdir: MemoryDir) -> tuple[Manifest, str | None]:
        return services.warm.load_manifest(memdir, versions)

    # The auto-memory block needs its own read: start it now, alongside the user's manifest.
    auto_block = (services.submit_io(services.auto_memory().render_injection, user_id, read_manifest)
                  if cfg.auto.enabled else None)
    manifest = _load_manifest(own, read_manifest)
    notes: list[str] = []
    if manifest is not None:
        # Snapshot: may copy starter memories into an empty place (filling ``manifest`` in place)
        # or return a note that a newer snapshot is available. Never raises.
        note = apply_snapshot_on_build(services, user_id, agent_type, manifest)
        if note:
            notes.append(note)
    own_index = _safe_index(own, manifest)
    prompt = render_agent_memory_prompt(
        PromptParts(own_index, cached_shared_index(services, shared)),
        own_label=own.place.label,
        shared_label=shared.place.label,
        scope=cfg.agent.scope,
        shared_writable=cfg.agent.shared_write,
        extra_notes=notes,
        search_tool=cfg.recall.search_tool,
        max_lines=cfg.limits.index_max_lines,
        max_bytes=cfg.limits.index_max_bytes,
        compact=cfg.agent.compact_prompt,
    )
    agent.tools = [services.memory_tools(user_id, agent_type), *_filter_tools(list(agent.tools or []))]
    append_context(agent, prompt)
    if query and cfg.recall.enabled:
        recalled = recall_for_query(services, user_id, agent_type, query, session_id=agent.session_id,
                                    manifest=manifest, bodies=services.warm.body)
        if recalled:
            append_context(agent, recalled)
    if cfg.recall.enabled and cfg.recall.per_run:
        # Recall before every run (agents reused across runs); must come first among pre-hooks.
        agent.pre_hooks = [make_recall_pre_hook(services, agent_type=agent_type, user_id=user_id,
                                                skip_first_query=query), *(agent.pre_hooks or [])]
    if cfg.session.enabled:
        attach_session_hooks(agent, services.session_manager())
    if auto_block is not None:
        # The reminder block (profile, facts by confidence, corrections, <current_date>) within the
        # token budget, plus the capture post-hook feeding the debounced background updater.
        attach_auto_memory(agent, services, user_id, agent_type, block=auto_block.result())
    warn_if_context_dropped(agent)
    return agent


def _safe_index(own: MemoryDir, manifest: Manifest | None) -> CappedText:
    if manifest is not None:
        try:
            return own.index_text(manifest)
        except Exception as exc:
            log.warning("MEMORY.md of %s unavailable (%s)", own.place.label, exc)
    return CappedText(UNAVAILABLE_INDEX, False, 0)


def _load_manifest(own: MemoryDir, read: Callable[[MemoryDir], tuple[Manifest, str | None]]) -> Manifest | None:
    """The user's manifest (the pod's warm copy, or one GET); None when the store cannot be read —
    the build goes on."""
    try:
        return read(own)[0]
    except Exception as exc:
        log.warning("memory index of %s unavailable (%s); building the agent without it", own.place.label, exc)
        return None


def append_context(agent: Agent, text: str) -> None:
    """Append to ``additional_context`` without overwriting what the caller put there."""
    existing = agent.additional_context
    agent.additional_context = f"{existing.rstrip()}\n\n{text}" if existing else text


def warn_if_context_dropped(agent: Agent) -> None:
    """agno drops ``additional_context`` when ``system_message`` is set or ``build_context=False``."""
    if agent.system_message is not None:
        log.warning("agent has system_message set: agno will not send additional_context, so the "
                    "Persistent Agent Memory prompt is dropped; put your text in `instructions` instead")
    if agent.build_context is False:
        log.warning("agent has build_context=False: agno will not send the Persistent Agent Memory prompt")


def cached_shared_index(services: MemoryServices, shared: MemoryDir) -> CappedText:
    """The shared place's index for the prompt (cached per pod: ``MemoryServices.shared_view``)."""
    return services.shared_view(shared)[1]


# -- helpers -------------------------------------------------------------------------------
def _tool_name(tool: Any) -> str | None:
    if isinstance(tool, Function):
        return tool.name
    if isinstance(tool, Toolkit):
        return None
    return getattr(tool, "__name__", None)


def _filter_tools(tools: list[Any]) -> list[Any]:
    """Drop agno's file tools and anything named like our tools or agno's user-memory tools."""
    kept: list[Any] = []
    for tool in tools:
        if isinstance(tool, MemoryTools):
            continue  # re-injection: ours is added again in front
        if isinstance(tool, Toolkit):
            if type(tool).__name__ in _FILE_TOOLKIT_CLASSES:
                log.warning("removed agno %s: harness-memory's memory tools replace it", type(tool).__name__)
                continue
            clashes = [n for n in list(tool.functions) + list(tool.async_functions) if n in REPLACED_TOOL_NAMES]
            for name in set(clashes):
                tool.functions.pop(name, None)
                tool.async_functions.pop(name, None)
                log.warning("removed tool %r from toolkit %s: it clashes with harness-memory's", name, tool.name)
            kept.append(tool)
            continue
        name = _tool_name(tool)
        if name in REPLACED_TOOL_NAMES:
            log.warning("removed tool %r: it clashes with harness-memory's memory tools", name)
            continue
        kept.append(tool)
    return kept


def _adjust_memory_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Turn off agno's own user memory / profile so two memories do not compete."""
    out = dict(kwargs)
    if out.get("enable_agentic_memory"):
        log.warning("enable_agentic_memory turned off: harness-memory manages the user's memory")
        out["enable_agentic_memory"] = False
    learning = out.get("learning")
    if learning is True:
        log.warning("learning=True turned off: its user_profile/user_memory would compete with harness-memory")
        out["learning"] = None
    elif (learning is not None and dataclasses.is_dataclass(learning) and not isinstance(learning, type)
          and (getattr(learning, "user_profile", False) or getattr(learning, "user_memory", False))):
        log.warning("LearningMachine user_profile/user_memory turned off: harness-memory manages them")
        out["learning"] = dataclasses.replace(learning, user_profile=False, user_memory=False)
    return out


