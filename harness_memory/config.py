"""One typed configuration object, built once at the edge and passed down.

Why one object: every layer (store, buffer, model, tools) needs a few settings, and a
module that reads the environment deep down cannot be tested or run twice in one process
with two setups. ``MemoryConfig.load()`` reads an optional YAML file and the
``HARNESS_MEMORY_*`` environment variables (env wins over YAML, explicit overrides win
over both); everything below takes the object (or one of its sections) as an argument.

Each field's environment variable is ``HARNESS_MEMORY_`` + the section's env prefix +
the field name in upper case (``store.cos_bucket`` -> ``HARNESS_MEMORY_COS_BUCKET``,
``session.first_threshold_tokens`` -> ``HARNESS_MEMORY_SESSION_FIRST_THRESHOLD_TOKENS``).
``env_table()`` lists them all; the README's table is generated from it.
"""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator, model_validator

from .errors import ConfigError  # defined in errors (redis_target raises it too); importable here as always
from .redis_target import target_for

ENV_PREFIX = "HARNESS_MEMORY_"
#: Variables with our prefix that are not settings (the config file's path, benchmark switches).
OTHER_ENV = frozenset({"HARNESS_MEMORY_CONFIG", "HARNESS_MEMORY_LONGMEMEVAL", "HARNESS_MEMORY_BENCH_EMBED"})
log = logging.getLogger(__name__)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class StoreConfig(_Section):
    """Where memory objects live: Tencent COS (or any COS/S3 endpoint) or a local directory."""

    backend: Literal["cos", "local"] | None = Field(
        None, description="`cos` or `local`; default `cos` when a bucket is set, else `local`."
    )
    local_root: Path = Field(
        Path("~/.harness"), description="Root directory of the local store (the `.harness` root)."
    )
    cos_bucket: str | None = Field(None, description="COS bucket name (`name-appid`).")
    cos_region: str | None = Field(None, description="COS region, e.g. `ap-guangzhou`.")
    cos_secret_id: SecretStr | None = Field(None, description="COS SecretId.")
    cos_secret_key: SecretStr | None = Field(None, description="COS SecretKey.")
    cos_token: SecretStr | None = Field(None, description="Temporary-credential session token.")
    cos_endpoint: str | None = Field(
        None, description="Endpoint host; the bucket is prefixed virtual-host style."
    )
    cos_domain: str | None = Field(
        None,
        description="Host (and path) used verbatim, no bucket added; `127.0.0.1:8333/bucket` gives "
        "path-style for a local S3/COS server. It must be the store itself: a redirect (3xx) is an error, "
        "never followed or taken as success.",
    )
    cos_scheme: Literal["http", "https"] = Field("https", description="`http` or `https`.")
    cos_anonymous: bool = Field(False, description="Send unsigned requests (local test servers).")
    cos_timeout: float = Field(10.0, gt=0, description="Seconds per COS request.")
    cos_retries: int = Field(1, ge=0, le=10, description="Retries on network errors and 5xx (conditional "
                             "PUTs are retried by the store itself, which reads back what an unclear "
                             "attempt left).")
    cos_pool_size: int = Field(32, ge=1, description="HTTP connection pool size of the COS client.")
    cos_conditional_put: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Use If-Match / If-None-Match on PUT. `auto`: on for a custom `cos_domain` "
        "(S3-compatible servers), off for real COS (which ignores them).",
    )
    io_threads: int = Field(16, ge=1, description="Thread pool size for async callers of the store.")
    key_prefix: str = Field("memory/", description="Prefix of every object key.")

    @property
    def effective_backend(self) -> Literal["cos", "local"]:
        if self.backend:
            return self.backend
        return "cos" if self.cos_bucket else "local"


class RedisConfig(_Section):
    """The shared hot buffer and lock server; absent means in-process mode. One server, TLS,
    Sentinel or Cluster: ``redis_client.make_redis`` turns these settings into the one client."""

    url: str | None = Field(None, description=(
        "Where Redis is: `redis://host:port/db`, `rediss://…` (TLS), `unix:///path.sock`, "
        "`redis+sentinel://host:port,host:port/<master>/<db>` or `redis+cluster://host:port,host:port` "
        "(`rediss+sentinel` / `rediss+cluster` for TLS); unset (and no `sentinels`) = in-process mode."))
    mode: Literal["auto", "standalone", "sentinel", "cluster"] = Field("auto", description=(
        "`auto`: from the URL's scheme (`sentinel` also when `sentinels` is set), else `standalone`; "
        "`cluster` makes a plain `redis://host:port` URL name a cluster node."))
    sentinels: str | None = Field(None, description=(
        "Sentinel addresses `host:port,host:port`, instead of a `redis+sentinel://` URL (`url` may then "
        "give the password, db and `rediss` for TLS)."))
    sentinel_master: str | None = Field(None, description="Master name the sentinels watch (default: from "
                                        "the URL, else `mymaster`).")
    sentinel_username: SecretStr | None = Field(None, description="ACL user of the sentinels themselves.")
    sentinel_password: SecretStr | None = Field(None, description="Password of the sentinels themselves.")
    username: str | None = Field(None, description="ACL user for Redis when the URL names none.")
    password: SecretStr | None = Field(None, description="Redis password when the URL carries none.")
    ssl_ca_certs: str | None = Field(None, description="TLS: PEM file of the CA that signed the server "
                                     "certificates (default: the system's).")
    ssl_certfile: str | None = Field(None, description="TLS: client certificate (PEM) for servers that "
                                     "require one (`tls-auth-clients`).")
    ssl_keyfile: str | None = Field(None, description="TLS: the client certificate's private key (PEM).")
    ssl_cert_reqs: Literal["required", "optional", "none"] = Field(
        "required", description="TLS: verify the server certificate (`none` only for tests).")
    ssl_check_hostname: bool = Field(True, description="TLS: the server certificate must name the host.")
    wait_replicas: int = Field(0, ge=0, le=16, description=(
        "Sentinel: replicas that should confirm each buffered message (`WAIT`); an unconfirmed one written "
        "to a server that is no longer the master is kept in-process and moved later, so a failover loses "
        "none. 0 = do not wait."))
    wait_timeout_ms: int = Field(100, ge=1, description="Milliseconds a buffered write waits for "
                                 "`wait_replicas` confirmations.")
    key_prefix: str = Field("hm:", description="Prefix of every Redis key (no `{` or `}`: hash tags are ours).")
    socket_timeout: float = Field(1.0, gt=0, description="Seconds per Redis command.")
    retry_after_seconds: float = Field(
        5.0, ge=0, description="After Redis fails, seconds before it is probed again."
    )
    body_cache_seconds: float = Field(3600.0, ge=0, description=(
        "Recalled memory bodies are shared between pods in Redis for this long, keyed by the file's version "
        "(never stale), so a body is read from the store about once across pods (`docs/consistency.md`). "
        "0 = off (each pod reads a body once)."))
    body_cache_max_bytes: int = Field(16384, ge=0, description=(
        "Bodies larger than this (bytes) are not shared through Redis (each pod reads them once)."))

    @field_validator("key_prefix")
    @classmethod
    def _no_hash_tag(cls, value: str) -> str:
        # Keys of one operation share a Redis Cluster hash tag we put in braces; a brace in the
        # prefix would become the tag of every key (one hot slot) or split a session's keys.
        if "{" in value or "}" in value:
            raise ValueError("must not contain { or }")
        return value

    @model_validator(mode="after")
    def _parses(self) -> RedisConfig:
        try:
            target_for(self)
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return self

    @property
    def enabled(self) -> bool:
        """Whether Redis is configured at all (else every part runs in-process)."""
        return bool(self.url or self.sentinels)


class LimitsConfig(_Section):
    """Bounds on what one memory place may hold."""

    max_file_bytes: int = Field(65536, ge=256, description="Largest memory file (bytes, UTF-8).")
    max_files_per_place: int = Field(10000, ge=1, description="Most memory files in one place.")
    index_max_lines: int = Field(200, ge=1, description="MEMORY.md lines shown to the model.")
    index_max_bytes: int = Field(25600, ge=256, description="MEMORY.md bytes shown to the model.")
    lock_ttl_seconds: float = Field(25.0, gt=0, description=(
        "Lease of a place lock: renewed while its holder works, so it only runs out for a crashed or "
        "stalled holder. Must exceed `cos_timeout` x (`cos_retries` + 1) (checked at start-up)."))
    lock_wait_seconds: float = Field(30.0, gt=0, description=(
        "How long a writer waits for the lock (queue-ordered), and the budget for retrying a commit "
        "while Redis is down."))
    group_commit_max: int = Field(64, ge=0, description=(
        "Saves waiting for a place's lock that its holder takes over and commits with its own in one "
        "manifest write (group commit, Redis locks only); 0 turns it off."))
    import_max_entries: int = Field(
        20000, ge=1, description="Most entries (files, state files, zip members) one import may hold; more "
        "and the whole import is refused.")
    import_max_bytes: int = Field(
        256 * 1024 * 1024, ge=1024, description="Largest total uncompressed size of one import (bytes): a zip "
        "that unpacks to more is refused before anything is read (zip bombs).")
    trash_days: float = Field(30.0, gt=0, description=(
        "Days a deleted memory or fact stays in its place's trash (`.trash/`) — deleted by a person, the "
        "assistant's tools, auto memory or a clear — restorable from the page, the API and `harness-memory "
        "trash restore`; older batches are purged by the next deletion a person makes."))
    history_versions: int = Field(20, ge=0, description=(
        "Earlier versions kept per memory file (`.history/`) when anyone overwrites it (a person, a restore, "
        "the assistant's save_file / replace_file_chunk); the assistant's are pruned every that many saves, so "
        "up to about twice as many may wait. 0 keeps none."))


class ModelConfig(_Section):
    """The agent's model and the light model used for memory work (OpenAI-compatible)."""

    model: str | None = Field(None, description="Agent model id.")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL of the agent model.")
    api_key: SecretStr | None = Field(None, description="API key of the agent model.")
    light_model: str | None = Field(None, description="Light model id (default: `model`).")
    light_base_url: str | None = Field(None, description="Light model base URL (default: `base_url`).")
    light_api_key: SecretStr | None = Field(None, description="Light model key (default: `api_key`).")
    model_profile: Literal["hosted", "local"] = Field(
        "hosted", description="`hosted`: defaults sized for a hosted model; `local`: for a small model on CPU "
        "(llama.cpp, Ollama) — longer timeouts and lock TTLs, smaller prompts (docs/offline.md \"Run it fully "
        "offline\"); a setting you give yourself always wins.")
    model_timeout: float = Field(60.0, gt=0, description="Seconds per agent-model request (a timed-out "
                                 "request is not retried: the answer would take as long again).")
    light_timeout: float = Field(30.0, gt=0, description="Seconds per light-model request.")
    text_tool_calls: bool = Field(
        False, description="Turn a tool call the agent model wrote as text (a fenced JSON block, a bare JSON "
        "object, `<tool_call>` or `<tools>`) into a real call when it names a tool offered in that request and "
        "its arguments match the tool's schema (small local models on llama.cpp / Ollama); anything else stays "
        "text. On by default with `model_profile: local`.")
    temperature: float | None = Field(
        None, ge=0, le=2, description="Sampling temperature of the agent model harness-memory builds (unset: "
        "the server's default). 0.2 with `model_profile: local`: a small model's tool-call shapes vary less "
        "(llama-server's default is 0.8).")
    max_tokens: int | None = Field(
        None, ge=16, description="Most tokens of one agent-model answer (unset: the server's limit). 1536 with "
        "`model_profile: local`: a small model that falls into a loop otherwise writes until its context is "
        "full (measured: a 1.5B model wrote 4,882 tokens in 600 s, and the user's run timed out).")
    light_temperature: float | None = Field(
        None, ge=0, le=2, description="Sampling temperature of the light model (extractions, summaries, recall "
        "picks; unset: the server's default). 0.2 with `model_profile: local`.")
    tokenizer: Literal["tiktoken", "offline", "estimate"] = Field(
        "tiktoken", description="Token counting: `tiktoken` (downloads its BPE file on first use; falls back "
        "to the estimate while it cannot), `offline` (tiktoken only from a verified cached file — "
        "`harness-memory tiktoken-cache` — never a network attempt) or `estimate` (never load tiktoken).")


class AgentConfig(_Section):
    """How `build_agent` lays out memory for an agent."""

    project: str = Field("default", description="Project name of the auto-memory places.")
    shared_write: bool = Field(
        False, description="Whether agents may write the shared agent memory (else read-only)."
    )
    scope: Literal["user", "project", "local"] = Field(
        "user", description="Scope guidance in the prompt: `user`, `project` or `local`."
    )
    snapshots_dir: Path = Field(
        Path("snapshots"), validate_default=True,
        description="Folder of `<agent_type>/` snapshots, made absolute when the config is loaded: a relative one "
        "(this default too) is relative to the YAML config file's folder, or with no config file to the project "
        "checkout holding the `harness_memory` package (installed from a wheel: the working directory at start).")
    compact_prompt: bool = Field(False, description="Give the agent the short memory prompt written for a "
                                 "small local model (the rules in plain lines, no example file; ~630 tokens fewer: "
                                 "`python -m bench.bench_prompt`). On by default with `model_profile: local`.")
    grounded_saves: bool = Field(False, description=(
        "Refuse a memory the agent writes when it names something (a capitalised or CamelCase word, a word "
        "with digits) that neither the user nor a tool result said in the run. On by default with "
        "`model_profile: local`: a 1.5B model saved \"skills: Go, Python, Java\" for a user who named Go only."))

    @field_validator("snapshots_dir")
    @classmethod
    def _absolute_snapshots(cls, value: Path) -> Path:
        # ``MemoryConfig.load`` has anchored a relative folder at the config file already; what is
        # still relative here (no config file, or a config built in code) gets the project's folder.
        folder = Path(value).expanduser()
        return folder if folder.is_absolute() else project_dir() / folder


class SessionConfig(_Section):
    """Session memory: hot buffer thresholds and the summary cache."""

    enabled: bool = Field(True, description="Register the session-memory hook in `build_agent`.")
    bind_to_user: bool = Field(True, description="Bind session ids to their user (`chat-1` -> "
                               "`chat-1-<hash>`) in `build_agent` and the HTTP API, so no caller reaches "
                               "another user's session summary by naming its id; off only when a trusted "
                               "caller picks the ids.")
    first_threshold_tokens: int = Field(10000, ge=1, description="Tokens before the first summary.")
    update_threshold_tokens: int = Field(5000, ge=1, description="New tokens before a re-summary.")
    min_tool_calls: int = Field(3, ge=0, description="Tool calls that allow a re-summary mid-task.")
    buffer_max_messages: int = Field(2000, ge=10, description="Cap of the buffered message list.")
    ttl_seconds: int = Field(3600, ge=60, description="TTL of a session's Redis keys.")
    keep_messages: int = Field(5, ge=0, description="Messages kept in the buffer after a summary.")
    lock_ttl_seconds: int = Field(120, ge=5, description=(
        "Lease of the summarisation lock: renewed while the light model works, so it only runs out "
        "for a crashed or stalled pod."))
    lru_size: int = Field(1024, ge=1, description="Summaries cached per pod.")
    summary_max_chars: int = Field(12000, ge=500, description="Bound on one stored summary.")
    message_max_chars: int = Field(
        4000, ge=200, description="Longest buffered message (chars); longer tool output is cut."
    )
    extract_max_input_tokens: int = Field(
        24000, ge=500, description="New-message tokens sent per summary call; the rest waits."
    )
    extract_workers: int = Field(2, ge=1, le=32, description="Background threads for summary calls.")
    queue_max: int = Field(
        10000, ge=1, description="Runs waiting for the background collector before hooks collect inline."
    )
    failure_backoff_seconds: float = Field(
        60.0, ge=0, description="Pause after a failed summary before the next automatic attempt."
    )
    summary_retries: int = Field(1, ge=0, le=3, description=(
        "Times a summary answer the template check rejects (too few of its sections, empty) is asked "
        "for again at once, told why, before the failure back-off. A model call only on a rejection."))


class AutoMemoryConfig(_Section):
    """Auto memory: debounced background extraction of facts and a profile."""

    enabled: bool = Field(True, description="Capture runs and inject auto memory in `build_agent`.")
    debounce_seconds: float = Field(30.0, ge=0, description="Quiet time before an extraction.")
    max_wait_seconds: float = Field(300.0, ge=0, description="Longest an update may be postponed.")
    queue_max: int = Field(1000, ge=1, description="Most pending (user, agent, session) entries.")
    fact_confidence_threshold: float = Field(0.7, ge=0, le=1, description="Facts below are dropped.")
    max_facts: int = Field(100, ge=1, description="Most facts kept per place.")
    max_injection_tokens: int = Field(2000, ge=50, description="Token budget of the injected block.")
    correction_share: float = Field(0.25, ge=0, le=1, description="Kept for compatibility: corrections are now "
                                    "reserved first and take what they need of the budget.")
    model: str | None = Field(None, description="Model id for extraction (default: light model).")
    min_interval_seconds: float = Field(1800.0, ge=0, description="Least time between two extractions of one "
                                        "session (the first is not held back; wins over max_wait_seconds).")
    workers: int = Field(1, ge=1, le=16, description="Background threads running extractions per process.")
    max_attempts: int = Field(3, ge=1, le=10, description="Tries per batch when the model fails or answers "
                              "unusably (nothing is changed by a failed try).")
    batch_max_messages: int = Field(200, ge=2, description="A pending batch this long is extracted at once.")
    max_conversation_tokens: int = Field(8000, ge=500, description="Conversation tokens sent per extraction.")
    max_output_tokens: int = Field(2000, ge=100, description="Completion-token cap of an extraction call.")
    shutdown_flush_seconds: float = Field(10.0, ge=0, description="Time given to pending updates at exit.")
    shutdown_flush_max_seconds: float = Field(300.0, ge=0, description="Most time the exit flush waits: pending "
                                              "updates get the extraction model's measured latency each, at least "
                                              "`shutdown_flush_seconds`; what is left is kept for the next start.")
    max_removals_per_update: int = Field(3, ge=0, description="Most facts one extraction may remove (each "
                                         "needs a replacing fact or a 'forget' in the user's words).")
    patterns_dir: Path | None = Field(None, description="Folder of signal pattern files (`<signal>.yaml`) that "
                                      "extend the bundled ones (`replace: true` in a file replaces them).")
    combine_with_summary: bool = Field(True, description="When a session summary is due for a session with a "
                                       "pending extraction, one light-model call returns both (same model only).")
    summary_wait_seconds: float = Field(7200.0, ge=0, description="How long the extraction of a session that "
                                        "session memory summarises may wait for the next summary to ride along; "
                                        "it runs alone sooner after min_interval_seconds of quiet.")


class RecallConfig(_Section):
    """Relevant recall: files chosen per query and put into the context."""

    enabled: bool = Field(True, description="Recall files when `build_agent` gets a query.")
    max_files: int = Field(5, ge=1, le=5, description="Files chosen per query (at most 5).")
    file_max_lines: int = Field(200, ge=1, description="Lines per recalled file.")
    file_max_bytes: int = Field(4096, ge=256, description="Bytes per recalled file.")
    total_max_bytes: int = Field(16384, ge=1024, description="Bytes of all recalled files together.")
    use_model: bool = Field(True, description="Ask the light model (else lexical ranking only).")
    model_above: int = Field(5, ge=0, description="Ask the model only when more memories than this are "
                             "candidates (fewer: lexical ranking, no model call).")
    model_timeout: float = Field(
        8.0, gt=0, description="Seconds the light model may take to pick files; then lexical ranking answers."
    )
    max_candidates: int = Field(
        30, ge=5, description="Most memory lines shown to the light model (the best-ranked first)."
    )
    body_search: bool = Field(
        True, description="Rank by each place's search index (name, description and whole body); false: "
        "by the manifest lines only.")
    confident_margin: float | None = Field(
        0.3, ge=0, description="Skip the light model when the ranking is confident: at most `max_files` "
        "matches, or the best leads the next by this share of its score. Empty: always ask.")
    stale_after_days: float = Field(
        1.0, ge=0, description="Recalled memories older than this get a 'verify before relying on it' note."
    )
    surfaced_max_sessions: int = Field(
        4096, ge=1, description="Sessions whose recalled files are remembered per pod when Redis is absent."
    )
    per_run: bool = Field(
        False, description="Also recall on every run through an agno pre-hook (for Agents reused across runs)."
    )
    search_tool: bool = Field(
        True, description="Give the agent `search_memories` (words in whole memories, own and shared) beside "
        "the five file tools.")


class EmbedConfig(_Section):
    """The optional semantic tier of recall: any OpenAI-compatible `/v1/embeddings` endpoint."""

    model: str | None = Field(None, description="Embeddings model id; unset: no semantic tier, no call made.")
    base_url: str | None = Field(None, description="Embeddings base URL (default: the model's `base_url`).")
    api_key: SecretStr | None = Field(None, description="Embeddings API key (default: the model's `api_key`).")
    timeout: float = Field(5.0, gt=0, description="Seconds a query's embeddings request may take (the user waits "
                           "on it); then recall ranks by words.")
    batch_timeout: float = Field(120.0, gt=0, description="Seconds one background batch of memory chunks may take; "
                                 "a batch that times out is split in half, never marks the endpoint down.")
    batch_size: int = Field(64, ge=1, description="Most texts per embeddings request when memories are embedded "
                            "(smaller while the server is slow).")
    chunk_tokens: int = Field(80, ge=16, description="Estimated tokens per embedded chunk of a memory (a memory is "
                              "scored by its best chunk).")
    max_chunks: int = Field(64, ge=1, description="Most chunks embedded per memory (the rest is found by words).")
    weight_short: float = Field(0.85, ge=0, le=1, description="Weight of meaning (cosine) against words (BM25) for "
                                "short memories (facts); `weight_long` for long ones, interpolated between.")
    weight_long: float = Field(0.5, ge=0, le=1, description="Weight of meaning against words for long memories "
                               "(whole conversations, documents).")
    min_similarity: float = Field(0.05, ge=-1, le=1, description="Relevance floor: when no memory's best chunk is "
                                  "this close to the query (cosine), recall returns nothing; small talk is also "
                                  "caught by its likeness to pleasantries (docs/recall.md).")


class ServerConfig(_Section):
    """The HTTP control plane."""

    host: str = Field("127.0.0.1", description="Bind address of `harness-memory serve`.")
    port: int = Field(8765, ge=1, le=65535, description="Port of `harness-memory serve`.")
    api_token: SecretStr | None = Field(None, description="Bearer token required on every call.")
    admin_token: SecretStr | None = Field(None, description="Bearer token for shared places.")
    user_source: Literal["header", "body"] = Field(
        "header", description="Where the trusted user id comes from: `wid` header or body `user_id`."
    )
    max_request_bytes: int = Field(
        64 * 1024 * 1024, ge=1024, description="Largest request body (imports) the HTTP API accepts."
    )
    ready_timeout_seconds: float = Field(
        3.0, gt=0, description="Seconds each readiness check (store, Redis) may take."
    )


class ObserveConfig(_Section):
    """Metrics, traces and structured logs of memory work (README "Observability")."""

    metrics: bool = Field(True, description="Count memory work in Prometheus metrics (`GET /metrics`); needs "
                          "the `metrics` extra (prometheus_client).")
    tracing: bool = Field(True, description="Emit OpenTelemetry spans into the app's tracer provider; needs "
                          "the `otel` extra (opentelemetry-api).")
    log_format: Literal["text", "json"] = Field(
        "text", description="`text`: human log lines; `json`: one JSON object per line plus memory events "
        "(user ids hashed, no memory text).")
    doctor_timeout_seconds: float = Field(10.0, gt=0, description="Deadline of each `harness-memory doctor` "
                                          "check.")


#: What ``model.model_profile: local`` changes, for a 0.5-7B model on a few CPU cores (measured with
#: Qwen2.5-Coder 0.5B/1.5B on llama.cpp, 2 cores: an agent turn 50-113 s, an extraction 41-128 s, a
#: summary up to 223 s, a recall pick 24-31 s). Only settings not given explicitly are changed.
LOCAL_PROFILE: dict[str, dict[str, Any]] = {
    "model": {"model_timeout": 600.0, "light_timeout": 600.0, "text_tool_calls": True, "temperature": 0.2,
              "light_temperature": 0.2, "max_tokens": 1536},
    "recall": {"model_timeout": 45.0},
    "agent": {"compact_prompt": True, "grounded_saves": True},
    # summary_max_chars also caps a summary's completion tokens (half of it): a small model that
    # loops would otherwise write 6,000 tokens at a few tokens/s (measured: a 0.5B summary hit 600 s)
    "session": {"lock_ttl_seconds": 900, "failure_backoff_seconds": 300.0, "extract_max_input_tokens": 8000,
                "summary_max_chars": 4000},
    "auto": {"max_attempts": 2, "max_conversation_tokens": 4000},
}


# Section name -> env prefix after HARNESS_MEMORY_.
_SECTIONS: dict[str, str] = {
    "store": "",
    "redis": "REDIS_",
    "limits": "",
    "model": "",
    "agent": "",
    "session": "SESSION_",
    "auto": "AUTO_",
    "recall": "RECALL_",
    "embed": "EMBED_",
    "server": "SERVER_",
    "observe": "OBSERVE_",
}


class MemoryConfig(_Section):
    """Every setting of harness-memory, grouped by layer."""

    store: StoreConfig = Field(default_factory=StoreConfig)
    redis: RedisConfig = Field(default_factory=RedisConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    session: SessionConfig = Field(default_factory=SessionConfig)
    auto: AutoMemoryConfig = Field(default_factory=AutoMemoryConfig)
    recall: RecallConfig = Field(default_factory=RecallConfig)
    embed: EmbedConfig = Field(default_factory=EmbedConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    observe: ObserveConfig = Field(default_factory=ObserveConfig)

    @model_validator(mode="after")
    def _apply_profile(self) -> MemoryConfig:
        """``model.model_profile: local`` sets the ``LOCAL_PROFILE`` values of every setting the
        caller did not give (YAML, environment or overrides): one switch for a CPU model."""
        if self.model.model_profile == "local":
            for section, values in LOCAL_PROFILE.items():
                part = getattr(self, section)
                for field, value in values.items():
                    if field not in part.model_fields_set:
                        setattr(part, field, value)
        return self

    @model_validator(mode="after")
    def _embed_partners(self) -> MemoryConfig:
        """An embeddings setting without its partner is an error, not a silently missing tier."""
        embed = self.embed
        given = [f for f in ("base_url", "api_key") if getattr(embed, f) is not None]
        if given and not embed.model:
            names = " and ".join(f"HARNESS_MEMORY_EMBED_{f.upper()}" for f in given)
            raise ValueError(f"{names} set without HARNESS_MEMORY_EMBED_MODEL (embed.model): set the embeddings "
                             "model id too, or remove the setting")
        if embed.model and not (embed.base_url or self.model.base_url):
            raise ValueError("HARNESS_MEMORY_EMBED_MODEL (embed.model) set without HARNESS_MEMORY_EMBED_BASE_URL "
                             "(embed.base_url) or HARNESS_MEMORY_BASE_URL (model.base_url, its fallback): set the "
                             "embeddings endpoint's base URL")
        return self

    @classmethod
    def load(
        cls,
        yaml_path: str | Path | None = None,
        env: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> MemoryConfig:
        """Build the config: defaults < YAML file < environment < ``overrides``.

        ``yaml_path`` defaults to ``$HARNESS_MEMORY_CONFIG``. ``overrides`` are nested dicts by
        section (``store={"backend": "local"}``).
        """
        env = os.environ if env is None else env
        data: dict[str, Any] = {}
        path = yaml_path or env.get(ENV_PREFIX + "CONFIG")
        if path:
            data = _read_yaml(Path(path).expanduser())
        for env_name, section, field in _env_fields():
            if env_name in env:
                data.setdefault(section, {})[field] = env[env_name]
        if path:  # after the environment: a relative folder it sets is beside the file too
            _relative_to_file(data, Path(path).expanduser())
        warn_unknown_env(env)
        for section, values in overrides.items():
            if section not in _SECTIONS:
                raise ConfigError(f"unknown config section {section!r}")
            data.setdefault(section, {}).update(values)
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise ConfigError(_explain(exc)) from None

    def public_dict(self) -> dict[str, Any]:
        """The effective config with every secret masked (safe to log or serve)."""
        out = self.model_dump(mode="json")
        for section in out.values():
            for key, value in section.items():
                if value is not None and _is_secret(key):
                    section[key] = "***"
        if out["redis"]["url"]:  # redis://user:PASSWORD@host
            out["redis"]["url"] = re.sub(r"(://[^/@]*?:)[^/@]*@", r"\1***@", out["redis"]["url"])
        return out


def effective_embed(cfg: MemoryConfig) -> EmbedConfig | None:
    """The embeddings endpoint as the semantic tier uses it (base URL and key fall back to the
    agent model's), or None when the tier is off."""
    embed = cfg.embed
    if not embed.model:
        return None
    return embed.model_copy(update={"base_url": embed.base_url or cfg.model.base_url,
                                    "api_key": embed.api_key or cfg.model.api_key})


def lease_problem(cfg: MemoryConfig) -> str | None:
    """Why the place-lock lease cannot cover one store write, or None.

    A writer checks its lease, then sends a PUT that the store client may retry; if the lease
    could run out before the client gives up, a stalled write could land after the next holder's.
    So ``lock_ttl_seconds`` must exceed ``cos_timeout`` x (``cos_retries`` + 1).
    """
    if cfg.store.effective_backend != "cos":
        return None
    worst = cfg.store.cos_timeout * (cfg.store.cos_retries + 1)
    if cfg.limits.lock_ttl_seconds > worst:
        return None
    return (f"limits.lock_ttl_seconds ({cfg.limits.lock_ttl_seconds:g} s) must be longer than one store write "
            f"with its retries may take (store.cos_timeout {cfg.store.cos_timeout:g} s x (cos_retries "
            f"{cfg.store.cos_retries} + 1) = {worst:g} s): raise HARNESS_MEMORY_LOCK_TTL_SECONDS or lower "
            "HARNESS_MEMORY_COS_TIMEOUT / HARNESS_MEMORY_COS_RETRIES")


def _is_secret(field: str) -> bool:
    return field.endswith(("secret_id", "secret_key", "_token", "api_key", "password")) or field == "api_token"


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"config file {path} must hold a mapping of sections")
    for section, values in list(loaded.items()):
        if values is None:  # every key commented out: an empty section, not an error
            loaded[section] = {}
        elif not isinstance(values, dict):
            raise ConfigError(f"section {section!r} of config file {path} must be a mapping")
    return loaded


def _relative_to_file(data: dict[str, Any], path: Path) -> None:
    """With a YAML config file, a relative ``agent.snapshots_dir`` — set in the file, set by
    ``HARNESS_MEMORY_SNAPSHOTS_DIR`` or left at its default ``snapshots`` — names a folder beside
    that file, so every command finds the same snapshots whatever directory it is run from."""
    agent = data.setdefault("agent", {})
    if not isinstance(agent, dict):
        return
    folder = agent.get("snapshots_dir", AgentConfig.model_fields["snapshots_dir"].default)
    if isinstance(folder, str | Path) and str(folder) and not Path(folder).expanduser().is_absolute():
        agent["snapshots_dir"] = str(path.resolve().parent / folder)


def project_dir() -> Path:
    """Where a relative ``agent.snapshots_dir`` is anchored without a config file: the project
    checkout holding the ``harness_memory`` package (it has a ``pyproject.toml``; its ``snapshots/``
    is the shipped starter snapshot), else — installed from a wheel — the working directory at the
    moment the config is loaded. Absolute either way."""
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "pyproject.toml").is_file():
        return checkout
    return Path.cwd()


def _env_fields() -> Iterator[tuple[str, str, str]]:
    for section, prefix in _SECTIONS.items():
        model = MemoryConfig.model_fields[section].annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        for field in model.model_fields:
            yield ENV_PREFIX + prefix + field.upper(), section, field


def unknown_env(env: Mapping[str, str]) -> list[tuple[str, str | None]]:
    """(variable, the closest known name or None) for every ``HARNESS_MEMORY_*`` variable that is
    no setting: a misspelt name would otherwise leave its setting silently at the default."""
    known = {name for name, _, _ in _env_fields()} | OTHER_ENV
    out = []
    for name in sorted(env):
        if name.startswith(ENV_PREFIX) and name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            out.append((name, close[0] if close else None))
    return out


def warn_unknown_env(env: Mapping[str, str]) -> None:
    for name, close in unknown_env(env):
        log.warning("unknown environment variable %s ignored%s", name, f" (did you mean {close}?)" if close else "")


def env_table() -> list[tuple[str, str, str, str]]:
    """(env var, config path, default, description) for every setting — the README table."""
    rows = []
    for env_name, section, field in _env_fields():
        model = MemoryConfig.model_fields[section].annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        info = model.model_fields[field]
        default = info.default
        shown = "" if default is None else str(default)
        rows.append((env_name, f"{section}.{field}", shown, info.description or ""))
    return rows


def _explain(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        section, _, field = loc.partition(".")
        hint = ""
        if section in _SECTIONS and field:
            hint = f" (env {ENV_PREFIX}{_SECTIONS[section]}{field.split('.')[0].upper()})"
        msg = str(err["msg"]).removeprefix("Value error, ")
        parts.append(f"{loc}{hint}: {msg}" if loc else msg)
    return "invalid configuration: " + "; ".join(parts)


def markdown_table() -> str:
    """The README's configuration table (a test keeps the README equal to it)."""
    lines = ["| Variable | Setting | Default | Meaning |", "|---|---|---|---|"]
    for env_name, path, default, desc in env_table():
        shown = f"`{default}`" if default else ""
        lines.append(f"| `{env_name}` | `{path}` | {shown} | {desc.replace('|', '/')} |")
    return "\n".join(lines)


def write_readme_table(path: str | Path) -> None:
    """Replace the table between the README's ``config-table`` markers with ``markdown_table()``."""
    readme = Path(path)
    text = readme.read_text(encoding="utf-8")
    block = re.compile(r"(<!-- config-table:start -->\n).*?(\n<!-- config-table:end -->)", re.S)
    if not block.search(text):
        raise ConfigError(f"{path} has no <!-- config-table:start/end --> markers")
    readme.write_text(block.sub(lambda m: m.group(1) + markdown_table() + m.group(2), text), encoding="utf-8")


if __name__ == "__main__":  # python -m harness_memory.config [--write docs/configuration.md]  -> the table
    import sys

    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        write_readme_table(sys.argv[2])
    else:
        print(markdown_table())
