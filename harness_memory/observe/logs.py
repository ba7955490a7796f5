"""Structured logs: an opt-in JSON-lines format and the memory events written in it.

Why opt-in: the human-readable log lines stay the default (``observe.log_format: text``); a log
pipeline (Loki, ELK, CLS) wants one JSON object per line with fields it can filter on. With
``observe.log_format: json`` every ``harness_memory`` log record becomes such a line, and memory
work adds event records (``event``: ``tool.call``, ``store.request``, ``session.summary``,
``auto.extraction``, ``recall``, ``llm.call``, ``agent.build``, ``lock.wait``) with the place,
session id, duration and outcome.

What never appears: memory text (no event carries content; the few human messages that quoted a
model's answer now give its length) and raw user ids — an event names the user by
``hash_user(user_id)`` (a stable pseudonym: the same user has the same hash in every pod, so one
user's work can be followed, but the id is not written), and ``users/<id>/`` paths,
``user_id='…'`` and "for/of user <id>" in a message are rewritten to the hash as well.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import re
import sys
from typing import Any

EVENT_LOGGER = "harness_memory.events"
PACKAGE_LOGGER = "harness_memory"
_USER_PATH = re.compile(r"(users/)([^/\s'\"]+)")
_USER_FIELD = re.compile(r"(user_id=')([^']*)(')")
#: Our own log lines name a user as "for user <id>" / "of user <id>".
_USER_WORD = re.compile(r"((?:for|of) user )([^\s,;:()]+)")
#: Fields of a LogRecord that are not ``extra`` data.
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def hash_user(user_id: str | None) -> str | None:
    """A stable, short pseudonym of a user id for logs and traces (never the id itself)."""
    if not user_id:
        return None
    return "u-" + hashlib.sha256(b"harness-memory/user\x00" + user_id.encode("utf-8")).hexdigest()[:12]


def redact(text: str) -> str:
    """``text`` with user ids in store paths, ``user_id='…'`` and "for/of user <id>" replaced by their hash."""
    if "users/" in text:
        text = _USER_PATH.sub(lambda m: m.group(1) + str(hash_user(m.group(2))), text)
    if "user_id='" in text:
        text = _USER_FIELD.sub(lambda m: m.group(1) + str(hash_user(m.group(2))) + m.group(3), text)
    if " user " in text:
        text = _USER_WORD.sub(lambda m: m.group(1) + str(hash_user(m.group(2))), text)
    return text


class JsonLinesFormatter(logging.Formatter):
    """One JSON object per record: ``ts``, ``level``, ``logger``, ``event``, ``message`` and the
    event's fields (``place``, ``user``, ``session``, ``duration_ms``, ``outcome``, …)."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "hm_fields", None)
        out: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": getattr(record, "hm_event", None) or "log",
        }
        if isinstance(fields, dict):
            out.update({k: v for k, v in fields.items() if v is not None})
        else:
            out["message"] = redact(record.getMessage())
            extra = {k: v for k, v in vars(record).items() if k not in _RECORD_FIELDS and not k.startswith("_")}
            for key, value in extra.items():
                out.setdefault(key, value if isinstance(value, int | float | bool) else redact(str(value)))
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            out["error"] = f"{type(exc).__name__}: {redact(str(exc))}"[:500]
        return json.dumps(out, ensure_ascii=False, default=str)


class EventLog:
    """Writes memory events to the ``harness_memory.events`` logger (INFO; store and model calls
    at DEBUG, as they are many)."""

    def __init__(self) -> None:
        self.logger = logging.getLogger(EVENT_LOGGER)

    def emit(self, event: str, level: int = logging.INFO, **fields: Any) -> None:
        if self.logger.isEnabledFor(level):
            self.logger.log(level, event, extra={"hm_event": event, "hm_fields": fields})


_INSTALLED = "_harness_memory_json"


def install_json_logging(level: int = logging.INFO, stream: Any = None) -> logging.Handler:
    """Send every ``harness_memory`` log record to ``stream`` (stderr) as JSON lines.

    Idempotent (one handler however often it is called). The package logger stops propagating,
    so an app's own human-readable handlers do not print the same records twice."""
    pkg = logging.getLogger(PACKAGE_LOGGER)
    for handler in pkg.handlers:
        if getattr(handler, _INSTALLED, False):
            return handler
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLinesFormatter())
    setattr(handler, _INSTALLED, True)
    pkg.addHandler(handler)
    if pkg.level == logging.NOTSET or pkg.level > level:
        pkg.setLevel(level)
    pkg.propagate = False
    return handler


__all__ = ["EVENT_LOGGER", "EventLog", "JsonLinesFormatter", "hash_user", "install_json_logging", "redact"]
