"""Issue 9 with the official `openai` Python SDK in strict mode, against live servers.

Strict response validation (`_strict_response_validation=True`) raises on any body or
chunk that does not match the SDK's types, so every test here also checks the wire shape;
streams are folded with the SDK's own accumulator (`ChatCompletionStreamState`), which is
what concatenates a repeated role or tool-call id into garbage.

Upstream behaviour is scripted in the simulator; counts (upstream requests, requests the
SDK sent, disconnects the simulator saw) are what the tests assert, never durations.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState
from pydantic import BaseModel

from app.db.store import Store
from tests.support.compat import ORIGIN, OTHER_KEY, unmarked
from tests.support.server import Server
from tests.support.sim import Simulator

WEATHER_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture
def server(compat_servers: dict[str, Server]) -> Server:
    # Per-session workspaces (no COURIER_WORKSPACE): "turn 2 reads turn 1's file" proves
    # the session, not a shared directory, carried over.
    return compat_servers["openai"]


@pytest.fixture
def anthropic_server(compat_servers: dict[str, Server]) -> Server:
    return compat_servers["anthropic"]


class Counter:
    """Counts the HTTP requests an SDK client actually sent (retries included)."""

    def __init__(self) -> None:
        self.sent = 0

    def __call__(self, request: httpx.Request) -> None:
        self.sent += 1


def sdk(
    server: Server,
    *,
    key: str | None = None,
    max_retries: int = 0,
    counter: Counter | None = None,
    **headers: str,
) -> OpenAI:
    hooks = {"request": [counter]} if counter is not None else {}
    return OpenAI(
        base_url=f"{server.base_url}/v1",
        api_key=key or server.api_key,
        max_retries=max_retries,
        default_headers=headers or None,
        http_client=httpx.Client(event_hooks=hooks, timeout=60),  # type: ignore[arg-type]
        _strict_response_validation=True,
    )


def upstream_bodies(sim: Simulator) -> list[dict[str, Any]]:
    return [json.loads(r["body"]) for r in sim.requests() if r["body"]]


def call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "id": call_id, "arguments": arguments}


def stream_final(client: OpenAI, **kwargs: Any) -> tuple[Any, str]:
    """Stream a completion; return the SDK-accumulated completion and the session id."""
    raw = client.chat.completions.with_raw_response.create(stream=True, **kwargs)
    state = ChatCompletionStreamState()
    for chunk in raw.parse():
        state.handle_chunk(chunk)
    return state.get_final_completion(), raw.headers["x-session-id"]


def create(client: OpenAI, *, stream: bool, **kwargs: Any) -> tuple[Any, str]:
    if stream:
        return stream_final(client, **kwargs)
    raw = client.chat.completions.with_raw_response.create(**kwargs)
    return raw.parse(), raw.headers["x-session-id"]


def tool_names(body: dict[str, Any]) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        names.append(tool.get("name") or (tool.get("function") or {}).get("name"))
    return names


def assistant_turn(message: Any) -> dict[str, Any]:
    """The assistant message as a client resends it."""
    return message.model_dump(include={"role", "content", "tool_calls"}, exclude_none=True)


# ------------------------------------------------------------------------------ client tools


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_client_tool_round_trip(server: Server, sim: Simulator, stream: bool) -> None:
    sim.script(
        [
            {"reply": {"tool_calls": [call("get_weather", "call_w1", city="Paris")]}},
            {
                "expect": {"last_tool_result_contains": "sunny, 21 C"},
                "reply": {"text": "It is sunny in Paris."},
            },
        ]
    )
    client = sdk(server)
    # Distinct per case: identical openings of one principal are a separate concern
    # (test_compat_behaviour.py::test_a_tool_result_continues_the_session_that_asked).
    user = {"role": "user", "content": f"Weather in Paris? ({'stream' if stream else 'whole'})"}
    first, session = create(
        client, stream=stream, model="courier", messages=[user], tools=[WEATHER_TOOL]
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert [c.function.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert calls[0].id and calls[0].type == "function"
    upstream = upstream_bodies(sim)
    assert len(upstream) == 1
    # The model saw Courier's own tools beside the client's.
    assert {"get_weather", "read_file"} <= set(tool_names(upstream[0]))

    result = {"role": "tool", "tool_call_id": calls[0].id, "content": "sunny, 21 C"}
    messages = [user, assistant_turn(choice.message), result]
    second, session2 = create(
        client, stream=stream, model="courier", messages=messages, tools=[WEATHER_TOOL]
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "It is sunny in Paris."
    assert not second.choices[0].message.tool_calls
    assert session2 == session, "the tool result continues the turn's session"
    sim.assert_script_done()


def test_mixed_batch_runs_server_tools_and_returns_only_client_calls(
    server: Server, sim: Simulator
) -> None:
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        call("list_files", "call_srv", path="."),
                        call("get_weather", "call_cli", city="Oslo"),
                    ]
                }
            },
            {"expect": {"last_tool_result_contains": "snow"}, "reply": {"text": "Snow in Oslo."}},
        ]
    )
    client = sdk(server)
    user = {"role": "user", "content": "List files and get Oslo weather"}
    first, session = create(
        client, stream=False, model="courier", messages=[user], tools=[WEATHER_TOOL]
    )
    message = first.choices[0].message
    assert first.choices[0].finish_reason == "tool_calls"
    assert [c.function.name for c in message.tool_calls] == ["get_weather"], (
        "a server tool call must never be shown to the client"
    )
    assert message.tool_calls[0].id == "call_cli"
    assert len(upstream_bodies(sim)) == 1, "the turn ends at the client call"

    result = {"role": "tool", "tool_call_id": "call_cli", "content": "snow"}
    second, session2 = create(
        client,
        stream=False,
        model="courier",
        messages=[user, assistant_turn(message), result],
        tools=[WEATHER_TOOL],
    )
    assert second.choices[0].message.content == "Snow in Oslo."
    assert session2 == session
    # The server tool ran and its result is in the model's context beside the client's.
    last = upstream_bodies(sim)[-1]
    answered = {m.get("tool_call_id") for m in last["messages"] if m["role"] == "tool"}
    assert {"call_srv", "call_cli"} <= answered
    sim.assert_script_done()


# ------------------------------------------------------------------------------ any last message


def test_greeting_with_a_lone_system_message(server: Server, sim: Simulator) -> None:
    sim.script([{"expect": {"system_contains": "Greet the user."}, "reply": {"text": "Hi!"}}])
    final, _ = stream_final(
        sdk(server),
        model="courier",
        messages=[{"role": "system", "content": "Greet the user."}],
        stream_options={"include_usage": True},
    )
    assert final.choices[0].message.content == "Hi!"
    assert final.choices[0].finish_reason == "stop"
    sim.assert_script_done()


def test_trailing_system_message_is_this_turns_instruction(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "Are you still there?"}}])
    messages = [
        {"role": "system", "content": "You are a friendly voice assistant."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "system", "content": "The user has been silent; ask if they are still there."},
    ]
    final, _ = stream_final(sdk(server), model="courier", messages=messages)
    assert final.choices[0].message.content == "Are you still there?"
    upstream = upstream_bodies(sim)[-1]["messages"]
    # The instruction comes after the history, not folded into the leading system prompt.
    texts = [json.dumps(m.get("content")) for m in upstream]
    where = [i for i, t in enumerate(texts) if "still there" in t]
    hello = [i for i, t in enumerate(texts) if "Hello!" in t]
    assert where and hello and where[-1] > hello[-1], upstream
    sim.assert_script_done()


# ------------------------------------------------------------------------------ structured output


class Weather(BaseModel):
    city: str
    temperature_c: float


def test_parse_with_a_pydantic_model(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": '{"city":"Paris","temperature_c":21.5}'}}])
    done = sdk(server).chat.completions.parse(
        model="courier",
        messages=[{"role": "user", "content": "Weather in Paris as JSON"}],
        response_format=Weather,
    )
    assert done.choices[0].message.parsed == Weather(city="Paris", temperature_c=21.5)
    sent = upstream_bodies(sim)[-1]
    assert sent["response_format"]["type"] == "json_schema", "forwarded on the OpenAI wire"


def test_parse_repairs_one_invalid_answer(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"text": "Sure! The weather is nice."}},
            {"reply": {"text": '{"city":"Rome","temperature_c":30}'}},
        ]
    )
    done = sdk(server).chat.completions.parse(
        model="courier",
        messages=[{"role": "user", "content": "Weather in Rome as JSON"}],
        response_format=Weather,
    )
    assert done.choices[0].message.parsed == Weather(city="Rome", temperature_c=30)
    sim.assert_script_done()


def test_parse_on_the_anthropic_wire(anthropic_server: Server, sim: Simulator) -> None:
    # Demo mode answers whichever way Courier asks (native format or a forced tool).
    done = sdk(anthropic_server).chat.completions.parse(
        model="courier",
        messages=[{"role": "user", "content": "Weather in Paris as JSON"}],
        response_format=Weather,
    )
    assert isinstance(done.choices[0].message.parsed, Weather)
    assert not done.choices[0].message.tool_calls


# ------------------------------------------------------------------------------ progress events


def test_courier_events_do_not_break_a_strict_stream(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"tool_calls": [call("list_files", "call_ls", path=".")]}},
            {"reply": {"text": "The workspace is empty."}},
        ]
    )
    client = sdk(server, **{"X-Courier-Events": "tools"})
    final, _ = stream_final(
        client,
        model="courier",
        messages=[{"role": "user", "content": "list the files"}],
        stream_options={"include_usage": True},
    )
    assert final.choices[0].message.content == "The workspace is empty."
    assert not final.choices[0].message.tool_calls
    sim.assert_script_done()


# ------------------------------------------------------------------------------ retry safety


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_upstream_401_is_one_attempt_and_not_retried(
    server: Server, sim: Simulator, stream: bool
) -> None:
    # Three steps, so a retry would be answered (and counted) rather than fail the script.
    sim.script([{"fault": {"status": 401, "message": "invalid x-api-key"}}] * 3)
    counter = Counter()
    client = sdk(server, max_retries=2, counter=counter)  # the SDK's default retries
    kwargs: dict[str, Any] = {"model": "courier", "messages": [{"role": "user", "content": "x"}]}
    with pytest.raises(openai.APIError) as caught:
        if stream:
            for _ in client.chat.completions.create(stream=True, **kwargs):
                pass
        else:
            client.chat.completions.create(**kwargs)
    assert counter.sent == 1, f"the SDK sent {counter.sent} requests"
    assert len(sim.requests("/v1/chat/completions")) == 1, "one upstream attempt"
    if isinstance(caught.value, openai.APIStatusError):
        # Refused before the stream started: the status and header decide the SDK's retry.
        response = caught.value.response
        assert response.status_code < 500, "an upstream auth failure is not a server error"
        assert response.headers.get("x-should-retry") == "false"
        error = caught.value.body
        assert isinstance(error, dict) and {"message", "type", "param", "code"} <= set(error)
    else:
        # Reported in-stream after a 200: no SDK retries that, and the count above holds.
        assert stream, f"a non-streamed error must carry a status: {caught.value!r}"


def test_an_sdk_retry_after_a_rate_limit_runs_the_call_again(
    server: Server, sim: Simulator
) -> None:
    # Courier's own attempts all hit the limit; the SDK then retries as told (Retry-After)
    # and the upstream has recovered. Reattaching that retry to the failed turn would hand
    # back the stale 429 on every retry while the upstream is fine.
    limited = {"fault": {"status": 429, "retry_after": 0.2}}
    sim.script([limited] * 3 + [{"reply": {"text": "Recovered."}}])
    counter = Counter()
    client = sdk(server, max_retries=2, counter=counter)
    done = client.chat.completions.create(
        model="courier", messages=[{"role": "user", "content": "rate limited, then fine"}]
    )
    assert done.choices[0].message.content == "Recovered."
    assert counter.sent == 2, "one SDK retry after the 429"
    sim.assert_script_done()


def test_client_hang_up_on_a_whole_request_cancels_the_upstream_call(
    server: Server, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": "too late"}, "fault": {"delay_ms": 20_000}}])
    with pytest.raises(httpx.TimeoutException):
        httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={"model": "courier", "messages": [{"role": "user", "content": "slow"}]},
            headers=server.headers(),
            timeout=httpx.Timeout(30, read=1.0),
        )
    # Poll a count with a generous cap; the upstream call would otherwise run 20 s.
    deadline = time.monotonic() + 15
    while sim.stats()["disconnects"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sim.stats() == {"model_requests": 1, "disconnects": 1}


# ------------------------------------------------------------------------------ CORS


def _preflight(server: Server, origin: str) -> httpx.Response:
    return httpx.options(
        f"{server.base_url}/v1/chat/completions",
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,x-session-id",
        },
    )


def _listed(value: str | None) -> set[str]:
    return {v.strip().lower() for v in (value or "").split(",") if v.strip()}


def test_cors_preflight_from_an_allowed_origin(server: Server, sim: Simulator) -> None:
    response = _preflight(server, ORIGIN)
    assert response.status_code in (200, 204), response.text
    assert response.headers["access-control-allow-origin"] == ORIGIN
    assert "post" in _listed(response.headers.get("access-control-allow-methods"))
    allowed = _listed(response.headers.get("access-control-allow-headers"))
    assert {"authorization", "content-type", "x-session-id", "idempotency-key"} <= allowed

    sim.script([{"reply": {"text": "hello browser"}}])
    answer = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": "hi"}]},
        headers=server.headers(Origin=ORIGIN),
        timeout=30,
    )
    assert answer.status_code == 200
    assert answer.headers["access-control-allow-origin"] == ORIGIN
    assert "x-session-id" in _listed(answer.headers.get("access-control-expose-headers"))


def test_cors_from_another_origin_is_403(server: Server, sim: Simulator) -> None:
    assert _preflight(server, "https://evil.example").status_code == 403
    answer = httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", "messages": [{"role": "user", "content": "hi"}]},
        headers=server.headers(Origin="https://evil.example"),
        timeout=30,
    )
    assert answer.status_code == 403
    assert "access-control-allow-origin" not in answer.headers
    assert sim.requests() == [], "a refused origin reaches no upstream"


def test_head_where_get_exists(server: Server) -> None:
    response = httpx.head(f"{server.base_url}/v1/models", headers=server.headers())
    assert response.status_code == 200
    assert response.content == b""


# ------------------------------------------------------------------------------ continuity


def _messages_prefix(earlier: list[Any], later: list[Any]) -> bool:
    dump = lambda ms: [json.dumps(unmarked(m), ensure_ascii=False) for m in ms]  # noqa: E731
    return dump(later)[: len(earlier)] == dump(earlier)


def test_stateless_continuity_keeps_session_workspace_and_cache(
    anthropic_server: Server, sim: Simulator
) -> None:
    sim.script(
        [
            {
                "reply": {
                    "tool_calls": [
                        call("write_file", "toolu_w", path="notes.txt", content="kept across")
                    ]
                }
            },
            {"reply": {"text": "Wrote notes.txt."}},
            {"reply": {"tool_calls": [call("read_file", "toolu_r", path="notes.txt")]}},
            {
                "expect": {"last_tool_result_contains": "kept across"},
                "reply": {"text": "It says: kept across."},
            },
        ]
    )
    client = sdk(anthropic_server)
    user1 = {"role": "user", "content": "Write notes.txt"}
    first, session = create(client, stream=False, model="courier", messages=[user1])
    assert first.choices[0].message.content == "Wrote notes.txt."
    turn1 = upstream_bodies(sim)[-1]

    messages = [
        user1,
        {"role": "assistant", "content": "Wrote notes.txt."},
        {"role": "user", "content": "Read it back"},
    ]
    try:
        second, session2 = create(client, stream=False, model="courier", messages=messages)
    except openai.APIStatusError as exc:
        # Without continuity the new session's workspace has no notes.txt and the script's
        # expectation fails upstream; say that rather than "502".
        raise AssertionError(f"turn 2 failed: {exc}; simulator: {sim.status()}") from exc
    assert session2 == session, "the resent history continues the stored session"
    assert second.choices[0].message.content == "It says: kept across."
    turn2 = upstream_bodies(sim)[2]
    assert unmarked(turn2["system"]) == unmarked(turn1["system"])
    assert unmarked(turn2["tools"]) == unmarked(turn1["tools"])
    assert _messages_prefix(turn1["messages"], turn2["messages"]), (
        "turn 2's upstream request must start with turn 1's (server tool calls included)"
    )
    details = second.usage.prompt_tokens_details
    assert details is not None and (details.cached_tokens or 0) > 0
    sim.assert_script_done()


def _texts(body: dict[str, Any]) -> str:
    return json.dumps(body["messages"], ensure_ascii=False)


def _dump(server: Server, session_id: str) -> list[dict[str, Any]]:
    store = Store.open(server.data_dir / "courier.db")
    try:
        return store.debug_dump(session_id=session_id)
    finally:
        store.close()


def test_regenerate_continues_from_the_common_prefix(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"text": "First answer."}},
            {"reply": {"text": "Answer to the follow-up, version one."}},
            {"reply": {"text": "Answer to the follow-up, version two."}},
        ]
    )
    client = sdk(server)
    u1 = {"role": "user", "content": "Tell me about tides"}
    _, session = create(client, stream=False, model="courier", messages=[u1])
    history = [u1, {"role": "assistant", "content": "First answer."}]
    u2 = {"role": "user", "content": "And the moon?"}
    _, session2 = create(client, stream=False, model="courier", messages=[*history, u2])
    # Open WebUI's regenerate: the same history again without the last answer. A changed
    # sampling setting keeps it from being a byte-identical retry of the previous request.
    again, session3 = create(
        client, stream=False, model="courier", messages=[*history, u2], temperature=0.9
    )
    assert session == session2 == session3
    assert again.choices[0].message.content == "Answer to the follow-up, version two."
    regenerated = upstream_bodies(sim)[-1]
    assert "version one" not in _texts(regenerated), "the replaced answer left the view"
    assert _texts(regenerated).count("And the moon?") == 1
    retracted = [
        r for r in _dump(server, session) if r["content"] and "version one" in r["content"]
    ]
    assert retracted and all(not r["active"] and not r["compacted"] for r in retracted)
    sim.assert_script_done()


def test_truncated_interrupted_answer_continues_from_what_was_spoken(
    server: Server, sim: Simulator
) -> None:
    full = "The quick brown fox jumps over the lazy dog and keeps running."
    sim.script([{"reply": {"text": full}}, {"reply": {"text": "Sure, go ahead."}}])
    client = sdk(server)
    u1 = {"role": "user", "content": "Say the fox sentence"}
    _, session = create(client, stream=True, model="courier", messages=[u1])
    spoken = {"role": "assistant", "content": "The quick brown fox"}
    u2 = {"role": "user", "content": "Wait, stop."}
    _, session2 = create(client, stream=True, model="courier", messages=[u1, spoken, u2])
    assert session2 == session
    sent = _texts(upstream_bodies(sim)[-1])
    assert "The quick brown fox" in sent and "lazy dog" not in sent
    rows = _dump(server, session)
    full_rows = [r for r in rows if r["content"] == full]
    assert full_rows and all(not r["active"] and not r["compacted"] for r in full_rows)
    assert any(r["content"] == "The quick brown fox" and r["active"] for r in rows)
    sim.assert_script_done()


def test_two_principals_with_identical_histories_never_share_a_session(
    server: Server, sim: Simulator
) -> None:
    sim.script([{"reply": {"text": "Same answer."}}] * 4)
    first = [{"role": "user", "content": "Identical opening line"}]
    follow = [*first, {"role": "assistant", "content": "Same answer."}]
    follow.append({"role": "user", "content": "next"})
    alice, bob = sdk(server), sdk(server, key=OTHER_KEY)
    _, a1 = create(alice, stream=False, model="courier", messages=first)
    _, b1 = create(bob, stream=False, model="courier", messages=first)
    _, b2 = create(bob, stream=False, model="courier", messages=follow)
    _, a2 = create(alice, stream=False, model="courier", messages=follow)
    assert a1 != b1
    assert (a2, b2) == (a1, b1)


def test_one_key_two_end_users_never_share_a_session(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "Same answer."}}] * 4)
    first = [{"role": "user", "content": "Another identical opening line"}]
    follow = [*first, {"role": "assistant", "content": "Same answer."}]
    follow.append({"role": "user", "content": "next"})
    client = sdk(server)
    _, u1 = create(client, stream=False, model="courier", messages=first, user="user-1")
    _, v1 = create(client, stream=False, model="courier", messages=first, user="user-2")
    _, v2 = create(client, stream=False, model="courier", messages=follow, user="user-2")
    _, u2 = create(client, stream=False, model="courier", messages=follow, user="user-1")
    assert u1 != v1
    assert (u2, v2) == (u1, v1)


def test_store_path_is_the_servers(server: Server) -> None:
    # Guards the helper above: reading the wrong file would make the retraction checks vacuous.
    assert Path(server.data_dir / "courier.db").is_file()
