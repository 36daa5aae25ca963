"""The OpenAPI spec validator in tests/support/spec.py, and the spec facts Courier relies on."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from tests.support.spec import components, convert_schema, errors, validate

CREATED = 1_741_570_283


def chat_completion(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-123",
        "object": "chat.completion",
        "created": CREATED,
        "model": "courier-agent",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello!", "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12},
    }
    body.update(overrides)
    return body


def chunk(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-123",
        "object": "chat.completion.chunk",
        "created": CREATED,
        "model": "courier-agent",
        "choices": [{"index": 0, "delta": {"content": "Hel"}, "finish_reason": None}],
    }
    body.update(overrides)
    return body


def test_minimal_chat_completion_passes() -> None:
    validate("CreateChatCompletionResponse", chat_completion())


def test_chat_completion_with_tool_calls_passes() -> None:
    body = chat_completion()
    body["choices"][0]["finish_reason"] = "tool_calls"
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": None,
        "refusal": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "search", "arguments": '{"q": "x"}'},
            }
        ],
    }
    validate("CreateChatCompletionResponse", body)


def test_bogus_finish_reason_fails() -> None:
    body = chat_completion()
    body["choices"][0]["finish_reason"] = "bogus"
    problems = errors("CreateChatCompletionResponse", body)
    assert len(problems) == 1
    assert problems[0].startswith("$.choices[0].finish_reason: 'bogus' is not one of")
    with pytest.raises(AssertionError, match=r"finish_reason: 'bogus'"):
        validate("CreateChatCompletionResponse", body)


@pytest.mark.parametrize("field", ["id", "object", "created", "model", "choices"])
def test_missing_required_top_level_field_fails(field: str) -> None:
    body = chat_completion()
    del body[field]
    assert errors("CreateChatCompletionResponse", body) == [f"$: '{field}' is a required property"]


@pytest.mark.parametrize("field", ["logprobs", "finish_reason", "index", "message"])
def test_non_streaming_choice_requires_logprobs_even_if_null(field: str) -> None:
    body = chat_completion()
    del body["choices"][0][field]
    assert errors("CreateChatCompletionResponse", body) == [
        f"$.choices[0]: '{field}' is a required property"
    ]


@pytest.mark.parametrize("field", ["role", "content", "refusal"])
def test_message_requires_role_content_refusal(field: str) -> None:
    body = chat_completion()
    del body["choices"][0]["message"][field]
    assert errors("CreateChatCompletionResponse", body) == [
        f"$.choices[0].message: '{field}' is a required property"
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("usage", None),  # optional but not nullable in the non-streaming response
        ("system_fingerprint", None),  # optional string, not nullable
        ("created", 1_741_570_283.5),  # integer seconds, not time.time()
    ],
)
def test_non_nullable_or_mistyped_fields_fail(field: str, value: object) -> None:
    assert errors("CreateChatCompletionResponse", chat_completion(**{field: value}))


def test_every_error_is_listed_with_its_path() -> None:
    body = chat_completion(object="chat.completion.chunk")
    del body["id"]
    body["choices"][0]["finish_reason"] = "bogus"
    with pytest.raises(AssertionError) as info:
        validate("CreateChatCompletionResponse", body)
    message = str(info.value)
    assert message.startswith("3 error(s) validating against OpenAI schema")
    assert "$: 'id' is a required property" in message
    assert "$.object: 'chat.completion.chunk' is not one of ['chat.completion']" in message
    assert "$.choices[0].finish_reason: 'bogus'" in message


def test_non_json_values_are_reported() -> None:
    body = chat_completion(usage={"prompt_tokens": float("nan")})
    assert errors("CreateChatCompletionResponse", body)[0].startswith("$: not serialisable")


def test_stream_chunk_with_null_usage_passes() -> None:
    validate("CreateChatCompletionStreamResponse", chunk(usage=None))


def test_stream_chunk_nullable_finish_reason_and_logprobs() -> None:
    body = chunk()
    body["choices"][0].update(logprobs=None, finish_reason=None)
    validate("CreateChatCompletionStreamResponse", body)
    body["choices"][0]["finish_reason"] = "stop"
    validate("CreateChatCompletionStreamResponse", body)
    del body["choices"][0]["logprobs"]  # optional in chunks, unlike the non-streaming choice
    validate("CreateChatCompletionStreamResponse", body)
    del body["choices"][0]["finish_reason"]  # nullable, but must be present
    assert errors("CreateChatCompletionStreamResponse", body) == [
        "$.choices[0]: 'finish_reason' is a required property"
    ]


def test_stream_tool_call_chunk_passes() -> None:
    body = chunk()
    body["choices"][0]["delta"] = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"index": 0, "id": "call_1", "type": "function", "function": {"name": "search"}},
            {"index": 0, "function": {"arguments": '{"q"'}},
        ],
    }
    validate("CreateChatCompletionStreamResponse", body)


@pytest.mark.parametrize("cost", [0.00042, None])
def test_final_usage_chunk_with_extra_keys_passes(cost: float | None) -> None:
    usage = {
        "prompt_tokens": 1200,
        "completion_tokens": 80,
        "total_tokens": 1280,
        "prompt_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 32},
        "cost": cost,
        "courier": {"steps": 3, "tools": ["search"], "upstream": {"provider": "anthropic"}},
    }
    body = chunk(choices=[], usage=usage, courier_trace_id="t-1")
    validate("CreateChatCompletionStreamResponse", body)
    validate("CompletionUsage", usage)
    validate("CreateChatCompletionResponse", chat_completion(usage=usage))


def test_usage_requires_the_three_counts() -> None:
    assert errors("CompletionUsage", {"prompt_tokens": 1, "total_tokens": 1}) == [
        "$: 'completion_tokens' is a required property"
    ]
    problems = errors(
        "CompletionUsage",
        {
            "prompt_tokens": 1,
            "completion_tokens": 0,
            "total_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": None},
        },
    )
    assert problems == ["$.prompt_tokens_details.cached_tokens: None is not of type 'integer'"]


def test_error_body_with_null_param_and_code_passes() -> None:
    validate(
        "ErrorResponse",
        {
            "error": {
                "message": "Invalid API key",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        },
    )


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"param": ...}, "$.error: 'param' is a required property"),
        ({"code": ...}, "$.error: 'code' is a required property"),
        ({"code": 429}, "$.error.code: 429 is not valid under any of the given schemas"),
    ],
)
def test_error_body_requires_param_and_string_code(change: dict[str, Any], expected: str) -> None:
    error: dict[str, Any] = {"message": "m", "type": "t", "param": None, "code": None}
    for key, value in change.items():
        if value is ...:
            del error[key]
        else:
            error[key] = value
    problems = errors("ErrorResponse", {"error": error})
    assert len(problems) == 1
    assert problems[0].startswith(expected)


def test_model_list_passes() -> None:
    model = {"id": "courier-agent", "object": "model", "created": CREATED, "owned_by": "courier"}
    validate("Model", model)
    validate("ListModelsResponse", {"object": "list", "data": [model]})
    validate("ListModelsResponse", {"object": "list", "data": []})
    broken = dict(model)
    del broken["owned_by"]
    assert errors("ListModelsResponse", {"object": "list", "data": [broken]}) == [
        "$.data[0]: 'owned_by' is a required property"
    ]


def test_unknown_schema_name_suggests_close_matches() -> None:
    with pytest.raises(KeyError, match="CreateChatCompletionResponse"):
        errors("ChatCompletionResponse", {})


def test_convert_schema_rewrites_openapi_30_keywords() -> None:
    assert convert_schema({"type": "string", "enum": ["a"], "nullable": True}) == {
        "type": ["string", "null"],
        "enum": ["a", None],
    }
    ref = {"$ref": "#/components/schemas/X", "description": "d"}
    assert convert_schema({**ref, "nullable": True}) == {"anyOf": [ref, {"type": "null"}]}
    assert convert_schema({"allOf": [{"$ref": "#/x"}, {"nullable": True}]}) == {
        "anyOf": [{"allOf": [{"$ref": "#/x"}]}, {"type": "null"}]
    }
    assert convert_schema({"type": "integer", "nullable": False}) == {"type": "integer"}
    assert convert_schema({"type": "number", "minimum": 0, "exclusiveMinimum": True}) == {
        "type": "number",
        "exclusiveMinimum": 0,
    }
    # A property that happens to be called "nullable" is a schema, not the keyword.
    prop = {"properties": {"nullable": {"type": "boolean"}}}
    assert convert_schema(copy.deepcopy(prop)) == prop


def _closure(schemas: dict[str, Any], roots: list[str]) -> set[str]:
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        pending: list[Any] = [schemas[name]]
        while pending:
            node = pending.pop()
            if isinstance(node, dict):
                ref = node.get("$ref")
                if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                    stack.append(ref.rsplit("/", 1)[1])
                pending.extend(node.values())
            elif isinstance(node, list):
                pending.extend(node)
    return seen


def test_converted_schemas_are_valid_json_schema_without_nullable() -> None:
    schemas = components()["schemas"]
    names = _closure(
        schemas,
        [
            "CreateChatCompletionResponse",
            "CreateChatCompletionStreamResponse",
            "ListModelsResponse",
            "Model",
            "ErrorResponse",
            "CompletionUsage",
        ],
    )
    subset = {name: schemas[name] for name in sorted(names)}
    Draft202012Validator.check_schema({"$defs": subset})

    leftovers: list[Any] = []
    pending: list[Any] = [components()]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            if isinstance(node.get("nullable"), bool):
                leftovers.append(node)
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    assert leftovers == []
