"""Where Redis is: ``RedisConfig``'s URL and separate settings parsed into one ``RedisTarget``.

Its own module, below both ``config`` (whose validator checks the settings with it at load time)
and ``redis_client`` (which connects to the target), so neither imports the other. It reads the
settings through the small ``RedisSettings`` Protocol for the same reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from urllib.parse import unquote, urlsplit

from pydantic import SecretStr

from .errors import ConfigError

DEFAULT_PORT = 6379
DEFAULT_SENTINEL_PORT = 26379
DEFAULT_MASTER = "mymaster"


class RedisSettings(Protocol):
    """The settings of ``config.RedisConfig`` the parser reads."""

    url: str | None
    mode: str
    sentinels: str | None
    sentinel_master: str | None
    username: str | None
    password: SecretStr | None
    wait_replicas: int


@dataclass(frozen=True)
class RedisTarget:
    """Where and how to connect, parsed from ``RedisConfig`` (URL plus the separate settings)."""

    mode: str  # "standalone" | "sentinel" | "cluster"
    url: str | None = None  # standalone: the URL as given (redis-py parses it)
    hosts: tuple[tuple[str, int], ...] = ()  # sentinel: the sentinels; cluster: startup nodes
    master: str = DEFAULT_MASTER
    db: int = 0
    tls: bool = False
    username: str | None = None
    password: str | None = None


def target_for(cfg: RedisSettings) -> RedisTarget | None:
    """Parse the settings; None when Redis is not configured. Raises ``ConfigError`` naming the
    setting that is wrong."""
    url = cfg.url
    if not url and not cfg.sentinels:
        return None
    scheme = urlsplit(url).scheme.lower() if url else ""
    if scheme and scheme not in {"redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel",
                                 "redis+cluster", "rediss+cluster"}:
        raise ConfigError(f"redis.url: unknown scheme {scheme!r} (use redis://, rediss://, unix://, "
                          "redis+sentinel://, rediss+sentinel://, redis+cluster:// or rediss+cluster://)")
    mode = cfg.mode
    if mode == "auto":
        mode = ("sentinel" if scheme.endswith("+sentinel") or cfg.sentinels
                else "cluster" if scheme.endswith("+cluster") else "standalone")
    tls = scheme.startswith("rediss")
    cfg_password = cfg.password.get_secret_value() if cfg.password else None
    if cfg.wait_replicas and mode != "sentinel":
        raise ConfigError("redis.wait_replicas needs Sentinel: after an unconfirmed write the sentinels "
                          "tell whether it went to the current master")
    if mode == "standalone":
        if scheme.endswith(("+sentinel", "+cluster")):
            raise ConfigError(f"redis.mode is standalone but redis.url is a {scheme}:// URL")
        # the URL's own credentials are parsed (and preferred) by redis-py
        return RedisTarget("standalone", url=url, tls=tls, username=cfg.username, password=cfg_password)
    url_user, url_password, hosts, path = _split(url) if url else (None, None, [], "")
    username, password = url_user or cfg.username, url_password or cfg_password
    if scheme == "unix":
        raise ConfigError(f"redis.mode {mode} needs host:port addresses, not a unix:// URL")
    parts = [p for p in path.split("/") if p]
    if mode == "sentinel":
        sentinels = _hosts(cfg.sentinels, DEFAULT_SENTINEL_PORT, "redis.sentinels") if cfg.sentinels else \
            _hosts(",".join(hosts), DEFAULT_SENTINEL_PORT, "redis.url")
        if scheme.endswith("+sentinel"):
            master, db_text = [*parts, None, None][:2]
        else:  # redis://[:pw@][host]/db with the sentinels given separately
            master, db_text = None, parts[0] if parts else None
        master = cfg.sentinel_master or (unquote(master) if master else DEFAULT_MASTER)
        if not sentinels:
            raise ConfigError("redis: Sentinel mode needs sentinel addresses (redis.sentinels or the URL)")
        return RedisTarget("sentinel", hosts=tuple(sentinels), master=master, db=_db(db_text), tls=tls,
                           username=username, password=password)
    nodes = _hosts(",".join(hosts), DEFAULT_PORT, "redis.url")
    if not nodes:
        raise ConfigError("redis: Cluster mode needs at least one node address in redis.url")
    if parts and _db(parts[0]) != 0:
        raise ConfigError("redis.url: Redis Cluster has only database 0")
    return RedisTarget("cluster", hosts=tuple(nodes), tls=tls, username=username, password=password)


def _split(url: str) -> tuple[str | None, str | None, list[str], str]:
    """(user, password, host:port items, path) of a URL whose netloc may list several hosts."""
    rest = url.split("://", 1)[1]
    netloc, _, path = rest.partition("/")
    netloc = netloc.split("?", 1)[0]
    path = path.split("?", 1)[0]
    creds, at, hostpart = netloc.rpartition("@")
    user = password = None
    if at:
        u, colon, p = creds.partition(":")
        user, password = (unquote(u) or None), (unquote(p) if colon else None)
    return user, password, [h for h in hostpart.split(",") if h], path


def _hosts(text: str, default_port: int, setting: str) -> list[tuple[str, int]]:
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if item.startswith("["):  # [ipv6]:port
            host, _, port = item[1:].partition("]")
            port = port.lstrip(":")
        else:
            host, _, port = item.rpartition(":") if ":" in item else (item, "", "")
        try:
            out.append((host, int(port) if port else default_port))
        except ValueError:
            raise ConfigError(f"{setting}: {item!r} is not host:port") from None
    return out


def _db(text: str | None) -> int:
    try:
        return int(text) if text else 0
    except ValueError:
        raise ConfigError(f"redis.url: database {text!r} is not a number") from None
