"""The Responses API translates once, straight into the agent's `TurnRequest`.

In-process: the same conversation sent through either front door must ask the agent the
same thing (rows, the continuity chain, images, tools, sampling, structured output), and
what a Responses client gets wrong is named as a Responses field, at the source.
"""

from __future__ import annotations

import base64
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from app.agent.refusals import SessionNotFound
from app.agent.turn_request import TurnRequest
from app.agent.turns.manager import TurnManager
from app.api.chat.translate import turn_request
from app.api.chat.wire import ChatCompletionRequest
from app.api.http.end_users import OnBehalf
from app.api.http.errors import ApiError
from app.api.responses.translate import translate
from app.api.responses.wire import ResponseCreateRequest
from app.api.turn_serving import Asked, TurnServing
from app.config import Profile, Settings
from app.db.key_store import KeyStateStore
from app.db.store import Store
from app.main import build_providers
from app.observe.metrics import Metrics
from app.providers.clients import UpstreamClients
from app.security.principal import Principal
from app.tools.registry import ToolRegistry

PNG = "data:image/png;base64," + base64.b64encode(b"\x89PNG not really").decode()
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}
ASKED = Asked(Principal(owner="o" * 16), OnBehalf(end_user="ann", chat="chat-1"))


def _via_responses(body: dict[str, Any]) -> TurnRequest:
    request = ResponseCreateRequest.model_validate(body)
    return translate(request).turn_request(ASKED, session_id="sess_1", profile=Profile())


def _via_chat(body: dict[str, Any]) -> TurnRequest:
    return turn_request(
        ChatCompletionRequest.model_validate(body),
        owner=ASKED.principal.owner,
        admin=False,
        session_id="sess_1",
        profile=Profile(),
        on_behalf=ASKED.on_behalf,
    )


def test_one_conversation_asks_the_same_through_either_door() -> None:
    call = {"name": "get_weather", "arguments": '{"city":"Oslo"}'}
    responses = _via_responses(
        {
            "model": "courier",
            "instructions": "be brief",
            "input": [
                {"role": "developer", "content": "answer in English"},
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "weather? "},
                        {"type": "input_image", "image_url": PNG},
                        {"type": "input_text", "text": "and this"},
                    ],
                },
                {"role": "assistant", "content": "let me look"},
                {"type": "function_call", "call_id": "call_1", **call},
                {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                {"type": "reasoning", "summary": []},
                {"role": "system", "content": "later: kept at its place"},
                {"role": "user", "content": "thanks"},
            ],
            "tools": [{"type": "function", **WEATHER}],
            "tool_choice": {"type": "function", "name": "get_weather"},
            "parallel_tool_calls": False,
            "text": {"format": {"type": "json_schema", "name": "n", "schema": SCHEMA}},
            "reasoning": {"effort": "low"},
            "temperature": 0.5,
            "top_p": 0.9,
            "max_output_tokens": 77,
            "max_cost_usd": 0.25,
            "user": "ann",
        }
    )
    chat = _via_chat(
        {
            "model": "courier",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "developer", "content": "answer in English"},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "weather? "},
                        {"type": "image_url", "image_url": {"url": PNG}},
                        {"type": "text", "text": "and this"},
                    ],
                },
                {
                    "role": "assistant",
                    "content": "let me look",
                    "tool_calls": [{"id": "call_1", "type": "function", "function": call}],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                {"role": "system", "content": "later: kept at its place"},
                {"role": "user", "content": "thanks"},
            ],
            "tools": [{"type": "function", "function": WEATHER}],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": False,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "n", "schema": SCHEMA},
            },
            "reasoning_effort": "low",
            "temperature": 0.5,
            "top_p": 0.9,
            "max_completion_tokens": 77,
            "max_cost_usd": 0.25,
            "user": "ann",
        }
    )
    for f in fields(TurnRequest):
        if f.name not in ("messages", "session_param"):
            assert getattr(responses, f.name) == getattr(chat, f.name), f.name
    assert len(responses.messages) == len(chat.messages) == 5
    for ours, theirs in zip(responses.messages, chat.messages, strict=True):
        assert (ours.role, ours.row, ours.visible, ours.images) == (
            theirs.role,
            theirs.row,
            theirs.visible,
            theirs.images,
        )
    assert responses.images() and responses.instructions == ("be brief", "answer in English")
    # Where a refusal points is each door's own field.
    assert {m.param for m in responses.messages} == {"input"}
    assert responses.session_param == "previous_response_id"
    assert chat.session_param == "session_id"


def test_calls_without_text_open_their_own_assistant_message() -> None:
    req = _via_responses(
        {
            "model": "courier",
            "input": [
                {"role": "user", "content": "two lookups"},
                {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
                {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "a", "output": "1"},
                {"type": "function_call_output", "call_id": "b", "output": "2"},
            ],
        }
    )
    assert [m.role for m in req.messages] == ["user", "assistant", "tool", "tool"]
    assistant = req.messages[1].visible
    assert assistant is not None and assistant.calls == (("a", "f", "{}"), ("b", "g", "{}"))


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"tools": [{"type": "function", "name": "bad name!"}]}, "tools[0].name"),
        ({"tools": [{"type": "function", "description": "no name"}]}, "tools[0].name"),
        ({"tools": [{"type": "function", "name": "f", "parameters": "x"}]}, "tools[0].parameters"),
        ({"tool_choice": {"type": "function"}}, "tool_choice.name"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tool_choice": {"type": "file_search"}}, "tool_choice"),
        ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"text": {"format": {"type": "json_schema", "name": "n"}}}, "text.format"),
        (
            {"text": {"format": {"type": "json_schema", "schema": {"type": "nope"}}}},
            "text.format.schema",
        ),
        (
            {"text": {"format": {"type": "json_schema", "schema": {}, "strict": "x"}}},
            "text.format.strict",
        ),
        ({"reasoning": {"effort": "maximum"}}, "reasoning.effort"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input",
        ),
        ({"input": [{"role": "system", "content": "only instructions"}]}, "input"),
    ],
)
def test_what_a_client_got_wrong_is_named_as_a_responses_field(
    change: dict[str, Any], param: str
) -> None:
    body = {"model": "courier", "input": "hi", **change}
    with pytest.raises(ApiError) as refused:
        translate(ResponseCreateRequest.model_validate(body))
    assert (refused.value.status, refused.value.param) == (400, param)


def test_the_agent_names_the_session_where_the_responses_client_named_it(
    tmp_path: Path,
) -> None:
    """A continued session gone by the time the turn opens (deleted between the response's
    lookup and the open) is the agent's 404, naming the field this door carried it in."""
    settings = Settings(
        api_key="responses-translate-test-key-7a1c3e",
        data_dir=tmp_path,
        upstream_base_url="http://127.0.0.1:9/v1",  # never called: nothing opens
        upstream_api_key="unused",
    )
    store = Store.open(settings.db_path)
    try:
        clients = UpstreamClients(max_connections=1)
        metrics = Metrics()
        serving = TurnServing(
            settings=settings,
            store=store,
            turns=TurnManager(store, metrics),
            tools=ToolRegistry([]),
            providers=build_providers(settings, clients, KeyStateStore(store.engine)),
            metrics=metrics,
        )
        profile = serving.profiles.resolve("courier")
        request = ResponseCreateRequest.model_validate({"model": "courier", "input": "hi"})
        req = translate(request).turn_request(ASKED, session_id="sess_gone", profile=profile)
        with pytest.raises(SessionNotFound) as refused:
            serving.sessions.open(req, turn_id="turn_1", emit=lambda _event: None)
        assert refused.value.param == "previous_response_id"
    finally:
        store.close()
