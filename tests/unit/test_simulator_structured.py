"""Simulator additions for issue 9, in-process: schema-shaped demo answers and forced tools.

The compatibility suite and the client tests lean on these; if the simulator answered a
structured-output request with prose, those tests would fail for the simulator's sake.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from app.simulator import anthropic_wire, openai_wire
from app.simulator.policy import demo_reply
from app.simulator.structured import schema_instance

PYDANTIC_STYLE = {
    "$defs": {
        "Place": {
            "properties": {"city": {"type": "string"}, "country": {"enum": ["FR", "DE"]}},
            "required": ["city", "country"],
            "type": "object",
            "additionalProperties": False,
        }
    },
    "properties": {
        "place": {"$ref": "#/$defs/Place"},
        "temperature_c": {"type": "number", "minimum": -50},
        "days": {"type": "integer", "exclusiveMinimum": 0},
        "note": {"anyOf": [{"type": "string", "minLength": 10}, {"type": "null"}]},
        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
        "ok": {"type": "boolean"},
        "kind": {"const": "weather"},
    },
    "required": ["place", "temperature_c", "days", "note", "tags", "ok", "kind"],
    "type": "object",
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "schema",
    [
        PYDANTIC_STYLE,
        {"type": "object", "properties": {}},
        {"type": ["string", "null"]},
        {"type": "array", "items": {"$ref": "#/$defs/missing"}},
    ],
)
def test_schema_instance_is_valid(schema: dict[str, Any]) -> None:
    jsonschema.validate(schema_instance(schema), schema)


def _openai(**body: Any) -> Any:
    return openai_wire.parse(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], **body}
    )


def _anthropic(**body: Any) -> Any:
    messages = [{"role": "user", "content": "hi"}]
    return anthropic_wire.parse({"model": "m", "max_tokens": 100, "messages": messages, **body})


def test_openai_response_format_gets_json() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}
    reply = demo_reply(_openai(response_format=fmt))
    jsonschema.validate(json.loads(reply.text or ""), schema)
    plain = demo_reply(_openai(response_format={"type": "json_object"}))
    assert isinstance(json.loads(plain.text or ""), dict)
    assert not demo_reply(_openai(response_format={"type": "text"})).text.startswith("{")  # type: ignore[union-attr]


@pytest.mark.parametrize("key", ["output_format", "output_config"])
def test_anthropic_native_output_format_gets_json(key: str) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    form = {"type": "json_schema", "schema": schema}
    request = _anthropic(**{key: form if key == "output_format" else {"format": form}})
    jsonschema.validate(json.loads(demo_reply(request).text or ""), schema)


def test_forced_tool_is_called_with_schema_arguments() -> None:
    params = {
        "type": "object",
        "properties": {"answer": {"type": "string"}},
        "required": ["answer"],
    }
    tool = {"type": "function", "function": {"name": "A", "parameters": params}}
    choice = {"type": "function", "function": {"name": "A"}}
    reply = demo_reply(_openai(tools=[tool], tool_choice=choice))
    assert [c.name for c in reply.tool_calls] == ["A"]
    jsonschema.validate(json.loads(reply.tool_calls[0].arguments), params)

    anthropic_tool = {"name": "emit", "input_schema": params}
    forced = _anthropic(tools=[anthropic_tool], tool_choice={"type": "tool", "name": "emit"})
    assert [c.name for c in demo_reply(forced).tool_calls] == ["emit"]
    # A forced name that was not offered is not invented.
    assert not demo_reply(_openai(tool_choice=choice)).tool_calls
