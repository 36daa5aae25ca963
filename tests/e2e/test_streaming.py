"""The streaming contract, line by line, over real HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator


def _stream_lines(server: Server, body: dict[str, Any]) -> tuple[httpx.Headers, list[str]]:
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json={**body, "stream": True},
        headers=server.headers(),
        timeout=30,
    ) as resp:
        assert resp.status_code == 200
        return resp.headers, [line for line in resp.iter_lines()]


def _data(lines: list[str]) -> list[str]:
    return [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]


def _chunks(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(d) for d in _data(lines) if d != "[DONE]"]


BODY = {"model": "courier", "messages": [{"role": "user", "content": "hi"}]}


def test_stream_contract_without_usage(server: Server, sim: Simulator) -> None:
    sim.script(
        [
            {"reply": {"tool_calls": [{"name": "list_files", "arguments": {}}]}},
            {"reply": {"text": "one two three"}},
        ]
    )
    headers, lines = _stream_lines(server, BODY)
    assert headers["content-type"].startswith("text/event-stream")
    assert headers["cache-control"] == "no-cache"
    assert headers["x-accel-buffering"] == "no"
    assert headers["x-session-id"].startswith("sess_")
    # No named events for a client that did not opt in; every frame numbered (`id:`), the
    # role chunk 0, the end's frames N.1, N.2 (finish, [DONE]).
    assert not [line for line in lines if line.startswith("event:")]
    ids = [line[4:] for line in lines if line.startswith("id: ")]
    assert len(ids) == len(_data(lines)) and ids[0] == "0"
    end = ids[-1].partition(".")[0]
    assert ids[-2:] == [f"{end}.1", f"{end}.2"]
    assert _data(lines)[-1] == "[DONE]"
    chunks = _chunks(lines)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert sum("role" in c["choices"][0]["delta"] for c in chunks) == 1
    assert {(c["id"], c["created"], c["model"]) for c in chunks} == {
        (chunks[0]["id"], chunks[0]["created"], "courier")
    }
    finishes = [
        c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]
    ]
    assert finishes == ["stop"]
    assert all("usage" not in c and c["choices"] for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == "one two three"
    # Server-side tool calls never reach the client as tool_calls.
    assert all("tool_calls" not in c["choices"][0]["delta"] for c in chunks)


def test_stream_with_include_usage(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "hello there"}}])
    _, lines = _stream_lines(server, {**BODY, "stream_options": {"include_usage": True}})
    chunks = _chunks(lines)
    assert all(c["usage"] is None for c in chunks[:-1])
    last = chunks[-1]
    assert last["choices"] == []
    assert last["usage"]["total_tokens"] == (
        last["usage"]["prompt_tokens"] + last["usage"]["completion_tokens"]
    )
    assert _data(lines)[-1] == "[DONE]"


def test_official_client_streams_with_strict_validation(client: OpenAI, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "alpha beta gamma"}}])
    stream = client.chat.completions.create(
        model="courier",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    text = ""
    usage = None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
        usage = chunk.usage or usage
    assert text == "alpha beta gamma"
    assert usage is not None and usage.completion_tokens > 0


def test_error_after_stream_start_travels_in_stream(server: Server, sim: Simulator) -> None:
    sim.script([{"fault": {"status": 400}}])
    _, lines = _stream_lines(server, BODY)
    data = _data(lines)
    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"].startswith("upstream_")


@pytest.fixture(scope="module")
def slow_server(module_servers: ServerFactory) -> Server:
    return module_servers(COURIER_KEEPALIVE_S="0.3")


def test_keepalive_and_immediate_headers(slow_server: Server, sim: Simulator) -> None:
    sim.script([{"fault": {"delay_ms": 1500}, "reply": {"text": "late"}}])
    _, lines = _stream_lines(slow_server, BODY)
    meaningful = [line for line in lines if line]
    # The headers go out before the upstream has said anything, and the role chunk with
    # the first keepalive (sent while the upstream is silent).
    assert meaningful[0] == "id: 0" and '"role":"assistant"' in meaningful[1]
    assert meaningful[2] == ": keepalive"
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in _chunks(lines)) == "late"
