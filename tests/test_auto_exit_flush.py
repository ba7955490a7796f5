"""The exit flush sized to the model, and what it cannot finish kept for the next start (issue #30):
a 1.5B CPU model takes about a minute per extraction, so a fixed 5 s flush dropped every pending
update ("auto-memory shut down with 2 pending updates not processed")."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest

from harness_memory import llm_latency
from harness_memory.auto import AutoPlace
from harness_memory.auto.pending import INDEX_FILE
from harness_memory.config import MemoryConfig
from harness_memory.services import MemoryServices
from tests.fakellm import Answer, RecordedRequest, ScriptedLLM, delay, text

SLOW_WORDS = "I keep my notes in Obsidian."
KEPT_WORDS = "I deploy with Nomad, not Kubernetes."


def config(make_config: Callable[..., MemoryConfig], server: ScriptedLLM, model: str = "fake-model",
           **auto: object) -> MemoryConfig:
    return make_config(model={"model": model, "base_url": server.base_url, "api_key": "k", "light_timeout": 30},
                       auto={"debounce_seconds": 3600, "max_attempts": 1, "workers": 1, **auto})


def test_the_deadline_follows_the_measured_latency(make_config: Callable[..., MemoryConfig],
                                                   llm_server: ScriptedLLM) -> None:
    model = f"slow-model-{uuid.uuid4().hex[:8]}"  # its own entry in the process-wide latency book
    cfg = config(make_config, llm_server, model, shutdown_flush_seconds=5, shutdown_flush_max_seconds=600)
    services = MemoryServices.from_config(cfg)
    auto = services.new_auto_memory(start_worker=False)
    try:
        assert auto.shutdown_deadline() == 5  # nothing pending: the configured floor
        for user in ("u1", "u2"):
            auto.capture(user, "s1", [{"role": "user", "content": f"{user}: {KEPT_WORDS}"}])
        assert auto.shutdown_deadline() == pytest.approx(2 * 30 * 1.2)  # unmeasured: the light timeout per call
        llm_latency.record(model, 60.0, 900)  # one extraction of a 1.5B model on 2 CPU cores
        assert auto.shutdown_deadline() == pytest.approx(2 * 60 * 1.2)
        llm_latency.record(model, 0.5, 900)
        llm_latency.record(model, 0.5, 900)
        assert 5 < auto.shutdown_deadline() < 2 * 60 * 1.2  # a model that got faster: a shorter wait
        capped_services = MemoryServices.from_config(config(make_config, llm_server, model,
                                                            shutdown_flush_max_seconds=20))
        capped = capped_services.new_auto_memory(start_worker=False)
        llm_latency.record(model, 600.0, 900)
        capped.capture("u1", "s1", [{"role": "user", "content": KEPT_WORDS}])
        assert capped.shutdown_deadline() == 20  # configurable ceiling
        capped.worker.drop_user("u1")
        capped.close(0)
        capped_services.close()
        auto.worker.drop_user("u1")
        auto.worker.drop_user("u2")
    finally:
        auto.close(0)
        services.close()


def test_what_the_flush_cannot_finish_is_kept_and_resumed(make_config: Callable[..., MemoryConfig],
                                                          llm_server: ScriptedLLM) -> None:
    def model(req: RecordedRequest) -> Answer:
        convo = str(req.messages[-1]["content"])
        if "Obsidian" in convo:  # the first update is still running when the pod stops
            return delay(3.0, text(json.dumps({"newFacts": []})))
        return text(json.dumps({"newFacts": [{"content": "Deploys with Nomad, not Kubernetes",
                                              "category": "preference", "confidence": 0.9,
                                              "evidence": "I deploy with Nomad"}]}))

    llm_server.set_handler(model)
    cfg = config(make_config, llm_server, shutdown_flush_seconds=0.3, shutdown_flush_max_seconds=0.3)
    pod1 = MemoryServices.from_config(cfg)
    auto1 = pod1.new_auto_memory(start_worker=True)
    auto1.capture("u1", "s1", [{"role": "user", "content": SLOW_WORDS}, {"role": "assistant", "content": "ok"}])
    auto1.capture("u2", "s1", [{"role": "user", "content": KEPT_WORDS}, {"role": "assistant", "content": "ok"}])
    auto1.close()  # 0.3 s: u1's update is in flight, u2's has not started
    store = pod1.store
    shared = AutoPlace(pod1.shared_auto_dir())
    index = json.loads(store.get(shared.dir.place.prefix + INDEX_FILE).data)
    assert index["users"] == ["u2"]  # the list holds user ids only; the words stay in the user's own place
    assert KEPT_WORDS not in store.get(shared.dir.place.prefix + INDEX_FILE).data.decode()
    kept = AutoPlace(pod1.user_auto_dir("u2")).read_watermarks().pending
    assert [m["text"] for m in kept[0]["messages"]] == [KEPT_WORDS, "ok"]
    assert auto1.list_facts("u2") == []

    pod2 = MemoryServices.from_config(cfg)  # the next start
    auto2 = pod2.new_auto_memory(start_worker=False)
    try:
        assert auto2.resume_pending() == 1
        assert auto2.flush(10)
        assert [f.content for f in auto2.list_facts("u2")] == ["Deploys with Nomad, not Kubernetes"]
        assert AutoPlace(pod2.user_auto_dir("u2")).read_watermarks().pending == []
        assert store.get_or_none(shared.dir.place.prefix + INDEX_FILE) is None
        assert auto2.resume_pending() == 0  # taken once
    finally:
        auto2.close(1)
        pod2.close()
        pod1.close()
