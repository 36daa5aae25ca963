"""Client function tools and structured output through the Responses API (strict SDK, spec
checked): a call ends the response with a `function_call` item; the next request's
`function_call_output` continues the same session; `text.format` reaches the upstream."""

from __future__ import annotations

import json
from typing import Any

import httpx
from openai import OpenAI
from pydantic import BaseModel

from tests.support.responses import check_events, stream_events
from tests.support.server import Server
from tests.support.sim import Simulator
from tests.support.spec import validate

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    "strict": True,
}


class Num(BaseModel):
    n: int


CALL = {"name": "get_weather", "arguments": {"city": "Oslo"}, "id": "call_w1"}


def _sdk(server: Server) -> OpenAI:
    return OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key=server.api_key,
        max_retries=0,
        _strict_response_validation=True,
    )


def _upstream(sim: Simulator, index: int = -1) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(sim.requests()[index]["body"])
    return body


def test_function_call_round_trip(server: Server, sim: Simulator) -> None:
    client = _sdk(server)
    sim.script(
        [
            {"expect": {"has_tools": True}, "reply": {"tool_calls": [CALL]}},
            {"expect": {"last_tool_result_contains": "sunny"}, "reply": {"text": "Sunny in Oslo."}},
        ]
    )
    raw = client.responses.with_raw_response.create(
        model="courier",
        input="weather in Oslo?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice="auto",
    )
    validate("Response", raw.http_response.json())
    first = raw.parse()
    assert first.status == "completed"
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.call_id == "call_w1" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Oslo"}
    assert first.tools[0].name == "get_weather"  # type: ignore[union-attr]
    names = [t["function"]["name"] for t in _upstream(sim)["tools"]]
    assert "get_weather" in names and "list_files" in names  # beside the server tools
    second = client.responses.create(
        model="courier",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": "call_w1", "output": "sunny, 21C"}],
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert second.output_text == "Sunny in Oslo."
    assert second.to_dict()["session_id"] == first.to_dict()["session_id"]
    sim.assert_script_done()
    roles = [m["role"] for m in _upstream(sim)["messages"]]
    assert roles[-3:] == ["user", "assistant", "tool"]
    items = client.responses.input_items.list(second.id)
    assert [i.type for i in items.data] == ["function_call_output"]


def test_function_call_stream_events(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "Checking.", "tool_calls": [CALL]}}])
    _, events = stream_events(
        server.base_url,
        {"model": "courier", "input": "weather?", "tools": [WEATHER]},
        server.headers(),
    )
    check_events(events)
    kinds = [e["type"] for e in events]
    assert kinds[-5:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    done = next(e for e in events if e["type"] == "response.function_call_arguments.done")
    assert json.loads(done["arguments"]) == {"city": "Oslo"} and done["output_index"] == 1
    final = events[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["id"] == done["item_id"]
    # The SDK's stream helper accumulates the same thing.
    sim.script([{"reply": {"tool_calls": [CALL]}}])
    with _sdk(server).responses.stream(
        model="courier",
        input="weather?",
        tools=[WEATHER],  # type: ignore[list-item]
    ) as stream:
        for _ in stream:
            pass
        response = stream.get_final_response()
    assert [i.type for i in response.output] == ["function_call"]


def test_an_unknown_call_id_is_a_400(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "hello"}}])
    first = _sdk(server).responses.create(model="courier", input="hi")
    resp = httpx.post(
        f"{server.base_url}/v1/responses",
        json={
            "model": "courier",
            "previous_response_id": first.id,
            "input": [{"type": "function_call_output", "call_id": "call_nope", "output": "x"}],
        },
        headers=server.headers(),
        timeout=30,
    )
    assert resp.status_code == 400
    validate("ErrorResponse", resp.json())
    assert resp.json()["error"]["param"] == "input"
    for bad, param in (
        ({"type": "function_call_output", "output": "x"}, "input[0].call_id"),
        ({"type": "function_call", "call_id": "c", "arguments": "{}"}, "input[0].name"),
        (
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": {}},
            "input[0].arguments",
        ),
    ):
        resp = httpx.post(
            f"{server.base_url}/v1/responses",
            json={"model": "courier", "input": [bad]},
            headers=server.headers(),
            timeout=30,
        )
        assert resp.status_code == 400 and resp.json()["error"]["param"] == param


def test_resent_history_with_calls_works_without_previous_id(
    server: Server, sim: Simulator
) -> None:
    """What the Vercel AI SDK does by default: resend every item, calls and outputs too."""
    sim.script([{"expect": {"last_tool_result_contains": "cloudy"}, "reply": {"text": "Cloudy."}}])
    history = [
        {"role": "user", "content": [{"type": "input_text", "text": "weather in Bergen?"}]},
        {
            "type": "function_call",
            "call_id": "call_b1",
            "name": "get_weather",
            "arguments": '{"city":"Bergen"}',
        },
        {"type": "function_call_output", "call_id": "call_b1", "output": "cloudy"},
    ]
    response = _sdk(server).responses.create(
        model="courier",
        input=history,  # type: ignore[arg-type]
        tools=[WEATHER],  # type: ignore[list-item]
    )
    assert response.output_text == "Cloudy."
    upstream = _upstream(sim)["messages"]
    assert [m["role"] for m in upstream[-3:]] == ["user", "assistant", "tool"]
    assert upstream[-2]["tool_calls"][0]["id"] == "call_b1"


def test_text_format_json_schema(server: Server, sim: Simulator) -> None:
    schema = {
        "type": "object",
        "properties": {"n": {"type": "integer"}},
        "required": ["n"],
        "additionalProperties": False,
    }
    sim.script([{"reply": {"text": '{"n": 7}'}}])
    raw = _sdk(server).responses.with_raw_response.create(
        model="courier",
        input="a number",
        text={"format": {"type": "json_schema", "name": "num", "schema": schema, "strict": True}},
    )
    body = raw.http_response.json()
    validate("Response", body)
    assert json.loads(raw.parse().output_text) == {"n": 7}
    assert body["text"]["format"]["name"] == "num"
    sent = _upstream(sim)["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["schema"] == schema
    # The SDK's parse helper turns it into the model it was given.
    sim.script([{"reply": {"text": '{"n": 8}'}}])
    parsed = _sdk(server).responses.parse(model="courier", input="another", text_format=Num)
    assert parsed.output_parsed == Num(n=8)


def test_tool_choice_and_parallel_calls_reach_the_upstream(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"tool_calls": [CALL]}}])
    _sdk(server).responses.create(
        model="courier",
        input="weather?",
        tools=[WEATHER],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False,
    )
    body = _upstream(sim)
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert body["parallel_tool_calls"] is False
