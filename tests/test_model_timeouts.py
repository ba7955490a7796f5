"""Timeouts that fit the model: per-model latency, no blind retry of a timed-out generation, and
the ``local`` profile.

The failure reproduced: against a 1.5B CPU model the agent call timed out at 60 s and was sent
again (113 s for the first turn). Here the scripted server answers slower than the timeout and
the test counts what reached it.
"""

from __future__ import annotations

import pytest
from agno.agent import Agent

from harness_memory import llm_latency
from harness_memory.agent_model import make_agent_model
from harness_memory.config import LOCAL_PROFILE, ConfigError, MemoryConfig, ModelConfig
from harness_memory.llm import LightModel, LLMTimeout
from harness_memory.llm_latency import LatencyBook
from tests.fakellm import ScriptedLLM, delay, error, text


@pytest.fixture(autouse=True)
def fresh_book() -> None:
    llm_latency.BOOK.reset()


def agent(server: ScriptedLLM, model_id: str, timeout: float) -> Agent:
    cfg = ModelConfig(model=model_id, base_url=server.base_url, api_key="k", model_timeout=timeout)
    return Agent(model=make_agent_model(cfg), telemetry=False)


def test_a_timed_out_agent_call_is_not_sent_again(llm_server: ScriptedLLM) -> None:
    llm_server.script(delay(1.0, text("a long answer")), text("a retry would get this"))
    out = agent(llm_server, "slow-model", 0.3).run("hello")
    assert len(llm_server.chat_requests) == 1  # one request: no retry after the timeout
    assert "a retry would get this" not in str(out.content)
    est = llm_latency.estimate("slow-model")
    assert est is not None and est.timeouts == 1 and est.seconds == pytest.approx(0.3)


def test_a_server_error_is_still_retried_once(llm_server: ScriptedLLM) -> None:
    llm_server.script(error(503, "busy"), text("fine now", prompt_tokens=40, completion_tokens=2))
    out = agent(llm_server, "m503", 30).run("hello")
    assert len(llm_server.chat_requests) == 2 and out.content == "fine now"
    est = llm_latency.estimate("m503")
    assert est is not None and est.samples == 1 and est.tokens == 42 and est.timeouts == 0


async def test_async_agent_call_is_not_retried_after_a_timeout(llm_server: ScriptedLLM) -> None:
    llm_server.script(delay(1.0, text("late")), text("retry"))
    await agent(llm_server, "slow-async", 0.3).arun("hello")
    assert len(llm_server.chat_requests) == 1
    assert llm_latency.estimate("slow-async").timeouts == 1  # type: ignore[union-attr]


def test_light_model_records_latency_and_timeouts(llm_server: ScriptedLLM) -> None:
    llm_server.script(text("{}", prompt_tokens=100, completion_tokens=20), delay(1.0, text("late")))
    light = LightModel("light-x", llm_server.base_url, timeout=0.3)
    light.complete([{"role": "user", "content": "hi"}])
    first = llm_latency.estimate("light-x")
    assert first is not None and first.samples == 1 and first.tokens == 120 and first.timeouts == 0
    with pytest.raises(LLMTimeout):
        light.complete([{"role": "user", "content": "hi"}])
    after = llm_latency.estimate("light-x")
    assert after is not None and after.samples == 2 and after.timeouts == 1
    assert after.seconds > first.seconds and after.tokens == 120  # the timeout is a lower bound, no tokens
    assert len(llm_server.chat_requests) == 2


def test_ewma_and_deadline_prediction() -> None:
    book = LatencyBook(alpha=0.5)
    book.record("m", 10.0, 100)
    est = book.record("m", 20.0, 300)
    assert (est.seconds, est.tokens, est.samples) == (15.0, 200.0, 2)
    assert est.predict() == 15.0 and est.predict(400) == pytest.approx(30.0)
    assert book.estimate("other") is None
    assert not llm_latency.cannot_meet("never-called", 0.001)  # nothing measured: try it
    llm_latency.record("slowpoke", 30.0, 1000)
    assert llm_latency.cannot_meet("slowpoke", 8.0) and not llm_latency.cannot_meet("slowpoke", 60.0)


def test_local_profile_sets_cpu_sized_defaults_and_explicit_settings_win() -> None:
    hosted = MemoryConfig.load(env={})
    local = MemoryConfig.load(env={"HARNESS_MEMORY_MODEL_PROFILE": "local",
                                   "HARNESS_MEMORY_SESSION_LOCK_TTL_SECONDS": "1000"},
                              recall={"model_timeout": 5})
    assert hosted.model.model_timeout == 60 and hosted.session.lock_ttl_seconds == 120
    assert local.model.model_timeout == LOCAL_PROFILE["model"]["model_timeout"]
    assert local.model.light_timeout == LOCAL_PROFILE["model"]["light_timeout"]
    assert local.auto.max_attempts == LOCAL_PROFILE["auto"]["max_attempts"]
    assert local.session.summary_max_chars == 4000 < hosted.session.summary_max_chars
    assert local.session.lock_ttl_seconds == 1000 and local.recall.model_timeout == 5  # given: kept
    # a summary may use the whole light timeout and still hold its lock
    assert LOCAL_PROFILE["session"]["lock_ttl_seconds"] >= LOCAL_PROFILE["model"]["light_timeout"] + 10
    with pytest.raises(ConfigError, match="HARNESS_MEMORY_MODEL_PROFILE"):
        MemoryConfig.load(env={"HARNESS_MEMORY_MODEL_PROFILE": "laptop"})
