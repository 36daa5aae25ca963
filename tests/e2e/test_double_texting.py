"""Double-texting over HTTP with a running tool turn: reject, enqueue, interrupt, steer;
and the disconnect policy: a `continue` turn finishes without its client and a reattach
with `after=N` gets exactly the events it missed."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import Server, ServerFactory
from tests.support.sim import Simulator

URL = "/v1/chat/completions"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ws")


@pytest.fixture(scope="module")
def srv(module_servers: ServerFactory, workspace: Path) -> Server:
    return module_servers(
        COURIER_TOOL_PLUGINS="tests.support.slow_tool:WAIT", COURIER_WORKSPACE=str(workspace)
    )


def _wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


def _post(server: Server, text: str, sid: str, **headers: str) -> httpx.Response:
    body = {"model": "courier", "messages": [{"role": "user", "content": text}]}
    return httpx.post(
        f"{server.base_url}{URL}",
        json=body,
        headers=server.headers(**{"X-Session-Id": sid, **headers}),
        timeout=60,
    )


def _turns(server: Server, sid: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{server.base_url}/v1/sessions/{sid}/turns", headers=server.headers())
    data: list[dict[str, Any]] = resp.json()["data"]
    return data


def _rows(server: Server, sid: str) -> list[tuple[str, str | None]]:
    con = sqlite3.connect(server.data_dir / "courier.db")
    try:
        q = "SELECT role, content FROM message WHERE session_id = ? AND active = 1 ORDER BY id"
        return [(r[0], r[1]) for r in con.execute(q, (sid,))]
    finally:
        con.close()


class FirstTurn:
    """A streamed turn calling the WAIT tool, run in a thread; `.sid` once it started."""

    def __init__(self, server: Server, workspace: Path, **headers: str) -> None:
        self.marker = workspace / "wait-started"
        self.marker.unlink(missing_ok=True)
        self.server, self.headers = server, headers
        self.sid = ""
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        body = {
            "model": "courier",
            "stream": True,
            "messages": [{"role": "user", "content": "start waiting"}],
        }
        with httpx.stream(
            "POST",
            f"{self.server.base_url}{URL}",
            json=body,
            headers=self.server.headers(**self.headers),
            timeout=60,
        ) as resp:
            self.sid = resp.headers["x-session-id"]
            self.lines = list(resp.iter_lines())

    def start(self) -> FirstTurn:
        self.thread.start()
        _wait_for(lambda: self.marker.exists() and self.sid)
        return self

    def text(self) -> str:
        self.thread.join(30)
        assert not self.thread.is_alive()
        out = []
        for line in self.lines:
            if line.startswith("data: {"):
                chunk = json.loads(line[6:])
                out += [c["delta"].get("content") or "" for c in chunk.get("choices", [])]
        return "".join(out)


def _waiting(seconds: float) -> dict[str, Any]:
    call = {"name": "wait", "arguments": {"seconds": seconds}, "id": f"w{seconds}"}
    return {"reply": {"text": "Waiting.", "tool_calls": [call]}}


def test_reject_is_409_with_retry_after(srv: Server, sim: Simulator, workspace: Path) -> None:
    sim.script([_waiting(60)])
    first = FirstTurn(srv, workspace).start()
    resp = _post(srv, "me too", first.sid, **{"X-Courier-Busy": "reject"})
    assert resp.status_code == 409, resp.text
    assert resp.json()["error"]["code"] == "session_busy"
    assert resp.headers["retry-after"] == "1"
    httpx.post(f"{srv.base_url}/v1/sessions/{first.sid}/stop", headers=srv.headers())
    first.text()
    assert [t["exit_reason"] for t in _turns(srv, first.sid)] == ["cancelled"]


def test_enqueue_runs_both_in_order(srv: Server, sim: Simulator, workspace: Path) -> None:
    sim.script(
        [
            _waiting(3),
            {"expect": {"last_tool_result_contains": "waited"}, "reply": {"text": "First."}},
            {"expect": {"last_user_contains": "second ask"}, "reply": {"text": "Second."}},
        ]
    )
    first = FirstTurn(srv, workspace).start()
    resp = _post(srv, "second ask", first.sid)  # the chat profile's default: enqueue
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "Second."
    assert first.text() == "Waiting.\n\nFirst."
    sim.assert_script_done()
    turns = _turns(srv, first.sid)
    assert [t["exit_reason"] for t in turns] == ["completed", "completed"]
    assert turns[1]["started_at"] >= turns[0]["ended_at"]  # never two at once
    assert [role for role, _ in _rows(srv, first.sid)] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]


def test_interrupt_stops_the_turn_and_runs_the_new_message(
    srv: Server, sim: Simulator, workspace: Path
) -> None:
    sim.script(
        [
            _waiting(60),
            {"expect": {"last_user_contains": "never mind"}, "reply": {"text": "Okay, stopped."}},
        ]
    )
    first = FirstTurn(srv, workspace).start()
    resp = _post(srv, "never mind", first.sid, **{"X-Courier-Busy": "interrupt"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["message"]["content"] == "Okay, stopped."
    first.text()
    sim.assert_script_done()
    assert [t["exit_reason"] for t in _turns(srv, first.sid)] == ["cancelled", "completed"]
    # A valid transcript: the interrupted call is answered before the new user message.
    upstream = json.loads(sim.requests()[-1]["body"])["messages"]
    shape = [m["role"] for m in upstream if m["role"] != "system"]
    assert shape == ["user", "assistant", "tool", "user"]
    assert "cancelled" in upstream[-2]["content"]


def test_steer_lands_after_the_tool_batch(srv: Server, sim: Simulator, workspace: Path) -> None:
    sim.script(
        [
            _waiting(3),
            {
                "expect": {"last_user_contains": "also say goodbye"},
                "reply": {"text": "Waited, and goodbye."},
            },
        ]
    )
    first = FirstTurn(srv, workspace).start()
    resp = _post(srv, "also say goodbye", first.sid, **{"X-Courier-Busy": "steer"})
    assert resp.status_code == 202, resp.text
    turn_id = resp.json()["turn_id"]
    # The first turn's own client hears the steered answer; the tool was not interrupted.
    assert first.text() == "Waiting.\n\nWaited, and goodbye."
    sim.assert_script_done()
    turns = _turns(srv, first.sid)
    assert [(t["id"], t["exit_reason"]) for t in turns] == [(turn_id, "completed")]
    upstream = json.loads(sim.requests()[-1]["body"])["messages"]
    shape = [(m["role"], m.get("content")) for m in upstream if m["role"] != "system"]
    assert [role for role, _ in shape] == ["user", "assistant", "tool", "user"]
    assert "waited 3" in str(shape[2][1]) and shape[3][1] == "also say goodbye"


def test_bad_busy_header_is_400(srv: Server) -> None:
    resp = _post(srv, "x", "sess_whatever", **{"X-Courier-Busy": "shove"})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == "X-Courier-Busy"
    resp = _post(srv, "x", "sess_whatever", **{"X-Courier-On-Disconnect": "later"})
    assert resp.status_code == 400, resp.text


def test_continue_finishes_without_its_client_and_reattach_gets_the_rest(
    srv: Server, sim: Simulator, workspace: Path
) -> None:
    sim.script(
        [
            _waiting(2),
            {"expect": {"last_tool_result_contains": "waited"}, "reply": {"text": "All done."}},
        ]
    )
    marker = workspace / "wait-started"
    marker.unlink(missing_ok=True)
    body = {"model": "courier", "stream": True, "messages": [{"role": "user", "content": "go"}]}
    headers = srv.headers(**{"X-Courier-On-Disconnect": "continue"})
    with httpx.stream(
        "POST", f"{srv.base_url}{URL}", json=body, headers=headers, timeout=30
    ) as resp:
        sid = resp.headers["x-session-id"]
        for _line in resp.iter_lines():
            if marker.exists():
                break  # hang up mid-tool
    _wait_for(lambda: [t["status"] for t in _turns(srv, sid)] == ["finished"])
    assert [t["exit_reason"] for t in _turns(srv, sid)] == ["completed"]
    sim.assert_script_done()
    assert _rows(srv, sid)[-1] == ("assistant", "All done.")
    events: list[dict[str, Any]] = []
    with httpx.stream(
        "GET", f"{srv.base_url}/v1/sessions/{sid}/events", headers=srv.headers(), timeout=30
    ) as resp:
        events = [json.loads(x[6:]) for x in resp.iter_lines() if x.startswith("data: ")]
    seen = 2  # a client that heard the first two events
    with httpx.stream(
        "GET",
        f"{srv.base_url}/v1/sessions/{sid}/events",
        params={"after": seen},
        headers=srv.headers(),
        timeout=30,
    ) as resp:
        rest = [json.loads(x[6:]) for x in resp.iter_lines() if x.startswith("data: ")]
    assert rest == events[seen:]
    assert rest[-1]["type"] == "finished" and rest[-1]["exit_reason"] == "completed"
