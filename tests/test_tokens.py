"""Token counting: never hangs, falls back to a CJK-aware estimate, remembers failures.

The tests pass whether or not tiktoken can load its BPE file on this machine (offline it cannot,
unless ``TIKTOKEN_CACHE_DIR`` holds it); loader behaviour is tested with injected loaders.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from harness_memory import tokens
from harness_memory.tokens import (
    count_message_tokens,
    count_tokens,
    estimate_tokens,
    tokenizer_status,
    truncate_to_tokens,
)


class CharEncoding:
    """A stand-in encoding: one token per character (predictable counts)."""

    def encode(self, text: str, *, disallowed_special: object = ()) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)


class Loaders:
    """Injectable loaders that count their calls."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()

    def failing(self) -> CharEncoding:
        self.calls += 1
        raise OSError("no network")

    def working(self) -> CharEncoding:
        self.calls += 1
        return CharEncoding()

    def hanging(self) -> CharEncoding:
        self.calls += 1
        self.release.wait(10)
        return CharEncoding()


@pytest.fixture(autouse=True)
def fresh_tokenizer() -> Iterator[None]:
    tokens._reset()
    yield
    tokens._reset()


@pytest.fixture
def loaders() -> Iterator[Loaders]:
    made = Loaders()
    yield made
    made.release.set()


# -- estimate --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", 0),
        ("abcd", 1),
        ("abcde", 2),
        ("a" * 40, 10),
        ("你好", 2),  # ceil(2 / 1.5)
        ("你好世界", 3),  # ceil(4 / 1.5)
        ("用户喜欢Python", math.ceil(4 / 1.5) + math.ceil(6 / 4)),
        ("こんにちは", math.ceil(5 / 1.5)),
        ("안녕하세요", math.ceil(5 / 1.5)),
        ("，。！", 2),  # CJK punctuation and full-width forms count as CJK
    ],
)
def test_estimate(text: str, expected: int) -> None:
    assert estimate_tokens(text) == expected


def test_estimate_cjk_much_denser_than_latin() -> None:
    assert estimate_tokens("记忆" * 300) == 400 > 2.5 * estimate_tokens("ab" * 300)  # 600/1.5 vs 600/4


# -- loading -------------------------------------------------------------------------------------
def test_failure_falls_back_and_is_remembered(loaders: Loaders, monkeypatch: pytest.MonkeyPatch) -> None:
    tokens._reset(loaders.failing)
    assert count_tokens("你好世界 hello") == estimate_tokens("你好世界 hello")
    assert tokenizer_status() == "estimate"
    for _ in range(5):
        count_tokens("more text")
    assert loaders.calls == 1  # remembered: no new attempt inside the retry window
    monkeypatch.setattr(tokens, "RETRY_AFTER_SECONDS", 0.0)
    count_tokens("again")
    assert loaders.calls == 2


def test_success_uses_the_encoding(loaders: Loaders) -> None:
    tokens._reset(loaders.working)
    assert count_tokens("hello") == 5  # one per character with the stand-in
    assert tokenizer_status() == "tiktoken"
    assert count_tokens("x" * 40) == 40
    assert loaders.calls == 1


def test_hanging_load_is_bounded(loaders: Loaders, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "LOAD_DEADLINE_SECONDS", 0.3)
    tokens._reset(loaders.hanging)
    start = time.monotonic()
    assert count_tokens("abcd" * 5) == 5  # estimate while loading
    first = time.monotonic() - start
    assert 0.2 <= first < 1.0
    start = time.monotonic()
    for _ in range(20):
        count_tokens("abcd")
    assert time.monotonic() - start < 0.1  # past the deadline nobody waits
    assert tokenizer_status() == "estimate" and loaders.calls == 1
    loaders.release.set()
    deadline = time.monotonic() + 2
    while tokenizer_status() != "tiktoken" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert count_tokens("abcd") == 4  # the late load is used once it lands


def test_concurrent_first_calls_start_one_load(loaders: Loaders, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "LOAD_DEADLINE_SECONDS", 0.2)
    tokens._reset(loaders.hanging)
    threads = [threading.Thread(target=count_tokens, args=("text",)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2)
    assert loaders.calls == 1


def test_status_starts_a_load_without_waiting(loaders: Loaders) -> None:
    tokens._reset(loaders.hanging)
    start = time.monotonic()
    assert tokenizer_status() == "estimate"
    assert time.monotonic() - start < 0.1
    assert loaders.calls == 1


def test_real_tiktoken_either_way_never_hangs() -> None:
    """Whatever this machine allows (offline: a fast failure), counting returns within the deadline."""
    start = time.monotonic()
    n = count_tokens("hello world")
    assert time.monotonic() - start < tokens.LOAD_DEADLINE_SECONDS + 1
    if tokenizer_status() == "tiktoken":
        assert n == 2
    else:
        assert n == estimate_tokens("hello world") == 3


# -- messages --------------------------------------------------------------------------------------
@dataclass
class Msg:
    role: str
    content: object
    tool_calls: object = None


def test_count_message_tokens_shapes(loaders: Loaders) -> None:
    tokens._reset(loaders.working)  # one token per character: exact expectations
    overhead = tokens.MESSAGE_OVERHEAD_TOKENS
    assert count_message_tokens([]) == 0
    one = count_message_tokens([{"role": "user", "content": "hi"}])
    assert one == overhead + len("user") + 2 + tokens.REPLY_PRIMING_TOKENS
    parts = {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url"}]}
    assert count_message_tokens([parts]) == one
    assert count_message_tokens([Msg("user", "hi")]) == one
    assert count_message_tokens([{"role": "assistant", "content": None}]) == (
        overhead + len("assistant") + tokens.REPLY_PRIMING_TOKENS
    )
    with_call = count_message_tokens([Msg("assistant", "", tool_calls=[{"name": "f"}])])
    assert with_call > overhead + len("assistant") + tokens.REPLY_PRIMING_TOKENS


def test_count_message_tokens_agno_messages() -> None:
    from agno.models.message import Message

    msgs = [Message(role="system", content="You help."), Message(role="user", content="你好，记住我喜欢茶")]
    dicts = [{"role": "system", "content": "You help."}, {"role": "user", "content": "你好，记住我喜欢茶"}]
    assert count_message_tokens(msgs) == count_message_tokens(dicts) > 2 * tokens.MESSAGE_OVERHEAD_TOKENS


# -- truncation ------------------------------------------------------------------------------------
def test_truncate_with_encoding(loaders: Loaders) -> None:
    tokens._reset(loaders.working)
    assert truncate_to_tokens("abcdef", 4) == "abcd"
    assert truncate_to_tokens("abc", 10) == "abc"
    assert truncate_to_tokens("abc", 0) == ""


def test_truncate_with_estimate(loaders: Loaders) -> None:
    tokens._reset(loaders.failing)
    text = "word " * 100
    cut = truncate_to_tokens(text, 10)
    assert text.startswith(cut) and estimate_tokens(cut) <= 10 and len(cut) >= 36
    cjk = "记忆系统" * 50
    cut = truncate_to_tokens(cjk, 6)
    assert cjk.startswith(cut) and estimate_tokens(cut) <= 6 and len(cut) == 9
    assert truncate_to_tokens("short", 100) == "short"
    assert truncate_to_tokens("", 5) == ""


def test_truncate_real_tokenizer_either_way() -> None:
    text = "The quick brown fox jumps over the lazy dog. 敏捷的棕色狐狸跳过了懒狗。" * 20
    cut = truncate_to_tokens(text, 15)
    assert text.startswith(cut) and 0 < count_tokens(cut) <= 15
    assert "\ufffd" not in cut


# -- model.tokenizer: estimate --------------------------------------------------------------------
def test_estimate_setting_never_loads_tiktoken(loaders: Loaders) -> None:
    tokens._reset(loaders.working)
    tokens.use_estimate_only()
    assert count_tokens("hello world") == estimate_tokens("hello world")
    assert truncate_to_tokens("word " * 50, 5) == truncate_to_tokens("word " * 50, 5)
    assert tokenizer_status() == "estimate" and tokens.estimate_only()
    assert loaders.calls == 0  # the loader never ran, not even in the background


def test_estimate_setting_from_the_environment_makes_no_network_attempt(
        loaders: Loaders, tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """HARNESS_MEMORY_TOKENIZER=estimate: building the services and counting, cutting and reporting
    tokens never runs the tiktoken loader (the only code that imports tiktoken) nor opens a socket."""
    import socket

    from harness_memory.config import MemoryConfig
    from harness_memory.services import MemoryServices

    attempts: list[object] = []

    def connect(self: socket.socket, address: object) -> None:
        attempts.append(address)
        raise OSError("network attempt")

    tokens._reset(loaders.working)
    cfg = MemoryConfig.load(env={"HARNESS_MEMORY_TOKENIZER": "estimate"},
                            store={"backend": "local", "local_root": str(tmp_path)})
    assert cfg.model.tokenizer == "estimate"
    monkeypatch.setattr(socket.socket, "connect", connect)
    services = MemoryServices.from_config(cfg)
    try:
        assert count_tokens("hello world, 你好") == estimate_tokens("hello world, 你好")
        truncate_to_tokens("word " * 100, 7)
        assert tokenizer_status() == "estimate"
    finally:
        services.close()
    assert loaders.calls == 0 and attempts == []
