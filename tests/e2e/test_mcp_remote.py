"""The Responses API's remote `mcp` tool, end to end: the real Courier server over HTTP,
the simulator scripting the model, the SDK-built toolbox over streamable HTTP on
127.0.0.1 as the remote server, and the official `openai` SDK parsing what comes back
into its typed models."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import BadRequestError, OpenAI
from openai.types.responses import (
    ResponseMcpCallArgumentsDeltaEvent,
    ResponseMcpCallArgumentsDoneEvent,
    ResponseMcpCallCompletedEvent,
    ResponseMcpCallInProgressEvent,
    ResponseMcpListToolsCompletedEvent,
    ResponseMcpListToolsInProgressEvent,
    ResponseOutputMessage,
)
from openai.types.responses.response_output_item import (
    McpApprovalRequest,
    McpCall,
    McpListTools,
)

from tests.support.approvals import call, tool_results
from tests.support.mcp import http_toolbox, toolbox_counts
from tests.support.responses import check_events, stream_events
from tests.support.server import Server, ServerFactory, free_port
from tests.support.sim import Simulator
from tests.support.spec import validate
from tests.support.waiting import wait_for

HEADER_SECRET = "remote-header-token-0123456789abcdef"
OPEN = "<<<UNTRUSTED MCP RESULT from "


@dataclass
class Remote:
    server: Server
    url: str
    """The toolbox's /mcp URL, allow-listed."""
    dead_url: str
    """An allow-listed loopback port where nothing listens."""
    state: Path

    def client(self) -> OpenAI:
        return OpenAI(base_url=f"{self.server.base_url}/v1", api_key=self.server.api_key)

    def tool(self, **extra: Any) -> dict[str, Any]:
        return {
            "type": "mcp",
            "server_label": "tb",
            "server_url": self.url,
            "headers": {"X-Api-Key": HEADER_SECRET},
            **extra,
        }

    def counts(self) -> dict[str, int]:
        return toolbox_counts(self.state)


@pytest.fixture(scope="module")
def remote(
    module_servers: ServerFactory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Remote]:
    state = tmp_path_factory.mktemp("remote-mcp")
    dead = free_port()
    with http_toolbox(state) as url:
        host = url.split("/")[2]
        server = module_servers(COURIER_MCP_URL_ALLOW=f"{host},127.0.0.1:{dead}")
        yield Remote(server, url, f"http://127.0.0.1:{dead}/mcp", state)
        server.stop()


def offered(sim: Simulator, index: int = -1) -> set[str]:
    body = json.loads(sim.requests()[index]["body"])
    return {tool["function"]["name"] for tool in body.get("tools", [])}


# ------------------------------------------------------------------ hostile cases first


def test_a_loopback_url_not_allowed_is_refused_naming_the_field(
    remote: Remote, sim: Simulator
) -> None:
    before = len(sim.requests())
    for url in (
        f"http://127.0.0.1:{free_port()}/mcp",  # loopback, a port the allow list lacks
        f"http://localhost:{remote.url.split(':')[2]}",  # the name is not the literal
        "http://10.1.2.3/mcp",
        "http://169.254.169.254/latest",
    ):
        with pytest.raises(BadRequestError) as refused:
            remote.client().responses.create(
                model="courier",
                input="hi",
                tools=[
                    {"type": "function", "name": "f", "parameters": {}},
                    remote.tool(server_url=url),
                ],  # type: ignore[list-item]
            )
        error = refused.value.body
        assert isinstance(error, dict)
        assert error["code"] == "mcp_server_refused", error
        assert error["param"] == "tools[1].server_url"
        assert "COURIER_MCP_URL_ALLOW" in error["message"]
    assert len(sim.requests()) == before  # nothing reached the model


def test_bad_declarations_are_400s_naming_the_field(remote: Remote) -> None:
    cases = [
        ({"server_label": "two words"}, "tools[0].server_label"),
        ({"server_url": "ftp://example.com/"}, "tools[0].server_url"),
        ({"server_url": "http://user:pw@example.com/"}, "tools[0].server_url"),
        ({"connector_id": "connector_gmail"}, "tools[0].connector_id"),
        ({"defer_loading": True}, "tools[0].defer_loading"),
        ({"headers": {"Bad Name": "x"}}, "tools[0].headers"),
        ({"require_approval": "sometimes"}, "tools[0].require_approval"),
        ({"allowed_tools": {"names": ["echo"]}}, "tools[0].allowed_tools"),
    ]
    for change, param in cases:
        with pytest.raises(BadRequestError) as refused:
            remote.client().responses.create(
                model="courier",
                input="hi",
                tools=[remote.tool(**change)],  # type: ignore[list-item]
            )
        error = refused.value.body
        assert isinstance(error, dict) and error["param"] == param, (change, error)
        assert HEADER_SECRET not in json.dumps(error)


def test_a_server_that_fails_to_list_gives_an_error_item_and_the_turn_runs(
    remote: Remote, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": "answered without it"}}])
    response = remote.client().responses.create(
        model="courier", input="hi", tools=[remote.tool(server_url=remote.dead_url)]
    )
    listing, message = response.output
    assert isinstance(listing, McpListTools) and listing.server_label == "tb"
    assert listing.error and "could not list tools" in listing.error
    assert listing.tools == []
    assert isinstance(message, ResponseOutputMessage)
    assert response.output_text == "answered without it"
    assert not any(name.startswith("mcp__tb__") for name in offered(sim))


# ------------------------------------------------------------------ listing and calling


def test_list_and_call_non_streamed_with_the_sdk(remote: Remote, sim: Simulator) -> None:
    before = remote.counts().get("echo", 0)
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__tb__echo", text="over the remote tool")]}},
            {"reply": {"text": "the server said so"}},
        ]
    )
    response = remote.client().responses.create(
        model="courier",
        input="use the remote tool",
        tools=[remote.tool(require_approval="never")],
    )
    listing, mcp_call, message = response.output
    assert isinstance(listing, McpListTools) and listing.error is None
    names = {t.name for t in listing.tools}
    assert {"echo", "write_note", "count"} <= names
    echo = next(t for t in listing.tools if t.name == "echo")
    assert echo.annotations == {"readOnlyHint": True}
    assert isinstance(mcp_call, McpCall)
    assert (mcp_call.server_label, mcp_call.name, mcp_call.status) == ("tb", "echo", "completed")
    assert json.loads(mcp_call.arguments) == {"text": "over the remote tool"}
    assert mcp_call.output == "toolbox echo: over the remote tool"  # unfenced for the client
    assert mcp_call.error is None and mcp_call.approval_request_id is None
    assert isinstance(message, ResponseOutputMessage)
    assert response.output_text == "the server said so"
    assert remote.counts()["echo"] == before + 1
    # The model saw the tool, and the result came back to it fenced.
    assert "mcp__tb__echo" in offered(sim, -2)
    (result,) = tool_results(sim)
    assert result.startswith(OPEN + "tb/echo>>>") and "over the remote tool" in result
    # The stored body is the one returned; the header value is nowhere in it.
    stored = httpx.get(
        f"{remote.server.base_url}/v1/responses/{response.id}",
        headers=remote.server.headers(),
        timeout=30,
    )
    body = stored.json()
    validate("Response", body)
    assert [item["id"] for item in body["output"]] == [i.id for i in response.output]
    (echoed,) = body["tools"]
    assert echoed["type"] == "mcp" and echoed["headers"] is None
    assert HEADER_SECRET not in json.dumps(body)
    assert HEADER_SECRET not in remote.server.log()


def test_list_and_call_streamed_events_in_order(remote: Remote, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__tb__echo", text="streamed through")]}},
            {"reply": {"text": "streamed answer"}},
        ]
    )
    stream = remote.client().responses.create(
        model="courier",
        input="stream it",
        tools=[remote.tool(require_approval="never")],
        stream=True,
    )
    events = list(stream)
    kinds = [e.type for e in events]
    mcp_kinds = [k for k in kinds if "mcp" in k]
    assert mcp_kinds == [
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.in_progress",
        "response.mcp_call.completed",
    ]
    typed = {type(e) for e in events}
    assert {
        ResponseMcpListToolsInProgressEvent,
        ResponseMcpListToolsCompletedEvent,
        ResponseMcpCallArgumentsDeltaEvent,
        ResponseMcpCallArgumentsDoneEvent,
        ResponseMcpCallInProgressEvent,
        ResponseMcpCallCompletedEvent,
    } <= typed
    added = [e.item for e in events if e.type == "response.output_item.added"]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [type(i) for i in added] == [McpListTools, McpCall, ResponseOutputMessage]
    assert [type(i) for i in done] == [McpListTools, McpCall, ResponseOutputMessage]
    final = events[-1]
    assert final.type == "response.completed"
    # The stream's items are the stored body's, index for index.
    assert [i.model_dump() for i in done] == [i.model_dump() for i in final.response.output]
    indexes = [e.output_index for e in events if e.type == "response.output_item.done"]
    assert indexes == [0, 1, 2]


def test_streamed_frames_are_spec_valid(remote: Remote, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__tb__echo", text="spec check")]}},
            {"reply": {"text": "ok"}},
        ]
    )
    body = {
        "model": "courier",
        "input": "check",
        "tools": [remote.tool(require_approval="never")],
    }
    headers = remote.server.headers(**{"X-Courier-Events": "tools"})
    resp, events = stream_events(remote.server.base_url, body, headers)
    assert resp.status_code == 200
    check_events(events)
    tool_events = [e for e in events if e.get("courier_event") == "courier.tool"]
    assert [(e["type"], e["source"]) for e in tool_events] == [
        ("tool.started", "mcp-remote:tb"),
        ("tool.finished", "mcp-remote:tb"),
    ]


def test_a_continued_chain_reuses_the_listing(remote: Remote, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "first"}}, {"reply": {"text": "second"}}])
    client = remote.client()
    tools = [remote.tool(require_approval="never")]
    first = client.responses.create(model="courier", input="one", tools=tools)  # type: ignore[arg-type]
    assert isinstance(first.output[0], McpListTools)
    second = client.responses.create(
        model="courier",
        input="two",
        tools=tools,  # type: ignore[arg-type]
        previous_response_id=first.id,
    )
    assert [type(i) for i in second.output] == [ResponseOutputMessage]
    assert "mcp__tb__echo" in offered(sim)  # the tools are still offered
    # The same tools declared again are the same tools: no cache break.
    session = (second.model_extra or {})["session_id"]
    usage = httpx.get(
        f"{remote.server.base_url}/v1/sessions/{session}/usage",
        headers=remote.server.headers(),
        timeout=10,
    ).json()
    assert [c["cache_break"] for c in usage["calls"] if c["cache_break"]] == []


def test_a_remote_tool_not_declared_in_this_request_cannot_be_called(
    remote: Remote, sim: Simulator
) -> None:
    client = remote.client()
    sim.script([{"reply": {"text": "first"}}])
    first = client.responses.create(
        model="courier", input="one", tools=[remote.tool(require_approval="never")]
    )
    before = remote.counts().get("echo", 0)
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__tb__echo", text="not declared any more")]}},
            {"reply": {"text": "could not"}},
        ]
    )
    second = client.responses.create(
        model="courier", input="again, without the tool", previous_response_id=first.id
    )
    assert second.output_text == "could not"
    assert not any(isinstance(i, McpCall) for i in second.output)
    (result,) = tool_results(sim)
    assert "mcp__tb__echo" not in offered(sim, -2)
    assert "unknown tool" in result.lower() or "not a tool" in result.lower(), result
    assert remote.counts().get("echo", 0) == before


# ------------------------------------------------------------------ approvals


def _held(remote: Remote, sim: Simulator, note: str, **tool: Any) -> tuple[str, McpApprovalRequest]:
    sim.script([{"reply": {"tool_calls": [call("mcp__tb__write_note", text=note)]}}])
    response = remote.client().responses.create(
        model="courier", input="write the note", tools=[remote.tool(**tool)]
    )
    listing, request = response.output
    assert isinstance(listing, McpListTools)
    assert isinstance(request, McpApprovalRequest)
    assert (request.server_label, request.name) == ("tb", "write_note")
    assert json.loads(request.arguments) == {"text": note}
    return response.id, request


def test_require_approval_round_trips_approved(remote: Remote, sim: Simulator) -> None:
    before = remote.counts().get("write_note", 0)
    response_id, request = _held(remote, sim, "approved note")  # default: always
    assert remote.counts().get("write_note", 0) == before  # held, not run
    sim.script([{"reply": {"text": "noted"}}])
    answer = remote.client().responses.create(
        model="courier",
        previous_response_id=response_id,
        tools=[remote.tool()],
        input=[
            {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
        ],
    )
    mcp_call, message = answer.output
    assert isinstance(mcp_call, McpCall) and mcp_call.approval_request_id == request.id
    assert mcp_call.status == "completed" and mcp_call.name == "write_note"
    assert isinstance(message, ResponseOutputMessage) and answer.output_text == "noted"
    assert remote.counts()["write_note"] == before + 1
    (result,) = tool_results(sim)
    assert "approved note" in result


def test_require_approval_round_trips_denied(remote: Remote, sim: Simulator) -> None:
    before = remote.counts().get("write_note", 0)
    response_id, request = _held(remote, sim, "refused note")
    sim.script([{"reply": {"text": "not written"}}])
    answer = remote.client().responses.create(
        model="courier",
        previous_response_id=response_id,
        tools=[remote.tool()],
        input=[
            {
                "type": "mcp_approval_response",
                "approval_request_id": request.id,
                "approve": False,
                "reason": "not today",
            }
        ],
    )
    assert [type(i) for i in answer.output] == [ResponseOutputMessage]
    assert remote.counts().get("write_note", 0) == before
    (result,) = tool_results(sim)
    assert "did not approve" in result and "not today" in result


def test_a_filter_holds_only_the_tools_it_names(remote: Remote, sim: Simulator) -> None:
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        call("mcp__tb__echo", text="read only runs"),
                        call("mcp__tb__write_note", text="this one waits"),
                    ]
                }
            }
        ]
    )
    response = remote.client().responses.create(
        model="courier",
        input="both",
        tools=[remote.tool(require_approval={"never": {"read_only": True}})],
    )
    kinds = [type(i) for i in response.output]
    assert kinds == [McpListTools, McpCall, McpApprovalRequest]


def test_an_approval_naming_an_unknown_call_is_a_400(remote: Remote, sim: Simulator) -> None:
    response_id, _request = _held(remote, sim, "never answered properly")
    for asked in ("mcpr_call_nobody_made", "not-an-approval-id"):
        with pytest.raises(BadRequestError) as refused:
            remote.client().responses.create(
                model="courier",
                previous_response_id=response_id,
                tools=[remote.tool()],
                input=[
                    {"type": "mcp_approval_response", "approval_request_id": asked, "approve": True}
                ],
            )
        error = refused.value.body
        assert isinstance(error, dict)
        assert error["param"] == "input[0].approval_request_id", error


def test_an_approval_without_its_server_declared_is_a_400(remote: Remote, sim: Simulator) -> None:
    before = remote.counts().get("write_note", 0)
    response_id, request = _held(remote, sim, "server not declared again")
    with pytest.raises(BadRequestError) as refused:
        remote.client().responses.create(
            model="courier",
            previous_response_id=response_id,
            input=[
                {
                    "type": "mcp_approval_response",
                    "approval_request_id": request.id,
                    "approve": True,
                }
            ],
        )
    error = refused.value.body
    assert isinstance(error, dict) and error["code"] == "mcp_server_not_declared", error
    assert remote.counts().get("write_note", 0) == before


def test_an_approval_beside_a_new_message_or_without_a_chain_is_a_400(
    remote: Remote, sim: Simulator
) -> None:
    response_id, request = _held(remote, sim, "phase one refusals")
    answer = {"type": "mcp_approval_response", "approval_request_id": request.id, "approve": True}
    with pytest.raises(BadRequestError) as beside:
        remote.client().responses.create(
            model="courier",
            previous_response_id=response_id,
            tools=[remote.tool()],
            input=[answer, {"role": "user", "content": "and also this"}],
        )
    assert isinstance(beside.value.body, dict) and beside.value.body["param"] == "input"
    with pytest.raises(BadRequestError) as alone:
        remote.client().responses.create(model="courier", tools=[remote.tool()], input=[answer])
    assert isinstance(alone.value.body, dict)
    assert alone.value.body["param"] == "previous_response_id"


def test_tool_choice_names_a_remote_tool(remote: Remote, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "chosen"}}])
    remote.client().responses.create(
        model="courier",
        input="use echo",
        tools=[remote.tool(require_approval="never")],
        tool_choice={"type": "mcp", "server_label": "tb", "name": "echo"},
    )
    body = json.loads(sim.requests()[-1]["body"])
    assert body["tool_choice"] == {"type": "function", "function": {"name": "mcp__tb__echo"}}
    with pytest.raises(BadRequestError) as refused:
        remote.client().responses.create(
            model="courier",
            input="use a tool the server does not list",
            tools=[remote.tool(require_approval="never")],
            tool_choice={"type": "mcp", "server_label": "tb", "name": "no_such_tool"},
        )
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["param"] == "tool_choice"


def test_a_server_echoing_the_callers_token_does_not_get_it_stored(
    remote: Remote, sim: Simulator
) -> None:
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__tb__echo", text=f"token {HEADER_SECRET}")]}},
            {"reply": {"text": "echoed"}},
        ]
    )
    response = remote.client().responses.create(
        model="courier",
        input="echo it",
        tools=[remote.tool(require_approval="never", authorization=HEADER_SECRET)],
    )
    mcp_call = response.output[1]
    assert isinstance(mcp_call, McpCall) and mcp_call.output is not None
    assert mcp_call.output == "toolbox echo: token [redacted]"
    (result,) = tool_results(sim)
    assert HEADER_SECRET not in result and "[redacted]" in result


def test_remote_calls_are_in_the_turns_route(remote: Remote, sim: Simulator) -> None:
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        call("mcp__tb__echo", text="counted"),
                        call("mcp__tb__fail", reason="on purpose"),
                    ]
                }
            },
            {"reply": {"text": "one worked"}},
        ]
    )
    response = remote.client().responses.create(
        model="courier", input="two calls", tools=[remote.tool(require_approval="never")]
    )
    failed = [i for i in response.output if isinstance(i, McpCall) and i.status == "failed"]
    assert [i.name for i in failed] == ["fail"]
    assert failed[0].error is not None and failed[0].error.type == "mcp_tool_execution_error"
    session = (response.model_extra or {})["session_id"]
    turns = httpx.get(
        f"{remote.server.base_url}/v1/sessions/{session}/turns",
        headers=remote.server.headers(),
        timeout=10,
    ).json()
    (turn,) = turns["data"]
    mcp = turn["mcp"]
    assert mcp["calls"] == 2 and mcp["time_ms"] > 0
    assert mcp["servers"]["tb"]["calls"] == 2
    assert mcp["servers"]["tb"]["errors"] == 1


def test_an_operator_can_turn_remote_servers_off(
    remote: Remote, servers: ServerFactory, sim: Simulator
) -> None:
    host = remote.url.split("/")[2]
    off = servers(COURIER_MCP_REMOTE="false", COURIER_MCP_URL_ALLOW=host)
    client = OpenAI(base_url=f"{off.base_url}/v1", api_key=off.api_key)
    before, calls = len(sim.requests()), remote.counts()
    with pytest.raises(BadRequestError) as refused:
        client.responses.create(model="courier", input="hi", tools=[remote.tool()])
    error = refused.value.body
    assert isinstance(error, dict) and error["param"] == "tools[0].type"
    assert error["code"] == "unsupported_parameter"
    assert len(sim.requests()) == before and remote.counts() == calls


def test_a_stateless_client_replays_its_mcp_calls(remote: Remote, sim: Simulator) -> None:
    """store: false and the history resent as items (no previous_response_id): the
    replayed mcp_call reaches the model as the call and its fenced result."""
    sim.script(
        [
            {"reply": {"text": "a stored conversation opening the same way"}},
            {"reply": {"tool_calls": [call("mcp__tb__echo", text="said before the resend")]}},
            {"reply": {"text": "first answer"}},
            {"reply": {"text": "second answer"}},
        ]
    )
    client = remote.client()
    # Stored, and sharing only the first message: the resend below continues it from
    # there (stateless continuity), with a call and its result past the shared part.
    client.responses.create(model="courier", input="stateless one")
    tools = [remote.tool(require_approval="never")]
    first = client.responses.create(
        model="courier",
        input="stateless one",
        tools=tools,  # type: ignore[arg-type]
        store=False,
    )
    history: list[Any] = [{"role": "user", "content": "stateless one"}]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"role": "user", "content": "two"})
    second = client.responses.create(model="courier", input=history, tools=tools, store=False)  # type: ignore[arg-type]
    assert second.output_text == "second answer"
    body = json.loads(sim.requests()[-1]["body"])
    calls = [c for m in body["messages"] for c in m.get("tool_calls") or []]
    assert [c["function"]["name"] for c in calls] == ["mcp__tb__echo"]
    (result,) = tool_results(sim)
    assert result.startswith(OPEN + "tb/echo>>>") and "said before the resend" in result
    assert body["messages"][-1] == {"role": "user", "content": "two"}


def test_a_background_response_carries_its_mcp_items(remote: Remote, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"tool_calls": [call("mcp__tb__echo", text="in the background")]}},
            {"reply": {"text": "done in the background"}},
        ]
    )
    client = remote.client()
    created = client.responses.create(
        model="courier",
        input="work alone",
        tools=[remote.tool(require_approval="never")],
        background=True,
    )
    polled: list[Any] = []

    def settled() -> bool:
        polled[:] = [client.responses.retrieve(created.id)]
        return polled[0].status not in ("queued", "in_progress")

    wait_for(settled)
    response = polled[0]
    assert response.status == "completed"
    assert [type(i) for i in response.output] == [McpListTools, McpCall, ResponseOutputMessage]
    with client.responses.retrieve(created.id, stream=True) as replay:
        kinds = [event.type for event in replay]
    assert "response.mcp_list_tools.completed" in kinds
    assert "response.mcp_call.completed" in kinds
