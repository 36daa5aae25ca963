"""The openai-agents SDK with its default model (the Responses API) against Courier."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIResponsesModel,
    RunConfig,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from pydantic import BaseModel

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator


@pytest.fixture(autouse=True)
def _no_tracing() -> Iterator[None]:
    # The SDK exports traces to OpenAI's servers by default; tests reach only 127.0.0.1.
    set_tracing_disabled(True)
    yield


@pytest.fixture(scope="module")
def claude(module_servers: ServerFactory) -> Server:
    return module_servers("anthropic")


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


class Forecast(BaseModel):
    city: str
    sunny: bool


def _agent(server: Server, **options: Any) -> tuple[Agent[Any], RunConfig]:
    client = AsyncOpenAI(
        base_url=f"{server.base_url}/v1",
        api_key=server.api_key,
        max_retries=0,
        _strict_response_validation=True,
    )
    model = OpenAIResponsesModel(model="courier", openai_client=client)
    agent: Agent[Any] = Agent(
        name="courier-agent", instructions="You help.", model=model, **options
    )
    return agent, RunConfig(tracing_disabled=True)


async def test_run_and_continue_by_previous_response_id(server: Server, sim: Simulator) -> None:
    agent, config = _agent(server)
    sim.script(
        [
            {"expect": {"system_contains": "You help."}, "reply": {"text": "Hello from Courier."}},
            {"expect": {"last_user_contains": "again"}, "reply": {"text": "Still here."}},
        ]
    )
    first = await Runner.run(agent, "hi", run_config=config)
    assert first.final_output == "Hello from Courier."
    assert first.last_response_id is not None
    second = await Runner.run(
        agent, "again", run_config=config, previous_response_id=first.last_response_id
    )
    assert second.final_output == "Still here."
    sim.assert_script_done()
    body = json.loads(sim.requests()[-1]["body"])
    said = json.dumps(body["messages"])
    assert "hi" in said and "Hello from Courier." in said and "again" in said
    usage = second.context_wrapper.usage
    assert usage.requests == 1 and usage.input_tokens > 0 and usage.output_tokens > 0


async def test_streamed_run(server: Server, sim: Simulator) -> None:
    agent, config = _agent(server)
    # Paced as a real model streams: chunks that arrive together reach the client together.
    sim.configure(tokens_per_second=50)
    sim.script([{"reply": {"text": "streaming through the agents sdk"}}])
    run = Runner.run_streamed(agent, "stream please", run_config=config)
    deltas: list[str] = []
    async for event in run.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            deltas.append(event.data.delta)
    assert run.final_output == "streaming through the agents sdk"
    assert "".join(deltas) == run.final_output and len(deltas) > 1


async def test_function_tool_round_trip_and_output_type(server: Server, sim: Simulator) -> None:
    """The SDK runs its own tool locally and sends the result back; its output_type is a
    JSON schema in `text.format`, parsed from the final answer."""
    agent, config = _agent(server, tools=[get_weather], output_type=Forecast)
    sim.script(
        [
            {
                "expect": {"has_tools": True},
                "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]},
            },
            {
                "expect": {"last_tool_result_contains": "sunny in Oslo"},
                "reply": {"text": '{"city": "Oslo", "sunny": true}'},
            },
        ]
    )
    result = await Runner.run(agent, "weather in Oslo?", run_config=config)
    assert result.final_output == Forecast(city="Oslo", sunny=True)
    sim.assert_script_done()
    first, second = (json.loads(r["body"]) for r in sim.requests()[-2:])
    assert "get_weather" in [t["function"]["name"] for t in first["tools"]]
    assert first["response_format"]["type"] == "json_schema"
    assert [m["role"] for m in second["messages"]][-2:] == ["assistant", "tool"]


async def test_three_turns_server_tool_then_cache_read(claude: Server, sim: Simulator) -> None:
    """Turn 1 runs a server tool the SDK never sees; turn 3 reads the cached prefix."""
    agent, config = _agent(claude)
    sim.configure(min_cacheable_tokens=64)
    try:
        sim.script(
            [
                {"reply": {"tool_calls": [{"name": "list_files", "arguments": {}}]}},
                {"reply": {"text": "The workspace is empty."}},
                {"expect": {"last_user_contains": "sure"}, "reply": {"text": "Yes, empty."}},
                {"expect": {"last_user_contains": "thanks"}, "reply": {"text": "Welcome."}},
            ]
        )
        first = await Runner.run(agent, "what files are there?", run_config=config)
        second = await Runner.run(
            agent, "sure?", run_config=config, previous_response_id=first.last_response_id
        )
        third = await Runner.run(
            agent, "thanks", run_config=config, previous_response_id=second.last_response_id
        )
    finally:
        sim.configure(min_cacheable_tokens=1024)
    sim.assert_script_done()
    assert first.final_output == "The workspace is empty."
    assert [item.type for item in first.new_items] == ["message_output_item"]
    assert third.final_output == "Welcome."
    (response,) = third.raw_responses
    assert response.usage.input_tokens_details.cached_tokens > 0
    said = json.dumps(json.loads(sim.requests()[-1]["body"])["messages"])
    assert "tool_use" in said and "what files are there?" in said and "sure?" in said
