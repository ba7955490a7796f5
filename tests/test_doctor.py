"""``harness-memory doctor`` against the test servers: passes when all is well; with Redis
stopped, a wrong bucket, a failing model or a lease rule broken it fails and names the problem."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness_memory.cli import main
from harness_memory.config import MemoryConfig
from tests.fakellm import ScriptedLLM, error, text
from tests.helpers import write_config
from tests.servers import RedisServer


def doctor(cfg: MemoryConfig, tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str
           ) -> tuple[int, dict[str, Any]]:
    path = write_config(cfg, tmp_path / "doctor.yaml")
    code = main(["--config", str(path), "doctor", "--json", "--timeout", "10", *args])
    report = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in report["checks"]}


def test_doctor_passes_against_the_test_servers(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM,
                                                tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    llm_server.set_handler(lambda req: text("OK"))
    cfg = make_config(backend="cos", redis=True, model={"model": "agent-m", "base_url": llm_server.base_url,
                                                        "api_key": "k", "light_model": "light-m"})
    code, checks = doctor(cfg, tmp_path, capsys)
    assert code == 0, checks
    assert {n: c["status"] for n, c in checks.items()} == {
        "config": "ok", "store": "ok", "clock": "ok", "redis": "ok", "agent model": "ok", "light model": "ok",
        "embeddings": "skip", "tiktoken": checks["tiktoken"]["status"]}
    assert "write, read, create-only and If-Match refused as expected, delete" in checks["store"]["detail"]
    assert "lock set/get/compare-and-delete ok" in checks["redis"]["detail"]
    assert checks["clock"]["detail"].startswith("skew ")
    # One tiny prompt to each model, and nothing left behind in the store.
    assert sorted(r.model for r in llm_server.chat_requests) == ["agent-m", "light-m"]
    text_out = main(["--config", str(tmp_path / "doctor.yaml"), "doctor", "--check", "store"])
    assert text_out == 0 and "harness-memory doctor: OK" in capsys.readouterr().out


def test_doctor_fails_with_redis_stopped(make_config: Callable[..., MemoryConfig], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    server = RedisServer(base_dir=tmp_path / "redis").start()  # private: this test stops it
    port = server.port
    server.stop()
    cfg = make_config(backend="local")
    cfg = cfg.model_copy(update={"redis": cfg.redis.model_copy(update={"url": f"redis://127.0.0.1:{port}/0",
                                                                       "socket_timeout": 0.5})})
    code, checks = doctor(cfg, tmp_path, capsys, "--check", "redis", "--check", "store")
    assert code == 1
    assert checks["redis"]["status"] == "fail" and checks["store"]["status"] == "ok"
    assert f"cannot use Redis at redis://127.0.0.1:{port}/0" in checks["redis"]["detail"]
    assert "start Redis" in checks["redis"]["fix"]


def test_doctor_fails_with_a_wrong_bucket(make_config: Callable[..., MemoryConfig], seaweedfs: Any, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    cfg = make_config(backend="cos", store={"cos_bucket": "no-such-bucket-x",
                                            "cos_domain": seaweedfs.domain_for("no-such-bucket-x")})
    code, checks = doctor(cfg, tmp_path, capsys, "--check", "store", "--check", "clock")
    assert code == 1 and checks["store"]["status"] == "fail"
    # SeaweedFS answers an unknown bucket with 403 AccessDenied (real COS: 404 NoSuchBucket); both name it.
    assert "no-such-bucket-x" in checks["store"]["detail"] and "refused to write" in checks["store"]["detail"]
    assert "HARNESS_MEMORY_COS_BUCKET" in checks["store"]["fix"]
    assert checks["clock"]["status"] == "fail"
    # The human table names it too, with the fix under it.
    assert main(["--config", str(tmp_path / "doctor.yaml"), "doctor", "--check", "store"]) == 1
    table = capsys.readouterr().out
    assert "FAILED" in table and "refused to write memory/.doctor/" in table and "fix: check" in table


def test_doctor_fails_when_the_model_answers_errors(make_config: Callable[..., MemoryConfig],
                                                    llm_server: ScriptedLLM, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    llm_server.set_handler(lambda req: error(401, "bad key"))
    cfg = make_config(backend="local", model={"model": "m", "base_url": llm_server.base_url, "api_key": "k"})
    code, checks = doctor(cfg, tmp_path, capsys, "--check", "agent model", "--check", "light model")
    assert code == 1 and checks["agent model"]["status"] == "fail"
    assert "answered HTTP 401: bad key" in checks["agent model"]["detail"]
    assert checks["light model"]["status"] == "skip"  # the same model: asked once


def test_doctor_checks_the_lease_rules(make_config: Callable[..., MemoryConfig], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    cfg = make_config(backend="cos", limits={"lock_ttl_seconds": 4.0}, store={"cos_timeout": 5.0})
    code, checks = doctor(cfg, tmp_path, capsys, "--check", "config")
    assert code == 1 and checks["config"]["status"] == "fail"
    assert "HARNESS_MEMORY_LOCK_TTL_SECONDS" in checks["config"]["detail"]
    # Retries count too: 5 s x (1 + 1) = 10 s does not fit in an 8 s lease (refused at start-up).
    cfg = make_config(backend="cos", limits={"lock_ttl_seconds": 8.0}, store={"cos_timeout": 5.0, "cos_retries": 1})
    code, checks = doctor(cfg, tmp_path, capsys, "--check", "config")
    assert code == 1 and checks["config"]["status"] == "fail"
    assert "cos_retries 1 + 1) = 10 s" in checks["config"]["detail"]
    cfg = make_config(backend="cos", limits={"lock_ttl_seconds": 11.0}, store={"cos_timeout": 5.0, "cos_retries": 1})
    code, checks = doctor(cfg, tmp_path, capsys, "--check", "config")
    assert code == 0 and checks["config"]["status"] == "warn"
    assert "COS without Redis" in checks["config"]["detail"]


def test_doctor_names_a_hung_check(make_config: Callable[..., MemoryConfig], llm_server: ScriptedLLM,
                                   tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tests.fakellm import delay

    llm_server.set_handler(lambda req: delay(5, text("late")))
    cfg = make_config(backend="local", model={"model": "m", "base_url": llm_server.base_url})
    path = write_config(cfg, tmp_path / "doctor.yaml")
    assert main(["--config", str(path), "doctor", "--json", "--timeout", "0.5", "--check", "agent model"]) == 1
    check = json.loads(capsys.readouterr().out)["checks"][0]
    assert check["status"] == "fail" and ("timed out" in check["detail"] or "no answer within" in check["detail"])
