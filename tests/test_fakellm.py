"""The scripted server speaks OpenAI's wire format well enough for the real clients.

Checked against the real ``openai`` client (sync, async, streaming) and agno's ``OpenAIChat`` /
``OpenAILike`` under ``Agent.run()``, ``Agent.arun()`` and ``Agent.run(stream=True)``, including a
tool-call round trip.
"""

from __future__ import annotations

import json
import os
import threading
import time

import httpx
import openai
import pytest

from tests.fakellm import (
    RecordedRequest,
    ScriptedLLM,
    delay,
    empty_choices,
    error,
    raw,
    raw_body,
    text,
    tool_calls,
)

os.environ.setdefault("AGNO_TELEMETRY", "false")


def _client(server: ScriptedLLM, **kw: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, **kw)  # type: ignore[arg-type]


# -- raw protocol --------------------------------------------------------------------------------
def test_base_url_is_loopback(llm_server: ScriptedLLM) -> None:
    assert llm_server.base_url.startswith("http://127.0.0.1:")
    assert llm_server.base_url.endswith("/v1")


def test_models_endpoint(llm_server: ScriptedLLM) -> None:
    models = _client(llm_server).models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    assert llm_server.requests[0].method == "GET"


def test_text_answer_and_recorded_request(llm_server: ScriptedLLM) -> None:
    llm_server.script(text("hello", prompt_tokens=7, completion_tokens=2))
    before = time.time()
    resp = _client(llm_server).chat.completions.create(
        model="m-x", messages=[{"role": "user", "content": "hi"}], temperature=0
    )
    assert resp.choices[0].message.content == "hello"
    assert resp.choices[0].finish_reason == "stop"
    assert resp.usage is not None and (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (7, 2)
    assert resp.model == "m-x"
    (req,) = llm_server.requests
    assert req.path == "/v1/chat/completions"
    assert req.model == "m-x" and req.body["temperature"] == 0
    assert req.messages == [{"role": "user", "content": "hi"}]
    assert req.headers["authorization"] == "Bearer k"
    assert req.timestamp >= before
    assert req.last_user_text() == "hi"


def test_script_order_then_exhausted(llm_server: ScriptedLLM) -> None:
    llm_server.script(text("one"), text("two"))
    client = _client(llm_server)
    msgs = [{"role": "user", "content": "q"}]
    assert client.chat.completions.create(model="m", messages=msgs).choices[0].message.content == "one"
    assert client.chat.completions.create(model="m", messages=msgs).choices[0].message.content == "two"
    with pytest.raises(openai.InternalServerError, match="script exhausted"):
        client.chat.completions.create(model="m", messages=msgs)
    assert len(llm_server.chat_requests) == 3


def test_handler_answers_by_inspecting_request(llm_server: ScriptedLLM) -> None:
    def answer(req: RecordedRequest) -> object:
        return text(req.last_user_text().upper())

    llm_server.set_handler(answer)  # type: ignore[arg-type]
    client = _client(llm_server)
    for word in ("abc", "xyz"):
        resp = client.chat.completions.create(model="m", messages=[{"role": "user", "content": word}])
        assert resp.choices[0].message.content == word.upper()
    llm_server.clear()
    assert llm_server.requests == [] and llm_server.pending == 0
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])


def test_error_answer(llm_server: ScriptedLLM) -> None:
    llm_server.script(error(400, "response_format not supported"))
    with pytest.raises(openai.BadRequestError) as info:
        _client(llm_server).chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert info.value.status_code == 400
    assert "response_format not supported" in str(info.value)


def test_delay_triggers_client_timeout(llm_server: ScriptedLLM) -> None:
    llm_server.script(delay(2.0, text("late")))
    start = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        _client(llm_server, timeout=0.3).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "q"}]
        )
    assert time.monotonic() - start < 1.5


def test_raw_content_garbage_body_and_empty_choices(llm_server: ScriptedLLM) -> None:
    llm_server.script(raw("}{ not json ```"), raw_body("<html>oops"), empty_choices())
    client = _client(llm_server)
    msgs = [{"role": "user", "content": "q"}]
    assert client.chat.completions.create(model="m", messages=msgs).choices[0].message.content == (
        "}{ not json ```"
    )
    with pytest.raises(ValueError):  # openai raises a bare json.JSONDecodeError here
        client.chat.completions.create(model="m", messages=msgs)
    assert client.chat.completions.create(model="m", messages=msgs).choices == []


def test_tool_calls_non_streaming(llm_server: ScriptedLLM) -> None:
    llm_server.script(tool_calls([("save", {"name": "x", "body": "{braces}"}), ("list", {})]))
    resp = _client(llm_server).chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [c.function.name for c in calls] == ["save", "list"]  # type: ignore[union-attr]
    assert json.loads(calls[0].function.arguments) == {"name": "x", "body": "{braces}"}  # type: ignore[union-attr]
    assert calls[0].id != calls[1].id


def test_streaming_text_tool_calls_and_usage(llm_server: ScriptedLLM) -> None:
    llm_server.script(text("a fairly long streamed answer", 11, 6), tool_calls([("f", {"k": "v" * 25})]))
    client = _client(llm_server)
    msgs = [{"role": "user", "content": "q"}]
    chunks = list(client.chat.completions.create(
        model="m", messages=msgs, stream=True, stream_options={"include_usage": True}
    ))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        "a fairly long streamed answer"
    )
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.prompt_tokens == 11
    stream = client.chat.completions.create(model="m", messages=msgs, stream=True)
    args, names, finish = "", [], None
    for c in stream:
        assert c.usage is None  # no usage chunk without stream_options
        for tc in c.choices[0].delta.tool_calls or []:
            names += [tc.function.name] if tc.function and tc.function.name else []
            args += (tc.function.arguments or "") if tc.function else ""
        finish = c.choices[0].finish_reason or finish
    assert names == ["f"] and json.loads(args) == {"k": "v" * 25} and finish == "tool_calls"


async def test_async_client(llm_server: ScriptedLLM) -> None:
    llm_server.script(text("async hello"))
    client = openai.AsyncOpenAI(base_url=llm_server.base_url, api_key="k", max_retries=0)
    resp = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
    assert resp.choices[0].message.content == "async hello"
    await client.close()


def test_concurrent_requests_are_all_recorded(llm_server: ScriptedLLM) -> None:
    llm_server.set_handler(lambda req: text(req.last_user_text()))
    results: list[str] = []

    def call(i: int) -> None:
        r = httpx.post(f"{llm_server.base_url}/chat/completions",
                       json={"model": "m", "messages": [{"role": "user", "content": str(i)}]})
        results.append(r.json()["choices"][0]["message"]["content"])

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [str(i) for i in range(8)]
    assert len(llm_server.wait_for_requests(8, timeout=1)) == 8


def test_wait_for_requests_times_out(llm_server: ScriptedLLM) -> None:
    with pytest.raises(TimeoutError):
        llm_server.wait_for_requests(1, timeout=0.1)


def test_stop_wakes_delayed_answer() -> None:
    server = ScriptedLLM().start()
    server.script(delay(30, text("never")))
    errors: list[BaseException] = []

    def call() -> None:
        try:
            httpx.post(f"{server.base_url}/chat/completions", json={"model": "m", "messages": []}, timeout=10)
        except httpx.HTTPError as exc:
            errors.append(exc)

    t = threading.Thread(target=call)
    t.start()
    server.wait_for_requests(1)
    start = time.monotonic()
    server.stop()
    t.join(timeout=5)
    assert not t.is_alive() and time.monotonic() - start < 5
    assert errors  # the connection was dropped, not answered


# -- agno ------------------------------------------------------------------------------------------
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def _agent(server: ScriptedLLM, kind: str) -> object:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.models.openai.like import OpenAILike

    cls = OpenAIChat if kind == "chat" else OpenAILike
    model = cls(id="agent-model", base_url=server.base_url, api_key="k", max_retries=0)
    return Agent(model=model, tools=[add], instructions="Be brief.", telemetry=False)


def _check_tool_round_trip(server: ScriptedLLM, kind: str, stream: bool) -> None:
    first, second = server.chat_requests
    system_role = "developer" if kind == "chat" else "system"
    assert first.roles() == [system_role, "user"]
    assert "Be brief." in first.messages[0]["content"]
    assert first.model == "agent-model" and first.stream is stream
    if stream:
        assert first.body["stream_options"] == {"include_usage": True}
    (tool,) = first.tools
    assert tool["type"] == "function" and tool["function"]["name"] == "add"
    assert tool["function"]["description"] == "Add two integers."
    assert tool["function"]["parameters"]["required"] == ["a", "b"]
    assert second.roles() == [system_role, "user", "assistant", "tool"]
    call = second.messages[2]["tool_calls"][0]
    assert call["function"]["name"] == "add"
    assert json.loads(call["function"]["arguments"]) == {"a": 2, "b": 40}
    assert second.messages[3] == {"role": "tool", "content": "42", "tool_call_id": call["id"]}


@pytest.mark.parametrize("kind", ["chat", "like"])
def test_agno_run_tool_round_trip(llm_server: ScriptedLLM, kind: str) -> None:
    llm_server.script(tool_calls([("add", {"a": 2, "b": 40})]), text("It is 42.", 20, 4))
    result = _agent(llm_server, kind).run("what is 2 + 40?")  # type: ignore[attr-defined]
    assert result.content == "It is 42."
    _check_tool_round_trip(llm_server, kind, stream=False)
    assert result.metrics.input_tokens == 30  # usage of both requests (10 + 20)


@pytest.mark.parametrize("kind", ["chat", "like"])
async def test_agno_arun_tool_round_trip(llm_server: ScriptedLLM, kind: str) -> None:
    llm_server.script(tool_calls([("add", {"a": 2, "b": 40})]), text("It is 42."))
    result = await _agent(llm_server, kind).arun("what is 2 + 40?")  # type: ignore[attr-defined]
    assert result.content == "It is 42."
    _check_tool_round_trip(llm_server, kind, stream=False)


@pytest.mark.parametrize("kind", ["chat", "like"])
def test_agno_run_stream_tool_round_trip(llm_server: ScriptedLLM, kind: str) -> None:
    llm_server.script(tool_calls([("add", {"a": 2, "b": 40})]), text("The sum is forty-two."))
    events = list(_agent(llm_server, kind).run("what is 2 + 40?", stream=True))  # type: ignore[attr-defined]
    streamed = "".join(
        e.content for e in events if type(e).__name__ == "RunContentEvent" and isinstance(e.content, str)
    )
    assert streamed == "The sum is forty-two."
    _check_tool_round_trip(llm_server, kind, stream=True)


async def test_agno_arun_stream(llm_server: ScriptedLLM) -> None:
    llm_server.script(text("streamed async"))
    agent = _agent(llm_server, "like")
    parts = [
        e.content async for e in agent.arun("hi", stream=True)  # type: ignore[attr-defined]
        if type(e).__name__ == "RunContentEvent" and isinstance(e.content, str)
    ]
    assert "".join(parts) == "streamed async"
    assert llm_server.chat_requests[0].stream
