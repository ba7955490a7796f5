"""Signal patterns as data: what the user's own words say about a batch before any model sees it.

Why patterns, and why data: a cheap regex pass over the user's messages tells the updater what
kind of conversation this is, and that changes both what the extractor is told (a hint per
signal, or a warning when a signal is absent) and what the apply step believes afterwards — a
"correction" is only accepted when the user's words carry a correction signal, a removal only
with a replacement or a "forget" signal, a confirmation only with a reinforcement signal; an
acknowledgement-only batch ("好的", "ok") costs no model call at all. Being data, the lists can
be read, reviewed and extended without touching code.

The bundled files (``auto/patterns/*.yaml``, English and Chinese): ``correction``,
``reinforcement``, ``preference``, ``identity``, ``goal``, ``decision``, ``forget``, ``remember`` (signals,
searched in each user message), ``trivial`` (matched against a whole message) and
``task_scope`` (matched against a proposed fact: task-scoped facts stay out of user memory).

File format — a mapping (a bare list is read as ``patterns``)::

    hint: text told to the extractor when the signal is present ({excerpts} = the user's words)
    absent_hint: text told when it is absent (optional)
    unless_after: a regex; a match preceded by it (e.g. a negation) does not count (optional)
    replace: false        # deployment files only: true replaces the bundled patterns
    patterns:
      - '\\bregex\\b'                  # case-insensitive
      - {pattern: 'Regex', flags: []}  # case-sensitive

A deployment extends them with ``auto.patterns_dir``: each ``<name>.yaml`` there ADDS its patterns
to the bundled file of that name (its ``hint`` replaces the bundled hint; ``replace: true``
replaces the patterns too), and a new name defines a new signal with its own hint. A broken file
or a bad regex is logged and skipped — memory degrades, the user's run does not fail.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .model import CapturedMessage, Signals

log = logging.getLogger(__name__)

SIGNALS = ("correction", "reinforcement", "preference", "identity", "goal", "decision", "forget", "remember")
TRIVIAL = "trivial"
TASK_SCOPE = "task_scope"
BUNDLED = (*SIGNALS, TRIVIAL, TASK_SCOPE)
EXCERPT_CHARS = 160
_END_PUNCT = " \t\r\n.。,，!！?？;；~～…"
_FLAGS = {"ignorecase": re.IGNORECASE, "i": re.IGNORECASE, "multiline": re.MULTILINE, "dotall": re.DOTALL}


@dataclass(frozen=True, slots=True)
class PatternSet:
    """The compiled patterns of one file (bundled, possibly extended by a deployment)."""

    name: str
    patterns: tuple[re.Pattern[str], ...] = ()
    hint: str = ""
    absent_hint: str = ""
    unless_after: re.Pattern[str] | None = None

    def search(self, text: str) -> bool:
        for pattern in self.patterns:
            for match in pattern.finditer(text):
                if self.unless_after is None or not self.unless_after.search(
                        text[max(0, match.start() - 12) : match.start()]):
                    return True
        return False

    def fullmatch(self, text: str) -> bool:
        core = text.strip().rstrip(_END_PUNCT).strip()
        return bool(core) and any(p.fullmatch(core) for p in self.patterns)


@dataclass(frozen=True)
class SignalPatterns:
    """Every pattern set, loaded once per patterns directory (``load``)."""

    sets: dict[str, PatternSet] = field(default_factory=dict)

    @classmethod
    def load(cls, extra_dir: str | Path | None = None) -> SignalPatterns:
        """The bundled patterns, extended by the ``*.yaml`` files of ``extra_dir`` (cached)."""
        return _load(str(Path(extra_dir).expanduser().resolve()) if extra_dir else None)

    @property
    def signal_names(self) -> tuple[str, ...]:
        return tuple(n for n in self.sets if n not in (TRIVIAL, TASK_SCOPE))

    def detect(self, messages: Iterable[CapturedMessage]) -> Signals:
        """The signals in the user messages (the assistant's words never count)."""
        names: set[str] = set()
        excerpts: list[tuple[str, str]] = []
        for msg in messages:
            if msg.role != "user":
                continue
            found = self.detect_text(msg.text)
            names |= found
            excerpt = " ".join(msg.text.split())[:EXCERPT_CHARS]
            excerpts += [(name, excerpt) for name in sorted(found)]
        return Signals(frozenset(names), tuple(excerpts)).bounded()

    def detect_text(self, text: str) -> set[str]:
        found = {name for name in self.signal_names if self.sets[name].search(text)}
        if "correction" in found:
            found.discard("reinforcement")  # "不对，… perfect otherwise" corrects; it does not confirm
        return found

    def is_trivial(self, text: str) -> bool:
        """An acknowledgement with nothing to learn (and no signal)."""
        trivial = self.sets.get(TRIVIAL)
        return trivial is not None and trivial.fullmatch(text) and not self.detect_text(text)

    def task_scoped(self, text: str) -> bool:
        scope = self.sets.get(TASK_SCOPE)
        return scope is not None and scope.search(text)

    def drop_trivial(self, messages: list[CapturedMessage]) -> list[CapturedMessage]:
        """``messages`` without trivial user messages and the assistant replies that answer them."""
        out: list[CapturedMessage] = []
        skipping = False
        for msg in messages:
            if msg.role == "user":
                skipping = self.is_trivial(msg.text)
            if not skipping:
                out.append(msg)
        return out

    def hints(self, signals: Signals) -> list[str]:
        """What the extractor is told: a hint per detected signal, and the ``absent_hint`` of each
        signal that is missing (e.g. "record no corrections")."""
        lines = []
        for name in self.signal_names:
            pset = self.sets[name]
            if signals.has(name):
                excerpts = "; ".join(f"«{e}»" for e in signals.excerpts_of(name)) or "see the conversation"
                hint = pset.hint or f"The user's words match the {name!r} signal ({{excerpts}})."
                lines.append(hint.replace("{excerpts}", excerpts))
            elif pset.absent_hint:
                lines.append(pset.absent_hint)
        return lines


@functools.lru_cache(maxsize=8)
def _load(extra_dir: str | None) -> SignalPatterns:
    sets: dict[str, PatternSet] = {}
    bundled = resources.files(__package__).joinpath("patterns")
    for name in BUNDLED:
        data = _read(bundled.joinpath(f"{name}.yaml").read_text(encoding="utf-8"), f"bundled {name}.yaml")
        sets[name] = _compile(name, data, None, f"bundled {name}.yaml")
    if extra_dir:
        folder = Path(extra_dir)
        if not folder.is_dir():
            log.error("auto.patterns_dir %s is not a directory; using the bundled patterns only", folder)
        for path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
            name = path.stem
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,40}", name):
                log.error("signal pattern file %s: the name must be lower-case letters, digits, _; skipped", path)
                continue
            try:
                data = _read(path.read_text(encoding="utf-8"), str(path))
            except (OSError, ValueError) as exc:
                log.error("signal pattern file %s unreadable (%s); skipped", path, exc)
                continue
            sets[name] = _compile(name, data, sets.get(name), str(path))
    return SignalPatterns(sets)


def _read(text: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"{where}: not valid YAML ({exc})") from None
    if isinstance(data, list):
        return {"patterns": data}
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping with 'patterns' (or a list of patterns)")
    return data


def _compile(name: str, data: dict[str, Any], base: PatternSet | None, where: str) -> PatternSet:
    patterns: list[re.Pattern[str]] = [] if base is None or data.get("replace") is True else list(base.patterns)
    for entry in data.get("patterns") or []:
        regex, flags = entry, re.IGNORECASE
        if isinstance(entry, dict):
            regex = entry.get("pattern")
            names = entry.get("flags", ["ignorecase"])
            if not isinstance(names, list) or any(str(n).lower() not in _FLAGS for n in names):
                log.warning("%s: unknown flags %r in %r; entry skipped", where, names, regex)
                continue
            flags = 0
            for flag in names:
                flags |= _FLAGS[str(flag).lower()]
        if not isinstance(regex, str) or not regex:
            log.warning("%s: entry %r is not a pattern; skipped", where, entry)
            continue
        try:
            patterns.append(re.compile(regex, flags))
        except re.error as exc:
            log.error("%s: bad regular expression %r (%s); skipped", where, regex, exc)
    unless = data.get("unless_after", base.unless_after.pattern if base and base.unless_after else None)
    try:
        unless_re = re.compile(unless, re.IGNORECASE) if isinstance(unless, str) and unless else None
    except re.error as exc:
        log.error("%s: bad unless_after %r (%s); ignored", where, unless, exc)
        unless_re = base.unless_after if base else None

    def text(key: str) -> str:
        value = data.get(key)
        if isinstance(value, str) and value.strip():
            return " ".join(value.split())
        return getattr(base, key) if base is not None else ""

    return PatternSet(name, tuple(patterns), text("hint"), text("absent_hint"), unless_re)


def default_patterns() -> SignalPatterns:
    """The bundled patterns alone."""
    return SignalPatterns.load(None)
