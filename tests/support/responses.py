"""Read a Responses API SSE stream and check every event against the official spec."""

from __future__ import annotations

import json
from typing import Any

import httpx

from tests.support.spec import validate

EVENT_SCHEMAS = {
    "response.created": "ResponseCreatedEvent",
    "response.in_progress": "ResponseInProgressEvent",
    "response.output_item.added": "ResponseOutputItemAddedEvent",
    "response.output_item.done": "ResponseOutputItemDoneEvent",
    "response.content_part.added": "ResponseContentPartAddedEvent",
    "response.content_part.done": "ResponseContentPartDoneEvent",
    "response.output_text.delta": "ResponseTextDeltaEvent",
    "response.output_text.done": "ResponseTextDoneEvent",
    "response.function_call_arguments.delta": "ResponseFunctionCallArgumentsDeltaEvent",
    "response.function_call_arguments.done": "ResponseFunctionCallArgumentsDoneEvent",
    "response.mcp_list_tools.in_progress": "ResponseMCPListToolsInProgressEvent",
    "response.mcp_list_tools.completed": "ResponseMCPListToolsCompletedEvent",
    "response.mcp_list_tools.failed": "ResponseMCPListToolsFailedEvent",
    "response.mcp_call_arguments.delta": "ResponseMCPCallArgumentsDeltaEvent",
    "response.mcp_call_arguments.done": "ResponseMCPCallArgumentsDoneEvent",
    "response.mcp_call.in_progress": "ResponseMCPCallInProgressEvent",
    "response.mcp_call.completed": "ResponseMCPCallCompletedEvent",
    "response.mcp_call.failed": "ResponseMCPCallFailedEvent",
    "response.completed": "ResponseCompletedEvent",
    "response.failed": "ResponseFailedEvent",
    "response.incomplete": "ResponseIncompleteEvent",
}


def stream_events(
    base_url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """POST a streamed response; every `data:` payload parsed, `event:` names checked.
    Courier's opt-in named events come back tagged with `courier_event`; `: keepalive`
    comments are counted in the response's `extensions["keepalives"]`."""
    events: list[dict[str, Any]] = []
    keepalives = 0
    with httpx.stream(
        "POST",
        f"{base_url}/v1/responses",
        json={**body, "stream": True},
        headers=headers,
        timeout=60,
    ) as resp:
        if resp.status_code != 200:
            resp.read()
            return resp, []
        name: str | None = None
        for line in resp.iter_lines():
            assert not line.startswith("id:"), "an id: field makes the SDK yield empty events"
            keepalives += line == ": keepalive"
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                event = json.loads(line[6:])
                if name is not None and name.startswith("courier."):
                    event = {"courier_event": name, **event}
                else:
                    assert name == event["type"], (name, event["type"])
                events.append(event)
                name = None
    resp.extensions["keepalives"] = keepalives
    return resp, events


def check_events(events: list[dict[str, Any]]) -> None:
    """Every event spec-valid, sequence numbers 0..n-1 in order, one terminal event last."""
    spec_events = [e for e in events if "courier_event" not in e]
    assert [e["sequence_number"] for e in spec_events] == list(range(len(spec_events)))
    for event in spec_events:
        validate(EVENT_SCHEMAS[event["type"]], event)
    kinds = [e["type"] for e in spec_events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] in ("response.completed", "response.failed", "response.incomplete")
    assert (
        sum(k in ("response.completed", "response.failed", "response.incomplete") for k in kinds)
        == 1
    )
