"""Loud configuration of the semantic tier (a setting without its partner is a start-up error, a
misspelt variable is named with the closest known one), ``doctor --check embeddings`` in every
documented configuration, and coverage visible through ``harness-memory embeddings status``."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness_memory.cli import main
from harness_memory.config import ConfigError, MemoryConfig, env_table, unknown_env
from harness_memory.services import MemoryServices
from tests.fakellm import ScriptedLLM
from tests.helpers import write_config
from tests.test_semantic import hash_vector, memory

MakeConfig = Callable[..., MemoryConfig]


# -- partners ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("alone", ["HARNESS_MEMORY_EMBED_BASE_URL", "HARNESS_MEMORY_EMBED_API_KEY"])
def test_an_embeddings_setting_without_the_model_is_an_error_naming_both(alone: str) -> None:
    with pytest.raises(ConfigError) as err:
        MemoryConfig.load(env={alone: "http://127.0.0.1:9/v1"})
    assert alone in str(err.value) and "HARNESS_MEMORY_EMBED_MODEL" in str(err.value)


def test_the_model_without_any_base_url_is_an_error_naming_both() -> None:
    with pytest.raises(ConfigError) as err:
        MemoryConfig.load(env={"HARNESS_MEMORY_EMBED_MODEL": "m"})
    assert "HARNESS_MEMORY_EMBED_MODEL" in str(err.value) and "HARNESS_MEMORY_EMBED_BASE_URL" in str(err.value)


def test_the_documented_configurations_load() -> None:
    both = MemoryConfig.load(env={"HARNESS_MEMORY_EMBED_MODEL": "m",
                                  "HARNESS_MEMORY_EMBED_BASE_URL": "http://127.0.0.1:9/v1"})
    fallback = MemoryConfig.load(env={"HARNESS_MEMORY_EMBED_MODEL": "m",
                                      "HARNESS_MEMORY_BASE_URL": "http://127.0.0.1:9/v1"})
    off = MemoryConfig.load(env={})
    assert both.embed.model == fallback.embed.model == "m" and off.embed.model is None


# -- unknown variables --------------------------------------------------------------------------------
def test_a_misspelt_variable_is_warned_about_with_the_closest_name(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="harness_memory.config"):
        cfg = MemoryConfig.load(env={"HARNESS_MEMORY_EMBED_MODLE": "m", "HARNESS_MEMORY_RECALL_MAX_FILES": "3",
                                     "OTHER_THING": "x"})
    assert cfg.embed.model is None and cfg.recall.max_files == 3
    (record,) = [r for r in caplog.records if "unknown environment variable" in r.getMessage()]
    assert "HARNESS_MEMORY_EMBED_MODLE" in record.getMessage()
    assert "did you mean HARNESS_MEMORY_EMBED_MODEL?" in record.getMessage()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([row[0] for row in env_table()]), st.data())
def test_every_one_letter_slip_of_a_known_name_is_caught(name: str, data: st.DataObject) -> None:
    tail = len("HARNESS_MEMORY_")
    at = data.draw(st.integers(tail, len(name) - 1))
    letter = data.draw(st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZ_"))
    slipped = name[:at] + letter + name[at + 1:]
    found = dict(unknown_env({slipped: "1"}))
    known = {row[0] for row in env_table()}
    if slipped in known or slipped in {"HARNESS_MEMORY_CONFIG", "HARNESS_MEMORY_LONGMEMEVAL",
                                       "HARNESS_MEMORY_BENCH_EMBED"}:
        assert found == {}
    else:
        assert slipped in found and found[slipped] is not None  # named, with a suggestion


# -- doctor ---------------------------------------------------------------------------------------------
def _doctor(cfg: MemoryConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    path = write_config(cfg, tmp_path / "doctor.yaml")
    code = main(["--config", str(path), "doctor", "--json", "--timeout", "10", "--check", "embeddings"])
    report = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in report["checks"]}


@pytest.mark.parametrize("where", ["embed.base_url", "model.base_url (fallback)"])
def test_doctor_checks_the_endpoint_the_tier_uses(make_config: MakeConfig, llm_server: ScriptedLLM, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str], where: str) -> None:
    llm_server.set_embedder(hash_vector)
    if where == "embed.base_url":
        cfg = make_config("local", embed={"model": "hash-embed", "base_url": llm_server.base_url, "api_key": "k"})
    else:
        cfg = make_config("local", model={"model": "agent-m", "base_url": llm_server.base_url, "api_key": "k"},
                          embed={"model": "hash-embed"})
    code, checks = _doctor(cfg, tmp_path, capsys)
    assert code == 0 and checks["embeddings"]["status"] == "ok", checks
    assert "256 dimensions" in checks["embeddings"]["detail"]
    (probe,) = llm_server.embedding_requests
    assert probe.body["model"] == "hash-embed" and probe.body["input"] == ["doctor probe"]


def test_doctor_fails_when_the_endpoint_does_not_answer(make_config: MakeConfig, llm_server: ScriptedLLM,
                                                        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = make_config("local", model={"model": "agent-m", "base_url": llm_server.base_url, "api_key": "k"},
                      embed={"model": "hash-embed"})  # the fallback URL, but no /v1/embeddings there
    code, checks = _doctor(cfg, tmp_path, capsys)
    assert code == 1 and checks["embeddings"]["status"] == "fail"
    assert "hash-embed" in checks["embeddings"]["detail"]


def test_doctor_skips_when_the_tier_is_off(make_config: MakeConfig, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, checks = _doctor(make_config("local"), tmp_path, capsys)
    assert code == 0 and checks["embeddings"]["status"] == "skip"


# -- coverage ---------------------------------------------------------------------------------------------
def test_embeddings_status_shows_coverage_and_fill_completes_it(make_config: MakeConfig, llm_server: ScriptedLLM,
                                                                tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    llm_server.set_embedder(hash_vector)
    plain = make_config("local")
    svc = MemoryServices.from_config(plain)  # written before the tier existed: nothing embedded
    try:
        svc.user_agent_dir("u1").save_many([(f"m{i}.md", memory(f"M{i}", f"memory {i}", "x")) for i in range(3)])
    finally:
        svc.close()
    cfg = plain.model_copy(update={"embed": plain.embed.model_copy(update={
        "model": "hash-embed", "base_url": llm_server.base_url})})
    path = str(write_config(cfg, tmp_path / "c.yaml"))
    assert main(["--config", path, "embeddings", "status", "users/u1"]) == 1
    out = capsys.readouterr().out
    assert "users/u1/agent-memory/default\t0/3 embedded" in out and "3 missing" in out
    assert main(["--config", path, "embeddings", "status", "--fill"]) == 0
    out = capsys.readouterr().out
    assert "users/u1/agent-memory/default\t3/3 embedded" in out and "3/3 memories embedded" in out
    assert main(["--config", str(write_config(plain, tmp_path / "p.yaml")), "embeddings", "status"]) == 0
    assert "embeddings: off" in capsys.readouterr().out


def test_the_place_says_its_coverage_over_http(make_config: MakeConfig, llm_server: ScriptedLLM) -> None:
    import asyncio

    from harness_memory.services import services_for
    from tests.test_server_memory import api

    llm_server.set_embedder(hash_vector)
    cfg = make_config("local", embed={"model": "hash-embed", "base_url": llm_server.base_url},
                      server={"user_source": "header"})
    svc = services_for(cfg)
    svc.user_agent_dir("me").save_many([(f"m{i}.md", memory(f"M{i}", f"memory {i}", "x")) for i in range(2)])
    tier = svc.semantic()
    assert tier is not None
    tier.wait_idle()

    async def ask() -> dict[str, Any]:
        async with api(cfg, wid="me") as client:
            resp = await client.get("/users/me/agents/default/memory/embeddings")
            assert resp.status_code == 200, resp.text
            return dict(resp.json())

    body = asyncio.run(ask())
    assert body["enabled"] and body["model"] == "hash-embed"
    assert (body["memories"], body["embedded"], body["missing"]) == (2, 2, 0)
    assert body["place"]["path"] == "users/me/agent-memory/default"
