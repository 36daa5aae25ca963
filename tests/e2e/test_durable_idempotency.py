"""Durable idempotency over HTTP: a keyed request replayed after a restart returns the
stored response (same id, text, usage) streamed or not, without an upstream call; the
same key with another body is 409; a turn the restart cut off replays as that failure."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

URL = "/v1/chat/completions"


def _post(server: Server, body: dict[str, Any], key: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}{URL}",
        json=body,
        headers=server.headers(**{"Idempotency-Key": key}),
        timeout=30,
    )


def _stream(server: Server, body: dict[str, Any], key: str) -> list[dict[str, Any]]:
    with httpx.stream(
        "POST",
        f"{server.base_url}{URL}",
        json=body,
        headers=server.headers(**{"Idempotency-Key": key}),
        timeout=30,
    ) as resp:
        assert resp.status_code == 200
        return [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]


def _body(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "courier", "messages": [{"role": "user", "content": text}], **extra}


def test_replay_after_restart_is_identical_and_costs_nothing(
    sim: Simulator, servers: ServerFactory
) -> None:
    server = servers()
    sim.script([{"reply": {"text": "Stored answer."}}, {"reply": {"text": "Streamed one."}}])
    first = _post(server, _body("plain"), "key-plain")
    assert first.status_code == 200, first.text
    streamed = _stream(server, _body("streamy", stream=True), "key-stream")
    sim.assert_script_done()
    server.stop()
    upstream_before = len(sim.requests())
    server.start()
    again = _post(server, _body("plain"), "key-plain")
    assert again.status_code == 200, again.text
    assert again.json() == first.json()  # same id, created, text, usage and cost
    replayed = _stream(server, _body("streamy", stream=True), "key-stream")
    assert replayed == streamed
    assert len(sim.requests()) == upstream_before  # nothing ran again
    # Another body under a used key is refused, also from the database.
    other = _post(server, _body("something else"), "key-plain")
    assert other.status_code == 409, other.text
    assert other.json()["error"]["code"] == "idempotency_key_reused"


def test_a_turn_cut_off_by_a_crash_replays_as_a_failure(
    sim: Simulator, servers: ServerFactory, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    server = servers(
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT", COURIER_WORKSPACE=str(workspace)
    )
    call = {"name": "wait", "arguments": {"seconds": 60}, "id": "w_idem"}
    sim.script([{"reply": {"text": "Waiting.", "tool_calls": [call]}}])
    body = _body("wait then answer")

    def run() -> None:
        with contextlib.suppress(httpx.HTTPError):  # the server dies under us
            _post(server, body, "key-crash")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not (workspace / "wait-started").exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    server.kill()
    thread.join(10)
    server.start()
    before = len(sim.requests())
    resp = _post(server, body, "key-crash")
    assert resp.status_code == 409, resp.text
    assert resp.json()["error"]["code"] == "turn_cancelled"
    assert resp.headers["x-should-retry"] == "false"
    assert len(sim.requests()) == before  # never an empty success, never a rerun
