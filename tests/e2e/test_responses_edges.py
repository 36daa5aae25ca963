"""Responses API edges: keepalives and opt-in tool events while a server tool runs, an
upstream failure as `response.failed`, a cut answer as `response.incomplete`, and a client
that hangs up mid-stream leaving a retrievable cancelled response."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from openai import OpenAI

from tests.support.responses import check_events, stream_events
from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator
from tests.support.spec import validate


@pytest.fixture(scope="module")
def slow(module_servers: ServerFactory) -> Server:
    return module_servers(
        COURIER_KEEPALIVE_S="0.2",
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT",
        COURIER_UPSTREAM_RETRY_ATTEMPTS="1",
    )


WAIT_THEN_TEXT = [
    {"reply": {"tool_calls": [{"name": "wait", "arguments": {"seconds": 1.0}}]}},
    {"reply": {"text": "waited"}},
]


def test_keepalives_and_opt_in_tool_events(slow: Server, sim: Simulator) -> None:
    sim.script(WAIT_THEN_TEXT)
    resp, events = stream_events(
        slow.base_url,
        {"model": "courier", "input": "wait a bit"},
        slow.headers(**{"X-Courier-Events": "tools"}),
    )
    assert resp.extensions["keepalives"] >= 1
    tools = [e for e in events if "courier_event" in e]
    assert [(e["courier_event"], e["type"]) for e in tools] == [
        ("courier.tool", "tool.started"),
        ("courier.tool", "tool.finished"),
    ]
    assert "seconds" not in json.dumps(tools)  # never the arguments
    check_events(events)
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "waited"


def test_plain_sdk_sees_no_courier_events(slow: Server, sim: Simulator) -> None:
    sim.script(WAIT_THEN_TEXT)
    client = OpenAI(
        base_url=f"{slow.base_url}/v1",
        api_key=slow.api_key,
        max_retries=0,
        _strict_response_validation=True,
    )
    events = list(client.responses.create(model="courier", input="wait", stream=True))
    assert all(e.type.startswith("response.") for e in events)
    assert events[-1].type == "response.completed"


def test_upstream_failure_is_response_failed(slow: Server, sim: Simulator) -> None:
    sim.script([{"fault": {"status": 400, "message": "bad"}}])
    resp, events = stream_events(slow.base_url, {"model": "courier", "input": "x"}, slow.headers())
    assert resp.status_code == 200
    check_events(events)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert "upstream" in failed["error"]["message"]
    # Not streamed: the failure is an HTTP error in the OpenAI shape, as on chat.
    sim.script([{"fault": {"status": 400, "message": "bad"}}])
    plain = httpx.post(
        f"{slow.base_url}/v1/responses",
        json={"model": "courier", "input": "x"},
        headers=slow.headers(),
        timeout=30,
    )
    assert plain.status_code >= 400
    validate("ErrorResponse", plain.json())


def test_cut_answer_is_incomplete(slow: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "partial answ", "finish_reason": "length"}}])
    _, events = stream_events(
        slow.base_url,
        {"model": "courier", "input": "long", "max_output_tokens": 3},
        slow.headers(),
    )
    check_events(events)
    final = events[-1]
    assert final["type"] == "response.incomplete"
    assert final["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["response"]["output"][0]["status"] == "incomplete"
    assert (
        json.loads(sim.requests()[-1]["body"])["max_tokens"] == 3
        or "max_completion_tokens" in (sim.requests()[-1]["body"])
    )


def test_hangup_leaves_a_cancelled_response(slow: Server, sim: Simulator) -> None:
    sim.script(WAIT_THEN_TEXT)
    response_id = ""
    with httpx.stream(
        "POST",
        f"{slow.base_url}/v1/responses",
        json={"model": "courier", "input": "wait then hang up", "stream": True},
        headers=slow.headers(**{"X-Courier-Events": "tools"}),
        timeout=30,
    ) as resp:
        for line in resp.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                response_id = response_id or event["response"]["id"]
                if event["type"] == "tool.started":
                    break  # hang up while the server tool runs
    url = f"{slow.base_url}/v1/responses/{response_id}"
    for _ in range(200):
        got = httpx.get(url, headers=slow.headers())
        if got.status_code == 200:
            break
        time.sleep(0.05)
    assert got.status_code == 200, "the cancelled response was never recorded"
    body = got.json()
    validate("Response", body)
    assert body["status"] == "cancelled"
    assert len(sim.requests()) == 1  # the turn stopped: no second upstream call
    assert sim.status()["remaining"] == 1
