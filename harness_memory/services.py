"""The long-lived parts built once per process from a config: store, Redis client, locker.

Why one object: an app builds an agent per request; the COS connection pool, the Redis
client and the lock table must be made once and shared by all those agents (and survive
AgentOS's deep copies), not rebuilt on every ``build_agent`` call.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis
from pydantic import SecretStr

from .config import MemoryConfig
from .layout import Place
from .llm import LightModel, ModelNotConfigured, make_agent_model
from .locks import LocalLocker, Locker, RedisLocker, make_redis
from .memdir import CappedText, Manifest, MemoryDir
from .storage import LocalStore, ObjectStore, make_store
from .tools import MemoryTools

if TYPE_CHECKING:
    from agno.models.base import Model

log = logging.getLogger(__name__)
SHARED_VIEW_TTL = 30.0
TOOLS_CACHE_SIZE = 4096


@dataclass
class MemoryServices:
    config: MemoryConfig
    store: ObjectStore
    redis: redis.Redis | None
    locker: Locker
    _closed: bool = field(default=False, repr=False)
    _cache_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _shared_views: dict[str, tuple[float, Manifest, CappedText]] = field(default_factory=dict, repr=False)
    _tools: OrderedDict[tuple[str, str], MemoryTools] = field(default_factory=OrderedDict, repr=False)

    @classmethod
    def from_config(cls, config: MemoryConfig) -> MemoryServices:
        store = make_store(config.store)
        limits = config.limits
        lock_dir = store.root / ".locks" if isinstance(store, LocalStore) else None
        local = LocalLocker(lock_dir, ttl=limits.lock_ttl_seconds, wait=limits.lock_wait_seconds)
        client = make_redis(config.redis)
        locker: Locker = local
        if client is not None:
            locker = RedisLocker(client, prefix=config.redis.key_prefix, ttl=limits.lock_ttl_seconds,
                                 wait=limits.lock_wait_seconds, fallback=local,
                                 retry_after=config.redis.retry_after_seconds)
        return cls(config=config, store=store, redis=client, locker=locker)

    def __deepcopy__(self, memo: dict[int, object]) -> MemoryServices:
        return self  # shared clients, never copied

    # -- places ---------------------------------------------------------------------------
    @property
    def key_prefix(self) -> str:
        return self.config.store.key_prefix

    def memdir(self, place: Place) -> MemoryDir:
        return MemoryDir(self.store, place, locker=self.locker, limits=self.config.limits)

    def user_agent_dir(self, user_id: str, agent_type: str = "default") -> MemoryDir:
        return self.memdir(Place.user_agent(user_id, agent_type, self.key_prefix))

    def shared_agent_dir(self, agent_type: str = "default") -> MemoryDir:
        return self.memdir(Place.shared_agent(agent_type, self.key_prefix))

    def user_auto_dir(self, user_id: str, project: str | None = None) -> MemoryDir:
        return self.memdir(Place.user_auto(user_id, project or self.config.agent.project, self.key_prefix))

    def shared_auto_dir(self, project: str | None = None) -> MemoryDir:
        return self.memdir(Place.shared_auto(project or self.config.agent.project, self.key_prefix))

    def shared_view(self, shared: MemoryDir) -> tuple[Manifest, CappedText]:
        """A shared place's manifest and capped index, cached per pod for ``SHARED_VIEW_TTL`` s.

        Why: every agent build (prompt) and every recall reads the shared agent memory, which
        changes rarely; one cached read serves both and saves a request per build. A store
        failure answers with the last known view (or an empty one) and a warning.
        """
        now = time.monotonic()
        with self._cache_lock:
            hit = self._shared_views.get(shared.place.prefix)
        if hit is not None and hit[0] > now:
            return hit[1], hit[2]
        try:
            manifest = shared.manifest()
            index = shared.index_text(manifest)
        except Exception as exc:  # a dead store must not stop the build
            log.warning("shared memory %s unavailable (%s)", shared.place.label, exc)
            return (hit[1], hit[2]) if hit else (Manifest(), CappedText("", False, 0))
        with self._cache_lock:
            self._shared_views[shared.place.prefix] = (now + SHARED_VIEW_TTL, manifest, index)
        return manifest, index

    def forget_shared_view(self, shared: MemoryDir) -> None:
        """Drop the cached view after this pod changed the shared place."""
        with self._cache_lock:
            self._shared_views.pop(shared.place.prefix, None)

    def memory_tools(self, user_id: str, agent_type: str = "default") -> MemoryTools:
        """The user's ``MemoryTools``, cached per pod (bounded LRU).

        Why: agno processes a toolkit's function schemas once per toolkit object; a toolkit made
        per build costs ~6 ms per run. Sharing is safe: the toolkit holds no per-run state and
        agno copies its functions per run.
        """
        key = (user_id, agent_type)
        with self._cache_lock:
            tools = self._tools.get(key)
            if tools is not None:
                self._tools.move_to_end(key)
                return tools
        tools = MemoryTools(self.user_agent_dir(user_id, agent_type), self.shared_agent_dir(agent_type),
                            shared_writable=self.config.agent.shared_write)
        with self._cache_lock:
            self._tools[key] = tools
            while len(self._tools) > TOOLS_CACHE_SIZE:
                self._tools.popitem(last=False)
        return tools

    def agent_model(self) -> Model:
        """The configured agent model, built once and shared by every agent of this process
        (``agent_model.py`` says why that is safe); an ``UnconfiguredModel`` naming the missing
        setting when none is configured."""
        with self._cache_lock:
            model = self.__dict__.get("_agent_model")
            if model is None:
                from .agent_model import UnconfiguredModel  # agno loads only when agents are built

                try:
                    model = make_agent_model(self.config.model)
                except ModelNotConfigured as exc:
                    model = UnconfiguredModel(str(exc))
                self.__dict__["_agent_model"] = model
            return model

    def light_model(self) -> LightModel | None:
        """The light model for memory work (summaries, extraction, recall); None if unconfigured.

        Built once per services object so its HTTP clients and counters are shared."""
        if "_light" not in self.__dict__:
            self.__dict__["_light"] = LightModel.from_config(self.config.model)
        return self.__dict__["_light"]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        auto = self.__dict__.get("_auto_memory")
        if auto is not None:  # flush pending auto-memory updates while the store still answers
            auto.close()
        self.store.close()
        light = self.__dict__.get("_light")
        if light is not None:
            light.close()
        if self.redis is not None:
            self.redis.close()


_default_lock = threading.Lock()
_defaults: dict[str, MemoryServices] = {}


def _identity(config: MemoryConfig) -> str:
    """Config identity including secret values (``model_dump_json`` masks them)."""
    secrets = [
        getattr(section, name).get_secret_value()
        for section in (config.store, config.model, config.server)
        for name in type(section).model_fields
        if isinstance(getattr(section, name), SecretStr)
    ]
    digest = hashlib.sha256("\x00".join(secrets).encode("utf-8")).hexdigest()
    return config.model_dump_json() + digest


def services_for(config: MemoryConfig) -> MemoryServices:
    """The process-wide services for ``config`` (same config -> same clients)."""
    key = _identity(config)
    with _default_lock:
        svc = _defaults.get(key)
        if svc is None or svc._closed:
            svc = _defaults[key] = MemoryServices.from_config(config)
        return svc
