"""Idempotency-Key: a client's retry reattaches to its turn instead of running it twice."""

from __future__ import annotations

import json
import sqlite3
import threading
from typing import Any

import httpx

from tests.support.server import Server
from tests.support.sim import Simulator

BODY: dict[str, Any] = {"model": "courier", "messages": [{"role": "user", "content": "go"}]}
TURN = [
    {"reply": {"tool_calls": [{"name": "list_files", "arguments": {}}]}},
    {"reply": {"text": "Listed once."}},
]


def _post(server: Server, body: dict[str, Any], key: str) -> httpx.Response:
    return httpx.post(
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers=server.headers(**{"Idempotency-Key": key}),
        timeout=30,
    )


def _turns(server: Server) -> list[tuple[str, str]]:
    con = sqlite3.connect(server.data_dir / "courier.db")
    try:
        return list(con.execute("SELECT id, exit_reason FROM turn ORDER BY started_at"))
    finally:
        con.close()


def test_a_retry_gets_the_same_answer_without_a_second_run(server: Server, sim: Simulator) -> None:
    sim.script(TURN)
    first = _post(server, BODY, "retry-1")
    again = _post(server, BODY, "retry-1")
    assert first.status_code == again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert again.json()["choices"] == first.json()["choices"]
    assert again.headers["x-session-id"] == first.headers["x-session-id"]
    sim.assert_script_done()  # the upstream saw exactly one turn's calls
    assert len(sim.requests()) == 2


def test_a_reused_key_with_another_body_is_refused(server: Server, sim: Simulator) -> None:
    sim.script([{"reply": {"text": "one"}}])
    assert _post(server, BODY, "retry-2").status_code == 200
    other = {**BODY, "messages": [{"role": "user", "content": "something else"}]}
    resp = _post(server, other, "retry-2")
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "idempotency_key_reused"
    sim.assert_script_done()


def test_a_dropped_stream_can_reattach_before_the_turn_is_cancelled(
    server: Server, sim: Simulator
) -> None:
    # The upstream is slow to answer; the client gives up before the first content chunk
    # (as a voice cockpit does) and retries with the same key.
    sim.script([{"fault": {"delay_ms": 1500}, "reply": {"text": "worth the wait"}}])
    body = {**BODY, "stream": True}
    started = threading.Event()

    def first_attempt() -> None:
        with httpx.stream(
            "POST",
            f"{server.base_url}/v1/chat/completions",
            json=body,
            headers=server.headers(**{"Idempotency-Key": "voice-1"}),
            timeout=30,
        ) as resp:
            for line in resp.iter_lines():
                if '"role":"assistant"' in line:
                    started.set()
                    return  # hang up before any content

    worker = threading.Thread(target=first_attempt)
    worker.start()
    assert started.wait(10)
    worker.join(10)
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json=body,
        headers=server.headers(**{"Idempotency-Key": "voice-1"}),
        timeout=30,
    ) as resp:
        data = [ln[6:] for ln in resp.iter_lines() if ln.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "worth the wait"
    assert sum("role" in c["choices"][0]["delta"] for c in chunks) == 1
    sim.assert_script_done()
    assert _turns(server)[-1][1] == "completed"


def test_without_a_key_a_dropped_stream_is_cancelled(server: Server, sim: Simulator) -> None:
    sim.script([{"fault": {"delay_ms": 1500}, "reply": {"text": "nobody hears this"}}])
    with httpx.stream(
        "POST",
        f"{server.base_url}/v1/chat/completions",
        json={**BODY, "stream": True},
        headers=server.headers(),
        timeout=30,
    ) as resp:
        assert resp.status_code == 200  # the headers are in; the reply is still delayed
    deadline = 50
    while deadline and _turns(server)[-1][1] is None:
        threading.Event().wait(0.1)
        deadline -= 1
    assert _turns(server)[-1][1] == "cancelled"
