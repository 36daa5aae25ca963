"""The upstream simulator over real HTTP, read by the official `openai` and `anthropic` SDKs.

Uses the session `sim` fixture (a real `python -m app.simulator` subprocess, reset per test).
"""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

from app.simulator.token_count import canonical_json, count_tokens
from tests.support.sim import Simulator, SimulatorError

TOOLS_OPENAI: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"{name} in the workspace",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    for name in ("list_files", "read_file")
]
TOOLS_ANTHROPIC: list[Any] = [
    {
        "name": t["function"]["name"],
        "description": t["function"]["description"],
        "input_schema": t["function"]["parameters"],
    }
    for t in TOOLS_OPENAI
]


def _oai(sim: Simulator, key: str = "sk-test") -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{sim.base_url}/v1",
        api_key=key,
        max_retries=0,
        _strict_response_validation=True,
    )


def _ant(sim: Simulator, key: str = "sk-ant-test") -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=sim.base_url, api_key=key, max_retries=0, _strict_response_validation=True
    )


def _sse_payloads(sim: Simulator, path: str, body: dict[str, Any]) -> list[str]:
    """The raw `data:` payloads of a streamed response, to check exact wire details."""
    headers = {"authorization": "Bearer k", "x-api-key": "k"}
    with httpx.stream("POST", sim.base_url + path, json=body, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    return [line[len("data: ") :] for line in lines]


USER: list[Any] = [{"role": "user", "content": "hello simulator"}]

# ------------------------------------------------------------------------------ OpenAI wire


def test_openai_text_non_stream_and_stream(sim: Simulator) -> None:
    sim.script([{"reply": {"text": "Hello there, friend."}}] * 2)
    client = _oai(sim)
    done = client.chat.completions.create(model="gpt-x", messages=USER)
    assert done.choices[0].message.content == "Hello there, friend."
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None
    assert (done.usage.prompt_tokens, done.usage.completion_tokens) == (4, 5)
    chunks = list(
        client.chat.completions.create(
            model="gpt-x",
            messages=USER,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert texts == ["Hello ", "there, ", "friend."]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 9
    sim.assert_script_done()


def test_openai_stream_without_include_usage_has_no_usage_chunk(sim: Simulator) -> None:
    sim.script([{"reply": {"text": "a b"}}])
    body = {"model": "m", "messages": USER, "stream": True}
    payloads = _sse_payloads(sim, "/v1/chat/completions", body)
    assert payloads[-1] == "[DONE]"
    chunks = [json.loads(p) for p in payloads[:-1]]
    assert all(chunk["choices"] and "usage" not in chunk for chunk in chunks)


def test_openai_tool_calls_stream_shape(sim: Simulator) -> None:
    call = {"name": "read_file", "arguments": {"path": "notes/a-long-file-name.md"}}
    sim.script(
        [{"reply": {"text": "Let me look.", "tool_calls": [call, {"name": "list_files"}]}}] * 2
    )
    client = _oai(sim)
    with client.chat.completions.stream(
        model="m",
        messages=USER,
        tools=TOOLS_OPENAI,
    ) as stream:
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert final.choices[0].finish_reason == "tool_calls"
    assert message.content == "Let me look."
    calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
    assert calls == [
        ("call_1_0", "read_file", '{"path":"notes/a-long-file-name.md"}'),
        ("call_1_1", "list_files", "{}"),
    ]
    # Raw wire: id/type/name only on each call's first fragment, then argument fragments.
    body = {"model": "m", "messages": USER, "tools": TOOLS_OPENAI, "stream": True}
    fragments = [
        tc
        for p in _sse_payloads(sim, "/v1/chat/completions", body)[:-1]
        for tc in json.loads(p)["choices"][0]["delta"].get("tool_calls") or []
    ]
    firsts = [f for f in fragments if "id" in f]
    assert [f["id"] for f in firsts] == ["call_2_0", "call_2_1"]
    assert all("name" not in f.get("function", {}) for f in fragments if "id" not in f)
    assert len([f for f in fragments if f["index"] == 0]) > 2


def test_openai_max_tokens_and_stop(sim: Simulator) -> None:
    text = "one two three four five six seven eight"
    sim.script([{"reply": {"text": text}}, {"reply": {"text": text}}])
    client = _oai(sim)
    cut = client.chat.completions.create(model="m", messages=USER, max_completion_tokens=3)
    assert cut.choices[0].finish_reason == "length"
    assert cut.choices[0].message.content == text[:12]
    assert cut.usage is not None and cut.usage.completion_tokens == 3
    stopped = client.chat.completions.create(model="m", messages=USER, stop=["four", "six"])
    assert stopped.choices[0].message.content == "one two three "
    assert stopped.choices[0].finish_reason == "stop"


def test_openai_reasoning_tokens(sim: Simulator) -> None:
    sim.script([{"reply": {"reasoning": "think think", "text": "ok"}}])
    done = _oai(sim).chat.completions.create(model="m", messages=USER)
    assert done.usage is not None and done.usage.completion_tokens_details is not None
    assert done.usage.completion_tokens_details.reasoning_tokens == 3
    assert done.usage.completion_tokens == 4


# ------------------------------------------------------------------------------ Anthropic wire


def test_anthropic_text_thinking_and_tools(sim: Simulator) -> None:
    reply = {
        "reasoning": "The user wants a file.",
        "text": "Reading it now.",
        "tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}],
    }
    sim.script([{"reply": reply}, {"reply": reply}])
    client = _ant(sim)
    kwargs: dict[str, Any] = {
        "model": "claude-x",
        "max_tokens": 1000,
        "messages": USER,
        "tools": TOOLS_ANTHROPIC,
    }
    whole = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as stream:
        types = [event.type for event in stream]
        streamed = stream.get_final_message()
    for message, ids in ((whole, "toolu_1_0"), (streamed, "toolu_2_0")):
        assert message.stop_reason == "tool_use"
        assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
        thinking, text, tool = message.content
        assert thinking.type == "thinking" and thinking.thinking == "The user wants a file."
        assert text.type == "text" and text.text == "Reading it now."
        assert tool.type == "tool_use" and (tool.id, tool.name) == (ids, "read_file")
        assert tool.input == {"path": "a.txt"}
        assert message.usage.output_tokens == 6 + 4 + 4
    assert streamed.content[0].signature == whole.content[0].signature
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert "message_delta" in types and types.count("content_block_stop") == 3
    sim.assert_script_done()


def test_anthropic_raw_event_sequence(sim: Simulator) -> None:
    sim.script([{"reply": {"text": "hi", "tool_calls": [{"name": "list_files"}]}}])
    body = {"model": "c", "max_tokens": 50, "messages": USER, "stream": True}
    events = [json.loads(p) for p in _sse_payloads(sim, "/v1/messages", body)]
    assert [e["type"] for e in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[6]["delta"] == {"type": "input_json_delta", "partial_json": "{}"}
    assert events[8]["delta"]["stop_reason"] == "tool_use"


def test_anthropic_max_tokens(sim: Simulator) -> None:
    sim.script([{"reply": {"text": "one two three four five"}}])
    message = _ant(sim).messages.create(model="c", max_tokens=2, messages=USER)
    assert message.stop_reason == "max_tokens"
    assert message.content[0].text == "one two "
    assert message.usage.output_tokens == 2


# ------------------------------------------------------------------------------ scripts


def test_exhausted_script_is_a_loud_failure(sim: Simulator) -> None:
    sim.script([])
    with pytest.raises(openai.InternalServerError) as caught:
        _oai(sim).chat.completions.create(model="m", messages=USER)
    assert "simulator: unexpected request: script exhausted" in str(caught.value)
    assert caught.value.response.headers["x-should-retry"] == "false"
    assert sim.status()["failures"][0].startswith("simulator: unexpected request:")
    with pytest.raises(SimulatorError, match="script exhausted"):
        sim.assert_script_done()


def test_expectations_checked(sim: Simulator) -> None:
    ok = {
        "last_user_contains": "hello",
        "has_tools": True,
        "system_contains": "be brief",
        "max_tokens": 300,
        "temperature": 0.5,
    }
    sim.script(
        [
            {"expect": ok, "reply": {"text": "fine"}},
            {"expect": {"last_user_contains": "goodbye"}, "reply": {"text": "never"}},
            {"reply": {"text": "unused"}},
        ]
    )
    client = _ant(sim)
    kwargs: dict[str, Any] = {"model": "c", "max_tokens": 300, "messages": USER}
    client.messages.create(
        **kwargs, system="Please be brief.", tools=TOOLS_ANTHROPIC, extra_body={"temperature": 0.5}
    )
    with pytest.raises(anthropic.InternalServerError, match="step 2"):
        client.messages.create(**kwargs)
    status = sim.status()
    assert status["remaining"] == 1
    assert "last user text does not contain 'goodbye'" in status["failures"][0]
    with pytest.raises(SimulatorError, match="1 scripted step"):
        sim.assert_script_done()


def test_tool_result_expectation_and_history(sim: Simulator) -> None:
    sim.script([{"expect": {"last_tool_result_contains": "b.md"}, "reply": {"text": "seen"}}])
    messages: list[Any] = [
        {"role": "user", "content": "list"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "list_files", "arguments": "{}"},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt\nb.md"},
    ]
    _oai(sim).chat.completions.create(model="m", messages=messages)
    sim.assert_script_done()


def test_bad_script_is_rejected_on_load(sim: Simulator) -> None:
    with pytest.raises(SimulatorError, match=r"step 1\.expect: unknown keys"):
        sim.script([{"expect": {"last_user_contain": "typo"}}])
    with pytest.raises(SimulatorError, match="finish_reason"):
        sim.script([{"reply": {"finish_reason": "done"}}])


def test_requests_are_recorded_raw(sim: Simulator) -> None:
    sim.script([{"reply": {"text": "x"}}])
    raw = '{"model": "m",   "messages": [{"role": "user", "content": "héllo"}]}'
    response = httpx.post(
        sim.base_url + "/v1/chat/completions",
        content=raw.encode(),
        headers={"authorization": "Bearer abc", "content-type": "application/json"},
    )
    assert response.status_code == 200
    (recorded,) = sim.requests()
    assert recorded["path"] == "/v1/chat/completions"
    assert recorded["body"] == raw
    assert recorded["headers"]["authorization"] == "Bearer abc"
    assert recorded["time"] == pytest.approx(time.time(), abs=5)


# ------------------------------------------------------------------------------ faults


def test_rate_limit_fault(sim: Simulator) -> None:
    sim.script([{"fault": {"status": 429, "retry_after": 1}}] * 2)
    with pytest.raises(openai.RateLimitError) as oai_error:
        _oai(sim).chat.completions.create(model="m", messages=USER)
    assert oai_error.value.response.headers["retry-after"] == "1"
    assert oai_error.value.code == "rate_limit_exceeded"
    with pytest.raises(anthropic.RateLimitError) as ant_error:
        _ant(sim).messages.create(model="c", max_tokens=5, messages=USER)
    assert ant_error.value.body["error"]["type"] == "rate_limit_error"
    sim.assert_script_done()


def test_overloaded_and_server_error_faults(sim: Simulator) -> None:
    sim.script([{"fault": {"status": 529}}, {"fault": {"status": 529}}, {"fault": {"status": 500}}])
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        _ant(sim).messages.create(model="c", max_tokens=5, messages=USER)
    assert overloaded.value.body["error"]["type"] == "overloaded_error"
    with pytest.raises(openai.InternalServerError) as oai_overloaded:
        _oai(sim).chat.completions.create(model="m", messages=USER)
    assert oai_overloaded.value.status_code == 529
    with pytest.raises(anthropic.InternalServerError) as server:
        _ant(sim).messages.create(model="c", max_tokens=5, messages=USER)
    assert server.value.status_code == 500
    sim.assert_script_done()


def test_drop_after_events(sim: Simulator) -> None:
    sim.script([{"reply": {"text": "a b c d e f"}, "fault": {"drop_after_events": 3}}] * 3)
    seen: list[str] = []
    # The anthropic SDK lets the transport's RemoteProtocolError through unwrapped.
    with pytest.raises(Exception, match="incomplete chunked read"):
        stream = _ant(sim).messages.create(model="c", max_tokens=50, messages=USER, stream=True)
        seen.extend(event.type for event in stream)
    assert seen == ["message_start", "content_block_start"]  # ping counted, not yielded
    chunks: list[Any] = []
    with pytest.raises(openai.APIConnectionError):
        chunks.extend(_oai(sim).chat.completions.create(model="m", messages=USER, stream=True))
    assert len(chunks) == 3
    with pytest.raises(openai.APIConnectionError) as short_body:
        _oai(sim).chat.completions.create(model="m", messages=USER)
    assert "expected" in str(short_body.value.__cause__)  # a short Content-Length body
    sim.assert_script_done()


def test_stall_after_events_hangs_the_stream_until_the_read_timeout(sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"text": "a b c d"}, "fault": {"stall_after_events": 2}},
            {"reply": {"text": "a b"}, "fault": {"stall_after_events": 1, "stall_ms": 50}},
        ]
    )
    client = openai.OpenAI(
        base_url=f"{sim.base_url}/v1", api_key="sk-test", max_retries=0, timeout=0.5
    )
    chunks: list[Any] = []
    with pytest.raises(openai.APIConnectionError):  # APITimeoutError: the read timed out
        chunks.extend(client.chat.completions.create(model="m", messages=USER, stream=True))
    assert len(chunks) == 2
    deadline = time.monotonic() + 10  # the simulator sees the hang-up a moment later
    while sim.stats()["disconnects"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sim.stats() == {"model_requests": 1, "disconnects": 1}
    seen = httpx.get(f"{sim.base_url}/_sim/disconnects").json()
    assert seen["count"] == 1 and seen["last_at"] is not None
    # A short stall only delays: the whole answer still arrives.
    stream = client.chat.completions.create(model="m", messages=USER, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "a b"
    sim.assert_script_done()


def test_error_mid_stream(sim: Simulator) -> None:
    fault = {"status": 529, "after_events": 2}
    sim.script([{"reply": {"text": "a b"}, "fault": fault}] * 2)
    # The status line already said 200, so the SDK raises a plain status error with the body.
    with pytest.raises(anthropic.APIStatusError) as caught:
        list(_ant(sim).messages.create(model="c", max_tokens=50, messages=USER, stream=True))
    assert caught.value.body["error"]["type"] == "overloaded_error"
    with pytest.raises(openai.APIError, match="Overloaded"):
        list(_oai(sim).chat.completions.create(model="m", messages=USER, stream=True))


def test_delay_fault_and_ttft(sim: Simulator) -> None:
    sim.script(
        [{"fault": {"delay_ms": 250}, "reply": {"text": "late"}}, {"reply": {"text": "x y"}}]
    )
    client = _oai(sim)
    started = time.monotonic()
    client.chat.completions.create(model="m", messages=USER)
    assert time.monotonic() - started >= 0.25
    sim.configure(ttft_ms=200, tokens_per_second=20)
    started = time.monotonic()
    stream = client.chat.completions.create(model="m", messages=USER, stream=True)
    first = next(c for c in stream if c.choices and c.choices[0].delta.content)
    assert first.choices[0].delta.content == "x "
    assert time.monotonic() - started >= 0.2 + 1 / 20
    list(stream)


# ------------------------------------------------------------------------------ caching


def _anthropic_17111(marked: bool) -> dict[str, Any]:
    tool = TOOLS_ANTHROPIC[0]
    system = "You are Courier. " * 50
    prefix = count_tokens(canonical_json(tool)) + count_tokens(system)
    history = "h" * (17_102 - prefix) * 4
    block: dict[str, Any] = {"type": "text", "text": history}
    if marked:
        block["cache_control"] = {"type": "ephemeral"}
    tail = {"type": "text", "text": "What changed since yesterday?????"}  # 9 tokens
    return {
        "model": "claude-x",
        "max_tokens": 20,
        "tools": [tool],
        "system": system,
        "messages": [{"role": "user", "content": [block, tail]}],
    }


def _usage(message: anthropic.types.Message) -> tuple[int, int, int]:
    u = message.usage
    return (u.input_tokens, u.cache_creation_input_tokens or 0, u.cache_read_input_tokens or 0)


def test_anthropic_cache_sequence_17111(sim: Simulator) -> None:
    client = _ant(sim)
    counted = {k: v for k, v in _anthropic_17111(False).items() if k != "max_tokens"}
    assert client.messages.count_tokens(**counted).input_tokens == 17_111
    sim.reset()
    first = client.messages.create(**_anthropic_17111(marked=False))
    second = client.messages.create(**_anthropic_17111(marked=True))
    with client.messages.stream(**_anthropic_17111(marked=True)) as stream:
        third = stream.get_final_message()
    assert _usage(first) == (17_111, 0, 0)
    assert _usage(second) == (9, 17_102, 0)
    assert _usage(third) == (9, 0, 17_102)
    assert second.usage.cache_creation is not None
    assert second.usage.cache_creation.ephemeral_5m_input_tokens == 17_102


def test_anthropic_cache_ttl_and_refresh(sim: Simulator) -> None:
    client = _ant(sim)
    body = _anthropic_17111(marked=True)
    assert _usage(client.messages.create(**body))[1] == 17_102
    sim.advance_clock(200)
    assert _usage(client.messages.create(**body))[2] == 17_102  # read refreshes the TTL
    sim.advance_clock(200)
    assert _usage(client.messages.create(**body))[2] == 17_102
    sim.advance_clock(301)
    assert _usage(client.messages.create(**body)) == (9, 17_102, 0)
    sim.advance_clock(301)
    block = body["messages"][0]["content"][0]
    block["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
    written = client.messages.create(**body)
    assert written.usage.cache_creation is not None
    assert written.usage.cache_creation.ephemeral_1h_input_tokens == 17_102
    sim.advance_clock(3000)
    assert _usage(client.messages.create(**body))[2] == 17_102


def test_anthropic_small_prefix_and_breakpoint_limit(sim: Simulator) -> None:
    client = _ant(sim)
    marked = {"type": "text", "text": "short", "cache_control": {"type": "ephemeral"}}
    body: dict[str, Any] = {"model": "c", "max_tokens": 5}
    small = client.messages.create(**body, messages=[{"role": "user", "content": [marked]}])
    assert _usage(small) == (2, 0, 0)
    with pytest.raises(anthropic.BadRequestError, match="A maximum of 4 blocks"):
        client.messages.create(**body, messages=[{"role": "user", "content": [marked] * 5}])


def test_openai_automatic_prefix_caching(sim: Simulator) -> None:
    client = _oai(sim)
    messages: list[Any] = [
        {"role": "system", "content": "s" * 1500 * 4},
        {"role": "user", "content": "question one"},
    ]

    def cached(msgs: list[Any], **extra: Any) -> tuple[int, int]:
        done = client.chat.completions.create(model="gpt-x", messages=msgs, **extra)
        assert done.usage is not None and done.usage.prompt_tokens_details is not None
        return done.usage.prompt_tokens, done.usage.prompt_tokens_details.cached_tokens or 0

    assert cached(messages) == (1503, 0)
    assert cached(messages) == (1503, 1408)  # 1024 + 3 * 128
    longer = [
        *messages,
        {"role": "assistant", "content": "a" * 400},
        {"role": "user", "content": "q2"},
    ]
    assert cached(longer) == (1604, 1408)
    assert cached(longer) == (1604, 1536)
    assert cached(messages, extra_body={"prompt_cache_key": "other-session"}) == (1503, 0)
    sim.advance_clock(301)
    assert cached(messages) == (1503, 0)
    short = [{"role": "user", "content": "x" * 4000}]
    assert cached(short) == (1000, 0) and cached(short) == (1000, 0)


# ------------------------------------------------------------------------------ limits, auth


def test_context_overflow_both_wires(sim: Simulator) -> None:
    sim.configure(context_window=100)
    big = [{"role": "user", "content": "y" * 404}]
    with pytest.raises(openai.BadRequestError) as oai_error:
        _oai(sim).chat.completions.create(model="m", messages=big)
    assert oai_error.value.code == "context_length_exceeded"
    assert "maximum context length is 100 tokens" in oai_error.value.message
    assert "resulted in 101 tokens" in oai_error.value.message
    with pytest.raises(anthropic.BadRequestError) as ant_error:
        _ant(sim).messages.create(model="c", max_tokens=5, messages=big)
    error = ant_error.value.body["error"]
    assert error == {
        "type": "invalid_request_error",
        "message": "prompt is too long: 101 tokens > 100 maximum",
    }


def test_auth(sim: Simulator) -> None:
    sim.configure(required_key="right-key")
    with pytest.raises(openai.AuthenticationError):
        _oai(sim, key="wrong").chat.completions.create(model="m", messages=USER)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        _ant(sim, key="wrong").messages.create(model="c", max_tokens=5, messages=USER)
    assert caught.value.body["error"]["type"] == "authentication_error"
    assert _ant(sim, key="right-key").messages.create(model="c", max_tokens=50, messages=USER)
    sim.reset()  # restores "any non-empty key", but a missing key is still refused
    response = httpx.post(sim.base_url + "/v1/messages", json={})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


def test_models_list_both_shapes(sim: Simulator) -> None:
    assert [m.id for m in _oai(sim).models.list()] == ["sim-model"]
    assert [m.id for m in _ant(sim).models.list()] == ["sim-model"]


# ------------------------------------------------------------------------------ demo policy


def test_demo_policy_tool_round_trip_anthropic(sim: Simulator) -> None:
    client = _ant(sim)
    kwargs: dict[str, Any] = {"model": "c", "max_tokens": 500, "tools": TOOLS_ANTHROPIC}
    ask = {"role": "user", "content": "What files are in the workspace? Also read notes.md."}
    first = client.messages.create(**kwargs, messages=[ask])
    calls = [(b.name, b.input) for b in first.content if b.type == "tool_use"]
    assert calls == [("list_files", {"path": "."}), ("read_file", {"path": "notes.md"})]
    results = [
        {"type": "tool_result", "tool_use_id": first.content[0].id, "content": "a.txt\nnotes.md"},
        {"type": "tool_result", "tool_use_id": first.content[1].id, "content": "Remember milk."},
    ]
    history = [
        ask,
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": results},
    ]
    with client.messages.stream(**kwargs, messages=history) as stream:
        deltas = list(stream.text_stream)
    text = "".join(deltas)
    assert len(deltas) > 3
    assert "The workspace contains: a.txt, notes.md." in text
    assert 'The file notes.md begins: "Remember milk."' in text


def test_demo_policy_echo_openai(sim: Simulator) -> None:
    done = _oai(sim).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Why is the sky blue?"}],
        tools=TOOLS_OPENAI,
    )
    assert done.choices[0].finish_reason == "stop"
    assert 'You asked: "Why is the sky blue?"' in (done.choices[0].message.content or "")
