"""COURIER_LOG_FORMAT=json against the real server: every line is JSON, carries the ids it
belongs to, and holds no content and no key."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

SECRET_PROMPT = "the-launch-code-is-4471"
SECRET_REPLY = "reply-with-private-words"


@pytest.fixture
def json_server(servers: ServerFactory) -> Server:
    return servers(COURIER_LOG_FORMAT="json", COURIER_LOG_LEVEL="debug")


def records(server: Server) -> list[dict[str, Any]]:
    lines = [line for line in server.log().splitlines() if line.strip()]
    return [json.loads(line) for line in lines]  # a non-JSON line fails here


def test_json_lines_carry_ids_and_no_content(json_server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": SECRET_REPLY}}])
    response = httpx.post(
        f"{json_server.base_url}/v1/chat/completions?note={SECRET_PROMPT}",
        headers=json_server.headers(**{"X-Request-Id": "client-req-1"}),
        json={"model": "courier", "messages": [{"role": "user", "content": SECRET_PROMPT}]},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.headers["x-request-id"] == "client-req-1"
    session = response.headers["x-session-id"]
    hostile = httpx.get(f"{json_server.base_url}/health", headers={"X-Request-Id": "bad id;" * 20})
    assert hostile.headers["x-request-id"].startswith("req_")
    json_server.stop()

    logged = records(json_server)
    text = json_server.log()
    for secret in (SECRET_PROMPT, SECRET_REPLY, json_server.api_key, "sim-upstream-key"):
        assert secret not in text
    access = [r for r in logged if r["logger"] == "courier.access"]
    chat = next(r for r in access if r["path"] == "/v1/chat/completions")
    assert chat["request_id"] == "client-req-1"
    assert chat["session_id"] == session
    assert chat["status"] == 200 and chat["method"] == "POST"
    finished = next(r for r in logged if r["logger"] == "courier.turn")
    assert finished["session_id"] == session
    assert finished["turn_id"].startswith("turn_")
    assert finished["request_id"] == "client-req-1"  # the turn's task inherits the request's
    assert {"ts", "level", "logger", "msg"} <= set(finished)
