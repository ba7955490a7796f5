"""Telemetry at each seam: store requests and tool calls by outcome, locks and lease loss, JSON
logs without user ids or memory text, multi-process metrics, and the optional packages absent."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from harness_memory.config import MemoryConfig
from harness_memory.errors import LockTimeout, PreconditionFailed
from harness_memory.locks import LocalLocker, RedisLocker
from harness_memory.observe import JsonLinesFormatter, Telemetry, hash_user, register_into
from harness_memory.observe.logs import EVENT_LOGGER
from harness_memory.services import MemoryServices
from tests.faults import FaultyStore
from tests.helpers import ROOT
from tests.servers import RedisServer

MEMORY = "---\nname: role\ndescription: PRIVATE-DESCRIPTION\ntype: user\n---\n\nPRIVATE-BODY text.\n"


def sample(telemetry: Telemetry, name: str, **labels: str) -> float:
    assert telemetry.metrics is not None
    return telemetry.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("backend", ["local", "cos"])
def test_store_requests_by_op_and_outcome(backend: str, make_config: Callable[..., MemoryConfig]) -> None:
    services = MemoryServices.from_config(make_config(backend=backend))
    t, store = services.telemetry, services.store
    key = "memory/users/u1/agent-memory/default/a.md"
    try:
        etag = store.put(key, b"one")
        assert store.get(key).data == b"one"
        assert store.get_or_none(key + ".missing") is None
        with pytest.raises(PreconditionFailed):
            store.put_if_absent(key, b"two")
        with pytest.raises(PreconditionFailed):
            store.put_if_match(key, b"two", "0" * 32)
        store.put_if_match(key, b"three", etag)
        store.delete(key)
    finally:
        services.close()
    n = "harness_memory_store_requests_total"
    assert sample(t, n, op="put", outcome="ok") == 1
    assert sample(t, n, op="get", outcome="ok") == 1
    assert sample(t, n, op="get", outcome="not_found") == 1
    assert sample(t, n, op="put_if_absent", outcome="conflict") == 1
    assert sample(t, n, op="put_if_match", outcome="conflict") == 1
    assert sample(t, n, op="put_if_match", outcome="ok") == 1
    assert sample(t, n, op="delete", outcome="ok") == 1
    assert sample(t, "harness_memory_store_request_seconds_count", op="get") == 2


def test_tool_calls_by_tool_and_outcome(make_config: Callable[..., MemoryConfig]) -> None:
    cfg = make_config(backend="local")
    inner = MemoryServices.from_config(cfg).store
    faulty = FaultyStore(inner)
    services = MemoryServices.from_config(cfg, store=faulty)
    t = services.telemetry
    tools = services.memory_tools("u1")
    try:
        assert tools.save_file("role.md", MEMORY).startswith("Created")
        assert tools.read_file("missing.md").startswith("Error: there is no memory file")
        assert tools.save_file("../escape.md", MEMORY).startswith("Error:")
        faulty.fail(lambda op, key: op == "get")
        assert "unreachable" in tools.read_file("role.md")
    finally:
        services.close()
        inner.close()
    n = "harness_memory_tool_calls_total"
    assert sample(t, n, tool="save_file", outcome="ok") == 1
    assert sample(t, n, tool="read_file", outcome="not_found") == 1
    assert sample(t, n, tool="save_file", outcome="invalid") == 1
    assert sample(t, n, tool="read_file", outcome="unavailable") == 1
    assert sample(t, "harness_memory_tool_call_seconds_count", tool="read_file") == 2


def test_local_lock_waits_and_timeouts(tmp_path: Path) -> None:
    t = Telemetry(tracing=False)
    locker = LocalLocker(tmp_path / "locks", wait=0.05, telemetry=t)
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with locker.hold("place"):
            held.set()
            release.wait(5)

    thread = threading.Thread(target=holder)
    thread.start()
    assert held.wait(5)
    with pytest.raises(LockTimeout), locker.hold("place"):
        pass
    release.set()
    thread.join()
    n = "harness_memory_lock_acquisitions_total"
    assert sample(t, n, backend="local", outcome="acquired") == 1
    assert sample(t, n, backend="local", outcome="timeout") == 1
    assert sample(t, "harness_memory_lock_wait_seconds_sum", backend="local") >= 0.05


def test_redis_lease_loss_and_fallback(tmp_path: Path) -> None:
    server = RedisServer(base_dir=tmp_path / "redis").start()  # private: this test kills it
    t = Telemetry(tracing=False)
    try:
        from harness_memory.config import RedisConfig
        from harness_memory.redis_client import make_redis

        client = make_redis(RedisConfig(url=server.url, socket_timeout=0.5))
        assert client is not None
        locker = RedisLocker(client, prefix="t:", ttl=0.05, wait=1, telemetry=t, retry_after=30)
        with locker.hold("place"):
            client.delete(locker.keys("place")[0])  # the lease ran out and someone else's took its place
        with locker.hold("place"):
            pass
        server.kill()
        with locker.hold("place"):  # Redis down: the in-process lock is used
            pass
        client.close()
    finally:
        server.stop()
    assert sample(t, "harness_memory_lock_leases_lost_total", lock="place") == 1
    assert sample(t, "harness_memory_lock_acquisitions_total", backend="redis", outcome="acquired") == 2
    assert sample(t, "harness_memory_lock_acquisitions_total", backend="redis", outcome="fallback") == 1
    assert sample(t, "harness_memory_lock_acquisitions_total", backend="local", outcome="acquired") == 1


def test_json_logs_carry_events_without_user_ids_or_memory_text(make_config: Callable[..., MemoryConfig]) -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonLinesFormatter())
    pkg = logging.getLogger("harness_memory")
    old_level = pkg.level
    pkg.addHandler(handler)
    pkg.setLevel(logging.DEBUG)
    services = MemoryServices.from_config(make_config(backend="local"),
                                          telemetry=Telemetry(tracing=False, events=True))
    try:
        tools = services.memory_tools("carol-42")
        assert tools.save_file("role.md", MEMORY).startswith("Created")
        assert tools.read_file("nope.md").startswith("Error")
        logging.getLogger("harness_memory.test").warning("could not read memory/users/carol-42/x.md")
        logging.getLogger("harness_memory.test").warning("recall for user %s failed", "carol-42")
    finally:
        services.close()
        pkg.removeHandler(handler)
        pkg.setLevel(old_level)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines and all({"ts", "level", "logger", "event"} <= set(line) for line in lines)
    calls = [line for line in lines if line["event"] == "tool.call"]
    assert [(c["op"], c["outcome"]) for c in calls] == [("save_file", "ok"), ("read_file", "not_found")]
    assert calls[0]["user"] == hash_user("carol-42") and calls[0]["place"] == f"users/{hash_user('carol-42')}/" \
        "agent-memory/default/"
    assert isinstance(calls[0]["duration_ms"], float)
    assert any(line["event"] == "store.request" and line["logger"] == EVENT_LOGGER for line in lines)
    assert any(line["event"] == "log" and hash_user("carol-42") in line["message"] for line in lines)
    raw = out.getvalue()
    for secret in ("carol-42", "PRIVATE-DESCRIPTION", "PRIVATE-BODY"):
        assert secret not in raw


def test_register_into_another_registry(make_config: Callable[..., MemoryConfig]) -> None:
    services = MemoryServices.from_config(make_config(backend="local"))
    other = CollectorRegistry()
    try:
        register_into(other, services)
        services.memory_tools("u1").list_files()
        assert other.get_sample_value("harness_memory_tool_calls_total",
                                      {"tool": "list_files", "outcome": "ok"}) == 1
    finally:
        services.close()


def test_metrics_add_up_across_processes(tmp_path: Path) -> None:
    """PROMETHEUS_MULTIPROC_DIR: two worker processes record, a third serves the sum."""
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    worker = textwrap.dedent("""
        import sys
        from harness_memory.observe import Telemetry
        t = Telemetry(tracing=False)
        for _ in range(int(sys.argv[1])):
            with t.store_request("get"):
                pass
        t.auto_queue(depth=int(sys.argv[1]))
    """)
    for count in ("3", "4"):
        subprocess.run([sys.executable, "-c", worker, count], env=env, check=True, timeout=60)
    render = "from harness_memory.observe import Telemetry; print(Telemetry(tracing=False).render()[0].decode())"
    body = subprocess.run([sys.executable, "-c", render], env=env, check=True, timeout=60, capture_output=True,
                          text=True).stdout
    assert 'harness_memory_store_requests_total{op="get",outcome="ok"} 7.0' in body
    # livesum: each process's own depth, summed (gunicorn's child_exit calls mark_process_dead for exited ones)
    assert "harness_memory_auto_queue_depth 7.0" in body


def test_without_the_optional_packages_nothing_is_imported(tmp_path: Path) -> None:
    """opentelemetry and prometheus_client blocked: harness_memory imports, works, and never loads them."""
    script = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("opentelemetry", "prometheus_client"):
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import harness_memory
        from harness_memory.config import MemoryConfig
        from harness_memory.services import MemoryServices
        cfg = MemoryConfig.load(env={{}}, store={{"backend": "local", "local_root": {str(tmp_path)!r}}})
        svc = MemoryServices.from_config(cfg)
        assert svc.telemetry.metrics is None and svc.telemetry.tracer is None
        memory = "---\\nname: r\\ndescription: d\\ntype: user\\n---\\n\\nbody\\n"
        assert svc.user_agent_dir("u1").save("r.md", memory).created
        try:
            svc.telemetry.render()
        except RuntimeError as exc:
            assert "metrics extra" in str(exc)
        else:
            raise AssertionError("render without prometheus_client")
        svc.close()
        loaded = [m for m in sys.modules if m.split(".")[0] in ("opentelemetry", "prometheus_client")]
        assert not loaded, loaded
        print("ok")
    """)
    result = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_import_harness_memory_does_not_import_opentelemetry() -> None:
    code = "import sys, harness_memory; print(any(m.startswith('opentelemetry') for m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": str(ROOT)},
                            capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout.strip() == "False"


def test_recall_paths_and_light_model_failures(make_config: Callable[..., MemoryConfig]) -> None:
    """The model failing makes recall take the lexical fallback; both are counted, the model call
    by purpose and outcome."""
    from harness_memory.recall import recall
    from tests.fakellm import ScriptedLLM, error

    with ScriptedLLM() as llm:
        llm.set_handler(lambda req: error(500, "model down"))
        cfg = make_config(backend="local", model={"model": "m", "base_url": llm.base_url},
                          recall={"model_above": 0, "confident_margin": None})  # always ask the model
        services = MemoryServices.from_config(cfg)
        t = services.telemetry
        try:
            services.user_agent_dir("u1").save("role.md", MEMORY)
            assert recall(services, "u1", "default", "what is my role?").files == ("role.md",)
            lexical = MemoryServices.from_config(make_config(backend="local", recall={"use_model": False}))
            assert recall(lexical, "u1", "default", "what is my role?").files == ("role.md",)
            lexical.close()
        finally:
            services.close()
    assert sample(t, "harness_memory_recalls_total", path="fallback", outcome="hit") == 1
    assert sample(t, "harness_memory_llm_calls_total", purpose="recall", outcome="model_error") == 1
    assert sample(lexical.telemetry, "harness_memory_recalls_total", path="lexical", outcome="hit") == 1
