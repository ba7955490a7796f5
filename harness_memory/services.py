"""``MemoryServices``: the one composition root. Every long-lived part of a process lives here.

Why one object: an app builds an agent per request; the COS connection pool, the Redis client,
the lock table, the light-model clients, the session-memory workers and the auto-memory queue
must be made once and shared by all those agents (and survive AgentOS's deep copies), not
rebuilt on every ``build_agent`` call. Each part is a typed member, created lazily on first use
(a CLI command that only lists files never starts a summary thread), and ``close()`` stops them
all in one defined order:

1. session memory (drains buffered runs and running summaries: needs store, Redis, light model);
2. auto memory (flushes pending extractions: needs store and light model);
3. the ``work`` executor (operations moved off event loops: tool calls, hooks, probes);
4. the semantic tier's background embedding (``recall/semantic.py``), then the light models' HTTP
   clients;
5. the ``io`` executor (fan-out of single store requests), then the store, then Redis.

Two executors, not one, because a ``work`` task (a tool call under ``arun()``, recall in a hook)
may fan its store reads out to ``io`` and wait for them; if both shared one bounded pool, enough
concurrent outer tasks would occupy every thread and wait forever for inner ones.
``io`` tasks never wait on other pool tasks.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import SecretStr

from . import tokens
from .config import ConfigError, MemoryConfig, lease_problem
from .errors import ModelNotConfigured
from .layout import Place
from .llm import LightModel
from .locks import LeaseKeeper, LocalLocker, Locker, RedisLocker
from .memdir import CappedText, Manifest, MemoryDir
from .memdir.port import CommitListener
from .memdir.versions import SharedBodies, VersionBoard, WarmViews
from .memdir.views import SHARED_VIEW_TTL, SharedViews
from .observe import Telemetry, wrap_context
from .redis_client import RedisClient, make_redis
from .snapshot.state import KnownAbsent
from .storage import LocalStore, ObjectStore, make_store

if TYPE_CHECKING:
    from agno.models.base import Model

    from .auto.rider import SummaryRider
    from .auto.riding import SummaryRiding
    from .auto.service import AutoMemory
    from .recall.semantic import SemanticTier
    from .recall.semantic_listener import EmbedOnCommit
    from .recall.surfaced import SurfacedTracker
    from .search.place import SearchListener
    from .session.manager import SessionMemoryManager
    from .tools import MemoryTools

log = logging.getLogger(__name__)
T = TypeVar("T")
TOOLS_CACHE_SIZE = 4096
#: Threads running whole memory operations off an event loop (tool calls under ``arun()``,
#: hooks, probes). Sized so 32 concurrent requests never queue behind each other.
WORK_THREADS = 32
CLOSE_TIMEOUT = 10.0


@dataclass(eq=False)  # identity semantics: one object per set of clients
class MemoryServices:
    """Store, Redis, locker, executors and (lazily) models, session memory, auto memory, recall
    tracking — for one config. Build with ``from_config`` (or ``services_for`` for the shared
    process-wide one); close with ``close()``."""

    config: MemoryConfig
    store: ObjectStore
    redis: RedisClient | None
    locker: Locker
    io: ThreadPoolExecutor
    work: ThreadPoolExecutor
    #: Metrics, spans and events of memory work (``observe``); every part below records through it.
    telemetry: Telemetry = field(default_factory=Telemetry.disabled, repr=False)
    #: Renews the leases of this process's place locks and session summaries (one thread).
    leases: LeaseKeeper = field(default_factory=LeaseKeeper, repr=False)
    _closed: bool = field(default=False, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    #: The shared places' cached views (``memdir/views.py``): prompt builds and recall share them.
    shared_views: SharedViews = field(default_factory=SharedViews, repr=False)
    _tools: OrderedDict[tuple[str, str], MemoryTools] = field(default_factory=OrderedDict, repr=False)
    _agent_model: Model | None = field(default=None, repr=False)
    _agent_model_error: str | None = field(default=None, repr=False)
    _light: LightModel | None = field(default=None, repr=False)
    _light_made: bool = field(default=False, repr=False)
    _extraction: LightModel | None = field(default=None, repr=False)
    _extraction_made: bool = field(default=False, repr=False)
    _session: SessionMemoryManager | None = field(default=None, repr=False)
    _auto: AutoMemory | None = field(default=None, repr=False)
    _riding: SummaryRiding | None = field(default=None, repr=False)
    #: Keeps each place's search index in step with its commits.
    _search_listener: SearchListener = field(default_factory=lambda: _search_listener(), repr=False)
    _surfaced: SurfacedTracker | None = field(default=None, repr=False)
    _semantic: SemanticTier | None = field(default=None, repr=False)
    _semantic_made: bool = field(default=False, repr=False)
    _embed_on_commit: EmbedOnCommit | None = field(default=None, repr=False)
    #: Snapshot sync records known to be absent (``snapshot/state.py`` owns the policy).
    snapshot_absent: KnownAbsent = field(default_factory=KnownAbsent, repr=False)
    #: Announces every commit's version in Redis (None without Redis): ``memdir/versions.py``.
    versions: VersionBoard | None = field(default=None, repr=False)
    #: The pod's manifests and recalled bodies, served while Redis confirms their version.
    warm: WarmViews = field(default_factory=lambda: WarmViews(None), repr=False)

    @classmethod
    def from_config(cls, config: MemoryConfig, *, store: ObjectStore | None = None,
                    telemetry: Telemetry | None = None) -> MemoryServices:
        """Build every part from ``config``. ``store`` replaces the configured store (a wrapper
        for fault injection, or a store shared with other code); the services then own it.
        ``telemetry`` replaces the one built from ``config.observe`` (tests: private registry
        and tracer provider)."""
        problem = lease_problem(config)
        if problem:  # at start-up, not on the first stalled save
            raise ConfigError(problem)
        tokens.configure(config.model.tokenizer)  # before anything counts a token
        telemetry = telemetry or Telemetry.from_config(config.observe)
        io = ThreadPoolExecutor(max_workers=config.store.io_threads, thread_name_prefix="hm-io")
        store = store if store is not None else make_store(config.store, executor=io)
        store.telemetry = telemetry
        limits = config.limits
        lock_dir = store.root / ".locks" if isinstance(store, LocalStore) else None
        local = LocalLocker(lock_dir, ttl=limits.lock_ttl_seconds, wait=limits.lock_wait_seconds,
                            telemetry=telemetry)
        client = make_redis(config.redis)
        locker: Locker = local
        leases = LeaseKeeper()  # renews this process's place and summary leases; stopped by close()
        if client is not None:
            locker = RedisLocker(client, prefix=config.redis.key_prefix, ttl=limits.lock_ttl_seconds,
                                 wait=limits.lock_wait_seconds, fallback=local, keeper=leases,
                                 retry_after=config.redis.retry_after_seconds, telemetry=telemetry,
                                 block=min(0.2, config.redis.socket_timeout / 2))
        work = ThreadPoolExecutor(max_workers=WORK_THREADS, thread_name_prefix="hm-work")
        board = (VersionBoard(client, config.redis.key_prefix, retry_after=config.redis.retry_after_seconds,
                              on_round_trip=telemetry.version_round_trip) if client is not None else None)
        rc = config.redis
        shared = (SharedBodies(client, rc.key_prefix, ttl=rc.body_cache_seconds, max_bytes=rc.body_cache_max_bytes,
                               retry_after=rc.retry_after_seconds, on_round_trip=telemetry.version_round_trip)
                  if client is not None and rc.body_cache_seconds > 0 and rc.body_cache_max_bytes > 0 else None)
        warm = WarmViews(board, count=telemetry.warm_cache, shared=shared)
        services = cls(config=config, store=store, redis=client, locker=locker, io=io, work=work,
                       telemetry=telemetry, leases=leases, versions=board, warm=warm)
        if config.embed.model:
            services.semantic()  # from the start, so every write is embedded (in the background)
        _live.add(services)  # flushed at interpreter exit unless closed before
        return services

    def __deepcopy__(self, memo: dict[int, object]) -> MemoryServices:
        return self  # shared clients, never copied

    @property
    def closed(self) -> bool:
        return self._closed

    # -- places ---------------------------------------------------------------------------
    @property
    def key_prefix(self) -> str:
        return self.config.store.key_prefix

    def memdir(self, place: Place) -> MemoryDir:
        return MemoryDir(self.store, place, locker=self.locker, limits=self.config.limits, executor=self.io,
                         listeners=self.commit_listeners())

    def commit_listeners(self) -> tuple[CommitListener, ...]:
        """Who hears about every commit of a place (``memdir/port.py``): the search index, then
        the semantic tier (embeds what changed, in the background) while it runs, then the
        version board (announces the commit's head in Redis) when Redis is configured."""
        embed, search = self._embed_on_commit, self._search_listener
        out: tuple[CommitListener, ...] = (search,) if embed is None or self._closed else (search, embed)
        return out if self.versions is None else (*out, self.warm)

    def user_agent_dir(self, user_id: str, agent_type: str = "default") -> MemoryDir:
        return self.memdir(Place.user_agent(user_id, agent_type, self.key_prefix))

    def shared_agent_dir(self, agent_type: str = "default") -> MemoryDir:
        return self.memdir(Place.shared_agent(agent_type, self.key_prefix))

    def user_auto_dir(self, user_id: str, project: str | None = None) -> MemoryDir:
        return self.memdir(Place.user_auto(user_id, project or self.config.agent.project, self.key_prefix))

    def shared_auto_dir(self, project: str | None = None) -> MemoryDir:
        return self.memdir(Place.shared_auto(project or self.config.agent.project, self.key_prefix))

    def shared_view(self, shared: MemoryDir) -> tuple[Manifest, CappedText]:
        """A shared place's manifest and capped index, cached per pod for ``SHARED_VIEW_TTL`` s
        (``memdir/views.py`` says why)."""
        return self.shared_views.get(shared)

    def forget_shared_view(self, shared: MemoryDir) -> None:
        """Drop the cached view after this pod changed the shared place."""
        self.shared_views.forget(shared)

    # -- executors ------------------------------------------------------------------------
    def submit_io(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Run one store-bound call in the ``io`` pool (it must not wait on other pool tasks);
        the caller's context (its current span) goes along."""
        return self.io.submit(wrap_context(fn), *args)

    async def run_off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """Await a blocking memory operation from an event loop (runs in the ``work`` pool)."""
        import asyncio

        return await asyncio.get_running_loop().run_in_executor(self.work, wrap_context(lambda: fn(*args)))

    # -- tools ----------------------------------------------------------------------------
    def memory_tools(self, user_id: str, agent_type: str = "default") -> MemoryTools:
        """The user's ``MemoryTools``, cached per pod (bounded LRU).

        Why: agno processes a toolkit's function schemas once per toolkit object; a toolkit made
        per build costs ~6 ms per run. Sharing is safe: the toolkit holds no per-run state and
        agno copies its functions per run.
        """
        from .tools import MemoryTools

        key = (user_id, agent_type)
        with self._lock:
            tools = self._tools.get(key)
            if tools is not None:
                self._tools.move_to_end(key)
                return tools
        tools = MemoryTools(self.user_agent_dir(user_id, agent_type), self.shared_agent_dir(agent_type),
                            shared_writable=self.config.agent.shared_write, executor=self.work,
                            telemetry=self.telemetry, search=self.config.recall.search_tool,
                            grounded=self.config.agent.grounded_saves)
        with self._lock:
            self._tools[key] = tools
            while len(self._tools) > TOOLS_CACHE_SIZE:
                self._tools.popitem(last=False)
        return tools

    # -- models ---------------------------------------------------------------------------
    def agent_model(self, *, required: bool = False) -> Model:
        """The configured agent model, built once and shared by every agent of this process
        (``agent_model.py`` says why that is safe). Unconfigured: an ``UnconfiguredModel`` whose
        runs fail naming the missing setting, or ``ModelNotConfigured`` when ``required``."""
        from .agent_model import UnconfiguredModel, make_agent_model  # agno loads only when agents are built

        with self._lock:
            if self._agent_model is None:
                try:
                    self._agent_model = make_agent_model(self.config.model,
                                                         on_text_call=self.telemetry.text_tool_call)
                except ModelNotConfigured as exc:
                    self._agent_model_error = str(exc)
                    self._agent_model = UnconfiguredModel(str(exc))
            if required and self._agent_model_error is not None:
                raise ModelNotConfigured(self._agent_model_error)
            return self._agent_model

    def light_model(self) -> LightModel | None:
        """The light model for memory work (summaries, extraction, recall); None if unconfigured.
        Built once so its HTTP clients and counters are shared."""
        with self._lock:
            if not self._light_made:
                self._light = LightModel.from_config(self.config.model, telemetry=self.telemetry)
                self._light_made = True
            return self._light

    def semantic(self) -> SemanticTier | None:
        """Recall's semantic tier (``recall/semantic.py``); None unless ``embed.model`` is set.
        While it exists, every commit to this store schedules the embedding of what changed."""
        with self._lock:
            if not self._semantic_made:
                self._semantic_made = True
                cfg = self.config.embed
                if cfg.model and not self._closed:
                    from .recall.semantic import SemanticTier
                    from .recall.semantic_listener import EmbedOnCommit

                    model = self.config.model
                    cfg = cfg.model_copy(update={"base_url": cfg.base_url or model.base_url,
                                                 "api_key": cfg.api_key or model.api_key})
                    if cfg.base_url:
                        self._semantic = SemanticTier(cfg)
                        self._semantic.telemetry = self.telemetry
                        self._embed_on_commit = EmbedOnCommit(self._semantic)
                    else:
                        log.warning("embed.model is set but no base URL (embed.base_url or model.base_url); "
                                    "recall runs without the semantic tier")
            return self._semantic

    def extraction_model(self) -> LightModel | None:
        """The auto-memory extraction model: ``auto.model`` on the light model's server, else
        the light model itself."""
        if not self.config.auto.model:
            return self.light_model()
        with self._lock:
            if not self._extraction_made:
                cfg = self.config.model.model_copy(update={"light_model": self.config.auto.model})
                self._extraction = LightModel.from_config(cfg, telemetry=self.telemetry)
                self._extraction_made = True
            return self._extraction

    # -- features -------------------------------------------------------------------------
    def session_manager(self) -> SessionMemoryManager:
        """Session memory of this process (buffer, summaries, their background workers)."""
        from .session.manager import SessionMemoryManager

        with self._lock:
            if self._session is None or self._session.closed:
                cfg = self.config
                self._session = SessionMemoryManager(
                    self.store, config=cfg.session, redis_client=self.redis, redis_config=cfg.redis,
                    model=self.light_model(), key_prefix=cfg.store.key_prefix, executor=self.work,
                    telemetry=self.telemetry, riders=self.riding.rider, leases=self.leases)
            return self._session

    def auto_memory(self, **options: Any) -> AutoMemory:
        """Auto memory of this process (capture hook, debounced queue, fact API). ``options``
        (``clock``, ``start_worker``, ``today``: tests and benchmarks) apply when it is created;
        passing them once it exists is a ValueError."""
        with self._lock:
            if self._auto is None or self._auto.closed:
                self._auto = self.new_auto_memory(**options)
            elif options:
                raise ValueError("auto memory already exists; options apply only when it is created")
            return self._auto

    def new_auto_memory(self, **options: Any) -> AutoMemory:
        """A new ``AutoMemory`` wired to these services (``auto_memory`` keeps the one the process
        uses; tests make more). ``options``: ``clock``, ``start_worker``, ``today``."""
        from .auto.service import AutoMemory

        options.setdefault("warm", self.warm if self.versions is not None else None)  # without Redis: as before
        return AutoMemory(self.config.auto, places=self, model=self.extraction_model, telemetry=self.telemetry,
                          executor=self.work, carries=self.riding.carries, **options)

    # -- session summaries and auto memory in one call --------------------------------------
    @property
    def riding(self) -> SummaryRiding:
        """The summary-rider policy (``auto/riding.py``) handed to session and auto memory."""
        with self._lock:
            if self._riding is None:
                from .auto.riding import SummaryRiding

                self._riding = SummaryRiding(self.config, sessions=lambda: self._session,
                                             extractions=lambda: self._auto, same_model=self._same_model)
            return self._riding

    def _same_model(self) -> bool:
        return self.extraction_model() is self.light_model()

    def session_carries(self, session_id: str) -> bool:
        """``SummaryRiding.carries``: the extraction of ``session_id`` waits for its summary."""
        return self.riding.carries(session_id)

    def summary_rider(self, session_id: str) -> SummaryRider | None:
        """``SummaryRiding.rider``: the pending extraction to ride along in the summary call."""
        return self.riding.rider(session_id)

    def surfaced_tracker(self) -> SurfacedTracker:
        """Which recalled files each session has already seen (Redis-backed when configured)."""
        from .recall.surfaced import SurfacedTracker

        with self._lock:
            if self._surfaced is None:
                cfg = self.config
                self._surfaced = SurfacedTracker(self.redis, key_prefix=cfg.redis.key_prefix,
                                                 ttl_seconds=cfg.session.ttl_seconds,
                                                 max_sessions=cfg.recall.surfaced_max_sessions,
                                                 retry_after_seconds=cfg.redis.retry_after_seconds)
            return self._surfaced

    # -- lifecycle ------------------------------------------------------------------------
    def close(self, timeout: float | None = None) -> None:
        """Drain and stop every part, in the order in the module docstring. Idempotent; no
        thread of these services runs afterwards. ``timeout`` bounds each drain; by default
        session memory gets ``CLOSE_TIMEOUT`` and auto memory its own deadline, sized to the
        extraction model's measured latency (``AutoMemory.shutdown_deadline``: a 1.5B model on a
        CPU needs a minute per update, a hosted one a second); what it cannot finish is kept in
        the store for the next start."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            session, auto = self._session, self._auto
        _live.discard(self)
        if session is not None:
            _quietly("session memory", lambda: session.close(timeout=CLOSE_TIMEOUT if timeout is None else timeout))
        if auto is not None:  # flush pending auto-memory updates while the store still answers
            _quietly("auto memory", lambda: auto.close(timeout))
        _quietly("work executor", lambda: self.work.shutdown(wait=True, cancel_futures=True))
        semantic = self._semantic
        if semantic is not None:  # background embedding rounds need the store: before io and store
            _quietly("semantic tier", semantic.close)
        for model in {id(m): m for m in (self._light, self._extraction) if m is not None}.values():
            _quietly("light model", model.close)
        _quietly("io executor", lambda: self.io.shutdown(wait=True, cancel_futures=True))
        _quietly("store", self.store.close)
        if self.redis is not None:
            _quietly("redis", self.redis.close)
        _quietly("lease keeper", self.leases.stop_if_idle)  # after everything that may hold a lease

    def __enter__(self) -> MemoryServices:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _search_listener() -> SearchListener:
    """The search index's commit listener (imported here, not at the top: ``import
    harness_memory.services`` stays free of numpy until services are built)."""
    from .search.place import SearchListener

    return SearchListener()


def _quietly(what: str, fn: Callable[[], object]) -> None:
    try:
        fn()
    except Exception as exc:  # one part failing to stop must not keep the others running
        log.warning("closing %s failed: %s", what, exc)


# -- the process-wide services ------------------------------------------------------------------
_default_lock = threading.Lock()
_defaults: dict[str, MemoryServices] = {}
_live: weakref.WeakSet[MemoryServices] = weakref.WeakSet()


def _identity(config: MemoryConfig) -> str:
    """Config identity including secret values (``model_dump_json`` masks them)."""
    secrets = [
        getattr(section, name).get_secret_value()
        for section in (config.store, config.model, config.embed, config.server)
        for name in type(section).model_fields
        if isinstance(getattr(section, name), SecretStr)
    ]
    digest = hashlib.sha256("\x00".join(secrets).encode("utf-8")).hexdigest()
    return config.model_dump_json() + digest


def services_for(config: MemoryConfig) -> MemoryServices:
    """The process-wide services for ``config`` (same config -> same clients), closed at exit."""
    key = _identity(config)
    with _default_lock:
        svc = _defaults.get(key)
        if svc is None or svc.closed:
            svc = _defaults[key] = MemoryServices.from_config(config)
        return svc


@atexit.register
def _close_at_exit() -> None:
    """Flush pending memory work when the interpreter exits (the only atexit hook we keep)."""
    for svc in list(_live):
        _quietly("services", lambda s=svc: s.close())  # auto memory's deadline follows its model


__all__ = ["SHARED_VIEW_TTL", "MemoryServices", "services_for"]
