"""Replay what nine real client libraries sent, and check every answer is one they accept.

The requests are `tests/fixtures/captured-requests.jsonl`: a copy of
`../shared/clients/captured-requests.jsonl` kept in the repo, because CI checks out the repo
alone and a replay that silently found no file would pass while testing nothing.
`test_fixture_matches_the_shared_capture` fails when the shared copy (where present) has
moved on, so the copy cannot drift unnoticed.

Each captured line is one test (id: client and line index), sent with its captured headers
and body (plus our bearer key) to one live server per upstream wire (the
`openai_py_anthropic_wire` lines were captured against an Anthropic upstream; they go to a
server on that wire). The simulator answers in demo mode, which reads the request like a
model would: it answers greetings, calls the server's file tools, and answers JSON shaped
by `response_format`; a request declaring client tools is scripted to call one of them, so
the client-tool path (finish `tool_calls`) is what gets checked there.

Refused on purpose (docs/clients.md's field table documents these): `n > 1`, `logprobs: true`,
audio output `modalities`, `temperature` outside [0, 2] (OpenAI refuses it too), a trailing
assistant message (prefill) on the OpenAI wire, which OpenAI answers after instead of continuing.
Those must be a 400 in the OpenAI error shape naming `param`, and reach no upstream.
`POST /v1/responses` is served since issue 14: those lines must get a spec-valid `Response`.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import jsonschema
import pytest

from app.simulator.structured import schema_instance
from tests.support.paths import CAPTURES
from tests.support.postgres import POSTGRES
from tests.support.server import Server
from tests.support.sim import REPO_ROOT, Simulator
from tests.support.spec import errors
from tests.support.sse import check_chat_stream
from tests.support.stores import BACKENDS

FIXTURE = CAPTURES
SHARED = REPO_ROOT.parent / "shared" / "clients" / "captured-requests.jsonl"
ANTHROPIC_CLIENTS = ("openai_py_anthropic_wire",)
EXPECTED_LINES = 272
STORE_BACKENDS = BACKENDS

ROWS: list[dict[str, Any]] = [
    json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()
]


def _row_id(index: int, row: dict[str, Any]) -> str:
    return f"{row['client']}#{index:03d}"


def _prefill(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    last = messages[-1] if messages else {}
    return last.get("role") == "assistant" and not last.get("tool_calls")


def refused_param(row: dict[str, Any]) -> str | None:
    """The `param` a documented refusal must name, or None when the line must succeed.

    A `param` ending in `[` is a prefix: a prefill names the message, `messages[N]`.
    """
    body = row.get("body") or {}
    if _prefill(body) and not row["client"].startswith(ANTHROPIC_CLIENTS):
        # OpenAI answers after a trailing assistant message rather than continuing it.
        return "messages["
    if isinstance(body.get("n"), int) and body["n"] > 1:
        return "n"
    if body.get("logprobs") is True:
        return "logprobs"
    if "audio" in (body.get("modalities") or []):
        return "modalities"
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and not 0 <= temperature <= 2:
        # A probe the capture includes on purpose: OpenAI itself answers this 400.
        return "temperature"
    return None


def client_tools(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [t["function"] for t in body.get("tools") or [] if t.get("type") == "function"]


def scripted_call(body: dict[str, Any]) -> dict[str, Any] | None:
    """The client-tool call the simulator is scripted to make, or None (demo mode)."""
    tools = client_tools(body)
    choice = body.get("tool_choice")
    if not tools or choice == "none":
        return None
    name = tools[0]["name"]
    if isinstance(choice, dict):
        name = choice["function"]["name"]
    function = next(t for t in tools if t["name"] == name)
    return {"name": name, "arguments": schema_instance(function.get("parameters") or {})}


# ------------------------------------------------------------------------------ servers


@pytest.fixture
def servers(backend: str, request: pytest.FixtureRequest) -> dict[str, Server]:
    # Shared with the other client suites (tests/support/compat.py): vendor model names
    # (gpt-4.1, gpt-4o, gpt-3.5-turbo, gpt-5-mini) are served by the default profile.
    # Every line replays on each store backend (STORE_BACKENDS).
    pair: dict[str, Server] = request.getfixturevalue(
        "compat_servers_postgres" if backend == POSTGRES else "compat_servers"
    )
    return pair


def _server_for(servers: dict[str, Server], row: dict[str, Any]) -> Server:
    wire = "anthropic" if row["client"].startswith(ANTHROPIC_CLIENTS) else "openai"
    return servers[wire]


# ------------------------------------------------------------------------------ sending


def _headers(server: Server, row: dict[str, Any], session_id: str | None) -> dict[str, str]:
    headers = {k: v for k, v in row["headers"].items() if k != "x-session-id"}
    headers["authorization"] = f"Bearer {server.api_key}"
    if session_id is not None:
        headers["x-session-id"] = session_id
    return headers


def _session_for(server: Server, body: dict[str, Any]) -> str:
    """A live session standing in for the one the captured `x-session-id` named.

    The captured id belonged to the capture server; replaying it verbatim would only test
    the unknown-session 404. One plain turn with the line's first user message makes a
    session the replay then continues, as the capturing client did.
    """
    first = next(m for m in body["messages"] if m["role"] == "user")
    response = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": body["model"], "messages": [first]},
        headers=server.headers(),
        timeout=30,
    )
    assert response.status_code == 200, response.text
    return response.headers["x-session-id"]


def _send(server: Server, row: dict[str, Any], session_id: str | None) -> httpx.Response:
    body = row.get("body")
    headers = _headers(server, row, session_id)
    content = json.dumps(body).encode() if body is not None else None
    return httpx.request(
        row["method"], server.base_url + row["path"], content=content, headers=headers, timeout=60
    )


# ------------------------------------------------------------------------------ checks


def _valid(schema: str, body: Any) -> None:
    problems = errors(schema, body)
    assert not problems, f"not a valid {schema}: {problems}\n{json.dumps(body)[:2000]}"


def _check_refusal(response: httpx.Response, param: str, row: dict[str, Any]) -> None:
    assert response.status_code == 400, f"{response.status_code}: {response.text[:500]}"
    body = response.json()
    _valid("ErrorResponse", body)
    if response.status_code == 400:
        named = body["error"]["param"] or ""
        assert named.startswith(param) if param.endswith("[") else named == param, body


def _json_answer(content: str, kind: str) -> Any:
    try:
        return json.loads(content)
    except ValueError:
        raise AssertionError(f"response_format {kind} not honoured: {content[:300]!r}") from None


def _check_answer_text(content: str | None, body: dict[str, Any]) -> None:
    assert isinstance(content, str) and content.strip(), f"empty answer: {content!r}"
    form = body.get("response_format") or {}
    if form.get("type") == "json_object":
        assert isinstance(_json_answer(content, "json_object"), dict), content
    elif form.get("type") == "json_schema":
        jsonschema.validate(_json_answer(content, "json_schema"), form["json_schema"]["schema"])


def _check_calls(calls: list[dict[str, Any]], finish: str | None, want: dict[str, Any]) -> None:
    assert finish == "tool_calls", f"finish_reason {finish!r}, expected tool_calls"
    names = [c["name"] for c in calls]
    assert names == [want["name"]], f"tool_calls {names}: only the client's tool may show"
    assert json.loads(calls[0]["arguments"]) == want["arguments"]
    assert calls[0]["id"], "a tool call needs an id the client can answer"


def _check_whole(response: httpx.Response, body: dict[str, Any], call: Any) -> None:
    assert response.headers["content-type"].startswith("application/json")
    data = response.json()
    _valid("CreateChatCompletionResponse", data)
    assert len(data["choices"]) == 1
    choice = data["choices"][0]
    message = choice["message"]
    if call is not None:
        calls = [{"id": c["id"], **c["function"]} for c in message.get("tool_calls") or []]
        _check_calls(calls, choice["finish_reason"], call)
        return
    assert not message.get("tool_calls"), f"server tool calls leaked: {message['tool_calls']}"
    assert choice["finish_reason"] in ("stop", "length"), choice["finish_reason"]
    _check_answer_text(message["content"], body)


def _check_stream(response: httpx.Response, body: dict[str, Any], call: Any) -> None:
    assert response.headers["content-type"].startswith("text/event-stream")
    options = body.get("stream_options") or {}
    folded = check_chat_stream(response.text, include_usage=options.get("include_usage") is True)
    assert not folded.named_events, "named events were not asked for (no X-Courier-Events)"
    if call is not None:
        _check_calls(folded.tool_calls, folded.finish_reason, call)
        return
    assert not folded.tool_calls, f"server tool calls leaked: {folded.tool_calls}"
    assert folded.finish_reason in ("stop", "length"), folded.finish_reason
    _check_answer_text(folded.content, body)


def _check_get(response: httpx.Response, row: dict[str, Any]) -> None:
    assert response.status_code == 200, response.text
    if row["path"] == "/v1/models":
        _valid("ListModelsResponse", response.json())
    else:
        _valid("Model", response.json())


# Fields Courier itself consumes: the turn's input, how to deliver the answer, and the
# end-user id that scopes stateless continuity (issue 9 item 3).
CONSUMED = frozenset({"model", "messages", "stream", "stream_options", "safety_identifier"})
# A field may reach the upstream under the other name the wire uses for it.
EQUIVALENT = {
    "max_tokens": ("max_completion_tokens", "max_tokens"),
    "max_completion_tokens": ("max_completion_tokens", "max_tokens"),
    "user": ("user", "safety_identifier"),
}


# Values that equal the API default change nothing when left out.
DEFAULTS: dict[str, Any] = {
    "n": 1,
    "response_format": {"type": "text"},
    "modalities": ["text"],
    "tool_choice": "auto",
    "logprobs": False,
}


def _tool_choice_none_honoured(upstream: list[dict[str, Any]]) -> bool:
    return all(not r.get("tools") or r.get("tool_choice") == "none" for r in upstream)


def _ignored(response: httpx.Response) -> set[str]:
    header = response.headers.get("x-courier-ignored", "")
    return {name.strip() for name in header.split(",") if name.strip()}


def _check_no_silent_drops(
    response: httpx.Response, body: dict[str, Any], upstream: list[dict[str, Any]]
) -> None:
    """Issue 9 item 5, on the OpenAI wire where passing a field through is possible: each
    request field reaches the upstream (honoured or passed) or is named in
    `X-Courier-Ignored`."""
    sent = {key for request in upstream for key in request}
    ignored = _ignored(response)
    dropped = []
    for key in sorted(set(body) - CONSUMED):
        if key in DEFAULTS and body[key] == DEFAULTS[key]:
            continue
        if key == "tool_choice" and body[key] == "none" and _tool_choice_none_honoured(upstream):
            continue
        if key in ignored or any(name in sent for name in EQUIVALENT.get(key, (key,))):
            continue
        dropped.append(key)
    assert not dropped, (
        f"silently dropped {dropped}: neither sent upstream nor in X-Courier-Ignored "
        f"({sorted(ignored)})"
    )


# ------------------------------------------------------------------------------ tests


def test_fixture_matches_the_shared_capture() -> None:
    assert len(ROWS) == EXPECTED_LINES
    if not SHARED.is_file():
        pytest.skip(f"no shared capture at {SHARED}; the in-repo copy is what CI replays")
    assert FIXTURE.read_bytes() == SHARED.read_bytes(), (
        f"{SHARED} changed: copy it to {FIXTURE} so the replay covers it"
    )


@pytest.mark.parametrize(
    ("index", "row"), list(enumerate(ROWS)), ids=[_row_id(i, r) for i, r in enumerate(ROWS)]
)
def test_captured_request(
    servers: dict[str, Server], sim: Simulator, index: int, row: dict[str, Any]
) -> None:
    server = _server_for(servers, row)
    body = row.get("body") or {}
    param = refused_param(row)
    call = scripted_call(body) if param is None else None
    if call is not None:
        sim.script([{"reply": {"tool_calls": [call]}}])
    session_id = None
    if "x-session-id" in row["headers"]:
        session_id = _session_for(server, body)
    # The `sim` fixture reset the simulator: only a session set up above came before.
    before = len(sim.requests()) if session_id is not None else 0
    response = _send(server, row, session_id)
    upstream = [json.loads(r["body"]) for r in sim.requests()[before:] if r["body"]]
    if call is not None:
        # Demo mode never fails a request; a script can (a step Courier did not expect).
        status = sim.status()
        assert not status["failures"], status["failures"]
    if param is not None:
        _check_refusal(response, param, row)
        assert not upstream, "a refused request must not reach the upstream"
        return
    if row["method"] == "GET":
        _check_get(response, row)
        return
    if row["path"] == "/v1/responses":
        assert response.status_code == 200, f"{response.status_code}: {response.text[:800]}"
        _valid("Response", response.json())
        assert response.json()["status"] == "completed"
        return
    assert response.status_code == 200, f"{response.status_code}: {response.text[:800]}"
    assert response.headers.get("x-session-id"), "every answer names its session"
    if body.get("stream") is True:
        _check_stream(response, body, call)
    else:
        _check_whole(response, body, call)
    if server is servers["openai"]:
        _check_no_silent_drops(response, body, upstream)
