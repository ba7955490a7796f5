"""The model layer against the scripted server: what is sent, what comes back, how it fails."""

from __future__ import annotations

import asyncio
import copy
import os
import time

import pytest

from harness_memory.agent_model import make_agent_model
from harness_memory.config import ModelConfig
from harness_memory.errors import HarnessMemoryError, ModelNotConfigured
from harness_memory.llm import (
    LightModel,
    LLMError,
    LLMResult,
    LLMTimeout,
    extract_json,
    strip_think,
)
from tests.fakellm import ScriptedLLM, delay, empty_choices, error, raw, raw_body, text, tool_calls

os.environ.setdefault("AGNO_TELEMETRY", "false")

MSGS = [{"role": "system", "content": "You summarise."}, {"role": "user", "content": "hello"}]


def _light(server: ScriptedLLM, **kw: object) -> LightModel:
    return LightModel(model="light-1", base_url=server.base_url, api_key="sk-light", **kw)  # type: ignore[arg-type]


# -- configuration ---------------------------------------------------------------------------------
def test_make_agent_model_requires_model_and_base_url() -> None:
    with pytest.raises(ModelNotConfigured, match="HARNESS_MEMORY_MODEL") as info:
        make_agent_model(ModelConfig())
    assert isinstance(info.value, HarnessMemoryError)
    assert "HARNESS_MEMORY_BASE_URL" in str(info.value)
    with pytest.raises(ModelNotConfigured):
        make_agent_model(ModelConfig(model="m"))


def test_make_agent_model_settings(llm_server: ScriptedLLM) -> None:
    from agno.models.openai.like import OpenAILike

    cfg = ModelConfig(model="agent-x", base_url=llm_server.base_url, api_key="sk-a", model_timeout=12)
    model = make_agent_model(cfg)
    assert isinstance(model, OpenAILike)
    assert (model.id, model.base_url, model.api_key, model.timeout) == (
        "agent-x", llm_server.base_url, "sk-a", 12
    )
    assert model.max_retries is not None and model.max_retries <= 2
    assert make_agent_model(ModelConfig(model="a", base_url=llm_server.base_url)).api_key  # placeholder


def test_agent_model_drives_an_agent(llm_server: ScriptedLLM) -> None:
    from agno.agent import Agent

    llm_server.script(text("hi there"))
    cfg = ModelConfig(model="agent-x", base_url=llm_server.base_url, api_key="sk-a")
    agent = Agent(model=make_agent_model(cfg), instructions="Be kind.", telemetry=False)
    assert agent.run("hello").content == "hi there"
    (req,) = llm_server.chat_requests
    assert req.model == "agent-x" and req.roles() == ["system", "user"]
    assert req.headers["authorization"] == "Bearer sk-a"


def test_from_config_defaults_and_none() -> None:
    assert LightModel.from_config(ModelConfig()) is None
    assert LightModel.from_config(ModelConfig(model="m")) is None  # no base URL
    lm = LightModel.from_config(ModelConfig(model="big", base_url="http://127.0.0.1:9/v1", light_timeout=3))
    assert lm is not None and (lm.model, lm.base_url, lm.timeout) == ("big", "http://127.0.0.1:9/v1", 3)
    lm2 = LightModel.from_config(ModelConfig(
        model="big", base_url="http://127.0.0.1:9/v1", api_key="a",
        light_model="small", light_base_url="http://127.0.0.1:10/v1", light_api_key="sk-secret-b",
    ))
    assert lm2 is not None and (lm2.model, lm2.base_url) == ("small", "http://127.0.0.1:10/v1")
    assert "sk-secret-b" not in repr(lm2)


def test_light_model_uses_light_key(llm_server: ScriptedLLM) -> None:
    llm_server.script(text("ok"))
    lm = LightModel.from_config(ModelConfig(
        model="big", base_url="http://127.0.0.1:9/v1", api_key="agent-key",
        light_model="small", light_base_url=llm_server.base_url, light_api_key="light-key",
    ))
    assert lm is not None
    lm.complete(MSGS)
    (req,) = llm_server.requests
    assert req.model == "small" and req.headers["authorization"] == "Bearer light-key"


# -- complete ----------------------------------------------------------------------------------------
def test_complete_sends_and_counts(llm_server: ScriptedLLM) -> None:
    llm_server.script(text("summary", prompt_tokens=40, completion_tokens=3), text("again", 10, 2))
    lm = _light(llm_server)
    result = lm.complete(MSGS, max_tokens=50)
    assert result == LLMResult(text="summary", prompt_tokens=40, completion_tokens=3, model="light-1")
    (req,) = llm_server.requests
    assert req.model == "light-1" and req.messages == MSGS
    assert req.body["max_tokens"] == 50 and "response_format" not in req.body
    assert req.headers["authorization"] == "Bearer sk-light"
    lm.complete(MSGS)
    assert "max_tokens" not in llm_server.requests[1].body
    assert (lm.calls, lm.prompt_tokens, lm.completion_tokens, lm.errors) == (2, 50, 5, 0)


def test_json_mode_sends_response_format(llm_server: ScriptedLLM) -> None:
    llm_server.script(text('{"facts": []}'))
    result = _light(llm_server).complete(MSGS, json_mode=True)
    assert extract_json(result.text) == {"facts": []}
    assert llm_server.requests[0].body["response_format"] == {"type": "json_object"}


def test_json_mode_rejected_retries_without_and_remembers(llm_server: ScriptedLLM) -> None:
    llm_server.script(error(400, "response_format is not supported"), text('{"a": 1}'), text('{"b": 2}'))
    lm = _light(llm_server)
    assert lm.complete(MSGS, json_mode=True).text == '{"a": 1}'
    first, second = llm_server.requests
    assert "response_format" in first.body and "response_format" not in second.body
    assert lm.calls == 2
    lm.complete(MSGS, json_mode=True)  # the server said no once: not sent again
    assert "response_format" not in llm_server.requests[2].body


def test_json_mode_retry_failing_too_is_llm_error(llm_server: ScriptedLLM) -> None:
    llm_server.script(error(400, "bad"), error(400, "still bad"))
    with pytest.raises(LLMError, match="HTTP 400: still bad"):
        _light(llm_server).complete(MSGS, json_mode=True)
    assert len(llm_server.requests) == 2


def test_400_without_json_mode_is_not_retried(llm_server: ScriptedLLM) -> None:
    llm_server.script(error(400, "context too long"))
    lm = _light(llm_server)
    with pytest.raises(LLMError, match="HTTP 400: context too long"):
        lm.complete(MSGS)
    assert len(llm_server.requests) == 1 and lm.errors == 1


@pytest.mark.parametrize("status", [401, 429, 500, 503])
def test_http_errors_are_llm_errors_without_retry(llm_server: ScriptedLLM, status: int) -> None:
    llm_server.script(error(status, f"boom {status}"))
    with pytest.raises(LLMError, match=f"HTTP {status}: boom {status}"):
        _light(llm_server).complete(MSGS)
    assert len(llm_server.requests) == 1  # max_retries=0: a degraded caller is not kept waiting


def test_timeout_default_and_per_call(llm_server: ScriptedLLM) -> None:
    llm_server.script(delay(3, text("late")), delay(3, text("late")))
    lm = _light(llm_server, timeout=0.3)
    start = time.monotonic()
    with pytest.raises(LLMTimeout, match=r"timed out after 0\.3 s"):
        lm.complete(MSGS)
    assert time.monotonic() - start < 1.5
    start = time.monotonic()
    with pytest.raises(LLMError, match=r"timed out after 0\.2 s"):
        lm.complete(MSGS, timeout=0.2)
    assert time.monotonic() - start < 1.5
    assert lm.errors == 2


def test_connection_refused_is_llm_error() -> None:
    server = ScriptedLLM().start()
    url = server.base_url
    server.stop()
    with pytest.raises(LLMError, match="cannot reach"):
        LightModel(model="m", base_url=url, timeout=2).complete(MSGS)


def test_empty_and_garbage_answers(llm_server: ScriptedLLM) -> None:
    llm_server.script(text(""), empty_choices(), raw_body("not json at all"), raw("<think>hmm</think>  "),
                      tool_calls([("f", {})]))
    lm = _light(llm_server)
    for expected in ("empty answer", "no choices", "failed", "empty answer", "empty answer"):
        with pytest.raises(LLMError, match=expected):
            lm.complete(MSGS)
    assert lm.errors == 5 and lm.calls == 5


def test_garbage_content_is_returned_and_extract_json_fails_closed(llm_server: ScriptedLLM) -> None:
    llm_server.script(raw("I'm sorry, I cannot {do that"))
    result = _light(llm_server).complete(MSGS, json_mode=True)
    assert result.text == "I'm sorry, I cannot {do that"
    assert extract_json(result.text) is None


def test_think_blocks_are_stripped(llm_server: ScriptedLLM) -> None:
    llm_server.script(raw("<think>\nlet me think {\"no\": 1}\n</think>\n\nFinal answer."))
    assert _light(llm_server).complete(MSGS).text == "Final answer."


def test_deepcopy_shares_the_instance(llm_server: ScriptedLLM) -> None:
    lm = _light(llm_server)
    assert copy.deepcopy(lm) is lm
    assert copy.deepcopy({"m": lm})["m"] is lm


# -- acomplete ---------------------------------------------------------------------------------------
async def test_acomplete_sends_and_counts(llm_server: ScriptedLLM) -> None:
    llm_server.script(text("async summary", 8, 4), text("second", 1, 1))
    lm = _light(llm_server)
    result = await lm.acomplete(MSGS, json_mode=True, max_tokens=10)
    assert result.text == "async summary" and result.prompt_tokens == 8
    req = llm_server.requests[0]
    assert req.body["response_format"] == {"type": "json_object"} and req.body["max_tokens"] == 10
    await lm.acomplete(MSGS)
    assert (lm.calls, lm.prompt_tokens, lm.completion_tokens) == (2, 9, 5)


async def test_acomplete_failures(llm_server: ScriptedLLM) -> None:
    llm_server.script(error(400, "no json mode"), text("plain"), delay(3, text("late")), error(502, "bad gw"))
    lm = _light(llm_server)
    assert (await lm.acomplete(MSGS, json_mode=True)).text == "plain"
    with pytest.raises(LLMTimeout):
        await lm.acomplete(MSGS, timeout=0.2)
    with pytest.raises(LLMError, match="HTTP 502"):
        await lm.acomplete(MSGS)


async def test_acomplete_concurrent(llm_server: ScriptedLLM) -> None:
    llm_server.set_handler(lambda req: text("echo " + req.last_user_text()))
    lm = _light(llm_server)
    results = await asyncio.gather(*(
        lm.acomplete([{"role": "user", "content": str(i)}]) for i in range(6)
    ))
    assert sorted(r.text for r in results) == sorted(f"echo {i}" for i in range(6))
    assert lm.calls == 6


def test_async_client_survives_several_event_loops(llm_server: ScriptedLLM) -> None:
    """One LightModel used from successive ``asyncio.run`` loops (a pooled connection of a closed
    loop must not be reused)."""
    llm_server.set_handler(lambda req: text("ok"))
    lm = _light(llm_server)
    for _ in range(3):
        assert asyncio.run(lm.acomplete(MSGS)).text == "ok"
    assert len(lm._async_clients) == 1  # closed loops were dropped


# -- helpers -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("raw_text", "expected"),
    [
        ("<think>a</think>b", "b"),
        ("<THINK>a</THINK> b <think>c</think> d", "b  d"),
        ("reasoning without opening tag</think>answer", "answer"),
        ("answer<think>cut short", "answer"),
        ("no think here", "no think here"),
    ],
)
def test_strip_think(raw_text: str, expected: str) -> None:
    assert strip_think(raw_text) == expected


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ('{"a": 1}', {"a": 1}),
        ("[1, 2]", [1, 2]),
        ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
        ('```\n[{"x": "y"}]\n```', [{"x": "y"}]),
        ('Sure! Here it is: {"a": "b"} Hope that helps {really}.', {"a": "b"}),
        ('<think>{"wrong": true}</think>{"right": true}', {"right": True}),
        ('text {"s": "a } brace and { another", "n": {"k": "]"}} tail', {"s": "a } brace and { another",
                                                                       "n": {"k": "]"}}),
        ('{"q": "escaped \\" quote }"}', {"q": 'escaped " quote }'}),
        ('{"a": [1, 2,], "b": 3,}', {"a": [1, 2], "b": 3}),
        ('noise {not json} then {"ok": 1}', {"ok": 1}),
        ('{"facts": [{"content": "用户喜欢{花括号}", "confidence": 0.9}]}',
         {"facts": [{"content": "用户喜欢{花括号}", "confidence": 0.9}]}),
        ("", None),
        ("no json here", None),
        ('{"unterminated": "yes', None),
        ("42", None),
        ('"just a string"', None),
        ("{broken: json}", None),
        ("<think>only thinking {\"a\": 1}</think>", None),
    ],
)
def test_extract_json(answer: str, expected: object) -> None:
    assert extract_json(answer) == expected


def test_extract_json_bounded_on_hostile_input() -> None:
    start = time.monotonic()
    assert extract_json("{" * 5000 + "x") is None
    assert extract_json("[{" * 20000) is None
    assert time.monotonic() - start < 2


def test_extract_json_skips_decoys_the_caller_does_not_accept() -> None:
    def wanted(v: object) -> bool:
        return isinstance(v, dict) and isinstance(v.get("user"), dict)

    decoy = 'Example object: {"user": "alice"}\nActual update:\n{"user": {"a": 1}}\ntail {"x": 2}'
    assert extract_json(decoy) == {"user": "alice"}  # without a shape, the first object
    assert extract_json(decoy, wanted) == {"user": {"a": 1}}
    fenced = 'Example: {"user": "alice"}\n```json\n{"user": {"a": 1}}\n```'
    assert extract_json(fenced) == extract_json(fenced, wanted) == {"user": {"a": 1}}  # fenced blocks first
    assert extract_json('{"user": "alice"} and nothing else', wanted) is None
    assert extract_json('<think>Let me analyse {"user": {"no": 1}}\n{"user": {"yes": 1}}', wanted) == {
        "user": {"no": 1}}  # an unclosed think block: its text is read, not thrown away
    assert extract_json('<think>{"user": {"no": 1}}</think> {"user": {"yes": 1}}', wanted) == {"user": {"yes": 1}}


@pytest.mark.parametrize(("raw_text", "expected"), [
    ("<think>reasoning, then the answer without a closing tag\n{\"a\": 1}", "reasoning, then the answer without a "
     "closing tag\n{\"a\": 1}"),
    ("<think>only reasoning, cut short", "only reasoning, cut short"),
])
def test_an_unclosed_think_block_at_the_start_keeps_what_follows(raw_text: str, expected: str) -> None:
    assert strip_think(raw_text) == expected
