"""Issue 9 behaviours at the HTTP level that no captured body pins down on its own.

`tool_choice` and `parallel_tool_calls` for client tools, a client tool shadowing a server
tool, retry safety (SDK retries and byte-identical twins reattach, a cancelled turn is never
replayed as a success, status mapping and `Retry-After`), image input on both wires, and
what each wire gets for a prefill or a mid-conversation instruction. Counts (upstream model
requests in the simulator) decide, never durations.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import httpx
import pytest

from tests.support.compat import unmarked
from tests.support.server import Server
from tests.support.sim import Simulator
from tests.support.sse import check_chat_stream

WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
PIXEL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
    "YPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)


@pytest.fixture
def servers(compat_servers: dict[str, Server]) -> dict[str, Server]:
    return compat_servers


@pytest.fixture
def oai(servers: dict[str, Server]) -> Server:
    return servers["openai"]


def post(server: Server, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json={"model": "courier", **body},
        headers=server.headers(**headers),
        timeout=60,
    )


def upstream(sim: Simulator, index: int = -1) -> dict[str, Any]:
    bodies = [json.loads(r["body"]) for r in sim.requests() if r["body"]]
    return bodies[index]


def user(text: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": text}]


def _call(name: str, call_id: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "id": call_id, "arguments": arguments}


def _wait_for(predicate: Any, what: str) -> None:
    # A generous cap on polling a count; the assertion is on the count, not the time.
    deadline = time.monotonic() + 15
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


# ------------------------------------------------------------------------------ tool_choice


@pytest.mark.parametrize(
    "choice",
    ["none", "required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["none", "required", "named"],
)
def test_tool_choice_for_client_tools_reaches_the_openai_wire(
    oai: Server, sim: Simulator, choice: Any
) -> None:
    if choice == "none":
        sim.script([{"reply": {"text": "No tools today."}}])
    else:
        sim.script([{"reply": {"tool_calls": [_call("get_weather", "call_tc", city="Rome")]}}])
    response = post(oai, {"messages": user("weather?"), "tools": [WEATHER], "tool_choice": choice})
    assert response.status_code == 200, response.text
    choice_body = response.json()["choices"][0]
    sent = upstream(sim)
    if choice == "none":
        assert sent.get("tool_choice") == "none" or not sent.get("tools")
        assert choice_body["finish_reason"] == "stop"
    else:
        assert sent.get("tool_choice") == choice
        assert choice_body["finish_reason"] == "tool_calls"


def test_parallel_tool_calls_reaches_the_openai_wire(oai: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"tool_calls": [_call("get_weather", "call_p", city="Rome")]}}])
    body = {"messages": user("weather?"), "tools": [WEATHER], "parallel_tool_calls": False}
    response = post(oai, body)
    assert response.status_code == 200, response.text
    assert upstream(sim).get("parallel_tool_calls") is False


def test_a_client_tool_shadows_the_server_tool_of_the_same_name(
    oai: Server, sim: Simulator
) -> None:
    mine = {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file on the CLIENT's machine.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    sim.script([{"reply": {"tool_calls": [_call("read_file", "call_mine", path="/etc/hosts")]}}])
    response = post(oai, {"messages": user("read my hosts file"), "tools": [mine]})
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls", "the call is the client's to run"
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "read_file"
    sent = [t for t in upstream(sim)["tools"] if t["function"]["name"] == "read_file"]
    assert len(sent) == 1 and "CLIENT" in sent[0]["function"]["description"]
    assert len(sim.requests()) == 1, "nothing ran server-side"


def test_two_client_calls_stream_in_index_order(oai: Server, sim: Simulator) -> None:
    calls = [
        _call("get_weather", "call_a", city="Rome"),
        _call("get_weather", "call_b", city="Oslo"),
    ]
    sim.script([{"reply": {"tool_calls": calls}}])
    body = {"messages": user("two cities"), "tools": [WEATHER], "stream": True}
    response = post(oai, body)
    assert response.status_code == 200, response.text
    folded = check_chat_stream(response.text, include_usage=False)
    assert folded.finish_reason == "tool_calls"
    assert [c["id"] for c in folded.tool_calls] == ["call_a", "call_b"]
    assert [json.loads(c["arguments"])["city"] for c in folded.tool_calls] == ["Rome", "Oslo"]


# ------------------------------------------------------------------------------ retry safety


def _slow_answer(sim: Simulator, text: str = "the one answer") -> None:
    sim.script([{"reply": {"text": text}, "fault": {"delay_ms": 1500}}, {"reply": {"text": "2nd"}}])


def _in_background(server: Server, body: dict[str, Any], **headers: str) -> Any:
    result: dict[str, httpx.Response] = {}
    thread = threading.Thread(target=lambda: result.setdefault("r", post(server, body, **headers)))
    thread.start()
    return thread, result


def test_an_sdk_retry_reattaches_to_the_running_turn(oai: Server, sim: Simulator) -> None:
    _slow_answer(sim)
    body = {"messages": user("retry me")}
    thread, first = _in_background(oai, body, **{"x-stainless-retry-count": "0"})
    _wait_for(lambda: sim.stats()["model_requests"] == 1, "the first attempt upstream")
    retry = post(oai, body, **{"x-stainless-retry-count": "1"})
    thread.join(60)
    assert retry.status_code == 200, retry.text
    assert retry.json()["choices"][0]["message"]["content"] == "the one answer"
    assert first["r"].json()["choices"][0]["message"]["content"] == "the one answer"
    assert sim.stats()["model_requests"] == 1, "the retry must not run the turn again"


def test_two_first_tries_of_one_body_are_two_calls(oai: Server, sim: Simulator) -> None:
    """Two voice calls under one key greet with the same `[system]` body (pipecat does),
    each a first try by the SDK's retry counter: each gets its own turn and session, never
    the other caller's answer."""
    _slow_answer(sim, "caller one")
    body = {"messages": [{"role": "system", "content": "You are a phone assistant. Greet."}]}
    thread, first = _in_background(oai, body, **{"x-stainless-retry-count": "0"})
    _wait_for(lambda: sim.stats()["model_requests"] == 1, "the first call upstream")
    second = post(oai, body, **{"x-stainless-retry-count": "0"})
    thread.join(60)
    assert first["r"].status_code == second.status_code == 200, second.text
    assert second.json()["choices"][0]["message"]["content"] == "2nd"
    assert first["r"].json()["choices"][0]["message"]["content"] == "caller one"
    assert first["r"].headers["x-session-id"] != second.headers["x-session-id"]
    assert sim.stats()["model_requests"] == 2


def test_a_byte_identical_twin_while_running_reattaches(oai: Server, sim: Simulator) -> None:
    # No retry header (clients such as the Vercel AI SDK send none): the body alone tells.
    _slow_answer(sim, "only once")
    body = {"messages": user("a twin arrives")}
    thread, first = _in_background(oai, body)
    _wait_for(lambda: sim.stats()["model_requests"] == 1, "the first request upstream")
    twin = post(oai, body)
    thread.join(60)
    assert first["r"].status_code == twin.status_code == 200
    assert twin.json()["choices"][0]["message"]["content"] == "only once"
    assert sim.stats()["model_requests"] == 1


def test_a_tool_result_continues_the_session_that_asked_for_it(oai: Server, sim: Simulator) -> None:
    """Two conversations of one principal open alike, and their model (an upstream with
    deterministic call ids, as some local servers have) asks for the same client call.
    The tool result must go on in the conversation that asked for it last, not the older."""
    opening = user("Identical opening with a client tool")
    for _ in range(2):
        sim.script(
            [
                {"reply": {"tool_calls": [_call("get_weather", "call_0", city="Rome")]}},
                {"reply": {"text": "Done."}},
            ]
        )
        asked = post(oai, {"messages": opening, "tools": [WEATHER]})
        assert asked.status_code == 200, asked.text
        message = asked.json()["choices"][0]["message"]
        result = {"role": "tool", "tool_call_id": "call_0", "content": "warm"}
        history = [*opening, {k: message[k] for k in ("role", "content", "tool_calls")}, result]
        answered = post(oai, {"messages": history, "tools": [WEATHER]})
        assert answered.status_code == 200, answered.text
        assert answered.headers["x-session-id"] == asked.headers["x-session-id"]


def test_a_cancelled_turn_is_never_replayed_as_a_success(oai: Server, sim: Simulator) -> None:
    sim.configure(tokens_per_second=40)
    sim.script([{"reply": {"text": "word " * 400}}, {"reply": {"text": "a fresh answer"}}])
    body = {"model": "courier", "messages": user("long please"), "stream": True}
    headers = oai.headers(**{"Idempotency-Key": "cancel-then-retry-1"})
    url = f"{oai.base_url}/v1/chat/completions"
    with httpx.stream("POST", url, json=body, headers=headers, timeout=60) as response:
        for number, _ in enumerate(response.iter_lines()):
            if number > 6:
                break
    _wait_for(lambda: sim.stats()["disconnects"] == 1, "the upstream call to be cancelled")
    sim.configure(tokens_per_second=0)
    # The same request again, as a client retrying after its stream broke.
    retry = httpx.post(url, json=body, headers=headers, timeout=60)
    if retry.status_code == 200:
        folded = check_chat_stream(retry.text, include_usage=False)
        assert folded.content.strip(), "a cancelled turn replayed as an empty success"
        assert folded.content == "a fresh answer" or folded.finish_reason != "stop", (
            f"the cancelled turn was replayed as finished: {folded.content[:80]!r}"
        )
    else:
        assert set(retry.json()["error"]) >= {"message", "type", "param", "code"}


@pytest.mark.parametrize("status", [400, 401, 403, 404])
def test_upstream_client_errors_are_not_5xx_and_not_retried(
    oai: Server, sim: Simulator, status: int
) -> None:
    sim.script([{"fault": {"status": status}}] * 3)
    # A distinct body per case: an identical one would (rightly) reattach to the last.
    response = post(oai, {"messages": user(f"upstream says {status}")})
    assert 400 <= response.status_code < 500, response.text
    assert response.headers.get("x-should-retry") == "false"
    assert set(response.json()["error"]) >= {"message", "type", "param", "code"}
    assert sim.stats()["model_requests"] == 1


def test_a_retryable_upstream_failure_says_when_to_retry(oai: Server, sim: Simulator) -> None:
    sim.script([{"fault": {"status": 429, "retry_after": 1}}] * 3)
    response = post(oai, {"messages": user("upstream rate-limits")})
    assert response.status_code in (429, 503), response.text
    assert response.headers.get("retry-after"), dict(response.headers)
    assert response.headers.get("x-should-retry") != "false"


# ------------------------------------------------------------------------------ messages per wire


def _image_message(text: str) -> dict[str, Any]:
    parts = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": PIXEL}}]
    return {"role": "user", "content": parts}


@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_image_input_is_forwarded_and_replayed_byte_stably(
    servers: dict[str, Server], sim: Simulator, wire: str
) -> None:
    sim.script([{"reply": {"text": "A single pixel."}}, {"reply": {"text": "Still a pixel."}}])
    server = servers[wire]
    first = post(server, {"messages": [_image_message("what is this")]})
    assert first.status_code == 200, first.text
    encoded = PIXEL.split(",", 1)[1]
    turn1 = json.dumps(unmarked(upstream(sim, 0)["messages"]))
    assert encoded in turn1, "the image reached the upstream"
    history = [
        _image_message("what is this"),
        {"role": "assistant", "content": "A single pixel."},
        {"role": "user", "content": "and now?"},
    ]
    second = post(server, {"messages": history})
    assert second.status_code == 200, second.text
    assert second.headers["x-session-id"] == first.headers["x-session-id"]
    turn2 = upstream(sim, 1)["messages"]
    assert json.dumps(unmarked(turn2[: len(upstream(sim, 0)["messages"])])) == turn1
    assert json.dumps(turn2).count(encoded) == 1, "the image is sent once, not per turn"


def test_prefill_on_the_anthropic_wire_continues_the_answer(
    servers: dict[str, Server], sim: Simulator
) -> None:
    sim.script([{"reply": {"text": " leaves fall slowly"}}])
    messages = [*user("Write a haiku"), {"role": "assistant", "content": "Autumn"}]
    response = post(servers["anthropic"], {"messages": messages})
    assert response.status_code == 200, response.text
    last = upstream(sim)["messages"][-1]
    assert last["role"] == "assistant" and "Autumn" in json.dumps(last["content"])


def test_mid_conversation_system_on_the_anthropic_wire(
    servers: dict[str, Server], sim: Simulator
) -> None:
    sim.script([{"reply": {"text": "Are you still there?"}}])
    messages = [
        {"role": "system", "content": "You are a voice assistant."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "system", "content": "The user has been silent; check on them."},
    ]
    response = post(servers["anthropic"], {"messages": messages, "stream": True})
    assert response.status_code == 200, response.text
    folded = check_chat_stream(response.text, include_usage=False)
    assert folded.content == "Are you still there?"
    sent = upstream(sim)
    assert "voice assistant" in json.dumps(sent["system"])
    texts = json.dumps(sent["messages"])
    assert texts.index("check on them") > texts.index("Hello!"), "an instruction for this turn"
